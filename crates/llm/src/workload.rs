//! Requests: readers for the public LLM traces, generators for Llumnix's power-law
//! length mixes and for Poisson or Gamma arrivals, and the rule for requests longer than
//! the model's context.
//!
//! Formats, told apart by their header (or `.jsonl`): the Azure LLM inference trace
//! 2023 (`TIMESTAMP,ContextTokens,GeneratedTokens`), ShareGPT lengths
//! (`num_prefill_tokens,num_decode_tokens,...`, no arrival times), and Mooncake's JSON
//! lines (`timestamp` in ms, `input_length`, `output_length`, `hash_ids`).

use crate::LlmError;
use apiary_model::Rng;
use std::path::Path;

/// The block hashes of a trace's prompts, one run of `hashes` per request
/// ([`Request::prefix`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefixes {
    /// Tokens per hashed block (Mooncake: 512).
    pub block_tokens: u32,
    /// Every request's hashes, back to back.
    pub hashes: Vec<u64>,
}

impl Prefixes {
    /// The hashes of `req`'s full prompt blocks (a block cut by clipping or a partial
    /// last block is never reused).
    pub fn of(&self, req: &Request) -> &[u64] {
        let (start, len) = req.prefix;
        let full = req.input / self.block_tokens.max(1);
        let start = start as usize;
        let end = start + len.min(full) as usize;
        self.hashes.get(start..end).unwrap_or(&[])
    }
}

/// Simulated time in microseconds.
pub type Micros = u64;
/// One second in [`Micros`].
pub const SEC: Micros = 1_000_000;

/// One inference request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Arrival, µs from the trace's start.
    pub arrival: Micros,
    /// Prompt tokens.
    pub input: u32,
    /// Tokens to generate (at least 1).
    pub output: u32,
    /// 0 is normal; higher is served first (Llumnix's high priority is 1).
    pub priority: u8,
    /// Its prompt's block hashes in the trace's [`Prefixes`]: (first, count).
    pub prefix: (u32, u32),
}

/// A trace as read: requests sorted by arrival, and whether the file had times.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Requests, by arrival.
    pub requests: Vec<Request>,
    /// Whether arrivals came from the file (ShareGPT has none).
    pub timed: bool,
    /// Mooncake's prefix blocks (512 tokens each) referenced more than once in the
    /// trace: what a prefix cache could reuse at most.
    pub repeated_prefix_blocks: u64,
    /// The prompts' block hashes (empty for traces without them).
    pub prefixes: Prefixes,
}

fn trace_err(path: &Path, line: usize, field: &str, message: impl Into<String>) -> LlmError {
    LlmError::Trace {
        path: path.display().to_string(),
        line,
        field: field.to_string(),
        message: message.into(),
    }
}

/// A request's prompt or output length: at least one token (a request of none would
/// hold no KV cache, or never produce its first token).
fn tokens(path: &Path, line: usize, field: &str, n: u64) -> Result<u32, LlmError> {
    if n == 0 {
        return Err(trace_err(
            path,
            line,
            field,
            "0: a request has at least one token",
        ));
    }
    u32::try_from(n).map_err(|_| trace_err(path, line, field, format!("{n} is too large")))
}

fn count(path: &Path, line: usize, field: &str, v: &str) -> Result<u32, LlmError> {
    let t = v.trim();
    let n: u64 = t.parse().map_err(|_| {
        trace_err(
            path,
            line,
            field,
            format!("'{t}' is not a non-negative integer"),
        )
    })?;
    tokens(path, line, field, n)
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]` as µs since 1970.
fn parse_timestamp(s: &str) -> Option<i64> {
    let (date, time) = s.trim().split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    if d.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&da) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    if t.next().is_some()
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&se)
    {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut us = 0i64;
    for (i, b) in frac.bytes().take(6).enumerate() {
        us += i64::from(b - b'0') * 10i64.pow(5 - i as u32);
    }
    let day = days_from_civil(y, mo, da);
    Some(((day * 86_400 + h * 3600 + mi * 60 + se) * 1_000_000) + us)
}

fn sort_and_check(path: &Path, mut requests: Vec<Request>) -> Result<Vec<Request>, LlmError> {
    if requests.is_empty() {
        return Err(trace_err(path, 1, "", "the trace has no requests"));
    }
    // Stable: equal arrivals keep file order.
    requests.sort_by_key(|r| r.arrival);
    Ok(requests)
}

fn read_azure(path: &Path, text: &str) -> Result<Trace, LlmError> {
    let mut out = Vec::new();
    let mut t0: Option<i64> = None;
    for (i, line) in text.lines().enumerate().skip(1) {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() != 3 {
            return Err(trace_err(
                path,
                ln,
                "",
                format!("expected 3 columns, found {}", cols.len()),
            ));
        }
        let ts = parse_timestamp(cols[0]).ok_or_else(|| {
            trace_err(
                path,
                ln,
                "TIMESTAMP",
                format!("'{}' is not YYYY-MM-DD HH:MM:SS.fffffff", cols[0].trim()),
            )
        })?;
        let base = *t0.get_or_insert(ts);
        let rel = ts - base;
        if rel < 0 {
            return Err(trace_err(
                path,
                ln,
                "TIMESTAMP",
                "earlier than the first row (rows must be sorted)",
            ));
        }
        out.push(Request {
            arrival: rel as Micros,
            input: count(path, ln, "ContextTokens", cols[1])?,
            output: count(path, ln, "GeneratedTokens", cols[2])?,
            priority: 0,
            prefix: (0, 0),
        });
    }
    Ok(Trace {
        requests: sort_and_check(path, out)?,
        timed: true,
        repeated_prefix_blocks: 0,
        prefixes: Prefixes::default(),
    })
}

fn read_sharegpt(path: &Path, text: &str) -> Result<Trace, LlmError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() < 2 {
            return Err(trace_err(
                path,
                ln,
                "",
                format!("expected at least 2 columns, found {}", cols.len()),
            ));
        }
        out.push(Request {
            arrival: 0,
            input: count(path, ln, "num_prefill_tokens", cols[0])?,
            output: count(path, ln, "num_decode_tokens", cols[1])?,
            priority: 0,
            prefix: (0, 0),
        });
    }
    Ok(Trace {
        requests: sort_and_check(path, out)?,
        timed: false,
        repeated_prefix_blocks: 0,
        prefixes: Prefixes::default(),
    })
}

/// Tokens per block of Mooncake's `hash_ids`.
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;

#[derive(serde::Deserialize)]
struct MooncakeRow {
    timestamp: serde_json::Value,
    input_length: serde_json::Value,
    output_length: serde_json::Value,
    #[serde(default)]
    hash_ids: Vec<serde_json::Value>,
}

fn json_count(path: &Path, ln: usize, field: &str, v: &serde_json::Value) -> Result<u64, LlmError> {
    v.as_u64().ok_or_else(|| {
        trace_err(
            path,
            ln,
            field,
            format!("{v} is not a non-negative integer"),
        )
    })
}

fn read_mooncake(path: &Path, text: &str) -> Result<Trace, LlmError> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeMap::<u64, u32>::new();
    let mut hashes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let row: MooncakeRow = serde_json::from_str(line).map_err(|e| {
            let field = e.to_string();
            let field = field.split('`').nth(1).unwrap_or("").to_string();
            trace_err(path, ln, &field, format!("not a Mooncake trace row: {e}"))
        })?;
        let ms = json_count(path, ln, "timestamp", &row.timestamp)?;
        if ms > apiary_model::time::MAX_INPUT {
            return Err(trace_err(
                path,
                ln,
                "timestamp",
                format!("{ms} ms is beyond 10^15"),
            ));
        }
        let input = json_count(path, ln, "input_length", &row.input_length)?;
        let output = json_count(path, ln, "output_length", &row.output_length)?;
        let first = u32::try_from(hashes.len())
            .map_err(|_| trace_err(path, ln, "hash_ids", "more than 2^32 block hashes in all"))?;
        for h in &row.hash_ids {
            let h = json_count(path, ln, "hash_ids", h)?;
            *seen.entry(h).or_default() += 1;
            hashes.push(h);
        }
        let input = tokens(path, ln, "input_length", input)?;
        // Mooncake names a prompt's blocks of 512 tokens, the last one partial.
        let blocks = input.div_ceil(MOONCAKE_BLOCK_TOKENS) as usize;
        if !row.hash_ids.is_empty() && row.hash_ids.len() != blocks {
            return Err(trace_err(
                path,
                ln,
                "hash_ids",
                format!(
                    "{} block hashes for a prompt of {input} tokens, which has {blocks} blocks of {MOONCAKE_BLOCK_TOKENS}",
                    row.hash_ids.len()
                ),
            ));
        }
        out.push(Request {
            arrival: ms * 1000,
            input,
            output: tokens(path, ln, "output_length", output)?,
            priority: 0,
            prefix: (first, row.hash_ids.len() as u32),
        });
    }
    let repeated = seen
        .values()
        .filter(|&&c| c > 1)
        .map(|&c| u64::from(c - 1))
        .sum();
    Ok(Trace {
        requests: sort_and_check(path, out)?,
        timed: true,
        repeated_prefix_blocks: repeated,
        prefixes: Prefixes {
            block_tokens: MOONCAKE_BLOCK_TOKENS,
            hashes,
        },
    })
}

/// Reads a trace file in any of the supported formats.
pub fn read_trace(path: &Path) -> Result<Trace, LlmError> {
    let text = std::fs::read_to_string(path).map_err(|source| LlmError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_trace(path, &text)
}

/// Parses a trace's text; `path` names it in errors and tells JSON lines by extension.
pub fn parse_trace(path: &Path, text: &str) -> Result<Trace, LlmError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let header = text.lines().next().unwrap_or("").trim();
    if path.extension().is_some_and(|e| e == "jsonl") || header.starts_with('{') {
        return read_mooncake(path, text);
    }
    let first = header.split(',').next().unwrap_or("").trim();
    match first {
        "TIMESTAMP" => read_azure(path, text),
        "num_prefill_tokens" => read_sharegpt(path, text),
        _ => Err(trace_err(
            path,
            1,
            first,
            "unknown header: expected the Azure LLM trace (TIMESTAMP,ContextTokens,GeneratedTokens), \
             ShareGPT lengths (num_prefill_tokens,num_decode_tokens,...) or Mooncake JSON lines",
        )),
    }
}

/// The exponent Llumnix's benchmark gives its Zipf rank distribution for each mean
/// (`benchmark_serving.py`): steeper for shorter means.
pub fn power_law_exponent(mean: u32) -> Option<f64> {
    match mean {
        128 => Some(2.0),
        256 => Some(1.5),
        512 => Some(1.15),
        1024 => Some(1.0005),
        _ => None,
    }
}

/// Longest length Llumnix's power-law generator emits.
pub const POWER_LAW_CAP: u32 = 6144;

/// `n` lengths with mean `mean` from Llumnix's power-law generator: Zipf ranks over
/// `1..=2 mean - 1` with the exponent of [`power_law_exponent`], scaled so the sample
/// mean is `mean`, rounded up and capped at 6,144.
pub fn power_law(mean: u32, n: usize, rng: &mut Rng) -> Result<Vec<u32>, LlmError> {
    let alpha = power_law_exponent(mean).ok_or_else(|| LlmError::Invalid {
        what: "power-law mean",
        message: format!("{mean}: Llumnix's generator defines 128 (S), 256 (M), 512 (L) and 1024"),
    })?;
    let top = (2 * mean - 1).min(POWER_LAW_CAP) as usize;
    let mut cdf = Vec::with_capacity(top);
    let mut acc = 0.0;
    for k in 1..=top {
        acc += (k as f64).powf(-alpha);
        cdf.push(acc);
    }
    let ranks: Vec<f64> = (0..n)
        .map(|_| {
            let u = rng.f64() * acc;
            (cdf.partition_point(|&c| c < u) + 1) as f64
        })
        .collect();
    let sample_mean = ranks.iter().sum::<f64>() / n.max(1) as f64;
    let scale = f64::from(mean) / sample_mean;
    Ok(ranks
        .iter()
        .map(|r| ((r * scale).ceil() as u32).clamp(1, POWER_LAW_CAP))
        .collect())
}

/// inference-perf's `shared_prefix` workload: `groups` system prompts of `system`
/// tokens, each shared by `users` prompts that add a question of `question` tokens,
/// every answer `output` tokens (`ignore_eos`). As inference-perf builds it (without
/// `enable_multi_turn_chat`), the `groups * users` prompts are fixed and sent in turn,
/// so request `i` sends prompt `i mod (groups * users)` again. Prompts are named by
/// 16-token block hashes (vLLM's block), so under `--prefix-cache` a prompt reuses its
/// group's system prompt the first time and its whole self after that. All arrive at 0
/// (give them times with [`set_arrivals`]).
pub fn shared_prefix_requests(shape: SharedPrefix, n: usize) -> Result<Trace, LlmError> {
    let SharedPrefix {
        groups,
        users,
        system,
        question,
        output,
    } = shape;
    for (what, v) in [("groups", groups), ("users", users), ("output", output)] {
        if v == 0 {
            return Err(LlmError::Invalid {
                what: "trace",
                message: format!("shared-prefix: {what} must be at least 1"),
            });
        }
    }
    let input = system
        .checked_add(question)
        .filter(|&i| (1..=SHARED_PREFIX_MAX_PROMPT).contains(&i))
        .ok_or_else(|| LlmError::Invalid {
            what: "trace",
            message: format!(
                "shared-prefix: a prompt of {system} + {question} tokens: expected 1 to {SHARED_PREFIX_MAX_PROMPT} in all"
            ),
        })?;
    let shared = u64::from(system / SHARED_PREFIX_BLOCK);
    let own = u64::from(input / SHARED_PREFIX_BLOCK) - shared;
    let prompts = u64::from(groups) * u64::from(users);
    let blocks = (shared + own) as usize;
    if n.saturating_mul(blocks) > SHARED_PREFIX_MAX_HASHES {
        return Err(LlmError::Invalid {
            what: "trace",
            message: format!(
                "shared-prefix: {n} requests of {blocks} blocks each name more than {SHARED_PREFIX_MAX_HASHES} blocks in all: ask for fewer requests (-n) or shorter prompts"
            ),
        });
    }
    let mut hashes = Vec::with_capacity(n.saturating_mul(blocks).min(1 << 24));
    let mut requests = Vec::with_capacity(n.min(1 << 24));
    for i in 0..n as u64 {
        let p = i % prompts;
        let group = p / u64::from(users);
        let first = hashes.len() as u32;
        // Group g's system blocks are hashes g * shared ..; prompt p's own blocks
        // follow every group's.
        hashes.extend(group * shared..(group + 1) * shared);
        let mine = u64::from(groups) * shared + p * own;
        hashes.extend(mine..mine + own);
        requests.push(Request {
            arrival: 0,
            input,
            output,
            priority: 0,
            prefix: (first, hashes.len() as u32 - first),
        });
    }
    // Every block named before: all but the first use of each.
    let distinct = (n as u64).min(prompts) * own
        + (n as u64).div_ceil(u64::from(users)).min(u64::from(groups)) * shared;
    let repeated = (n as u64 * (shared + own)).saturating_sub(distinct);
    Ok(Trace {
        requests,
        timed: false,
        repeated_prefix_blocks: repeated,
        prefixes: Prefixes {
            block_tokens: SHARED_PREFIX_BLOCK,
            hashes,
        },
    })
}

/// The longest prompt `shared-prefix` builds: ten million tokens, past any model's
/// context, so that the block hashes stay in memory.
const SHARED_PREFIX_MAX_PROMPT: u32 = 10_000_000;

/// The most block hashes `shared-prefix` names in all (a gigabyte of them), which also
/// keeps every request's first hash within `u32`.
const SHARED_PREFIX_MAX_HASHES: usize = 1 << 27;

/// vLLM's KV block, the unit its prefix cache hashes.
const SHARED_PREFIX_BLOCK: u32 = 16;

/// The shape of inference-perf's `shared_prefix` workload (its config's names:
/// `num_groups`, `num_prompts_per_group`, `system_prompt_len`, `question_len`,
/// `output_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedPrefix {
    /// System prompts.
    pub groups: u32,
    /// Users per system prompt.
    pub users: u32,
    /// Tokens of a system prompt.
    pub system: u32,
    /// Tokens of a question.
    pub question: u32,
    /// Tokens of an answer.
    pub output: u32,
}

impl SharedPrefix {
    /// Parses `G:U:SYSTEM:QUESTION:OUTPUT`.
    pub fn parse(s: &str) -> Option<SharedPrefix> {
        let v: Vec<u32> = s
            .split(':')
            .map(|p| p.trim().parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [groups, users, system, question, output] => Some(SharedPrefix {
                groups,
                users,
                system,
                question,
                output,
            }),
            _ => None,
        }
    }
}

/// Llumnix's length mixes by letter: short, medium, long.
pub fn mix_mean(letter: &str) -> Option<u32> {
    match letter {
        "S" | "s" => Some(128),
        "M" | "m" => Some(256),
        "L" | "l" => Some(512),
        _ => letter
            .parse()
            .ok()
            .filter(|m| power_law_exponent(*m).is_some()),
    }
}

/// `n` requests with power-law inputs and outputs of means `input` and `output`, all
/// arriving at 0 (give them times with [`set_arrivals`]).
pub fn power_law_requests(
    input: u32,
    output: u32,
    n: usize,
    seed: u64,
) -> Result<Vec<Request>, LlmError> {
    let ins = power_law(input, n, &mut Rng::stream(seed, "llm-input-lengths"))?;
    let outs = power_law(output, n, &mut Rng::stream(seed, "llm-output-lengths"))?;
    Ok(ins
        .into_iter()
        .zip(outs)
        .map(|(input, output)| Request {
            arrival: 0,
            input,
            output,
            priority: 0,
            prefix: (0, 0),
        })
        .collect())
}

/// A Gamma(shape, 1) draw (Marsaglia and Tsang; shape < 1 boosted).
fn gamma(rng: &mut Rng, shape: f64) -> f64 {
    if shape < 1.0 {
        let u = rng.f64().max(f64::MIN_POSITIVE);
        return gamma(rng, shape + 1.0) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = rng.normal();
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = rng.f64();
        if u < 1.0 - 0.0331 * x.powi(4)
            || u.max(f64::MIN_POSITIVE).ln() < 0.5 * x * x + d * (1.0 - v + v.ln())
        {
            return d * v;
        }
    }
}

/// Gives the requests new arrival times: gaps with mean `1 / rate` seconds, exponential
/// (Poisson arrivals) when `cv` is 1, constant when it is 0, else Gamma with shape
/// `1 / cv²` (Llumnix's bursty traces). The requests keep their order.
pub fn set_arrivals(
    requests: &mut [Request],
    rate: f64,
    cv: f64,
    seed: u64,
) -> Result<(), LlmError> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(LlmError::Invalid {
            what: "rate",
            message: format!("{rate}: expected requests per second above 0"),
        });
    }
    if !(cv.is_finite() && cv >= 0.0) {
        return Err(LlmError::Invalid {
            what: "cv",
            message: format!("{cv}: expected a coefficient of variation of 0 or more"),
        });
    }
    let mut rng = Rng::stream(seed, "llm-arrivals");
    let mean_gap = 1.0 / rate;
    let mut t = 0.0f64;
    for r in requests.iter_mut() {
        r.arrival = (t * 1e6).round() as Micros;
        let gap = if cv == 0.0 {
            // A constant rate, as inference-perf's `constant` load sends.
            mean_gap
        } else if cv == 1.0 {
            rng.exp(mean_gap)
        } else {
            let shape = 1.0 / (cv * cv);
            gamma(&mut rng, shape) * mean_gap * cv * cv
        };
        t += gap;
    }
    Ok(())
}

/// Marks each request high-priority (priority 1) with probability `share`, from a seeded
/// stream of its own so that the lengths and arrivals stay those of the same seed
/// without priorities (Llumnix §6.5 draws 10 % of requests at random).
pub fn set_priorities(requests: &mut [Request], share: f64, seed: u64) -> Result<(), LlmError> {
    if !(0.0..=1.0).contains(&share) {
        return Err(LlmError::Invalid {
            what: "high-priority",
            message: format!("{share}: expected a share between 0 and 1"),
        });
    }
    let mut rng = Rng::stream(seed, "llm-priorities");
    for r in requests.iter_mut() {
        r.priority = u8::from(rng.f64() < share);
    }
    Ok(())
}

/// What to do with a request longer than the context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClipRule {
    /// Keep the prompt's last `max_len - 1` tokens and stop generating at `max_len`, as
    /// a vLLM client that truncates prompts sees.
    Clip,
    /// Refuse it (vLLM rejects a prompt over `max_model_len`); it is reported, not run.
    Refuse,
}

/// Requests the context rule changed or refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clipped {
    /// Shortened.
    pub clipped: u64,
    /// Refused: not run.
    pub refused: u64,
}

/// Applies `rule` for a context of `max_len` tokens; returns the count of requests it
/// changed and marks refused ones in the returned mask.
pub fn clip(requests: &mut [Request], max_len: u32, rule: ClipRule) -> (Clipped, Vec<bool>) {
    let mut stats = Clipped::default();
    let mut refused = vec![false; requests.len()];
    let max_len = max_len.max(2);
    for (r, refuse) in requests.iter_mut().zip(refused.iter_mut()) {
        r.output = r.output.max(1);
        r.input = r.input.max(1);
        if u64::from(r.input) + u64::from(r.output) <= u64::from(max_len) {
            continue;
        }
        match rule {
            ClipRule::Clip => {
                r.input = r.input.min(max_len - 1);
                r.output = r.output.min(max_len - r.input);
                stats.clipped += 1;
            }
            ClipRule::Refuse => {
                *refuse = true;
                stats.refused += 1;
            }
        }
    }
    (stats, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefix_shares_system_blocks_and_repeats_prompts() {
        let shape = SharedPrefix::parse("2:3:40:30:5").unwrap();
        assert_eq!(
            shape,
            SharedPrefix {
                groups: 2,
                users: 3,
                system: 40,
                question: 30,
                output: 5
            }
        );
        let t = shared_prefix_requests(shape, 8).unwrap();
        assert_eq!(t.prefixes.block_tokens, 16);
        // 70 tokens: 4 full blocks, 2 of them the system prompt's (40 / 16).
        let of = |i: usize| t.prefixes.of(&t.requests[i]).to_vec();
        assert!(t.requests.iter().all(|r| r.input == 70 && r.output == 5));
        assert_eq!(of(0), [0, 1, 4, 5]);
        assert_eq!(of(1), [0, 1, 6, 7]);
        assert_eq!(of(3), [2, 3, 10, 11]);
        assert_eq!(of(5), [2, 3, 14, 15]);
        // Prompts 0 and 1 again.
        assert_eq!(of(6), of(0));
        assert_eq!(of(7), of(1));
        // 32 blocks named, 16 distinct: 4 system blocks, 6 prompts' 2 own each.
        assert_eq!(t.repeated_prefix_blocks, 32 - 16);
        assert!(SharedPrefix::parse("2:3:40:30").is_none());
        assert!(SharedPrefix::parse("2:3:40:x:5").is_none());
        for bad in [
            "0:3:40:30:5",
            "2:0:40:30:5",
            "2:3:0:0:5",
            "2:3:40:30:0",
            "1:1:9999999:2:1",
        ] {
            let err = shared_prefix_requests(SharedPrefix::parse(bad).unwrap(), 3).unwrap_err();
            assert!(err.to_string().contains("shared-prefix"), "{bad}: {err}");
        }
        // 2^20 prompts of 256 blocks: 2^28 hashes, refused before any is made.
        let many = shared_prefix_requests(SharedPrefix::parse("1:1:4000:96:1").unwrap(), 1 << 20);
        assert!(many.unwrap_err().to_string().contains("-n"));
    }

    #[test]
    fn cv_zero_sends_at_a_constant_rate() {
        let mut r = power_law_requests(128, 128, 5, 1).unwrap();
        set_arrivals(&mut r, 4.0, 0.0, 1).unwrap();
        let t: Vec<Micros> = r.iter().map(|r| r.arrival).collect();
        assert_eq!(t, [0, 250_000, 500_000, 750_000, 1_000_000]);
        assert!(set_arrivals(&mut r, 4.0, -0.1, 1).is_err());
    }

    fn write(name: &str, body: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("apiary-llm-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn azure_times_are_relative_microseconds() {
        let p = write(
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 23:59:59.5000000,10,2\n2023-11-17 00:00:00.2500001,20,3\n",
        );
        let t = read_trace(&p).unwrap();
        assert!(t.timed);
        assert_eq!(t.requests[1].arrival, 750_000);
        assert_eq!((t.requests[1].input, t.requests[1].output), (20, 3));
    }

    #[test]
    fn bad_rows_name_file_line_and_field() {
        let p = write(
            "b.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,374,44\n2023-11-16 18:15:47.1,abc,44\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(
            e.contains("b.csv") && e.contains("line 3") && e.contains("ContextTokens"),
            "{e}"
        );
        let p = write(
            "c.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:15:46.1,374,44\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("TIMESTAMP"), "{e}");
        let p = write(
            "d.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 1}\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("timestamp"), "{e}");
        let p = write("e.jsonl", "{\"timestamp\": 0, \"output_length\": 1}\n");
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("input_length"), "{e}");
        let p = write("f.csv", "a,b\n1,2\n");
        assert!(
            read_trace(&p)
                .unwrap_err()
                .to_string()
                .contains("unknown header")
        );
    }

    #[test]
    fn empty_requests_and_wrong_block_counts_are_refused() {
        let p = write(
            "z.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,0,12\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("ContextTokens") && e.contains("at least one token"),
            "{e}"
        );
        let p = write(
            "z.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 0, \"hash_ids\": [1]}\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("output_length"), "{e}");
        // 1,025 tokens are three blocks of 512, the last of one token.
        let p = write(
            "h.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 3, \"hash_ids\": [0, 1]}\n",
        );
        let e = read_trace(&p).unwrap_err().to_string();
        assert!(
            e.contains("line 1")
                && e.contains("hash_ids")
                && e.contains("2 block hashes")
                && e.contains("3 blocks"),
            "{e}"
        );
    }

    #[test]
    fn mooncake_counts_repeated_prefix_blocks() {
        let p = write(
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [0, 1]}\n{\"timestamp\": 5, \"input_length\": 1500, \"output_length\": 2, \"hash_ids\": [0, 1, 2]}\n",
        );
        let t = read_trace(&p).unwrap();
        assert_eq!(t.requests[1].arrival, 5_000);
        assert_eq!(t.repeated_prefix_blocks, 2);
    }

    #[test]
    fn power_law_mixes_have_llumnixs_means_and_skew() {
        for (mean, p50) in [(128u32, 38u32), (256, 32), (512, 55)] {
            let v = power_law(mean, 20_000, &mut Rng::new(7)).unwrap();
            let m = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
            assert!(
                (m - f64::from(mean)).abs() / f64::from(mean) < 0.02,
                "{mean}: {m}"
            );
            let mut s = v.clone();
            s.sort_unstable();
            let median = s[s.len() / 2];
            // Table 1 of the paper gives the P50; the rank-1 mass sets it.
            assert!(
                median.abs_diff(p50) * 3 <= p50,
                "{mean}: p50 {median} vs {p50}"
            );
            assert!(*s.last().unwrap() <= POWER_LAW_CAP);
        }
        assert!(power_law(100, 10, &mut Rng::new(1)).is_err());
    }

    #[test]
    fn gamma_arrivals_have_the_asked_rate_and_cv() {
        for cv in [1.0, 0.5, 4.0] {
            let mut r = vec![
                Request {
                    arrival: 0,
                    input: 1,
                    output: 1,
                    priority: 0,
                    prefix: (0, 0),
                };
                50_001
            ];
            set_arrivals(&mut r, 2.0, cv, 3).unwrap();
            let gaps: Vec<f64> = r
                .windows(2)
                .map(|w| (w[1].arrival - w[0].arrival) as f64 / 1e6)
                .collect();
            let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64;
            assert!((m - 0.5).abs() < 0.5 * 0.03, "cv {cv}: mean gap {m}");
            assert!(
                (var.sqrt() / m - cv).abs() < cv * 0.08,
                "cv {cv}: {}",
                var.sqrt() / m
            );
        }
    }

    #[test]
    fn a_share_of_requests_is_high_priority_without_moving_the_rest() {
        let mut reqs = power_law_requests(256, 256, 20_000, 3).unwrap();
        let before = reqs.clone();
        set_priorities(&mut reqs, 0.1, 3).unwrap();
        let high = reqs.iter().filter(|r| r.priority == 1).count() as f64 / 20_000.0;
        assert!((high - 0.1).abs() < 0.01, "{high}");
        assert!(
            reqs.iter()
                .zip(&before)
                .all(|(a, b)| (a.input, a.output) == (b.input, b.output))
        );
        assert!(set_priorities(&mut reqs, 1.5, 3).is_err());
    }

    #[test]
    fn the_context_rule_clips_or_refuses() {
        let mut r = vec![
            Request {
                arrival: 0,
                input: 3000,
                output: 100,
                priority: 0,
                prefix: (0, 0),
            },
            Request {
                arrival: 0,
                input: 100,
                output: 100,
                priority: 0,
                prefix: (0, 0),
            },
        ];
        let (s, refused) = clip(&mut r.clone(), 2048, ClipRule::Refuse);
        assert_eq!((s.refused, refused), (1, vec![true, false]));
        let (s, _) = clip(&mut r, 2048, ClipRule::Clip);
        assert_eq!(s.clipped, 1);
        assert_eq!((r[0].input, r[0].output), (2047, 1));
    }
}

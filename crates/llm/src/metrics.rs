//! What a serving run is judged by (§6 of the note): time to first token (TTFT, which
//! Llumnix calls prefill latency), time per output token (TPOT, its decode latency),
//! end-to-end and normalised latency, SLO attainment, preemptions and their loss,
//! migrations and their downtime, instances, GPU utilisation and throughput.

use crate::engine::{LlmOutcome, PrefixStats};
use crate::replica::{Phase, Req};
use crate::workload::Clipped;

/// Latency targets a request meets or misses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    /// TTFT bound, seconds.
    pub ttft_s: f64,
    /// TPOT bound, seconds.
    pub tpot_s: f64,
}

impl Default for Slo {
    /// Vidur-Search's capacity targets: TTFT under 2 s, time between tokens under 200 ms.
    fn default() -> Self {
        Slo {
            ttft_s: 2.0,
            tpot_s: 0.2,
        }
    }
}

/// Mean and percentiles of one latency, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Dist {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The value at nearest rank `ceil(p n)` of `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).max(1) - 1;
    sorted[i.min(sorted.len() - 1)]
}

impl Dist {
    /// Of `v` (sorted in place).
    pub fn of(v: &mut [f64]) -> Dist {
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        Dist {
            mean: v.iter().sum::<f64>() / n,
            p50: percentile(v, 0.5),
            p90: percentile(v, 0.9),
            p99: percentile(v, 0.99),
        }
    }
}

/// The latency figures of one class of requests (a priority, a service).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Requests completed.
    pub requests: u64,
    /// Time to first token.
    pub ttft: Dist,
    /// Time per output token.
    pub tpot: Dist,
    /// Arrival to last token.
    pub e2e: Dist,
    /// End-to-end latency over output tokens.
    pub normalised: Dist,
    /// Share meeting both SLO bounds.
    pub slo_attainment: f64,
}

impl Group {
    /// The figures of the finished requests `done`, against `slo`.
    pub fn of<'a>(name: &str, done: impl Iterator<Item = &'a Req>, slo: Slo) -> Group {
        let (mut ttft, mut tpot, mut e2e, mut norm) = (vec![], vec![], vec![], vec![]);
        let mut met = 0usize;
        for q in done {
            ttft.push(q.ttft_s());
            if let Some(t) = q.tpot_s() {
                tpot.push(t);
            }
            e2e.push(q.e2e_s());
            norm.push(q.e2e_s() / f64::from(q.req.output));
            if q.ttft_s() <= slo.ttft_s && q.tpot_s().unwrap_or(0.0) <= slo.tpot_s {
                met += 1;
            }
        }
        Group {
            name: name.to_string(),
            requests: ttft.len() as u64,
            slo_attainment: met as f64 / ttft.len().max(1) as f64,
            ttft: Dist::of(&mut ttft),
            tpot: Dist::of(&mut tpot),
            e2e: Dist::of(&mut e2e),
            normalised: Dist::of(&mut norm),
        }
    }

    fn put_json(&self, m: &mut serde_json::Map<String, serde_json::Value>) {
        for (name, d) in [
            ("ttft", &self.ttft),
            ("tpot", &self.tpot),
            ("e2e", &self.e2e),
            ("normalised", &self.normalised),
        ] {
            m.insert(format!("{name}_mean_s"), d.mean.into());
            m.insert(format!("{name}_p50_s"), d.p50.into());
            m.insert(format!("{name}_p90_s"), d.p90.into());
            m.insert(format!("{name}_p99_s"), d.p99.into());
        }
        m.insert("slo_attainment".into(), self.slo_attainment.into());
    }
}

/// The figures a sweep can collect from an LLM run (`metrics = [...]`): name, meaning.
pub const METRICS: &[(&str, &str)] = &[
    ("ttft_mean_s", "mean time to first token, s"),
    ("ttft_p50_s", "median time to first token, s"),
    ("ttft_p99_s", "99th-percentile time to first token, s"),
    ("tpot_mean_s", "mean time per output token, s"),
    ("tpot_p99_s", "99th-percentile time per output token, s"),
    ("e2e_mean_s", "mean arrival to last token, s"),
    ("e2e_p99_s", "99th-percentile arrival to last token, s"),
    (
        "normalised_mean_s",
        "mean end-to-end latency per output token, s",
    ),
    ("slo_attainment", "share of requests within both SLO bounds"),
    ("gpu_util", "share of instance time spent in iterations"),
    ("tokens_per_s", "output tokens per second"),
    ("preemptions", "preemptions"),
    (
        "preemption_loss_mean_s",
        "mean time lost to preemption per request, s",
    ),
    ("swap_outs", "requests swapped to host memory"),
    ("migrations", "migrations completed"),
    ("aborted_migrations", "migrations abandoned"),
    (
        "migration_downtime_mean_s",
        "mean downtime of a completed migration, s",
    ),
];

/// A run's figures.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct LlmSummary {
    /// Policy name.
    pub policy: String,
    /// Requests completed.
    pub requests: u64,
    /// Requests shortened by the context rule.
    pub clipped: u64,
    /// Requests not run (context rule, or longer than an instance's KV cache).
    pub refused: u64,
    /// Time to first token.
    pub ttft: Dist,
    /// Time per output token after the first (requests of two or more tokens).
    pub tpot: Dist,
    /// Arrival to last token.
    pub e2e: Dist,
    /// End-to-end latency over output tokens.
    pub normalised: Dist,
    /// Share of requests meeting both SLO bounds.
    pub slo_attainment: f64,
    /// The bounds.
    pub slo_ttft_s: f64,
    /// The bounds.
    pub slo_tpot_s: f64,
    /// Multi-service runs: the SLO is this many times a request's latency alone on an
    /// idle group (the TTFT and TPOT bounds are then 0).
    pub slo_scale: f64,
    /// Preemptions.
    pub preemptions: u64,
    /// Requests preempted at least once.
    pub preempted_requests: u64,
    /// Mean preemption loss per request, seconds.
    pub preemption_loss_mean_s: f64,
    /// Swapping to host memory (with swap space).
    pub swaps: crate::replica::Swaps,
    /// Disaggregated serving: KV caches sent from prefill to decode instances.
    pub kv_transfers: u64,
    /// Their mean copy time, seconds.
    pub kv_transfer_mean_s: f64,
    /// Their mean wait for a free link before the copy, seconds.
    pub kv_wait_mean_s: f64,
    /// Migrations completed.
    pub migrations: u64,
    /// Migrations abandoned.
    pub aborted_migrations: u64,
    /// Of them, by reason (`destination_full`, `finished`, `preempted`, `max_stages`).
    pub aborts: Vec<(&'static str, u64)>,
    /// KV blocks the abandoned migrations had copied, for nothing.
    pub aborted_blocks: u64,
    /// Link seconds the abandoned migrations spent, for nothing.
    pub aborted_secs: f64,
    /// Mean downtime of a completed migration, seconds.
    pub migration_downtime_mean_s: f64,
    /// Instances provisioned on average over the run.
    pub instances_mean: f64,
    /// Share of provisioned instance time spent in iterations.
    pub gpu_util: f64,
    /// Output tokens per second.
    pub tokens_per_s: f64,
    /// Input and output tokens per second.
    pub total_tokens_per_s: f64,
    /// First arrival to last completion, seconds.
    pub span_s: f64,
    /// Highest share of peak FLOP/s any instance sustained while busy.
    pub max_flop_share: f64,
    /// Highest share of peak bandwidth any instance sustained while busy.
    pub max_bw_share: f64,
    /// Engine iterations.
    pub iterations: u64,
    /// Per class: `high` and `normal` priority when any request is high-priority.
    pub groups: Vec<Group>,
    /// With prefix caching: what the caches served.
    #[serde(skip)]
    pub prefix: Option<PrefixStats>,
}

impl PrefixStats {
    /// Share of prompt tokens served from the cache.
    pub fn hit_rate(&self) -> f64 {
        self.hit_tokens as f64 / self.prompt_tokens.max(1) as f64
    }
}

impl LlmSummary {
    /// The figures of `o`.
    pub fn of(policy: &str, o: &LlmOutcome, clipped: Clipped, slo: Slo) -> LlmSummary {
        let done: Vec<&Req> = o
            .requests
            .iter()
            .filter(|q| q.phase == Phase::Done)
            .collect();
        let refused = o
            .requests
            .iter()
            .filter(|q| q.phase == Phase::Refused)
            .count() as u64;
        let secs = |us: u64| us as f64 / 1e6;
        let all = Group::of("all", done.iter().copied(), slo);
        let mut groups = Vec::new();
        if done.iter().any(|q| q.req.priority > 0) {
            let high = done.iter().copied().filter(|q| q.req.priority > 0);
            groups.push(Group::of("high", high, slo));
            let normal = done.iter().copied().filter(|q| q.req.priority == 0);
            groups.push(Group::of("normal", normal, slo));
        }
        let n = done.len().max(1) as f64;
        let span = secs(o.span).max(1e-9);
        let out_tokens: u64 = done.iter().map(|q| u64::from(q.req.output)).sum();
        let in_tokens: u64 = done.iter().map(|q| u64::from(q.req.input)).sum();
        let downtime: u64 = done.iter().map(|q| q.downtime).sum();
        LlmSummary {
            policy: policy.to_string(),
            requests: done.len() as u64,
            clipped: clipped.clipped,
            refused,
            ttft: all.ttft,
            tpot: all.tpot,
            e2e: all.e2e,
            normalised: all.normalised,
            slo_attainment: all.slo_attainment,
            slo_ttft_s: slo.ttft_s,
            slo_tpot_s: slo.tpot_s,
            slo_scale: 0.0,
            preemptions: done.iter().map(|q| u64::from(q.preemptions)).sum(),
            preempted_requests: done.iter().filter(|q| q.preemptions > 0).count() as u64,
            preemption_loss_mean_s: done.iter().map(|q| secs(q.loss)).sum::<f64>() / n,
            swaps: o.swaps,
            kv_transfers: o.kv_transfers,
            kv_transfer_mean_s: o.kv_transfer_secs / o.kv_transfers.max(1) as f64,
            kv_wait_mean_s: o.kv_wait_secs / o.kv_transfers.max(1) as f64,
            migrations: o.migrations,
            aborted_migrations: o.aborted_migrations,
            aborts: (crate::engine::AbortReason::ALL.iter())
                .map(|r| (r.name(), o.aborts[*r as usize]))
                .collect(),
            aborted_blocks: o.aborted_blocks,
            aborted_secs: o.aborted_secs,
            migration_downtime_mean_s: if o.migrations == 0 {
                0.0
            } else {
                secs(downtime) / o.migrations as f64
            },
            instances_mean: o.instance_secs / span,
            gpu_util: o.busy_secs / o.instance_secs.max(1e-9),
            tokens_per_s: out_tokens as f64 / span,
            total_tokens_per_s: (out_tokens + in_tokens) as f64 / span,
            span_s: span,
            max_flop_share: o.max_flop_share,
            max_bw_share: o.max_bw_share,
            iterations: o.iterations,
            groups,
            prefix: o.prefix,
        }
    }

    /// The figure called `name` (one of [`METRICS`]), for sweeps.
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "ttft_mean_s" => self.ttft.mean,
            "ttft_p50_s" => self.ttft.p50,
            "ttft_p99_s" => self.ttft.p99,
            "tpot_mean_s" => self.tpot.mean,
            "tpot_p99_s" => self.tpot.p99,
            "e2e_mean_s" => self.e2e.mean,
            "e2e_p99_s" => self.e2e.p99,
            "normalised_mean_s" => self.normalised.mean,
            "slo_attainment" => self.slo_attainment,
            "gpu_util" => self.gpu_util,
            "tokens_per_s" => self.tokens_per_s,
            "preemptions" => self.preemptions as f64,
            "preemption_loss_mean_s" => self.preemption_loss_mean_s,
            "swap_outs" => self.swaps.outs as f64,
            "migrations" => self.migrations as f64,
            "aborted_migrations" => self.aborted_migrations as f64,
            "migration_downtime_mean_s" => self.migration_downtime_mean_s,
            _ => return None,
        })
    }

    /// The summary as flat JSON (the keys scripts read: `ttft_mean_s`, `ttft_p99_s`,
    /// `tpot_mean_s`, `tpot_p99_s`, `e2e_p99_s`, `slo_attainment`, `preemptions`,
    /// `migrations`, `requests`, `clipped`, and the rest).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            m.insert(k.to_string(), v);
        };
        put("policy", self.policy.clone().into());
        put("requests", self.requests.into());
        put("clipped", self.clipped.into());
        put("refused", self.refused.into());
        for (name, d) in [
            ("ttft", &self.ttft),
            ("tpot", &self.tpot),
            ("e2e", &self.e2e),
            ("normalised", &self.normalised),
        ] {
            put(&format!("{name}_mean_s"), d.mean.into());
            put(&format!("{name}_p50_s"), d.p50.into());
            put(&format!("{name}_p90_s"), d.p90.into());
            put(&format!("{name}_p99_s"), d.p99.into());
        }
        put("slo_attainment", self.slo_attainment.into());
        put("slo_ttft_s", self.slo_ttft_s.into());
        put("slo_tpot_s", self.slo_tpot_s.into());
        if self.slo_scale > 0.0 {
            put("slo_scale", self.slo_scale.into());
        }
        put("preemptions", self.preemptions.into());
        put("preempted_requests", self.preempted_requests.into());
        put("preemption_loss_mean_s", self.preemption_loss_mean_s.into());
        put("swap_outs", self.swaps.outs.into());
        put("swap_ins", self.swaps.ins.into());
        put("swap_blocks_out", self.swaps.blocks_out.into());
        put("swap_secs", self.swaps.secs.into());
        if self.kv_transfers > 0 {
            put("kv_transfers", self.kv_transfers.into());
            put("kv_transfer_mean_s", self.kv_transfer_mean_s.into());
            put("kv_wait_mean_s", self.kv_wait_mean_s.into());
        }
        put("migrations", self.migrations.into());
        put("aborted_migrations", self.aborted_migrations.into());
        for (why, n) in &self.aborts {
            put(&format!("aborted_{why}"), (*n).into());
        }
        put("aborted_blocks", self.aborted_blocks.into());
        put("aborted_secs", self.aborted_secs.into());
        put(
            "migration_downtime_mean_s",
            self.migration_downtime_mean_s.into(),
        );
        put("instances_mean", self.instances_mean.into());
        put("gpu_util", self.gpu_util.into());
        put("tokens_per_s", self.tokens_per_s.into());
        put("total_tokens_per_s", self.total_tokens_per_s.into());
        put("span_s", self.span_s.into());
        put("max_flop_share", self.max_flop_share.into());
        put("max_bw_share", self.max_bw_share.into());
        put("iterations", self.iterations.into());
        if let Some(p) = &self.prefix {
            put("prefix_hit_rate", p.hit_rate().into());
            put("prefix_hit_tokens", p.hit_tokens.into());
            put("prefix_prompt_tokens", p.prompt_tokens.into());
            put("prefix_evictions", p.evictions.into());
            if p.host_hit_tokens > 0 || p.host_evictions > 0 {
                put("host_hit_tokens", p.host_hit_tokens.into());
                put("host_load_secs", p.host_load_secs.into());
                put("host_evictions", p.host_evictions.into());
            }
        }
        if !self.groups.is_empty() {
            let groups = self
                .groups
                .iter()
                .map(|g| {
                    let mut o = serde_json::Map::new();
                    o.insert("name".into(), g.name.clone().into());
                    o.insert("requests".into(), g.requests.into());
                    g.put_json(&mut o);
                    serde_json::Value::Object(o)
                })
                .collect();
            put("groups", serde_json::Value::Array(groups));
        }
        serde_json::Value::Object(m)
    }
}

/// A side-by-side table of runs.
pub fn table(sums: &[LlmSummary]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>8} {:>6} {:>9}",
        "policy",
        "requests",
        "ttft mean",
        "ttft p99",
        "tpot mean",
        "tpot p99",
        "e2e p99",
        "slo",
        "preempt",
        "migrate",
        "inst",
        "tokens/s"
    );
    // The latency columns, shared by a run's row and its groups' rows.
    let latency = |name: &str, requests: u64, ttft: &Dist, tpot: &Dist, e2e: &Dist, slo: f64| {
        format!(
            "{:<12} {:>8} {:>8.3}s {:>8.3}s {:>7.1}ms {:>7.1}ms {:>8.2}s {:>6.1}%",
            name,
            requests,
            ttft.mean,
            ttft.p99,
            tpot.mean * 1e3,
            tpot.p99 * 1e3,
            e2e.p99,
            slo * 100.0
        )
    };
    for m in sums {
        let _ = writeln!(
            s,
            "{} {:>8} {:>8} {:>6.2} {:>9.0}",
            latency(
                &m.policy,
                m.requests,
                &m.ttft,
                &m.tpot,
                &m.e2e,
                m.slo_attainment
            ),
            m.preemptions,
            m.migrations,
            m.instances_mean,
            m.tokens_per_s
        );
        for g in &m.groups {
            let name = format!("  {}", g.name);
            let row = latency(
                &name,
                g.requests,
                &g.ttft,
                &g.tpot,
                &g.e2e,
                g.slo_attainment,
            );
            let _ = writeln!(s, "{row}");
        }
    }
    s
}

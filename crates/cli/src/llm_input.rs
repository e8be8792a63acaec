//! What `apiary llm simulate`, `compare` and `pool` share: reading a trace spec, the
//! parameters meant for one policy of a comparison, and the timing line.

use anyhow::{Result, bail};
use apiary_llm::metrics::LlmSummary;
use apiary_llm::workload::{self, Trace};
use apiary_policy::Params;
use std::path::Path;

const SAMPLE: &str = "testdata/llm/azure-conv-sample.csv";
const SAMPLE_TEXT: &str = include_str!("../../../testdata/llm/azure-conv-sample.csv");
const CODE_SAMPLE: &str = "testdata/llm/azure-code-sample.csv";
const CODE_SAMPLE_TEXT: &str = include_str!("../../../testdata/llm/azure-code-sample.csv");

/// The `--set` pairs for policy `name`: `policy.key=value` sets a key for that policy
/// alone (a compare over policies with different parameters); a bare `key=value` is for
/// every policy run.
pub(crate) fn params_for(set: &[String], name: &str, known: &[&str]) -> Result<Params> {
    let mine = set.iter().filter_map(|kv| {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        match key.split_once('.') {
            Some((p, _)) if known.contains(&p) => (p == name).then(|| &kv[p.len() + 1..]),
            _ => Some(kv.as_str()),
        }
    });
    Ok(Params::from_pairs(mine)?)
}

/// Requests from a trace spec (a file, `powerlaw:IN-OUT`, `shared-prefix:...`, or the
/// committed sample when `None`): its name, the requests, and whether they carry
/// arrival times.
pub(crate) fn read_requests(
    spec: Option<&str>,
    n: Option<usize>,
    seed: u64,
) -> Result<(String, Trace)> {
    Ok(match spec {
        Some(spec) if spec.starts_with("powerlaw:") => {
            let mix = &spec["powerlaw:".len()..];
            let (i, o) = mix.split_once('-').unwrap_or((mix, mix));
            let (Some(im), Some(om)) = (workload::mix_mean(i), workload::mix_mean(o)) else {
                bail!(
                    "trace '{spec}': expected powerlaw:IN-OUT with IN, OUT in S, M, L, 128, 256, 512, 1024"
                );
            };
            let n = n.unwrap_or(10_000);
            (
                spec.to_string(),
                Trace {
                    requests: workload::power_law_requests(im, om, n, seed)?,
                    ..Trace::default()
                },
            )
        }
        Some(spec) if spec.starts_with("shared-prefix:") => {
            let Some(shape) = workload::SharedPrefix::parse(&spec["shared-prefix:".len()..]) else {
                bail!(
                    "trace '{spec}': expected shared-prefix:G:U:SYS:Q:OUT (system prompts, users per prompt, system prompt, question and answer tokens)"
                );
            };
            let n = n.unwrap_or(10_000);
            (
                spec.to_string(),
                workload::shared_prefix_requests(shape, n)?,
            )
        }
        Some("sample:code") => {
            let t = workload::parse_trace(Path::new(CODE_SAMPLE), CODE_SAMPLE_TEXT)?;
            (
                format!(
                    "{CODE_SAMPLE} (1,000 requests of the Azure LLM code trace 2023, CC-BY-4.0)"
                ),
                t,
            )
        }
        Some(path) if path != "sample:conv" => {
            (path.to_string(), workload::read_trace(Path::new(path))?)
        }
        _ => {
            let t = workload::parse_trace(Path::new(SAMPLE), SAMPLE_TEXT)?;
            (
                format!(
                    "{SAMPLE} (2,000 requests of the Azure LLM conversation trace 2023, CC-BY-4.0, see testdata/llm/README.md)"
                ),
                t,
            )
        }
    })
}

/// The bytes a trace spec reads (none for a synthetic one), for the run's record.
pub(crate) fn trace_bytes(spec: Option<&str>) -> Result<Option<Vec<u8>>> {
    Ok(match spec {
        Some(s) if s.starts_with("powerlaw:") || s.starts_with("shared-prefix:") => None,
        Some("sample:code") => Some(CODE_SAMPLE_TEXT.as_bytes().to_vec()),
        None | Some("sample:conv") => Some(SAMPLE_TEXT.as_bytes().to_vec()),
        Some(path) => {
            Some(std::fs::read(path).map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?)
        }
    })
}

/// The timing line of one run, in the shape `apiary bench` parses (as `apiary simulate`
/// prints it).
pub(crate) fn print_timing(name: &str, events: u64, wall: f64, sum: &LlmSummary) {
    eprintln!(
        "{name}: {} events in {:.3} s ({}), {} requests, {} iterations, peak memory {}",
        events,
        wall,
        crate::run::events_rate(events, wall),
        sum.requests,
        sum.iterations,
        crate::run::peak_rss_mb().map_or("n/a".into(), |m| format!("{m:.0} MB"))
    );
}

//! LLM-serving sweeps: an `[llm]` table turns a sweep's axes into serving experiments,
//! policy x trace x instances x rate x seed, each cell set up exactly as `apiary llm
//! simulate` sets up a run ([`apiary_llm::setup`]). Instances take the place of
//! clusters, and request rates (requests/s) the place of loads; without `rates` the
//! trace's own arrival times run, compressed by `loads` as in a training sweep.

use crate::spec::{SweepError, TraceSpec};
use apiary_llm::metrics::{LlmSummary, Slo};
use apiary_llm::setup::Options;
use serde::Deserialize;
use std::path::Path;

/// `[llm]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LlmFile {
    model: Option<String>,
    gpu: Option<String>,
    tp: Option<u32>,
    /// Instances per cluster: the sweep's cluster axis.
    instances: Option<Vec<u32>>,
    /// Request rates, requests/s: the sweep's load axis (none: the trace's times).
    rates: Option<Vec<f64>>,
    cv: Option<f64>,
    requests: Option<usize>,
    max_len: Option<u32>,
    #[serde(default)]
    refuse_long: bool,
    chunk: Option<u32>,
    max_seqs: Option<u32>,
    engine: Option<String>,
    cpu_ms: Option<f64>,
    kv_blocks: Option<u32>,
    #[serde(default)]
    prefix_cache: bool,
    swap_space: Option<f64>,
    swap_gbps: Option<f64>,
    /// Disaggregated pools, `P:D` each: the cluster axis instead of `instances`.
    disagg: Option<Vec<String>>,
    prefill_tp: Option<u32>,
    kv_gbps: Option<f64>,
    host_cache_gb: Option<f64>,
    slo_ttft: Option<f64>,
    slo_tpot: Option<f64>,
}

/// An LLM sweep's set-up, checked.
#[derive(Clone, Debug)]
pub struct LlmSweep {
    /// Every cell's options; a cell sets instances, rate and seed.
    pub options: Options,
    /// The instance counts (the cluster axis, in order), or with `splits` the
    /// instances of each split.
    pub instances: Vec<u32>,
    /// Disaggregated sweeps: the (prefill, decode) splits, the cluster axis.
    pub splits: Vec<(u32, u32)>,
    /// Whether the load axis holds request rates (else multipliers of the trace's
    /// arrival times).
    pub rates: bool,
    /// The SLO bounds attainment counts against.
    pub slo: Slo,
}

/// The figures an LLM sweep collects unless its file names others.
pub const DEFAULT_METRICS: [&str; 5] = [
    "ttft_mean_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "e2e_p99_s",
    "slo_attainment",
];

fn field(path: &Path, f: impl Into<String>, message: impl Into<String>) -> SweepError {
    SweepError::Field {
        path: path.to_path_buf(),
        field: f.into(),
        message: message.into(),
    }
}

/// Checks `[llm]`, with the sweep's `loads` (which rates replace) and traces; returns
/// the set-up and the load axis.
pub(crate) fn check(
    path: &Path,
    f: LlmFile,
    loads: Option<Vec<f64>>,
    traces: &[TraceSpec],
) -> Result<(LlmSweep, Vec<f64>), SweepError> {
    let splits: Vec<(u32, u32)> = match &f.disagg {
        None => Vec::new(),
        Some(v) if v.is_empty() => {
            return Err(field(path, "llm.disagg", "at least one P:D split"));
        }
        Some(v) => v
            .iter()
            .enumerate()
            .map(|(i, t)| disagg_split(path, i, t))
            .collect::<Result<_, _>>()?,
    };
    let instances = match (&f.instances, splits.is_empty()) {
        (Some(_), false) => {
            return Err(field(
                path,
                "llm.instances",
                "a disaggregated sweep's clusters are its disagg splits",
            ));
        }
        (None, false) => splits.iter().map(|&(p, d)| p.saturating_add(d)).collect(),
        (Some(v), true) if !v.is_empty() && !v.contains(&0) => v.clone(),
        _ => {
            return Err(field(
                path,
                "llm.instances",
                "at least one count, each at least 1",
            ));
        }
    };
    if let Some(i) = traces
        .iter()
        .position(|t| t.format.is_some() || t.sample.is_some())
    {
        return Err(field(
            path,
            format!("trace[{i}]"),
            "LLM traces are read by their header; give [llm] requests = N to run the first N",
        ));
    }
    let axis = match (&f.rates, loads) {
        (Some(_), Some(_)) => {
            return Err(field(
                path,
                "loads",
                "[llm] rates set the arrival rate; loads multiply a trace's own times: give one",
            ));
        }
        (Some(r), None) => {
            if r.is_empty() {
                return Err(field(path, "llm.rates", "at least one rate"));
            }
            for (i, v) in r.iter().enumerate() {
                if !(v.is_finite() && *v > 0.0 && *v <= 1e6) {
                    return Err(field(
                        path,
                        format!("llm.rates[{i}]"),
                        format!("{v} is not a rate in (0, 10^6] requests/s"),
                    ));
                }
            }
            r.clone()
        }
        (None, l) => l.unwrap_or_else(|| vec![1.0]),
    };
    let base = Options::default();
    let slo = Slo::default();
    let options = Options {
        model: f.model.unwrap_or(base.model),
        gpu: f.gpu.unwrap_or(base.gpu),
        tp: f.tp.unwrap_or(base.tp),
        cv: f.cv.unwrap_or(base.cv),
        requests: f.requests,
        max_len: f.max_len,
        refuse_long: f.refuse_long,
        chunk: f.chunk,
        max_seqs: f.max_seqs,
        engine: f.engine.unwrap_or(base.engine),
        cpu_ms: f.cpu_ms,
        kv_blocks: f.kv_blocks,
        prefix_cache: f.prefix_cache,
        swap_gib: f.swap_space.unwrap_or(base.swap_gib),
        swap_gbps: f.swap_gbps.unwrap_or(base.swap_gbps),
        // Each cell sets its own split; the first lets the probe below check the pools.
        disagg: splits.first().copied(),
        prefill_tp: f.prefill_tp,
        kv_gbps: f.kv_gbps.unwrap_or(base.kv_gbps),
        host_cache_gb: f.host_cache_gb.unwrap_or(base.host_cache_gb),
        ..base
    };
    // What set-up refuses (an unknown model, a TP that does not split, a bad engine) is
    // refused now, on an empty trace, rather than in every cell.
    let probe = Options {
        rate: Some(1.0),
        ..options.clone()
    };
    apiary_llm::setup::prepare(&probe, "the sweep", Default::default())
        .map_err(|e| field(path, "llm", e.to_string()))?;
    Ok((
        LlmSweep {
            options,
            instances,
            splits,
            rates: f.rates.is_some(),
            slo: Slo {
                ttft_s: f.slo_ttft.unwrap_or(slo.ttft_s),
                tpot_s: f.slo_tpot.unwrap_or(slo.tpot_s),
            },
        },
        axis,
    ))
}

/// The `i`-th split of `[llm] disagg`, `P:D`.
fn disagg_split(path: &Path, i: usize, t: &str) -> Result<(u32, u32), SweepError> {
    let pd = t
        .split_once(':')
        .and_then(|(p, d)| Some((p.trim().parse::<u32>().ok()?, d.trim().parse::<u32>().ok()?)));
    match pd {
        Some((p, d)) if p >= 1 && d >= 1 => Ok((p, d)),
        _ => Err(field(
            path,
            format!("llm.disagg[{i}]"),
            format!("'{t}' is not P:D with at least one instance on each side"),
        )),
    }
}

/// Checks an LLM policy setting (`name` with `params`).
pub(crate) fn check_policy(name: &str, params: &[String]) -> Result<(), String> {
    let ps = apiary_policy::Params::from_pairs(params.iter().map(String::as_str))
        .map_err(|e| e.to_string())?;
    apiary_llm::policy::build(name, &ps)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs one cell: `trace` on cluster `cluster` of the axis (its instances, or its
/// split) at load `load` (a rate, or a multiplier of the trace's times), under policy
/// `name` with `params`, seed `seed`.
pub(crate) fn run(
    s: &LlmSweep,
    trace: &apiary_llm::workload::Trace,
    cluster: usize,
    load: f64,
    name: &str,
    params: &[String],
    seed: u64,
) -> Result<LlmSummary, apiary_llm::LlmError> {
    let mut t = trace.clone();
    if !s.rates && load != 1.0 {
        compress(&mut t.requests, load);
    }
    let o = Options {
        instances: s.instances[cluster],
        disagg: s.splits.get(cluster).copied(),
        rate: s.rates.then_some(load),
        seed,
        ..s.options.clone()
    };
    let setup = apiary_llm::setup::prepare(&o, "trace", t)?;
    let out = match &setup.disagg {
        // The pools schedule themselves; the setting names the run.
        Some(d) => {
            apiary_llm::disagg::simulate(d, &setup.requests, &setup.refused, &mut |_, _| {})?
        }
        None => {
            let ps = apiary_policy::Params::from_pairs(params.iter().map(String::as_str))?;
            let mut policy = apiary_llm::policy::build(name, &ps)?;
            apiary_llm::simulate(
                &setup.cluster,
                &setup.requests,
                &setup.refused,
                policy.as_mut(),
                &mut |_, _| {},
            )?
        }
    };
    Ok(LlmSummary::of(name, &out, setup.clipped, s.slo))
}

/// Arrivals `load` times as fast: the time since the first divided by `load`.
fn compress(requests: &mut [apiary_llm::workload::Request], load: f64) {
    let Some(first) = requests.iter().map(|r| r.arrival).min() else {
        return;
    };
    for r in requests {
        r.arrival = first + ((r.arrival - first) as f64 / load).round() as u64;
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{Sweep, SweepError};
    use std::path::Path;

    const MIN: &str = r#"
seeds = 2
[[trace]]
path = "t.csv"
[[policy]]
name = "llumnix"
[[policy]]
name = "infaas++"
[llm]
instances = [4, 8]
rates = [1.5, 3]
"#;

    fn parse(text: &str) -> Result<Sweep, SweepError> {
        Sweep::parse(text, Path::new("s.toml"), Path::new("."), "s")
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn instances_and_rates_are_the_axes() {
        let s = parse(MIN).unwrap();
        assert_eq!(s.clusters, ["4xA10", "8xA10"]);
        assert_eq!(s.loads, [1.5, 3.0]);
        assert_eq!(s.metrics, super::DEFAULT_METRICS);
        assert_eq!(s.load_word(), "rate");
        let l = s.llm.as_ref().unwrap();
        assert!(l.rates);
        assert_eq!(l.options.model, "llama-2-7b");
        assert_eq!(crate::plan(&s).len(), 2 * 2 * 2 * 2);
        // Without rates the trace's own times run, multiplied by loads.
        let timed = MIN.replace("rates = [1.5, 3]", "tp = 2\ngpu = \"A100\"");
        let s = parse(&format!("loads = [1, 2]\n{timed}")).unwrap();
        assert_eq!((s.load_word(), s.loads.clone()), ("load", vec![1.0, 2.0]));
        assert_eq!(s.clusters, ["4x2xA100", "8x2xA100"]);
        // Disaggregated: one setting, the splits the cluster axis.
        let one = MIN
            .replace("[[policy]]\nname = \"infaas++\"\n", "")
            .replace("instances = [4, 8]", "disagg = [\"2:6\", \"3:5\", \"4:4\"]");
        let s = parse(&one).unwrap();
        assert_eq!(s.clusters, ["2:6xA10", "3:5xA10", "4:4xA10"]);
        let l = s.llm.as_ref().unwrap();
        assert_eq!((l.splits[1], l.instances[1]), ((3, 5), 8));
        assert_eq!(crate::plan(&s).len(), 3 * 2 * 2);
    }

    #[test]
    fn what_cannot_run_is_refused_by_field() {
        for (text, field) in [
            (format!("loads = [2]\n{MIN}"), "loads"),
            (format!("clusters = [\"n4g8\"]\n{MIN}"), "clusters"),
            (format!("{MIN}\n[sim]\nmode = \"event\"\n"), "sim"),
            (format!("metrics = [\"jct_mean\"]\n{MIN}"), "metrics[0]"),
            (MIN.replace("llumnix", "tiresias"), "policy[0].name"),
            (MIN.replace("[4, 8]", "[4, 0]"), "llm.instances"),
            // Sizes that would exhaust memory while planning (found by fuzzing).
            (MIN.replace("seeds = 2", "seeds = 1000000000000"), "seeds"),
            (
                MIN.replace(
                    "name = \"llumnix\"",
                    "name = \"llumnix\"\ngrid = { a = [1,2,3,4,5,6,7,8,9,10], b = [1,2,3,4,5,6,7,8,9,10], c = [1,2,3,4,5,6,7,8,9,10], d = [1,2,3,4,5,6,7,8,9,10], e = [1,2,3,4,5,6,7,8,9,10] }",
                ),
                "policy[0].grid",
            ),
            (
                MIN.replace("seeds = 2", "seeds = 900000")
                    .replace("[1.5, 3]", "[1, 2, 3, 4, 5, 6, 7, 8]"),
                "seeds",
            ),
            (MIN.replace("[1.5, 3]", "[1.5, -3]"), "llm.rates[1]"),
            (MIN.replace("rates", "model = \"gpt-5\"\nrates"), "llm"),
            (MIN.replace("rates", "tp = 3\nrates"), "llm"),
            (
                MIN.replace("rates", "disagg = [\"2:6\"]\nrates"),
                "llm.instances",
            ),
            (
                MIN.replace("instances = [4, 8]", "disagg = [\"2:6\", \"2\"]"),
                "llm.disagg[1]",
            ),
            (
                MIN.replace("instances = [4, 8]", "disagg = [\"0:6\"]"),
                "llm.disagg[0]",
            ),
            (MIN.replace("rates", "host_cache_gb = 10\nrates"), "llm"),
            (
                MIN.replace("instances = [4, 8]", "disagg = [\"2:6\"]"),
                "policy",
            ),
            (
                MIN.replace(
                    "name = \"infaas++\"",
                    "name = \"infaas++\"\nset = { nope = 1 }",
                ),
                "policy[1]",
            ),
            (
                MIN.replace("path = \"t.csv\"", "path = \"t.csv\"\nsample = 10"),
                "trace[0]",
            ),
        ] {
            let e = err(&text);
            assert!(e.starts_with(&format!("s.toml: {field}:")), "{field}: {e}");
        }
    }
}

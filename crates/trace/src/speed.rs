//! Loaders for the measured consolidated-vs-spread slowdowns the peer artifacts ship:
//! Gavel's `simulation_throughputs.json` (`<gpu>` against `<gpu>_unconsolidated`) and
//! Pollux's per-model `placements.csv` profiles.

use crate::TraceError;
use apiary_model::SpreadTable;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Looks for `rel` (e.g. `peers/gavel/simulation_throughputs.json`) in the ancestors of
/// `start` and of the working directory, also under `traces/` and `shared/traces/` at
/// each level, so `../shared/traces` is found from a checkout beside it.
pub fn find_peer_file(start: Option<&Path>, rel: &str) -> Option<PathBuf> {
    let mut roots = Vec::new();
    if let Some(s) = start {
        roots.push(s.to_path_buf());
    }
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    for root in roots {
        let mut dir = Some(root.as_path());
        while let Some(d) = dir {
            for pre in ["", "traces", "shared/traces"] {
                let cand = d.join(pre).join(rel);
                if cand.exists() {
                    return Some(cand);
                }
            }
            dir = d.parent();
        }
    }
    None
}

/// Gavel's `simulation_throughputs.json` as (GPU type, job type, scale factor) →
/// isolated throughput (the `null` entry; co-location entries are ignored). Keys look
/// like `('ResNet-18 (batch size 32)', 1)`. A zero means the job cannot run on that
/// type (the K80 has no memory for ResNet-50 at batch 128 on several GPUs).
pub fn read_gavel_throughputs(
    path: &Path,
) -> Result<BTreeMap<(String, String, u32), f64>, TraceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TraceError::Io {
        file: file.clone(),
        source: e,
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| TraceError::Row {
        file,
        line: e.line() as u64,
        field: "json".into(),
        message: e.to_string(),
    })?;
    let mut out = BTreeMap::new();
    for (w, entries) in v.as_object().into_iter().flatten() {
        for (k, e) in entries.as_object().into_iter().flatten() {
            let Some(inner) = k.strip_prefix("('").and_then(|s| s.strip_suffix(')')) else {
                continue;
            };
            let Some((jt, sf)) = inner.rsplit_once("', ") else {
                continue;
            };
            if let (Ok(sf), Some(t)) = (
                sf.trim().parse::<u32>(),
                e.get("null").and_then(|x| x.as_f64()),
            ) && t >= 0.0
            {
                out.insert((w.clone(), jt.to_string(), sf), t);
            }
        }
    }
    Ok(out)
}

/// Gavel: factor = unconsolidated ÷ consolidated isolated throughput for each (job type,
/// scale factor > 1) on GPU type `worker` (k80, p100 or v100).
pub fn gavel_spread(path: &Path, worker: &str) -> Result<SpreadTable, TraceError> {
    let file = path.display().to_string();
    let all = read_gavel_throughputs(path)?;
    let spread_worker = format!("{worker}_unconsolidated");
    for w in [worker, spread_worker.as_str()] {
        if !all.keys().any(|k| k.0 == w) {
            return Err(TraceError::Missing {
                file: file.clone(),
                message: format!("no '{w}' table (GPU types: k80, p100, v100)"),
            });
        }
    }
    let mut t = SpreadTable::new(format!(
        "Gavel {worker} unconsolidated/consolidated ({file})"
    ));
    for ((w, jt, sf), c) in &all {
        if w != worker || *sf < 2 {
            continue;
        }
        let Some(u) = all.get(&(spread_worker.clone(), jt.clone(), *sf)) else {
            continue;
        };
        let (family, batch) = match jt.split_once(" (batch size ") {
            Some((f, b)) => (f, b.trim_end_matches(')').parse().unwrap_or(0)),
            None => (jt.as_str(), 0),
        };
        t.insert(family, batch, *sf, 0, u / c);
    }
    t.fill_any_batch();
    Ok(t)
}

/// Pollux: for each model directory with a `placements.csv`, factor(g, n) = step time on
/// the fewest nodes ÷ step time on `n` nodes, for `g` GPUs, averaged (geometrically) over
/// the local batch sizes measured on both. Pollux's testbed has 4 GPUs per node, so for
/// `g > 4` the baseline is ⌈g/4⌉ nodes and that node count gets factor 1.
pub fn pollux_spread(dir: &Path) -> Result<SpreadTable, TraceError> {
    let rd = std::fs::read_dir(dir).map_err(|e| TraceError::Io {
        file: dir.display().to_string(),
        source: e,
    })?;
    let mut models: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("placements.csv").is_file())
        .collect();
    models.sort();
    if models.is_empty() {
        return Err(TraceError::Missing {
            file: dir.display().to_string(),
            message: "no <model>/placements.csv below this directory (Pollux profiles)".into(),
        });
    }
    let mut t = SpreadTable::new(format!("Pollux placement profiles ({})", dir.display()));
    for m in models {
        let name = m
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = m.join("placements.csv");
        let file = path.display().to_string();
        let (counted, mut lines) =
            crate::open::LineCount::new(crate::open::CrlfToLf::new(crate::open::open(&path)?));
        let mut rdr = csv::Reader::from_reader(counted);
        // (gpus, nodes, local_bsz) -> (sum of step times, count)
        let mut acc: BTreeMap<(u32, u32, u32), (f64, u32)> = BTreeMap::new();
        for (i, rec) in rdr.records().enumerate() {
            let rec = rec.map_err(|e| TraceError::Row {
                file: file.clone(),
                line: e
                    .position()
                    .map_or(i as u64 + 2, |p| lines.line_of(p.byte())),
                field: "record".into(),
                message: e.to_string(),
            })?;
            let line = rec
                .position()
                .map_or(i as u64 + 2, |p| lines.line_of(p.byte()));
            let bad = |field: &str, msg: String| TraceError::Row {
                file: file.clone(),
                line,
                field: field.into(),
                message: msg,
            };
            let p = rec.get(0).unwrap_or("");
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit() && b != b'0') {
                return Err(bad("placement", format!("'{p}' is not a digit string")));
            }
            let gpus: u32 = p.bytes().map(|b| (b - b'0') as u32).sum();
            let nodes = p.len() as u32;
            let bsz: u32 = rec
                .get(1)
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| bad("local_bsz", "not an integer".into()))?;
            let step: f64 = rec
                .get(2)
                .and_then(|s| s.trim().parse().ok())
                .filter(|x: &f64| x.is_finite() && *x > 0.0)
                .ok_or_else(|| bad("step_time", "not a positive number".into()))?;
            let e = acc.entry((gpus, nodes, bsz)).or_insert((0.0, 0));
            e.0 += step;
            e.1 += 1;
        }
        let mean: BTreeMap<(u32, u32, u32), f64> = acc
            .into_iter()
            .map(|(k, (s, c))| (k, s / c as f64))
            .collect();
        // Per (gpus, nodes): log-ratios against the fewest-node count at the same bsz.
        let mut ratios: BTreeMap<(u32, u32), (f64, u32)> = BTreeMap::new();
        let mut base_nodes: BTreeMap<u32, u32> = BTreeMap::new();
        for &(g, n, _) in mean.keys() {
            let b = base_nodes.entry(g).or_insert(n);
            *b = (*b).min(n);
        }
        for (&(g, n, b), &st) in &mean {
            let bn = base_nodes[&g];
            if n == bn {
                continue;
            }
            if let Some(&base) = mean.get(&(g, bn, b)) {
                let e = ratios.entry((g, n)).or_insert((0.0, 0));
                e.0 += (base / st).ln();
                e.1 += 1;
            }
        }
        for (&g, &bn) in &base_nodes {
            if bn > 1 {
                t.insert(&name, 0, g, bn, 1.0);
            }
        }
        for ((g, n), (s, c)) in ratios {
            t.insert(&name, 0, g, n, (s / c as f64).exp());
        }
    }
    Ok(t)
}

//! `apiary hived`: replay HiveD algorithm calls and print cell status.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use apiary_hived::replay::{self, ConfigRef, Scenario};
use apiary_hived::{Config, Hived};

fn read_config(path: &Path) -> Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Config::parse(&text).with_context(|| format!("{}", path.display()))
}

/// `apiary hived replay SCENARIO [--inspect-each-step]`: one JSON line per step.
pub fn replay(scenario: &Path, inspect: bool) -> Result<()> {
    let text = std::fs::read_to_string(scenario)
        .with_context(|| format!("reading {}", scenario.display()))?;
    // Data-driven test files carry expectations after a `----` line; replay only the part
    // before it.
    let body = text
        .split_once("\n----\n")
        .map_or(text.as_str(), |(a, _)| a);
    let s = Scenario::parse(body).with_context(|| format!("{}", scenario.display()))?;
    let base: PathBuf = scenario.parent().map(Path::to_path_buf).unwrap_or_default();
    let load = move |r: &ConfigRef| -> Result<Config, String> {
        match r {
            ConfigRef::Inline(c) => Ok((**c).clone()),
            ConfigRef::Path(p) => read_config(&base.join(p)).map_err(|e| format!("{e:#}")),
        }
    };
    let lines =
        replay::run(&s, &load, inspect).with_context(|| format!("{}", scenario.display()))?;
    let mut out = String::new();
    for l in lines {
        out.push_str(&serde_json::to_string(&l)?);
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// `apiary hived status CONFIG [--json] [--vc VC]`: cell status at start-up (all nodes
/// healthy), as a table or as HiveD's inspect JSON.
pub fn status(config: &Path, json: bool, vc: Option<&str>) -> Result<()> {
    let cfg = read_config(config)?;
    let h = Hived::with_all_nodes_healthy(&cfg).with_context(|| format!("{}", config.display()))?;
    if json {
        let v = match vc {
            Some(name) => match h.virtual_cluster_status(name) {
                Some(s) => serde_json::to_value(s)?,
                None => bail!("VC {name} is not in {}", config.display()),
            },
            None => serde_json::to_value(h.cluster_status())?,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", table(&h, vc)?);
    Ok(())
}

fn table(h: &Hived, vc: Option<&str>) -> Result<String> {
    use std::fmt::Write;
    let s = h.cluster_status();
    let mut out = String::new();
    if vc.is_none() {
        writeln!(
            out,
            "{:<44} {:<26} {:>9} {:>8} {:>5}  VC",
            "PHYSICAL CELL", "TYPE", "STATE", "HEALTH", "PRIO"
        )?;
        // HiveD lists top-level cells in its own order (the JSON keeps it); the table
        // sorts them by address, numbers as numbers.
        let mut top: Vec<_> = s.physical_cluster.iter().collect();
        top.sort_by(|a, b| address_order(&a.cell_address, &b.cell_address));
        for c in top {
            walk(&mut out, c, 0, 2)?;
        }
        out.push('\n');
    }
    writeln!(
        out,
        "{:<44} {:<26} {:>9} {:>8} {:>5}  BOUND TO",
        "VIRTUAL CELL", "TYPE", "STATE", "HEALTH", "PRIO"
    )?;
    for (name, cells) in &s.virtual_clusters {
        if vc.is_some_and(|v| v != name) {
            continue;
        }
        for c in cells {
            walk(&mut out, c, 0, 1)?;
        }
    }
    if let Some(v) = vc
        && !s.virtual_clusters.contains_key(v)
    {
        bail!("VC {v} is not in the config");
    }
    Ok(out)
}

/// Addresses compared piece by piece (`/` and `.` separated), numeric pieces as numbers.
fn address_order(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |s: &str| -> Vec<(u64, String)> {
        s.split(['/', '.'])
            .map(|p| (p.parse().unwrap_or(u64::MAX), p.to_string()))
            .collect()
    };
    key(a).cmp(&key(b))
}

/// Prints a cell and its children down to `depth` levels below it.
fn walk(
    out: &mut String,
    c: &apiary_hived::inspect::CellStatus,
    indent: usize,
    depth: usize,
) -> Result<()> {
    use std::fmt::Write;
    let bound =
        c.vc.clone()
            .or_else(|| c.physical_cell.as_ref().map(|p| p.cell_address.clone()))
            .unwrap_or_default();
    writeln!(
        out,
        "{:<44} {:<26} {:>9} {:>8} {:>5}  {}",
        format!("{}{}", "  ".repeat(indent), c.cell_address),
        c.cell_type,
        format!("{:?}", c.cell_state),
        c.cell_healthiness,
        c.cell_priority,
        bound
    )?;
    if depth > 0 {
        for ch in &c.cell_children {
            walk(out, ch, indent + 1, depth - 1)?;
        }
    }
    Ok(())
}

/// Figures of `apiary hived bench`.
#[derive(Debug, serde::Serialize)]
pub struct DecisionFigures {
    /// Cluster GPUs.
    pub gpus: u32,
    /// VCs.
    pub vcs: usize,
    /// Decisions timed.
    pub decisions: usize,
    /// Of which binds.
    pub binds: usize,
    /// Median time of one `schedule` call, µs.
    pub median_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Mean GPU utilisation while timing.
    pub util: f64,
}

/// `apiary hived bench`: times HiveD's decision (`schedule` of a job's first pod) on a
/// cluster of `gpus` GPUs in 8-GPU nodes shared by `vcs` equal VCs, kept near `util`
/// busy by jobs whose sizes follow Philly's GPU-count mix.
pub fn bench(
    gpus: u32,
    vcs: usize,
    decisions: usize,
    util: f64,
    seed: u64,
    json: bool,
) -> Result<()> {
    use apiary_hived::{Decision, GroupSpec, MemberSpec, Phase, PodSpec, Suggested};
    use std::collections::VecDeque;
    use std::time::Instant;
    if gpus < 8
        || vcs == 0
        || !((gpus / 8) as usize).is_multiple_of(vcs)
        || !(0.0..1.0).contains(&util)
    {
        bail!(
            "--gpus must be a multiple of 8 whose nodes split evenly into --vcs; --util in [0, 1)"
        );
    }
    let nodes = gpus / 8;
    let cluster = apiary_model::ClusterSpec::preset(&format!("n{nodes}g8"))?.build()?;
    let per = nodes / vcs as u32;
    let names: Vec<(String, u32)> = (0..vcs).map(|i| (format!("vc{i:02}"), per)).collect();
    let all: Vec<u32> = (0..nodes).collect();
    let cfg = apiary_policy::vc::hived_config(&cluster, &all, &names, true)?;
    let mut h = Hived::with_all_nodes_healthy(&cfg)?;
    let mut rng = apiary_model::Rng::new(seed);
    // Philly's job sizes (philly.csv): 1, 2, 4, 8, 16, 32 GPUs.
    let sizes = [1u32, 2, 4, 8, 16, 32];
    let weights = [76627.0, 1818.0, 1870.0, 1643.0, 199.0, 67.0];
    let spec = |vc: &str, group: &str, size: u32, pod: u32| {
        let (full, rest) = if size <= 8 { (0, size) } else { (size / 8, 0) };
        let mut members = Vec::new();
        if full > 0 {
            members.push(MemberSpec {
                pod_number: full as i64,
                leaf_cell_number: 8,
            });
        }
        if rest > 0 {
            members.push(MemberSpec {
                pod_number: 1,
                leaf_cell_number: rest as i64,
            });
        }
        PodSpec {
            virtual_cluster: vc.to_string(),
            priority: 0,
            pinned_cell_id: String::new(),
            leaf_cell_type: String::new(),
            leaf_cell_number: pod as i64,
            affinity_group: Some(GroupSpec {
                name: group.to_string(),
                members,
            }),
            lazy_preemption_enable: false,
            ignore_k8s_suggested_nodes: true,
            gang_release_enable: false,
        }
    };
    type Pods = Vec<(String, PodSpec, apiary_hived::BindInfo)>;
    let mut running: VecDeque<(u32, Pods)> = VecDeque::new();
    let mut busy = 0u32;
    let mut times: Vec<f64> = Vec::with_capacity(decisions);
    let mut binds = 0;
    let mut util_sum = 0.0;
    let warmup = decisions / 4;
    for k in 0..warmup + decisions {
        let vc = &names[rng.below(vcs as u64) as usize].0;
        let size = sizes[rng.weighted(&weights)];
        let pod = size.min(8);
        let group = format!("g{k}");
        let first = spec(vc, &group, size, pod);
        let t0 = Instant::now();
        let d = h.schedule(
            &format!("{group}-0"),
            &first,
            &Suggested::All,
            Phase::Preempting,
        )?;
        let dt = t0.elapsed().as_secs_f64() * 1e6;
        if k >= warmup {
            times.push(dt);
            util_sum += busy as f64 / gpus as f64;
        }
        if let Decision::Bind(info) = d {
            if k >= warmup {
                binds += 1;
            }
            let name = format!("{group}-0");
            h.add_allocated_pod(&name, &first, &info)?;
            let mut pods = vec![(name, first.clone(), info)];
            for p in 1..size / pod {
                let name = format!("{group}-{p}");
                if let Decision::Bind(i) =
                    h.schedule(&name, &first, &Suggested::All, Phase::Preempting)?
                {
                    h.add_allocated_pod(&name, &first, &i)?;
                    pods.push((name, first.clone(), i));
                }
            }
            busy += size;
            running.push_back((size, pods));
        }
        while busy as f64 > util * gpus as f64 {
            let Some((size, pods)) = running.pop_front() else {
                break;
            };
            for (n, s, i) in &pods {
                h.delete_allocated_pod(n, s, i)?;
            }
            busy -= size;
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    let f = DecisionFigures {
        gpus,
        vcs,
        decisions,
        binds,
        median_us: at(0.5),
        p90_us: at(0.9),
        p99_us: at(0.99),
        mean_us: times.iter().sum::<f64>() / times.len().max(1) as f64,
        util: util_sum / times.len().max(1) as f64,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&f)?);
    } else {
        println!(
            "hived decision, {} GPUs, {} VCs, {} decisions ({} binds, util {:.2}): median {:.1} us, p90 {:.1} us, p99 {:.1} us, mean {:.1} us",
            f.gpus, f.vcs, f.decisions, f.binds, f.util, f.median_us, f.p90_us, f.p99_us, f.mean_us
        );
    }
    Ok(())
}

//! Measuring the online services beside apiary's jobs (MuxFlow's `online-sharing`):
//! on a node whose GPUs serve, the agent samples every process on its GPUs with
//! `nvidia-smi pmon` every [`SAMPLE_EVERY`], counts those that are not its attempts'
//! (nor their descendants') as the services', and reports each GPU's service SM share
//! at its most over the last minute, and the share of the GPU's memory the services
//! hold. Sampling runs on a thread of its own, started when the server first asks, so
//! a slow `nvidia-smi` never holds up a heartbeat.

use apiary_api::ServiceLoad;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time between samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// How far back a report's SM share looks: MuxFlow reacts to the last minute's peak.
const WINDOW: Duration = Duration::from_secs(60);

/// One process on a GPU, as `nvidia-smi pmon` lists it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Proc {
    /// GPU index.
    pub gpu: u32,
    /// Its pid.
    pub pid: i32,
    /// SM share (0 to 1) over the sample.
    pub sm: f64,
    /// Framebuffer memory, MiB.
    pub fb_mib: f64,
}

/// Reads `nvidia-smi pmon -s um` output by its header's column names (drivers add
/// columns over the years); `-` reads as nothing used, and a GPU with no process has a
/// line of dashes, which is skipped.
pub fn parse_pmon(text: &str) -> Result<Vec<Proc>, String> {
    let mut names: Option<Vec<&str>> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('#') {
            if names.is_none() {
                names = Some(h.split_whitespace().collect());
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        let cols = names.as_ref().ok_or("no header line")?;
        let at = |name: &str| cols.iter().position(|c| c.eq_ignore_ascii_case(name));
        let (Some(g), Some(p), Some(sm)) = (at("gpu"), at("pid"), at("sm")) else {
            return Err(format!("header without gpu, pid and sm: {cols:?}"));
        };
        let f: Vec<&str> = t.split_whitespace().collect();
        let num = |k: Option<usize>| k.and_then(|k| f.get(k)).and_then(|v| v.parse::<f64>().ok());
        let Some(pid) = f.get(p).and_then(|v| v.parse::<i32>().ok()) else {
            continue; // a GPU without processes
        };
        let gpu = f
            .get(g)
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| format!("'{t}': no GPU index"))?;
        out.push(Proc {
            gpu,
            pid,
            sm: (num(Some(sm)).unwrap_or(0.0) / 100.0).clamp(0.0, 1.0),
            fb_mib: num(at("fb")).unwrap_or(0.0).max(0.0),
        });
    }
    Ok(out)
}

/// Each GPU's service load in one sample: the processes outside `ours`, with memory
/// as a share of `total_mib` (GPUs of unknown size count none).
pub fn service_loads(
    procs: &[Proc],
    ours: &BTreeSet<i32>,
    total_mib: &BTreeMap<u32, f64>,
) -> BTreeMap<u32, (f64, f64)> {
    let mut out: BTreeMap<u32, (f64, f64)> = total_mib.keys().map(|&g| (g, (0.0, 0.0))).collect();
    for p in procs.iter().filter(|p| !ours.contains(&p.pid)) {
        let e = out.entry(p.gpu).or_insert((0.0, 0.0));
        e.0 = (e.0 + p.sm).min(1.0);
        if let Some(&t) = total_mib.get(&p.gpu).filter(|&&t| t > 0.0) {
            e.1 = (e.1 + p.fb_mib / t).min(1.0);
        }
    }
    out
}

/// Each GPU's (SM, memory) of the services, in one sample.
type Loads = BTreeMap<u32, (f64, f64)>;

#[derive(Default)]
struct Shared {
    /// The supervisors' pids of the attempts running now.
    ours: Vec<i32>,
    /// (when, each GPU's (SM, memory)).
    samples: VecDeque<(Instant, Loads)>,
    /// Why the last sample failed, not yet said.
    failed: Option<String>,
}

/// The sampler, once started.
pub struct Sampler {
    smi: PathBuf,
    shared: Option<Arc<Mutex<Shared>>>,
    /// The failure last said: the same one is said once.
    said: Option<String>,
}

impl Sampler {
    /// Not started; `smi` is `nvidia-smi`'s path.
    pub fn new(smi: PathBuf) -> Sampler {
        Sampler {
            smi,
            shared: None,
            said: None,
        }
    }

    /// What to report, given the attempts' supervisors now (`ours`); starts sampling
    /// the first time. Returns the loads and a failure to log, if one came.
    pub fn report(&mut self, ours: Vec<i32>) -> (Vec<ServiceLoad>, Option<String>) {
        let shared = self.shared.get_or_insert_with(|| {
            let shared = Arc::new(Mutex::new(Shared::default()));
            let s = shared.clone();
            let smi = self.smi.clone();
            std::thread::spawn(move || sample_forever(&smi, &s));
            shared
        });
        let Ok(mut s) = shared.lock() else {
            return (Vec::new(), None);
        };
        s.ours = ours;
        let failed = s.failed.take().filter(|f| self.said.as_ref() != Some(f));
        if failed.is_some() {
            self.said = failed.clone();
        }
        let mut most: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
        // Samples come in time order: the last one's memory is the one kept.
        for (_, loads) in &s.samples {
            for (&g, &(sm, mem)) in loads {
                let e = most.entry(g).or_insert((0.0, 0.0));
                e.0 = e.0.max(sm);
                e.1 = mem;
            }
        }
        let loads = most
            .into_iter()
            .map(|(gpu, (sm, memory))| ServiceLoad { gpu, sm, memory })
            .collect();
        (loads, failed)
    }
}

fn sample_forever(smi: &PathBuf, shared: &Mutex<Shared>) {
    let mut total: Option<BTreeMap<u32, f64>> = None;
    loop {
        let t0 = Instant::now();
        let sample = (|| {
            if total.is_none() {
                total = Some(memory_totals(smi)?);
            }
            let out = run(smi, &["pmon", "-c", "1", "-s", "um"])?;
            let procs = parse_pmon(&out)?;
            let roots = shared.lock().map(|s| s.ours.clone()).unwrap_or_default();
            let mut ours: BTreeSet<i32> = roots.iter().copied().collect();
            for r in roots {
                ours.extend(crate::procs::descendants(r));
            }
            Ok::<_, String>(service_loads(
                &procs,
                &ours,
                total.as_ref().unwrap_or(&BTreeMap::new()),
            ))
        })();
        if let Ok(mut s) = shared.lock() {
            match sample {
                Ok(loads) => {
                    let now = Instant::now();
                    s.samples.push_back((now, loads));
                    while s
                        .samples
                        .front()
                        .is_some_and(|(t, _)| now.duration_since(*t) > WINDOW)
                    {
                        s.samples.pop_front();
                    }
                }
                Err(e) => {
                    s.failed = Some(format!("measuring the online services: {e}"));
                }
            }
        }
        std::thread::sleep(SAMPLE_EVERY.saturating_sub(t0.elapsed()));
    }
}

fn run(smi: &PathBuf, args: &[&str]) -> Result<String, String> {
    let out = Command::new(smi)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", smi.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {}: {}",
            smi.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Each GPU's memory, MiB.
fn memory_totals(smi: &PathBuf) -> Result<BTreeMap<u32, f64>, String> {
    let out = run(
        smi,
        &[
            "--query-gpu=index,memory.total",
            "--format=csv,noheader,nounits",
        ],
    )?;
    let mut m = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let (i, t) = line
            .split_once(',')
            .ok_or_else(|| format!("'{line}': not index, memory.total"))?;
        let i: u32 = i.trim().parse().map_err(|_| format!("'{line}': index"))?;
        m.insert(i, t.trim().parse().unwrap_or(0.0));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nvidia-smi pmon -c 1 -s um` as driver 535 prints it.
    const PMON: &str = "\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   command
# Idx           #    C/G      %      %      %      %      %      %     MB   name
    0       4242     C     35     10      -      -      -      -  20000   tritonserver
    0       5151     C     40     12      -      -      -      -   8000   python
    1       4243     C     70     30      -      -      -      -  40000   tritonserver
    2          -     -      -      -      -      -      -      -      -   -
";

    #[test]
    fn services_are_the_processes_that_are_not_the_agents_jobs() {
        let procs = parse_pmon(PMON).unwrap();
        assert_eq!(procs.len(), 3);
        assert_eq!(
            procs[0],
            Proc {
                gpu: 0,
                pid: 4242,
                sm: 0.35,
                fb_mib: 20000.0
            }
        );
        let total: BTreeMap<u32, f64> = [(0, 80000.0), (1, 80000.0), (2, 80000.0)].into();
        // 5151 is one of the agent's jobs: GPU 0's service is 4242 alone.
        let loads = service_loads(&procs, &[5151].into(), &total);
        assert_eq!(loads[&0], (0.35, 0.25));
        assert_eq!(loads[&1], (0.7, 0.5));
        assert_eq!(
            loads[&2],
            (0.0, 0.0),
            "a GPU without processes serves nothing"
        );
        assert!(parse_pmon("0 1 C 5").is_err(), "no header");
    }
}

//! Data-driven scenarios (raft-rs style), the format of `testdata/scenarios/*.txt`: a
//! small command language above a `----` line, the expected output below. With
//! `steps`, the jobs running and pending after each time stamp the engine handled, in
//! order; then each job's outcome (in any order).
//!
//! ```text
//! cluster n1g4            (several presets join: `cluster n1g1-v100 n1g2-k80`)
//! policy fifo backfill=true
//! mode slot:60            (optional)
//! restart_overhead 5      (optional, seconds)
//! io cache=uniform,bandwidth_mbs_per_gpu=30   (optional: the IO model, as `--io`)
//! cpu cpus_per_gpu=3      (optional: the CPU model, as `--cpu`)
//! online hosts=0.5,spike_prob=0   (optional: online services, as `--online`)
//! steps                   (optional: expect the state after every time stamp)
//! job a submit=0 gpus=2 duration=10   (optional vc=NAME; priority=N; stages=DATA/GPU/NET
//!                                       ms with iters=N for Muri's interleaving;
//!                                       speeds=v100:1,k80:0.5 per GPU type;
//!                                       deadline=SECONDS; scaling=1:1,2:1.8 (GPUs:
//!                                       iterations/s) with max=GPUS and batch=N for
//!                                       elastic jobs, which run `duration` at `gpus`,
//!                                       and iters=N, the trace's iteration count;
//!                                       model=NAME; data=GB/KB/RATE, what it reads
//!                                       under `io`: dataset GB, sample KB, samples/s
//!                                       per GPU)
//! ----
//! t=0 running=a pending=-
//! t=10 running=- pending=-
//! a start=0 finish=10 preemptions=0
//! ```
//!
//! A job whose deadline the policy judges elsewhere than at its finish (ElasticFlow's
//! `progress=artifact`) adds `judged=SECONDS met=BOOL`. The same file runs on any
//! [`Backend`]: the simulator's tests run every file, the live service's tests run the
//! files whose policy and job data it can host.

use crate::backend::Backend;
use crate::config::{Config, Mode};
use crate::engine::Engine;
use crate::error::SimError;
use apiary_model::{Cluster, ClusterSpec, Job, Time};
use apiary_policy::{Params, Status};
use std::collections::BTreeMap;

/// A scenario line that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("scenario line {line}: {message}")]
pub struct ScenarioError {
    /// 1-based line of the scenario text.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// What a run shows, as a scenario writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    /// With `steps`: the jobs running and pending after each time stamp, in order.
    pub steps: Vec<String>,
    /// Each job's outcome line, in trace order.
    pub jobs: Vec<String>,
}

impl Shown {
    /// Whether it shows what `expected` shows (job lines in any order).
    pub fn matches(&self, expected: &Shown) -> bool {
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v
        };
        self.steps == expected.steps && sorted(&self.jobs) == sorted(&expected.jobs)
    }
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for l in self.steps.iter().chain(&self.jobs) {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

/// A parsed scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    input: String,
    /// What the file expects.
    pub expected: Shown,
    /// The cluster.
    pub cluster: Cluster,
    /// The policy's name.
    pub policy: String,
    /// Its parameters.
    pub params: Params,
    /// Mode and restart overhead.
    pub cfg: Config,
    /// The jobs, sorted by submission.
    pub jobs: Vec<Job>,
    /// Whether the file expects the state after every step.
    pub steps: bool,
}

/// The scenario files (`*.txt`) of `dir`, in name order.
pub fn files(dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|e| e == "txt") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Seconds as the scenario files write them, as milliseconds.
fn secs(v: &str) -> Result<Time, String> {
    apiary_model::time::secs_f64(
        v.parse::<f64>()
            .map_err(|_| format!("'{v}' is not seconds"))?,
    )
    .ok_or_else(|| format!("'{v}' is out of range"))
}

/// Seconds as the scenario files write them.
fn show(t: Time) -> String {
    format!("{}", t as f64 / 1000.0)
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{key}: '{v}' does not parse"))
}

/// A `job` line's fields after its id.
fn parse_job(id: &str, kv: &BTreeMap<&str, &str>) -> Result<Job, String> {
    let get = |k: &str| {
        kv.get(k)
            .copied()
            .ok_or_else(|| format!("job {id}: no {k}="))
    };
    let mut j = Job::new(
        id,
        secs(get("submit")?)?,
        parse_num("gpus", get("gpus")?)?,
        secs(get("duration")?)?,
    );
    j.vc = kv.get("vc").map(|v| (*v).into());
    if let Some(sp) = kv.get("speeds") {
        let mut speeds = BTreeMap::new();
        for e in sp.split(',') {
            let (t, v) = e.split_once(':').ok_or("speeds: expected TYPE:FACTOR")?;
            speeds.insert(t.to_string(), parse_num("speeds", v)?);
        }
        j.extras_mut().type_speeds = Some(speeds);
    }
    if let Some(d) = kv.get("deadline") {
        j.deadline = Some(secs(d)?);
    }
    if let Some(sc) = kv.get("scaling") {
        let mut levels = Vec::new();
        for e in sc.split(',') {
            let (g, t) = e.split_once(':').ok_or("scaling: expected GPUS:RATE")?;
            levels.push((parse_num("scaling", g)?, parse_num("scaling", t)?));
        }
        let mut table = apiary_model::Scaling::new(levels, parse_num("max", get("max")?)?)
            .ok_or("scaling: not a valid throughput table")?;
        if let Some(b) = kv.get("batch") {
            table = table.with_batch(parse_num("batch", b)?);
        }
        j.extras_mut().scaling = Some(table);
    }
    if let Some(p) = kv.get("priority") {
        j.priority = parse_num("priority", p)?;
    }
    if let Some(st) = kv.get("stages") {
        let v: Vec<f64> = st
            .split('/')
            .map(|x| parse_num("stages", x))
            .collect::<Result<_, _>>()?;
        let [data, gpu, net] = v[..] else {
            return Err("stages: expected DATA/GPU/NET".into());
        };
        j.extras_mut().stages = Some(apiary_model::StageTimes { data, gpu, net });
    }
    // Muri's stages need it; an elastic job may give it, as ElasticFlow's traces do
    // (its run time is then the reader's rounded `duration`).
    if let Some(n) = kv.get("iters") {
        j.iterations = Some(parse_num("iters", n)?);
    }
    if let Some(m) = kv.get("model") {
        j.model = Some((*m).to_string());
    }
    if let Some(d) = kv.get("data") {
        let v: Vec<f64> = d
            .split('/')
            .map(|x| parse_num("data", x))
            .collect::<Result<_, _>>()?;
        let [gb, kb, rate] = v[..] else {
            return Err("data: expected GB/KB/RATE".into());
        };
        let model = j
            .model
            .as_deref()
            .and_then(apiary_model::io::model)
            .and_then(|m| apiary_model::io::MODELS.iter().position(|x| x == m))
            .unwrap_or(0);
        j.extras_mut().data = Some(apiary_model::io::DataProfile {
            model,
            dataset: gb * apiary_model::io::GB,
            sample: kb * 1e3,
            gpu_rate: rate,
        });
    }
    Ok(j)
}

/// What a scenario's command lines have set so far.
#[derive(Default)]
struct Parsed {
    cluster: Option<Cluster>,
    policy: Option<(String, Params)>,
    cfg: Config,
    jobs: Vec<Job>,
    steps: bool,
}

impl Parsed {
    /// One command line.
    fn command(&mut self, line: &str) -> Result<(), String> {
        let mut w = line.split_whitespace();
        match w.next().unwrap_or_default() {
            "cluster" => {
                // Several presets join into one cluster (a heterogeneous one when their
                // GPU types differ).
                let mut spec = None::<ClusterSpec>;
                for name in w {
                    let more = ClusterSpec::preset(name).map_err(|e| e.to_string())?;
                    match &mut spec {
                        None => spec = Some(more),
                        Some(s) => s.switches.extend(more.switches),
                    }
                }
                let spec = spec.ok_or("cluster: no preset")?;
                self.cluster = Some(spec.build().map_err(|e| e.to_string())?);
            }
            "policy" => {
                let name = w.next().ok_or("policy: no name")?.to_string();
                let params = Params::from_pairs(w).map_err(|e| e.to_string())?;
                self.policy = Some((name, params));
            }
            "mode" => {
                let v = w.next().unwrap_or_default();
                let slot = v
                    .strip_prefix("slot:")
                    .ok_or("mode: expected slot:SECONDS")?;
                self.cfg.mode = Mode::Slotted(secs(slot)?);
            }
            "restart_overhead" => self.cfg.restart_overhead = secs(w.next().unwrap_or("-"))?,
            "io" => {
                let io = apiary_model::io::Storage::parse(w.next().unwrap_or("default"));
                self.cfg.io = Some(io.map_err(|e| e.to_string())?);
            }
            "cpu" => {
                let cpu = apiary_model::cpu::CpuPool::parse(w.next().unwrap_or("default"));
                self.cfg.cpu = Some(cpu.map_err(|e| e.to_string())?);
            }
            "online" => {
                let o = apiary_model::online::OnlineLoad::parse(w.next().unwrap_or("default"));
                self.cfg.online = Some(o.map_err(|e| e.to_string())?);
            }
            "steps" => self.steps = true,
            "job" => {
                let id = w.next().ok_or("job: no id")?;
                let kv = w
                    .map(|p| {
                        p.split_once('=')
                            .ok_or(format!("job {id}: '{p}' is not k=v"))
                    })
                    .collect::<Result<BTreeMap<&str, &str>, String>>()?;
                self.jobs.push(parse_job(id, &kv)?);
            }
            other => return Err(format!("unknown command '{other}'")),
        }
        Ok(())
    }
}

impl Scenario {
    /// Parses a scenario file's text.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let (input, expected) = text.split_once("\n----\n").ok_or(ScenarioError {
            line: text.lines().count(),
            message: "no ---- line".into(),
        })?;
        let mut p = Parsed::default();
        for (n, line) in input.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            p.command(line).map_err(|message| ScenarioError {
                line: n + 1,
                message,
            })?;
        }
        let (Some(cluster), Some((policy, params))) = (p.cluster, p.policy) else {
            return Err(ScenarioError {
                line: 1,
                message: "a scenario needs a cluster line and a policy line".into(),
            });
        };
        let mut s = Scenario {
            input: input.to_string(),
            expected: Shown::default(),
            cluster,
            policy,
            params,
            cfg: p.cfg,
            jobs: p.jobs,
            steps: p.steps,
        };
        s.jobs.sort_by_key(|j| j.submit);
        let lines = expected
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string);
        let (steps, jobs) = lines.partition(|l| l.starts_with("t="));
        s.expected = Shown { steps, jobs };
        Ok(s)
    }

    /// Steps `engine` (set up with this scenario's jobs) to the end and shows what it
    /// did as the scenario writes it.
    pub fn run<B: Backend>(&self, mut engine: Engine<'_, B>) -> Result<Shown, SimError> {
        let mut shown = Shown::default();
        while let Some(now) = engine.step()? {
            if self.steps {
                shown.steps.push(format!(
                    "t={} running={} pending={}",
                    show(now),
                    ids(engine.backend(), Status::Running),
                    ids(engine.backend(), Status::Pending)
                ));
            }
        }
        let out = engine.outcome();
        shown.jobs = out
            .jobs
            .iter()
            .map(|j| {
                if j.rejected.is_some() {
                    return format!("{} rejected", j.id);
                }
                let f = |t: Option<Time>| t.map_or("-".to_string(), show);
                // Where the policy judges a deadline elsewhere than at the finish.
                let judged = j.judged.map_or(String::new(), |t| {
                    format!(" judged={} met={}", show(t), j.met_deadline())
                });
                format!(
                    "{} start={} finish={} preemptions={}{judged}",
                    j.id,
                    f(j.first_start),
                    f(j.finish),
                    j.preemptions
                )
            })
            .collect();
        Ok(shown)
    }

    /// The file's text with `got` as its expectations (the rewrite mode).
    pub fn rewritten(&self, got: &Shown) -> String {
        format!("{}\n----\n{got}", self.input)
    }
}

/// The trace jobs in `status` after a step, by id, or `-`.
fn ids(b: &impl Backend, status: Status) -> String {
    let w = b.world();
    let mut v: Vec<&str> = b
        .trace()
        .iter()
        .enumerate()
        .filter(|&(k, _)| {
            b.index(k)
                .is_some_and(|i| w.rt[i as usize].status == status)
        })
        .map(|(_, j)| j.id.as_str())
        .collect();
    v.sort_unstable();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistakes_name_their_line() {
        let e =
            Scenario::parse("cluster n1g4\npolicy fifo\njob a submit=0 gpus=x duration=1\n----\n")
                .unwrap_err();
        assert_eq!(
            (e.line, e.message.as_str()),
            (3, "gpus: 'x' does not parse")
        );
        let e = Scenario::parse("cluster n1g4\n\nflavour x\n----\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(Scenario::parse("cluster n1g4\n").is_err(), "no ---- line");
    }
}

//! Knobs a policy sets on running jobs and the agents apply: CPUs for input pipelines
//! (GoldMiner's data workers, `cpu-workers`), GPU power limits (GreenFlow's
//! `power-limits`), cache and remote bandwidth (SiloD's `io`) and SM shares beside
//! online services (MuxFlow's `online-sharing`, [`super::online`]). After each pass the running jobs' records take what the world
//! holds; every heartbeat reply gives a node's agent the values of the attempts it
//! runs, so a running job changes without a restart.
//!
//! CPUs: the pool is the nodes' CPUs (`cpus` in the config), spread over their GPUs as
//! the simulator's `--cpu` pool is; the policy gives each running job a share along the
//! speed curve of the model it trains (`model` in its submission), and each node's
//! agent pins its part of the job to its GPUs' share of that, rounded up.
//!
//! Power: a fraction of the GPUs' top limit, which the agent sets with `nvidia-smi -pl`
//! on the attempt's GPUs.

use super::{ApiError, Core};
use crate::types::{CpuShare, IoGrant, IoShare, JobRecord, JobSpec, PowerCap};
use apiary_model::Job;
use apiary_model::cpu::CpuPool;
use apiary_model::io::MODELS;
use apiary_policy::{Capability, JobIdx, World};

impl Core {
    /// The CPU pool of a config whose every node declares its `cpus` (the config check
    /// refuses a `cpu-workers` policy otherwise): its CPUs per GPU.
    pub(super) fn cpu_pool(&self) -> Option<CpuPool> {
        let cpus: Option<u64> = self.cfg.nodes.iter().map(|n| n.cpus.map(u64::from)).sum();
        let gpus: u64 = self.cfg.nodes.iter().map(|n| u64::from(n.gpus)).sum();
        Some(CpuPool {
            cpus_per_gpu: cpus? as f64 / gpus.max(1) as f64,
        })
    }

    /// Checks a submission's model and dataset: a model Synergy measured, and both
    /// given whenever the policy allocates by them (a job sharing a GPU is outside the
    /// policy).
    pub(super) fn validate_model(&self, s: &JobSpec) -> Result<(), ApiError> {
        let names = || MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
        if let Some(m) = &s.model
            && apiary_model::io::model(m).is_none()
        {
            return Err(ApiError::bad(
                "model",
                format!("unknown model '{m}' (one of {})", names()),
            ));
        }
        if let Some(gb) = s.dataset_gb
            && !(gb.is_finite() && gb > 0.0 && gb <= 1e9)
        {
            return Err(ApiError::bad(
                "dataset_gb",
                format!("must be a size in GB above 0 (got {gb})"),
            ));
        }
        if s.gpu_milli.is_some() {
            return Ok(());
        }
        let caps = self.policy.capabilities();
        let policy = self.policy.name();
        if s.model.is_none() && caps.has(Capability::CpuWorkers) {
            return Err(ApiError::bad(
                "model",
                format!(
                    "policy {policy} gives input pipelines CPUs by the speed curve of the \
                     model a job trains: submit with --model NAME (one of {})",
                    names()
                ),
            ));
        }
        if caps.has(Capability::Io) && (s.model.is_none() || s.dataset_gb.is_none()) {
            let field = if s.model.is_none() {
                "model"
            } else {
                "dataset_gb"
            };
            return Err(ApiError::bad(
                field,
                format!(
                    "policy {policy} gives jobs cache and remote bandwidth by what they \
                     read: submit with --model NAME (one of {}) and --dataset-gb SIZE",
                    names()
                ),
            ));
        }
        Ok(())
    }

    /// Gives job `j` its model (GreenFlow's power limits read its network's Zeus
    /// curve), and its model's and dataset's data profile, which `cpu-workers` and `io`
    /// policies read.
    pub(super) fn give_model(&self, spec: &JobSpec, j: &mut Job) {
        if spec.model.is_none() {
            return;
        }
        j.model = spec.model.clone();
        j.extras_mut().dataset_gb = spec.dataset_gb;
        let caps = self.policy.capabilities();
        if caps.has(Capability::CpuWorkers) || caps.has(Capability::Io) {
            apiary_model::io::assign(std::slice::from_mut(j), 0);
        }
    }

    /// Brings the running jobs' records to the knobs the last pass left. Every running
    /// job has a CPU share, zero included (its agent then pins it to one CPU rather
    /// than leave it all of them), and a power limit, 1 when the policy set none.
    pub(super) fn take_knobs(&mut self) {
        self.world.resources.cpu_dirty.clear();
        self.world.resources.power_dirty.clear();
        if self.world.resources.cpu_pool.is_some() {
            self.sync_running(
                |w, j| {
                    w.resources
                        .cpu_shares
                        .get(j as usize)
                        .copied()
                        .unwrap_or(0.0)
                },
                |r| &mut r.cpus,
            );
        }
        if self.policy.capabilities().has(Capability::PowerLimits) {
            self.sync_running(
                |w, j| apiary_sim::power::limit(w, j, 1.0),
                |r| &mut r.power_limit,
            );
        }
        if self.world.resources.storage.is_some() {
            self.take_io_shares();
        }
        if self.world.resources.online_measured.is_some() {
            for k in 0..self.world.running().len() {
                let j = self.world.running()[k];
                let share = self.sm_share_of(j);
                let r = &mut self.jobs[j as usize];
                if r.sm_share != share {
                    r.sm_share = share;
                    self.dirty.insert(j);
                }
            }
        }
    }

    /// The running jobs' cache and bandwidth into their records. A job's cache is then
    /// taken as warm at its share (SiloD's uniform cache hits exactly its share of the
    /// dataset once filled): live, no model tracks its filling, and a pass that sees
    /// the warmer caches re-plans the bandwidth.
    fn take_io_shares(&mut self) {
        self.world.resources.io_dirty.clear();
        let w = &mut self.world;
        let n = w.jobs.len();
        if w.resources.io_hits.len() < n {
            w.resources.io_hits.resize(n, (0.0, 0));
        }
        let mut warmed = false;
        for k in 0..w.running().len() {
            let j = w.running()[k];
            let (cache, bandwidth) = w
                .resources
                .io_shares
                .get(j as usize)
                .copied()
                .unwrap_or_default();
            let share = Some(IoShare {
                cache_bytes: cache,
                remote_bytes_per_s: bandwidth,
            });
            let r = &mut self.jobs[j as usize];
            if r.io != share {
                r.io = share;
                self.dirty.insert(j);
            }
            let dataset = w.jobs[j as usize].extras().data.map_or(0.0, |d| d.dataset);
            let hit = if dataset > 0.0 {
                (cache / dataset).min(1.0)
            } else {
                1.0
            };
            let now = (hit, w.rt[j as usize].preemptions);
            if w.resources.io_hits[j as usize] != now {
                w.resources.io_hits[j as usize] = now;
                warmed = true;
            }
        }
        if warmed {
            w.resources.io_changes += 1;
            self.wake = Some(self.wake.map_or(w.now, |t| t.min(w.now)));
        }
    }

    /// Sets `field` of every running job's record to `value`, marking those it changes.
    fn sync_running(
        &mut self,
        value: impl Fn(&World, JobIdx) -> f64,
        field: fn(&mut JobRecord) -> &mut Option<f64>,
    ) {
        for &j in self.world.running() {
            let v = Some(value(&self.world, j));
            let f = field(&mut self.jobs[j as usize]);
            if *f != v {
                *f = v;
                self.dirty.insert(j);
            }
        }
    }

    /// Forgets job `j`'s knobs when its attempt stops.
    pub(super) fn drop_knobs(&mut self, j: JobIdx) {
        self.jobs[j as usize].cpus = None;
        self.jobs[j as usize].power_limit = None;
        self.jobs[j as usize].io = None;
        self.jobs[j as usize].sm_share = None;
    }

    /// The share of job `j`'s GPUs that are on node `n` (none if it has no part there):
    /// what a knob split over its nodes gives that node's agent.
    pub(super) fn part_on(&self, n: u32, j: JobIdx) -> Option<f64> {
        let name = &self.nodes[n as usize].name;
        let r = &self.jobs[j as usize];
        let all: usize = r.parts.iter().map(|p| p.gpus.len()).sum();
        let here = r.parts.iter().find(|p| &p.node == name)?.gpus.len();
        Some(here as f64 / all.max(1) as f64)
    }

    /// The shares of `jobs`, the attempts node `n` runs in id order: each job's share
    /// split over its nodes by their GPUs.
    pub(super) fn cpu_shares_on(&self, n: u32, jobs: &[JobIdx]) -> Vec<CpuShare> {
        if self.world.resources.cpu_pool.is_none() {
            return Vec::new();
        }
        jobs.iter()
            .filter_map(|&j| {
                let r = &self.jobs[j as usize];
                Some(CpuShare {
                    job: r.id,
                    attempt: r.attempt,
                    cpus: r.cpus? * self.part_on(n, j)?,
                })
            })
            .collect()
    }

    /// The power limits of `jobs`, the attempts node `n` runs in id order.
    pub(super) fn power_caps_on(&self, n: u32, jobs: &[JobIdx]) -> Vec<PowerCap> {
        jobs.iter()
            .filter_map(|&j| {
                let r = &self.jobs[j as usize];
                self.part_on(n, j)?;
                Some(PowerCap {
                    job: r.id,
                    attempt: r.attempt,
                    fraction: r.power_limit?,
                })
            })
            .collect()
    }

    /// The cache and bandwidth of `jobs`, the attempts node `n` runs in id order: each
    /// job's share split over its nodes by their GPUs.
    pub(super) fn io_grants_on(&self, n: u32, jobs: &[JobIdx]) -> Vec<IoGrant> {
        jobs.iter()
            .filter_map(|&j| {
                let r = &self.jobs[j as usize];
                let io = r.io?;
                let f = self.part_on(n, j)?;
                Some(IoGrant {
                    job: r.id,
                    attempt: r.attempt,
                    share: IoShare {
                        cache_bytes: io.cache_bytes * f,
                        remote_bytes_per_s: io.remote_bytes_per_s * f,
                    },
                })
            })
            .collect()
    }
}

//! Read-only views for the API, the dashboard and `/metrics`.

use super::{Core, Counters, GpuUse, PASS_BUCKETS, gpus_of};
use crate::types::{ClusterStatus, JobRecord, JobState, NodeHealth, NodeStatus};
use apiary_policy::vc::Sharing;
use apiary_policy::{Status, TenantWait};
use std::collections::BTreeMap;

impl Core {
    /// Utilisation samples, oldest first: (unix ms, GPUs allocated).
    pub fn utilisation(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.util.iter()
    }

    /// Every node's GPUs and what uses each, in config order.
    pub fn gpu_map(&self) -> Vec<(String, Vec<GpuUse>)> {
        let mut map: Vec<(String, Vec<GpuUse>)> = self
            .nodes
            .iter()
            .map(|n| {
                let mut v = vec![GpuUse::Free; n.gpus as usize];
                for (g, slot) in v.iter_mut().enumerate() {
                    if n.blocked & (1 << g) != 0 {
                        *slot = GpuUse::Blocked;
                    }
                }
                (n.name.clone(), v)
            })
            .collect();
        for &j in self.world.running() {
            let r = &self.jobs[j as usize];
            for p in &r.parts {
                if let Some(&n) = self.node_ix.get(&p.node) {
                    for &g in &p.gpus {
                        if let Some(slot) = map[n as usize].1.get_mut(g as usize) {
                            *slot = GpuUse::Job(r.id, r.vc.clone());
                        }
                    }
                }
            }
        }
        for (&(job, _, n), &mask) in &self.stopping {
            for g in gpus_of(mask) {
                if let Some(slot) = map[n as usize].1.get_mut(g as usize) {
                    *slot = GpuUse::Stopping(job);
                }
            }
        }
        for (n, slots) in map.iter_mut().enumerate() {
            for s in self.gpu_shares(n as u32) {
                if let Some(slot) = slots.1.get_mut(s.gpu as usize) {
                    *slot = GpuUse::Shared(
                        s.holders
                            .iter()
                            .map(|h| {
                                let vc = self.by_id.get(&h.job).map_or_else(String::new, |&j| {
                                    self.jobs[j as usize].vc.clone()
                                });
                                (h.job, vc, h.milli)
                            })
                            .collect(),
                    );
                }
            }
        }
        map
    }

    /// Records how long a scheduling pass took.
    pub fn observe_pass(&mut self, secs: f64) {
        let b = PASS_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(PASS_BUCKETS.len());
        self.counters.pass_buckets[b] += 1;
        self.counters.pass_sum += secs;
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Per configured VC, and per VC that jobs sit in without being configured (`default`,
    /// where jobs name none): its quota or cells, and its jobs queued and running.
    pub fn vcs(&self) -> Vec<serde_json::Value> {
        let mut names: Vec<&str> = self.cfg.vcs.iter().map(|v| v.name.as_str()).collect();
        for r in &self.jobs {
            if !names.contains(&r.vc.as_str()) {
                names.push(&r.vc);
            }
        }
        names
            .into_iter()
            .map(|name| {
                let conf = self.cfg.vcs.iter().find(|v| v.name == name);
                let (mut queued, mut running, mut gpus) = (0u64, 0u64, 0u64);
                for r in self.jobs.iter().filter(|r| r.vc == name) {
                    match r.state {
                        JobState::Queued => queued += 1,
                        JobState::Running => {
                            running += 1;
                            gpus += r.spec.gpus as u64;
                        }
                        _ => {}
                    }
                }
                serde_json::json!({
                    "name": name,
                    "sharing": self.cfg.sharing.map_or("none", Sharing::name),
                    "quota_gpus": conf.and_then(|v| v.quota_gpus),
                    "nodes": conf.and_then(|v| v.nodes),
                    "gpus_running": gpus,
                    "queued": queued,
                    "running": running,
                })
            })
            .collect()
    }

    /// Why a queued job waits, as squeue's REASON: `Dependency` (a job it names in
    /// `after_ok` has not succeeded yet), `QuotaExceeded` (its VC's share, a quota or
    /// its node cells, is taken: the tenancy says so), `Priority` (GPUs of its kind are free, but the policy started others or
    /// its placement does not fit), `Cordoned` (the GPUs it could use are on cordoned
    /// nodes), `GpuType` (GPUs are free, but not of the type it asks for), `Resources`
    /// (not enough free GPUs). `None` for a job that is not queued.
    pub fn reason(&self, r: &JobRecord) -> Option<&'static str> {
        (r.state == JobState::Queued).then(|| self.reason_in(&self.free_gpus(), r))
    }

    /// What every queued job's reason is worked out from, gathered once: free GPUs per
    /// type, so that listing many jobs costs one pass over the nodes, not one per job.
    pub(crate) fn free_gpus(&self) -> FreeGpus {
        let mut f = FreeGpus::default();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.health != NodeHealth::Up {
                continue;
            }
            let free = u64::from(self.world.state.free_on(i as u32));
            let t = f
                .by_type
                .entry(n.gpu_type.to_ascii_lowercase())
                .or_default();
            if n.cordoned {
                t.1 += free + n.blocked;
            } else {
                t.0 += free;
                t.1 += free;
                f.open += free;
            }
        }
        f
    }

    /// The reason of job `r` given `f` (from [`Core::free_gpus`]); `None` unless queued.
    pub(crate) fn reason_with(&self, f: &FreeGpus, r: &JobRecord) -> Option<&'static str> {
        (r.state == JobState::Queued).then(|| self.reason_in(f, r))
    }

    pub(super) fn reason_in(&self, f: &FreeGpus, r: &JobRecord) -> &'static str {
        if self.by_id.get(&r.id).is_some_and(|&j| self.is_held(j)) {
            return "Dependency";
        }
        if r.spec.gpu_milli.is_some() {
            let fits = self
                .by_id
                .get(&r.id)
                .is_some_and(|&j| self.share_place(j).is_some());
            return if fits { "Priority" } else { "Resources" };
        }
        let want = u64::from(r.spec.gpus);
        if let Some(tenants) = self.policy.tenants()
            && let Some(&j) = self.by_id.get(&r.id)
            && let Some(TenantWait::ShareTaken { .. }) =
                tenants.why_waits(&self.world.jobs[j as usize])
        {
            return "QuotaExceeded";
        }
        // Free GPUs of its type on open nodes, and counting cordoned nodes too.
        let (open, with_cordoned) = match &r.spec.gpu_type {
            None => (f.open, f.by_type.values().map(|t| t.1).sum::<u64>()),
            Some(t) => f
                .by_type
                .get(&t.to_ascii_lowercase())
                .copied()
                .unwrap_or((0, 0)),
        };
        if open >= want {
            "Priority"
        } else if with_cordoned >= want {
            "Cordoned"
        } else if r.spec.gpu_type.is_some() && f.open >= want {
            "GpuType"
        } else {
            "Resources"
        }
    }

    /// A copy of `r` with its pending reason, as the API shows it (the reason is not
    /// persisted: it is recomputed from the state at every read).
    pub fn shown(&self, r: &JobRecord) -> JobRecord {
        let mut out = r.clone();
        out.reason = self.reason(r).map(String::from);
        out
    }

    /// Copies of `records` with their pending reasons, worked out in one pass.
    pub fn shown_all(&self, records: &[&JobRecord]) -> Vec<JobRecord> {
        let f = self.free_gpus();
        records
            .iter()
            .map(|r| {
                let mut out = (*r).clone();
                out.reason =
                    (r.state == JobState::Queued).then(|| self.reason_in(&f, r).to_string());
                out
            })
            .collect()
    }

    /// Queued jobs per VC: every configured VC (or `default` when none is configured)
    /// and every VC jobs sit in, 0 where none waits, so a dashboard shows 0 rather than
    /// no data.
    pub fn queued_by_vc(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> =
            self.cfg.vcs.iter().map(|v| (v.name.clone(), 0)).collect();
        if m.is_empty() {
            m.insert("default".into(), 0);
        }
        for r in &self.jobs {
            m.entry(r.vc.clone()).or_insert(0);
        }
        for r in &self.jobs {
            if r.state == JobState::Queued {
                *m.entry(r.vc.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Node status.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        (0..self.nodes.len() as u32)
            .map(|n| {
                let node = &self.nodes[n as usize];
                let mut jobs: Vec<u64> = self
                    .running_on(n)
                    .iter()
                    .map(|&j| self.jobs[j as usize].id)
                    .collect();
                jobs.sort_unstable();
                NodeStatus {
                    name: node.name.clone(),
                    gpus: node.gpus,
                    gpu_type: node.gpu_type.clone(),
                    health: node.health,
                    cordoned: node.cordoned,
                    free_gpus: self.world.state.free_on(n),
                    jobs,
                    shares: self.gpu_shares(n),
                    services: self.service_loads(n),
                    last_heartbeat_ms: node.last_heartbeat,
                }
            })
            .collect()
    }

    /// Cluster summary.
    pub fn cluster(&self) -> ClusterStatus {
        let mut jobs = BTreeMap::new();
        for r in &self.jobs {
            *jobs.entry(r.state.as_str().to_string()).or_insert(0) += 1;
        }
        let mut nodes = BTreeMap::new();
        for n in &self.nodes {
            let h = match n.health {
                NodeHealth::Unknown => "unknown",
                NodeHealth::Up => "up",
                NodeHealth::Down => "down",
            };
            *nodes.entry(h.to_string()).or_insert(0) += 1;
        }
        ClusterStatus {
            policy: self.cfg.policy.clone(),
            params: self.params.0.clone(),
            gpus_total: self.world.cluster.total_gpus as u64,
            gpus_allocated: self.gpus_allocated(),
            jobs,
            nodes,
        }
    }

    pub(super) fn gpus_allocated(&self) -> u64 {
        let whole: u64 = self
            .world
            .running()
            .iter()
            .map(|&j| self.world.jobs[j as usize].gpus as u64)
            .sum();
        let shared: u64 = self
            .nodes
            .iter()
            .map(|n| u64::from(n.shared.count_ones()))
            .sum();
        whole + shared
    }

    /// Jobs waiting.
    pub fn queued(&self) -> usize {
        self.world.pending_count() + self.queued_shares()
    }

    /// Jobs in the world by status, for tests: (pending, running).
    pub fn counts(&self) -> (usize, usize) {
        (
            self.world.pending_count(),
            self.world
                .rt
                .iter()
                .filter(|r| r.status == Status::Running)
                .count(),
        )
    }
}

/// Free GPUs, for [`Core::reason`].
#[derive(Default)]
pub(crate) struct FreeGpus {
    /// Per GPU type (lowercase): free on open nodes, and free counting cordoned ones.
    by_type: BTreeMap<String, (u64, u64)>,
    /// Free on open nodes, any type.
    open: u64,
}

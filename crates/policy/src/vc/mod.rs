//! Tenants sharing one cluster: every job belongs to a virtual cluster (VC), each VC is
//! entitled to a number of nodes, and an intra-VC policy (FIFO, Tiresias, ...) orders
//! the VC's own jobs. Three ways to share, to compare on one trace:
//!
//! * `private`: each VC alone on its own nodes (a static partition), placed by HiveD's
//!   topology-aware packing inside the partition;
//! * `quota`: one shared cluster, each VC limited to its GPU count (YARN-CS style), jobs
//!   placed anywhere the hosted policy's placement finds GPUs; fragmentation can make a
//!   VC wait although its quota is free, the *sharing anomaly*;
//! * `hived`: one shared cluster, each VC's nodes as HiveD cells bound lazily by buddy
//!   cell allocation, so a VC can always place what fits its cells.
//!
//! The hosted policy runs unchanged in a scoped [`Ctx`]: it sees its VC's capacity and
//! jobs, and its starts go through the VC's [`Placer`].
//!
//! VC sizes come from `cells`: `demand` (default) gives each VC the nodes its largest job
//! needs, then the remaining nodes in proportion to the VC's GPU-time demand in the trace
//! (largest remainder, ties by VC name); or an explicit `vc:nodes,...` list.

mod placers;
mod table;

pub use placers::{HivedPlacer, QuotaPlacer, hived_config};
pub use table::{Assignment, TableError, assign};

use crate::ctx::{Ctx, Declared, Handles, Placer, Tenant};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, World};
use crate::{ParamError, Params, Policy, PolicyError, Tenancy, TenantShare, TenantWait};
use apiary_model::{Cluster, Job, Time};
use std::collections::BTreeMap;
/// `hived`: its spec.
pub const HIVED: PolicySpec = PolicySpec {
    name: "hived",
    about: "HiveD: VCs own node cells bound by buddy cell allocation on one shared cluster; `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Hived, p)?)),
};

/// `quota`: its spec.
pub const QUOTA: PolicySpec = PolicySpec {
    name: "quota",
    about: "VCs share the cluster under per-VC GPU quotas (YARN-CS style); `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Quota, p)?)),
};

/// `private`: its spec.
pub const PRIVATE: PolicySpec = PolicySpec {
    name: "private",
    about: "each VC alone on its own nodes (static partition, HiveD packing inside); `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Private, p)?)),
};

const VC_PARAMS: &[ParamSpec] = &[
    INTRA_PARAM,
    CELLS,
    ParamSpec {
        key: "intra.*",
        default: "-",
        about: "a parameter of the intra-VC policy, e.g. intra.thresholds=3250,7200",
    },
];
/// `intra`: the policy inside each VC.
pub const INTRA_PARAM: ParamSpec = ParamSpec {
    key: "intra",
    default: "tiresias",
    about: "policy inside each VC: fifo, sjf, srtf, srsf, tiresias, tiresias-gittins",
};
const CELLS: ParamSpec = ParamSpec {
    key: "cells",
    default: "demand",
    about: "nodes per VC: demand (largest job, then by GPU-time demand) or vc:nodes,...",
};

/// The VC of jobs whose trace names none.
pub const DEFAULT_VC: &str = "default";

/// How VCs share the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Each VC on its own nodes.
    Private,
    /// Shared nodes, per-VC GPU-count quota.
    Quota,
    /// Shared nodes, HiveD cells.
    Hived,
}

impl Sharing {
    /// Every way, in the order `apiary policies` lists them.
    pub const ALL: [Sharing; 3] = [Sharing::Hived, Sharing::Quota, Sharing::Private];

    /// Its name: the registry name of the policy that shares this way, and the value of
    /// `sharing` in `server.toml`.
    pub const fn name(self) -> &'static str {
        match self {
            Sharing::Private => "private",
            Sharing::Quota => "quota",
            Sharing::Hived => "hived",
        }
    }

    /// The way called `name`.
    pub fn parse(name: &str) -> Option<Sharing> {
        Sharing::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The spec of the policy that shares this way.
    pub const fn spec(self) -> &'static PolicySpec {
        match self {
            Sharing::Private => &PRIVATE,
            Sharing::Quota => &QUOTA,
            Sharing::Hived => &HIVED,
        }
    }

    /// Whether VCs own node cells (HiveD's, or a private partition's) rather than a
    /// GPU quota: their shares are bound to nodes, so they change only with the table.
    pub const fn cells(self) -> bool {
        !matches!(self, Sharing::Quota)
    }
}

impl std::fmt::Display for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Policies that can run inside a VC: those whose capabilities a tenant's share can
/// host ([`crate::Capability::in_tenant`]); the registry's tests check the list against
/// every spec.
pub const INTRA: &[PolicySpec] = &[
    crate::fifo::FIFO,
    crate::fifo::SJF,
    crate::srtf::SRTF,
    crate::srtf::SRSF,
    crate::tiresias::TIRESIAS,
    crate::tiresias::TIRESIAS_GITTINS,
];

fn intra_names() -> String {
    INTRA.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

enum Placers {
    None,
    Quota(QuotaPlacer),
    Shared(Box<HivedPlacer>),
    Private(Vec<HivedPlacer>),
}

/// Not in any tenant (a job admit refused).
const NO_VC: u32 = u32::MAX;

/// A VC-sharing policy hosting one intra-VC policy per VC.
pub struct VcSharing {
    spec: &'static PolicySpec,
    sharing: Sharing,
    intra: &'static PolicySpec,
    intra_params: Params,
    cells: String,
    table: Vec<TenantShare>,
    names: BTreeMap<String, u32>,
    node_names: Vec<String>,
    job_vc: Vec<u32>,
    tenants: Vec<Tenant>,
    intras: Vec<Box<dyn Policy>>,
    placers: Placers,
    dirty: Vec<bool>,
    wake: Vec<Time>,
}

impl std::fmt::Debug for VcSharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VcSharing")
            .field("sharing", &self.sharing)
            .field("intra", &self.intra.name)
            .field("table", &self.table)
            .finish()
    }
}

impl VcSharing {
    /// Parameters as [`QUOTA`] lists them: `intra` (an [`INTRA`] policy), `cells`, and
    /// `intra.KEY` passed to the intra policy.
    pub fn new(sharing: Sharing, p: &Params) -> Result<VcSharing, ParamError> {
        let name = p.text(&INTRA_PARAM);
        let intra = INTRA
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ParamError::Bad {
                key: "intra".into(),
                value: name.into(),
                message: format!("expected one of {}", intra_names()),
            })?;
        let mut intra_params = crate::hosted::hosted_params(p, "intra");
        // HiveD places a job's pods on as few nodes as its cells allow; a quota baseline
        // that scattered GPUs would compare against a weaker locality demand.
        if sharing == Sharing::Quota {
            intra_params
                .0
                .entry("placement".into())
                .or_insert_with(|| "consolidated".into());
        }
        // Fail now, not mid-run, on a bad intra parameter, naming it as the user wrote it.
        intra
            .build_checked(&intra_params)
            .map_err(|e| crate::hosted::prefixed(e, "intra"))?;
        let cells = p.text(&CELLS).to_string();
        if cells != "demand" {
            table::parse_cells(&cells).map_err(|e| ParamError::Bad {
                key: "cells".into(),
                value: cells.clone(),
                message: e.to_string(),
            })?;
        }
        Ok(VcSharing {
            spec: sharing.spec(),
            sharing,
            intra,
            intra_params,
            cells,
            table: Vec::new(),
            names: BTreeMap::new(),
            node_names: Vec::new(),
            job_vc: Vec::new(),
            tenants: Vec::new(),
            intras: Vec::new(),
            placers: Placers::None,
            dirty: Vec::new(),
            wake: Vec::new(),
        })
    }

    fn table_error(&self, reason: impl std::fmt::Display) -> PolicyError {
        PolicyError::Tenants {
            policy: self.spec.name,
            reason: reason.to_string(),
        }
    }

    fn build_intra(&self, cluster: &Cluster) -> Result<Box<dyn Policy>, PolicyError> {
        let mut p = self
            .intra
            .build_checked(&self.intra_params)
            .map_err(|e| self.table_error(e.to_string()))?;
        p.attach(cluster)?;
        Ok(p)
    }

    /// A tenant's capacity in GPUs: its quota, or its node cells' GPUs.
    fn capacity(&self, share: &TenantShare, node_gpus: u32) -> u64 {
        match self.sharing {
            Sharing::Quota => share.gpus,
            Sharing::Hived | Sharing::Private => share.nodes as u64 * node_gpus as u64,
        }
    }

    /// Job `j` gave its GPUs back (finished, or `pending` again): its VC's records and
    /// placer forget them. Returns the VC.
    fn left_gpus(&mut self, ctx: &Ctx<'_>, j: JobIdx, pending: bool) -> Option<usize> {
        let v = *self.job_vc.get(j as usize)?;
        if v == NO_VC {
            return None;
        }
        let v = v as usize;
        let g = ctx.job(j).gpus;
        if let Some((t, p)) = self.parts(v) {
            t.stopped(j, g, pending);
            p.release(j);
        }
        self.dirty[v] = true;
        Some(v)
    }

    /// VC `v`'s tenant record and placer; none before `attach`.
    fn parts(&mut self, v: usize) -> Option<(&mut Tenant, &mut dyn Placer)> {
        let p: &mut dyn Placer = match &mut self.placers {
            Placers::Quota(q) => q,
            Placers::Shared(h) => h.as_mut(),
            Placers::Private(ps) => ps.get_mut(v)?,
            Placers::None => return None,
        };
        Some((self.tenants.get_mut(v)?, p))
    }

    fn vc_of(&self, job: &Job) -> Option<usize> {
        self.names
            .get(job.vc.as_deref().unwrap_or(DEFAULT_VC))
            .map(|&v| v as usize)
    }
}

impl Policy for VcSharing {
    fn spec(&self) -> &'static PolicySpec {
        self.spec
    }

    fn tenancy(&mut self) -> Option<&mut dyn Tenancy> {
        Some(self)
    }

    fn tenants(&self) -> Option<&dyn Tenancy> {
        Some(self)
    }

    fn attach(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        let node_gpus = cluster.nodes.first().map_or(0, |n| n.gpus);
        if self.sharing != Sharing::Quota && cluster.nodes.iter().any(|n| n.gpus != node_gpus) {
            return Err(self.table_error(format!(
                "VC cells need nodes of one size; cluster {} mixes GPU counts per node",
                cluster.name
            )));
        }
        if self.table.is_empty() {
            return Err(self.table_error(
                "no VCs: the driver gives the table (the trace's demand in the simulator, \
                 [[vcs]] in server.toml)",
            ));
        }
        let nodes: u64 = self.table.iter().map(|t| t.nodes as u64).sum();
        if self.sharing != Sharing::Quota && nodes > cluster.nodes.len() as u64 {
            return Err(self.table_error(format!(
                "{nodes} nodes given but the cluster has {}",
                cluster.nodes.len()
            )));
        }
        self.names = self
            .table
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i as u32))
            .collect();
        self.tenants = self
            .table
            .iter()
            .map(|t| Tenant::new(self.capacity(t, node_gpus)))
            .collect();
        self.intras = (0..self.table.len())
            .map(|_| self.build_intra(cluster))
            .collect::<Result<_, _>>()?;
        self.dirty = vec![false; self.table.len()];
        self.wake = vec![Time::MAX; self.table.len()];
        self.node_names = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let vcs: Vec<(String, u32)> = self
            .table
            .iter()
            .map(|t| (t.name.clone(), t.nodes))
            .collect();
        let all: Vec<u32> = (0..cluster.nodes.len() as u32).collect();
        let placer = |nodes: &[u32], vcs: &[(String, u32)], racks: bool| {
            hived_config(cluster, nodes, vcs, racks)
                .and_then(|cfg| HivedPlacer::new(cluster, &cfg))
                .map_err(|reason| self.table_error(reason))
        };
        self.placers = match self.sharing {
            Sharing::Quota => Placers::Quota(QuotaPlacer),
            Sharing::Hived => Placers::Shared(Box::new(placer(&all, &vcs, true)?)),
            Sharing::Private => {
                // Static partition: VCs in table order take consecutive nodes.
                let mut next = 0u32;
                let mut ps = Vec::with_capacity(vcs.len());
                for (name, n) in &vcs {
                    let nodes: Vec<u32> = (next..next + n).collect();
                    next += n;
                    ps.push(placer(&nodes, &[(name.clone(), *n)], false)?);
                }
                Placers::Private(ps)
            }
        };
        Ok(())
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        let job = ctx.job(j);
        let refuse = |reason: String| PolicyError::Job {
            policy: self.spec.name,
            job: job.id.to_string(),
            reason,
        };
        let vc = job.vc.as_deref().unwrap_or(DEFAULT_VC);
        let Some(v) = self.vc_of(job) else {
            let known: Vec<&str> = self.names.keys().map(String::as_str).collect();
            return Err(refuse(format!(
                "VC {vc} is not in the tenant table ({})",
                known.join(", ")
            )));
        };
        let cap = self.tenants[v].capacity;
        if job.gpus as u64 > cap {
            return Err(refuse(format!(
                "it needs {} GPUs but VC {vc}'s share is {cap}",
                job.gpus
            )));
        }
        if self.job_vc.len() <= j as usize {
            self.job_vc.resize(j as usize + 1, NO_VC);
        }
        self.intras[v].admit(ctx, j)?;
        self.job_vc[j as usize] = v as u32;
        self.tenants[v].add_pending(job.gpus);
        self.dirty[v] = true;
        Ok(())
    }

    fn on_finish(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(v) = self.left_gpus(ctx, j, false) {
            self.intras[v].on_finish(ctx, j);
        }
    }

    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(v) = self.left_gpus(ctx, j, true) {
            self.intras[v].on_requeue(ctx, j);
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        let quota = self.sharing == Sharing::Quota;
        let mut wake = Time::MAX;
        let mut hosting = ctx.hosting()?;
        for v in 0..self.tenants.len() {
            // With quotas, GPUs freed by any VC can unblock a fragmented one; with cells
            // (shared or private) a VC's placements depend on its own jobs only.
            let due = self.dirty[v]
                || self.wake[v] <= now
                || (quota && self.tenants[v].pending_count() > 0);
            if due {
                self.dirty[v] = false;
                let mut intra = std::mem::replace(&mut self.intras[v], Box::new(Idle));
                let Some((t, p)) = self.parts(v) else {
                    self.intras[v] = intra;
                    return Ok(());
                };
                let mut woken = None;
                let result = intra.schedule(&mut hosting.host(
                    t,
                    p,
                    Declared::of(intra.as_ref()),
                    &mut woken,
                ));
                self.wake[v] = woken.unwrap_or(Time::MAX);
                self.intras[v] = intra;
                result?;
            }
            wake = wake.min(self.wake[v]);
        }
        if wake != Time::MAX {
            hosting.wake_at(wake);
        }
        Ok(())
    }
}

impl Tenancy for VcSharing {
    /// VC sizes by the `cells` parameter, each VC's share checked against its largest
    /// job.
    fn plan(&self, cluster: &Cluster, jobs: &[Job]) -> Result<Vec<TenantShare>, PolicyError> {
        let a = assign(cluster, jobs, &self.cells).map_err(|reason| self.table_error(reason))?;
        let g = a.node_gpus as u64;
        Ok(a.vcs
            .into_iter()
            .map(|(name, nodes)| TenantShare {
                name,
                nodes,
                gpus: nodes as u64 * g,
            })
            .collect())
    }

    fn set_table(&mut self, vcs: Vec<TenantShare>) {
        self.table = vcs;
    }

    fn set_share(&mut self, share: TenantShare) -> Result<(), PolicyError> {
        if self.sharing != Sharing::Quota {
            return Err(self.table_error(
                "VC cells are bound to physical cells: they change with the config and a restart",
            ));
        }
        match self.names.get(&share.name) {
            Some(&v) => {
                self.tenants[v as usize].capacity = share.gpus;
                self.dirty[v as usize] = true;
                self.table[v as usize] = share;
            }
            None => {
                let intra = self
                    .intra
                    .build_checked(&self.intra_params)
                    .map_err(|e| self.table_error(e.to_string()))?;
                self.names
                    .insert(share.name.clone(), self.table.len() as u32);
                self.tenants.push(Tenant::new(share.gpus));
                self.intras.push(intra);
                self.dirty.push(true);
                self.wake.push(Time::MAX);
                self.table.push(share);
            }
        }
        Ok(())
    }

    fn adopt(&mut self, world: &World, j: JobIdx) -> bool {
        let Some(&v) = self.job_vc.get(j as usize) else {
            return false;
        };
        if v == NO_VC {
            return false;
        }
        let v = v as usize;
        self.tenants[v].started(j, world.jobs[j as usize].gpus);
        self.dirty[v] = true;
        let placement = &world.rt[j as usize].placement;
        match &mut self.placers {
            Placers::Shared(h) => h.adopt(world, j, placement, &self.node_names),
            Placers::Private(ps) => ps[v].adopt(world, j, placement, &self.node_names),
            Placers::Quota(_) | Placers::None => true,
        }
    }

    fn node_health(&mut self, node: &str, healthy: bool) {
        match &mut self.placers {
            Placers::Shared(h) => h.set_node_health(node, healthy),
            Placers::Private(ps) => {
                for p in ps {
                    if p.has_node(node) {
                        p.set_node_health(node, healthy);
                    }
                }
            }
            Placers::Quota(_) | Placers::None => {}
        }
        self.refresh();
    }

    fn refresh(&mut self) {
        self.dirty.iter_mut().for_each(|d| *d = true);
    }

    fn why_waits(&self, job: &Job) -> Option<TenantWait> {
        let t = &self.tenants[self.vc_of(job)?];
        (t.used + u64::from(job.gpus) > t.capacity).then_some(TenantWait::ShareTaken {
            used: t.used,
            capacity: t.capacity,
        })
    }

    fn sharing(&self) -> Option<Sharing> {
        Some(self.sharing)
    }
}

/// Stands in for an intra policy while it is lent out for a call.
struct Idle;

const IDLE: PolicySpec = PolicySpec {
    name: "idle",
    about: "stands in for an intra-VC policy during its call",
    capabilities: Capabilities::CORE,
    params: &[],
    build: |_| Ok(Box::new(Idle)),
};

impl Policy for Idle {
    fn spec(&self) -> &'static PolicySpec {
        &IDLE
    }
    fn schedule(&mut self, _ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{ClusterSpec, Job};

    fn job(vc: &str, gpus: u32, secs: u64) -> Job {
        let mut j = Job::new(format!("{vc}{gpus}"), 0, gpus, secs * 1000);
        j.vc = Some(vc.into());
        j
    }

    fn world(cluster: &str, jobs: Vec<Job>) -> World {
        World::new(ClusterSpec::preset(cluster).unwrap().build().unwrap(), jobs)
    }

    #[test]
    fn demand_rule_gives_the_largest_job_then_shares_by_gpu_time() {
        // 10 nodes of 8. a: a 16-GPU job (2 nodes) and 100 GPU-s; b: 1 GPU, 300 GPU-s;
        // c: 1 GPU, 0 GPU-s. Minimums 2+1+1, the other 6 split 100:300:0 -> 1.5, 4.5, 0:
        // floors 1 and 4, one node left to the larger remainder (a and b tie at .5: a by
        // name).
        let w = world(
            "n10g8",
            vec![
                job("a", 16, 0),
                job("a", 1, 100),
                job("b", 1, 300),
                job("c", 1, 0),
            ],
        );
        let a = assign(&w.cluster, &w.jobs, "demand").unwrap();
        assert_eq!(
            a.vcs,
            vec![("a".into(), 4), ("b".into(), 5), ("c".into(), 1)]
        );
        assert_eq!(a.node_gpus, 8);
        assert_eq!(a.vcs.iter().map(|v| v.1).sum::<u32>(), 10);
    }

    #[test]
    fn explicit_cells_are_checked() {
        let w = world("n4g4", vec![job("a", 8, 1), job("b", 1, 1)]);
        assert_eq!(
            assign(&w.cluster, &w.jobs, "a:2,b:1").unwrap().vcs,
            vec![("a".into(), 2), ("b".into(), 1)]
        );
        let e = assign(&w.cluster, &w.jobs, "a:1,b:1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cells: VC a has 1 nodes but its largest job needs 8 GPUs (2 nodes)"
        );
        assert_eq!(
            assign(&w.cluster, &w.jobs, "a:2").unwrap_err(),
            TableError::Short {
                vc: "b".into(),
                have: 0,
                gpus: 1,
                need: 1
            }
        );
        assert_eq!(
            assign(&w.cluster, &w.jobs, "a:3,b:2").unwrap_err(),
            TableError::OverGiven { given: 5, nodes: 4 }
        );
        assert_eq!(
            assign(&w.cluster, &w.jobs, "a=2").unwrap_err(),
            TableError::NotVcNodes("a=2".into())
        );
        let tight = world("n2g4", vec![job("a", 8, 1), job("b", 4, 1)]);
        assert_eq!(
            assign(&tight.cluster, &tight.jobs, "demand").unwrap_err(),
            TableError::TooSmall { nodes: 2, need: 3 }
        );
        let mixed = World::new(
            ClusterSpec::preset("philly").unwrap().build().unwrap(),
            vec![job("a", 1, 1)],
        );
        assert!(assign(&mixed.cluster, &mixed.jobs, "demand").is_ok());
    }
}

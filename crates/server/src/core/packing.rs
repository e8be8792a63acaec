//! Jobs that share GPUs packed by one of FGD's policies (`share_policy`), live. The
//! policies score a node by its state as FGD's simulator keeps it: CPU, memory and each
//! GPU's thousandths left, and the pods it holds by GPU count. The service's nodes also
//! change by what the policies never see (whole-GPU jobs start and end, nodes go down,
//! processes confirm their end), so each share pass first sets every node's state from
//! what the service holds, and the scheduler scores again only the nodes that changed.
//!
//! Fragmentation is measured against the typical shapes (FGD's 95 % popularity) of the
//! jobs this server admitted, recovered records included: FGD takes them from the
//! workload's pod list, and a live service learns its workload as it arrives. A
//! whole-GPU job counts as one pod of its GPUs on one node (at most 8), and a job that
//! asks no CPU as a tenth of a core, as Kubernetes scores it.

use super::Core;
use crate::config::ServerConfig;
use crate::types::{JobSpec, NodeHealth};
use apiary_model::share::MAX_GPUS_PER_NODE;
use apiary_policy::{JobIdx, world::Status};
use apiary_share::{Demand, NodeState, Prepared, Request, Scheduler, Types};
use std::collections::BTreeMap;

/// FGD's popularity: the typical shapes cover this percentage of the jobs.
const POPULARITY: f64 = 95.0;
/// CPU thousandths Kubernetes scores a pod that asks none as taking.
const NONZERO_CPU_MILLI: i64 = 100;
/// The order tie-breaks follow (one fixed stream, so a replay places alike).
const SEED: u64 = 0;

/// A shape's key, ordered so that counting never depends on hash order.
type ShapeKey = (i64, i32, u8, u16);

/// The placement state of `share_policy`.
pub(super) struct Packer {
    sched: Scheduler,
    /// The constraint id of each GPU type (a job names at most one).
    spec_of: BTreeMap<String, u16>,
    /// Each node's type id.
    node_ty: Vec<u8>,
    /// Admitted jobs by shape.
    shapes: BTreeMap<ShapeKey, u64>,
    shapes_changed: bool,
}

impl Packer {
    /// The packer `cfg.share_policy` asks for, if any. The config was checked at load:
    /// a known policy, good parameters, nodes of at most 8 GPUs declaring CPU and memory.
    pub(super) fn of(cfg: &ServerConfig) -> Option<Packer> {
        let name = cfg.share_policy.as_deref()?;
        let policy =
            apiary_share::build(name, &apiary_policy::Params(cfg.share_params.clone())).ok()?;
        let mut types = Types::new();
        let mut spec_of = BTreeMap::new();
        let mut node_ty = Vec::with_capacity(cfg.nodes.len());
        for n in &cfg.nodes {
            node_ty.push(types.type_id(&n.gpu_type).ok()?);
            if !spec_of.contains_key(&n.gpu_type) {
                let id = types.spec_id(&[n.gpu_type.as_str().into()]);
                spec_of.insert(n.gpu_type.clone(), id);
            }
        }
        let prep = Prepared {
            types,
            nodes: vec![empty(); cfg.nodes.len()],
            pods: Vec::new(),
        };
        Some(Packer {
            sched: Scheduler::new(&prep, Vec::new(), policy, SEED),
            spec_of,
            node_ty,
            shapes: BTreeMap::new(),
            shapes_changed: false,
        })
    }

    /// What `s` asks of a node, as the policies score it and as the filter checks it.
    fn request(&self, s: &JobSpec) -> Request {
        let cpu = s.cpu_milli.unwrap_or(0) as i64;
        let (milli, num) = match s.gpu_milli {
            Some(m) => (m as i32, 1),
            None => (1000, s.gpus.min(MAX_GPUS_PER_NODE as u32) as u8),
        };
        Request {
            demand: Demand {
                cpu: if cpu == 0 { NONZERO_CPU_MILLI } else { cpu },
                milli,
                num,
                spec: s
                    .gpu_type
                    .as_ref()
                    .and_then(|t| self.spec_of.get(t).copied())
                    .unwrap_or(0),
            },
            cpu,
            mem: s.memory_mib.unwrap_or(0) as i64,
        }
    }

    /// Counts an admitted job's shape into the workload.
    pub(super) fn admit(&mut self, s: &JobSpec) {
        let d = self.request(s).demand;
        *self
            .shapes
            .entry((d.cpu, d.milli, d.num, d.spec))
            .or_insert(0) += 1;
        self.shapes_changed = true;
    }
}

/// A node with nothing left, until the first pass sets it.
fn empty() -> NodeState {
    NodeState {
        cpu_left: 0,
        cpu_cap: 0,
        mem_left: 0,
        gpu_left: [0; MAX_GPUS_PER_NODE],
        gpus: 0,
        ty: 0,
        affinity: [0; MAX_GPUS_PER_NODE + 1],
    }
}

impl Core {
    /// Counts job `j`'s shape into `share_policy`'s workload, if one packs.
    pub(super) fn admit_shape(&mut self, j: JobIdx) {
        if let Some(p) = &mut self.packer {
            p.admit(&self.jobs[j as usize].spec);
        }
    }

    /// Node `n` as the policies see it now, with `whole` its whole-GPU pods by count.
    fn node_state(&self, p: &Packer, n: u32, whole: &[u16]) -> NodeState {
        let cfg = &self.cfg.nodes[n as usize];
        let node = &self.nodes[n as usize];
        let (cpu_taken, mem_taken) = self.node_taken(n);
        let cap = i64::from(cfg.cpus.unwrap_or(0)) * 1000;
        let mut s = NodeState {
            cpu_left: cap - cpu_taken as i64,
            cpu_cap: cap,
            mem_left: i64::from(cfg.memory_gib.unwrap_or(0)) * 1024 - mem_taken as i64,
            gpus: node.gpus as u8,
            ty: p.node_ty[n as usize],
            ..empty()
        };
        s.affinity[1..].copy_from_slice(whole);
        let open = !node.cordoned && node.health != NodeHealth::Down;
        let free = self.world.state.free_mask(n);
        let mut holders = std::collections::BTreeSet::new();
        for g in 0..node.gpus.min(MAX_GPUS_PER_NODE as u32) {
            let bit = 1u64 << g;
            s.gpu_left[g as usize] = if !open {
                0
            } else if node.shared & bit != 0 {
                (super::shares::MILLI - self.used_milli(n, g)) as i32
            } else if free & bit != 0 {
                1000
            } else {
                0
            };
        }
        for h in self
            .shares
            .range((n, 0)..=(n, u32::MAX))
            .flat_map(|(_, v)| v)
        {
            holders.insert((h.job, h.attempt));
        }
        s.affinity[0] = holders.len().min(usize::from(u16::MAX)) as u16;
        s
    }

    /// Whole-GPU pods on each node by GPU count (`[k-1]`: pods of k GPUs), as FGD's
    /// GpuClustering groups them; a gang's part on a node counts as one pod.
    pub(super) fn whole_pods(&self) -> Vec<[u16; MAX_GPUS_PER_NODE]> {
        let mut out = vec![[0u16; MAX_GPUS_PER_NODE]; self.nodes.len()];
        for rt in self.world.rt.iter().filter(|r| r.status == Status::Running) {
            for &(n, mask) in &rt.placement.parts {
                let k = (mask.count_ones() as usize).clamp(1, MAX_GPUS_PER_NODE);
                let c = &mut out[n as usize][k - 1];
                *c = c.saturating_add(1);
            }
        }
        out
    }

    /// Sets every node's state in `p` to what the service holds now (`whole`: from
    /// [`Core::whole_pods`]), and the typical shapes if jobs were admitted since.
    pub(super) fn sync_packer(&self, p: &mut Packer, whole: &[[u16; MAX_GPUS_PER_NODE]]) {
        if p.shapes_changed {
            let counts = p.shapes.iter().map(|(&(cpu, milli, num, spec), &c)| {
                (
                    Demand {
                        cpu,
                        milli,
                        num,
                        spec,
                    },
                    c,
                )
            });
            let typical = apiary_share::typical_of_counts(counts, p.sched.types(), POPULARITY);
            p.sched.set_typical(typical);
            p.shapes_changed = false;
        }
        for n in 0..self.nodes.len() as u32 {
            let s = self.node_state(p, n, &whole[n as usize]);
            p.sched.set_node(n as usize, s);
        }
    }

    /// Where `p`'s policy puts job `j`: (node, GPU). The scheduler counts the job as
    /// placed there; the caller sets the node again from what it then holds.
    pub(super) fn pack(&self, p: &mut Packer, j: JobIdx) -> Option<(u32, u32)> {
        let r = p.request(&self.jobs[j as usize].spec);
        let at = p.sched.place(&r)?;
        let g = *at.pick.gpus().first()?;
        Some((at.node, u32::from(g)))
    }

    /// Sets node `n` in `p` again after a placement there.
    pub(super) fn resync_node(&self, p: &mut Packer, n: u32, whole: &[[u16; MAX_GPUS_PER_NODE]]) {
        let s = self.node_state(p, n, &whole[n as usize]);
        p.sched.set_node(n as usize, s);
    }
}

//! Placement-aware speed from collective planning: a data-parallel job's iteration is
//! its compute time plus the allreduce of its gradients, at the optimal (ForestColl)
//! bandwidth of the topology its placement induces ([`apiary_comm::cluster`]).
//!
//! The trace's duration is taken as the job's time on its most consolidated
//! placement (its GPUs packed on the fewest nodes of the type it runs on, under one
//! switch where they fit), so a packed job runs at trace speed and a spread one at
//! `(compute + allreduce packed) / (compute + allreduce here)`. Compute does not
//! overlap the allreduce and the allreduce is bandwidth bound (no latency term): the
//! model prices bandwidth, which is what placement changes. Gradients are fp32, four
//! bytes per parameter; [`MODELS`] lists the parameter counts and compute times.

use std::cell::RefCell;
use std::collections::BTreeMap;

use apiary_comm::PlacementError;
use apiary_comm::cluster::{Pricer, node_bandwidths, uplink_bandwidth};
use apiary_model::{Cluster, Job, Placement};

use crate::throughput::{RateError, Throughput};

/// A model's gradient size and compute time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelComm {
    /// Matched as a prefix of the job's model name, lower-cased, without `-`, `_` and
    /// spaces (so `resnet18-128` matches `resnet18128` before `resnet18`).
    pub key: &'static str,
    /// Parameters, millions.
    pub params_m: f64,
    /// One iteration's compute on one GPU, ms.
    pub compute_ms: f64,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The models the speed model knows, most specific key first. Compute times are V100
/// measurements: Muri's profile table (`simulator/jobs.py`, the 1-GPU iteration) for
/// its models, Gavel's `simulation_throughputs.json` (V100, 1 GPU, batch 32) for the
/// others. A job whose model is not here (or has none) is priced as ResNet-50.
pub const MODELS: &[ModelComm] = &[
    m("vgg16", 138.4, 107.0, "VGG-16; Muri vgg16-16"),
    m("vgg19", 143.7, 109.0, "VGG-19; Muri vgg19-16"),
    m("vgg", 138.4, 107.0, "as VGG-16"),
    m(
        "resnet18128",
        11.7,
        779.0,
        "ResNet-18; Muri resnet18-128 (input-bound)",
    ),
    m("resnet18", 11.7, 33.4, "ResNet-18; Gavel batch 32"),
    m(
        "shufflenet",
        2.3,
        798.0,
        "ShuffleNet v2 1.0x; Muri shufflenet_v2_x1_0-128",
    ),
    m("bert", 110.0, 178.0, "BERT-base; Muri bert-4"),
    m("gpt", 124.0, 426.0, "GPT-2 small; Muri gpt2-4"),
    m("a2c", 1.7, 517.0, "Nature-CNN actor-critic; Muri a2c-64"),
    m("dqn", 1.7, 490.0, "Nature-CNN DQN; Muri dqn-128"),
    m("a3c", 1.7, 139.4, "Nature-CNN actor-critic; Gavel A3C"),
    m(
        "cyclegan",
        28.3,
        225.9,
        "CycleGAN (2 generators, 2 discriminators); Gavel",
    ),
    m(
        "transformer",
        65.0,
        94.2,
        "Transformer base; Gavel batch 32",
    ),
    m("resnet50", 25.6, 128.4, "ResNet-50; Gavel batch 32"),
    m("resnet", 25.6, 128.4, "as ResNet-50"),
    m(
        "imagenet",
        25.6,
        128.4,
        "as ResNet-50 (Pollux's ImageNet job)",
    ),
    m(
        "inception",
        23.8,
        128.4,
        "Inception-v3; compute as ResNet-50",
    ),
    m("cifar", 11.7, 33.4, "as ResNet-18 (Pollux's CIFAR-10 job)"),
];

const fn m(key: &'static str, params_m: f64, compute_ms: f64, source: &'static str) -> ModelComm {
    ModelComm {
        key,
        params_m,
        compute_ms,
        source,
    }
}

/// The row for a model name (ResNet-50's for none or an unknown one), and whether the
/// name was known.
pub fn model_of(name: Option<&str>) -> (&'static ModelComm, bool) {
    let fallback = MODELS
        .iter()
        .find(|m| m.key == "resnet50")
        .expect("ResNet-50 is in the table");
    let Some(name) = name else {
        return (fallback, false);
    };
    let squashed: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    match MODELS.iter().find(|m| squashed.starts_with(m.key)) {
        Some(m) => (m, true),
        None => (fallback, false),
    }
}

/// The speed model (`--speed comm`).
#[derive(Debug)]
pub struct CommModel {
    pricer: RefCell<Pricer>,
    /// Per node, its class: nodes of one class are interchangeable for pricing.
    class: Vec<u32>,
    /// Per class, its nodes grouped by switch, the switches in order.
    members: Vec<Vec<Vec<u32>>>,
    /// Reference (packed) seconds per GB by (class, GPUs, switch of the first part).
    reference: RefCell<BTreeMap<(u32, u32, u32), f64>>,
}

impl CommModel {
    /// A model for `cluster`; fails if a bandwidth of its spec is not a positive number.
    pub fn new(cluster: &Cluster) -> Result<CommModel, PlacementError> {
        let mut classes: Vec<(String, u32, u128, u128, u128, u128)> = Vec::new();
        let mut class = Vec::with_capacity(cluster.nodes.len());
        for n in &cluster.nodes {
            let (intra, nic) = node_bandwidths(n)?;
            let key = (
                n.gpu_type.clone(),
                n.gpus,
                intra.num(),
                intra.den(),
                nic.num(),
                nic.den(),
            );
            let c = match classes.iter().position(|k| *k == key) {
                Some(c) => c,
                None => {
                    classes.push(key);
                    classes.len() - 1
                }
            };
            class.push(c as u32);
        }
        // Uplinks are checked when first priced; check them now instead.
        for s in &cluster.switches {
            uplink_bandwidth(s)?;
        }
        let mut members = vec![Vec::<Vec<u32>>::new(); classes.len()];
        let mut last_switch = vec![u32::MAX; classes.len()];
        for (i, n) in cluster.nodes.iter().enumerate() {
            let c = class[i] as usize;
            if last_switch[c] != n.switch {
                members[c].push(Vec::new());
                last_switch[c] = n.switch;
            }
            members[c].last_mut().expect("just pushed").push(i as u32);
        }
        Ok(CommModel {
            pricer: RefCell::new(Pricer::new()),
            class,
            members,
            reference: RefCell::new(BTreeMap::new()),
        })
    }

    /// `(distinct topologies solved, prices asked)`.
    pub fn stats(&self) -> (u64, u64) {
        self.pricer.borrow().stats()
    }

    fn price(&self, cluster: &Cluster, parts: &[(u32, u32)]) -> Result<f64, PlacementError> {
        self.pricer.borrow_mut().allreduce_s_per_gb(cluster, parts)
    }

    /// Seconds per GB for `gpus` GPUs packed on nodes of `node`'s class, starting
    /// with `node`'s switch.
    fn packed(&self, cluster: &Cluster, node: u32, gpus: u32) -> Result<f64, PlacementError> {
        let c = self.class[node as usize];
        let sw = cluster.nodes[node as usize].switch;
        let key = (c, gpus, sw);
        if let Some(&s) = self.reference.borrow().get(&key) {
            return Ok(s);
        }
        let per = cluster.nodes[node as usize].gpus;
        let groups = &self.members[c as usize];
        let first = groups
            .iter()
            .position(|g| cluster.nodes[g[0] as usize].switch == sw)
            .unwrap_or(0);
        let mut parts = Vec::new();
        let mut left = gpus;
        'fill: for g in groups[first..].iter().chain(&groups[..first]) {
            for &n in g {
                if left == 0 {
                    break 'fill;
                }
                let take = left.min(per);
                parts.push((n, take));
                left -= take;
            }
        }
        // A job larger than all nodes of its class has no packed reference but itself.
        let s = if left > 0 {
            f64::NAN
        } else {
            self.price(cluster, &parts)?
        };
        self.reference.borrow_mut().insert(key, s);
        Ok(s)
    }
}

impl Throughput for CommModel {
    fn rate(&self, job: &Job, placement: &Placement, cluster: &Cluster) -> Result<f64, RateError> {
        let n = placement.gpus();
        if n < 2 {
            return Ok(1.0);
        }
        let (m, _) = model_of(job.model.as_deref());
        let gb = m.params_m * 4e6 / 1e9;
        let compute = m.compute_ms / 1e3;
        let parts: Vec<(u32, u32)> = placement
            .parts
            .iter()
            .map(|&(node, mask)| (node, mask.count_ones()))
            .collect();
        let here = self.price(cluster, &parts)?;
        let packed = self.packed(cluster, parts[0].0, n)?;
        let packed = if packed.is_nan() { here } else { packed };
        Ok((compute + gb * packed) / (compute + gb * here))
    }
}

/// The topology placement strategy's scorer: a placement's optimal allreduce, seconds
/// per GB ([`Pricer::allreduce_s_per_gb`]); both drivers inject one into their world.
#[derive(Debug, Default)]
pub struct AllreduceScorer(Pricer);

impl apiary_policy::placement::Scorer for AllreduceScorer {
    fn score(&mut self, cluster: &Cluster, parts: &[(u32, u32)]) -> f64 {
        self.0
            .allreduce_s_per_gb(cluster, parts)
            .unwrap_or(f64::INFINITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{ClusterSpec, ClusterState};
    use apiary_policy::PlacementStrategy;
    use apiary_policy::placement::{self, Aux, place_with};

    /// The topology strategy with the scorer the drivers inject.
    fn topo(c: &Cluster, s: &ClusterState, gpus: u32, out: &mut Placement) -> bool {
        let scorer = std::sync::Mutex::new(Some(
            Box::new(AllreduceScorer::default()) as Box<dyn apiary_policy::placement::Scorer>
        ));
        let aux = Aux {
            seed: 0,
            job: "j",
            now: 0,
            scorer: &scorer,
        };
        place_with(c, s, gpus, PlacementStrategy::Topology, Some(aux), out)
    }

    #[test]
    fn topology_picks_the_best_type_then_the_tightest_node() {
        let c = apiary_model::ClusterSpec::from_toml_str(
            r#"
name = "two-types"
[[switches]]
[[switches.nodes]]
count = 2
gpus = 8
gpu_type = "K80"
[[switches.nodes]]
count = 2
gpus = 8
gpu_type = "A100"
"#,
            "t",
        )
        .unwrap()
        .build()
        .unwrap();
        let mut s = ClusterState::new(&c);
        // Node 3 (A100) has 4 free, node 2 (A100) 8; the K80 nodes are idle.
        s.allocate(&Placement {
            parts: vec![(3, 0x0f)],
        })
        .unwrap();
        let mut p = Placement::default();
        assert!(topo(&c, &s, 4, &mut p));
        assert_eq!(p.parts, vec![(3, 0xf0)], "A100 NVLink, tightest node");
        assert!(topo(&c, &s, 6, &mut p));
        assert_eq!(p.parts, vec![(2, 0x3f)]);
        // One GPU has no allreduce: any type, the tightest node.
        assert!(topo(&c, &s, 1, &mut p));
        assert_eq!(p.parts, vec![(3, 0x10)]);
    }

    #[test]
    fn topology_splits_evenly_when_the_nic_is_the_limit() {
        // 12 GPUs on A100 nodes with 8, 8 and 4 free: 8 + 4 leaves the 4-GPU part with
        // half a node's NICs for 8 shards; 6 + 6 gives each side 6 × 25 GB/s.
        let c = apiary_model::ClusterSpec::preset("n3g8-A100")
            .unwrap()
            .build()
            .unwrap();
        let mut s = ClusterState::new(&c);
        s.allocate(&Placement {
            parts: vec![(0, 0x0f)],
        })
        .unwrap();
        let mut p = Placement::default();
        assert!(topo(&c, &s, 12, &mut p));
        let counts: Vec<(u32, u32)> = p.parts.iter().map(|&(n, m)| (n, m.count_ones())).collect();
        assert_eq!(counts, vec![(1, 6), (2, 6)]);
        assert!(placement::place(
            &c,
            &s,
            12,
            PlacementStrategy::Consolidated,
            &mut p
        ));
        let counts: Vec<u32> = p.parts.iter().map(|&(_, m)| m.count_ones()).collect();
        assert_eq!(
            counts,
            vec![4, 8],
            "yarn takes a whole node and a remainder"
        );
        assert!(!topo(&c, &s, 21, &mut p));
        assert!(topo(&c, &s, 20, &mut p));
        assert_eq!(p.gpus(), 20);
    }

    #[test]
    fn names_find_their_rows() {
        let key = |n| model_of(Some(n)).0.key;
        assert_eq!(key("resnet18-128"), "resnet18128");
        assert_eq!(key("ResNet-18 (batch size 32)"), "resnet18");
        assert_eq!(key("ResNet-50 (batch size 64)"), "resnet50");
        assert_eq!(key("gpt2-4"), "gpt");
        assert_eq!(key("vgg19-16"), "vgg19");
        assert_eq!(model_of(Some("ncf")), (model_of(None).0, false));
        assert!(model_of(Some("bert")).1);
        // Every key is reachable: no earlier key is a prefix of a later one.
        for (i, a) in MODELS.iter().enumerate() {
            for b in &MODELS[..i] {
                assert!(!a.key.starts_with(b.key), "{} hidden by {}", a.key, b.key);
            }
        }
    }

    fn place(parts: &[(u32, u32)]) -> Placement {
        let mut p = Placement::default();
        for &(n, g) in parts {
            p.add(n, (1u64 << g) - 1);
        }
        p
    }

    #[test]
    fn packed_runs_at_trace_speed_and_spread_slower() {
        let c = ClusterSpec::preset("n8g8-A100").unwrap().build().unwrap();
        let m = CommModel::new(&c).unwrap();
        let mut j = Job::new("j", 0, 16, 1000);
        j.model = Some("vgg16".into());
        assert_eq!(m.rate(&j, &place(&[(0, 8), (1, 8)]), &c).unwrap(), 1.0);
        assert_eq!(m.rate(&j, &place(&[(5, 8), (6, 8)]), &c).unwrap(), 1.0);
        // 16 GPUs as 4 + 4 + 8: the 4-GPU parts get half a node's NICs. VGG-16 at
        // 0.5536 GB of gradients: packed, 15/325 + 15/325 s per GB over 16 ranks, spread,
        // 12/100 (12 shards into 4 GPUs through 4 × 25 GB/s) twice over 16.
        let r = m.rate(&j, &place(&[(0, 4), (1, 4), (2, 8)]), &c).unwrap();
        let gb = 138.4 * 4e6 / 1e9;
        let packed = 0.107 + gb * (2.0 * 15.0 / 325.0) / 16.0;
        let spread = 0.107 + gb * (2.0 * 12.0 / 100.0) / 16.0;
        assert!(
            (r - packed / spread).abs() < 1e-12,
            "{r} vs {}",
            packed / spread
        );
        assert!(r < 1.0);
        // One GPU, or one node: trace speed.
        assert_eq!(m.rate(&j, &place(&[(3, 1)]), &c).unwrap(), 1.0);
        j.gpus = 4;
        assert_eq!(m.rate(&j, &place(&[(3, 4)]), &c).unwrap(), 1.0);
        // 4 GPUs over two nodes: slower, by the NIC.
        assert!(m.rate(&j, &place(&[(3, 2), (4, 2)]), &c).unwrap() < 1.0);
        let (solved, asked) = m.stats();
        assert!(solved < asked, "isomorphic placements are solved once");
    }

    #[test]
    fn bad_bandwidths_are_refused_up_front() {
        let mut c = ClusterSpec::preset("n2g8").unwrap().build().unwrap();
        c.switches[0].uplink_gbps = Some(0.0);
        assert!(CommModel::new(&c).is_err());
    }
}

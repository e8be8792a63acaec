//! The one table of built-in policies. `apiary policies`, the docs and parameter
//! validation all read it, so a policy's name, summary and knobs are written once.

use crate::antman::AntMan;
use crate::elasticflow::ElasticFlow;
use crate::fifo::{Order, Queue};
use crate::gandiva::Gandiva;
use crate::gavel::{Gavel, Objective};
use crate::muri::Muri;
use crate::srtf::Srtf;
use crate::themis::Themis;
use crate::tiresias::Tiresias;
use crate::vc::{Sharing, VcSharing};
use crate::{ParamError, Params, Policy};

/// One parameter of a policy.
#[derive(Debug)]
pub struct ParamSpec {
    /// Key for `--set key=value`.
    pub key: &'static str,
    /// Default, as text.
    pub default: &'static str,
    /// What it does.
    pub about: &'static str,
}

/// A registered policy.
#[derive(Debug)]
pub struct PolicySpec {
    /// Name on the command line.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// Whether it reads job durations (an oracle a real scheduler lacks).
    pub needs_durations: bool,
    /// Whether it reads per-job stage profiles (Muri): the driver gives jobs without
    /// them one from `apiary_model::profiles` before the run.
    pub needs_profiles: bool,
    /// Parameters.
    pub params: &'static [ParamSpec],
    /// Constructor.
    pub build: fn(&Params) -> Result<Box<dyn Policy>, ParamError>,
}

const BACKFILL_OFF: ParamSpec = ParamSpec {
    key: "backfill",
    default: "false",
    about: "start later jobs that fit when the head of the queue does not",
};
const BACKFILL_ON: ParamSpec = ParamSpec {
    key: "backfill",
    default: "true",
    about: "start lower-priority jobs that fit past one that does not (the artifacts' first-fit)",
};
const PLACE_CONS: ParamSpec = ParamSpec {
    key: "placement",
    default: "consolidated",
    about: "counting | consolidated (yarn) | best-fit | random | topology",
};
const PLACE_COUNT: ParamSpec = ParamSpec {
    key: "placement",
    default: "counting",
    about: "counting | consolidated (yarn) | best-fit | random | topology",
};
const TIRESIAS_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "thresholds",
        default: "3250,7200",
        about: "queue thresholds in GPU-seconds (Pollux's baseline uses 57600)",
    },
    ParamSpec {
        key: "starvation",
        default: "0",
        about: "promote a job to queue 0 after waiting this many times its executed time (0 = off)",
    },
    ParamSpec {
        key: "gittins",
        default: "false",
        about: "order each queue by Gittins index instead of arrival",
    },
    ParamSpec {
        key: "gittins_delta",
        default: "3250",
        about: "Gittins quantum, GPU-seconds",
    },
    BACKFILL_ON,
    PLACE_COUNT,
];

const GAVEL_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "perf",
        default: "true",
        about: "give the allocation program each job's throughput per GPU type (false: the same on every type, Gavel's agnostic baseline)",
    },
    ParamSpec {
        key: "round",
        default: "360",
        about: "round length, seconds",
    },
    ParamSpec {
        key: "reset",
        default: "1920",
        about: "least time between allocation recomputations, seconds (the artifact's minimum_time_between_allocation_resets)",
    },
    ParamSpec {
        key: "seed",
        default: "0",
        about: "the artifact's --seed: the agnostic variants shuffle GPU types each round with CPython's random.Random(seed + 5)",
    },
];

fn keys(ps: &[ParamSpec]) -> Vec<&'static str> {
    ps.iter().map(|p| p.key).collect()
}

/// Every built-in policy.
pub const BUILTIN: &[PolicySpec] = &[
    PolicySpec {
        name: "fifo",
        about: "first in, first out; non-preemptive",
        needs_durations: false,
        needs_profiles: false,
        params: &[BACKFILL_OFF, PLACE_CONS],
        build: |p| Ok(Box::new(Queue::new(Order::Fifo, p)?)),
    },
    PolicySpec {
        name: "sjf",
        about: "shortest job first by duration; non-preemptive (oracle)",
        needs_durations: true,
        needs_profiles: false,
        params: &[BACKFILL_OFF, PLACE_CONS],
        build: |p| Ok(Box::new(Queue::new(Order::Sjf, p)?)),
    },
    PolicySpec {
        name: "srtf",
        about: "shortest remaining time first; preemptive (oracle; Muri's `shortest`)",
        needs_durations: true,
        needs_profiles: false,
        params: &[BACKFILL_ON, PLACE_CONS],
        build: |p| Ok(Box::new(Srtf::new(false, p)?)),
    },
    PolicySpec {
        name: "srsf",
        about: "shortest remaining GPU-service (time x GPUs) first; preemptive (oracle; Muri's `shortest-gpu`)",
        needs_durations: true,
        needs_profiles: false,
        params: &[BACKFILL_ON, PLACE_CONS],
        build: |p| Ok(Box::new(Srtf::new(true, p)?)),
    },
    PolicySpec {
        name: "tiresias",
        about: "Tiresias discretized 2D-LAS: multi-level queues on attained GPU-time; no job knowledge",
        needs_durations: false,
        needs_profiles: false,
        params: TIRESIAS_PARAMS,
        build: |p| Ok(Box::new(Tiresias::new(p, false)?)),
    },
    PolicySpec {
        name: "tiresias-gittins",
        about: "Tiresias discretized 2D-Gittins: queues ordered by Gittins index of the GPU-time distribution",
        needs_durations: false,
        needs_profiles: false,
        params: TIRESIAS_PARAMS,
        build: |p| Ok(Box::new(Tiresias::new(p, true)?)),
    },
    PolicySpec {
        name: "gandiva",
        about: "Gandiva as the Tiresias/ElasticFlow artifacts emulate it: node-sets per job size, 60 s time slicing",
        needs_durations: false,
        needs_profiles: false,
        params: &[
            ParamSpec {
                key: "quantum",
                default: "60",
                about: "time-slice length in seconds (round robin inside a node-set)",
            },
            ParamSpec {
                key: "tick",
                default: "10",
                about: "seconds between node-set adjustments (the Tiresias artifact's step)",
            },
            ParamSpec {
                key: "quirks",
                default: "true",
                about: "keep the artifact's strict join, stale loads, skipped growth rearrangement and retry skip",
            },
            ParamSpec {
                key: "clock",
                default: "tiresias",
                about: "whose loop: tiresias (adjust every tick, rotate every quantum) | elasticflow (decide at slot-merged arrivals, rotate only on a quantum multiple, ElasticFlow's per-round overheads)",
            },
            ParamSpec {
                key: "slot",
                default: "60",
                about: "with clock=elasticflow: the scheduling slot, seconds (240 in ElasticFlow's Figs. 9-11)",
            },
        ],
        build: |p| Ok(Box::new(Gandiva::new(p)?)),
    },
    PolicySpec {
        name: "muri-s",
        about: "Muri: same-size jobs interleave stages on shared GPUs, grouped by blossom matching; remaining GPU-time first (oracle)",
        needs_durations: true,
        needs_profiles: true,
        params: MURI_PARAMS,
        build: |p| Ok(Box::new(Muri::new(true, p)?)),
    },
    PolicySpec {
        name: "muri-l",
        about: "Muri: interleaved groups by blossom matching; least attained GPU-time first (no job knowledge)",
        needs_durations: false,
        needs_profiles: true,
        params: MURI_PARAMS,
        build: |p| Ok(Box::new(Muri::new(false, p)?)),
    },
    PolicySpec {
        name: "themis",
        about: "Themis as Muri's baseline: finish-time fairness solved at every event, then chosen by share over time run and placed largest first",
        needs_durations: true,
        needs_profiles: false,
        params: THEMIS_PARAMS,
        build: |p| Ok(Box::new(Themis::new(p)?)),
    },
    PolicySpec {
        name: "antman",
        about: "AntMan as Muri's baseline: guaranteed jobs first-come first-served on their own GPUs, opportunistic jobs as guests on lightly loaded GPUs, slowed by the job under them",
        needs_durations: false,
        needs_profiles: true,
        params: ANTMAN_PARAMS,
        build: |p| Ok(Box::new(AntMan::new(p)?)),
    },
    PolicySpec {
        name: "gavel",
        about: "Gavel's max-min fairness (LAS): heterogeneity-aware time shares from an LP, realised in 360 s rounds (`perf=false`: Gavel's agnostic baseline)",
        needs_durations: false,
        needs_profiles: false,
        params: GAVEL_PARAMS,
        build: |p| Ok(Box::new(Gavel::new(Objective::MaxMinFairness, p)?)),
    },
    PolicySpec {
        name: "gavel-makespan",
        about: "Gavel's minimum total duration: time shares that finish the active jobs soonest, realised in 360 s rounds (oracle; `perf=false`: agnostic)",
        needs_durations: true,
        needs_profiles: false,
        params: GAVEL_PARAMS,
        build: |p| Ok(Box::new(Gavel::new(Objective::MinTotalDuration, p)?)),
    },
    PolicySpec {
        name: "elasticflow",
        about: "ElasticFlow: deadline jobs admitted only if every promise still holds (minimum satisfactory shares), spare GPUs by marginal return, buddy placement",
        needs_durations: true,
        needs_profiles: false,
        params: ELASTICFLOW_PARAMS,
        build: |p| Ok(Box::new(ElasticFlow::new(true, p)?)),
    },
    PolicySpec {
        name: "edf",
        about: "EDF, ElasticFlow's baseline: deadline order, each job at its largest GPU level; `admission=true` is its EDF + admission control",
        needs_durations: true,
        needs_profiles: false,
        params: EDF_PARAMS,
        build: |p| Ok(Box::new(ElasticFlow::edf(p)?)),
    },
    PolicySpec {
        name: "pollux",
        about: "Pollux: genetic search over replica placements maximising the power mean of goodput speed-ups; jobs tune their own batch (Pollux workloads)",
        needs_durations: false,
        needs_profiles: false,
        params: POLLUX_PARAMS,
        build: |p| Ok(Box::new(crate::pollux::Pollux::new(p)?)),
    },
    PolicySpec {
        name: "hived",
        about: "HiveD: VCs own node cells bound by buddy cell allocation on one shared cluster; `intra` orders each VC",
        needs_durations: false,
        needs_profiles: false,
        params: VC_PARAMS,
        build: |p| Ok(Box::new(VcSharing::new(Sharing::Hived, p)?)),
    },
    PolicySpec {
        name: "quota",
        about: "VCs share the cluster under per-VC GPU quotas (YARN-CS style); `intra` orders each VC",
        needs_durations: false,
        needs_profiles: false,
        params: VC_PARAMS,
        build: |p| Ok(Box::new(VcSharing::new(Sharing::Quota, p)?)),
    },
    PolicySpec {
        name: "private",
        about: "each VC alone on its own nodes (static partition, HiveD packing inside); `intra` orders each VC",
        needs_durations: false,
        needs_profiles: false,
        params: VC_PARAMS,
        build: |p| Ok(Box::new(VcSharing::new(Sharing::Private, p)?)),
    },
];

const ANTMAN_PARAMS: &[ParamSpec] = &[ParamSpec {
    key: "opportunistic",
    default: "muri",
    about: "which jobs are opportunistic: muri (trace priority 1, Muri's traces) | negative (priority < 0)",
}];

const ELASTICFLOW_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "admission",
        default: "true",
        about: "decline arrivals whose deadline cannot be met (false: the artifact's `ef` ablation, admit all)",
    },
    ParamSpec {
        key: "slot",
        default: "60",
        about: "scheduling slot, seconds (the artifact's --scheduling_slot: 60 in the large simulations, 240 on the testbed)",
    },
    ParamSpec {
        key: "greedy",
        default: "artifact",
        about: "leftover GPUs by: artifact (change in planned GPU-seconds per added GPU, largest first) | throughput (iterations/s gained per added GPU)",
    },
    ParamSpec {
        key: "overhead",
        default: "true",
        about: "charge the artifact's per-round scaling and restart overheads",
    },
    ParamSpec {
        key: "hold",
        default: "true without admission",
        about: "end each job at its plan's slot-aligned end, holding its GPUs until then (the artifact's `ef` loop, whose deadline check uses that end)",
    },
];

const EDF_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "admission",
        default: "false",
        about: "admit an arrival only if every job's EDF plan still meets its deadline (the artifact's `edf-accessctrl`)",
    },
    ParamSpec {
        key: "slot",
        default: "60",
        about: "scheduling slot, seconds (the artifact's --scheduling_slot)",
    },
    ParamSpec {
        key: "overhead",
        default: "same as admission",
        about: "charge ElasticFlow's per-round scaling and restart overheads (the artifact charges them under `edf-accessctrl`, not under `edf`)",
    },
];

const POLLUX_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "interval",
        default: "60",
        about: "seconds between reallocations (the artifact's --interval); jobs also advance in steps of it",
    },
    ParamSpec {
        key: "population",
        default: "100",
        about: "NSGA-II population (the artifact's pop_size)",
    },
    ParamSpec {
        key: "generations",
        default: "100",
        about: "NSGA-II generations per interval (the artifact's n_gen)",
    },
    ParamSpec {
        key: "seed",
        default: "0",
        about: "seed of the search's random stream (the artifact's NumPy draws are unseeded)",
    },
];

const THEMIS_PARAMS: &[ParamSpec] = &[ParamSpec {
    key: "isolated",
    default: "artifact",
    about: "isolated time in the ratio: artifact (counted in iterations, the artifact's bug) | time",
}];

const MURI_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "ordering",
        default: "best",
        about: "cyclic order of a group's stages: best | worst (ablation) | index",
    },
    ParamSpec {
        key: "blossom",
        default: "true",
        about: "group by maximum-weight matching; false: candidates in chunks of `group` (ablation)",
    },
    ParamSpec {
        key: "group",
        default: "4",
        about: "the artifact's packing_num: largest group, candidates per slot, matching rounds (1 to 4; the ablations use 2 and 3)",
    },
    ParamSpec {
        key: "autopack",
        default: "true",
        about: "split a group whose interleaving is slower than time-sharing",
    },
];

const VC_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "intra",
        default: "tiresias",
        about: "policy inside each VC: fifo, sjf, srtf, srsf, tiresias, tiresias-gittins",
    },
    ParamSpec {
        key: "cells",
        default: "demand",
        about: "nodes per VC: demand (largest job, then by GPU-time demand) or vc:nodes,...",
    },
    ParamSpec {
        key: "intra.*",
        default: "-",
        about: "a parameter of the intra-VC policy, e.g. intra.thresholds=3250,7200",
    },
];

/// Looks a policy up by name.
pub fn find(name: &str) -> Option<&'static PolicySpec> {
    BUILTIN.iter().find(|s| s.name == name)
}

/// Builds a policy by name, rejecting unknown parameters.
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Policy>, ParamError> {
    let spec = find(name).ok_or_else(|| ParamError::Unknown {
        policy: name.into(),
        key: "(policy name)".into(),
        known: BUILTIN
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    params.check_known(spec.name, &keys(spec.params))?;
    (spec.build)(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_policy_builds_with_defaults_and_rejects_typos() {
        for s in BUILTIN {
            let p = build(s.name, &Params::default()).unwrap();
            assert_eq!(p.name(), s.name);
            let bad = Params::from_pairs(["no_such_knob=1"]).unwrap();
            assert!(matches!(
                build(s.name, &bad),
                Err(ParamError::Unknown { .. })
            ));
        }
        assert!(build("nope", &Params::default()).is_err());
        let index = include_str!("../../../docs/policies/README.md");
        for s in BUILTIN {
            assert!(
                index.contains(&format!(" {},", s.name))
                    || index.contains(&format!(" {} ", s.name)),
                "docs/policies/README.md does not list {}",
                s.name
            );
        }
        let bad = Params::from_pairs(["placement=sideways"]).unwrap();
        assert!(build("fifo", &bad).is_err());
    }

    /// Every time parameter (in seconds) beyond the 10^12 s input limit, and every
    /// count that sizes a search, is refused by name instead of wrapping the clock or
    /// exhausting memory.
    #[test]
    fn absurd_time_and_size_parameters_are_refused() {
        let huge = "1e300";
        for (policy, key) in [
            ("gavel", "round"),
            ("gavel", "reset"),
            ("pollux", "interval"),
            ("tiresias", "thresholds"),
            ("tiresias-gittins", "gittins_delta"),
            ("gandiva", "quantum"),
            ("gandiva", "tick"),
            ("elasticflow", "slot"),
            ("pollux", "population"),
            ("pollux", "generations"),
        ] {
            let value = if matches!(key, "slot" | "population" | "generations") {
                "1000000000000000000"
            } else {
                huge
            };
            let p = Params::from_pairs([format!("{key}={value}").as_str()]).unwrap();
            match build(policy, &p) {
                Err(ParamError::Bad { key: k, .. }) => assert_eq!(k, key, "{policy}"),
                Err(e) => panic!("{policy} {key}: {e}"),
                Ok(_) => panic!("{policy} accepted {key}={value}"),
            }
        }
        let ok = Params::from_pairs(["thresholds=1,1000000000000"]).unwrap();
        assert!(build("tiresias", &ok).is_ok());
    }
}

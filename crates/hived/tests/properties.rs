//! Property tests of hived.md §9 over random sequences of gang submissions (guaranteed,
//! opportunistic, lazily preemptible), preemptions, deletions and node health events,
//! checking every invariant after every call, then recovery and full release.

use std::collections::BTreeMap;

use apiary_hived::{
    BindInfo, Config, Decision, GroupSpec, Hived, MemberSpec, Phase, PodSpec, Suggested,
};
use proptest::prelude::*;

const CONFIG: &str = r#"
physicalCluster:
  cellTypes:
    S: {childCellType: G, childCellNumber: 2}
    N: {childCellType: S, childCellNumber: 2, isNodeLevel: true}
    R: {childCellType: N, childCellNumber: 2}
  physicalCells:
  - {cellType: R, cellChildren: [{cellAddress: n0}, {cellAddress: n1}]}
  - {cellType: R, cellChildren: [{cellAddress: n2}, {cellAddress: n3}]}
  - {cellType: N, cellAddress: n4}
virtualClusters:
  a: {virtualCells: [{cellType: R.N, cellNumber: 1}, {cellType: R.N.S, cellNumber: 2}]}
  b: {virtualCells: [{cellType: R, cellNumber: 1}]}
  c: {virtualCells: [{cellType: N, cellNumber: 1}]}
"#;

const NODES: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];
const VCS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Submit {
        vc: usize,
        prio: i64,
        size: i64,
        pods: i64,
        lazy: bool,
    },
    Delete(usize),
    Bad(usize),
    Healthy(usize),
}

fn submit_or_delete() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, -1..4i64, prop::sample::select(vec![1i64, 2, 4, 8]), 1..3i64, any::<bool>())
            .prop_map(|(vc, prio, size, pods, lazy)| Op::Submit { vc, prio, size, pods, lazy }),
        3 => any::<usize>().prop_map(Op::Delete),
    ]
}

fn with_health() -> impl Strategy<Value = Op> {
    prop_oneof![
        9 => submit_or_delete(),
        1 => (0..5usize).prop_map(Op::Bad),
        1 => (0..5usize).prop_map(Op::Healthy),
    ]
}

struct World {
    h: Hived,
    /// group -> pods (name, spec, bind info)
    running: BTreeMap<String, Vec<(String, PodSpec, BindInfo)>>,
    prio: BTreeMap<String, (String, i64)>,
    next: usize,
    health_events: bool,
}

impl World {
    fn check(&self, what: &str) -> Result<(), TestCaseError> {
        let v = self.h.check_invariants();
        if std::env::var("HIVED_DUMP").is_ok() {
            eprintln!("== after {what}\n{}", self.h.debug_dump());
        }
        prop_assert!(v.is_empty(), "after {what}: {v:#?}");
        Ok(())
    }

    fn delete_group(&mut self, g: &str) {
        if let Some(pods) = self.running.remove(g) {
            for (p, s, b) in pods {
                self.h.delete_allocated_pod(&p, &s, &b).unwrap();
            }
        }
    }

    fn submit(
        &mut self,
        vc: usize,
        prio: i64,
        size: i64,
        pods: i64,
        lazy: bool,
    ) -> Result<(), TestCaseError> {
        self.next += 1;
        let g = format!("g{}", self.next);
        let spec = PodSpec {
            virtual_cluster: VCS[vc].into(),
            priority: prio,
            pinned_cell_id: String::new(),
            leaf_cell_type: String::new(),
            leaf_cell_number: size,
            affinity_group: Some(GroupSpec {
                name: g.clone(),
                members: vec![MemberSpec {
                    pod_number: pods,
                    leaf_cell_number: size,
                }],
            }),
            lazy_preemption_enable: lazy,
            ignore_k8s_suggested_nodes: true,
            gang_release_enable: false,
        };
        let names: Vec<String> = (0..pods).map(|i| format!("{g}-{i}")).collect();
        for _round in 0..3 {
            let d = self
                .h
                .schedule(&names[0], &spec, &Suggested::All, Phase::Preempting)
                .unwrap();
            self.check("schedule")?;
            match d {
                Decision::Wait(_) => {
                    self.h.delete_unallocated_pod(&names[0], &spec).unwrap();
                    return self.check("withdraw");
                }
                Decision::Preempt(victims) => {
                    prop_assert!(prio >= 0, "an opportunistic request produced victims");
                    let mut groups: Vec<String> = Vec::new();
                    for v in &victims {
                        let vg = v.pod.rsplit_once('-').unwrap().0.to_string();
                        if !groups.contains(&vg) {
                            groups.push(vg);
                        }
                    }
                    for vg in groups {
                        let (vvc, vprio) = self.prio[&vg].clone();
                        let lazy_now = self.h.group_is_lazy_or_opportunistic(&vg).unwrap_or(false);
                        prop_assert!(
                            vprio < 0 || lazy_now || (vvc == VCS[vc] && vprio < prio),
                            "{g} (vc {}, prio {prio}) preempts {vg} (vc {vvc}, prio {vprio})",
                            VCS[vc]
                        );
                        self.delete_group(&vg);
                        self.check("victim deletion")?;
                    }
                }
                Decision::Bind(info) => {
                    self.h.add_allocated_pod(&names[0], &spec, &info).unwrap();
                    let mut bound = vec![(names[0].clone(), spec.clone(), info)];
                    for n in &names[1..] {
                        match self
                            .h
                            .schedule(n, &spec, &Suggested::All, Phase::Preempting)
                            .unwrap()
                        {
                            Decision::Bind(i) => {
                                self.h.add_allocated_pod(n, &spec, &i).unwrap();
                                bound.push((n.clone(), spec.clone(), i));
                            }
                            other => {
                                prop_assert!(false, "later pod of an allocated gang got {other:?}")
                            }
                        }
                    }
                    self.running.insert(g.clone(), bound);
                    self.prio.insert(g, (VCS[vc].into(), prio));
                    return self.check("commit");
                }
            }
        }
        // Still preempting after three rounds: withdraw.
        self.h.delete_unallocated_pod(&names[0], &spec).unwrap();
        self.check("withdraw after rounds")
    }
}

/// 300 by default; `PROPTEST_CASES` raises it for a longer hunt.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn invariants_recovery_and_release_without_health_events(ops in prop::collection::vec(submit_or_delete(), 1..60)) {
        run(&ops)?;
    }

    #[test]
    fn invariants_recovery_and_release_with_health_events(ops in prop::collection::vec(with_health(), 1..60)) {
        run(&ops)?;
    }
}

/// Sequences the property tests once shrank to, kept as named cases. `S` is a guaranteed
/// submission of one pod of `size` devices at `prio` in VC `vc`.
#[allow(non_snake_case)]
fn S(vc: usize, prio: i64, size: i64) -> Op {
    Op::Submit {
        vc,
        prio,
        size,
        pods: 1,
        lazy: false,
    }
}

/// hived.md §13 bug 2: a job lands in a doomed bad cell; upstream kept the cell doomed
/// while in use and never released it after the job left, losing a top-level cell.
#[test]
fn a_doomed_cell_used_by_a_job_is_freed_with_it() {
    use Op::*;
    run(&[
        S(2, 1, 1),
        S(1, 0, 1),
        Op::Submit {
            vc: 0,
            prio: 0,
            size: 4,
            pods: 2,
            lazy: false,
        },
        Bad(1),
        Op::Submit {
            vc: 0,
            prio: 0,
            size: 4,
            pods: 2,
            lazy: false,
        },
        Op::Submit {
            vc: 2,
            prio: 0,
            size: 2,
            pods: 2,
            lazy: false,
        },
        S(0, 0, 1),
        S(0, 0, 1),
        Delete(212966691835664141), // the index, modulo the running groups, picks b's job
        S(0, 0, 1),
        S(0, 0, 1),
        S(0, 0, 1),
        S(1, 0, 1),
        Healthy(1),
    ])
    .unwrap();
}

/// Recovery while every top-level cell is bad: the start-up forecast of doomed cells
/// must not push recovered jobs out of their VC.
#[test]
fn recovery_ignores_the_start_up_forecast_of_doomed_cells() {
    use Op::*;
    run(&[Bad(2), Bad(0), S(0, 0, 1), Bad(3)]).unwrap();
}

/// Upstream re-checks doomed cells only at the levels a release touched, so after these
/// deletions VC `a` had more free cells than healthy ones were left and no doomed cell.
#[test]
fn deletions_keep_the_doomed_forecast_settled() {
    use Op::*;
    run(&[
        S(2, 0, 1),
        Bad(2),
        Bad(0),
        S(1, 0, 1),
        S(0, 0, 1),
        S(0, 0, 1),
        Bad(3),
        Delete(0),
        Delete(1),
    ])
    .unwrap();
}

/// Doomed cells forecast between two leaves of a recovered group fragmented the chain
/// and failed the safety check of a safe placement.
#[test]
fn recovery_does_not_forecast_between_leaves_of_a_group() {
    use Op::*;
    let mut ops = vec![
        S(0, 0, 1),
        S(0, 0, 1),
        S(0, 0, 1),
        S(0, 0, 1),
        Bad(2),
        Delete(0),
    ];
    ops.extend([S(0, 1, 4), Bad(0), S(0, 0, 1), S(0, 1, 1), S(1, 3, 4)]);
    ops.extend(std::iter::repeat_n(S(0, 0, 1), 9));
    ops.extend([Bad(3), S(0, 0, 1)]);
    run(&ops).unwrap();
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let cfg = Config::parse(CONFIG).unwrap();
    let mut w = World {
        h: Hived::with_all_nodes_healthy(&cfg).unwrap(),
        running: BTreeMap::new(),
        prio: BTreeMap::new(),
        next: 0,
        health_events: false,
    };
    let fresh = Hived::with_all_nodes_healthy(&cfg).unwrap();
    w.check("start")?;
    for o in ops {
        match *o {
            Op::Submit {
                vc,
                prio,
                size,
                pods,
                lazy,
            } => w.submit(vc, prio, size, pods, lazy)?,
            Op::Delete(i) => {
                if !w.running.is_empty() {
                    let g = w.running.keys().nth(i % w.running.len()).unwrap().clone();
                    w.delete_group(&g);
                    w.check("delete")?;
                }
            }
            Op::Bad(n) => {
                w.health_events = true;
                w.h.set_node_bad(NODES[n]).unwrap();
                w.check("node bad")?;
            }
            Op::Healthy(n) => {
                w.h.set_node_healthy(NODES[n]).unwrap();
                w.check("node healthy")?;
            }
        }
    }
    // Recovery: a fresh scheduler fed the bind records.
    {
        let mut r = Hived::new(&cfg).unwrap();
        for n in NODES {
            if !w.h.node_is_bad(n) {
                r.set_node_healthy(n).unwrap();
            }
        }
        if std::env::var("HIVED_DUMP").is_ok() {
            eprintln!("== recovering\n{}", r.debug_dump());
        }
        for pods in w.running.values() {
            for (p, s, b) in pods {
                r.add_allocated_pod(p, s, b).unwrap();
                if std::env::var("HIVED_DUMP").is_ok() {
                    eprintln!(
                        "== recovered {p} {}\n{}",
                        serde_json::to_string(b).unwrap(),
                        r.debug_dump()
                    );
                }
                let v = r.check_invariants();
                prop_assert!(
                    v.is_empty(),
                    "recovering {p} ({}): {v:#?}",
                    serde_json::to_string(b).unwrap()
                );
            }
        }
        let v = r.check_invariants();
        prop_assert!(v.is_empty(), "after recovery: {v:#?}");
        let lazy = w
            .running
            .keys()
            .any(|g| w.h.group_is_lazy_or_opportunistic(g) == Some(true) && w.prio[g].1 >= 0);
        if !lazy {
            if w.health_events {
                prop_assert_eq!(
                    r.fingerprint_of_use(),
                    w.h.fingerprint_of_use(),
                    "recovery changed what is in use"
                );
            } else {
                prop_assert_eq!(
                    r.fingerprint(),
                    w.h.fingerprint(),
                    "recovery changed the state"
                );
            }
        }
    }
    // Everything released, every node healthy: the free lists are back as at start.
    let groups: Vec<String> = w.running.keys().cloned().collect();
    for g in groups {
        w.delete_group(&g);
        w.check("final delete")?;
    }
    for n in NODES {
        w.h.set_node_healthy(n).unwrap();
    }
    w.check("final healthy")?;
    prop_assert_eq!(w.h.fingerprint(), fresh.fingerprint());
    Ok(())
}

//! Data-driven scenarios: `testdata/share/scenarios/*.txt`, each a few nodes and pods
//! arriving and leaving in file order, `----`, then where every arrival went and what
//! the cluster came to. `APIARY_REWRITE=1 cargo test -p apiary-share --test scenarios`
//! rewrites the expected parts from the code; review the diff before committing it.
//!
//! Lines: `node NAME cpu=MILLI mem=MIB gpus=N type=T`, `policy NAME`, `seed N`,
//! `order NODE,NODE,...` (ties to the first named, instead of the seeded order),
//! `pod NAME cpu=MILLI [mem=MIB] [gpus=N milli=M] [spec=T|T]` (arrives) and
//! `leave NAME`. Typical pods are those of all the file's pods, as FGD takes them from
//! the whole workload.

use apiary_model::share::{GpuNode, Pod};
use apiary_share::{Placed, Prepared, Scheduler, build, workload_typical};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

enum Step {
    Arrive(usize),
    Leave(usize),
}

fn kv(fields: &str) -> BTreeMap<&str, &str> {
    fields
        .split_whitespace()
        .map(|f| {
            f.split_once('=')
                .unwrap_or_else(|| panic!("'{f}' is not key=value"))
        })
        .collect()
}

fn run_scenario(text: &str) -> String {
    let (mut nodes, mut pods, mut steps) = (Vec::new(), Vec::new(), Vec::new());
    let (mut policy, mut seed, mut order) = ("fgd".to_string(), 0u64, None::<String>);
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (k, rest) = line.split_once(' ').unwrap_or((line, ""));
        let (name, fields) = rest.split_once(' ').unwrap_or((rest, ""));
        match k {
            "node" => {
                let f = kv(fields);
                nodes.push(GpuNode {
                    name: name.into(),
                    cpu_milli: f["cpu"].parse().unwrap(),
                    mem_mib: f.get("mem").map_or(65_536, |m| m.parse().unwrap()),
                    gpus: f["gpus"].parse().unwrap(),
                    gpu_type: f.get("type").copied().unwrap_or("").into(),
                });
            }
            "pod" => {
                let f = kv(fields);
                let gpus: u8 = f.get("gpus").map_or(0, |g| g.parse().unwrap());
                pods.push(Pod {
                    name: name.into(),
                    cpu_milli: f["cpu"].parse().unwrap(),
                    mem_mib: f.get("mem").map_or(1024, |m| m.parse().unwrap()),
                    num_gpu: gpus,
                    gpu_milli: if gpus == 0 {
                        0
                    } else {
                        f.get("milli").map_or(1000, |m| m.parse().unwrap())
                    },
                    gpu_spec: f
                        .get("spec")
                        .map(|s| s.split('|').map(Into::into).collect())
                        .unwrap_or_default(),
                    qos: None,
                    creation: None,
                    deletion: None,
                });
                steps.push(Step::Arrive(pods.len() - 1));
            }
            "leave" => {
                let i = pods
                    .iter()
                    .position(|p| p.name == name)
                    .expect("leave names a pod");
                steps.push(Step::Leave(i));
            }
            "policy" => policy = name.into(),
            "seed" => seed = name.parse().unwrap(),
            "order" => order = Some(name.into()),
            _ => panic!("unknown line '{line}'"),
        }
    }
    let prep = Prepared::new(&nodes, &pods).unwrap();
    let typical = workload_typical(&prep, 95.0);
    let mut s = Scheduler::new(
        &prep,
        typical,
        build(&policy, &Default::default()).unwrap(),
        seed,
    );
    if let Some(o) = order {
        let idx: Vec<usize> = o
            .split(',')
            .map(|n| {
                nodes
                    .iter()
                    .position(|x| x.name == n)
                    .expect("order names nodes")
            })
            .collect();
        s.set_order(&idx);
    }
    let mut at: Vec<Option<Placed>> = vec![None; pods.len()];
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Arrive(i) => {
                let placed = s.place(&prep.pods[i]);
                let _ = match &placed {
                    Some(p) => {
                        let gpus: Vec<String> = p
                            .pick
                            .gpus()
                            .iter()
                            .map(|g| format!("{g}:{}", pods[i].gpu_milli))
                            .collect();
                        writeln!(
                            out,
                            "{} -> {} {}",
                            pods[i].name,
                            nodes[p.node as usize].name,
                            gpus.join(" ")
                        )
                        .map(|_| ())
                    }
                    None => writeln!(out, "{} -> none", pods[i].name),
                };
                at[i] = placed;
            }
            Step::Leave(i) => {
                if let Some(p) = at[i].take() {
                    s.release(&prep.pods[i], &p);
                }
            }
        }
    }
    for (n, st) in nodes.iter().zip(s.nodes()) {
        let left: Vec<String> = st.left().iter().map(i32::to_string).collect();
        let _ = writeln!(
            out,
            "{} cpu_left={} gpu_left={}",
            n.name,
            st.cpu_left,
            left.join(",")
        );
    }
    let _ = writeln!(out, "used={} frag={:.1}", s.used_milli(), s.frag_milli());
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn scenarios() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/share/scenarios");
    let rewrite = std::env::var_os("APIARY_REWRITE").is_some();
    let mut n = 0;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
    {
        let text = std::fs::read_to_string(&path).unwrap();
        let (input, expected) = text.split_once("\n----\n").expect("a ---- line");
        let got = run_scenario(input);
        if rewrite {
            std::fs::write(&path, format!("{input}\n----\n{got}\n")).unwrap();
        } else {
            assert_eq!(got, expected.trim_end(), "{}", path.display());
        }
        n += 1;
    }
    assert!(n >= 3, "{n} scenarios");
}

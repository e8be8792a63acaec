//! Data-driven scenarios: `testdata/llm/scenarios/*.txt`, each a small cluster and a
//! few requests, `----`, then what every request and the run came to. `APIARY_REWRITE=1
//! cargo test -p apiary-llm --test scenarios` rewrites the expected parts from the
//! code; review the diff before committing it.
//!
//! Settings: `model`, `gpu`, `tp`, `instances`, `blocks` (KV blocks per instance),
//! `chunk` (token budget), `cpu_ms`, `policy`, `set key=value`, and
//! `request at=SECONDS in=TOKENS out=TOKENS`.

use apiary_core::Params;
use apiary_llm::engine::Cluster;
use apiary_llm::hardware::{gpu, model};
use apiary_llm::latency::{EngineKind, IterModel};
use apiary_llm::replica::{Phase, ReplicaConfig};
use apiary_llm::workload::Request;
use std::fmt::Write as _;
use std::path::Path;

fn run_scenario(text: &str) -> String {
    let (mut m, mut g, mut tp, mut inst, mut blocks, mut chunk, mut cpu) = (
        "llama-7b".to_string(),
        "A10".to_string(),
        1u32,
        1u32,
        0u32,
        None,
        5.0f64,
    );
    let mut policy = "round-robin".to_string();
    let mut swap = (0u32, 0u64);
    let mut window = None;
    let mut set = Vec::new();
    let mut reqs = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (k, v) = line.split_once(' ').unwrap_or((line, ""));
        match k {
            "model" => m = v.into(),
            "gpu" => g = v.into(),
            "tp" => tp = v.parse().unwrap(),
            "instances" => inst = v.parse().unwrap(),
            "blocks" => blocks = v.parse().unwrap(),
            "chunk" => chunk = Some(v.parse().unwrap()),
            "cpu_ms" => cpu = v.parse().unwrap(),
            "policy" => policy = v.into(),
            "set" => set.push(v.to_string()),
            "window" => window = Some(v.parse().unwrap()),
            "swap" => {
                let (b, ns) = v.split_once(' ').unwrap();
                swap = (b.parse().unwrap(), ns.parse().unwrap());
            }
            "request" => {
                let mut r = Request {
                    arrival: 0,
                    input: 0,
                    output: 0,
                    priority: 0,
                    prefix: (0, 0),
                };
                for kv in v.split_whitespace() {
                    let (a, b) = kv.split_once('=').unwrap();
                    match a {
                        "at" => r.arrival = (b.parse::<f64>().unwrap() * 1e6).round() as u64,
                        "in" => r.input = b.parse().unwrap(),
                        "out" => r.output = b.parse().unwrap(),
                        "prio" => r.priority = b.parse().unwrap(),
                        _ => panic!("unknown request field {a}"),
                    }
                }
                reqs.push(r);
            }
            _ => panic!("unknown setting '{k}'"),
        }
    }
    let model = model(&m).unwrap();
    let gpu = gpu(&g).unwrap();
    let blocks = if blocks == 0 {
        apiary_llm::hardware::kv_blocks(&model, &gpu, tp, Default::default(), 16).unwrap()
    } else {
        blocks
    };
    let mut replica = ReplicaConfig::vllm(blocks, 4096);
    replica.chunk = chunk;
    (replica.swap_blocks, replica.swap_ns_per_block) = swap;
    replica.window = window;
    let c = Cluster {
        instances: inst,
        replica,
        model: IterModel::new(&model, &gpu, tp, cpu / 1e3, EngineKind::Sequential),
        kv_bytes_per_token_per_gpu: model.kv_bytes_per_token / f64::from(tp),
        prefix_cache: None,
        host_tier: None,
    };
    let params = Params::from_pairs(set.iter().map(String::as_str)).unwrap();
    let mut p = apiary_llm::policy::build(&policy, &params).unwrap();
    let o = apiary_llm::simulate(
        &c,
        &reqs,
        &vec![false; reqs.len()],
        p.as_mut(),
        &mut |_, _| {},
    )
    .unwrap();
    let ms = |us: u64| format!("{:.3}", us as f64 / 1e3);
    let mut out = String::new();
    for (i, q) in o.requests.iter().enumerate() {
        if q.phase == Phase::Refused {
            let _ = writeln!(out, "r{i} refused");
            continue;
        }
        let _ = writeln!(
            out,
            "r{i} inst={} first_ms={} done_ms={} preemptions={} loss_ms={} migrations={} downtime_ms={}",
            q.inst,
            ms(q.first - q.req.arrival),
            ms(q.done - q.req.arrival),
            q.preemptions,
            ms(q.loss),
            q.migrations,
            ms(q.downtime)
        );
    }
    if o.swaps.outs > 0 {
        let _ = writeln!(
            out,
            "swaps out={} in={} blocks_out={} blocks_in={} copy_ms={:.3}",
            o.swaps.outs,
            o.swaps.ins,
            o.swaps.blocks_out,
            o.swaps.blocks_in,
            o.swaps.secs * 1e3
        );
    }
    let _ = writeln!(
        out,
        "run iterations={} migrations={} aborted={} scaled_up={} scaled_down={}",
        o.iterations, o.migrations, o.aborted_migrations, o.scaled_up, o.scaled_down
    );
    out
}

#[test]
fn scenario_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/scenarios");
    let rewrite = std::env::var_os("APIARY_REWRITE").is_some();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut failed = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "txt"))
    {
        let text = std::fs::read_to_string(f).unwrap();
        let (input, expected) = text.split_once("\n----\n").unwrap_or((&text, ""));
        let got = run_scenario(input);
        if rewrite {
            std::fs::write(f, format!("{input}\n----\n{got}")).unwrap();
        } else if got != expected {
            failed.push(format!(
                "{}:\n--- expected\n{expected}--- got\n{got}",
                f.display()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

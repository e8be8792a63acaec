//! The config parsers and the live API's JSON bodies.

use apiary_fuzz::{config, input, within};
use proptest::prelude::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

const CLUSTER_TOML: &str = r#"name = "lab"
[[switches]]
name = "rack"
count = 2
uplink_gbps = 100.0
[[switches.nodes]]
count = 2
gpus = 4
gpu_type = "A100"
cpus = 32
memory_gb = 512
nic_gbps = 200.0
[[switches.nodes]]
gpus = 8
"#;
const CLUSTER_CSV: &str =
    "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,4,8,64,256\n";
const HIVED: &str = "physicalCluster:
  cellTypes:
    S: {childCellType: G, childCellNumber: 2}
    N: {childCellType: S, childCellNumber: 2, isNodeLevel: true}
    R: {childCellType: N, childCellNumber: 2}
  physicalCells:
  - {cellType: R, cellChildren: [{cellAddress: n0}, {cellAddress: n1, pinnedCellId: p}]}
  - {cellType: N, cellAddress: n2}
virtualClusters:
  a: {virtualCells: [{cellType: R.N, cellNumber: 1}]}
  b: {virtualCells: [{cellType: N, cellNumber: 1}], pinnedCells: [{pinnedCellId: p}]}
";
const HIVED_JSON: &str = r#"{"physicalCluster": {"cellTypes": {"N": {"childCellType": "G", "childCellNumber": 4, "isNodeLevel": true}}, "physicalCells": [{"cellType": "N", "cellAddress": "a"}, {"cellType": "N", "cellAddress": "b"}]}, "virtualClusters": {"v": {"virtualCells": [{"cellType": "N", "cellNumber": 2}]}}}"#;
const TOPOLOGY_TOML: &str = r#"name = "three GPUs on an NVSwitch"
compute = ["gpu0", "gpu1", "gpu2"]
switches = ["nvswitch"]
links = [
  { from = "gpu0", to = "nvswitch", bw = 300 },
  { from = "gpu1", to = "nvswitch", bw = 300 },
  { from = "gpu2", to = "nvswitch", bw = 300 },
  { from = "gpu0", to = "gpu1", bw = 25, directed = true },
]
shape = { boxes = 1, gpus = 3, intra = 300 }
"#;
const TOPOLOGY_JSON: &str = r#"{"compute": ["a", "b", "c", "d"], "switches": ["s"], "links": [{"from": "a", "to": "s", "bw": 2}, {"from": "b", "to": "s", "bw": 2}, {"from": "c", "to": "s", "bw": 1.5}, {"from": "d", "to": "s", "bw": 1}, {"from": "a", "to": "b", "bw": 0.25}], "shape": {"boxes": 1, "gpus": 4, "intra": 1}}"#;
const SERVER: &str = r#"policy = "tiresias"
data_dir = ":memory:"
heartbeat_interval_s = 1
node_timeout_s = 5
grace_s = 2
max_jobs_per_vc = 100
[[vcs]]
name = "research"
quota_gpus = 4
[[nodes]]
name = "a"
gpus = 4
[[nodes]]
name = "b"
gpus = 4
gpu_type = "A100"
[[tokens]]
token = "0123456789abcdef0123"
role = "agent"
nodes = ["a"]
"#;
/// A server packing GPU-sharing jobs by FGD, and a job asking for part of a GPU.
const SERVER_SHARING: &str = r#"policy = "fifo"
data_dir = ":memory:"
share_policy = "fgd"
[[nodes]]
name = "a"
gpus = 4
cpus = 32
memory_gib = 256
[[nodes]]
name = "b"
gpus = 8
cpus = 64
memory_gib = 512
gpu_type = "A100"
"#;
const SHARE_JOB: &str =
    r#"{"gpus": 1, "gpu_milli": 500, "cpu_milli": 4000, "memory_mib": 8192, "command": ["serve"]}"#;
/// An LLM-serving sweep.
const LLM_SWEEP: &str = r#"seeds = 3
baseline = "infaas++"
metrics = ["ttft_p99_s", "slo_attainment", "swap_outs"]
[[trace]]
path = "t.csv"
[[policy]]
name = "infaas++"
[[policy]]
name = "llumnix"
grid = { migrate_threshold = [3, 10] }
[llm]
model = "llama-7b"
gpu = "A10"
instances = [4, 16]
rates = [2.5, 8.75]
swap_space = 4
chunk = 512
"#;
const JOB: &str = r#"{"name": "train", "gpus": 2, "vc": "research", "priority": 3, "command": ["python", "train.py", "--lr", "0.1"], "env": {"SEED": "1"}, "workdir": "/tmp", "estimated_duration_s": 3600, "deadline_unix_s": 1900000000, "restart": {"max_restarts": 3}}"#;
/// A filter of a pod asking HiveD for 2 GPUs of VC `v` (HIVED_JSON's cluster), then the
/// preempt and bind kube-scheduler would send for it.
const EXT_FILTER: &str = r#"{"pod":{"metadata":{"name":"p","namespace":"d","uid":"u1","annotations":{"hivedscheduler.microsoft.com/pod-scheduling-spec":"virtualCluster: v\npriority: 0\nleafCellNumber: 2\n"}},"spec":{"nodeName":"","containers":[{"resources":{"limits":{"hivedscheduler.microsoft.com/pod-scheduling-enable":"1"}}}]},"status":{"phase":"Pending"}},"nodenames":["a","b"]}"#;
const EXT_PREEMPT: &str = r#"{"pod":{"metadata":{"name":"p","namespace":"d","uid":"u1","annotations":{"hivedscheduler.microsoft.com/pod-scheduling-spec":"virtualCluster: v\npriority: 0\nleafCellNumber: 2\n"}},"spec":{"containers":[{"resources":{"limits":{"hivedscheduler.microsoft.com/pod-scheduling-enable":"1"}}}]}},"nodeNameToMetaVictims":{"a":{"pods":[{"uid":"x"}],"numPDBViolations":0}}}"#;
const EXT_BIND: &str = r#"{"podName":"p","podNamespace":"d","podUID":"u1","node":"a"}"#;

const HEARTBEAT: &str = r#"{"node": "a", "instance": "1@host/00", "gpus": 4, "running": [{"job": 1, "attempt": 1}], "exited": [{"job": 1, "attempt": 0, "code": 1}], "shutting_down": false}"#;

const FAILURES: &str = r#"name = "f"
restart_s = 60
checkpoint_gb_per_gpu = 4
rule = "cap:5%"
[[class]]
name = "gpu"
kind = "node"
per = "gpu"
rate_per_hour = 0.01
repair_hours = 2
[[class]]
name = "crash"
kind = "process"
per = "job"
rate_per_hour = 0.05
[[level]]
name = "peer"
survives = ["process", "node"]
save_gbps = 10
restore_gbps = 10
[[event]]
at_s = 100
class = "gpu"
node = 1
repair_s = 600
"#;
const INCIDENTS: &str = "time_s,component,class,repair_s\n50,gpu:3,crash,\n900,node:0,gpu,60\n";

/// A failure model and incident log that parsed: planned for a job, run one job
/// through it, and a small trace through the simulator under FIFO.
fn run_failures(toml: &str, log: &str) {
    let Ok(mut m) = apiary_model::failures::FailureModel::parse(toml, "f.toml") else {
        return;
    };
    if m.add_log(log, "log.csv").is_err() {
        return;
    }
    let Ok(setting) = apiary_sim::failures::Setting::of(m.clone()) else {
        return;
    };
    use apiary_model::failures::{checkpoint, montecarlo};
    if let Ok(p) = checkpoint::plan(&m, &setting.levels, 16, 64e9, setting.rule) {
        assert!((0.0..=1.0).contains(&p.ettr), "{}", p.ettr);
        let survives = checkpoint::survival(&m, &setting.levels);
        let r = montecarlo::simulate(&m, &p, &survives, 10.0, 1);
        let spent = r.useful_s + r.rework_s + r.checkpoint_s + r.restore_s + r.restart_s;
        assert!((spent - r.wall_s).abs() <= 1e-6 * r.wall_s.max(1.0));
    }
    let cluster = apiary_model::ClusterSpec::preset("n2g8")
        .unwrap()
        .build()
        .unwrap();
    let jobs = (0..6)
        .map(|i| {
            apiary_model::Job::new(
                format!("j{i}"),
                i * 60_000,
                1 + (i as u32 % 3) * 4,
                3_600_000,
            )
        })
        .collect();
    let mut fifo = apiary_policy::build("fifo", &apiary_policy::Params::default()).unwrap();
    let cfg = apiary_sim::Config {
        failures: Some(setting),
        ..apiary_sim::Config::default()
    };
    if let Ok(o) = apiary_sim::run(
        cluster,
        jobs,
        fifo.as_mut(),
        &apiary_sim::DurationModel,
        &cfg,
        &mut |_| {},
    ) {
        assert!(o.jobs.iter().all(|j| j.finish.is_some()));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn cluster_toml(body in input(CLUSTER_TOML)) {
        within(LIMIT, "cluster toml", move || {
            if let Ok(spec) = apiary_model::ClusterSpec::from_toml_str(&text(&body), "c.toml") {
                let _ = spec.build_from("c.toml");
            }
        });
    }

    #[test]
    fn cluster_peer_csv(body in input(CLUSTER_CSV)) {
        within(LIMIT, "cluster csv", move || {
            if let Ok(spec) = apiary_model::ClusterSpec::from_peer_csv_str(&text(&body), "c.csv") {
                let _ = spec.build_from("c.csv");
            }
        });
    }

    #[test]
    fn hived_config(body in input(HIVED), json in input(HIVED_JSON)) {
        within(LIMIT, "hived config", move || {
            for b in [body, json] {
                if let Ok(cfg) = apiary_hived::Config::parse(&text(&b))
                    && let Ok(h) = apiary_hived::Hived::with_all_nodes_healthy(&cfg)
                {
                    assert!(h.check_invariants().is_empty(), "{}", text(&b));
                }
            }
        });
    }

    #[test]
    fn hived_scenario(body in input(include_str!("../../../../testdata/hived/design-backtrack.yaml"))) {
        within(LIMIT, "hived scenario", move || {
            let _ = apiary_hived::replay::Scenario::parse(&text(&body));
        });
    }

    #[test]
    fn topology(toml in input(TOPOLOGY_TOML), json in input(TOPOLOGY_JSON)) {
        within(LIMIT, "topology", move || {
            for b in [toml, json] {
                let _ = apiary_comm::Topology::parse(&text(&b), "t");
            }
        });
    }

    #[test]
    fn server_config(body in input(SERVER)) {
        within(LIMIT, "server config", move || {
            if let Ok(cfg) = apiary_server::config::ServerConfig::parse(&text(&body), "s.toml") {
                let _ = apiary_server::core::Core::new(cfg, 0);
            }
        });
    }

    /// A sharing server config and a sharing job: placed by FGD through a pass.
    #[test]
    fn sharing_server_and_job(body in input(SERVER_SHARING), job in input(SHARE_JOB)) {
        within(LIMIT, "sharing server", move || {
            let Ok(cfg) = apiary_server::config::ServerConfig::parse(&text(&body), "s.toml") else {
                return;
            };
            let Ok(mut core) = apiary_server::core::Core::new(cfg, 0) else {
                return;
            };
            if let Ok(spec) = serde_json::from_slice::<apiary_server::types::JobSpec>(&job) {
                let _ = core.submit(spec, 1_000);
                core.schedule(1_000);
            }
        });
    }

    /// An LLM sweep file, planned.
    #[test]
    fn llm_sweep_file(body in input(LLM_SWEEP)) {
        within(LIMIT, "llm sweep", move || {
            let p = std::path::Path::new("s.toml");
            if let Ok(s) = apiary_sweep::Sweep::parse(&text(&body), p, std::path::Path::new("."), "s") {
                let _ = apiary_sweep::plan(&s).len();
            }
        });
    }

    /// An inference-perf `shared-prefix:` spec, built and served under vLLM V1 with
    /// prefix caching (a few dozen requests, so any spec that parses runs).
    #[test]
    fn llm_shared_prefix(spec in "[0-9]{0,6}(:[0-9]{0,7}){0,5}", n in 0usize..40, rate in 0.0f64..50.0, cv in 0.0f64..2.0) {
        within(LIMIT, "shared-prefix", move || {
            let Some(shape) = apiary_llm::workload::SharedPrefix::parse(&spec) else {
                return;
            };
            let Ok(trace) = apiary_llm::workload::shared_prefix_requests(shape, n) else {
                return;
            };
            let o = apiary_llm::setup::Options {
                instances: 2,
                gpu: "H100".into(),
                rate: Some(rate),
                cv,
                engine: "vllm-v1".into(),
                prefix_cache: true,
                max_seqs: Some(8),
                ..Default::default()
            };
            let Ok(s) = apiary_llm::setup::prepare(&o, "fuzz", trace) else {
                return;
            };
            let mut p = apiary_llm::policy::build("round-robin", &Default::default()).unwrap();
            let out = apiary_llm::simulate(&s.cluster, &s.requests, &s.refused, p.as_mut(), &mut |_, _| {}).unwrap();
            assert_eq!(out.requests.len(), n);
        });
    }

    /// A submission and a heartbeat body, through the core the HTTP layer calls.
    #[test]
    fn api_bodies(job in input(JOB), hb in input(HEARTBEAT)) {
        within(LIMIT, "api bodies", move || {
            let cfg = apiary_server::config::ServerConfig::parse(SERVER, "s.toml").unwrap();
            let mut core = apiary_server::core::Core::new(cfg, 0).unwrap();
            if let Ok(spec) = serde_json::from_slice::<apiary_server::types::JobSpec>(&job) {
                let _ = core.submit(spec, 1_000);
            }
            if let Ok(h) = serde_json::from_slice::<apiary_server::types::Heartbeat>(&hb) {
                let _ = core.heartbeat(&h, 2_000);
            }
        });
    }

    /// The scheduler extender's bodies through its state machine, as its HTTP layer
    /// calls it: filter, prioritize, preempt, bind, then a sync that lists the pod.
    #[test]
    fn extender_bodies(f in input(EXT_FILTER), p in input(EXT_PREEMPT), b in input(EXT_BIND)) {
        within(LIMIT, "extender bodies", move || {
            use apiary_server::extender::{Extender, wire};
            let cfg = apiary_hived::Config::parse(HIVED_JSON).unwrap();
            let mut ext = Extender::new(&cfg, 3).unwrap();
            let nodes: Vec<wire::Node> = serde_json::from_str(
                r#"[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True"}]}},
                    {"metadata":{"name":"b"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}]"#,
            ).unwrap();
            let g = ext.begin_sync();
            ext.sync(g, &[], &nodes);
            let args = serde_json::from_slice::<wire::ExtenderArgs>(&f).ok();
            if let Some(a) = &args {
                let _ = ext.prioritize(a);
                let _ = ext.filter(a.clone());
                let _ = ext.filter(a.clone());
            }
            if let Ok(a) = serde_json::from_slice::<wire::ExtenderPreemptionArgs>(&p) {
                let _ = ext.preempt(&a);
            }
            if let Ok(a) = serde_json::from_slice::<wire::ExtenderBindingArgs>(&b)
                && let Ok(order) = ext.bind(&a)
            {
                ext.bound(&order.uid);
            }
            let pods: Vec<wire::Pod> = args.into_iter().map(|a| a.pod).collect();
            let g = ext.begin_sync();
            ext.sync(g, &pods, &nodes);
            let g = ext.begin_sync();
            ext.sync(g, &[], &nodes);
        });
    }

    /// Failure models and incident logs (`--failures`): parsed or refused, and what
    /// parses plans and runs.
    #[test]
    fn failure_models(toml in input(FAILURES), log in input(INCIDENTS)) {
        within(LIMIT, "failure model", move || run_failures(&text(&toml), &text(&log)));
    }

    /// Policy parameters: any key of a policy's spec with any extreme value builds or
    /// is refused.
    #[test]
    fn policy_parameters(p in any::<prop::sample::Index>(), k in any::<prop::sample::Index>(),
                         v in prop::sample::select(apiary_fuzz::EXTREMES)) {
        let spec = &apiary_policy::BUILTIN[p.index(apiary_policy::BUILTIN.len())];
        if !spec.params.is_empty() {
            let key = spec.params[k.index(spec.params.len())].key;
            let pair = format!("{key}={v}");
            let params = apiary_policy::Params::from_pairs([pair.as_str()]);
            within(LIMIT, "policy parameters", move || {
                if let Ok(params) = params {
                    let _ = apiary_policy::build(spec.name, &params);
                }
            });
        }
    }
}

/// The samples are valid: mutations start from accepted input.
#[test]
fn every_sample_parses() {
    let spec = apiary_model::ClusterSpec::from_toml_str(CLUSTER_TOML, "c.toml").unwrap();
    assert_eq!(
        spec.build_from("c.toml").unwrap().total_gpus,
        2 * (2 * 4 + 8)
    );
    apiary_model::ClusterSpec::from_peer_csv_str(CLUSTER_CSV, "c.csv").unwrap();
    for h in [HIVED, HIVED_JSON] {
        let cfg = apiary_hived::Config::parse(h).unwrap();
        apiary_hived::Hived::with_all_nodes_healthy(&cfg).unwrap();
    }
    apiary_comm::Topology::parse(TOPOLOGY_TOML, "t").unwrap();
    apiary_comm::Topology::parse(TOPOLOGY_JSON, "t").unwrap();
    let cfg = apiary_server::config::ServerConfig::parse(SERVER_SHARING, "s.toml").unwrap();
    let mut core = apiary_server::core::Core::new(cfg, 0).unwrap();
    let spec: apiary_server::types::JobSpec = serde_json::from_str(SHARE_JOB).unwrap();
    let id = core.submit(spec, 1_000).unwrap();
    core.schedule(1_000);
    assert_eq!(
        core.job(id).unwrap().state,
        apiary_server::types::JobState::Running,
        "the sample places its job"
    );
    let s = apiary_sweep::Sweep::parse(
        LLM_SWEEP,
        std::path::Path::new("s.toml"),
        std::path::Path::new("."),
        "s",
    )
    .unwrap();
    assert_eq!(apiary_sweep::plan(&s).len(), 2 * 2 * 3 * 3);
    let cfg = apiary_server::config::ServerConfig::parse(SERVER, "s.toml").unwrap();
    let mut core = apiary_server::core::Core::new(cfg, 0).unwrap();
    let spec: apiary_server::types::JobSpec = serde_json::from_str(JOB).unwrap();
    core.submit(spec, 1_000).unwrap();
    let hb: apiary_server::types::Heartbeat = serde_json::from_str(HEARTBEAT).unwrap();
    core.heartbeat(&hb, 2_000).unwrap();
    let mut m = apiary_model::failures::FailureModel::parse(FAILURES, "f.toml").unwrap();
    m.add_log(INCIDENTS, "log.csv").unwrap();
    assert_eq!(m.events.len(), 3);
    run_failures(FAILURES, INCIDENTS);
    let args: apiary_server::extender::wire::ExtenderArgs =
        serde_json::from_str(EXT_FILTER).unwrap();
    let cfg = apiary_hived::Config::parse(HIVED_JSON).unwrap();
    let mut ext = apiary_server::extender::Extender::new(&cfg, 3).unwrap();
    let nodes: Vec<apiary_server::extender::wire::Node> = serde_json::from_str(
        r#"[{"metadata":{"name":"a"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}]"#,
    )
    .unwrap();
    let g = ext.begin_sync();
    ext.sync(g, &[], &nodes);
    let (r, _) = ext.filter(args).unwrap();
    assert_eq!(
        r.nodenames,
        Some(vec!["a".to_string()]),
        "the sample places its pod"
    );
    serde_json::from_str::<apiary_server::extender::wire::ExtenderPreemptionArgs>(EXT_PREEMPT)
        .unwrap();
    let b: apiary_server::extender::wire::ExtenderBindingArgs =
        serde_json::from_str(EXT_BIND).unwrap();
    ext.bind(&b).unwrap();
}

/// Every number of the failure model replaced by each extreme value, one at a time: the
/// cases a fuzz run found (a fast store whose saves the rules spaced microseconds apart,
/// a checkpoint of 10^17 GB that overflowed the simulator's clock) and their neighbours.
#[test]
fn failure_model_extremes() {
    let numbers: Vec<(usize, usize)> = {
        let mut spans = Vec::new();
        let mut at = 0;
        for line in FAILURES.split_inclusive('\n') {
            if let Some(eq) = line.find(" = ") {
                let v = line[eq + 3..].trim_end();
                if v.parse::<f64>().is_ok() {
                    spans.push((at + eq + 3, at + eq + 3 + v.len()));
                }
            }
            at += line.len();
        }
        spans
    };
    assert_eq!(numbers.len(), 10, "the sample's numeric fields");
    for (a, b) in numbers {
        for v in apiary_fuzz::EXTREMES {
            let toml = format!("{}{v}{}", &FAILURES[..a], &FAILURES[b..]);
            within(LIMIT, "failure model", move || {
                run_failures(&toml, INCIDENTS)
            });
        }
    }
}

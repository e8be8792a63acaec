//! Every trace format's reader, and the simulator on whatever a reader accepts.

use crate::{Scratch, tmp_dir, tmp_file};
use apiary_fuzz::{config, input, within};
use apiary_trace::{Format, ReadOptions, read};
use proptest::prelude::*;
use std::time::Duration;

const APIARY: &str = "id,submit,gpus,duration,iterations,model,batch_size,vc,priority,deadline,stage_data_ms,stage_gpu_ms,stage_net_ms,dataset_gb,gpu_type,type_speeds
a,0,1,60,100,resnet,32,vc1,1,600,1,2,3,10,v100,v100:1;k80:0.5
b,5,2,30,,,,,0,,,,,,,
c,9,4,120,,,,vc2,-3,,,,,,,
";
const JSONL: &str = r#"{"id":"a","submit":0,"gpus":1,"duration":60,"iterations":100,"stage_data_ms":1,"stage_gpu_ms":2,"stage_net_ms":3}
{"id":"b","submit":5.5,"gpus":2,"duration":30,"vc":"v","priority":2,"deadline":90}
"#;
const PHILLY: &str = "timestamp,duration,num_gpus,gpu_time,cluster
2017-10-03 14:01:55,66.0,1,66.0,6214e9
2017-10-03 14:02:10,3600,8,28800,6214e9
2017-10-04 00:00:00,12,2,24,b436b2
";
const GAVEL: &str = "ResNet-18 (batch size 32)\tcmd\t--num_steps\t1\t1000\t0.000000\t1
LM (batch size 10)\tcmd\t-step\t1\t500\t6.000000\t2
";
const GAVEL10: &str = "ResNet-18 (batch size 32)\tpython3 main.py\timage_classification/cifar10\t--num_steps\t1\t2931\t1\t1\t-1.000000\t0
LM (batch size 10)\tpython3 main.py\tlanguage_modeling\t-step\t1\t11005\t2\t1\t-1.000000\t7
";
const ITP: &str = "job_id,submission_time,duration,num_gpu
a,0,100,1
b,10,3600,8
c,11,5,2
";
const ITP_EF: &str =
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration
x,1,500,bert,900,64,1,3
y,4,800,bert,9000,128,2,3
";
const ELASTICFLOW: &str = "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration
0,1,500,bert,900,64,1,3
1,4,800,bert,9000,128,2,3
";
const MURI: &str = "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority
0,1,0,5853,dqn,128,2868294,46122,490,446,8,0,1
1,8,201694,8787,dqn,128,4472936,201694,509,435,8,0.5,0
2,2,201700,1000,resnet18,64,1000,0,100,10,80,10,0
";
const TIRESIAS: &str = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval
0,1,0,606,vgg19,5,30
1,2,3,1000,resnet50,100,30
";
const POLLUX: &str = "name,time,application,num_replicas,batch_size
cifar10-0,53,cifar10,6,2048
bert-1,60,bert,2,384
ncf-2,75,ncf,1,32768
";
const ALIBABA: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537,0
openb-pod-0001,6000,12288,1,460,V100M16|V100M32,LS,Running,427,12902,427
openb-pod-0002,6000,12288,0,0,,BE,Running,500,900,500
";

/// A small Gavel throughput table covering the samples' job types.
fn gavel_table() -> Scratch {
    tmp_file(
        "simulation_throughputs.json",
        br#"{"v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.5}, "('ResNet-18 (batch size 32)', 2)": {"null": 19.0}, "('LM (batch size 10)', 1)": {"null": 4.0}},
            "k80": {"('ResNet-18 (batch size 32)', 1)": {"null": 2.5}, "('LM (batch size 10)', 1)": {"null": 0.0}}}"#,
    )
}

/// Reads `body` as `format` (or detected), and when it yields a small trace of
/// moderate times, simulates it under `policies`: all within 30 s.
fn check(format: Option<Format>, body: Vec<u8>, policies: &'static [&'static str]) {
    let what = format!("{:?}", format.map(Format::name));
    within(Duration::from_secs(30), &what, move || {
        let path = tmp_file("trace.csv", &body);
        let table = gavel_table();
        let opts = ReadOptions {
            format,
            gavel_throughputs: Some(table.to_path_buf()),
            ..Default::default()
        };
        let Ok(trace) = read(&path, &opts) else {
            return;
        };
        // Beyond these a time-slicing policy legitimately takes many events; the
        // readers' own limits are what this target checks there.
        let moderate = trace.jobs.len() <= 64
            && trace.jobs.iter().all(|j| {
                j.submit <= 1_000_000_000
                    && j.duration <= 1_000_000_000
                    && j.deadline.is_none_or(|d| d <= 1_000_000_000)
            });
        if !moderate {
            return;
        }
        for p in policies {
            let cluster = apiary_model::ClusterSpec::preset("n2g8")
                .unwrap()
                .build()
                .unwrap();
            // `name:key=value,...`: Pollux's search is cut down to keep a debug-build
            // case within seconds.
            let (name, params) = p.split_once(':').unwrap_or((p, ""));
            let params =
                apiary_policy::Params::from_pairs(params.split(',').filter(|x| !x.is_empty()))
                    .unwrap();
            let mut policy = apiary_policy::build(name, &params).unwrap();
            // An Err (a policy refusing the jobs) is an answer; a panic or hang is not.
            let _ = apiary_sim::run(
                cluster,
                trace.jobs.clone(),
                policy.as_mut(),
                &apiary_sim::DurationModel,
                &apiary_sim::Config::default(),
                &mut |_| {},
            );
        }
    });
}

macro_rules! target {
    ($name:ident, $format:expr, $sample:expr, $policies:expr) => {
        proptest! {
            #![proptest_config(config())]
            #[test]
            fn $name(body in input($sample), detect in any::<bool>()) {
                let format = Format::parse($format).unwrap();
                check((!detect).then_some(format), body, $policies);
            }
        }
    };
}

target!(
    apiary_csv,
    "apiary",
    APIARY,
    &["fifo", "tiresias", "muri-s"]
);
target!(jsonl, "jsonl", JSONL, &["srtf", "themis"]);
target!(philly, "philly", PHILLY, &["tiresias", "gandiva"]);
target!(gavel, "gavel", GAVEL, &["gavel"]);
target!(gavel10, "gavel10", GAVEL10, &["gavel", "fifo"]);
target!(itp, "itp", ITP, &["fifo", "srtf"]);
target!(
    itp_elasticflow,
    "itp-elasticflow",
    ITP_EF,
    &["elasticflow", "edf"]
);
target!(
    elasticflow,
    "elasticflow",
    ELASTICFLOW,
    &["elasticflow", "gandiva"]
);
target!(muri, "muri", MURI, &["muri-l", "antman"]);
target!(tiresias, "tiresias", TIRESIAS, &["tiresias"]);
target!(
    pollux,
    "pollux",
    POLLUX,
    &["pollux:population=4,generations=2", "fifo"]
);
target!(alibaba, "alibaba", ALIBABA, &["fifo"]);

const OPENB_NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,786432,8,V100M32
openb-node-0002,32000,262144,0,
";

/// Reads `body` as an openb pod list for GPU sharing and, when it is small, places it
/// under FGD and Random, filling and replaying: all within 30 s.
fn check_openb(body: Vec<u8>) {
    within(Duration::from_secs(30), "openb pods", move || {
        let path = tmp_file("pods.csv", &body);
        let Ok(pods) = apiary_trace::openb::read_pods(&path) else {
            return;
        };
        if pods.len() > 64 {
            return;
        }
        let nodes = tmp_file("nodes.csv", OPENB_NODES.as_bytes());
        let nodes = apiary_trace::openb::read_nodes(&nodes).unwrap();
        let Ok(prep) = apiary_share::Prepared::new(&nodes, &pods) else {
            return;
        };
        let typical = apiary_share::workload_typical(&prep, 95.0);
        for policy in ["fgd", "random"] {
            for mode in [apiary_share::Mode::Fill(1.3), apiary_share::Mode::Replay] {
                let p = apiary_share::build(policy, &Default::default()).unwrap();
                let o = apiary_share::run(&prep, &pods, typical.clone(), p, mode, 1).unwrap();
                let _ = apiary_share::ByArrived::of(&o);
            }
        }
    });
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn openb_pods(body in input(ALIBABA)) {
        check_openb(body);
    }

    /// Node lists: any bytes read or are refused.
    #[test]
    fn openb_nodes(body in input(OPENB_NODES)) {
        within(Duration::from_secs(30), "openb nodes", move || {
            let path = tmp_file("nodes.csv", &body);
            let _ = apiary_trace::openb::read_nodes(&path);
        });
    }

    /// `--online` settings: any text parses or is refused.
    #[test]
    fn online_settings(text in ".{0,80}") {
        let _ = apiary_model::online::OnlineLoad::parse(&text);
    }
}

/// The samples themselves read and simulate: mutations start from valid input.
#[test]
fn every_sample_reads() {
    for (f, s) in [
        ("apiary", APIARY),
        ("jsonl", JSONL),
        ("philly", PHILLY),
        ("gavel", GAVEL),
        ("gavel10", GAVEL10),
        ("itp", ITP),
        ("itp-elasticflow", ITP_EF),
        ("elasticflow", ELASTICFLOW),
        ("muri", MURI),
        ("tiresias", TIRESIAS),
        ("pollux", POLLUX),
        ("alibaba", ALIBABA),
    ] {
        let path = tmp_file("sample.csv", s.as_bytes());
        let table = gavel_table();
        let opts = ReadOptions {
            gavel_throughputs: Some(table.to_path_buf()),
            ..Default::default()
        };
        let t = read(&path, &opts).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(t.format.name(), f);
        assert!(!t.jobs.is_empty(), "{f}");
    }
}

proptest! {
    #![proptest_config(config())]
    /// Gavel's throughput table and Pollux's profile files, the speed models' inputs.
    #[test]
    fn speed_tables(body in input(r#"{"v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.5}, "('ResNet-18 (batch size 32)', 2)": {"null": 19.0}}}"#),
                    profile in input("placement,local_bsz,step_time,sync_time\n1,32,0.1,0.01\n2,32,0.12,0.02\n11,32,0.2,0.1\n")) {
        within(Duration::from_secs(30), "speed tables", move || {
            let p = tmp_file("throughputs.json", &body);
            let _ = apiary_trace::speed::read_gavel_throughputs(&p);
            let _ = apiary_trace::speed::gavel_spread(&p, "v100");
            let dir = tmp_dir("profiles");
            let app = dir.join("cifar10");
            std::fs::create_dir_all(&app).unwrap();
            std::fs::write(app.join("placements.csv"), &profile).unwrap();
            let _ = apiary_trace::speed::pollux_spread(&dir);
        });
    }
}

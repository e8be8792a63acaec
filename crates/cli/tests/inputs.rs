//! Bad input through the real binary: every case ends, promptly, with a non-zero exit
//! and a message naming the file and field, never a hang, a panic or an abort.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file(name: &str, body: &str) -> String {
    let p = dir().join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// Runs the binary with a 60 s limit; returns (exit code, stderr). A signal (an abort
/// on stack overflow, a panic's SIGABRT) fails the test.
fn run(args: &[&str]) -> (i32, String) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let err = dir().join(format!("stderr-{}", RUNS.fetch_add(1, Ordering::Relaxed)));
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("apiary {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err).unwrap();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("apiary {args:?} died by a signal: {stderr}"));
    assert!(
        !stderr.contains("panicked"),
        "apiary {args:?} panicked: {stderr}"
    );
    (code, stderr)
}

fn refused(args: &[&str], want: &[&str]) {
    let (code, stderr) = run(args);
    assert_ne!(code, 0, "apiary {args:?} succeeded");
    for w in want {
        assert!(
            stderr.contains(w),
            "apiary {args:?}: want '{w}' in: {stderr}"
        );
    }
}

#[test]
fn traces_that_used_to_spin_or_wrap_are_refused() {
    let pollux = file(
        "pollux-huge-batch.csv",
        "name,time,application,num_replicas,batch_size\ncifar10-0,53,cifar10,6,5000000\n",
    );
    for policy in ["tiresias", "pollux"] {
        refused(
            &["simulate", "-q", "-c", "n2g8", "-p", policy, "-t", &pollux],
            &["pollux-huge-batch.csv, line 2, field 'batch_size'"],
        );
    }
    let philly = file(
        "philly-far.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,100,1,100,a\n900000000-10-01 00:00:00,100,1,100,a\n",
    );
    refused(
        &["simulate", "-q", "-t", &philly],
        &["philly-far.csv, line 3, field 'timestamp'"],
    );
    let alibaba = file(
        "alibaba-far.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np1,1,1,1,1000,,LS,Running,18000000000000000,18000000000000100,18000000000000000\n",
    );
    refused(
        &["simulate", "-q", "-t", &alibaba],
        &["alibaba-far.csv, line 2, field 'creation_time'"],
    );
}

#[test]
fn the_live_driver_refuses_what_it_cannot_replay() {
    refused(
        &["simulate", "-q", "--driver", "sideways"],
        &["--driver must be sim or live"],
    );
    refused(
        &["simulate", "-q", "--driver", "live", "--speed", "comm"],
        &["--driver live runs jobs at trace speed"],
    );
    refused(
        &["simulate", "-q", "--driver", "live", "-p", "pollux"],
        &["pollux resizes jobs, which the live driver does not replay"],
    );
    refused(
        &["simulate", "-q", "--driver", "live", "-p", "edf"],
        &["edf resizes jobs", "--elastic"],
    );
}

#[test]
fn flags_out_of_range_are_refused() {
    let muri = file(
        "muri.csv",
        "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,1,1,1,1,0\n",
    );
    for f in ["NaN", "0", "-1"] {
        let flag = format!("--muri-itertime-factor={f}");
        refused(
            &["simulate", "-q", "-t", &muri, &flag],
            &["--muri-itertime-factor"],
        );
    }
    refused(&["simulate", "-q", "--mode", "slot:1e300"], &["--mode"]);
    refused(
        &["simulate", "-q", "--restart-overhead", "1e300"],
        &["--restart-overhead"],
    );
    refused(
        &["simulate", "-q", "-p", "gavel", "--set", "round=1e300"],
        &["parameter 'round'"],
    ); // Prefix caching needs block hashes the trace does not have.
    refused(
        &["llm", "simulate", "-q", "--prefix-cache"],
        &["--prefix-cache", "hash_ids", "azure-conv-sample.csv"],
    );
    // Tensor parallelism that does not split the heads, and a context past the model's.
    refused(
        &["llm", "simulate", "-q", "--tp", "3"],
        &["--tp", "32 attention heads", "3 GPUs"],
    );
    refused(
        &["llm", "simulate", "-q", "--max-len", "0"],
        &["--max-len", "at least 1"],
    );
    // A trace request of no tokens.
    let zero = file(
        "zero.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,0,44\n",
    );
    refused(
        &["llm", "simulate", "-q", "--trace", &zero],
        &["zero.csv", "line 2", "ContextTokens", "at least one token"],
    );
    // Disaggregation: a split that is not P:D or leaves a pool empty, a prefill degree
    // without it or not splitting the heads, and a compare it cannot run.
    for (args, want) in [
        (&["--disagg", "2"][..], &["--disagg", "'2' is not P:D"][..]),
        (&["--disagg", "0:2"], &["--disagg", "at least one prefill"]),
        (&["--prefill-tp", "2"], &["--prefill-tp", "--disagg"]),
        (
            &["--disagg", "1:1", "--prefill-tp", "3"],
            &["--tp", "3 GPUs"],
        ),
        (&["--disagg", "1:1", "--kv-gbps", "0"], &["--kv-gbps"]),
        (&["--swap-space=-1"], &["--swap-space"]),
        (
            &["--host-cache-gb", "10"],
            &["--host-cache-gb", "--prefix-cache"],
        ),
    ] {
        let mut a = vec!["llm", "simulate", "-q"];
        a.extend_from_slice(args);
        refused(&a, want);
    }
    refused(
        &["llm", "compare", "-q", "--disagg", "1:1"],
        &["--disagg", "llm simulate --disagg"],
    );
    for (args, want) in [
        (&["--disagg", "1:1"][..], &["drop --disagg"][..]),
        (&["--rate", "3"], &["drop --rate"]),
        (&["--gpus", "1"], &["--gpus", "1"]),
        (&["--attainment", "0"], &["--attainment"]),
        (&["--steps", "0"], &["--steps"]),
        (&["--engine", "warp"], &["--engine", "warp"]),
        (&["--node-gpus", "3"], &["--node-gpus", "divisor"]),
    ] {
        let mut a = vec!["llm", "place", "-q"];
        a.extend_from_slice(args);
        refused(&a, want);
    }
}

#[test]
fn cluster_file_errors_name_the_file() {
    let path = file(
        "prod-cluster.toml",
        "name = \"production\"\n[[switches]]\n[[switches.nodes]]\ncount = 2\ngpus = 0\n",
    );
    refused(
        &["simulate", "-q", "-c", &path],
        &[&path, "switches[0].nodes[0].gpus"],
    );
    let (_, stderr) = run(&["simulate", "-q", "-c", &path]);
    assert!(!stderr.contains("production"), "{stderr}");
}

#[test]
fn hived_configs_that_used_to_abort_or_exhaust_memory_are_refused() {
    let mut deep = String::from(
        "physicalCluster:\n  cellTypes:\n    T0: {childCellType: G, childCellNumber: 8, isNodeLevel: true}\n",
    );
    for i in 1..40_000 {
        deep += &format!(
            "    T{i}: {{childCellType: T{}, childCellNumber: 1}}\n",
            i - 1
        );
    }
    deep += "  physicalCells: [{cellType: T39999}]\n";
    let deep = file("deep.yaml", &deep);
    refused(
        &["hived", "status", &deep],
        &["deep.yaml", "more than 64 levels"],
    );
    let big = file(
        "bignum.yaml",
        "physicalCluster:\n  cellTypes:\n    N: {childCellType: G, childCellNumber: 8, isNodeLevel: true}\n  physicalCells: [{cellType: N}]\nvirtualClusters:\n  a: {virtualCells: [{cellType: N, cellNumber: 1000000000}]}\n",
    );
    refused(
        &["hived", "status", &big],
        &["bignum.yaml", "needs 1000000000 cells, 1 available"],
    );
}

/// `apiary ... | head`: a reader that goes away ends the run as it ends a C tool, with
/// SIGPIPE's status 141 and nothing on stderr, whether the command prints line by line
/// (`policies`) or writes through a writer (`trace synth -o -`).
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    for args in [
        &["policies"][..],
        &[
            "trace",
            "info",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../testdata/traces/philly-sample.csv"
            ),
        ],
        &[
            "trace", "synth", "--jobs", "1000", "--gpus", "64", "-o", "-",
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        // No reader from the start: the first write fails.
        drop(reader);
        let out = Command::new(BIN)
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn out_of_range_values_that_used_to_pass_silently_are_refused() {
    let ef = file(
        "ef-best-effort.csv",
        "job_id,submit_time,num_gpu,duration,ddl,best_effort\nj1,0,1,100,200,18446744073709551615\n",
    );
    refused(
        &["simulate", "-q", "-p", "fifo", "-t", &ef],
        &[
            "ef-best-effort.csv, line 2, field 'best_effort'",
            "expected 0 or 1",
        ],
    );
    let alibaba = file(
        "alibaba-milli.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np1,1,1,1,18446744073709551615,,LS,Running,0,100,0\n",
    );
    refused(
        &["simulate", "-q", "-t", &alibaba],
        &[
            "alibaba-milli.csv, line 2, field 'gpu_milli'",
            "at most 1000",
        ],
    );
    let topo = file(
        "empty-name.toml",
        "compute = [\"gpu0\", \"\"]\nswitches = []\nlinks = [{ from = \"gpu0\", to = \"\", bw = 10 }]\n",
    );
    refused(
        &["comm", "plan", "-t", &topo],
        &["empty-name.toml: compute[1]: a node's name is empty"],
    );
}

#[test]
fn compare_checks_every_setting_before_the_first_run() {
    // Each of these used to run fifo (and srtf) first and fail on its turn.
    for (policies, want) in [
        (
            "fifo,srtf,elasticflow",
            "-p elasticflow: policy elasticflow reads a throughput table",
        ),
        (
            "fifo,pollux",
            "-p pollux: policy pollux reads a goodput model",
        ),
        (
            "fifo,tiresias:thresholds=abc",
            "-p tiresias:thresholds=abc: parameter 'thresholds'",
        ),
        (
            "fifo,tiresias:thresholds=1000,5000",
            "write thresholds=[1000,5000]",
        ),
    ] {
        let (code, stderr) = run(&["compare", "-p", policies]);
        assert_ne!(code, 0, "{policies}");
        assert!(
            stderr.contains(want),
            "{policies}: want '{want}' in: {stderr}"
        );
        // No run started: a run prints its timing line.
        assert!(
            !stderr.contains("events in"),
            "{policies} ran first: {stderr}"
        );
    }
}

#[test]
fn gpu_sharing_runs_refuse_what_they_cannot_place() {
    let pods = file(
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\n",
    );
    let nodes = file(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,65536,2,T4\n",
    );
    refused(&["simulate", "-p", "fgd"], &["pass --trace"]);
    refused(
        &["simulate", "-p", "fgd", "-t", &pods],
        &["openb node list", "got 'n64g8'"],
    );
    refused(
        &[
            "simulate", "-p", "fgd", "-t", &pods, "-c", &nodes, "--mode", "slot:60",
        ],
        &["'fill:RATIO'", "got 'slot:60'"],
    );
    refused(
        &[
            "simulate", "-p", "fgd", "-t", &pods, "-c", &nodes, "--set", "x=1",
        ],
        &["take no parameters"],
    );
    refused(
        &["compare", "-p", "fgd,fifo"],
        &["compare each kind on its own"],
    );
    let bad = file(
        "bad-pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,3,500\n",
    );
    refused(
        &[
            "simulate", "-p", "fgd", "-t", &bad, "-c", &nodes, "--mode", "fill:1.3",
        ],
        &["bad-pods.csv, line 2, field 'gpu_milli'"],
    );
    let (code, _) = run(&[
        "simulate", "-p", "fgd", "-t", &pods, "-c", &nodes, "--mode", "fill:1.3",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn checkpoint_plans_refuse_what_they_cannot_plan() {
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let plan = ["checkpoint", "plan", "--gpus", "64"];
    let with = |extra: &[&str]| -> Vec<String> {
        plan.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    refused(
        &args(&with(&["--failures", "llama4", "--params-b", "7"])),
        &["--failures 'llama4' is neither a preset (llama3, philly) nor a readable file"],
    );
    refused(
        &args(&with(&["--failures", "llama3"])),
        &["give --model NAME or --params-b BILLIONS"],
    );
    refused(
        &args(&with(&[
            "--failures",
            "llama3",
            "--params-b",
            "7",
            "--rule",
            "cap:150%",
        ])),
        &["--rule 'cap:150%': the cap lies strictly between 0 and 1"],
    );
    let bad_rate = file(
        "failures.toml",
        "restart_s = 60\n[[class]]\nname = \"gpu\"\nkind = \"node\"\nper = \"gpu\"\nrate_per_hour = \"often\"\n",
    );
    refused(
        &args(&with(&["--failures", &bad_rate, "--params-b", "7"])),
        &["failures.toml", "rate_per_hour"],
    );
    let rack = file(
        "rack.toml",
        "restart_s = 60\n[[class]]\nname = \"rack\"\nkind = \"correlated\"\nper = \"job\"\nrate_per_hour = 0.01\n",
    );
    let host_only = file(
        "host-only.toml",
        "[[level]]\nname = \"host\"\nsurvives = [\"process\"]\nsave_gbps = 100\nrestore_gbps = 100\n",
    );
    refused(
        &args(&with(&[
            "--failures",
            &rack,
            "--params-b",
            "7",
            "--levels",
            &host_only,
        ])),
        &["no checkpoint level survives failure class 'rack' (correlated)"],
    );
    refused(
        &args(&with(&[
            "--failures",
            "llama3",
            "--params-b",
            "7",
            "--simulate=0",
        ])),
        &["--simulate 0: give hours above 0"],
    );
}

#[test]
fn a_checkpoint_plan_gives_its_ettr_beside_a_simulation_of_the_job() {
    let o = Command::new(BIN)
        .args([
            "checkpoint",
            "plan",
            "--gpus",
            "16384",
            "--failures",
            "llama3",
            "--params-b",
            "405",
            "--simulate",
            "1296",
            "--seeds",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ettr = v["ettr"].as_f64().unwrap();
    assert!((0.9..1.0).contains(&ettr), "{v}");
    assert!((v["mtti_hours"].as_f64().unwrap() - 3.093).abs() < 0.01);
    for run in v["simulated"].as_array().unwrap() {
        assert!((run["ettr"].as_f64().unwrap() - ettr).abs() < 0.01, "{v}");
    }
    assert_eq!(v["levels"][1]["name"], "peer");
    assert!(
        v["levels"][0]["interval_s"].is_null(),
        "the host level is never saved"
    );
}

#[test]
fn failure_models_and_logs_that_cannot_run_are_refused() {
    let class = "[[class]]\nname = \"gpu\"\nkind = \"node\"\nper = \"gpu\"\nrate_per_hour = 1e-5\n";
    let far = file(
        "far.toml",
        &format!("restart_s = 60\n{class}[[event]]\nat_s = 10\nclass = \"gpu\"\nnode = 99\n"),
    );
    refused(
        &["simulate", "-q", "--failures", &far],
        &["--failures: an event at 10 s strikes a node or GPU the cluster lacks"],
    );
    let unnamed = file(
        "unnamed.toml",
        &format!("restart_s = 60\n{class}[[event]]\nat_s = 10\nclass = \"disk\"\ngpu = 1\n"),
    );
    refused(
        &["simulate", "-q", "--failures", &unnamed],
        &["unnamed.toml: event[0]: no class 'disk'"],
    );
    file(
        "bad-log.csv",
        "time_s,component,class\n10,node:1,gpu\n20,rack:2,gpu\n",
    );
    let logged = file(
        "logged.toml",
        &format!("restart_s = 60\nlog = \"bad-log.csv\"\n{class}"),
    );
    refused(
        &["simulate", "-q", "--failures", &logged],
        &["bad-log.csv: line 3: component: 'rack:2': give node:N or gpu:N"],
    );
    refused(
        &["simulate", "-q", "--driver", "live", "--failures", "llama3"],
        &["--driver live does not model failures yet"],
    );
}

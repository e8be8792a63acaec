//! Policies that size a running job, end to end through real agents. ElasticFlow
//! shrinks a running job to make room for one with a deadline; the agent stops it
//! (SIGTERM, its grace to save a checkpoint) and starts it again on half the GPUs,
//! telling it APIARY_NUM_GPUS and its devices. Pollux grows an adaptive job from the
//! hints it writes. GoldMiner gives jobs CPUs for their input pipelines, which the
//! agents pin them to, and re-pins a running job when its share changes. GreenFlow caps
//! a job's GPUs' power, which the agents set with nvidia-smi (a stand-in here: these
//! machines have no GPU). SiloD hands each job its cache and bandwidth in $APIARY_IO,
//! rewritten as they change. MuxFlow runs a job beside an online service whose load the
//! agent measures (through a stand-in nvidia-smi), and evicts it when the load spikes.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn elasticflow_resizes_a_running_job_by_checkpoint_and_restart() {
    let c = Cluster::with_config(
        "elastic",
        "elasticflow",
        false,
        "params = { slot = \"1\" }\n",
    );
    let dir = c.dir.join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    // Every attempt logs its restart count, size and devices; stopped, it saves and
    // exits; restarted, it has nothing left to do.
    let script = "trap 'echo saved $APIARY_NODE >> $APIARY_CHECKPOINT_DIR/log; exit 0' TERM; \
                  echo start $APIARY_RESTART_COUNT $APIARY_NUM_GPUS $APIARY_NODE \
                  $CUDA_VISIBLE_DEVICES >> $APIARY_CHECKPOINT_DIR/log; \
                  [ $APIARY_RESTART_COUNT -ge 1 ] && exit 0; \
                  while :; do sleep 0.05; done";
    let a = id_of(&cli(
        &c,
        &[
            "submit",
            "--elastic",
            "1-16",
            "--estimate",
            "1600",
            "--checkpoint-dir",
            &d,
            "--grace",
            "5",
            "--",
            "sh",
            "-c",
            script,
        ],
    ));
    c.wait_running(a);
    assert_eq!(
        c.job(a)["parts"].as_array().unwrap().len(),
        2,
        "all 16 GPUs"
    );
    let log = dir.join("log");
    let t0 = std::time::Instant::now();
    // Both nodes' processes are up, their traps set.
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.matches("start 0 16").count() == 2) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "a never started on 16 GPUs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // b's 1,600 s on 16 GPUs is 25,600 GPU-seconds; by a deadline 5,000 s away it
    // needs 5.1 GPUs, so 8, and a keeps the other 8.
    let b = id_of(&cli(
        &c,
        &[
            "submit",
            "--elastic",
            "1-16",
            "--estimate",
            "1600",
            "--deadline",
            "now+5000s",
            "--",
            "sh",
            "-c",
            "echo $APIARY_NUM_GPUS",
        ],
    ));
    let done = c.wait_terminal(&[a, b], Duration::from_secs(30));
    for j in &done {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    assert_eq!(
        done[1]["parts"][0]["output_tail"].as_str().unwrap().trim(),
        "8"
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    // Each node's process of attempt 0 started and saved before attempt 1 started on
    // one node with 8 GPUs (b's quick end may grow a again later: not checked here).
    let first_restart = lines.iter().position(|l| l.starts_with("start 1")).unwrap();
    lines[..first_restart].sort();
    assert_eq!(
        lines[..first_restart],
        [
            "saved n0",
            "saved n1",
            "start 0 16 n0 0,1,2,3,4,5,6,7",
            "start 0 16 n1 0,1,2,3,4,5,6,7",
        ],
        "{}",
        done[0]
    );
    let restart = &lines[first_restart];
    assert!(
        restart == "start 1 8 n0 0,1,2,3,4,5,6,7" || restart == "start 1 8 n1 0,1,2,3,4,5,6,7",
        "{restart}"
    );
    let resized: Vec<&serde_json::Value> = done[0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["event"] == "resized")
        .collect();
    assert_eq!(resized[0]["detail"], "16 -> 8 GPUs", "{}", done[0]);
    // `apiary job` shows the range and the resize.
    let shown = out(&cli(&c, &["job", &a.to_string()]));
    assert!(
        shown.contains("elastic  1-16 GPUs, 16 when not resized") && shown.contains("resized"),
        "{shown}"
    );
}

#[test]
fn pollux_grows_an_adaptive_job_from_the_hints_it_writes() {
    // Pollux charges a young job's restart (30 s by default): this one is seconds old.
    let c = Cluster::with_config(
        "adaptive",
        "pollux",
        false,
        "params = { interval = \"1\", population = \"20\", generations = \"20\", restart_penalty = \"0.5\" }\n",
    );
    let log = c.dir.join("log");
    let l = log.display().to_string();
    // AdaptDL's hints for a job that scales well and whose gradient noise lets it use
    // large batches, having profiled the replicas it runs on; it is done once it runs
    // on two GPUs.
    let hints = r#"{"initBatchSize": 128, "maxBatchSize": 4096, "localBszBounds": [32, 256],
        "maxProfiledReplicas": %s, "gradientAccumulation": true,
        "gradParams": {"norm": 0.01, "var": 1.0},
        "perfParams": {"alpha_c": 0.1, "beta_c": 0.01, "alpha_n": 0.01, "beta_n": 0.001,
                       "alpha_r": 0.01, "beta_r": 0.001, "gamma": 1.5}}"#;
    let script = format!(
        "trap 'exit 0' TERM; echo start $APIARY_RESTART_COUNT $APIARY_NUM_GPUS >> {l}; \
         [ $APIARY_NUM_GPUS -ge 2 ] && exit 0; \
         printf '{hints}' $APIARY_NUM_GPUS > $APIARY_HINTS; \
         while :; do sleep 0.05; done"
    );
    let id = id_of(&cli(
        &c,
        &[
            "submit",
            "--adaptive",
            "init=128,max=4096,local=32-256",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ));
    let done = c.wait_terminal(&[id], Duration::from_secs(30));
    let j = &done[0];
    assert_eq!(j["state"], "succeeded", "{j}");
    // Without a goodput model it got one replica, as Pollux's artifact gives; with one
    // that had profiled a replica, two.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "start 0 1\nstart 1 2\n",
        "{j}"
    );
    let resized: Vec<&str> = j["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["event"] == "resized")
        .map(|t| t["detail"].as_str().unwrap())
        .collect();
    assert_eq!(resized, ["1 -> 2 GPUs"], "{j}");
    assert_eq!(j["hints"]["maxProfiledReplicas"], 1, "{j}");
    // Hints that clash with the submission are refused, and the job is told why.
    let id = id_of(&cli(
        &c,
        &[
            "submit",
            "--adaptive",
            "init=64,max=4096,local=32-256",
            "--",
            "sh",
            "-c",
            "echo '{\"initBatchSize\": 128}' > $APIARY_HINTS; sleep 1",
        ],
    ));
    let done = c.wait_terminal(&[id], Duration::from_secs(30));
    let rejected: Vec<&str> = done[0]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["event"] == "hints rejected")
        .map(|t| t["detail"].as_str().unwrap())
        .collect();
    assert_eq!(rejected.len(), 1, "{}", done[0]);
    assert!(
        rejected[0].ends_with("initBatchSize 128 is not the submission's 64"),
        "{rejected:?}"
    );
}

#[test]
fn goldminer_pins_jobs_to_their_cpus_and_re_pins_a_running_one() {
    let node_cpus = apiary_agent::cpus::own_cpus();
    if node_cpus.len() < 2 {
        eprintln!("skipped: the agents have {} CPU", node_cpus.len());
        return;
    }
    // One CPU a node: a pool of 2 for 16 GPUs.
    let c = Cluster::with_nodes("cpus", "goldminer", false, "", "cpus = 1");
    let log = c.dir.join("log");
    let done = c.dir.join("done");
    let (l, d) = (log.display(), done.display());
    // A job that logs the CPUs it may run on whenever they change, until told to stop.
    let watch = |name: &str| {
        format!(
            "echo {name} start $APIARY_CPUS >> {l}; last=; while :; do \
             cur=$(grep Cpus_allowed_list /proc/self/status | cut -f2); \
             [ \"$cur\" != \"$last\" ] && echo {name} $cur >> {l}; last=$cur; \
             [ -e {d} ] && exit 0; sleep 0.05; done"
        )
    };
    let lines = |name: &str| -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|x| x.starts_with(&format!("{name} ")))
            .map(|x| x[name.len() + 1..].to_string())
            .collect()
    };
    let wait_for = |what: &dyn Fn() -> bool, why: &str| {
        let t0 = std::time::Instant::now();
        while !what() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{why}: {:?}",
                lines("r")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Without a model it is refused, and told how to submit.
    let o = cli(&c, &["submit", "--", "true"]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && said.contains("--model NAME"),
        "{said}"
    );
    // ResNet-18 alone gains from both CPUs of the pool, and is pinned to two.
    let r = id_of(&cli(
        &c,
        &[
            "submit",
            "--model",
            "resnet18",
            "--",
            "sh",
            "-c",
            &watch("r"),
        ],
    ));
    let list = |s: &str| apiary_agent::cpus::parse_list(s).unwrap();
    wait_for(&|| lines("r").len() >= 2, "r starts");
    assert_eq!(lines("r")[0], "start 2");
    assert_eq!(list(&lines("r")[1]), node_cpus[..2]);
    // BERT gains all it can from one CPU, more than ResNet-18 from its second: that
    // CPU goes to BERT, and ResNet-18 is re-pinned to one as it runs.
    let b = id_of(&cli(
        &c,
        &["submit", "--model", "bert", "--", "sh", "-c", &watch("b")],
    ));
    wait_for(
        &|| lines("r").len() >= 3 && lines("b").len() >= 2,
        "r re-pinned",
    );
    assert_eq!(list(&lines("r")[2]), node_cpus[..1]);
    assert_eq!(lines("b")[0], "start 1");
    assert_eq!(list(&lines("b")[1]).len(), 1);
    let shown = out(&cli(&c, &["job", &r.to_string()]));
    assert!(
        shown.contains("model    resnet18, 1.00 CPUs for its input pipeline"),
        "{shown}"
    );
    std::fs::write(&done, "").unwrap();
    let ended = c.wait_terminal(&[r, b], Duration::from_secs(30));
    for j in &ended {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    assert_eq!(lines("r").len(), 3, "pinned at start and re-pinned once");
}

/// Restarts `c`'s agents with a stand-in `nvidia-smi` (these machines have no GPU): a
/// shell script whose body is `body`.
fn with_stand_in_smi(c: &mut Cluster, body: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let smi = c.dir.join("nvidia-smi");
    std::fs::write(&smi, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let smi = smi.display().to_string();
    for n in ["n0", "n1"] {
        // Just started, it may go before its handler is up: how it exits is not at issue.
        c.term_agent(n);
        c.start_agent_with(n, &["--allow-root-jobs", "--nvidia-smi", &smi]);
    }
}

#[test]
fn greenflow_caps_a_jobs_gpus_through_nvidia_smi_and_the_agent_restores_them() {
    let mut c = Cluster::with_config(
        "power",
        "greenflow",
        false,
        "params = { overhead = \"false\", budget_kg = \"0\", power_limits = \"1,0.6\" }\n",
    );
    // A stand-in nvidia-smi: GPUs of 100 to 300 W (250 by default); it logs each call
    // that sets a limit.
    let calls = c.dir.join("smi.log");
    with_stand_in_smi(
        &mut c,
        &format!(
            "case \"$1\" in --query-gpu=*) for i in 0 1 2 3 4 5 6 7; do \
             echo \"$i, 100.00, 300.00, 250.00\"; done;; *) echo \"$@\" >> {};; esac\n",
            calls.display()
        ),
    );
    let done = c.dir.join("done");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", done.display());
    // A ResNet-50 under the documented constant intensity and no budget: every hour is
    // at the floor's price, where two GPUs capped at 60 % buy work for less carbon per
    // unit than one at the top limit (as crates/sim/tests/it/carbon.rs works out).
    let e = id_of(&cli(
        &c,
        &[
            "submit",
            "--elastic",
            "1-2",
            "--throughput",
            "1:1,2:1.8",
            "--estimate",
            "10800",
            "--model",
            "resnet50",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ));
    c.wait_running(e);
    let j = c.job(e);
    assert_eq!(j["power_limit"], 0.6, "{j}");
    let part = &j["parts"][0];
    let gpus: Vec<String> = part["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.to_string())
        .collect();
    let set = format!("-i {} -pl 180.00", gpus.join(","));
    let reset = format!("-i {} -pl 250.00", gpus.join(","));
    let log = || std::fs::read_to_string(&calls).unwrap_or_default();
    let t0 = std::time::Instant::now();
    while !log().contains(&set) {
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", log());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&done, "").unwrap();
    let ended = c.wait_terminal(&[e], Duration::from_secs(30));
    assert_eq!(ended[0]["state"], "succeeded", "{}", ended[0]);
    // Its GPUs go back to their default with the next reply.
    while !log().contains(&reset) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        log().lines().collect::<Vec<_>>(),
        [set.as_str(), reset.as_str()]
    );
}

#[test]
fn silod_hands_a_running_job_its_cache_and_bandwidth_as_they_change() {
    // The default storage over 16 GPUs: 400 GB of cache, 320 MB/s of remote bandwidth.
    let c = Cluster::with_config("silod", "silod", false, "");
    let log = c.dir.join("log");
    let done = c.dir.join("done");
    // A job that logs its share file whenever it changes, until told to stop.
    let script = format!(
        "last=; while [ ! -e {d} ]; do cur=$(cat $APIARY_IO); \
         [ \"$cur\" != \"$last\" ] && echo \"$cur\" >> {l}; last=$cur; sleep 0.05; done",
        d = done.display(),
        l = log.display()
    );
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    // BERT on 8 GPUs reads 29.09 MB/s; its 380 GB fit the cache whole.
    let x = id_of(&cli(
        &c,
        &[
            "submit",
            "--gpus",
            "8",
            "--model",
            "bert",
            "--dataset-gb",
            "380",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ));
    let t0 = std::time::Instant::now();
    while !lines().contains("\"cache_bytes\": 380000000000") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", lines());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A ResNet-50 on 8 GPUs, whose 140 GB save more remote reads per byte cached, takes
    // its cache first: BERT keeps 260 GB, hits 260/380 of its reads, and needs the rest
    // of its 29.09 MB/s from remote storage: 9,186,603 bytes/s. Its file says so.
    let wait = format!("while [ ! -e {} ]; do sleep 0.05; done", done.display());
    let y = id_of(&cli(
        &c,
        &[
            "submit",
            "--gpus",
            "8",
            "--model",
            "resnet50",
            "--dataset-gb",
            "140",
            "--",
            "sh",
            "-c",
            &wait,
        ],
    ));
    let want = "{\"cache_bytes\": 260000000000, \"remote_bytes_per_s\": 9186603}";
    while !lines().contains(want) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", lines());
        std::thread::sleep(Duration::from_millis(50));
    }
    let shown = out(&cli(&c, &["job", &x.to_string()]));
    assert!(
        shown.contains("io       260.0 GB cached, 9.2 MB/s from remote storage"),
        "{shown}"
    );
    std::fs::write(&done, "").unwrap();
    for j in c.wait_terminal(&[x, y], Duration::from_secs(30)) {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
}

#[test]
fn muxflow_runs_a_job_beside_a_measured_service_and_evicts_it_on_a_spike() {
    // n0's GPUs serve online services (outside apiary), n1's are offline.
    let mut c = Cluster::with_config("muxflow", "muxflow", false, "online_nodes = 1\n");
    // A stand-in nvidia-smi: 80 GiB GPUs; `pmon` lists one service process per GPU of
    // n0, with the SM % written in the file `load` (one line per GPU).
    let load = c.dir.join("load");
    std::fs::write(&load, "20\n90\n90\n90\n90\n90\n90\n90\n").unwrap();
    with_stand_in_smi(
        &mut c,
        &format!(
            "case \"$1\" in\n\
             --query-gpu=*) for i in 0 1 2 3 4 5 6 7; do echo \"$i, 81920\"; done;;\n\
             pmon) echo '# gpu pid type sm mem enc dec fb command'; \
             echo '# Idx # C/G % % % % MB name'; i=0; while read sm; do \
             echo \"$i $((9000 + i)) C $sm 5 - - 16384 server\"; i=$((i + 1)); done < {};;\n\
             esac\n",
            load.display()
        ),
    );
    // The services' loads reach the server: n0's GPU 0 at 20 % of its SMs.
    let t0 = std::time::Instant::now();
    let sm0 = || {
        let (_, nodes) = call("GET", &c.url("/v1/nodes"), None, None);
        nodes[0]["services"][0]["sm"].as_f64()
    };
    while sm0() != Some(0.2) {
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", sm0());
        std::thread::sleep(Duration::from_millis(100));
    }
    let shown = out(&cli(&c, &["nodes"]));
    assert!(
        shown.contains("services (GPU:SM%/memory%) 0:20/20 1:90/20"),
        "{shown}"
    );
    let log = c.dir.join("log");
    let done = c.dir.join("done");
    let (l, d) = (log.display(), done.display());
    let wait = format!("while [ ! -e {d} ]; do sleep 0.05; done");
    // Eight GPUs fill the offline node.
    let x = id_of(&cli(
        &c,
        &["submit", "--gpus", "8", "--", "sh", "-c", &wait],
    ));
    c.wait_running(x);
    // One more finds only serving GPUs; GPU 0 is the one whose service leaves it room:
    // 1 - 0.2 - 0.05 headroom = 75 % of the SMs, and 80 % of the memory.
    let script = format!(
        "trap 'echo evicted >> {l}; exit 0' TERM; \
         echo start $APIARY_NODE $CUDA_VISIBLE_DEVICES $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE \
         $(cat $APIARY_SM_SHARE) >> {l}; {wait}"
    );
    let y = id_of(&cli(
        &c,
        &["submit", "--grace", "5", "--", "sh", "-c", &script],
    ));
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    while !lines().contains("start") {
        assert!(t0.elapsed() < Duration::from_secs(40), "{}", lines());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        lines(),
        "start n0 0 75 {\"sm_share\": 0.7500, \"memory_share\": 0.8000}\n"
    );
    // The service spikes to 50 %, more than the 25 % the job left it: the job is
    // evicted (SIGTERM, its grace to checkpoint) and placed again beside it at 45 %.
    std::fs::write(&load, "50\n90\n90\n90\n90\n90\n90\n90\n").unwrap();
    while !lines().contains("start n0 0 45") {
        assert!(t0.elapsed() < Duration::from_secs(60), "{}", lines());
        std::thread::sleep(Duration::from_millis(50));
    }
    let got: Vec<String> = lines().lines().map(str::to_string).collect();
    assert_eq!(got[1], "evicted", "{got:?}");
    std::fs::write(&done, "").unwrap();
    for j in c.wait_terminal(&[x, y], Duration::from_secs(30)) {
        assert_eq!(j["state"], "succeeded", "{j}");
    }
}

//! An elastic job resized end to end through real agents: ElasticFlow shrinks a
//! running job to make room for one with a deadline; the agent stops it (SIGTERM, its
//! grace to save a checkpoint) and starts it again on half the GPUs, telling it
//! APIARY_NUM_GPUS and its devices.

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
    let id = |text: String| -> u64 { text.trim().rsplit(' ').next().unwrap().parse().unwrap() };
    let a = id(out(&cli(
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
    )));
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
    let b = id(out(&cli(
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
    )));
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

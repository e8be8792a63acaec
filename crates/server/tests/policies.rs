//! Every policy `apiary policies` lists is served live: each one here starts, takes a
//! job, and runs it to completion through the agents' protocol.

use apiary_policy::{BUILTIN, Capability};
mod common;

use apiary_server::config::ServerConfig;
use apiary_server::core::Core;
use apiary_server::types::*;

fn config(policy: &str, extra: &str) -> Result<ServerConfig, String> {
    common::two_nodes(policy, extra).map_err(|e| e.to_string())
}

fn heartbeat(node: &str, running: &[AttemptRef], exited: &[Exit]) -> Heartbeat {
    Heartbeat {
        node: node.into(),
        instance: "test".into(),
        succeeds: None,
        replace: false,
        gpus: 4,
        running: running.to_vec(),
        exited: exited.to_vec(),
        shutting_down: false,
        output: Vec::new(),
        hints: Vec::new(),
        online: Vec::new(),
    }
}

/// The config that serves `name`: itself, or the intra policy FIFO inside its VC
/// sharing.
fn serving(name: &str, tenants: bool) -> Result<ServerConfig, String> {
    if apiary_policy::find(name).is_some_and(|s| s.has(Capability::CpuWorkers)) {
        // Its pool is the nodes' CPUs.
        return common::two_nodes_with(name, "", "cpus = 8").map_err(|e| e.to_string());
    }
    if apiary_policy::find(name).is_some_and(|s| s.has(Capability::OnlineSharing)) {
        // Node a serves online services; b is offline.
        return config(name, "online_nodes = 1");
    }
    if !tenants {
        return config(name, "");
    }
    let vcs = if name == "quota" {
        "[[vcs]]\nname = \"x\"\nquota_gpus = 4\n[[vcs]]\nname = \"y\"\nquota_gpus = 4\n"
    } else {
        "[[vcs]]\nname = \"x\"\nnodes = 1\n[[vcs]]\nname = \"y\"\nnodes = 1\n"
    };
    config("fifo", &format!("sharing = \"{name}\"\n{vcs}"))
}

#[test]
fn every_policy_is_served_or_refused_naming_its_capability() {
    let mut served = Vec::new();
    for spec in BUILTIN {
        let tenants = spec.has(Capability::Tenants);
        let cfg = serving(spec.name, tenants);
        let cfg = cfg.unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        let mut core = Core::new(cfg, 0).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        let mut job: JobSpec = serde_json::from_value(serde_json::json!({
            "gpus": 4, "command": ["train"], "estimated_duration_s": 60
        }))
        .unwrap();
        if tenants {
            job.vc = Some("x".into());
        }
        // Pollux schedules adaptive jobs, and gives one without a goodput model yet
        // a single replica, as its artifact does.
        let adaptive = spec.has(Capability::Adaptive);
        if adaptive {
            job.adaptive = Some(AdaptiveBatch {
                init_batch_size: 128,
                max_batch_size: 4096,
                local_bsz_bounds: (32, 256),
            });
        }
        // GoldMiner sizes input pipelines by the model a job trains, SiloD caches by
        // what it reads.
        if spec.has(Capability::CpuWorkers) || spec.has(Capability::Io) {
            job.model = Some("res18".into());
            job.dataset_gb = Some(10.0);
        }
        let gpus = if adaptive { 1 } else { 4 };
        let id = core.submit(job, 0).unwrap();
        // Round-based policies decide at their next round: follow their wake-ups.
        let mut now = 0;
        core.schedule(now);
        for _ in 0..10 {
            if core.job(id).unwrap().state == JobState::Running {
                break;
            }
            now = core.wake().unwrap_or(now + 1000).max(now + 1);
            core.schedule(now);
        }
        let rec = core.job(id).unwrap();
        assert_eq!(
            rec.state,
            JobState::Running,
            "{}: {:?}",
            spec.name,
            rec.history
        );
        let node = rec.parts[0].node.clone();
        let attempt = AttemptRef {
            job: id,
            attempt: 1,
        };
        // The agent is told to launch it, reports it running, then its exit.
        let n = core
            .heartbeat(&heartbeat(&node, &[], &[]), now + 10)
            .unwrap();
        let reply = core.reply(n, &heartbeat(&node, &[], &[]));
        assert_eq!(reply.start.len(), 1, "{}", spec.name);
        assert_eq!(reply.start[0].gpus.len(), gpus, "{}", spec.name);
        core.heartbeat(&heartbeat(&node, &[attempt], &[]), now + 20)
            .unwrap();
        let exit = Exit {
            job: id,
            attempt: 1,
            code: 0,
            lost: false,
            output_tail: String::new(),
        };
        core.heartbeat(&heartbeat(&node, &[], &[exit]), now + 30)
            .unwrap();
        assert_eq!(
            core.job(id).unwrap().state,
            JobState::Succeeded,
            "{}",
            spec.name
        );
        served.push(spec.name);
    }
    assert_eq!(served.len(), BUILTIN.len(), "{served:?}");
    assert!(served.contains(&"goldminer"));
}

#[test]
fn a_vc_the_table_lacks_is_refused_before_it_is_accepted() {
    let cfg = serving("hived", true).unwrap();
    let mut core = Core::new(cfg, 0).unwrap();
    let job: JobSpec = serde_json::from_value(serde_json::json!({
        "gpus": 8, "command": ["train"], "vc": "x"
    }))
    .unwrap();
    let e = core.submit(job, 0).unwrap_err();
    assert_eq!(e.status, 422, "{e:?}");
    assert!(e.message.contains("VC x's share is 4"), "{}", e.message);
    assert_eq!(core.jobs(None, None, 10).len(), 0, "nothing was kept");
    let ok: JobSpec = serde_json::from_value(serde_json::json!({
        "gpus": 4, "command": ["train"], "vc": "x"
    }))
    .unwrap();
    assert_eq!(core.submit(ok, 0).unwrap(), 1, "the refused job used no id");
}

//! Which local account a job runs as. As Slurm runs each job as its submitter, the
//! server maps each VC to an account (`run_as` in its `[[vcs]]`), and an agent running
//! as root runs every job of that VC so: jobs of two tenants then can neither read nor
//! signal each other's processes, nor read each other's output. Without a VC account
//! the agent's `--run-as` user is used, and a root agent runs a job as root only with
//! `--allow-root-jobs`. Two tenants' jobs never run under one uid at once on a node.

use crate::AgentError;
use crate::procs::{RunAs, resolve_user};
use apiary_api::Launch;

/// What decides a job's account on this node.
pub struct Accounts<'a> {
    /// The node's name, for messages.
    pub node: &'a str,
    /// `--run-as`.
    pub fallback: Option<&'a RunAs>,
    /// `--allow-root-jobs`.
    pub allow_root: bool,
    /// The agent's own uid.
    pub agent_uid: u32,
    /// The text of `/etc/passwd`.
    pub passwd: &'a str,
}

impl Accounts<'_> {
    /// The account `l` runs as (`None`: the agent's own), or why it may not run here.
    pub fn of(&self, l: &Launch) -> Result<Option<RunAs>, AgentError> {
        let refuse = |why: String| Err(AgentError::Account(why));
        let root = self.agent_uid == 0;
        let chosen = match &l.run_as {
            Some(name) => {
                let Ok(u) = resolve_user(name, self.passwd) else {
                    return refuse(format!(
                        "VC {}'s account {name} does not exist on node {}",
                        l.vc, self.node
                    ));
                };
                if !root && u.uid != self.agent_uid {
                    return refuse(format!(
                        "VC {}'s account is {name}, and the agent on node {} does not run \
                         as root, so it cannot run jobs as another user",
                        l.vc, self.node
                    ));
                }
                Some(u)
            }
            None => self.fallback.cloned(),
        };
        let as_root = match &chosen {
            Some(u) => u.uid == 0,
            None => root,
        };
        if as_root && !self.allow_root {
            return refuse(format!(
                "the agent on node {} runs as root and VC {} names no account (`run_as` in \
                 the server's [[vcs]]): give the VC an account, the agent --run-as USER, or \
                 the agent --allow-root-jobs",
                self.node, l.vc
            ));
        }
        Ok(chosen)
    }
}

/// Refuses to run a job of `vc` as `uid` while a job of another VC runs as it here.
pub fn check_not_shared<'v>(
    uid: u32,
    vc: &str,
    mut running: impl Iterator<Item = (u32, &'v str)>,
) -> Result<(), AgentError> {
    match running.find(|&(u, v)| u == uid && v != vc) {
        Some((_, other)) => Err(AgentError::Account(format!(
            "uid {uid} runs a job of VC {other} on this node, and two tenants' jobs never \
             share a uid: give VC {vc} an account of its own (`run_as` in [[vcs]])"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
        train:x:1001:100:Trainer:/home/train:/bin/sh\n";

    fn launch(vc: &str, run_as: Option<&str>) -> Launch {
        Launch {
            job: 1,
            attempt: 1,
            command: vec!["true".into()],
            env: Default::default(),
            workdir: None,
            gpus: vec![0],
            gpu_milli: None,
            grace_ms: None,
            gpu_memory_mib: None,
            vc: vc.into(),
            run_as: run_as.map(String::from),
            hints: false,
        }
    }

    #[test]
    fn a_root_agent_runs_each_vc_as_its_account_and_refuses_what_it_cannot() {
        let a = Accounts {
            node: "n0",
            fallback: None,
            allow_root: false,
            agent_uid: 0,
            passwd: PASSWD,
        };
        assert_eq!(
            a.of(&launch("a", Some("train"))).unwrap().unwrap().uid,
            1001
        );
        let e = a.of(&launch("b", Some("ghost"))).unwrap_err().to_string();
        assert!(e.contains("ghost does not exist on node n0"), "{e}");
        let e = a.of(&launch("c", None)).unwrap_err().to_string();
        assert!(e.contains("--run-as") && e.contains("VC c"), "{e}");
        let e = a.of(&launch("r", Some("root"))).unwrap_err().to_string();
        assert!(e.contains("--allow-root-jobs"), "{e}");
        let unprivileged = Accounts {
            agent_uid: 1001,
            ..a
        };
        assert!(unprivileged.of(&launch("a", Some("train"))).is_ok());
        assert!(unprivileged.of(&launch("n", Some("nobody"))).is_err());
        assert!(unprivileged.of(&launch("c", None)).unwrap().is_none());
        assert!(check_not_shared(1001, "a", [(1001, "a"), (7, "b")].into_iter()).is_ok());
        let e = check_not_shared(1001, "b", [(1001, "a")].into_iter()).unwrap_err();
        assert!(e.to_string().contains("VC a"), "{e}");
    }
}

//! Which agent process speaks for a node. Each agent start is a fresh instance; a node
//! takes heartbeats from one instance at a time, so that two agents claiming one node
//! (a cloned host, a stray second agent) never both receive its jobs.
//!
//! A new instance takes a node over when the node's instance is silent past the node
//! timeout (its jobs have fenced themselves by then: their leases ran out), when it
//! succeeds that instance on the same state directory (it ended the jobs itself), or
//! when the operator says `--replace`. The instance it replaced is fenced: its
//! heartbeats get a 409 that tells it to kill its jobs and stop.

use super::{ApiError, Core, NodeEvent};
use crate::types::{Heartbeat, NodeHealth};

/// Replaced instances remembered, so that their heartbeats get "fenced" rather than
/// "another agent serves this node".
pub(super) const FENCED_KEPT: usize = 1024;

impl Core {
    /// Lets `hb`'s instance speak for node `n`, or says why not.
    pub(super) fn claim(&mut self, n: u32, hb: &Heartbeat, now: u64) -> Result<(), ApiError> {
        if hb.instance.is_empty() {
            return Err(ApiError::bad(
                "instance",
                "a heartbeat names its agent instance",
            ));
        }
        let timeout = (self.cfg.node_timeout_s * 1000.0) as u64;
        let node = &self.nodes[n as usize];
        let current = match &node.instance {
            Some(c) if *c == hb.instance => return Ok(()),
            Some(c) => c.clone(),
            None => {
                let name = node.name.clone();
                self.nodes[n as usize].instance = Some(hb.instance.clone());
                self.dirty_instances.push((name, hb.instance.clone()));
                return Ok(());
            }
        };
        if let Some((_, by)) = self.fenced.iter().rev().find(|(i, _)| *i == hb.instance) {
            return Err(ApiError::conflict(format!(
                "fenced: agent instance {} was replaced on node {} by {by}; it must kill its jobs and stop",
                hb.instance, node.name
            )));
        }
        // A binding recovered after a restart counts as heard at the start: its agent
        // gets the full timeout to heartbeat again.
        let heard = now.saturating_sub(node.last_heartbeat.unwrap_or(self.started));
        let silent = node.health == NodeHealth::Down || heard > timeout;
        let successor = hb.succeeds.as_deref() == Some(current.as_str());
        if !(hb.replace || silent || successor) {
            return Err(ApiError::conflict(format!(
                "node {} is served by agent instance {current}, heard {:.1} s ago: two agents \
                 for one node would run its jobs twice. Stop that agent, or start this one \
                 with --replace to fence it",
                node.name,
                heard as f64 / 1000.0
            )));
        }
        let why = if successor {
            "succeeds it on its state directory"
        } else if hb.replace {
            "--replace"
        } else {
            "it was silent"
        };
        self.node_events.push(NodeEvent {
            at_ms: now,
            node: node.name.clone(),
            event: "fenced",
            detail: format!(
                "agent instance {current} replaced by {} ({why})",
                hb.instance
            ),
        });
        self.nodes[n as usize].instance = Some(hb.instance.clone());
        self.dirty_instances
            .push((self.nodes[n as usize].name.clone(), hb.instance.clone()));
        self.orphan_parts(n, now);
        if self.fenced.len() >= FENCED_KEPT {
            self.fenced.pop_front();
        }
        self.fenced.push_back((current, hb.instance.clone()));
        Ok(())
    }

    /// Binds node `name` to the agent instance the store recorded, after a restart.
    pub fn recover_instance(&mut self, name: &str, instance: &str) {
        if let Some(&n) = self.node_ix.get(name) {
            self.nodes[n as usize].instance = Some(instance.to_string());
        }
    }

    /// The parts assigned to node `n` when its agent instance was replaced: the old
    /// instance may still run them (it started them, or a launch was on its way), and
    /// the new one never will. Each attempt ends as after a lost node, and its GPUs here
    /// stay held until the old instance's lease has surely run out (the node timeout
    /// plus the grace period), when [`Core::release_orphans`] frees them.
    fn orphan_parts(&mut self, n: u32, now: u64) {
        let until = now + self.lost_after_ms();
        for j in self.running_on(n) {
            let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
            self.stop_attempt(j);
            for p in self.jobs[j as usize].parts.iter_mut() {
                if p.exit.is_none() {
                    p.exit = Some(-1);
                }
            }
            self.end_attempt(j, now, Some(super::Failure::AgentReplaced));
            self.orphans.insert((id, attempt, n), until);
        }
    }

    /// Frees the GPUs of orphaned parts whose old instance's lease has run out.
    pub(super) fn release_orphans(&mut self, now: u64) -> bool {
        let due: Vec<(u64, u32, u32)> = self
            .orphans
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(k, _)| *k)
            .collect();
        for &(job, attempt, n) in &due {
            self.orphans.remove(&(job, attempt, n));
            self.exited(n, job, attempt, -1, true, now);
        }
        !due.is_empty()
    }
}

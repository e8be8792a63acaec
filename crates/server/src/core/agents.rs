//! The agents' side: heartbeats in, what each agent should run or stop out, attempts
//! that start and end, node health, cordon and drain.

use super::{ApiError, Core, Failure, LIVE_KEPT, gpus_of, mask_of, note};
use crate::types::{
    AttemptRef, Exit, Heartbeat, HeartbeatReply, JobRecord, JobState, Launch, NodeHealth,
    OUTPUT_LIVE_BYTES, OUTPUT_TAIL_BYTES, OutputChunk, Part, PartOutput,
};
use apiary_model::Placement;
use apiary_policy::{Declared, JobIdx};
use std::collections::BTreeSet;

impl Core {
    /// Holds the GPUs of the current attempt's live parts for their stopping processes.
    /// The world must still hold the placement (this re-takes it after release).
    pub(super) fn stop_attempt(&mut self, j: JobIdx) {
        if self.is_fractional(j) {
            return; // its share stays held until its process is gone
        }
        let id = self.jobs[j as usize].id;
        let attempt = self.jobs[j as usize].attempt;
        for part in self.jobs[j as usize].parts.clone() {
            if part.exit.is_some() {
                continue;
            }
            if let Some(&n) = self.node_ix.get(&part.node) {
                self.stopping.insert((id, attempt, n), mask_of(&part.gpus));
            }
        }
        let stopping = self
            .stopping
            .range((id, 0, 0)..=(id, u32::MAX, u32::MAX))
            .next()
            .is_some();
        self.world.set_blocked(j, stopping);
    }

    /// After the world released a job's GPUs, takes back those of its stopping parts.
    pub(super) fn fence_stopping(&mut self, id: u64, attempt: u32) {
        let keys: Vec<(u64, u32, u32)> = self
            .stopping
            .range((id, attempt, 0)..=(id, attempt, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            let p = Placement {
                parts: vec![(k.2, self.stopping[&k])],
            };
            if self.world.state.allocate(&p).is_err() {
                // Someone else holds them: nothing to fence (cannot happen when callers
                // fence right after the release).
                self.stopping.remove(&k);
            }
        }
    }

    /// Ends the current attempt: all parts exited (or were lost).
    pub(super) fn end_attempt(&mut self, j: JobIdx, now: u64, failure: Option<Failure>) {
        let lost_node = failure.is_some();
        if let Some(cause) = failure {
            *self.counters.failures.entry(cause.name()).or_insert(0) += 1;
        }
        let r = &self.jobs[j as usize];
        let ok = r.parts.iter().all(|p| p.exit == Some(0));
        let restarts_left = r.attempt <= r.spec.restart.max_restarts;
        let retry = !ok
            && restarts_left
            && if lost_node {
                r.spec.restart.on_node_loss
            } else {
                r.spec.restart.on_failure
            };
        let (id, attempt) = (r.id, r.attempt);
        let told = !self.is_fractional(j);
        self.drop_knobs(j);
        // Back to the queue, or over; either way the GPUs of parts still stopping stay
        // held. The policy never knew a job that shares a GPU.
        if told {
            if retry {
                self.world.preempt(j);
            } else {
                self.world.finish(j);
            }
            self.fence_stopping(id, attempt);
        }
        let ctx = self
            .pass
            .ctx(&mut self.world, Declared::of(self.policy.as_ref()));
        self.counters.count(match (retry, ok) {
            (true, _) => "requeue",
            (false, true) => "succeed",
            (false, false) => "fail",
        });
        if retry {
            if told {
                self.policy.on_requeue(&ctx, j);
            }
            let r = &mut self.jobs[j as usize];
            r.state = JobState::Queued;
            let why = failure.map_or("it failed", Failure::why);
            note(r, now, "requeued", format!("attempt {attempt}: {why}"));
            self.queue_share(j);
        } else {
            if told {
                self.policy.on_finish(&ctx, j);
            }
            let r = &mut self.jobs[j as usize];
            if let Some(n) = self.active.get_mut(&r.vc) {
                *n = n.saturating_sub(1);
            }
            r.state = if ok {
                JobState::Succeeded
            } else {
                JobState::Failed
            };
            let codes: Vec<String> = r
                .parts
                .iter()
                .map(|p| format!("{}={}", p.node, p.exit.unwrap_or(-1)))
                .collect();
            note(r, now, r.state.as_str(), codes.join(" "));
        }
        self.dirty.insert(j);
    }

    /// One part of job `j`'s current attempt ended with `code`; `failure` names the
    /// cause when the part was lost rather than exited.
    pub(super) fn part_exited(
        &mut self,
        j: JobIdx,
        node: u32,
        code: i32,
        now: u64,
        failure: Option<Failure>,
    ) {
        let declared = self.jobs[j as usize]
            .spec
            .restart
            .failure_exit_codes
            .contains(&code);
        let failure = failure.or(declared.then_some(Failure::ExitCode));
        let name = self.nodes[node as usize].name.clone();
        let r = &mut self.jobs[j as usize];
        let Some(part) = r
            .parts
            .iter_mut()
            .find(|p| p.node == name && p.exit.is_none())
        else {
            return;
        };
        part.exit = Some(code);
        self.dirty.insert(j);
        let all_done = r.parts.iter().all(|p| p.exit.is_some());
        let failed = code != 0;
        if !all_done && failed {
            // A failed part ends the attempt: stop the others.
            self.stop_attempt(j);
            for p in self.jobs[j as usize].parts.iter_mut() {
                if p.exit.is_none() {
                    p.exit = Some(-1);
                }
            }
        }
        if all_done || failed {
            self.end_attempt(j, now, failure);
        }
    }

    /// An agent's heartbeat: marks the node up and applies its reports. Returns the
    /// node, for [`Core::reply`] once the caller persisted.
    pub fn heartbeat(&mut self, hb: &Heartbeat, now: u64) -> Result<u32, ApiError> {
        let n = *self.node_ix.get(&hb.node).ok_or_else(|| {
            ApiError::bad(
                "node",
                format!("'{}' is not a node of the server's config", hb.node),
            )
        })?;
        let declared = self.nodes[n as usize].gpus;
        if hb.gpus != declared {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "node {} has {declared} GPUs in the server's config but its agent reports {}",
                    hb.node, hb.gpus
                ),
            ));
        }
        self.advance(now);
        self.claim(n, hb, now)?;
        {
            let node = &mut self.nodes[n as usize];
            node.last_heartbeat = Some(now);
            let health = if hb.shutting_down {
                NodeHealth::Down
            } else {
                NodeHealth::Up
            };
            if node.health != health
                && (node.health == NodeHealth::Down || health == NodeHealth::Down)
                && let Some(t) = self.policy.tenancy()
            {
                t.node_health(&node.name, health == NodeHealth::Up);
            }
            if node.health != health {
                let detail = match (node.health, health) {
                    (_, NodeHealth::Down) => "its agent is shutting down",
                    (NodeHealth::Down, _) => "heartbeats again",
                    _ => "first heartbeat",
                };
                self.node_events.push(super::NodeEvent {
                    at_ms: now,
                    node: node.name.clone(),
                    event: if health == NodeHealth::Up {
                        "up"
                    } else {
                        "down"
                    },
                    detail: detail.into(),
                });
            }
            node.health = health;
        }
        for c in &hb.output {
            self.take_output(n, c, now);
        }
        self.take_hints(&hb.node, &hb.hints, now);
        self.take_service_loads(n, &hb.online);
        for e in &hb.exited {
            self.keep_tail(n, e);
            self.exited(n, e.job, e.attempt, e.code, e.lost, now);
        }
        let running: BTreeSet<AttemptRef> = hb.running.iter().copied().collect();
        let exited: BTreeSet<(u64, u32)> = hb.exited.iter().map(|e| (e.job, e.attempt)).collect();
        // Parts this agent had started that it no longer knows: lost with it.
        let name = self.nodes[n as usize].name.clone();
        // (job, whether lost) — a part reported running for the first time is started.
        let mut seen = Vec::new();
        for &j in self.running_on(n).iter() {
            let r = &self.jobs[j as usize];
            let key = AttemptRef {
                job: r.id,
                attempt: r.attempt,
            };
            if let Some(p) = r.parts.iter().find(|p| p.node == name && p.exit.is_none()) {
                let started = self.started_parts(r).contains(&name);
                let _ = p;
                if running.contains(&key) {
                    if !started {
                        seen.push((j, false));
                    }
                } else if started && !exited.contains(&(r.id, r.attempt)) {
                    seen.push((j, true));
                }
            }
        }
        // A started part the agent neither runs nor reported ended is unknown, not
        // lost: an agent that lost its records may have left it running. It is given
        // up only after the node timeout and grace period that a silent node gets.
        let lost_after = self.lost_after_ms();
        let mut still_missing = BTreeSet::new();
        for (j, is_missing) in seen {
            let key = (self.jobs[j as usize].id, self.jobs[j as usize].attempt, n);
            if is_missing {
                still_missing.insert(key);
                let since = *self.missing.entry(key).or_insert(now);
                if now.saturating_sub(since) > lost_after {
                    self.missing.remove(&key);
                    self.part_exited(j, n, -1, now, Some(Failure::ProcessLost));
                    self.drop_holds(key.0, key.1, n);
                }
            } else {
                self.mark_started(j, &name);
            }
        }
        self.missing
            .retain(|k, _| k.2 != n || still_missing.contains(k));
        // A stopping share that this agent neither runs nor reported ended never started
        // (its launch was lost, or it was cancelled first): nothing holds it. Each
        // heartbeat follows the reply before it, so a launch it had is counted running.
        // A replaced instance's orphans wait for its lease instead.
        for (job, attempt) in self.stopping_shares(n) {
            let key = AttemptRef { job, attempt };
            if !running.contains(&key)
                && !exited.contains(&(job, attempt))
                && !self.orphans.contains_key(&(job, attempt, n))
            {
                self.drop_holds(job, attempt, n);
            }
        }
        Ok(n)
    }

    /// Keeps an exited process's output tail on its part of the current attempt.
    /// Keeps a chunk of a part's output for `logs -f`: the last [`OUTPUT_LIVE_BYTES`]
    /// of each part of a job's current attempt, and of at most [`LIVE_KEPT`] parts that
    /// ended, the oldest forgotten first.
    pub(super) fn take_output(&mut self, n: u32, c: &OutputChunk, now: u64) {
        let Some(&j) = self.by_id.get(&c.job) else {
            return;
        };
        let node = self.nodes[n as usize].name.clone();
        let r = &self.jobs[j as usize];
        if r.attempt != c.attempt || !r.parts.iter().any(|p| p.node == node) {
            return;
        }
        let live = self
            .live
            .entry((c.job, node))
            .or_insert_with(|| super::LiveOutput {
                attempt: c.attempt,
                ..Default::default()
            });
        if live.attempt != c.attempt {
            *live = super::LiveOutput {
                attempt: c.attempt,
                ..Default::default()
            };
        }
        if c.offset < live.agent_next {
            return; // sent again after a lost reply
        }
        if c.offset > live.agent_next {
            live.buf.push_str("\n[apiary: output lost here]\n");
        }
        live.buf.push_str(&c.data);
        live.agent_next = c.offset + c.raw_len;
        live.eof |= c.eof;
        live.touched = now;
        if live.buf.len() > OUTPUT_LIVE_BYTES {
            let mut cut = live.buf.len() - OUTPUT_LIVE_BYTES;
            while !live.buf.is_char_boundary(cut) {
                cut += 1;
            }
            live.buf.drain(..cut);
            live.start += cut as u64;
        }
        if self.live.len() > LIVE_KEPT {
            let running = |id: &u64| {
                self.by_id
                    .get(id)
                    .is_some_and(|&j| self.jobs[j as usize].state == JobState::Running)
            };
            let oldest = self
                .live
                .iter()
                .filter(|((id, _), l)| l.eof || !running(id))
                .min_by_key(|(_, l)| l.touched)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.live.remove(&k);
            }
        }
    }

    /// The output the server holds of each part of job `id`'s current attempt.
    pub fn output(&self, id: u64) -> Result<Vec<PartOutput>, ApiError> {
        let r = &self.jobs[self.record(id)? as usize];
        Ok(r.parts
            .iter()
            .filter_map(|p| {
                let l = self.live.get(&(r.id, p.node.clone()))?;
                (l.attempt == r.attempt).then(|| PartOutput {
                    node: p.node.clone(),
                    attempt: l.attempt,
                    start: l.start,
                    data: l.buf.clone(),
                    eof: l.eof,
                })
            })
            .collect())
    }

    pub(super) fn keep_tail(&mut self, n: u32, e: &Exit) {
        if e.output_tail.is_empty() {
            return;
        }
        let Some(&j) = self.by_id.get(&e.job) else {
            return;
        };
        let name = &self.nodes[n as usize].name;
        let r = &mut self.jobs[j as usize];
        if r.attempt != e.attempt {
            return;
        }
        if let Some(p) = r.parts.iter_mut().find(|p| &p.node == name) {
            let t = &e.output_tail;
            let mut cut = t.len().saturating_sub(OUTPUT_TAIL_BYTES);
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            p.output_tail = t[cut..].to_string();
            self.dirty.insert(j);
        }
    }

    pub(super) fn started_parts(&self, r: &JobRecord) -> BTreeSet<String> {
        r.history
            .iter()
            .rev()
            .take_while(|t| t.event != "running")
            .filter(|t| t.event == "started")
            .map(|t| t.detail.clone())
            .collect()
    }

    pub(super) fn mark_started(&mut self, j: JobIdx, node: &str) {
        let at = self.world.now;
        let r = &mut self.jobs[j as usize];
        note(r, at, "started", node.into());
        self.dirty.insert(j);
    }

    pub(super) fn exited(
        &mut self,
        n: u32,
        job: u64,
        attempt: u32,
        code: i32,
        lost: bool,
        now: u64,
    ) {
        if self.drop_holds(job, attempt, n)
            && let Some(&j) = self.by_id.get(&job)
        {
            // A job that ended before its process did shows how the process ended.
            let name = &self.nodes[n as usize].name;
            let r = &mut self.jobs[j as usize];
            if r.attempt == attempt
                && r.state != JobState::Running
                && let Some(part) = r.parts.iter_mut().find(|p| &p.node == name)
                && part.exit.is_none()
            {
                part.exit = Some(code);
            }
        }
        if let Some(mask) = self.stopping.remove(&(job, attempt, n)) {
            let p = Placement {
                parts: vec![(n, mask)],
            };
            let _ = self.world.state.release(&p);
            if let Some(&j) = self.by_id.get(&job) {
                // A job that ended before its processes did (cancelled, timed out)
                // shows how they ended.
                let name = &self.nodes[n as usize].name;
                let r = &mut self.jobs[j as usize];
                if r.attempt == attempt
                    && let Some(part) = r.parts.iter_mut().find(|p| &p.node == name)
                    && part.exit.is_none()
                {
                    part.exit = Some(code);
                }
                let stopping = self
                    .stopping
                    .range((job, 0, 0)..=(job, u32::MAX, u32::MAX))
                    .next()
                    .is_some();
                self.world.set_blocked(j, stopping);
                self.dirty.insert(j);
            }
            return;
        }
        let Some(&j) = self.by_id.get(&job) else {
            return;
        };
        let r = &self.jobs[j as usize];
        if r.state == JobState::Running && r.attempt == attempt {
            self.part_exited(j, n, code, now, lost.then_some(Failure::AgentLost));
        }
    }

    pub(super) fn running_on(&self, n: u32) -> Vec<JobIdx> {
        let name = &self.nodes[n as usize].name;
        self.world
            .running()
            .iter()
            .copied()
            .filter(|&j| {
                self.jobs[j as usize]
                    .parts
                    .iter()
                    .any(|p| &p.node == name && p.exit.is_none())
            })
            .chain(self.sharing_on(n))
            .collect()
    }

    /// What node `n`'s agent must do now.
    pub fn reply(&self, n: u32, hb: &Heartbeat) -> HeartbeatReply {
        let name = &self.nodes[n as usize].name;
        let running: BTreeSet<AttemptRef> = hb.running.iter().copied().collect();
        let mut start = Vec::new();
        let mut stop = Vec::new();
        let mut jobs = self.running_on(n);
        jobs.sort_unstable_by_key(|&j| self.jobs[j as usize].id);
        let cpus = self.cpu_shares_on(n, &jobs);
        let power = self.power_caps_on(n, &jobs);
        let io = self.io_grants_on(n, &jobs);
        let sm = self.sm_shares_on(n, &jobs);
        for j in jobs {
            let r = &self.jobs[j as usize];
            let key = AttemptRef {
                job: r.id,
                attempt: r.attempt,
            };
            if running.contains(&key) {
                continue;
            }
            let Some(part) = r.parts.iter().find(|p| &p.node == name) else {
                continue;
            };
            let rank = r.parts.iter().position(|p| &p.node == name).unwrap_or(0);
            let mut env = r.spec.env.clone();
            env.insert("APIARY_JOB_ID".into(), r.id.to_string());
            env.insert("APIARY_ATTEMPT".into(), r.attempt.to_string());
            env.insert(
                "APIARY_RESTART_COUNT".into(),
                r.attempt.saturating_sub(1).to_string(),
            );
            if let Some(d) = &r.spec.checkpoint_dir {
                env.insert("APIARY_CHECKPOINT_DIR".into(), d.clone());
            }
            env.insert("APIARY_NODE_RANK".into(), rank.to_string());
            env.insert("APIARY_NUM_NODES".into(), r.parts.len().to_string());
            env.insert("APIARY_NUM_GPUS".into(), gpu_count(&r.parts).to_string());
            env.insert("APIARY_MASTER".into(), r.parts[0].node.clone());
            env.insert("APIARY_VC".into(), r.vc.clone());
            env.insert("APIARY_NODE".into(), name.clone());
            if let Some(a) = r.array_id {
                env.insert("APIARY_ARRAY_JOB_ID".into(), a.to_string());
            }
            start.push(Launch {
                job: r.id,
                attempt: r.attempt,
                command: r.spec.command.clone(),
                env,
                workdir: r.spec.workdir.clone(),
                gpus: part.gpus.clone(),
                gpu_milli: part.gpu_milli,
                grace_ms: r.spec.grace_s.map(|g| (g * 1000.0).round() as u64),
                gpu_memory_mib: part.gpu_milli.and_then(|m| {
                    let gib = self.cfg.nodes[n as usize].gpu_memory_gib?;
                    Some(u64::from(gib) * 1024 * u64::from(m) / 1000)
                }),
                vc: r.vc.clone(),
                run_as: self
                    .cfg
                    .vcs
                    .iter()
                    .find(|v| v.name == r.vc)
                    .and_then(|v| v.run_as.clone()),
                hints: r.spec.adaptive.is_some(),
            });
        }
        for &(job, attempt, node) in self.stopping.keys() {
            if node == n {
                stop.push(AttemptRef { job, attempt });
            }
        }
        for (job, attempt) in self.stopping_shares(n) {
            stop.push(AttemptRef { job, attempt });
        }
        // Processes the agent runs that the server does not assign here: stop them.
        for a in &hb.running {
            let current = self.by_id.get(&a.job).is_some_and(|&j| {
                let r = &self.jobs[j as usize];
                r.state == JobState::Running
                    && r.attempt == a.attempt
                    && r.parts.iter().any(|p| &p.node == name && p.exit.is_none())
            });
            if !current && !stop.contains(a) {
                stop.push(*a);
            }
        }
        HeartbeatReply {
            start,
            stop,
            acked: hb
                .exited
                .iter()
                .map(|e| AttemptRef {
                    job: e.job,
                    attempt: e.attempt,
                })
                .collect(),
            interval_s: self.cfg.heartbeat_interval_s,
            grace_s: self.cfg.grace_s,
            node_timeout_s: self.cfg.node_timeout_s,
            cpus,
            power,
            io,
            measure_online: self.serves_online(n),
            sm,
        }
    }

    /// Marks nodes down whose agents went silent (no new jobs there), and once the grace
    /// period has passed too, ends their jobs' attempts there (requeued or failed per the
    /// job's restart policy) and forgets the processes stopping there. Returns whether
    /// anything changed.
    pub fn check_nodes(&mut self, now: u64) -> bool {
        self.advance(now);
        let timeout = (self.cfg.node_timeout_s * 1000.0) as u64;
        let lost_after = self.lost_after_ms();
        let mut changed = self.release_orphans(now);
        for n in 0..self.nodes.len() as u32 {
            let node = &self.nodes[n as usize];
            let silent = now.saturating_sub(node.last_heartbeat.unwrap_or(self.started));
            if node.health != NodeHealth::Down && silent > timeout {
                self.nodes[n as usize].health = NodeHealth::Down;
                changed = true;
                self.node_events.push(super::NodeEvent {
                    at_ms: now,
                    node: self.nodes[n as usize].name.clone(),
                    event: "down",
                    detail: format!("no heartbeat for {:.0} s", silent as f64 / 1000.0),
                });
                // HiveD's bad hardware: its VCs' cells there become doomed.
                if let Some(t) = self.policy.tenancy() {
                    t.node_health(&self.nodes[n as usize].name, false);
                }
            }
            if self.nodes[n as usize].health != NodeHealth::Down || silent <= lost_after {
                continue;
            }
            for j in self.running_on(n) {
                changed = true;
                self.part_exited(j, n, -1, now, Some(Failure::NodeLost));
            }
            let keys: Vec<_> = self.stopping.keys().filter(|k| k.2 == n).copied().collect();
            for (job, attempt, node) in keys {
                self.exited(node, job, attempt, -1, true, now);
            }
            self.drop_node_holds(n);
        }
        changed
    }

    /// How long a node (or a part of it) stays silent before its jobs are given up and
    /// may run elsewhere: the node timeout plus the grace period.
    pub(super) fn lost_after_ms(&self) -> u64 {
        ((self.cfg.node_timeout_s + self.cfg.grace_s) * 1000.0) as u64
    }

    /// Cordons (no new jobs) or uncordons a node.
    pub fn cordon(&mut self, node: &str, on: bool) -> Result<(), ApiError> {
        let n = *self
            .node_ix
            .get(node)
            .ok_or_else(|| ApiError::not_found(format!("no node {node}")))?;
        if self.nodes[n as usize].cordoned != on {
            self.nodes[n as usize].cordoned = on;
            self.dirty_cordons.push((node.to_string(), on));
        }
        Ok(())
    }

    /// Cordons a node and sends its running jobs back to the queue (their processes
    /// are stopped; their GPUs stay held until that is confirmed). Returns how many.
    pub fn drain(&mut self, node: &str, now: u64) -> Result<usize, ApiError> {
        self.cordon(node, true)?;
        self.advance(now);
        let n = self.node_ix[node];
        let jobs = self.running_on(n);
        for &j in &jobs {
            self.stop_attempt(j);
            let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
            if !self.is_fractional(j) {
                self.world.preempt(j);
                self.fence_stopping(id, attempt);
                let ctx = self
                    .pass
                    .ctx(&mut self.world, Declared::of(self.policy.as_ref()));
                self.policy.on_requeue(&ctx, j);
            }
            self.counters.count("requeue");
            let r = &mut self.jobs[j as usize];
            for p in r.parts.iter_mut().filter(|p| p.exit.is_none()) {
                p.exit = Some(-1);
            }
            r.state = JobState::Queued;
            note(
                r,
                now,
                "requeued",
                format!("attempt {attempt}: node {node} drained"),
            );
            self.dirty.insert(j);
            self.queue_share(j);
        }
        Ok(jobs.len())
    }

    pub(super) fn started_attempt(&mut self, j: JobIdx, now: u64) {
        let parts: Vec<Part> = self.world.rt[j as usize]
            .placement
            .parts
            .iter()
            .map(|&(n, mask)| Part {
                node: self.nodes[n as usize].name.clone(),
                gpus: gpus_of(mask),
                gpu_milli: None,
                exit: None,
                output_tail: String::new(),
            })
            .collect();
        let r = &mut self.jobs[j as usize];
        let (before, after) = (gpu_count(&r.parts), gpu_count(&parts));
        let resizable = r.spec.elastic.is_some() || r.spec.adaptive.is_some();
        if resizable && r.attempt > 0 && before != after {
            note(r, now, "resized", format!("{before} -> {after} GPUs"));
        }
        r.attempt += 1;
        r.state = JobState::Running;
        let detail = parts
            .iter()
            .map(|p| format!("{}{:?}", p.node, p.gpus))
            .collect::<Vec<_>>()
            .join(" ");
        r.parts = parts;
        note(r, now, "running", detail);
        self.dirty.insert(j);
        self.sync_agent(j);
    }
}

/// The GPUs of an attempt's parts, on all its nodes.
fn gpu_count(parts: &[Part]) -> usize {
    parts.iter().map(|p| p.gpus.len()).sum()
}

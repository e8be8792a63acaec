//! Jobs: validation and admission of submissions, recovery from the store, queries,
//! cancellation, and VCs changed through the API.

use super::{
    ApiError, Core, MAX_DEPENDENCIES, MAX_JOB_GPUS, UNKNOWN_DURATION_MS, history, mask_of, note,
};
use crate::types::{JobRecord, JobSpec, JobState, SCHEMA_VERSION, limits};
use apiary_model::{Job, Placement, Time};
use apiary_policy::vc::Sharing;
use apiary_policy::{Capability, Declared, JobIdx, TenantShare};
use std::collections::BTreeSet;

/// What `GET /v1/jobs` asks for.
#[derive(Clone, Debug, Default)]
pub struct JobQuery {
    /// Only this VC's jobs.
    pub vc: Option<String>,
    /// Only jobs in these states (none: all).
    pub states: Vec<JobState>,
    /// Only this user's.
    pub user: Option<String>,
    /// Only jobs with ids below this (the previous page's last).
    pub after: Option<u64>,
    /// Records at most.
    pub limit: usize,
}

/// Refuses a submission whose fields are over the [`limits`]: 413 naming the field, or 400
/// for a value no process could be started with.
fn check_sizes(s: &JobSpec) -> Result<(), ApiError> {
    let over = |field: &str, len: usize, max: usize, what: &str| {
        if len > max {
            Err(ApiError::too_large(
                field,
                format!("{len} {what}, at most {max}"),
            ))
        } else {
            Ok(())
        }
    };
    if let Some(n) = &s.name {
        over("name", n.len(), limits::NAME_BYTES, "bytes")?;
    }
    for (f, v) in [("vc", &s.vc), ("gpu_type", &s.gpu_type)] {
        if let Some(v) = v {
            over(f, v.len(), limits::LABEL_BYTES, "bytes")?;
        }
    }
    over(
        "command",
        s.command.len(),
        limits::COMMAND_ARGS,
        "arguments",
    )?;
    let bytes: usize = s.command.iter().map(String::len).sum();
    over("command", bytes, limits::COMMAND_BYTES, "bytes")?;
    if let Some(i) = s.command.iter().position(|a| a.contains('\0')) {
        return Err(ApiError::bad(
            &format!("command[{i}]"),
            "contains a NUL byte",
        ));
    }
    over("env", s.env.len(), limits::ENV_VARS, "variables")?;
    let bytes: usize = s.env.iter().map(|(k, v)| k.len() + v.len()).sum();
    over("env", bytes, limits::ENV_BYTES, "bytes")?;
    if let Some(k) = s
        .env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        .map(|(k, _)| k)
    {
        return Err(ApiError::bad(
            &format!("env.{k}"),
            "a variable's name is non-empty without '=' or NUL, its value without NUL",
        ));
    }
    if let Some(t) = s.time_limit_s
        && !(t.is_finite() && t > 0.0 && t <= 1e9)
    {
        return Err(ApiError::bad(
            "time_limit_s",
            format!("must be a positive number of seconds (got {t})"),
        ));
    }
    for (f, d) in [
        ("workdir", &s.workdir),
        ("checkpoint_dir", &s.checkpoint_dir),
    ] {
        if let Some(w) = d {
            over(f, w.len(), limits::WORKDIR_BYTES, "bytes")?;
            if w.contains('\0') {
                return Err(ApiError::bad(f, "contains a NUL byte"));
            }
        }
    }
    if let Some(g) = s.grace_s
        && !(g.is_finite() && (0.0..=3600.0).contains(&g))
    {
        return Err(ApiError::bad(
            "grace_s",
            format!("must be 0 to 3600 seconds (got {g})"),
        ));
    }
    over(
        "restart.failure_exit_codes",
        s.restart.failure_exit_codes.len(),
        256,
        "codes",
    )?;
    Ok(())
}

impl Core {
    pub(super) fn job_model(&self, id: u64, spec: &JobSpec, submitted: u64) -> Job {
        let mut j = Job::new(
            id.to_string(),
            submitted,
            spec.gpus,
            spec.estimated_duration_s
                .map_or(UNKNOWN_DURATION_MS, |s| (s * 1000.0).round() as Time),
        );
        j.priority = spec.priority;
        j.vc = spec.vc.as_deref().map(Into::into);
        j.gpu_type = spec.gpu_type.clone();
        j.deadline = spec.deadline_unix_s.map(|d| d.saturating_mul(1000));
        if let Some(table) = self.scaling_of(spec) {
            j.extras_mut().scaling = Some(table);
        }
        if let Some(a) = Core::adaptive_of(spec) {
            j.extras_mut().adaptive = Some(a);
        }
        self.give_model(spec, &mut j);
        if self.policy.capabilities().has(Capability::Profiles) {
            // As the simulator does for trace jobs without one: a stage profile drawn
            // from Muri's table by job id.
            apiary_model::profiles::assign(std::slice::from_mut(&mut j), 0);
        }
        j
    }

    pub(super) fn add_to_world(&mut self, mut rec: JobRecord) -> JobIdx {
        // The policy gives its knobs again at its first pass.
        rec.cpus = None;
        rec.power_limit = None;
        rec.io = None;
        rec.sm_share = None;
        let job = self.job_model(rec.id, &rec.spec, rec.submitted_ms);
        let j = self.world.push_job(job);
        self.by_id.insert(rec.id, j);
        self.jobs.push(rec);
        self.sync_agent(j);
        self.track_added(j);
        j
    }

    /// Queues a job and tells the policy; its refusal, if it refuses.
    pub(super) fn enqueue(&mut self, j: JobIdx) -> Result<(), apiary_policy::PolicyError> {
        self.world.submit(j);
        let ctx = self
            .pass
            .ctx(&mut self.world, Declared::of(self.policy.as_ref()));
        self.policy.admit(&ctx, j)
    }

    /// Checks a submission against the cluster and config.
    pub fn validate(&self, s: &JobSpec) -> Result<(), ApiError> {
        check_sizes(s)?;
        let deps = s.after_ok.len() + s.after_any.len();
        if deps > MAX_DEPENDENCIES {
            return Err(ApiError::bad(
                "after_ok",
                format!("at most {MAX_DEPENDENCIES} jobs to wait for (got {deps})"),
            ));
        }
        // Only the submitting VC's jobs: another tenant's job is as absent as one that
        // never was, so its existence and outcome do not leak.
        let vc = s.vc.as_deref().unwrap_or("default");
        let visible = |d: u64| self.state_of(d).filter(|&(_, v)| v == vc).map(|(st, _)| st);
        if let Some(d) = s.after_any.iter().find(|&&d| visible(d).is_none()) {
            return Err(ApiError::bad("after_any", format!("no job {d} in VC {vc}")));
        }
        if let Some(a) = s.array.and_then(|a| a.of)
            && visible(a).is_none()
        {
            return Err(ApiError::bad("array.of", format!("no job {a} in VC {vc}")));
        }
        for &d in &s.after_ok {
            let Some(st) = visible(d) else {
                return Err(ApiError::bad("after_ok", format!("no job {d} in VC {vc}")));
            };
            if matches!(st, JobState::Failed | JobState::Cancelled) {
                return Err(ApiError::conflict(format!(
                    "job {d} is already {}: afterok:{d} can never be met",
                    st.as_str()
                )));
            }
        }
        if s.gpus == 0 || s.gpus > MAX_JOB_GPUS {
            return Err(ApiError::bad(
                "gpus",
                format!("must be 1..={MAX_JOB_GPUS} (got {})", s.gpus),
            ));
        }
        if s.gpus > self.world.cluster.total_gpus {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "{} GPUs asked but the cluster has {}",
                    s.gpus, self.world.cluster.total_gpus
                ),
            ));
        }
        self.validate_share(s)?;
        self.validate_elastic(s)?;
        self.validate_adaptive(s)?;
        self.validate_model(s)?;
        if s.command.is_empty() || s.command[0].is_empty() {
            return Err(ApiError::bad("command", "must name a program"));
        }
        if let Some(t) = &s.gpu_type {
            let of_type: u32 = self
                .nodes
                .iter()
                .filter(|n| &n.gpu_type == t)
                .map(|n| n.gpus)
                .sum();
            if of_type == 0 {
                let mut types: Vec<&str> = self.nodes.iter().map(|n| n.gpu_type.as_str()).collect();
                types.sort_unstable();
                types.dedup();
                return Err(ApiError::bad(
                    "gpu_type",
                    format!("no node has '{t}' GPUs (types: {})", types.join(", ")),
                ));
            }
            if s.gpus > of_type {
                return Err(ApiError::bad(
                    "gpus",
                    format!(
                        "{} GPUs asked but the cluster has {of_type} of type {t}",
                        s.gpus
                    ),
                ));
            }
            if let Some(sharing) = self.cfg.sharing.filter(|s| s.cells())
                && self.nodes.iter().any(|n| &n.gpu_type != t)
            {
                return Err(ApiError::bad(
                    "gpu_type",
                    format!("with {sharing} sharing VCs own node cells of every GPU type"),
                ));
            }
        }
        if !self.cfg.vcs.is_empty() {
            let vc = s.vc.as_deref().unwrap_or("default");
            let Some(v) = self.cfg.vcs.iter().find(|v| v.name == vc) else {
                let known: Vec<&str> = self.cfg.vcs.iter().map(|v| v.name.as_str()).collect();
                return Err(ApiError::bad(
                    "vc",
                    format!("unknown VC '{vc}' (known: {})", known.join(", ")),
                ));
            };
            if self.cfg.sharing == Some(Sharing::Quota)
                && let Some(q) = v.quota_gpus
                && s.gpus as u64 > q
            {
                return Err(ApiError::bad(
                    "gpus",
                    format!("VC {vc}'s quota is {q} GPUs"),
                ));
            }
        }
        if let Some(d) = s.estimated_duration_s
            && !(d.is_finite() && (0.0..1e10).contains(&d))
        {
            return Err(ApiError::bad(
                "estimated_duration_s",
                "must be a non-negative number of seconds",
            ));
        }
        // 9999-12-31T23:59:59Z: later deadlines are typos, and the bound keeps
        // deadline arithmetic in milliseconds far from overflow.
        if let Some(d) = s.deadline_unix_s
            && d > 253_402_300_799
        {
            return Err(ApiError::bad(
                "deadline_unix_s",
                "must be a Unix time in seconds before the year 10000",
            ));
        }
        if s.restart.max_restarts > 1000 {
            return Err(ApiError::bad("restart.max_restarts", "at most 1000"));
        }
        let vc = s.vc.as_deref().unwrap_or("default");
        let max = self.cfg.max_jobs_per_vc;
        if self.active.get(vc).copied().unwrap_or(0) >= max {
            return Err(ApiError::too_many(
                "vc",
                format!("VC {vc} has {max} unfinished jobs, its limit (max_jobs_per_vc)"),
            ));
        }
        Ok(())
    }

    /// Accepts a job: queued now, durable once the caller persisted [`Core::take_dirty`].
    pub fn submit(&mut self, spec: JobSpec, now: u64) -> Result<u64, ApiError> {
        self.submit_as(spec, None, now)
    }

    /// Accepts a job from `user` (the submitting token's user, if it names one).
    pub fn submit_as(
        &mut self,
        spec: JobSpec,
        user: Option<String>,
        now: u64,
    ) -> Result<u64, ApiError> {
        self.validate(&spec)?;
        self.advance(now);
        let id = self.next_id;
        let mut rec = JobRecord {
            schema_version: SCHEMA_VERSION,
            id,
            vc: spec.vc.clone().unwrap_or_else(|| "default".into()),
            user,
            array_id: spec.array.map(|a| a.of.unwrap_or(id)),
            spec,
            state: JobState::Queued,
            submitted_ms: now,
            attempt: 0,
            parts: Vec::new(),
            history: Vec::new(),
            stopping: Vec::new(),
            hints: None,
            cpus: None,
            power_limit: None,
            io: None,
            sm_share: None,
            reason: None,
        };
        note(&mut rec, now, "queued", String::new());
        let vc = rec.vc.clone();
        self.room_for(&vc, history::record_bytes(&rec))?;
        let j = self.add_to_world(rec);
        self.hold_for_dependencies(j);
        // A job that shares a GPU is the core's to place: the policy never sees it.
        if !self.is_fractional(j)
            && let Err(e) = self.enqueue(j)
        {
            // Refused before anyone was told it was accepted: it leaves no trace.
            self.held.remove(&j);
            self.untrack(j);
            self.world.set_blocked(j, false);
            self.world.pop_job(j);
            self.jobs.pop();
            self.by_id.remove(&id);
            return Err(ApiError::refused(e.to_string()));
        }
        self.admit_shape(j);
        self.queue_share(j);
        self.next_id += 1;
        self.next_id_dirty = true;
        *self.active.entry(vc).or_insert(0) += 1;
        self.dirty.insert(j);
        self.counters.submissions += 1;
        Ok(id)
    }

    /// Rebuilds the state from stored records after a restart. Running jobs keep their
    /// GPUs; their agents confirm or lose them on their next heartbeats.
    pub fn recover(
        &mut self,
        mut records: Vec<JobRecord>,
        next_id: u64,
        cordoned: &BTreeSet<String>,
        now: u64,
    ) {
        self.advance(now);
        records.sort_by_key(|r| r.id);
        self.next_id = next_id.max(records.last().map_or(1, |r| r.id + 1));
        for rec in records {
            let state = rec.state;
            if !state.terminal() {
                *self.active.entry(rec.vc.clone()).or_insert(0) += 1;
            }
            let parts = rec.parts.clone();
            let j = self.add_to_world(rec);
            self.admit_shape(j);
            if self.is_fractional(j) {
                self.recover_fractional(j, now);
                continue;
            }
            let admitted = match state {
                JobState::Queued | JobState::Running => self.enqueue(j),
                _ => Ok(()),
            };
            if let Err(e) = admitted {
                // A record the policy now refuses (its VC left the config, say): it
                // ends, with the reason, rather than waiting for ever.
                self.world.decline(j, e.to_string().into_boxed_str());
                if let Some(n) = self.active.get_mut(&self.jobs[j as usize].vc) {
                    *n = n.saturating_sub(1);
                }
                let r = &mut self.jobs[j as usize];
                r.state = JobState::Failed;
                note(r, now, "refused", e.to_string());
                self.dirty.insert(j);
                continue;
            }
            self.hold_for_dependencies(j);
            if state == JobState::Running {
                let mut p = Placement::default();
                let mut ok = true;
                for part in parts.iter().filter(|p| p.exit.is_none()) {
                    match self.node_ix.get(&part.node) {
                        Some(&n) => p.parts.push((n, mask_of(&part.gpus))),
                        None => ok = false,
                    }
                }
                p.parts.sort_unstable();
                let g = self.world.jobs[j as usize].gpus;
                // Parts that already exited still count as the job's GPUs until all
                // parts end: take them too.
                for part in parts.iter().filter(|p| p.exit.is_some()) {
                    if let Some(&n) = self.node_ix.get(&part.node) {
                        p.parts.push((n, mask_of(&part.gpus)));
                    }
                }
                p.parts.sort_unstable();
                if ok && p.gpus() == g && self.world.start(j, p) {
                    if let Some(t) = self.policy.tenancy() {
                        // HiveD may not take a record back into its VC's cells
                        // (the config changed): the job keeps running, outside them.
                        t.adopt(&self.world, j);
                    }
                } else {
                    self.requeue_recovered(j, now, "its GPUs are no longer in the config");
                }
            }
        }
        // Processes still stopping hold their GPUs (after every running job took its own).
        for j in 0..self.jobs.len() {
            if self.is_fractional(j as JobIdx) {
                continue; // its holds are taken back with it
            }
            let (id, stopping) = (self.jobs[j].id, self.jobs[j].stopping.clone());
            for s in stopping {
                let Some(&n) = self.node_ix.get(&s.node) else {
                    continue;
                };
                let p = Placement {
                    parts: vec![(n, mask_of(&s.gpus))],
                };
                if self.world.state.allocate(&p).is_ok() {
                    self.stopping.insert((id, s.attempt, n), mask_of(&s.gpus));
                    self.world.set_blocked(j as JobIdx, true);
                }
            }
        }
        for name in cordoned {
            if let Some(&n) = self.node_ix.get(name) {
                self.nodes[n as usize].cordoned = true;
            }
        }
        let all: Vec<JobIdx> = (0..self.jobs.len() as JobIdx).collect();
        self.track_finished(&all);
        self.started = now;
    }

    /// A recovered running record that cannot have its GPUs back waits in the queue.
    pub(super) fn requeue_recovered(&mut self, j: JobIdx, now: u64, why: &str) {
        let r = &mut self.jobs[j as usize];
        r.state = JobState::Queued;
        r.parts.clear();
        note(r, now, "requeued", why.into());
        self.dirty.insert(j);
    }

    pub(super) fn record(&self, id: u64) -> Result<JobIdx, ApiError> {
        self.by_id
            .get(&id)
            .copied()
            .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
    }

    /// One job.
    pub fn job(&self, id: u64) -> Result<&JobRecord, ApiError> {
        Ok(&self.jobs[self.record(id)? as usize])
    }

    /// Jobs, newest first, optionally of one VC or state.
    /// One page of `GET /v1/jobs`: the jobs `q` selects, newest first, with their
    /// pending reasons, at most `q.limit` of them and `max_bytes` of their JSON (at
    /// least one); and the `after` of the next page when more match.
    pub fn page(&self, q: &JobQuery, max_bytes: usize) -> (Vec<JobRecord>, Option<u64>) {
        let f = self.free_gpus();
        let mut out: Vec<JobRecord> = Vec::new();
        let mut bytes = 0;
        let selected = self
            .by_id
            .range(..q.after.unwrap_or(u64::MAX))
            .rev()
            .map(|(_, &j)| &self.jobs[j as usize])
            .filter(|r| q.vc.as_deref().is_none_or(|v| r.vc == v))
            .filter(|r| q.user.is_none() || r.user == q.user)
            .filter(|r| q.states.is_empty() || q.states.contains(&r.state));
        for r in selected {
            // More match: the next page starts below the last id sent.
            if out.len() >= q.limit {
                let next = out.last().map(|l| l.id);
                return (out, next);
            }
            let mut shown = r.clone();
            shown.reason = (r.state == JobState::Queued).then(|| self.reason_in(&f, r).to_string());
            let size = serde_json::to_vec(&shown).map_or(0, |b| b.len());
            if !out.is_empty() && bytes + size > max_bytes {
                let next = out.last().map(|l| l.id);
                return (out, next);
            }
            bytes += size;
            out.push(shown);
        }
        (out, None)
    }

    /// Jobs, newest first.
    pub fn jobs(&self, vc: Option<&str>, state: Option<JobState>, limit: usize) -> Vec<&JobRecord> {
        self.by_id
            .values()
            .rev()
            .map(|&j| &self.jobs[j as usize])
            .filter(|r| vc.is_none_or(|v| r.vc == v))
            .filter(|r| state.is_none_or(|s| r.state == s))
            .take(limit)
            .collect()
    }

    /// Cancels a job; a running one is stopped on its nodes.
    pub fn cancel(&mut self, id: u64, now: u64) -> Result<(), ApiError> {
        let j = self.record(id)?;
        self.advance(now);
        if let s @ (JobState::Succeeded | JobState::Failed | JobState::Cancelled) =
            self.jobs[j as usize].state
        {
            return Err(ApiError::conflict(format!(
                "job {id} is already {}",
                s.as_str()
            )));
        }
        self.end_early(j, now, JobState::Cancelled, "cancelled", String::new());
        Ok(())
    }

    /// Ends job `j` before its processes do: a queued one leaves the queue, a running
    /// one's attempt is stopped (its GPUs held until the processes are gone). It ends
    /// in `state` with `event` in its history.
    fn end_early(&mut self, j: JobIdx, now: u64, state: JobState, event: &str, detail: String) {
        if self.is_fractional(j) {
            // Its process, if any, keeps its share until its agent confirms it stopped.
        } else if self.jobs[j as usize].state == JobState::Queued {
            self.world.withdraw(j);
        } else {
            self.stop_attempt(j);
            let (id, attempt) = (self.jobs[j as usize].id, self.jobs[j as usize].attempt);
            self.world.finish(j);
            self.fence_stopping(id, attempt);
        }
        if !self.is_fractional(j) {
            let ctx = self
                .pass
                .ctx(&mut self.world, Declared::of(self.policy.as_ref()));
            self.policy.on_finish(&ctx, j);
        }
        self.counters.count(if state == JobState::Cancelled {
            "cancel"
        } else {
            "fail"
        });
        let r = &mut self.jobs[j as usize];
        if let Some(n) = self.active.get_mut(&r.vc) {
            *n = n.saturating_sub(1);
        }
        r.state = state;
        note(r, now, event, detail);
        self.dirty.insert(j);
    }

    /// Holds queued job `j` while a job it names in `after_ok` has not succeeded or one
    /// in `after_any` has not ended.
    pub(super) fn hold_for_dependencies(&mut self, j: JobIdx) {
        let r = &self.jobs[j as usize];
        if r.state == JobState::Queued
            && !(r.spec.after_ok.is_empty() && r.spec.after_any.is_empty())
        {
            self.held.insert(j);
            self.world.set_blocked(j, true);
        }
    }

    /// Releases held jobs whose dependencies all succeeded, and cancels those with one
    /// that failed or was cancelled. Whether any changed.
    pub fn check_dependencies(&mut self, now: u64) -> bool {
        let mut changed = false;
        let held: Vec<JobIdx> = self.held.iter().copied().collect();
        for j in held {
            if self.jobs[j as usize].state != JobState::Queued {
                self.held.remove(&j);
                continue;
            }
            let mut all_ok = true;
            let mut broken = None;
            for &d in &self.jobs[j as usize].spec.after_ok {
                let st = self.state_of(d).map(|(s, _)| s);
                match st {
                    Some(JobState::Succeeded) => {}
                    Some(JobState::Failed | JobState::Cancelled) | None => {
                        broken = Some((d, st.map_or("gone", JobState::as_str)));
                        break;
                    }
                    _ => all_ok = false,
                }
            }
            let spec = &self.jobs[j as usize].spec;
            if spec
                .after_any
                .iter()
                .any(|&d| self.state_of(d).is_some_and(|(s, _)| !s.terminal()))
            {
                all_ok = false;
            }
            if let Some((d, how)) = broken {
                self.held.remove(&j);
                self.advance(now);
                self.world.set_blocked(j, false);
                self.end_early(
                    j,
                    now,
                    JobState::Cancelled,
                    "cancelled",
                    format!("dependency afterok:{d} can never be met (job {d} {how})"),
                );
                changed = true;
            } else if all_ok {
                self.held.remove(&j);
                self.world.set_blocked(j, false);
                changed = true;
            }
        }
        changed
    }

    /// Whether job `j` waits for its dependencies.
    pub(super) fn is_held(&self, j: JobIdx) -> bool {
        self.held.contains(&j)
    }

    /// Stops the running jobs whose attempt has run past its time limit: they fail with
    /// a `timeout` event (Slurm's TIMEOUT). Whether any did.
    pub fn check_time_limits(&mut self, now: u64) -> bool {
        let over: Vec<JobIdx> = self
            .world
            .running()
            .iter()
            .copied()
            .chain(self.sharing_running())
            .filter(|&j| {
                let r = &self.jobs[j as usize];
                let Some(limit) = r.spec.time_limit_s else {
                    return false;
                };
                let start = r
                    .history
                    .iter()
                    .rev()
                    .find(|t| t.event == "running")
                    .map_or(now, |t| t.at_ms);
                now.saturating_sub(start) as f64 >= limit * 1000.0
            })
            .collect();
        if !over.is_empty() {
            self.advance(now);
        }
        for &j in &over {
            let limit = self.jobs[j as usize].spec.time_limit_s.unwrap_or(0.0);
            self.end_early(
                j,
                now,
                JobState::Failed,
                "timeout",
                format!("time limit of {limit} s reached"),
            );
        }
        !over.is_empty()
    }

    /// Creates a VC or changes its quota (admin). HiveD's cells change only with the
    /// config and a restart, since they are bound to physical cells.
    pub fn set_vc(&mut self, name: &str, quota_gpus: Option<u64>) -> Result<(), ApiError> {
        if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_whitespace() || c == '/')
        {
            return Err(ApiError::bad(
                "name",
                "1..=64 characters, no spaces or slashes",
            ));
        }
        match self.cfg.sharing {
            Some(s) if s.cells() => {
                return Err(ApiError::conflict(format!(
                    "with {s} sharing, VCs and their cells change with the config and a restart"
                )));
            }
            Some(Sharing::Quota) if quota_gpus.is_none() => {
                return Err(ApiError::bad("quota_gpus", "quota sharing needs a quota"));
            }
            _ => {}
        }
        // The account stays the config's: an API caller never changes whose uid a
        // tenant's jobs run under.
        let run_as = self
            .cfg
            .vcs
            .iter()
            .find(|x| x.name == name)
            .and_then(|x| x.run_as.clone());
        let v = crate::config::VcConfig {
            name: name.to_string(),
            quota_gpus,
            nodes: None,
            run_as,
        };
        match self.cfg.vcs.iter_mut().find(|x| x.name == name) {
            Some(x) => *x = v.clone(),
            None => self.cfg.vcs.push(v.clone()),
        }
        if let Some(t) = self.policy.tenancy() {
            t.set_share(TenantShare {
                name: name.to_string(),
                nodes: 0,
                gpus: quota_gpus.unwrap_or(0),
            })
            .map_err(|e| ApiError::conflict(e.to_string()))?;
        }
        self.dirty_vcs.push(v);
        Ok(())
    }
}

//! One ElasticFlow decision, phase by phase: jobs whose work is done end, newcomers are
//! admitted (or declined), plans are made and ordered, every job is placed from scratch
//! with the round's overheads, and the next decision is chosen.

use super::{ElasticFlow, Kind, NO_DEADLINE, round_overhead, table};
use crate::{Ctx, Handles, JobIdx, PolicyError, Status};
use apiary_model::{Placement, Time};

/// A GPU set as the artifact's cache knows it: the rank of its first GPU and its count.
type CacheKey = (u32, u32);

/// A round's placements, each with its cache key.
type Placed = Vec<(JobIdx, Placement, CacheKey)>;

impl ElasticFlow {
    /// Ends the jobs whose work is done at this decision (the artifact's progress and
    /// hold modes); true when that ends the pass (their completions call it again).
    pub(super) fn end_finished(
        &mut self,
        ctx: &mut Ctx<'_>,
        now_ms: Time,
        now: i64,
    ) -> Result<bool, PolicyError> {
        if self.artifact_progress {
            // A job whose iterations are done ends at this decision, as the artifact's
            // `run_all_jobs` moves its end event to the current time.
            let mut done = false;
            for &j in &self.runnable {
                if ctx.status(j) == Status::Running && self.plan_job(ctx, j).iters <= 1e-6 {
                    ctx.holds()?.end_by(j, now_ms);
                    if let Some(ev) = self.events.as_mut() {
                        ev.move_end(j, now);
                        // `run_all_jobs` dates it from the round's start, its
                        // iterations and speed, without the overhead, and
                        // `ef_sim_jobs` judges it there.
                        let e = self.jobs[j as usize].as_ref().expect("runnable job");
                        let (start, iters, gpus) = e.round;
                        let s = table(ctx, j);
                        let tput = s.tput(gpus).unwrap_or(s.levels[0].1);
                        let end = start.saturating_add((iters / tput).ceil() as i64);
                        ctx.holds()?
                            .judge_deadline_at(j, (end.max(0) as Time).saturating_mul(1000));
                    }
                    done = true;
                }
            }
            if done {
                return Ok(true);
            }
            if let Some(ev) = self.events.as_mut() {
                ev.pass(now);
            }
        } else if self.hold {
            // A held job whose work is done ends at this decision, as the artifact moves
            // its end event to the current time. Its completion now calls the policy
            // again, which then plans without it and its GPUs.
            let mut done = false;
            for &j in &self.runnable {
                if ctx.status(j) == Status::Running && ctx.remaining(j) <= 1e-6 {
                    ctx.holds()?.hold_until(j, 0);
                    done = true;
                }
            }
            if done {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Admission control over the jobs that arrived since the last decision; whether
    /// the plans must be made again.
    pub(super) fn admit_arrived(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: i64,
    ) -> Result<bool, PolicyError> {
        // Admission control: ElasticFlow takes the newcomers together, as the artifact
        // batches a slot's arrivals into one event; EDF takes them one at a time.
        let arrived = std::mem::take(&mut self.arrived);
        let mut replan = true;
        if !arrived.is_empty() {
            if self.admission && self.kind == Kind::Edf {
                for &j in &arrived {
                    let mut all: Vec<JobIdx> = self.runnable.clone();
                    all.push(j);
                    if self.estimate_all(ctx, &mut all, now) {
                        self.runnable.push(j);
                    } else {
                        ctx.admission()?.decline(j, "declined: its deadline cannot be met without breaking an admitted job's");
                        self.jobs[j as usize] = None;
                    }
                }
            } else if self.admission {
                let mut all: Vec<JobIdx> = self.runnable.iter().chain(&arrived).copied().collect();
                if self.estimate_all(ctx, &mut all, now) {
                    self.runnable.extend(&arrived);
                    replan = false;
                } else {
                    for &j in &arrived {
                        if self.jobs[j as usize]
                            .as_ref()
                            .is_some_and(|e| e.best_effort)
                        {
                            self.runnable.push(j);
                        } else {
                            ctx.admission()?.decline(j, "declined: its deadline cannot be met without breaking an admitted job's");
                            self.jobs[j as usize] = None;
                        }
                    }
                }
            } else {
                self.runnable.extend(&arrived);
            }
        }
        Ok(replan)
    }

    /// Makes the plans (unless admission just made them), orders the jobs and the
    /// artifact's events, and gives spare GPUs out by marginal return.
    pub(super) fn plan_round(&mut self, ctx: &Ctx<'_>, now: i64, replan: bool) {
        if replan {
            let mut list = std::mem::take(&mut self.runnable);
            self.estimate_all(ctx, &mut list, now);
            self.runnable = list;
        }
        for &j in &self.runnable {
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.cap_end = e.plan.real_end;
        }
        // The artifact now sorts the runnable jobs by deadline and plans them once more
        // on a fresh timeline; that repeats the estimate just made (the same jobs in
        // the same stable order from the same state), so its plans stand.
        let jobs = &self.jobs;
        self.runnable
            .sort_by_key(|&j| jobs[j as usize].as_ref().map_or(NO_DEADLINE, |e| e.ddl));
        if let Some(ns) = self.node_sets.as_mut() {
            // `estimate_all_jobs` frees every job's GPUs in this order (the ended ones
            // were freed as they ended); the order decides the free list's.
            for &j in &self.runnable {
                ns.release(j);
            }
        }
        for &j in &self.runnable {
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.num_gpu = e.plan.allocs.get(now).unwrap_or(0);
            if let Some(ev) = self.events.as_mut() {
                // Every job's end event moves to its new plan's end, a waiting job's
                // too, and a waiting job's planned start becomes an event.
                ev.move_end(j, e.plan.end);
                if ctx.status(j) == Status::Pending
                    && let Some(&(t, _)) = e.plan.allocs.points().iter().find(|p| p.1 > 0)
                    && t > now
                {
                    ev.changes.insert(t);
                }
            }
        }
        if self.events.is_some() {
            // `ef_sim_jobs` starts waiting jobs whose plans start now, in arrival order,
            // before the greedy pass starts others.
            let mut starting: Vec<JobIdx> = self
                .runnable
                .iter()
                .copied()
                .filter(|&j| {
                    self.jobs[j as usize].as_ref().is_some_and(|e| {
                        e.seq == 0
                            && e.plan
                                .allocs
                                .points()
                                .iter()
                                .find(|p| p.1 > 0)
                                .is_none_or(|p| p.0 <= now)
                    })
                })
                .collect();
            starting.sort_unstable();
            for j in starting {
                self.last_seq += 1;
                self.jobs[j as usize].as_mut().expect("runnable job").seq = self.last_seq;
            }
        }
        if self.kind == Kind::Elastic {
            self.allocate_free(ctx, now);
        }
    }

    /// Places every job from scratch, largest first (buddy), and charges the round's
    /// overheads and plan ends; the placements made.
    pub(super) fn place_round(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: i64,
    ) -> Result<Vec<(JobIdx, Placement)>, PolicyError> {
        let total = self.usable(ctx);
        // Place everything from scratch, largest first (buddy).
        let jobs = &self.jobs;
        if self.events.is_some() {
            self.runnable
                .sort_by_key(|&j| jobs[j as usize].as_ref().map_or(u64::MAX, |e| e.seq));
        } else {
            self.runnable.sort_by_key(|&j| {
                std::cmp::Reverse(jobs[j as usize].as_ref().map_or(0, |e| e.num_gpu))
            });
        }
        let mut want: Vec<(JobIdx, u32)> = self
            .runnable
            .iter()
            .map(|&j| (j, self.jobs[j as usize].as_ref().map_or(0, |e| e.num_gpu)))
            .collect();
        // A plan the artifact's timeline over-promised cannot exceed the cluster here.
        let mut sum: u32 = 0;
        for w in want.iter_mut() {
            if sum + w.1 > total {
                w.1 = 0;
            }
            sum += w.1;
        }
        let big_in_order = self.events.is_some();
        // Buddy placement over the nodes in service: with nodes down (a failure's
        // repair) the plan, sized to them, goes on without them.
        let up = self.in_service(ctx);
        let artifact = if up.all_up() {
            self.artifact_place(&want, big_in_order)
        } else {
            None
        };
        let triples = match artifact {
            Some(x) => x,
            None => up
                .buddy(&want, big_in_order)
                .unwrap_or_default()
                .into_iter()
                .map(|(j, p)| {
                    let k = self.cache_key(&p);
                    (j, p, k)
                })
                .collect(),
        };
        let (placed, keys): (Vec<_>, Vec<_>) =
            triples.into_iter().map(|(j, p, k)| ((j, p), k)).unzip();
        ctx.elastic()?.reassign(&placed);

        // The per-round rescaling overhead every running job pays; and, under `hold`,
        // the end of its plan, slot-aligned and pushed back by the overhead, as its end.
        let restart = self.overhead
            && self.schedule_count > 0
            && self.schedule_count.is_multiple_of(self.slot as u64);
        if self.overhead {
            self.schedule_count += 1;
        }
        if let Some(ev) = self.events.as_mut() {
            // `ef_sim_jobs` makes every started job's next plan change an event (one
            // that holds no GPUs now included), before the overheads move the end
            // events on.
            for &j in &self.runnable {
                if let Some(e) = self.jobs[j as usize].as_ref()
                    && e.seq > 0
                    && let Some(&(t, _)) = e.plan.allocs.range(now + 1, i64::MAX).first()
                {
                    ev.changes.insert(t);
                }
            }
        }
        for ((j, p), key) in placed.iter().zip(keys) {
            if p.gpus() == 0 || ctx.status(*j) != Status::Running {
                continue;
            }
            let mut o = 0;
            if self.overhead {
                let cached = !self.cache.insert(key);
                if (1_747_000..1_749_000).contains(&now) {
                    eprintln!(
                        "PLC {now} {} {} {:?} {cached}",
                        ctx.job(*j).id,
                        p.gpus(),
                        key
                    );
                }
                o = round_overhead(total, p.gpus(), restart, cached);
                if self.artifact_progress {
                    // `run_all_jobs` charges each round its own overhead: what a long
                    // one leaves at the next decision is dropped, not carried.
                    ctx.stalls()?.restall(*j, o as Time);
                } else {
                    ctx.stalls()?.stall(*j, o as Time);
                }
            }
            let Some(e) = self.jobs[*j as usize].as_ref() else {
                continue;
            };
            let end = (e.plan.end.max(0) as Time) * 1000 + o as Time;
            if self.artifact_progress {
                let cap = e.cap_end.max(0) as Time * 1000;
                ctx.stalls()?.cap_work(*j, cap);
                // Work done before its end event does not free its GPUs before the
                // next decision (see the top of `schedule`) or that event.
                ctx.holds()?.hold_until(*j, end);
                ctx.holds()?.end_by(*j, end);
                match self.events.as_mut() {
                    // `ef_sim_jobs` judges a job at its end event instead.
                    Some(ev) => {
                        ev.move_end(*j, end.div_ceil(1000) as i64);
                        let iters = e.iters;
                        self.jobs[*j as usize].as_mut().expect("placed job").round =
                            (now, iters, p.gpus());
                    }
                    None => ctx.holds()?.judge_deadline_at(*j, cap),
                }
            } else if self.hold {
                ctx.holds()?.hold_until(*j, end);
            }
        }

        // The artifact marks cached GPU sets while logging the decision, before it
        // decides on a restart, so a restart round still charges a cached set 2 s; the
        // cache is emptied after.
        if restart {
            self.cache.clear();
        }
        Ok(placed)
    }

    /// The round's placements by the artifact's node sets, with its cache keys, in
    /// the order it places (jobs of a node or more first, in the order given or by
    /// size; then the smaller ones by size); `None` without node sets, or if the
    /// artifact could not have placed them (its sets are then emptied).
    fn artifact_place(&mut self, want: &[(JobIdx, u32)], big_in_order: bool) -> Option<Placed> {
        let node_gpus = self.node_gpus;
        let ns = self.node_sets.as_mut()?;
        let mut order: Vec<(JobIdx, u32)> = want.iter().copied().filter(|w| w.1 > 0).collect();
        order.sort_by_key(|&(_, n)| {
            std::cmp::Reverse(if big_in_order && n >= node_gpus {
                u32::MAX
            } else {
                n
            })
        });
        for &(j, n) in &order {
            if !ns.place(j, n) {
                ns.reset();
                return None;
            }
        }
        let mut out = Vec::with_capacity(want.len());
        ns.placements(&mut out);
        // Jobs planned no GPUs now give theirs up.
        out.extend(
            want.iter()
                .filter(|w| w.1 == 0)
                .map(|&(j, _)| (j, Placement::default(), (0, 0))),
        );
        Some(out)
    }

    /// A buddy placement's cache key: its first GPU's rank and its GPU count (its GPUs
    /// are consecutive).
    fn cache_key(&self, p: &Placement) -> CacheKey {
        let first = p
            .parts
            .first()
            .map_or(0, |&(n, m)| n * self.node_gpus + m.trailing_zeros());
        (first, p.gpus())
    }

    /// The next decision: a slot from now, or when a plan next changes if later.
    pub(super) fn next_decision(
        &mut self,
        ctx: &mut Ctx<'_>,
        now_ms: Time,
        now: i64,
        placed: &[(JobIdx, Placement)],
    ) {
        self.next_pass = now_ms + self.slot as Time * 1000;
        let first_change = self
            .runnable
            .iter()
            .filter_map(|&j| {
                self.jobs[j as usize]
                    .as_ref()
                    .and_then(|e| e.plan.allocs.range(now + 1, i64::MAX).first().map(|p| p.0))
            })
            .min();
        // The artifact adds a plan's change as an event only before the first event
        // it already has, comparing with end events before their overhead: a change at
        // a job's planned end waits for that job's end event.
        let first_change = if let Some(ev) = self.events.as_ref() {
            ev.next()
        } else if self.artifact_progress {
            let first_end = placed
                .iter()
                .filter(|(j, p)| p.gpus() > 0 && ctx.status(*j) == Status::Running)
                .filter_map(|(j, _)| self.jobs[*j as usize].as_ref().map(|e| e.plan.end))
                .min();
            first_change.filter(|&t| first_end.is_none_or(|e| t < e))
        } else {
            first_change
        };
        if let Some(t) = first_change {
            ctx.wake_at(((t.max(0)) as Time * 1000).max(self.next_pass));
        }
    }
}

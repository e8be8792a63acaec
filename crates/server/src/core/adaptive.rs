//! Adaptive jobs live (AdaptDL's, under Pollux). A job declares its batch limits when
//! it is submitted and reports its goodput model as it runs: it writes AdaptDL's
//! scheduling hints to `$APIARY_HINTS`, its agent forwards them, and they become the
//! world's [`Agent`] for the job, which is all Pollux reads of it. A resize is the
//! world's, as for elastic jobs: a checkpoint and a restart at the new size.

use super::{ApiError, Core, MAX_JOB_GPUS, note};
use crate::types::{AdaptiveBatch, JobSpec, JobState, SchedHints};
use apiary_api::HintsReport;
use apiary_model::adaptive::{Adaptive, Agent, BatchLimits, GradParams, PerfParams};
use apiary_policy::JobIdx;

/// The largest batch a submission may declare.
const MAX_BATCH: u32 = 1 << 24;

impl Core {
    /// Checks a submission's batch limits.
    pub(super) fn validate_adaptive(&self, s: &JobSpec) -> Result<(), ApiError> {
        let Some(a) = &s.adaptive else {
            return Ok(());
        };
        if s.gpu_milli.is_some() {
            return Err(ApiError::bad(
                "adaptive",
                "a job sharing a GPU (gpu_milli) is not adaptive",
            ));
        }
        let (lo, hi) = a.local_bsz_bounds;
        if lo == 0 || lo > hi {
            return Err(ApiError::bad(
                "adaptive.local_bsz_bounds",
                format!("must be [min, max] with 1 <= min <= max (got [{lo}, {hi}])"),
            ));
        }
        if a.init_batch_size == 0 || a.init_batch_size > a.max_batch_size {
            return Err(ApiError::bad(
                "adaptive.init_batch_size",
                format!(
                    "must be 1 to max_batch_size {} (got {})",
                    a.max_batch_size, a.init_batch_size
                ),
            ));
        }
        if a.max_batch_size > MAX_BATCH || a.max_batch_size < lo {
            return Err(ApiError::bad(
                "adaptive.max_batch_size",
                format!(
                    "must be from the smallest per-GPU batch {lo} to {MAX_BATCH} (got {})",
                    a.max_batch_size
                ),
            ));
        }
        Ok(())
    }

    /// Takes the hints an agent forwarded from its node's attempts. Hints of an attempt
    /// that is not the job's current one on that node are stale and dropped; hints that
    /// do not read or do not match the submission are noted in the job's history.
    pub(super) fn take_hints(&mut self, node: &str, reports: &[HintsReport], now: u64) {
        for h in reports {
            let Some(&j) = self.by_id.get(&h.job) else {
                continue;
            };
            let r = &self.jobs[j as usize];
            let current = r.state == JobState::Running
                && r.attempt == h.attempt
                && r.parts.iter().any(|p| p.node == node);
            let Some(limits) = r.spec.adaptive.filter(|_| current) else {
                continue;
            };
            match read_hints(&h.text, &limits) {
                Ok(hints) => {
                    self.jobs[j as usize].hints = Some(hints);
                    self.sync_agent(j);
                }
                Err(why) => note(
                    &mut self.jobs[j as usize],
                    now,
                    "hints rejected",
                    format!("attempt {} on {node}: {why}", h.attempt),
                ),
            }
            self.dirty.insert(j);
        }
    }

    /// What Pollux reads of an adaptive job: its batch limits.
    pub(super) fn adaptive_of(spec: &JobSpec) -> Option<Adaptive> {
        spec.adaptive.map(|a| Adaptive {
            limits: BatchLimits {
                init_batch: a.init_batch_size,
                max_batch: a.max_batch_size,
                min_local: a.local_bsz_bounds.0,
                max_local: a.local_bsz_bounds.1,
                max_replicas: None,
            },
            app: None,
        })
    }

    /// Sets the world's agent of adaptive job `j` from its record: its latest hints,
    /// and its restarts (its attempts after the first).
    pub(super) fn sync_agent(&mut self, j: JobIdx) {
        let r = &self.jobs[j as usize];
        if r.spec.adaptive.is_none() {
            return;
        }
        let mut agent = Agent::new(None);
        if let Some(h) = &r.hints
            && let Some(p) = h.perf_params
        {
            let grad = h.grad_params.and_then(|g| {
                Some(GradParams {
                    sqr: g.norm?,
                    var: g.var?,
                })
            });
            let perf = PerfParams::from_array([
                p.alpha_c, p.beta_c, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, p.gamma,
            ]);
            agent.report(perf, grad, h.max_profiled_replicas.unwrap_or(0));
        }
        agent.restarts = r.attempt.checked_sub(1);
        self.world.set_agent(j, agent);
    }
}

/// Reads a hints file's text and checks it against the submission.
fn read_hints(text: &str, limits: &AdaptiveBatch) -> Result<SchedHints, String> {
    let h: SchedHints =
        serde_json::from_str(text).map_err(|e| format!("not AdaptDL's hints JSON: {e}"))?;
    let clash = |field: &str, got: String, declared: String| {
        format!("{field} {got} is not the submission's {declared}")
    };
    if let Some(b) = h.init_batch_size.filter(|&b| b != limits.init_batch_size) {
        return Err(clash(
            "initBatchSize",
            b.to_string(),
            limits.init_batch_size.to_string(),
        ));
    }
    if let Some(b) = h.max_batch_size.filter(|&b| b != limits.max_batch_size) {
        return Err(clash(
            "maxBatchSize",
            b.to_string(),
            limits.max_batch_size.to_string(),
        ));
    }
    if let Some(b) = h.local_bsz_bounds.filter(|&b| b != limits.local_bsz_bounds) {
        return Err(clash(
            "localBszBounds",
            format!("{b:?}"),
            format!("{:?}", limits.local_bsz_bounds),
        ));
    }
    if let Some(n) = h.max_profiled_replicas.filter(|&n| n > MAX_JOB_GPUS) {
        return Err(format!(
            "maxProfiledReplicas {n} is more than a job's {MAX_JOB_GPUS} GPUs"
        ));
    }
    if let Some(p) = &h.perf_params {
        let named = [
            ("alpha_c", p.alpha_c),
            ("beta_c", p.beta_c),
            ("alpha_n", p.alpha_n),
            ("beta_n", p.beta_n),
            ("alpha_r", p.alpha_r),
            ("beta_r", p.beta_r),
            ("gamma", p.gamma),
        ];
        if let Some((k, v)) = named.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
            return Err(format!("perfParams.{k} must be a number >= 0 (got {v})"));
        }
        if p.gamma < 1.0 {
            return Err(format!(
                "perfParams.gamma must be at least 1, as AdaptDL fits it (got {})",
                p.gamma
            ));
        }
    }
    if let Some(g) = &h.grad_params {
        for (k, v) in [("norm", g.norm), ("var", g.var)] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(format!("gradParams.{k} must be a number >= 0 (got {v})"));
            }
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: AdaptiveBatch = AdaptiveBatch {
        init_batch_size: 128,
        max_batch_size: 4096,
        local_bsz_bounds: (32, 256),
    };

    #[test]
    fn hints_read_as_adaptdl_writes_them_and_clashes_are_named() {
        let h = read_hints(
            r#"{"initBatchSize": 128, "localBszBounds": [32, 256], "globalBatchSize": null,
                "maxBatchSize": 4096, "maxProfiledReplicas": 2, "gradientAccumulation": true,
                "gradParams": {"norm": 0.5, "var": 2.0},
                "perfParams": {"alpha_c": 0.1, "beta_c": 0.01, "alpha_n": 0.2, "beta_n": 0.0,
                               "alpha_r": 0.1, "beta_r": 0.0, "gamma": 1.5},
                "someFutureKey": 1}"#,
            &LIMITS,
        )
        .unwrap();
        assert_eq!(h.max_profiled_replicas, Some(2));
        assert_eq!(h.perf_params.unwrap().gamma, 1.5);
        assert_eq!(h.grad_params.unwrap().var, Some(2.0));
        let bad = |text: &str| read_hints(text, &LIMITS).unwrap_err();
        assert_eq!(
            bad(r#"{"maxBatchSize": 2048}"#),
            "maxBatchSize 2048 is not the submission's 4096"
        );
        assert_eq!(
            bad(r#"{"localBszBounds": [16, 256]}"#),
            "localBszBounds (16, 256) is not the submission's (32, 256)"
        );
        assert!(bad(r#"{"maxProfiledRepl"#).starts_with("not AdaptDL's hints JSON: EOF"));
        assert_eq!(
            bad(
                r#"{"perfParams": {"alpha_c": -1, "beta_c": 0, "alpha_n": 0, "beta_n": 0,
                    "alpha_r": 0, "beta_r": 0, "gamma": 1}}"#
            ),
            "perfParams.alpha_c must be a number >= 0 (got -1)"
        );
        assert_eq!(
            bad(r#"{"gradParams": {"norm": 1.0, "var": -2.0}}"#),
            "gradParams.var must be a number >= 0 (got -2)"
        );
        // Null statistics (not measured yet) read as absent.
        let h = read_hints(r#"{"gradParams": {"norm": null, "var": null}}"#, &LIMITS).unwrap();
        assert_eq!(h.grad_params.unwrap().norm, None);
    }
}

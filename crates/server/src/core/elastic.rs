//! Elastic jobs live: a submission's size range and throughput become the throughput
//! table elastic policies read, and the jobs their admission control turns away end
//! saying why. A resize itself is the world's ([`apiary_policy::World::reassign`]
//! under fencing): the job stops after its checkpoint and restarts at its new size.

use super::{ApiError, Core, MAX_JOB_GPUS, note};
use crate::types::{JobSpec, JobState};
use apiary_model::Scaling;
use apiary_policy::Capability;

impl Core {
    /// Checks a submission's elastic range and throughput.
    pub(super) fn validate_elastic(&self, s: &JobSpec) -> Result<(), ApiError> {
        let Some(e) = &s.elastic else {
            return Ok(());
        };
        if s.gpu_milli.is_some() {
            return Err(ApiError::bad(
                "elastic",
                "a job sharing a GPU (gpu_milli) is not elastic",
            ));
        }
        for (field, n) in [
            ("elastic.min_gpus", e.min_gpus),
            ("elastic.max_gpus", e.max_gpus),
        ] {
            if n == 0 || n > MAX_JOB_GPUS || !n.is_power_of_two() {
                return Err(ApiError::bad(
                    field,
                    format!(
                        "must be a power of two up to {MAX_JOB_GPUS} (got {n}): elastic \
                         policies place power-of-two GPU counts, as ElasticFlow's buddy \
                         placement does"
                    ),
                ));
            }
        }
        if e.min_gpus > e.max_gpus {
            return Err(ApiError::bad(
                "elastic.min_gpus",
                format!("{} is more than max_gpus {}", e.min_gpus, e.max_gpus),
            ));
        }
        if !(e.min_gpus..=e.max_gpus).contains(&s.gpus) {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "an elastic job's size ({}) is within its range {}-{}",
                    s.gpus, e.min_gpus, e.max_gpus
                ),
            ));
        }
        if e.throughput.is_empty() {
            return Ok(());
        }
        let levels: Vec<u32> = levels(e.min_gpus, e.max_gpus).collect();
        let given: Vec<u32> = e.throughput.iter().map(|&(g, _)| g).collect();
        if given != levels {
            return Err(ApiError::bad(
                "elastic.throughput",
                format!(
                    "give one rate per power-of-two count from {} to {}, in order: {levels:?} \
                     (got {given:?})",
                    e.min_gpus, e.max_gpus
                ),
            ));
        }
        if let Some(&(g, r)) = e
            .throughput
            .iter()
            .find(|&&(_, r)| !(r.is_finite() && r > 0.0 && r < 1e12))
        {
            return Err(ApiError::bad(
                "elastic.throughput",
                format!("the rate at {g} GPUs must be a positive number (got {r})"),
            ));
        }
        Ok(())
    }

    /// The throughput table a policy that reads them plans job `spec` with: an elastic
    /// job's over its range (linear when it gave none), and a rigid job's at its one
    /// size, so that it runs as asked beside elastic ones.
    pub(super) fn scaling_of(&self, spec: &JobSpec) -> Option<Scaling> {
        if !self.policy.capabilities().has(Capability::Scaling) {
            return None;
        }
        match &spec.elastic {
            Some(e) if !e.throughput.is_empty() => Scaling::new(e.throughput.clone(), e.max_gpus),
            Some(e) => Scaling::new(
                levels(e.min_gpus, e.max_gpus)
                    .map(|g| (g, f64::from(g)))
                    .collect(),
                e.max_gpus,
            ),
            None => Scaling::new(vec![(spec.gpus, 1.0)], spec.gpus),
        }
    }

    /// Ends the jobs the policy's admission control turned away since the last call:
    /// failed, with its reason in their history, as Slurm ends a job whose `--deadline`
    /// cannot be met. Returns whether there were any.
    pub(super) fn end_declined(&mut self, now: u64) -> bool {
        let declined = self.world.take_declined();
        for (&j, why) in &declined {
            self.counters.count("decline");
            let r = &mut self.jobs[j as usize];
            if r.state != JobState::Queued {
                continue;
            }
            if let Some(n) = self.active.get_mut(&r.vc) {
                *n = n.saturating_sub(1);
            }
            r.state = JobState::Failed;
            note(
                r,
                now,
                "declined",
                why.strip_prefix("declined: ").unwrap_or(why).to_string(),
            );
            self.dirty.insert(j);
        }
        !declined.is_empty()
    }
}

/// The power-of-two GPU counts from `min` to `max` (both powers of two).
fn levels(min: u32, max: u32) -> impl Iterator<Item = u32> {
    std::iter::successors(Some(min), |&g| g.checked_mul(2)).take_while(move |&g| g <= max)
}

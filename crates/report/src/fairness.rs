//! Themis' finish-time fairness ρ (Mahajan et al., NSDI '20, §3): a job's finish time
//! in the shared cluster over its finish time in an independent cluster of 1/N of the
//! GPUs, N being the number of jobs contending during its lifetime. ρ ≤ 1 means the
//! job did at least as well as its fair share would have let it; Themis minimises the
//! largest ρ.
//!
//! The independent finish time is closed-form, as the paper defines it: N is the
//! time-average number of jobs in the system (submitted, neither finished nor refused)
//! over the job's own submit-to-finish interval, and a job of g GPUs on a share of C/N
//! GPUs runs at its full speed when g ≤ C/N and otherwise for the fraction (C/N)/g of
//! the time, so T_id = duration · max(1, g·N/C). Gavel's plots instead divide by the
//! JCT of a separate run of its `isolated` policy; that needs a second simulation and
//! gives a different denominator, so it is not what this metric is.

use apiary_model::{RunOutcome, Time};

/// ρ of every finished job with a positive duration, in job order.
pub fn finish_time_fairness(o: &RunOutcome) -> Vec<f64> {
    let live = o.jobs.iter().filter(|j| j.rejected.is_none());
    let horizon = live
        .clone()
        .map(|j| j.finish.unwrap_or(j.submit).max(j.submit))
        .max()
        .unwrap_or(0);
    let mut steps: Vec<(Time, i64)> = Vec::with_capacity(2 * o.jobs.len());
    for j in live {
        steps.push((j.submit, 1));
        steps.push((j.finish.unwrap_or(horizon), -1));
    }
    steps.sort_unstable();
    let contention = Contention::of(&steps);
    let gpus = o.total_gpus.max(1) as f64;
    o.jobs
        .iter()
        .filter(|j| j.rejected.is_none() && j.duration > 0)
        .filter_map(|j| {
            let f = j.finish?;
            let n = contention.mean(j.submit, f);
            let isolated = j.duration as f64 * (j.gpus as f64 * n / gpus).max(1.0);
            Some((f - j.submit) as f64 / isolated)
        })
        .collect()
}

/// The number of jobs in the system as a step function, with its running integral at
/// each step, so the mean over any interval is two binary searches.
struct Contention {
    /// Step times, ascending and distinct.
    at: Vec<Time>,
    /// Jobs in the system from `at[k]` until `at[k + 1]`.
    jobs: Vec<i64>,
    /// Integral of the job count (job-ms) from `at[0]` to `at[k]`.
    area: Vec<f64>,
}

impl Contention {
    fn of(steps: &[(Time, i64)]) -> Contention {
        let mut c = Contention {
            at: Vec::new(),
            jobs: Vec::new(),
            area: Vec::new(),
        };
        let (mut n, mut area) = (0i64, 0.0f64);
        for &(t, d) in steps {
            if c.at.last() != Some(&t) {
                if let Some(&prev) = c.at.last() {
                    area += n as f64 * (t - prev) as f64;
                }
                c.at.push(t);
                c.jobs.push(n);
                c.area.push(area);
            }
            n += d;
            *c.jobs.last_mut().expect("a step was pushed") = n;
        }
        c
    }

    /// The integral from `at[0]` to `t`.
    fn area_to(&self, t: Time) -> f64 {
        let k = self.at.partition_point(|&s| s <= t);
        if k == 0 {
            return 0.0;
        }
        self.area[k - 1] + self.jobs[k - 1] as f64 * (t - self.at[k - 1]) as f64
    }

    /// The mean job count over `[from, to]`; at `from` itself when the interval is
    /// empty. At least 1: the job asking is one of them.
    fn mean(&self, from: Time, to: Time) -> f64 {
        let n = if to > from {
            (self.area_to(to) - self.area_to(from)) / (to - from) as f64
        } else {
            let k = self.at.partition_point(|&s| s <= from);
            k.checked_sub(1).map_or(1, |k| self.jobs[k]) as f64
        };
        n.max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::JobOutcome;

    fn job(submit: Time, gpus: u32, duration: Time, finish: Option<Time>) -> JobOutcome {
        JobOutcome {
            id: "j".into(),
            submit,
            gpus,
            duration,
            vc: None,
            first_start: finish.map(|f| f - duration),
            finish,
            preemptions: 0,
            executed: duration,
            gpu_time: 0,
            rejected: None,
            deadline: None,
            judged: None,
        }
    }

    fn outcome(gpus: u32, jobs: Vec<JobOutcome>) -> RunOutcome {
        RunOutcome::of_jobs("c", gpus, jobs)
    }

    #[test]
    fn a_job_alone_on_enough_gpus_has_rho_one() {
        let o = outcome(8, vec![job(0, 4, 100, Some(100))]);
        assert_eq!(finish_time_fairness(&o), vec![1.0]);
    }

    #[test]
    fn two_jobs_sharing_half_each() {
        // 4 GPUs, two 4-GPU jobs of 100 ms submitted together: FIFO runs one then the
        // other. Both see 2 jobs for their first 100 ms, the second sees 1 after that.
        // First: N = 2, T_id = 100·max(1, 4·2/4) = 200, ρ = 100/200 = 0.5.
        // Second: N = (2·100 + 1·100)/200 = 1.5, T_id = 150, ρ = 200/150.
        let o = outcome(
            4,
            vec![job(0, 4, 100, Some(100)), job(0, 4, 100, Some(200))],
        );
        let rho = finish_time_fairness(&o);
        assert_eq!(rho[0], 0.5);
        assert!((rho[1] - 200.0 / 150.0).abs() < 1e-12, "{rho:?}");
    }

    #[test]
    fn small_jobs_are_not_charged_for_a_share_they_do_not_need() {
        // 8 GPUs, 2 jobs of 1 GPU: a share of 4 GPUs covers each, so T_id is the
        // duration and a job that waited 50 ms has ρ = 150/100.
        let o = outcome(
            8,
            vec![job(0, 1, 100, Some(100)), job(0, 1, 100, Some(150))],
        );
        assert_eq!(finish_time_fairness(&o), vec![1.0, 1.5]);
    }

    #[test]
    fn unfinished_jobs_contend_and_refused_ones_do_not() {
        let mut refused = job(0, 4, 100, None);
        refused.rejected = Some("never fits".into());
        let o = outcome(
            4,
            vec![job(0, 4, 100, Some(100)), job(0, 4, 100, None), refused],
        );
        // N = 2 for the finished job: the unfinished one counts, the refused one not.
        assert_eq!(finish_time_fairness(&o), vec![0.5]);
    }
}

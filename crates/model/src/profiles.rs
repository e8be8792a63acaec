//! Stage profiles for traces that carry none: the table Muri's simulator ships
//! (`simulator/jobs.py`, `job_time_dict`, MIT), measured on V100s, and the rule that
//! gives each job of such a trace a model.
//!
//! Per model and GPU count (1, 2, 4, 8, 16, 32): the whole iteration time and the
//! three stage times (load and CPU, GPU, network), in milliseconds. A GPU count not in
//! the table takes the largest listed count not above it (so 3 GPUs use the 2-GPU row
//! and 64 or more the 32-GPU row).

use crate::job::{Job, StageTimes};
use crate::rng::Rng;

/// Models of the table, with their batch sizes as Muri names them.
pub const MODELS: [&str; 8] = [
    "vgg16-16",
    "vgg19-16",
    "resnet18-128",
    "shufflenet_v2_x1_0-128",
    "bert-4",
    "gpt2-4",
    "a2c-64",
    "dqn-128",
];

/// GPU counts of the table's rows.
pub const GPU_ROWS: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// `(iteration ms, [load, gpu, net] ms)` by row (GPU count) and model.
const TABLE: [[(f64, [f64; 3]); 8]; 6] = [
    // 1 GPU
    [
        (107.0, [117.0, 68.0, 0.0]),
        (109.0, [114.0, 80.0, 0.0]),
        (779.0, [711.0, 110.0, 0.0]),
        (798.0, [706.0, 59.0, 0.0]),
        (178.0, [0.5, 160.0, 0.0]),
        (426.0, [0.6, 410.0, 0.0]),
        (517.0, [514.0, 14.0, 0.0]),
        (490.0, [446.0, 8.0, 0.0]),
    ],
    // 2 GPUs
    [
        (191.0, [114.0, 72.0, 40.0]),
        (205.0, [115.0, 83.0, 41.0]),
        (881.0, [687.0, 110.0, 95.0]),
        (850.0, [747.0, 58.0, 18.0]),
        (195.0, [0.5, 163.0, 18.0]),
        (464.0, [0.7, 416.0, 40.0]),
        (525.0, [504.0, 14.0, 0.5]),
        (495.0, [441.0, 8.0, 0.6]),
    ],
    // 4 GPUs
    [
        (201.0, [82.0, 72.0, 67.0]),
        (212.0, [84.0, 85.0, 73.0]),
        (921.0, [723.0, 113.0, 73.0]),
        (886.0, [703.0, 62.0, 17.0]),
        (190.0, [0.5, 163.0, 18.0]),
        (433.0, [0.6, 413.0, 20.0]),
        (533.0, [502.0, 10.0, 0.3]),
        (505.0, [440.0, 8.0, 0.4]),
    ],
    // 8 GPUs
    [
        (214.0, [82.0, 75.0, 66.0]),
        (226.0, [82.0, 88.0, 60.0]),
        (1010.0, [784.0, 117.0, 77.0]),
        (957.0, [769.0, 57.0, 10.0]),
        (192.0, [0.5, 167.0, 59.0]),
        (437.0, [0.6, 419.0, 49.0]),
        (555.0, [502.0, 14.0, 0.4]),
        (509.0, [435.0, 8.0, 0.5]),
    ],
    // 16 GPUs
    [
        (332.0, [83.0, 68.0, 110.0]),
        (302.0, [102.0, 78.0, 123.0]),
        (1055.0, [736.0, 108.0, 93.0]),
        (1006.0, [776.0, 57.0, 21.0]),
        (244.0, [0.5, 166.0, 86.0]),
        (491.0, [0.6, 415.0, 137.0]),
        (567.0, [514.0, 14.0, 1.2]),
        (525.0, [438.0, 8.0, 1.2]),
    ],
    // 32 GPUs
    [
        (336.0, [87.0, 67.0, 131.0]),
        (356.0, [89.0, 79.0, 141.0]),
        (1059.0, [712.0, 111.0, 93.0]),
        (1019.0, [799.0, 56.0, 24.0]),
        (260.0, [0.5, 166.0, 133.0]),
        (514.0, [0.7, 414.0, 216.0]),
        (585.0, [507.0, 14.0, 2.0]),
        (546.0, [437.0, 8.0, 1.6]),
    ],
];

/// A model's profile at a GPU count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    /// The model (one of [`MODELS`]).
    pub model: &'static str,
    /// Whole-iteration time, ms.
    pub iteration_ms: f64,
    /// Stage times, ms.
    pub stages: StageTimes,
}

/// The profile of `model` (as [`MODELS`] names it, or its plain name such as `vgg16`)
/// at `gpus` GPUs.
pub fn profile(model: &str, gpus: u32) -> Option<Profile> {
    let m = MODELS
        .iter()
        .position(|&n| n == model || n.rsplit_once('-').is_some_and(|(base, _)| base == model))?;
    let row = GPU_ROWS.iter().rposition(|&g| g <= gpus.max(1))?;
    let (it, st) = TABLE[row][m];
    Some(Profile {
        model: MODELS[m],
        iteration_ms: it,
        stages: StageTimes {
            data: st[0],
            gpu: st[1],
            net: st[2],
        },
    })
}

/// The model [`assign`] draws for job `id`: uniform over [`MODELS`], from a stream
/// seeded with `seed` and the id alone.
pub fn draw(id: &str, seed: u64) -> &'static str {
    let mut rng = Rng::stream(seed, &format!("muri-profile/{id}"));
    MODELS[rng.below(MODELS.len() as u64) as usize]
}

/// Gives every job without stage times a profile: its own model when the table knows
/// it, otherwise one drawn uniformly from [`MODELS`] by a stream seeded with `seed` and
/// the job's id, so the choice does not depend on which other jobs are in the trace.
/// The job's iterations follow from its duration and the iteration time. Returns how
/// many jobs were given a drawn model.
pub fn assign(jobs: &mut [Job], seed: u64) -> usize {
    let mut drawn = 0;
    for j in jobs.iter_mut().filter(|j| j.extras().stages.is_none()) {
        let p = j
            .model
            .as_deref()
            .and_then(|m| profile(m, j.gpus))
            .unwrap_or_else(|| {
                drawn += 1;
                profile(draw(&j.id, seed), j.gpus).expect("every model has every row")
            });
        j.model = Some(p.model.to_string());
        j.extras_mut().stages = Some(p.stages);
        if j.iterations.is_none() {
            j.iterations = Some(((j.duration as f64 / p.iteration_ms).round() as u64).max(1));
        }
    }
    drawn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_names() {
        let p = profile("vgg16", 8).unwrap();
        assert_eq!(p.model, "vgg16-16");
        assert_eq!(
            (p.iteration_ms, p.stages.data, p.stages.gpu, p.stages.net),
            (214.0, 82.0, 75.0, 66.0)
        );
        assert_eq!(
            profile("gpt2-4", 3).unwrap().iteration_ms,
            464.0,
            "3 GPUs: the 2-GPU row"
        );
        assert_eq!(
            profile("dqn", 128).unwrap().iteration_ms,
            546.0,
            "past 32: the 32-GPU row"
        );
        assert!(profile("resnet50", 1).is_none());
    }

    #[test]
    fn assignment_is_deterministic_and_per_job() {
        let mk = |n: usize| -> Vec<Job> {
            (0..n)
                .map(|i| Job::new(i.to_string(), 0, 1 << (i % 4), 3_600_000))
                .collect()
        };
        let (mut a, mut b) = (mk(200), mk(50));
        assert_eq!(assign(&mut a, 7), 200);
        assign(&mut b, 7);
        assert_eq!(
            a[..50],
            b[..],
            "a job's model does not depend on the other jobs"
        );
        let mut c = mk(200);
        assign(&mut c, 8);
        assert_ne!(a, c, "another seed, other models");
        let used: std::collections::BTreeSet<_> = a.iter().map(|j| j.model.clone()).collect();
        assert_eq!(used.len(), MODELS.len());
        let j = &a[0];
        let p = profile(j.model.as_deref().unwrap(), j.gpus).unwrap();
        assert_eq!(
            j.iterations,
            Some((3_600_000.0 / p.iteration_ms).round() as u64)
        );
        // A job with a known model keeps it.
        let mut k = vec![Job::new("x", 0, 2, 1000)];
        k[0].model = Some("bert".into());
        assert_eq!(assign(&mut k, 1), 0);
        assert_eq!(k[0].model.as_deref(), Some("bert-4"));
    }
}

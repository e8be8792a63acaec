//! ElasticFlow's synthetic trace generator (`ElasticFlow/trace_generator/
//! generate_trace.py`), with its seed semantics, for the Fig. 9–11 runs.
//!
//! The artifact draws from Python's `random.Random` (MT19937) in four streams seeded
//! `seed` (job type), `seed + 1` (inter-arrival), `seed + 2` (duration) and `seed + 3`
//! (GPU count); [`PyRandom`] reproduces Python's seeding, `random()`, `uniform()` and
//! `choice()` bit for bit, so the same seed gives the artifact's jobs. Deadlines and
//! best-effort flags come from Python's *unseeded* global generator in the artifact, so
//! no seed reproduces them; here they come from a fifth stream seeded `seed + 4`. When
//! `min_ddl == max_ddl` and no job is best-effort (the Fig. 10 setup) they do not
//! depend on the draw, and the whole trace is the artifact's.

use crate::elasticflow::Tables;

/// Python's `random.Random`: MT19937 seeded as CPython seeds it from an integer.
#[derive(Clone)]
pub struct PyRandom {
    mt: [u32; 624],
    i: usize,
}

impl PyRandom {
    /// `random.Random(seed)`: `init_by_array` over the seed's 32-bit words.
    pub fn new(seed: u64) -> PyRandom {
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        let mut r = PyRandom {
            mt: [0; 624],
            i: 624,
        };
        r.mt[0] = 19_650_218;
        for i in 1..624 {
            let p = r.mt[i - 1];
            r.mt[i] = 1_812_433_253u32
                .wrapping_mul(p ^ (p >> 30))
                .wrapping_add(i as u32);
        }
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624.max(key.len()) {
            let p = r.mt[i - 1];
            r.mt[i] = (r.mt[i] ^ (p ^ (p >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                r.mt[0] = r.mt[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            let p = r.mt[i - 1];
            r.mt[i] =
                (r.mt[i] ^ (p ^ (p >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                r.mt[0] = r.mt[623];
                i = 1;
            }
        }
        r.mt[0] = 0x8000_0000;
        r
    }

    fn next_u32(&mut self) -> u32 {
        if self.i >= 624 {
            for k in 0..624 {
                let y = (self.mt[k] & 0x8000_0000) | (self.mt[(k + 1) % 624] & 0x7fff_ffff);
                let mut v = self.mt[(k + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.mt[k] = v;
            }
            self.i = 0;
        }
        let mut y = self.mt[self.i];
        self.i += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random()`: 53 random bits in [0, 1).
    pub fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `uniform(a, b)`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }

    /// `_randbelow(n)` (`choice` picks `seq[_randbelow(len(seq))]`): rejection
    /// sampling over `n.bit_length()` bits. `n` must be positive.
    pub fn below(&mut self, n: u32) -> u32 {
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.next_u32() >> (32 - k);
            if r < n {
                return r;
            }
        }
    }
}

/// The artifact's job templates (`job_table.py`), in its order: model and global batch.
pub const TEMPLATES: [(&str, u32); 14] = [
    ("resnet50", 64),
    ("resnet50", 128),
    ("resnet50", 256),
    ("vgg16", 64),
    ("vgg16", 128),
    ("vgg16", 256),
    ("inception3", 64),
    ("inception3", 128),
    ("gpt2", 128),
    ("gpt2", 256),
    ("bert", 128),
    ("bert", 64),
    ("deepspeech2", 64),
    ("deepspeech2", 32),
];

/// `generate_trace.py`'s arguments.
#[derive(Clone, Debug)]
pub struct EfGenOptions {
    /// `--num_jobs`.
    pub jobs: usize,
    /// `--lam`: mean inter-arrival time, seconds (0: every job at time 0).
    pub lam: f64,
    /// `--seed`.
    pub seed: u64,
    /// `--min_ddl` and `--max_ddl`: a deadline is arrival + U(min, max) × duration.
    pub min_ddl: f64,
    /// See `min_ddl`.
    pub max_ddl: f64,
    /// `--best_effort_percentage`: share of best-effort jobs, 0 to 1.
    pub best_effort: f64,
    /// `--max_scale_factor`: the most GPUs a job asks for.
    pub max_gpus: u32,
}

impl Default for EfGenOptions {
    fn default() -> Self {
        EfGenOptions {
            jobs: 100,
            lam: 0.0,
            seed: 0,
            min_ddl: 0.5,
            max_ddl: 1.5,
            best_effort: 0.0,
            max_gpus: 16,
        }
    }
}

/// One generated job, as the artifact writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct EfJob {
    /// Arrival, seconds.
    pub submit: f64,
    /// Iterations.
    pub iterations: f64,
    /// Model.
    pub model: &'static str,
    /// Deadline, seconds.
    pub ddl: f64,
    /// Global batch.
    pub batch: u32,
    /// GPUs asked for.
    pub gpus: u32,
    /// Duration at `gpus`, seconds.
    pub duration: f64,
    /// Best-effort (no deadline).
    pub best_effort: bool,
}

/// `generate_scale_factor`: ITP's GPU-count mix.
fn scale_factor(r: f64, max: u32) -> u32 {
    let g = if (0.83..=0.86).contains(&r) {
        2
    } else if (0.86..=0.89).contains(&r) {
        4
    } else if (0.89..=0.99).contains(&r) {
        8
    } else if r >= 0.99 {
        16
    } else {
        1
    };
    g.min(max)
}

/// Generates the trace; `tables` supply the throughput that turns a duration into
/// iterations (the artifact's `--throughputs_dir`, A100 by default). Fails, as the
/// artifact's assertion does, when a job's table lacks its GPU count.
pub fn generate(o: &EfGenOptions, tables: &Tables) -> Result<Vec<EfJob>, String> {
    let mut job_rng = PyRandom::new(o.seed);
    let mut arrival_rng = PyRandom::new(o.seed + 1);
    let mut duration_rng = PyRandom::new(o.seed + 2);
    let mut scale_rng = PyRandom::new(o.seed + 3);
    let mut global = PyRandom::new(o.seed + 4);
    let mut out = Vec::with_capacity(o.jobs);
    let mut prev: Option<f64> = None;
    for i in 0..o.jobs {
        let gpus = scale_factor(scale_rng.uniform(0.0, 1.0), o.max_gpus);
        let (model, batch) = TEMPLATES[job_rng.below(TEMPLATES.len() as u32) as usize];
        let duration = if duration_rng.random() >= 0.80 {
            60.0 * 10f64.powf(duration_rng.uniform(2.5, 4.0))
        } else {
            60.0 * 10f64.powf(duration_rng.uniform(1.0, 2.5))
        };
        let tput = tables.scaling(model, batch)?.tput(gpus).ok_or_else(|| {
            format!("job {i}: {model} batch {batch} has no throughput at {gpus} GPUs")
        })?;
        let submit = match prev {
            None => 0.0,
            Some(p) if o.lam > 0.0 => p + -(1.0 - arrival_rng.random()).ln() * o.lam,
            Some(p) => p,
        };
        prev = Some(submit);
        let ddl = submit + (global.uniform(o.min_ddl, o.max_ddl) * duration).trunc();
        let best_effort = global.uniform(0.0, 1.0) < o.best_effort;
        out.push(EfJob {
            submit,
            iterations: duration * tput,
            model,
            ddl,
            batch,
            gpus,
            duration,
            best_effort,
        });
    }
    Ok(out)
}

/// Writes the jobs in the artifact's CSV (`job_id,submit_time,iteration,model_name,ddl,
/// batch_size,num_gpu,duration,best_effort`), numbers truncated as its `%d` does.
pub fn write(jobs: &[EfJob], mut w: impl std::io::Write) -> std::io::Result<()> {
    writeln!(
        w,
        "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration,best_effort"
    )?;
    for (i, j) in jobs.iter().enumerate() {
        writeln!(
            w,
            "{i},{},{},{},{},{},{},{},{}",
            j.submit.trunc() as i64,
            j.iterations.trunc() as i64,
            j.model,
            j.ddl.trunc() as i64,
            j.batch,
            j.gpus,
            j.duration.trunc() as i64,
            u8::from(j.best_effort)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_random_streams_match_cpython() {
        // `random.Random(s).random()` in CPython.
        assert_eq!(PyRandom::new(0).random(), 0.8444218515250481);
        assert_eq!(PyRandom::new(1).random(), 0.13436424411240122);
        assert_eq!(PyRandom::new(42).random(), 0.6394267984578837);
        // `random.Random(1)`: random() twice more after the first.
        let mut r = PyRandom::new(1);
        r.random();
        assert_eq!(r.random(), 0.8474337369372327);
        assert_eq!(r.random(), 0.763774618976614);
        // `[random.Random(7).choice(range(14)) for _ in range(10)]`.
        let mut r = PyRandom::new(7);
        let picks: Vec<u32> = (0..10).map(|_| r.below(14)).collect();
        assert_eq!(picks, [5, 2, 6, 10, 0, 1, 13, 8, 1, 5]);
        // A seed of two 32-bit words.
        assert_eq!(PyRandom::new((1 << 40) + 5).random(), 0.5043802970418443);
    }
}

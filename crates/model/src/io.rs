//! Training data as a resource: datasets read from remote storage through a local
//! cache, at a rate the GPUs set and the cache and the remote bandwidth may cap.
//!
//! The model is SiloD's (EuroSys '23, §6 of the training-policies notes): each epoch
//! reads every sample of a dataset of `D` bytes once, in random order; a job whose
//! cache holds `C` bytes of it hits `h` of its reads, and with remote bandwidth `B`
//! it runs at `min(1, B / (X·s·(1 − h)))` of its GPU-bound speed, `X` its samples
//! per second on its GPUs and `s` the mean sample size. What `h` is depends on how
//! the cache is kept ([`CacheMode`]): pinned ("uniform") caching hits exactly `C/D`;
//! LRU, under a random full scan each epoch, hits far less ([`lru_hit`]).
//!
//! Traces rarely say what a job reads. [`assign`] gives each job a profile from its
//! model (or one drawn by job id and seed from Synergy's measured models, OSDI '22)
//! and a dataset size drawn from its model family's range ([`FAMILIES`]).

use crate::job::Job;
use crate::rng::Rng;

/// A byte count as the model computes with it.
pub const GB: f64 = 1e9;
/// Megabytes, for bandwidths.
pub const MB: f64 = 1e6;

/// A kind of training data: the range of dataset sizes jobs of its models read and
/// the mean size of one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Family {
    /// Its name in summaries.
    pub name: &'static str,
    /// Smallest dataset, GB.
    pub min_gb: f64,
    /// Largest dataset, GB; sizes are drawn log-uniformly in between.
    pub max_gb: f64,
    /// Mean sample size, KB.
    pub sample_kb: f64,
    /// Where the range comes from.
    pub source: &'static str,
}

/// The families, with their ranges: apiary's reading of the public datasets each
/// family trains on (SiloD does not publish its trace's datasets).
pub const FAMILIES: [Family; 4] = [
    Family {
        name: "image",
        min_gb: 10.0,
        max_gb: 1300.0,
        sample_kb: 110.0,
        source: "ImageNet-1K subsets (1.28 M JPEGs, ~140 GB, 110 KB each) to OpenImages scale",
    },
    Family {
        name: "audio",
        min_gb: 6.0,
        max_gb: 60.0,
        sample_kb: 200.0,
        source: "UrbanSound8K (~6 GB) to LibriSpeech 960 h (~60 GB, 281 k utterances)",
    },
    Family {
        name: "language",
        min_gb: 1.0,
        max_gb: 40.0,
        sample_kb: 2.0,
        source: "WMT16 En-De (~1.4 GB) to Wikipedia+BookCorpus text; a 512-token sequence is 2 KB",
    },
    Family {
        name: "small",
        min_gb: 0.05,
        max_gb: 1.0,
        sample_kb: 1.0,
        source: "MNIST-sized sets",
    },
];

/// One of Synergy's profiled models: its family and its GPU-bound rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelIo {
    /// Synergy's name.
    pub name: &'static str,
    /// Index into [`FAMILIES`].
    pub family: usize,
    /// Samples per second on one GPU with CPUs to spare: Synergy's batch × best-CPU
    /// speed-up ÷ iteration time at its fair share of 3 CPUs per GPU.
    pub gpu_rate: f64,
}

/// Synergy's 1-GPU models (`simulator/models/*_1.py`, MIT; `../shared/io/synergy`):
/// batch, speed-up at the best CPU count and iteration time at 3 CPUs per GPU give
/// each one's GPU-bound rate.
pub const MODELS: [ModelIo; 12] = [
    synergy("alexnet", 0, 512.0, 2.94, 0.6),
    synergy("shufflenet", 0, 512.0, 2.89, 0.615),
    synergy("res18", 0, 512.0, 2.4, 0.64),
    synergy("res50", 0, 512.0, 1.15, 0.78),
    synergy("mobilenet", 0, 512.0, 1.55, 0.71),
    synergy("m5", 1, 512.0, 2.5, 0.6),
    synergy("deepspeech", 1, 20.0, 1.0, 0.757),
    synergy("gnmt", 2, 128.0, 1.0, 0.12),
    synergy("transformer", 2, 128.0, 1.0, 0.67),
    synergy("lstm", 2, 20.0, 1.0, 0.011),
    synergy("bert", 2, 20.0, 1.0, 0.011),
    synergy("vae", 3, 20.0, 1.0, 0.011),
];

const fn synergy(
    name: &'static str,
    family: usize,
    batch: f64,
    speedup: f64,
    iter_s: f64,
) -> ModelIo {
    ModelIo {
        name,
        family,
        gpu_rate: batch * speedup / iter_s,
    }
}

/// The Synergy model a job's model name is: its first word, ignoring case, dashes and
/// the usual spellings (`ResNet-18 (batch size 32)` is `res18`, Gavel's `LM` the LSTM
/// language model, ElasticFlow's `deepspeech2` DeepSpeech).
pub fn model(name: &str) -> Option<&'static ModelIo> {
    let first = name.split([' ', '(']).next().unwrap_or("");
    let n = first.to_ascii_lowercase().replace(['-', '_'], "");
    let n = match n.as_str() {
        "lm" => "lstm".to_string(),
        "deepspeech2" => "deepspeech".to_string(),
        _ => n
            .strip_prefix("resnet")
            .map_or(n.clone(), |r| format!("res{r}")),
    };
    MODELS.iter().find(|m| m.name == n)
}

/// The dataset a job type of Gavel's traces trains on (Gavel, OSDI '20, Table 2), GB:
/// CIFAR-10 for ResNet-18, ImageNet for ResNet-50, Multi30k for the Transformer,
/// Wikitext-2 for the LM, ML-20M for Recommendation, monet2photo for CycleGAN, and
/// nothing read for A3C (it plays Pong).
pub fn known_dataset_gb(model: &str) -> Option<f64> {
    let first = model.split([' ', '(']).next().unwrap_or("");
    Some(match first {
        "ResNet-18" => 0.17,
        "ResNet-50" => 140.0,
        "Transformer" => 0.01,
        "LM" => 0.01,
        "Recommendation" => 0.2,
        "CycleGAN" => 0.3,
        "A3C" => 0.0,
        _ => return None,
    })
}

/// What a job reads: its dataset, its samples and how fast its GPUs consume them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DataProfile {
    /// Index into [`MODELS`] of the model it was given (its own or drawn).
    pub model: usize,
    /// Dataset size, bytes.
    pub dataset: f64,
    /// Mean sample size, bytes.
    pub sample: f64,
    /// Samples per second per GPU when nothing but the GPU limits it.
    pub gpu_rate: f64,
}

impl DataProfile {
    /// Bytes per second the job reads at full speed on `gpus` GPUs (weak scaling: each
    /// GPU consumes its own batch).
    pub fn demand(&self, gpus: u32) -> f64 {
        self.gpu_rate * gpus as f64 * self.sample
    }

    /// Remote-storage bytes per second at full speed with a hit ratio of `hit`.
    pub fn remote_demand(&self, gpus: u32, hit: f64) -> f64 {
        self.demand(gpus) * (1.0 - hit.clamp(0.0, 1.0))
    }

    /// SiloD's closed-form estimator: the fraction of GPU-bound speed the job reaches on
    /// `gpus` GPUs with remote bandwidth `bandwidth` (bytes/s) and a hit ratio `hit`.
    pub fn speed(&self, gpus: u32, hit: f64, bandwidth: f64) -> f64 {
        let need = self.remote_demand(gpus, hit);
        if need <= 0.0 {
            1.0
        } else {
            (bandwidth.max(0.0) / need).min(1.0)
        }
    }

    /// Run time at full speed of one epoch, ms of reference work (the cache warms over
    /// one epoch).
    pub fn epoch_ms(&self, gpus: u32) -> f64 {
        let rate = self.gpu_rate * gpus.max(1) as f64;
        if rate <= 0.0 {
            0.0
        } else {
            self.dataset / self.sample / rate * 1000.0
        }
    }
}

/// How jobs' caches are kept when the policy does not allocate them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Each job caches on its own nodes, in its GPUs' share of each node's cache, with
    /// LRU eviction (Alluxio-like): it thrashes under random epochs ([`lru_hit`]).
    Lru,
    /// As `Lru`, but each node pins a fixed subset of the dataset: hit `C/D`.
    Uniform,
    /// CoorDL's (VLDB '21) MinIO cache, partitioned across the job's servers: the
    /// nodes of a distributed job pin disjoint subsets, so its hit is `ΣC/D`.
    Coordl,
}

impl CacheMode {
    /// Its name in `--io`.
    pub const fn name(self) -> &'static str {
        match self {
            CacheMode::Lru => "lru",
            CacheMode::Uniform => "uniform",
            CacheMode::Coordl => "coordl",
        }
    }

    /// The hit ratio of a cache of `cache` bytes on a dataset of `dataset` bytes.
    pub fn hit(self, cache: f64, dataset: f64) -> f64 {
        let k = if dataset <= 0.0 { 1.0 } else { cache / dataset };
        match self {
            CacheMode::Lru => lru_hit(k),
            CacheMode::Uniform | CacheMode::Coordl => k.clamp(0.0, 1.0),
        }
    }
}

/// LRU's hit ratio when a cache of `k` of a dataset reads it in a fresh random order
/// every epoch. A sample read at position `p` of one epoch and `q` of the next is still
/// cached iff fewer than `k·N` other samples were read in between; in the limit of
/// many samples that is `(1−u)(1−v) > 1−k` for `u, v` uniform, whose probability is
/// `k + (1−k)·ln(1−k)`: about `k²/2` for a small cache, against uniform caching's `k`.
pub fn lru_hit(k: f64) -> f64 {
    if k >= 1.0 {
        1.0
    } else if k <= 0.0 {
        0.0
    } else {
        k + (1.0 - k) * (1.0 - k).ln()
    }
}

/// The cluster's storage: local cache and the bandwidth to the remote store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Storage {
    /// Local cache per GPU, bytes: a node has its GPUs' worth.
    pub cache_per_gpu: f64,
    /// Remote-storage bandwidth per cluster GPU, bytes/s: the pool every job shares is
    /// this times the cluster's GPUs.
    pub bandwidth_per_gpu: f64,
    /// How jobs keep caches when the policy does not allocate them.
    pub cache: CacheMode,
}

impl Default for Storage {
    /// `--io default`: 25 GB of cache and 20 MB/s of remote bandwidth per GPU, LRU
    /// caches (docs/io.md says why).
    fn default() -> Storage {
        Storage {
            cache_per_gpu: 25.0 * GB,
            bandwidth_per_gpu: 20.0 * MB,
            cache: CacheMode::Lru,
        }
    }
}

/// Why an `--io` setting was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StorageError {
    /// A key it does not have.
    #[error(
        "unknown --io key '{0}' (keys: cache=lru|uniform|coordl, cache_gb_per_gpu, bandwidth_mbs_per_gpu)"
    )]
    Key(String),
    /// A value out of range.
    #[error("--io {key}: {why} (got '{value}')")]
    Value {
        /// The key.
        key: &'static str,
        /// What it got.
        value: String,
        /// What it takes.
        why: &'static str,
    },
}

impl Storage {
    /// `default`, or `key=value` pairs separated by commas over the defaults:
    /// `cache=lru|uniform|coordl`, `cache_gb_per_gpu`, `bandwidth_mbs_per_gpu`.
    pub fn parse(s: &str) -> Result<Storage, StorageError> {
        Storage::default().with(s)
    }

    /// This setting with `key=value` pairs (as [`Storage::parse`] reads them) laid over.
    pub fn with(self, s: &str) -> Result<Storage, StorageError> {
        let mut st = self;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let number = |key: &'static str, unit: f64| -> Result<f64, StorageError> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0 && *x <= 1e9)
                    .map(|x| x * unit)
                    .ok_or_else(|| StorageError::Value {
                        key,
                        value: v.into(),
                        why: "a number from 0 to 10^9",
                    })
            };
            match k {
                "cache" => {
                    st.cache = match v {
                        "lru" => CacheMode::Lru,
                        "uniform" => CacheMode::Uniform,
                        "coordl" => CacheMode::Coordl,
                        _ => {
                            return Err(StorageError::Value {
                                key: "cache",
                                value: v.into(),
                                why: "lru, uniform or coordl",
                            });
                        }
                    }
                }
                "cache_gb_per_gpu" => st.cache_per_gpu = number("cache_gb_per_gpu", GB)?,
                "bandwidth_mbs_per_gpu" => {
                    st.bandwidth_per_gpu = number("bandwidth_mbs_per_gpu", MB)?;
                    if st.bandwidth_per_gpu <= 0.0 {
                        return Err(StorageError::Value {
                            key: "bandwidth_mbs_per_gpu",
                            value: v.into(),
                            why: "above 0: no job could read its data",
                        });
                    }
                }
                _ => return Err(StorageError::Key(k.into())),
            }
        }
        Ok(st)
    }

    /// The setting as `--io` writes it, every key spelled out.
    pub fn describe(&self) -> String {
        format!(
            "cache={},cache_gb_per_gpu={},bandwidth_mbs_per_gpu={}",
            self.cache.name(),
            self.cache_per_gpu / GB,
            self.bandwidth_per_gpu / MB
        )
    }
}

/// What [`assign`] gave the jobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assigned {
    /// Jobs whose model was drawn (their own was not one of [`MODELS`]).
    pub drawn_models: usize,
    /// Jobs whose dataset size was drawn (the trace gave none).
    pub drawn_sizes: usize,
    /// Jobs per family, in [`FAMILIES`] order.
    pub per_family: [usize; 4],
}

/// Gives every job without a [`DataProfile`] one: its own model if Synergy profiled it,
/// else one drawn uniformly from [`MODELS`] by a stream of `seed` and the job's id (so
/// a job's draw does not depend on the other jobs); its trace's dataset size if it has
/// one (or its Gavel job type's, [`known_dataset_gb`]), else one drawn log-uniformly
/// from its family's range.
pub fn assign(jobs: &mut [Job], seed: u64) -> Assigned {
    let mut out = Assigned::default();
    for j in jobs.iter_mut() {
        if let Some(p) = j.extras().data {
            out.per_family[MODELS[p.model].family] += 1;
            continue;
        }
        let mut rng = Rng::stream(seed, &format!("io/{}", j.id));
        let m = match j.model.as_deref().and_then(model) {
            Some(m) => MODELS.iter().position(|x| x == m).unwrap_or(0),
            None => {
                out.drawn_models += 1;
                rng.below(MODELS.len() as u64) as usize
            }
        };
        let f = &FAMILIES[MODELS[m].family];
        let given = j.extras().dataset_gb.filter(|g| g.is_finite() && *g >= 0.0);
        let gb = match given.or_else(|| j.model.as_deref().and_then(known_dataset_gb)) {
            Some(g) => g,
            None => {
                out.drawn_sizes += 1;
                (f.min_gb.ln() + rng.f64() * (f.max_gb / f.min_gb).ln()).exp()
            }
        };
        out.per_family[MODELS[m].family] += 1;
        j.extras_mut().data = Some(DataProfile {
            model: m,
            dataset: gb * GB,
            sample: f.sample_kb * 1e3,
            gpu_rate: MODELS[m].gpu_rate,
        });
    }
    out
}

/// How a run's data loading went, for its summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoReport {
    /// The storage setting.
    pub storage: String,
    /// Who allocated cache and bandwidth: `policy` (SiloD) or the cache mode's name.
    pub allocated_by: String,
    /// Bytes read from caches.
    pub cache_bytes: f64,
    /// Bytes read from remote storage.
    pub remote_bytes: f64,
    /// Remote bandwidth × the time measured, bytes.
    pub remote_capacity: f64,
    /// GPU-seconds that held a job while it waited for data: GPUs × (1 − its speed
    /// factor) over time.
    pub stalled_gpu_s: f64,
    /// What was drawn for jobs the trace said too little about.
    pub assigned: Assigned,
}

impl IoReport {
    /// Of the bytes jobs read, the share their caches served.
    pub fn hit_ratio(&self) -> f64 {
        let total = self.cache_bytes + self.remote_bytes;
        if total > 0.0 {
            self.cache_bytes / total
        } else {
            0.0
        }
    }

    /// Remote bytes over what the bandwidth could have carried.
    pub fn util(&self) -> f64 {
        if self.remote_capacity > 0.0 {
            self.remote_bytes / self.remote_capacity
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed form against LRU itself: a cache of k·N samples over epochs of
    /// fresh random permutations.
    #[test]
    fn lru_closed_form_matches_a_simulated_lru() {
        let n = 4000usize;
        for k in [0.1, 0.3, 0.5, 0.8] {
            let cap = (k * n as f64) as usize;
            let mut rng = Rng::new(7);
            let mut last = vec![0usize; n];
            let mut clock = 0usize;
            let mut order: Vec<usize> = (0..n).collect();
            // A sample is cached iff fewer than `cap` distinct samples were read since
            // its last read: count the live access stamps newer than its own with a
            // Fenwick tree over stamps (each sample's latest read is its one live stamp).
            let mut tree = vec![0i64; 6 * n + 2];
            let add = |t: &mut Vec<i64>, mut i: usize, d: i64| {
                while i < t.len() {
                    t[i] += d;
                    i += i & i.wrapping_neg();
                }
            };
            let upto = |t: &Vec<i64>, mut i: usize| {
                let mut s = 0;
                while i > 0 {
                    s += t[i];
                    i -= i & i.wrapping_neg();
                }
                s
            };
            let (mut hits, mut reads) = (0u64, 0u64);
            for epoch in 0..6 {
                rng.shuffle(&mut order);
                for &x in &order {
                    clock += 1;
                    if epoch >= 2 {
                        reads += 1;
                        let newer = upto(&tree, clock) - upto(&tree, last[x]);
                        if newer < cap as i64 {
                            hits += 1;
                        }
                    }
                    if last[x] > 0 {
                        add(&mut tree, last[x], -1);
                    }
                    last[x] = clock;
                    add(&mut tree, clock, 1);
                }
            }
            let sim = hits as f64 / reads as f64;
            let want = lru_hit(k);
            assert!(
                (sim - want).abs() < 0.02,
                "k={k}: simulated {sim:.4}, closed form {want:.4}"
            );
            assert!(want < k, "LRU never beats pinning");
        }
        assert_eq!(lru_hit(0.0), 0.0);
        assert_eq!(lru_hit(1.5), 1.0);
    }

    #[test]
    fn the_estimator_is_the_min_of_gpu_and_io() {
        let p = DataProfile {
            model: 0,
            dataset: 100.0 * GB,
            sample: 100e3,
            gpu_rate: 1000.0,
        };
        // 2 GPUs read 200 MB/s at full speed.
        assert_eq!(p.demand(2), 200.0 * MB);
        assert!((p.speed(2, 0.0, 100.0 * MB) - 0.5).abs() < 1e-12);
        assert!((p.speed(2, 0.5, 100.0 * MB) - 1.0).abs() < 1e-12);
        assert_eq!(p.speed(2, 1.0, 0.0), 1.0);
        // 10^6 samples at 2,000/s: 500 s an epoch.
        assert!((p.epoch_ms(2) - 500_000.0).abs() < 1e-6);
        assert!((CacheMode::Uniform.hit(25.0 * GB, 100.0 * GB) - 0.25).abs() < 1e-12);
        assert!(CacheMode::Lru.hit(25.0 * GB, 100.0 * GB) < 0.04);
    }

    #[test]
    fn settings_parse_over_the_defaults_and_say_what_is_wrong() {
        assert_eq!(Storage::parse("default").unwrap(), Storage::default());
        let s = Storage::parse("cache=uniform,bandwidth_mbs_per_gpu=10").unwrap();
        assert_eq!(s.cache, CacheMode::Uniform);
        assert_eq!(s.bandwidth_per_gpu, 10.0 * MB);
        assert_eq!(s.cache_per_gpu, 25.0 * GB);
        assert_eq!(Storage::parse(&s.describe()).unwrap(), s);
        let e = Storage::parse("cache=fifo").unwrap_err().to_string();
        assert!(
            e.contains("lru, uniform or coordl") && e.contains("'fifo'"),
            "{e}"
        );
        assert!(matches!(
            Storage::parse("size=1"),
            Err(StorageError::Key(_))
        ));
        assert!(Storage::parse("bandwidth_mbs_per_gpu=0").is_err());
        assert!(Storage::parse("cache_gb_per_gpu=-1").is_err());
    }

    #[test]
    fn assignment_is_seeded_per_job_and_keeps_what_the_trace_gives() {
        let mut a = vec![Job::new("x", 0, 1, 1000), Job::new("y", 0, 2, 1000)];
        a[1].model = Some("ResNet-50".into());
        a[1].extras_mut().dataset_gb = Some(140.0);
        let got = assign(&mut a, 3);
        assert_eq!(got.drawn_models, 1);
        assert_eq!(got.drawn_sizes, 1);
        let y = a[1].extras().data.unwrap();
        assert_eq!(MODELS[y.model].name, "res50");
        assert_eq!(model("ResNet-18 (batch size 128)").unwrap().name, "res18");
        assert_eq!(model("LM (batch size 20)").unwrap().name, "lstm");
        assert!(model("A3C").is_none());
        // Gavel's job types read their paper's datasets.
        let mut g = vec![Job::new("g", 0, 1, 1000)];
        g[0].model = Some("ResNet-50 (batch size 64)".into());
        assert_eq!(assign(&mut g, 0).drawn_sizes, 0);
        assert_eq!(g[0].extras().data.unwrap().dataset, 140.0 * GB);
        assert_eq!(y.dataset, 140.0 * GB);
        // The same job alone draws the same profile.
        let mut b = vec![Job::new("x", 0, 1, 1000)];
        assign(&mut b, 3);
        assert_eq!(b[0].extras().data, a[0].extras().data);
        let x = a[0].extras().data.unwrap();
        let f = FAMILIES[MODELS[x.model].family];
        assert!((f.min_gb * GB..=f.max_gb * GB).contains(&x.dataset));
        // Assigning again changes nothing.
        let before = a.clone();
        assign(&mut a, 99);
        assert_eq!(a[0].extras().data, before[0].extras().data);
    }
}

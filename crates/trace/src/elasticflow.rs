//! ElasticFlow's throughput tables: iterations per second of each (model, global batch)
//! on 1, 2, 4, … 64 GPUs, measured on A100s and (from Pollux) on T4s.
//!
//! ElasticFlow's traces give iterations, not run times; these tables turn them into a
//! run time on any GPU count. The tables ship inside apiary (Apache-2.0, see
//! `data/elasticflow/README.md`) so that the traces run without the artifact, and the
//! readers attach each job's row as an [`apiary_model::Scaling`].

use apiary_model::Scaling;
use std::collections::BTreeMap;

macro_rules! table {
    ($gpu:literal, $name:literal) => {
        (
            $name,
            include_str!(concat!(
                "../data/elasticflow/throughputs_",
                $gpu,
                "/",
                $name,
                ".csv"
            )),
        )
    };
}

const A100: &[(&str, &str)] = &[
    table!("A100", "bert"),
    table!("A100", "deepspeech2"),
    table!("A100", "gpt2"),
    table!("A100", "inception3"),
    table!("A100", "resnet50"),
    table!("A100", "resnet50_cifar10"),
    table!("A100", "vgg16"),
];

const T4: &[(&str, &str)] = &[
    table!("T4", "bert"),
    table!("T4", "cifar10"),
    table!("T4", "deepspeech2"),
    table!("T4", "imagenet"),
    table!("T4", "ncf"),
    table!("T4", "yolov3"),
];

/// Why a job has no scaling curve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScalingError {
    /// No table for the model on this GPU type.
    #[error(
        "no {gpu} throughput table for model '{model}' (tables: {tables}; pass --elasticflow-gpu for another GPU type)"
    )]
    Model {
        /// The GPU type.
        gpu: &'static str,
        /// The model asked for.
        model: String,
        /// The models with tables, comma-separated.
        tables: String,
    },
    /// The model's table has no row for the batch.
    #[error("model '{model}' has no {gpu} throughput at global batch {batch} (batches: {batches})")]
    Batch {
        /// The GPU type.
        gpu: &'static str,
        /// The model.
        model: String,
        /// The global batch asked for.
        batch: u32,
        /// The batches with rows, comma-separated.
        batches: String,
    },
    /// The row has no measured GPU count.
    #[error("model '{model}' batch {batch}: empty throughput row")]
    Empty {
        /// The model.
        model: String,
        /// The global batch.
        batch: u32,
    },
}

/// One GPU type's tables.
#[derive(Clone, Debug)]
pub struct Tables {
    gpu: &'static str,
    /// model → global batch → (GPUs, iterations/s), missing counts left out.
    rows: BTreeMap<String, BTreeMap<u32, Vec<(u32, f64)>>>,
}

/// The GPU types with built-in tables.
pub const GPU_TYPES: &[&str] = &["A100", "T4"];

impl Tables {
    /// The built-in tables of `gpu` (`A100` or `T4`, any case).
    pub fn builtin(gpu: &str) -> Option<Tables> {
        let (gpu, files) = if gpu.eq_ignore_ascii_case("a100") {
            ("A100", A100)
        } else if gpu.eq_ignore_ascii_case("t4") {
            ("T4", T4)
        } else {
            return None;
        };
        let mut rows = BTreeMap::new();
        for (model, text) in files {
            // Embedded files are checked by a test, so a parse failure cannot happen.
            rows.insert(
                model.to_string(),
                parse(text).expect("built-in table parses"),
            );
        }
        Some(Tables { gpu, rows })
    }

    /// The GPU type.
    pub fn gpu(&self) -> &str {
        self.gpu
    }

    /// Models with a table.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.rows.keys().map(String::as_str)
    }

    /// The scaling curve of `model` at global batch `batch`, capped as ElasticFlow
    /// caps it; an error says what is missing.
    pub fn scaling(&self, model: &str, batch: u32) -> Result<Scaling, ScalingError> {
        let by_batch = self.rows.get(model).ok_or_else(|| ScalingError::Model {
            gpu: self.gpu,
            model: model.to_string(),
            tables: self.models().collect::<Vec<_>>().join(", "),
        })?;
        let levels = by_batch.get(&batch).ok_or_else(|| ScalingError::Batch {
            gpu: self.gpu,
            model: model.to_string(),
            batch,
            batches: by_batch
                .keys()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        Scaling::new(levels.clone(), max_gpu(self.gpu, model, batch))
            .map(|s| s.with_batch(batch))
            .ok_or_else(|| ScalingError::Empty {
                model: model.to_string(),
                batch,
            })
    }
}

/// Parses one table: a `global_batch_size,1,2,4,…` header, then one row per batch;
/// `nan` and empty cells are counts that were not measured.
fn parse(text: &str) -> Result<BTreeMap<u32, Vec<(u32, f64)>>, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let head = lines.next().ok_or("empty table")?;
    let gpus: Vec<u32> = head
        .split(',')
        .skip(1)
        .map(|c| c.trim().parse().map_err(|_| format!("bad GPU count '{c}'")))
        .collect::<Result<_, _>>()?;
    let mut out = BTreeMap::new();
    for l in lines {
        let mut cells = l.split(',');
        let batch: u32 = cells
            .next()
            .and_then(|c| c.trim().parse().ok())
            .ok_or_else(|| format!("bad batch in '{l}'"))?;
        let mut row = Vec::new();
        for (g, c) in gpus.iter().zip(cells) {
            if c.trim().is_empty() {
                continue;
            }
            let v: f64 = c.trim().parse().map_err(|_| format!("bad cell '{c}'"))?;
            if v.is_finite() && v > 0.0 {
                row.push((*g, v));
            }
        }
        out.insert(batch, row);
    }
    Ok(out)
}

/// The most GPUs ElasticFlow gives a job (`models.get_max_gpu`): per-model caps found
/// by profiling where more GPUs stop helping, at most the global batch and 64.
pub fn max_gpu(gpu: &str, model: &str, batch: u32) -> u32 {
    if gpu == "T4" {
        // The artifact returns early for every T4 model; its later per-model rules
        // are unreachable.
        return match model {
            "bert" | "cifar10" => 16,
            "deepspeech2" if batch == 320 => 32,
            "yolov3" => 4,
            "ncf" => 1,
            _ => 64,
        };
    }
    match (model, batch) {
        ("deepspeech2", b) => b,
        ("gpt2", 128) => 16,
        ("gpt2", 256) => 32,
        ("bert", 64) => 8,
        ("bert", _) => 16,
        ("inception3", 64) => 16,
        ("inception3", 128) => 32,
        ("resnet50", 64) => 32,
        ("vgg16", 64) => 32,
        (_, b) => b.min(64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_tables_parse_and_cap() {
        for g in GPU_TYPES {
            let t = Tables::builtin(g).unwrap();
            assert!(t.models().count() >= 6);
        }
        let a = Tables::builtin("a100").unwrap();
        let s = a.scaling("bert", 128).unwrap();
        assert_eq!(s.levels.len(), 7);
        assert_eq!(s.max_gpus, 16);
        assert!((s.tput(1).unwrap() - 3.5749256045333064).abs() < 1e-12);
        assert_eq!(s.next_level(16), 16);
        // T4's deepspeech2 leaves a count unmeasured.
        let t4 = Tables::builtin("T4").unwrap();
        let d = t4
            .scaling("deepspeech2", 20)
            .or_else(|_| t4.scaling("deepspeech2", 320));
        assert!(d.is_ok());
        let e = a.scaling("ncf", 32768).unwrap_err();
        assert!(matches!(e, ScalingError::Model { gpu: "A100", .. }));
        assert!(e.to_string().contains("--elasticflow-gpu"), "{e}");
        assert!(matches!(
            a.scaling("bert", 7),
            Err(ScalingError::Batch { batch: 7, ref batches, .. }) if batches.contains("64, 128")
        ));
        assert!(Tables::builtin("K80").is_none());
    }

    #[test]
    fn caps_follow_the_artifact() {
        assert_eq!(max_gpu("A100", "deepspeech2", 32), 32);
        assert_eq!(max_gpu("A100", "resnet50", 256), 64);
        assert_eq!(max_gpu("A100", "resnet50", 128), 64);
        assert_eq!(max_gpu("A100", "vgg16", 64), 32);
        assert_eq!(max_gpu("T4", "ncf", 32768), 1);
        assert_eq!(max_gpu("T4", "imagenet", 100), 64);
    }
}

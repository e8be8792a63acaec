//! `apiary submit --elastic MIN-MAX [--throughput G:RATE,...]`: the GPU counts an
//! elastic job may run at (as torchrun's `--nnodes MIN:MAX` names its range) and its
//! throughput at each; and `--adaptive init=B,max=B,local=MIN-MAX`: an adaptive job's
//! batch limits, as AdaptDL's data loader declares them. The server checks the values.

use apiary_api::{AdaptiveBatch, Elastic};

/// An option that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElasticError {
    /// `--elastic`.
    #[error("--elastic '{text}': give MIN-MAX GPUs (2-8) or MIN:MAX")]
    Range {
        /// As written.
        text: String,
    },
    /// `--throughput`.
    #[error("--throughput '{text}': {why}")]
    Throughput {
        /// As written.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
    /// `--adaptive`.
    #[error("--adaptive '{text}': {why}")]
    Adaptive {
        /// As written.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Parses `--adaptive init=128,max=4096,local=32-256`: AdaptDL's initial batch, largest
/// batch and per-GPU batch bounds.
pub fn parse_adaptive(text: &str) -> Result<AdaptiveBatch, ElasticError> {
    let bad = |why| ElasticError::Adaptive {
        text: text.to_string(),
        why,
    };
    const FORM: &str = "give init=B,max=B,local=MIN-MAX (batch sizes, whole numbers)";
    let (mut init, mut max, mut local) = (None, None, None);
    for item in text.split(',') {
        let (k, v) = item.split_once('=').ok_or_else(|| bad(FORM))?;
        let num = |s: &str| s.trim().parse::<u32>().map_err(|_| bad(FORM));
        match k.trim() {
            "init" => init = Some(num(v)?),
            "max" => max = Some(num(v)?),
            "local" => {
                let (lo, hi) = v.split_once(['-', ':']).ok_or_else(|| bad(FORM))?;
                local = Some((num(lo)?, num(hi)?));
            }
            _ => return Err(bad(FORM)),
        }
    }
    match (init, max, local) {
        (Some(init_batch_size), Some(max_batch_size), Some(local_bsz_bounds)) => {
            Ok(AdaptiveBatch {
                init_batch_size,
                max_batch_size,
                local_bsz_bounds,
            })
        }
        _ => Err(bad(FORM)),
    }
}

/// Parses `--elastic MIN-MAX` (or `MIN:MAX`, or one count) and `--throughput
/// 1:1,2:1.9,4:3.4` (GPUs:rate pairs, any unit).
pub fn parse(range: &str, throughput: Option<&str>) -> Result<Elastic, ElasticError> {
    let bad = || ElasticError::Range {
        text: range.to_string(),
    };
    let (lo, hi) = range.split_once(['-', ':']).unwrap_or((range, range));
    let min_gpus: u32 = lo.trim().parse().map_err(|_| bad())?;
    let max_gpus: u32 = hi.trim().parse().map_err(|_| bad())?;
    let mut pairs = Vec::new();
    if let Some(text) = throughput {
        let bad = |why| ElasticError::Throughput {
            text: text.to_string(),
            why,
        };
        for item in text.split(',') {
            let (g, r) = item
                .split_once(':')
                .ok_or_else(|| bad("give GPUS:RATE pairs, comma-separated (1:1,2:1.9)"))?;
            let g: u32 = g
                .trim()
                .parse()
                .map_err(|_| bad("a GPU count is not a whole number"))?;
            let r: f64 = r
                .trim()
                .parse()
                .map_err(|_| bad("a rate is not a number"))?;
            pairs.push((g, r));
        }
    }
    Ok(Elastic {
        min_gpus,
        max_gpus,
        throughput: pairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_rates_parse_as_written() {
        let e = parse("2-8", Some("2:1.9, 4:3.4,8:6")).unwrap();
        assert_eq!((e.min_gpus, e.max_gpus), (2, 8));
        assert_eq!(e.throughput, vec![(2, 1.9), (4, 3.4), (8, 6.0)]);
        let e = parse("1:4", None).unwrap();
        assert_eq!((e.min_gpus, e.max_gpus, e.throughput.len()), (1, 4, 0));
        assert_eq!(parse("4", None).unwrap().max_gpus, 4);
        assert!(parse("two-8", None).is_err());
        let a = parse_adaptive("init=128, max=4096,local=32-256").unwrap();
        assert_eq!(
            (a.init_batch_size, a.max_batch_size, a.local_bsz_bounds),
            (128, 4096, (32, 256))
        );
        assert_eq!(
            parse_adaptive("init=128,max=4096").unwrap_err().to_string(),
            "--adaptive 'init=128,max=4096': give init=B,max=B,local=MIN-MAX (batch sizes, \
             whole numbers)"
        );
        assert_eq!(
            parse("1-2", Some("1=1")).unwrap_err().to_string(),
            "--throughput '1=1': give GPUS:RATE pairs, comma-separated (1:1,2:1.9)"
        );
    }
}

//! `apiary submit --elastic MIN-MAX [--throughput G:RATE,...]`: the GPU counts an
//! elastic job may run at (as torchrun's `--nnodes MIN:MAX` names its range) and its
//! throughput at each. The server checks what the counts must be.

use apiary_api::Elastic;

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
        assert_eq!(
            parse("1-2", Some("1=1")).unwrap_err().to_string(),
            "--throughput '1=1': give GPUS:RATE pairs, comma-separated (1:1,2:1.9)"
        );
    }
}

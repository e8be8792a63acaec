//! sbatch's syntaxes for `apiary submit`'s `--dependency` and `--array`, so that
//! Slurm users type what they know.

/// An option that does not parse, with what sbatch would have wanted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbatchError {
    /// One condition of `--dependency`.
    #[error("--dependency '{cond}': {why}")]
    Dependency {
        /// The condition as written.
        cond: String,
        /// What is wrong.
        why: String,
    },
    /// `--dependency` names no job.
    #[error("--dependency is empty: give afterok:ID or afterany:ID")]
    NoDependency,
    /// `--array`.
    #[error("--array '{text}': {why}")]
    Array {
        /// The indices as written.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// `--mem` or `--cpu`.
    #[error("--{option} '{text}': {why}")]
    Size {
        /// Which option.
        option: &'static str,
        /// The value as written.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Parses sbatch's `--mem`: a whole number of MiB, or with a suffix K, M, G or T
/// (binary units, as Slurm's). Returns MiB, rounded up.
pub fn mem_mib(text: &str) -> Result<u64, SbatchError> {
    let bad = |why| SbatchError::Size {
        option: "mem",
        text: text.into(),
        why,
    };
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_uppercase()),
        _ => (t, 'M'),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| bad("give a whole number with an optional K, M, G or T, e.g. 16G"))?;
    let kib = match unit {
        'K' => Some(n),
        'M' => n.checked_mul(1 << 10),
        'G' => n.checked_mul(1 << 20),
        'T' => n.checked_mul(1 << 30),
        _ => return Err(bad("the unit is K, M, G or T")),
    }
    .ok_or_else(|| bad("too large"))?;
    Ok(kib.div_ceil(1 << 10))
}

/// Parses CPU cores with up to three decimals (`2`, `0.5`). Returns thousandths.
pub fn cpu_milli(text: &str) -> Result<u64, SbatchError> {
    let bad = |why| SbatchError::Size {
        option: "cpu",
        text: text.into(),
        why,
    };
    let (whole, frac) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("give cores with at most three decimals, e.g. 2 or 0.5"));
    }
    let w: u64 = if whole.is_empty() && !frac.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| bad("give cores with at most three decimals, e.g. 2 or 0.5"))?
    };
    let f: u64 = format!("{frac:0<3}").parse().unwrap_or(0);
    w.checked_mul(1000)
        .and_then(|m| m.checked_add(f))
        .ok_or_else(|| bad("too large"))
}

/// The most tasks one `--array` may hold.
pub const MAX_ARRAY_TASKS: usize = 10_000;

/// What `--dependency` asks: jobs that must succeed, and jobs that must have ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependencies {
    /// `afterok:ID:ID`.
    pub after_ok: Vec<u64>,
    /// `afterany:ID:ID`.
    pub after_any: Vec<u64>,
}

/// Parses `afterok:5:6,afterany:7` (sbatch's `,` joins conditions that must all hold).
pub fn dependencies(text: &str) -> Result<Dependencies, SbatchError> {
    let mut d = Dependencies::default();
    for cond in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let bad = |why: String| SbatchError::Dependency {
            cond: cond.to_string(),
            why,
        };
        let mut it = cond.split(':');
        let kind = it.next().unwrap_or_default();
        let ids: Vec<u64> = it
            .map(|i| {
                i.trim()
                    .parse::<u64>()
                    .map_err(|_| bad(format!("'{i}' is not a job id")))
            })
            .collect::<Result<_, _>>()?;
        if ids.is_empty() {
            return Err(bad(format!("give the job ids, as {kind}:ID[:ID...]")));
        }
        match kind {
            "afterok" => d.after_ok.extend(ids),
            "afterany" => d.after_any.extend(ids),
            other => {
                return Err(bad(format!(
                    "'{other}' is not supported (afterok and afterany are)"
                )));
            }
        }
    }
    if d.after_ok.is_empty() && d.after_any.is_empty() {
        return Err(SbatchError::NoDependency);
    }
    Ok(d)
}

/// A job array: its task indices, in order, and how many may run at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Array {
    /// Task indices.
    pub tasks: Vec<u64>,
    /// `%K`: at most this many at once.
    pub at_once: Option<usize>,
}

/// Parses sbatch's `--array`: `0-99`, `1,3,5`, `0-15:4` (every 4th), each with an
/// optional `%K`.
pub fn array(text: &str) -> Result<Array, SbatchError> {
    let bad = |why: &str| SbatchError::Array {
        text: text.to_string(),
        why: why.to_string(),
    };
    let (list, at_once) = match text.split_once('%') {
        Some((l, k)) => {
            let k: usize = k
                .trim()
                .parse()
                .map_err(|_| bad("%K takes a whole number of tasks"))?;
            if k == 0 {
                return Err(bad("%0 would run nothing"));
            }
            (l, Some(k))
        }
        None => (text, None),
    };
    let mut tasks = Vec::new();
    for item in list.split(',').map(str::trim) {
        let num = |s: &str| -> Result<u64, SbatchError> {
            s.trim()
                .parse()
                .map_err(|_| bad(&format!("'{s}' is not a task index")))
        };
        let (range, step) = match item.split_once(':') {
            Some((r, st)) => (r, num(st)?),
            None => (item, 1),
        };
        if step == 0 {
            return Err(bad("a step of 0"));
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(range)?, num(range)?),
        };
        if lo > hi {
            return Err(bad(&format!("{lo}-{hi} runs backwards")));
        }
        let mut i = lo;
        while i <= hi {
            tasks.push(i);
            if tasks.len() > MAX_ARRAY_TASKS {
                return Err(bad(&format!("more than {MAX_ARRAY_TASKS} tasks")));
            }
            i += step;
        }
    }
    tasks.sort_unstable();
    tasks.dedup();
    Ok(Array { tasks, at_once })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_cpus_read_as_slurm_writes_them() {
        assert_eq!(mem_mib("4096"), Ok(4096));
        assert_eq!(mem_mib("16G"), Ok(16 * 1024));
        assert_eq!(mem_mib("16g"), Ok(16 * 1024));
        assert_eq!(mem_mib("1T"), Ok(1 << 20));
        assert_eq!(mem_mib("1536K"), Ok(2));
        assert!(mem_mib("1.5G").is_err());
        assert!(mem_mib("4X").is_err());
        assert!(mem_mib("").is_err());
        assert!(mem_mib("99999999999999999999T").is_err());
        assert_eq!(cpu_milli("2"), Ok(2000));
        assert_eq!(cpu_milli("0.5"), Ok(500));
        assert_eq!(cpu_milli(".25"), Ok(250));
        assert_eq!(cpu_milli("1.125"), Ok(1125));
        assert!(cpu_milli("1.1255").is_err());
        assert!(cpu_milli("-1").is_err());
        assert!(cpu_milli("two").is_err());
        assert!(cpu_milli(".").is_err());
    }

    #[test]
    fn sbatch_syntaxes() {
        let d = dependencies("afterok:5:6,afterany:7").unwrap();
        assert_eq!((d.after_ok, d.after_any), (vec![5, 6], vec![7]));
        assert!(dependencies("after:5").is_err());
        assert!(dependencies("afterok").is_err());
        assert!(dependencies("afterok:x").is_err());
        let a = array("0-9%2").unwrap();
        assert_eq!(a.tasks, (0..10).collect::<Vec<_>>());
        assert_eq!(a.at_once, Some(2));
        assert_eq!(array("1,3,5").unwrap().tasks, [1, 3, 5]);
        assert_eq!(array("0-15:4").unwrap().tasks, [0, 4, 8, 12]);
        assert_eq!(array("3,1-2").unwrap().tasks, [1, 2, 3]);
        for bad in ["", "5-1", "0-9%0", "a", "0-3:0", "0-20000"] {
            assert!(array(bad).is_err(), "{bad}");
        }
    }
}

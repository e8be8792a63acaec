//! The benchmark's memory: every run appends its figures as one JSON line to
//! `<work>/history.jsonl`, and the next run prints each figure beside the last run's,
//! so that a regression shows without anyone keeping notes.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// The file the history lives in, under the bench's work directory.
pub fn path(work: &Path) -> std::path::PathBuf {
    work.join("history.jsonl")
}

/// The last record in the history, if there is one that parses (a line from an older
/// or broken run is passed over, never an error: the history only informs).
pub fn last(work: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path(work)).ok()?;
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
}

/// Every record in the history that parses, oldest first.
pub fn all(work: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path(work))
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Appends `record` (with the time and the commit, when `git` knows it) as one line.
pub fn append(work: &Path, mut record: serde_json::Value) -> Result<()> {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    record["unix_time"] = unix.into();
    record["version"] = env!("CARGO_PKG_VERSION").into();
    if let Some(c) = commit() {
        record["commit"] = c.into();
    }
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let p = path(work);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("opening {}", p.display()))?;
    writeln!(f, "{}", serde_json::to_string(&record)?)
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// The checkout's commit, with `+` when it has uncommitted changes.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty=+"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `now` against `before` as a signed percentage (`+12%`), or blank when the last run
/// had no such figure. Wall times: a positive change is slower.
pub fn change(now: f64, before: Option<f64>) -> String {
    match before {
        Some(b) if b > 0.0 && now.is_finite() => format!("{:+.0}%", (now / b - 1.0) * 100.0),
        _ => String::new(),
    }
}

/// The value of `field` in the entry of `list` (an array in the last record) whose
/// `case` is `case`.
pub fn figure(
    last: Option<&serde_json::Value>,
    list: &str,
    case: &str,
    field: &str,
) -> Option<f64> {
    last?[list].as_array()?.iter().find(|f| f["case"] == case)?[field].as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_run_reads_the_last_record() {
        let dir = std::env::temp_dir().join(format!("apiary-bench-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(last(&dir).is_none());
        append(
            &dir,
            serde_json::json!({"runs": [{"case": "a", "wall_s": 2.0}]}),
        )
        .unwrap();
        append(
            &dir,
            serde_json::json!({"runs": [{"case": "a", "wall_s": 1.0}]}),
        )
        .unwrap();
        // A run cut off mid-line leaves a broken last line: the one before it counts.
        std::fs::OpenOptions::new()
            .append(true)
            .open(path(&dir))
            .unwrap()
            .write_all(b"{\"runs\": [")
            .unwrap();
        let l = last(&dir).unwrap();
        assert_eq!(figure(Some(&l), "runs", "a", "wall_s"), Some(1.0));
        assert_eq!(figure(Some(&l), "runs", "b", "wall_s"), None);
        assert_eq!(change(1.5, Some(1.0)), "+50%");
        assert_eq!(change(0.5, Some(1.0)), "-50%");
        assert_eq!(change(0.5, None), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

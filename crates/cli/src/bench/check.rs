//! `apiary bench --check`: a run fails when any figure is more than 20 % worse than the
//! median of the last five runs on the same machine (wall times also by at least
//! 20 ms), so that a slow-down is caught by
//! the command that measures it rather than noticed later in a table. The median of
//! several runs, not the last one, is the baseline: one noisy run neither hides nor
//! raises an alarm.

use serde_json::Value;

/// How much worse than the median a figure may be.
pub const TOLERANCE: f64 = 0.20;
/// Earlier runs the median is taken over.
pub const RUNS: usize = 5;
/// Wall-time changes below this are jitter, whatever their share: the shortest cases
/// take 30-50 ms, and one scheduling hiccup on a 2-core VM moves them by 20 ms.
const WALL_FLOOR_S: f64 = 0.02;

/// A figure worse than its baseline by more than the tolerance.
#[derive(Debug, PartialEq)]
pub struct Regression {
    /// The figure.
    pub name: String,
    /// This run's value.
    pub now: f64,
    /// The median of the earlier runs.
    pub median: f64,
    /// How much worse, percent.
    pub worse_pct: f64,
}

/// The machine a record was measured on: its host name and cores.
pub fn machine() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{host}, {cores} cores")
}

/// Every figure of a record: (name, value, whether lower is better).
pub fn figures(r: &Value) -> Vec<(String, f64, bool)> {
    let mut out = Vec::new();
    let mut put = |name: String, v: &Value, lower: bool| {
        if let Some(x) = v.as_f64().filter(|x| x.is_finite() && *x > 0.0) {
            out.push((name, x, lower));
        }
    };
    for f in r["runs"].as_array().into_iter().flatten() {
        put(
            format!("{} (wall s)", f["case"].as_str().unwrap_or("?")),
            &f["wall_s"],
            true,
        );
    }
    for f in r["parse"].as_array().into_iter().flatten() {
        put(
            format!("read {} (MB/s)", f["case"].as_str().unwrap_or("?")),
            &f["mb_per_s"],
            false,
        );
    }
    put(
        "hived decision p99 (us)".into(),
        &r["hived_decision"]["p99_us"],
        true,
    );
    let live = &r["live"];
    put("live pass p99 (us)".into(), &live["pass_p99_us"], true);
    put(
        "live submissions (jobs/s)".into(),
        &live["submit_per_s"],
        false,
    );
    for s in live["share_pass"].as_array().into_iter().flatten() {
        put(
            format!("live share pass {} p99 (us)", s[0].as_str().unwrap_or("?")),
            &s[2],
            true,
        );
    }
    put(
        "extender (pods/s)".into(),
        &r["extender"]["pods_per_s"],
        false,
    );
    put(
        "extender filter p99 (us)".into(),
        &r["extender"]["filter_p99_us"],
        true,
    );
    put("rebuild, redb (s)".into(), &r["rebuild"]["redb_s"], true);
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The figures of `now` worse than the median of the last [`RUNS`] records of
/// `history` (oldest first) measured on `now`'s machine, by more than [`TOLERANCE`];
/// and how many earlier runs the baseline had.
pub fn regressions(now: &Value, history: &[Value]) -> (Vec<Regression>, usize) {
    let same: Vec<&Value> = history
        .iter()
        .filter(|r| r["machine"].is_string() && r["machine"] == now["machine"])
        .collect();
    let recent = &same[same.len().saturating_sub(RUNS)..];
    let earlier: Vec<Vec<(String, f64, bool)>> = recent.iter().map(|r| figures(r)).collect();
    let mut out = Vec::new();
    for (name, v, lower) in figures(now) {
        let past: Vec<f64> = earlier
            .iter()
            .filter_map(|fs| fs.iter().find(|f| f.0 == name).map(|f| f.1))
            .collect();
        let Some(m) = median(past) else {
            continue;
        };
        let worse = if lower { v / m - 1.0 } else { m / v - 1.0 };
        let jitter = name.ends_with("(wall s)") && v - m < WALL_FLOOR_S;
        if worse > TOLERANCE && !jitter {
            out.push(Regression {
                name,
                now: v,
                median: m,
                worse_pct: worse * 100.0,
            });
        }
    }
    (out, recent.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(machine: &str, wall: f64, subs: f64) -> Value {
        json!({
            "machine": machine,
            "runs": [{"case": "philly tiresias", "wall_s": wall}],
            "live": {"submit_per_s": subs, "pass_p99_us": 50.0},
        })
    }

    #[test]
    fn a_figure_worse_than_the_median_of_five_by_over_a_fifth_fails() {
        // Earlier walls 1.0, 1.1, 0.9, 5.0 (noise), 1.0, and one from another machine.
        let history: Vec<Value> = [1.0, 1.1, 0.9, 5.0, 1.0]
            .iter()
            .map(|&w| rec("a, 2 cores", w, 10_000.0))
            .chain([rec("b, 64 cores", 0.1, 90_000.0)])
            .collect();
        // The median is 1.0: 1.19 passes, 1.21 fails; the other machine's runs and
        // the outlier decide nothing.
        let (r, n) = regressions(&rec("a, 2 cores", 1.19, 10_000.0), &history);
        assert_eq!((r, n), (vec![], 5));
        let (r, _) = regressions(&rec("a, 2 cores", 1.21, 10_000.0), &history);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "philly tiresias (wall s)");
        assert!((r[0].worse_pct - 21.0).abs() < 1e-9);
        // Higher is better for throughput: 8,000 against 10,000 is 25 % worse.
        let (r, _) = regressions(&rec("a, 2 cores", 1.0, 8_000.0), &history);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "live submissions (jobs/s)");
        assert!((r[0].worse_pct - 25.0).abs() < 1e-9);
        // A short case 49 % slower by 17 ms is jitter, not a regression.
        let short: Vec<Value> = (0..5).map(|_| rec("a, 2 cores", 0.035, 10_000.0)).collect();
        assert_eq!(
            regressions(&rec("a, 2 cores", 0.052, 10_000.0), &short).0,
            vec![]
        );
        assert_eq!(
            regressions(&rec("a, 2 cores", 0.056, 10_000.0), &short)
                .0
                .len(),
            1
        );
        // Only the last five count: a sixth, older run of 0.5 changes nothing.
        let mut longer = vec![rec("a, 2 cores", 0.5, 10_000.0)];
        longer.extend(history);
        assert_eq!(
            regressions(&rec("a, 2 cores", 1.19, 10_000.0), &longer).0,
            vec![]
        );
        // No earlier run on this machine: nothing to compare.
        assert_eq!(
            regressions(&rec("c, 8 cores", 9.0, 1.0), &longer),
            (vec![], 0)
        );
    }
}

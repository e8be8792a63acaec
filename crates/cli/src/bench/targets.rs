//! The speed targets the README's "Performance" section sets (issue 55), read off one
//! bench run: each figure beside its target and whether this run meets it. A figure
//! the run did not measure (no `../shared`, no `--full`) is left out, not counted as
//! missed.

use super::Figure;
use super::cases::{PHILLY_MURI_L, POLLUX, philly_case, philly_vc_case, synthetic_case};
use super::live::LiveFigures;
use super::parse::{PHILLY, ParseFigure};

/// Pollux's own simulator on workload 6, seconds (docs/fidelity.md, "Pollux").
const POLLUX_ARTIFACT_S: f64 = 1_777.0;

/// One target and this run's figure for it.
#[derive(Debug, PartialEq, serde::Serialize)]
pub struct Target {
    /// What is measured.
    pub what: &'static str,
    /// This run's figure.
    pub value: f64,
    /// Its unit, as printed after it.
    pub unit: &'static str,
    /// The bound it must reach.
    pub bound: f64,
    /// Whether the figure must be at least the bound (else at most).
    pub at_least: bool,
    /// Whether this run meets it.
    pub met: bool,
}

impl Target {
    fn new(
        what: &'static str,
        value: f64,
        unit: &'static str,
        bound: f64,
        at_least: bool,
    ) -> Target {
        let met = if at_least {
            value >= bound
        } else {
            value <= bound
        };
        Target {
            what,
            value,
            unit,
            bound,
            at_least,
            met,
        }
    }
}

/// Every target this run measured the figures for.
pub fn targets(figs: &[Figure], reads: &[ParseFigure], live: &LiveFigures) -> Vec<Target> {
    let wall = |name: &str| {
        figs.iter()
            .find(|f| f.case == name)
            .map(|f| f.wall_s)
            .filter(|w| *w > 0.0)
    };
    let rate = |name: &str| figs.iter().find(|f| f.case == name).map(|f| f.events_per_s);
    let mut out = Vec::new();
    if let Some(w) = wall(POLLUX) {
        out.push(Target::new(
            "Pollux workload 6, speed-up over Pollux's simulator",
            POLLUX_ARTIFACT_S / w,
            "x",
            100.0,
            true,
        ));
    }
    if let Some(t) = wall(&philly_case("tiresias")) {
        for (what, name, bound) in [
            (
                "Philly, Gandiva over Tiresias",
                philly_case("gandiva"),
                10.0,
            ),
            (
                "Philly, Muri-L over Tiresias",
                PHILLY_MURI_L.to_string(),
                10.0,
            ),
            ("Philly, HiveD over Tiresias", philly_vc_case("hived"), 3.0),
        ] {
            if let Some(w) = wall(&name) {
                out.push(Target::new(what, w / t, "x", bound, false));
            }
        }
    }
    if let Some(r) = reads
        .iter()
        .find(|r| r.case == PHILLY && r.scan_mb_per_s > 0.0)
    {
        out.push(Target::new(
            "Philly read, share of the byte scan",
            r.mb_per_s / r.scan_mb_per_s,
            "",
            0.2,
            true,
        ));
    }
    for (what, policy, bound) in [
        ("1 M jobs, SRTF, M events/s", "srtf", 10.0),
        ("1 M jobs, Tiresias, M events/s", "tiresias", 5.0),
    ] {
        if let Some(r) = rate(&synthetic_case(policy)) {
            out.push(Target::new(what, r / 1e6, "", bound, true));
        }
    }
    out.push(Target::new(
        "live pass p99, 10,000 GPUs, 12,236 queued",
        live.pass_p99_us,
        " us",
        100.0,
        false,
    ));
    out.push(Target::new(
        "durable submissions over HTTP, jobs/s",
        live.submit_per_s,
        "",
        10_000.0,
        true,
    ));
    out
}

/// The targets as a table.
pub fn print(targets: &[Target]) {
    println!(
        "{:<56} {:>12} {:>10} {:>5}",
        "target (README, Performance)", "this run", "target", "met"
    );
    for t in targets {
        let bound = format!(
            "{} {}{}",
            if t.at_least { ">=" } else { "<=" },
            short(t.bound),
            t.unit
        );
        println!(
            "{:<56} {:>12} {:>10} {:>5}",
            t.what,
            format!("{}{}", short(t.value), t.unit),
            bound,
            if t.met { "yes" } else { "no" }
        );
    }
}

/// Three significant figures, enough to compare with a target.
fn short(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(case: String, wall_s: f64, events_per_s: f64) -> Figure {
        Figure {
            case,
            command: String::new(),
            events: 0,
            wall_s,
            events_per_s,
            peak_mb: 0.0,
        }
    }

    /// Ratios come from the named cases, a missing case drops its target, and a bound
    /// is met when reached exactly.
    #[test]
    fn targets_read_the_named_cases() {
        let figs = vec![
            fig(philly_case("tiresias"), 0.05, 0.0),
            fig(philly_case("gandiva"), 0.5, 0.0),
            fig(PHILLY_MURI_L.to_string(), 2.0, 0.0),
            fig(POLLUX.to_string(), 17.77, 0.0),
            fig(synthetic_case("srtf"), 0.2, 10e6),
        ];
        let live = LiveFigures {
            pass_p50_us: 20.0,
            pass_p99_us: 120.0,
            pass_gpus: 10_000,
            pass_queued: 12_236,
            submit_per_s: 12_000.0,
            submit_clients: 16,
            submit_etcd_per_s: None,
            share_pass: Vec::new(),
        };
        let t = targets(&figs, &[], &live);
        let got: Vec<(&str, bool)> = t.iter().map(|t| (t.what, t.met)).collect();
        assert_eq!(
            got,
            [
                ("Pollux workload 6, speed-up over Pollux's simulator", true),
                ("Philly, Gandiva over Tiresias", true),
                ("Philly, Muri-L over Tiresias", false),
                ("1 M jobs, SRTF, M events/s", true),
                ("live pass p99, 10,000 GPUs, 12,236 queued", false),
                ("durable submissions over HTTP, jobs/s", true),
            ]
        );
        assert!((t[2].value - 40.0).abs() < 1e-9);
        assert_eq!(short(40.0), "40.0");
        assert_eq!(short(0.0661), "0.066");
    }
}

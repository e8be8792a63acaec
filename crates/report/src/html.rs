//! A self-contained HTML report: a table and inline SVG charts (JCT CDF,
//! queueing-delay CDF, utilisation over time), no scripts, no external files.
//! Charts are drawn by hand so the bytes depend only on the numbers.

use crate::chart::{self, Chart, Figure, Format, Unit};
use crate::present::{headlines, html_table};
use crate::text::esc;
use crate::{Summary, pending_ms};
use apiary_model::RunOutcome;
use std::fmt::Write as _;

/// A line chart of `series` (name, points) with plain-number axes; `log_x` plots x on a
/// log scale. For charts with units and bands, see [`crate::chart`].
pub fn chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    log_x: bool,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    chart::draw(
        &Chart {
            title,
            xlabel,
            ylabel,
            x: Unit::Number,
            log_x,
            y: Unit::Number,
            log_y: false,
            dots: false,
        },
        &chart::lines(series),
    )
}

/// The empirical CDF of `v`, thinned to about 400 points.
pub fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = (n / 400).max(1);
    let mut out: Vec<(f64, f64)> = v
        .iter()
        .enumerate()
        .step_by(step)
        .map(|(i, x)| (*x, (i + 1) as f64 / n as f64))
        .collect();
    if let Some(l) = v.last() {
        out.push((*l, 1.0));
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}\
pre{background:#f6f6f6;padding:1em;overflow-x:auto}figure{margin:1.5em 0}\
table{border-collapse:collapse;margin:1em 0}th,td{padding:.35em .8em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}\
thead th{border-bottom:2px solid #444}tbody th{text-align:left;font-weight:normal;color:#444}\
.ratio{color:#666;font-size:.85em;margin-left:.3em}.ratio.good{color:#1a7f37}.ratio.bad{color:#b42318}\
.base{font-weight:normal;font-size:.8em;color:#666}table.record td{text-align:left;white-space:normal;word-break:break-all}ul.headlines li{margin:.3em 0}.note{color:#555}";

/// The opening of a report page: head with the page's style, and its title.
pub fn page_head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    )
}

/// The opening of a report page with a preformatted text table.
pub fn page_start(title: &str, table: &str) -> String {
    format!("{}<pre>{}</pre>\n", page_head(title), esc(table))
}

/// Why a run's rejected jobs were turned away: each reason with how many jobs it
/// turned away, most first.
pub fn rejections(out: &RunOutcome) -> Vec<(String, usize)> {
    let mut by: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for j in &out.jobs {
        if let Some(r) = &j.rejected {
            *by.entry(r).or_default() += 1;
        }
    }
    let mut v: Vec<(String, usize)> = by.into_iter().map(|(r, n)| (r.to_string(), n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Groups of runs that gave the same result for every job (same first start, finish,
/// preemptions and refusal), each as `"srtf and tiresias"`.
pub fn identical(runs: &[(&str, &RunOutcome)]) -> Vec<String> {
    let same = |a: &RunOutcome, b: &RunOutcome| {
        a.jobs.len() == b.jobs.len()
            && a.jobs.iter().zip(&b.jobs).all(|(x, y)| {
                (x.first_start, x.finish, x.preemptions, &x.rejected)
                    == (y.first_start, y.finish, y.preemptions, &y.rejected)
            })
    };
    let mut taken = vec![false; runs.len()];
    let mut out = Vec::new();
    for i in 0..runs.len() {
        if taken[i] {
            continue;
        }
        let mut group = vec![runs[i].0];
        for j in i + 1..runs.len() {
            if !taken[j] && same(runs[i].1, runs[j].1) {
                taken[j] = true;
                group.push(runs[j].0);
            }
        }
        if let Some(last) = group.pop().filter(|_| !group.is_empty()) {
            out.push(format!("{} and {last}", group.join(", ")));
        }
    }
    out
}

/// The per-job CDF of `f` for each run.
fn per_job(
    runs: &[(Summary, &RunOutcome)],
    f: impl Fn(&apiary_model::JobOutcome) -> Option<f64>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    runs.iter()
        .map(|(s, o)| {
            (
                s.policy.clone(),
                cdf(o.jobs.iter().filter_map(&f).collect()),
            )
        })
        .collect()
}

/// A series over time as (hours since the series' start, value).
fn hours(u: &apiary_model::UtilSeries) -> Vec<(f64, f64)> {
    u.points()
        .into_iter()
        .map(|(t, v)| ((t - u.start) as f64 / 3.6e6, v))
        .collect()
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// A CDF over jobs with a log-scale time axis.
fn cdf_figure(
    name: &str,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Figure {
    Figure {
        name: name.into(),
        title: title.into(),
        xlabel: xlabel.into(),
        ylabel: ylabel.into(),
        x: Unit::Seconds,
        log_x: true,
        y: Unit::Percent,
        log_y: false,
        dots: false,
        columns: ("seconds", "fraction"),
        lines: chart::lines(series),
    }
}

/// A series over the run's time, in hours or days.
fn over_time(
    name: &str,
    title: &str,
    ylabel: &str,
    y: Unit,
    series: &[(String, Vec<(f64, f64)>)],
) -> Figure {
    Figure {
        name: name.into(),
        title: title.into(),
        xlabel: "time since the first submission".into(),
        ylabel: ylabel.into(),
        x: Unit::Hours,
        log_x: false,
        y,
        log_y: false,
        dots: false,
        columns: (
            "hours",
            if y == Unit::Percent {
                "fraction"
            } else {
                "value"
            },
        ),
        lines: chart::lines(series),
    }
}

/// The charts of a comparison report, in page order: CDFs of JCT, first-start delay and
/// pending time; utilisation, queue length and running jobs over time; cluster
/// efficiency where jobs carry throughput tables; and a JCT CDF per VC (with a note
/// on which VCs are drawn) where the trace has VCs.
pub struct Figures {
    /// The charts of the whole cluster.
    pub main: Vec<Figure>,
    /// The per-VC charts.
    pub vcs: Vec<Figure>,
    /// Which VCs are drawn, when not all are.
    pub vc_note: Option<String>,
}

impl Figures {
    /// Every figure, in page order.
    pub fn all(&self) -> impl Iterator<Item = &Figure> {
        self.main.iter().chain(&self.vcs)
    }
}

/// The charts of `runs` (see [`Figures`]).
pub fn figures(runs: &[(Summary, &RunOutcome)]) -> Figures {
    let mut main = vec![
        cdf_figure(
            "jct-cdf",
            "JCT CDF",
            "job completion time (log scale)",
            "fraction of jobs",
            &per_job(runs, |j| j.finish.map(|f| secs(f - j.submit))),
        ),
        cdf_figure(
            "first-start-delay-cdf",
            "First-start delay CDF",
            "wait before the first start (log scale; waits of 0 drawn at the smallest)",
            "fraction of jobs",
            &per_job(runs, |j| j.first_start.map(|f| secs(f - j.submit))),
        ),
        cdf_figure(
            "pending-time-cdf",
            "Pending time CDF",
            "JCT less running time: every wait, after preemptions too (log scale)",
            "fraction of jobs",
            &per_job(runs, |j| {
                j.finish.map(|f| secs(pending_ms(f - j.submit, j.executed)))
            }),
        ),
    ];
    let util: Vec<_> = runs
        .iter()
        .map(|(s, o)| (s.policy.clone(), hours(&o.util)))
        .collect();
    main.push(over_time(
        "utilisation",
        "GPU utilisation over time",
        "busy GPUs",
        Unit::Percent,
        &util,
    ));
    let occ: Vec<_> = runs
        .iter()
        .filter_map(|(s, o)| Some((s.policy.clone(), o.occupancy.as_ref()?)))
        .collect();
    if !occ.is_empty() {
        // A count series stops where its last job left; it reads 0 to the run's end.
        let end = util
            .iter()
            .filter_map(|(_, p)| p.last().map(|q| q.0))
            .fold(0.0, f64::max);
        let padded = |u: &apiary_model::UtilSeries| {
            let mut p = hours(u);
            if p.last().is_none_or(|q| q.0 < end) {
                p.push((p.last().map_or(0.0, |q| q.0), 0.0));
                p.push((end, 0.0));
            }
            p
        };
        let pending: Vec<_> = occ
            .iter()
            .map(|(n, c)| (n.clone(), padded(&c.pending)))
            .collect();
        let running: Vec<_> = occ
            .iter()
            .map(|(n, c)| (n.clone(), padded(&c.running)))
            .collect();
        main.push(over_time(
            "queue-length",
            "Queue length over time",
            "jobs waiting",
            Unit::Number,
            &pending,
        ));
        main.push(over_time(
            "running-jobs",
            "Running jobs over time",
            "jobs running",
            Unit::Number,
            &running,
        ));
    }
    // Failures so far and GPUs down, for runs under a failure model: steps.
    let fails: Vec<(&str, &apiary_model::failures::FailureReport)> = runs
        .iter()
        .filter_map(|(s, o)| Some((s.policy.as_str(), o.failures.as_ref()?)))
        .collect();
    if !fails.is_empty() {
        let steps = |f: &apiary_model::failures::FailureReport,
                     pick: fn(&(u64, u64, u64)) -> u64| {
            let mut pts = vec![(0.0, 0.0)];
            for p in &f.timeline {
                let h = p.0.saturating_sub(f.start) as f64 / 3.6e6;
                let prev = pts.last().map_or(0.0, |q| q.1);
                pts.push((h, prev));
                pts.push((h, pick(p) as f64));
            }
            pts
        };
        let count: Vec<_> = fails
            .iter()
            .map(|(n, f)| (n.to_string(), steps(f, |p| p.1)))
            .collect();
        let down: Vec<_> = fails
            .iter()
            .map(|(n, f)| (n.to_string(), steps(f, |p| p.2)))
            .collect();
        main.push(over_time(
            "failures",
            "Failures so far (--failures)",
            "failures that struck a job or took a node down",
            Unit::Number,
            &count,
        ));
        main.push(over_time(
            "gpus-down",
            "GPUs down for repair over time (--failures)",
            "GPUs down",
            Unit::Number,
            &down,
        ));
    }
    // ElasticFlow's cluster efficiency, for runs whose jobs carry throughput tables.
    let ce: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .filter_map(|(s, o)| Some((s.policy.clone(), hours(o.cluster_efficiency.as_ref()?))))
        .collect();
    if !ce.is_empty() {
        main.push(over_time(
            "cluster-efficiency",
            "Cluster efficiency over time (ElasticFlow: speed-up over one GPU per cluster GPU)",
            "cluster efficiency",
            Unit::Percent,
            &ce,
        ));
    }
    // Carbon over time, where a series was given (under the constant default the
    // emission is utilisation scaled).
    let energy: Vec<(&str, &apiary_model::energy::EnergyReport)> = runs
        .iter()
        .filter_map(|(s, o)| Some((s.policy.as_str(), o.energy.as_ref()?)))
        .filter(|(_, e)| e.intensity != "default")
        .collect();
    if let Some((_, first)) = energy.first() {
        let emission: Vec<_> = energy
            .iter()
            .map(|(n, e)| (n.to_string(), hours(&e.emission)))
            .collect();
        main.push(over_time(
            "carbon-emission",
            "Jobs' carbon emission over time",
            "kg CO2eq per hour",
            Unit::Number,
            &emission,
        ));
        main.push(over_time(
            "carbon-intensity",
            &format!("Grid carbon intensity over the run ({})", first.intensity),
            "gCO2eq/kWh",
            Unit::Number,
            &[("intensity".to_string(), hours(&first.intensity_series))],
        ));
    }
    let (vcs, vc_note) = vc_figures(runs);
    Figures { main, vcs, vc_note }
}

/// Renders the report for several runs of one trace: the table with ratios against the
/// first run, a headline per metric, CDFs of JCT, first-start delay and pending time,
/// utilisation, queue length and running jobs over time, JCT per VC where the trace has
/// VCs, and `tenants` (HTML: the per-VC table of VC-sharing policies) when given.
pub fn html_report(
    title: &str,
    runs: &[(Summary, &RunOutcome)],
    tenants: Option<&str>,
    record: Option<&crate::Record>,
) -> String {
    let sums: Vec<Summary> = runs.iter().map(|r| r.0.clone()).collect();
    let mut h = page_head(title);
    h.push_str(&html_table(&sums));
    let heads = headlines(&sums);
    let named: Vec<(&str, &RunOutcome)> =
        runs.iter().map(|(s, o)| (s.policy.as_str(), *o)).collect();
    let same = identical(&named);
    if !heads.is_empty() || !same.is_empty() {
        h.push_str("<ul class=\"headlines\">\n");
        for l in &heads {
            let _ = writeln!(h, "<li>{}</li>", esc(l));
        }
        for g in &same {
            let _ = writeln!(
                h,
                "<li class=\"note\">{} gave identical results: every job started and finished at the same times.</li>",
                esc(g)
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str(
        "<p class=\"note\">First-start delay is the wait before a job first runs; pending time is \
         its JCT less the time it ran, so it also counts waits after preemptions.</p>\n",
    );
    if let Some(t) = tenants {
        h.push_str(t);
    }
    let figs = figures(runs);
    for f in &figs.main {
        h.push_str(&f.render(Format::Svg));
    }
    if !figs.vcs.is_empty() {
        h.push_str("<h2>Per VC</h2>\n");
        if let Some(n) = &figs.vc_note {
            let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(n));
        }
        for f in &figs.vcs {
            h.push_str(&f.render(Format::Svg));
        }
    }

    if let Some(r) = record {
        h.push_str(&record_html(r, runs));
    }
    h.push_str("</body></html>\n");
    h
}

/// The record of the run, at the foot of the page.
fn record_html(r: &crate::Record, runs: &[(Summary, &RunOutcome)]) -> String {
    let params: Vec<(String, String)> = (runs.iter())
        .filter(|(s, _)| !s.params.is_empty())
        .map(|(s, _)| (s.policy.clone(), s.params.join(" ")))
        .collect();
    record_table(r, "jobs read", &params)
}

/// The record of a run as a table: command, build, date, trace and its digest (with
/// `read`, what was read from it), cluster, every option, the seed, and each policy's
/// parameters.
pub fn record_table(r: &crate::Record, read: &str, params: &[(String, String)]) -> String {
    let mut o = String::from("<h2>The run</h2>\n<table class=\"record\">\n");
    let mut row = |k: &str, v: &str| {
        let _ = writeln!(
            o,
            "<tr><th>{}</th><td><code>{}</code></td></tr>",
            esc(k),
            esc(v)
        );
    };
    row("command", &r.command.join(" "));
    row("apiary", &format!("{} (commit {})", r.version, r.commit));
    row("made", &r.date);
    row("trace", &r.trace.path);
    row("trace SHA-256", &r.trace.sha256);
    row(read, &r.trace.jobs.to_string());
    row("cluster", &r.cluster);
    for (k, v) in &r.options {
        row(&format!("--{k}"), v);
    }
    row("seed", &r.seed.to_string());
    for (policy, p) in params {
        row(&format!("{policy} parameters"), p);
    }
    o.push_str("</table>\n");
    o
}

/// The most VCs that get a chart each, and the fewest jobs a VC needs for one.
const VC_CHARTS: usize = 6;
const VC_MIN_JOBS: usize = 20;

/// A JCT CDF per VC, a line per run, where the trace's jobs carry VCs, and which are
/// drawn when not all are.
fn vc_figures(runs: &[(Summary, &RunOutcome)]) -> (Vec<Figure>, Option<String>) {
    let Some((_, first)) = runs.first() else {
        return (Vec::new(), None);
    };
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for v in first.jobs.iter().filter_map(|j| j.vc.as_deref()) {
        *counts.entry(v).or_default() += 1;
    }
    if counts.len() < 2 {
        return (Vec::new(), None);
    }
    let mut vcs: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| **n >= VC_MIN_JOBS)
        .map(|(v, _)| *v)
        .collect();
    let mut note = None;
    if vcs.len() > VC_CHARTS || vcs.len() < counts.len() {
        vcs.sort_by_key(|v| (std::cmp::Reverse(counts[v]), *v));
        vcs.truncate(VC_CHARTS);
        vcs.sort_unstable();
        note = Some(format!(
            "{} VCs; drawn: the {} with the most jobs (at least {VC_MIN_JOBS}).",
            counts.len(),
            vcs.len()
        ));
    }
    let figs = vcs
        .into_iter()
        .map(|vc| {
            let series = per_job(runs, |j| {
                if j.vc.as_deref() == Some(vc) {
                    j.finish.map(|f| secs(f - j.submit))
                } else {
                    None
                }
            });
            cdf_figure(
                &format!("vc-{vc}-jct-cdf"),
                &format!("JCT CDF in VC {vc}"),
                "job completion time (log scale)",
                "fraction of the VC's jobs",
                &series,
            )
        })
        .collect();
    (figs, note)
}

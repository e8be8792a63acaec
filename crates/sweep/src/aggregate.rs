//! From rows to what a paper's figure shows: per configuration (trace, cluster, load,
//! setting) each metric's mean over seeds with a 95 % interval, and its ratio against
//! the baseline setting at the same trace, cluster and load, paired by seed.

use crate::results::{Row, VcResult};
use crate::spec::Sweep;
use apiary_report::chart::{self, Chart, Format, Unit};
use apiary_report::html::page_head;
use apiary_report::present::{Kind, compare_ratio, metric_info, show, show_pm};
use apiary_report::stats::{Estimate, paired_ratio};
use apiary_report::text::esc;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One configuration's figures.
#[derive(Clone, Debug)]
pub struct Line {
    /// Trace label.
    pub trace: String,
    /// Cluster.
    pub cluster: String,
    /// Load multiplier.
    pub load: f64,
    /// Policy setting.
    pub setting: String,
    /// Seeds with results.
    pub seeds: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Per metric, the estimate over seeds.
    pub stats: Vec<Option<Estimate>>,
    /// Per metric, the ratio to the baseline.
    pub ratios: Vec<Option<Estimate>>,
}

/// The aggregate of a sweep's rows, in plan order.
pub fn aggregate(s: &Sweep, rows: &[Row], baseline: Option<&str>) -> Vec<Line> {
    type Key<'r> = (&'r str, &'r str, u64, &'r str);
    fn key(r: &Row) -> Key<'_> {
        (&r.trace, &r.cluster, r.load.to_bits(), &r.setting)
    }
    // Configurations in the order rows first show them, each with its rows: one pass.
    let mut index: BTreeMap<Key, usize> = BTreeMap::new();
    let mut groups: Vec<(Key, Vec<&Row>)> = Vec::new();
    for r in rows {
        let k = key(r);
        let i = *index.entry(k).or_insert_with(|| {
            groups.push((k, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(r);
    }
    let series = |rs: &[&Row], m: usize| -> Vec<(u64, f64)> {
        rs.iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| Some((r.seed, r.values.get(m).copied().flatten()?)))
            .collect()
    };
    groups
        .iter()
        .map(|&(k, ref mine)| {
            let base = baseline
                .and_then(|b| index.get(&(k.0, k.1, k.2, b)))
                .map(|&i| &groups[i].1);
            let stats = (0..s.metrics.len())
                .map(|m| {
                    let v: Vec<f64> = series(mine, m).into_iter().map(|x| x.1).collect();
                    Estimate::of(&v)
                })
                .collect();
            let ratios = (0..s.metrics.len())
                .map(|m| paired_ratio(&series(mine, m), &series(base?, m)))
                .collect();
            Line {
                trace: k.0.to_string(),
                cluster: k.1.to_string(),
                load: f64::from_bits(k.2),
                setting: k.3.to_string(),
                seeds: mine.iter().filter(|r| r.error.is_none()).count(),
                failed: mine.iter().filter(|r| r.error.is_some()).count(),
                stats,
                ratios,
            }
        })
        .collect()
}

fn cell_text(metric: &str, e: Option<Estimate>) -> String {
    let kind = metric_info(metric).0;
    match e {
        None => "-".into(),
        Some(e) if e.n < 2 => show(kind, e.mean),
        Some(e) => show_pm(kind, e.mean, e.ci95),
    }
}

fn ratio_text(e: Option<Estimate>) -> String {
    match e {
        Some(e) if e.n >= 2 => format!("{:.2} ± {:.2}", e.mean, e.ci95),
        Some(e) => format!("{:.2}", e.mean),
        None => "-".into(),
    }
}

fn seeds_text(l: &Line) -> String {
    if l.failed > 0 {
        format!("{} ({} failed)", l.seeds, l.failed)
    } else {
        l.seeds.to_string()
    }
}

/// The terminal table: a row per configuration, a column per metric (mean ± 95 %
/// half-width) and, with a baseline, a ratio column per metric.
pub fn table(s: &Sweep, lines: &[Line], baseline: Option<&str>) -> String {
    let mut head = vec![
        "trace".to_string(),
        "cluster".into(),
        s.load_word().into(),
        "setting".into(),
        "seeds".into(),
    ];
    for m in &s.metrics {
        // The name every output gives the metric; the sweep file names it by key.
        head.push(metric_info(m).1.to_string());
        if let Some(b) = baseline {
            head.push(format!("x {b}"));
        }
    }
    let mut body: Vec<Vec<String>> = Vec::new();
    for l in lines {
        let mut r = vec![
            l.trace.clone(),
            l.cluster.clone(),
            l.load.to_string(),
            l.setting.clone(),
            seeds_text(l),
        ];
        for (m, name) in s.metrics.iter().enumerate() {
            r.push(cell_text(name, l.stats[m]));
            if baseline.is_some() {
                r.push(ratio_text(l.ratios[m]));
            }
        }
        body.push(r);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            body.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in std::iter::once(&head).chain(&body) {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < 4 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// One line per metric and setting: how it compares with the baseline at the highest
/// load, e.g. `srtf: mean JCT 25.34x lower than fifo at load 16 on philly / n32g8
/// (ratio 0.04 ± 0.00 over 5 seeds)`.
pub fn headlines(s: &Sweep, lines: &[Line], baseline: &str) -> Vec<String> {
    let mut out = Vec::new();
    let top = lines.iter().map(|l| l.load).fold(f64::MIN, f64::max);
    for (m, metric) in s.metrics.iter().enumerate() {
        let name = metric_info(metric).1;
        for l in lines
            .iter()
            .filter(|l| l.load == top && l.setting != baseline)
        {
            if let Some(r) = l.ratios[m] {
                let ci = if r.n >= 2 {
                    format!(" (ratio {:.2} ± {:.2} over {} seeds)", r.mean, r.ci95, r.n)
                } else {
                    String::new()
                };
                out.push(format!(
                    "{}: {name} {} {baseline} at {} {} on {} / {}{ci}",
                    l.setting,
                    compare_ratio(r.mean),
                    s.load_word(),
                    l.load,
                    l.trace,
                    l.cluster
                ));
            }
        }
    }
    out
}

/// The table as HTML: a row per configuration, per metric its mean ± 95 % half-width
/// and the ratio to the baseline.
fn html_table(s: &Sweep, lines: &[Line], baseline: Option<&str>) -> String {
    let mut o = format!(
        "<table class=\"cmp\">\n<thead><tr><th>trace</th><th>cluster</th><th>{}</th><th>setting</th><th>seeds</th>",
        s.load_word()
    );
    for m in &s.metrics {
        let _ = write!(o, "<th>{}</th>", esc(metric_info(m).1));
        if let Some(b) = baseline {
            let _ = write!(o, "<th>x {}</th>", esc(b));
        }
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for l in lines {
        let _ = write!(
            o,
            "<tr><th>{}</th><th>{}</th><td>{}</td><th>{}</th><td>{}</td>",
            esc(&l.trace),
            esc(&l.cluster),
            l.load,
            esc(&l.setting),
            esc(&seeds_text(l))
        );
        for (m, name) in s.metrics.iter().enumerate() {
            let _ = write!(o, "<td>{}</td>", esc(&cell_text(name, l.stats[m])));
            if baseline.is_some() {
                let _ = write!(
                    o,
                    "<td><span class=\"ratio\">{}</span></td>",
                    esc(&ratio_text(l.ratios[m]))
                );
            }
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody></table>\n");
    o
}

/// The chart of one metric against load for one trace and cluster: a line per setting
/// with its 95 % band. The y axis is logarithmic when the settings' means span more
/// than a factor of ten (a linear one squashes every line but the highest onto the
/// axis).
pub fn load_chart(
    s: &Sweep,
    lines: &[Line],
    trace: &str,
    cluster: &str,
    m: usize,
    format: Format,
) -> String {
    let (kind, name, _) = metric_info(&s.metrics[m]);
    // Training durations are drawn in hours, so the axis reads in hours or days; a
    // serving sweep's latencies in seconds.
    let hours = kind == Kind::Duration && s.llm.is_none();
    let scale = if hours { 1.0 / 3600.0 } else { 1.0 };
    let series = series(lines, trace, cluster, |l| {
        l.stats[m].map(|e| (e.mean * scale, e.ci95 * scale))
    });
    let title = format!(
        "{name} against {}, {trace} on {cluster} ({} seeds, 95 % band)",
        s.load_word(),
        s.seeds.len()
    );
    let y = match kind {
        Kind::Duration if hours => Unit::Hours,
        Kind::Duration => Unit::Seconds,
        Kind::Percent => Unit::Percent,
        Kind::Count | Kind::Ratio => Unit::Number,
    };
    draw(&series, &title, name, y, s.load_label(), format)
}

/// The chart of one metric against load relative to the baseline: each setting's
/// seed-paired ratio to it (the baseline's line is 1) with its 95 % band; `None` without
/// a baseline.
pub fn relative_chart(
    s: &Sweep,
    lines: &[Line],
    trace: &str,
    cluster: &str,
    m: usize,
    baseline: Option<&str>,
    format: Format,
) -> Option<String> {
    let b = baseline?;
    let (_, name, _) = metric_info(&s.metrics[m]);
    let series = series(lines, trace, cluster, |l| {
        l.ratios[m].map(|e| (e.mean, e.ci95))
    });
    let title = format!("{name} relative to {b}, {trace} on {cluster} (x {b}, 95 % band)");
    Some(draw(
        &series,
        &title,
        &format!("{name}, x {b}"),
        Unit::Number,
        s.load_label(),
        format,
    ))
}

/// Per setting, its points (load, value, half-width) for one trace and cluster.
fn series(
    lines: &[Line],
    trace: &str,
    cluster: &str,
    value: impl Fn(&Line) -> Option<(f64, f64)>,
) -> Vec<chart::Line> {
    let mut series: Vec<chart::Line> = Vec::new();
    for l in lines
        .iter()
        .filter(|l| l.trace == trace && l.cluster == cluster)
    {
        let Some((v, h)) = value(l) else { continue };
        let p = (l.load, v, h);
        match series.iter_mut().find(|x| x.0 == l.setting) {
            Some(x) => x.1.push(p),
            None => series.push((l.setting.clone(), vec![p])),
        }
    }
    for x in &mut series {
        x.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// Whether values spread over more than a factor of ten: drawn on a log axis.
fn spans_decades(series: &[chart::Line]) -> bool {
    let pos = || {
        series
            .iter()
            .flat_map(|x| x.1.iter().map(|p| p.1))
            .filter(|v| *v > 0.0)
    };
    let lo = pos().fold(f64::MAX, f64::min);
    let hi = pos().fold(f64::MIN, f64::max);
    lo < f64::MAX && hi / lo > 10.0
}

fn draw(
    series: &[chart::Line],
    title: &str,
    ylabel: &str,
    y: Unit,
    xlabel: &str,
    format: Format,
) -> String {
    let loads: Vec<f64> = series
        .iter()
        .flat_map(|x| x.1.iter().map(|p| p.0))
        .collect();
    // Loads that double (1, 2, 4, 8) read best on a log axis.
    let lo = loads.iter().copied().fold(f64::MAX, f64::min);
    let hi = loads.iter().copied().fold(f64::MIN, f64::max);
    let log_y = spans_decades(series);
    let title = if log_y {
        format!("{title}; log scale")
    } else {
        title.to_string()
    };
    chart::render(
        &Chart {
            title: &title,
            xlabel,
            ylabel,
            x: Unit::Number,
            log_x: lo > 0.0 && hi / lo >= 8.0,
            y,
            log_y,
            dots: true,
        },
        series,
        format,
    )
}

/// The sweep's per-VC figures ([`Sweep::per_vc`]): each VC's rows as rows of a sweep
/// whose metrics are the per-VC ones and whose trace label names the VC
/// (`philly VC a`), so that they aggregate and chart as the sweep's own do.
pub fn per_vc(s: &Sweep, vcs: &[VcResult], baseline: Option<&str>) -> (Sweep, Vec<Line>) {
    let vs = Sweep {
        metrics: s.per_vc.clone(),
        ..s.clone()
    };
    let rows: Vec<Row> = vcs
        .iter()
        .map(|v| Row {
            trace: format!("{} VC {}", v.row.trace, v.vc),
            ..v.row.clone()
        })
        .collect();
    let lines = aggregate(&vs, &rows, baseline);
    (vs, lines)
}

/// Each (trace, cluster) of `lines`, in the order they first appear.
pub fn groups(lines: &[Line]) -> Vec<(&str, &str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for l in lines {
        if !groups.contains(&(l.trace.as_str(), l.cluster.as_str())) {
            groups.push((&l.trace, &l.cluster));
        }
    }
    groups
}

/// The HTML report: the table, headlines, and per trace and cluster one chart per
/// metric of its mean against load, a line per setting with its 95 % band; then, when
/// given ([`per_vc`]), the same per VC. `made` is how the report was made (command,
/// apiary, commit, date, inputs), shown at its foot.
pub fn html(
    s: &Sweep,
    lines: &[Line],
    baseline: Option<&str>,
    vcs: Option<(&Sweep, &[Line])>,
    made: &[(String, String)],
) -> String {
    let mut o = page_head(&format!("apiary sweep: {}", s.name));
    if let Some(b) = baseline {
        o.push_str("<ul class=\"headlines\">\n");
        for h in headlines(s, lines, b) {
            let _ = writeln!(o, "<li>{}</li>", esc(&h));
        }
        o.push_str("</ul>\n");
    }
    for (trace, cluster) in groups(lines) {
        let _ = writeln!(o, "<h2>{} on {}</h2>", esc(trace), esc(cluster));
        for m in 0..s.metrics.len() {
            o.push_str(&load_chart(s, lines, trace, cluster, m, Format::Svg));
            if let Some(r) = relative_chart(s, lines, trace, cluster, m, baseline, Format::Svg) {
                o.push_str(&r);
            }
        }
    }
    if let Some((vs, vlines)) = vcs.filter(|v| !v.1.is_empty()) {
        o.push_str("<h2>Per VC</h2>\n");
        for (trace, cluster) in groups(vlines) {
            let _ = writeln!(o, "<h3>{} on {}</h3>", esc(trace), esc(cluster));
            for m in 0..vs.metrics.len() {
                o.push_str(&load_chart(vs, vlines, trace, cluster, m, Format::Svg));
            }
        }
    }
    o.push_str("<h2>All configurations</h2>\n");
    o.push_str(&html_table(s, lines, baseline));
    if !made.is_empty() {
        o.push_str("<h2>How it was made</h2>\n<table class=\"record\">\n");
        for (k, v) in made {
            let _ = writeln!(
                o,
                "<tr><th>{}</th><td><code>{}</code></td></tr>",
                esc(k),
                esc(v)
            );
        }
        o.push_str("</table>\n");
    }
    o.push_str("</body></html>\n");
    o
}

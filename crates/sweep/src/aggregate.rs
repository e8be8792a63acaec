//! From rows to what a paper's figure shows: per configuration (trace, cluster, load,
//! setting) each metric's mean over seeds with a 95 % interval, and its ratio against
//! the baseline setting at the same trace, cluster and load, paired by seed.

use crate::results::Row;
use crate::spec::Sweep;
use apiary_report::html::{Band, band_chart, esc, page_start, thousands};
use apiary_report::stats::{Estimate, paired_ratio};
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

/// `x` with thousands separators and a precision that suits its size.
pub fn human(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let a = x.abs();
    if a >= 1000.0 {
        thousands(x)
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

fn cell_text(e: Option<Estimate>) -> String {
    match e {
        None => "-".into(),
        Some(e) if e.n < 2 => human(e.mean),
        Some(e) => format!("{} ± {}", human(e.mean), human(e.ci95)),
    }
}

/// The terminal table: a row per configuration, a column per metric (mean ± 95 %
/// half-width) and, with a baseline, a ratio column per metric.
pub fn table(s: &Sweep, lines: &[Line], baseline: Option<&str>) -> String {
    let mut head = vec![
        "trace".to_string(),
        "cluster".into(),
        "load".into(),
        "setting".into(),
        "seeds".into(),
    ];
    for m in &s.metrics {
        head.push(m.clone());
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
            if l.failed > 0 {
                format!("{} ({} failed)", l.seeds, l.failed)
            } else {
                l.seeds.to_string()
            },
        ];
        for m in 0..s.metrics.len() {
            r.push(cell_text(l.stats[m]));
            if baseline.is_some() {
                r.push(match l.ratios[m] {
                    Some(e) if e.n >= 2 => format!("{:.2} ± {:.2}", e.mean, e.ci95),
                    Some(e) => format!("{:.2}", e.mean),
                    None => "-".into(),
                });
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
/// load, e.g. `srtf: jct_mean 0.46x fifo (± 0.03) at load 4`.
pub fn headlines(s: &Sweep, lines: &[Line], baseline: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (m, name) in s.metrics.iter().enumerate() {
        let top = lines.iter().map(|l| l.load).fold(f64::MIN, f64::max);
        for l in lines
            .iter()
            .filter(|l| l.load == top && l.setting != baseline)
        {
            if let Some(r) = l.ratios[m] {
                let ci = if r.n >= 2 {
                    format!(" (± {:.2})", r.ci95)
                } else {
                    String::new()
                };
                out.push(format!(
                    "{}: {name} {:.2}x {baseline}{ci} at load {} on {} / {}",
                    l.setting, r.mean, l.load, l.trace, l.cluster
                ));
            }
        }
    }
    out
}

/// The HTML report: the table, headlines, and per trace and cluster one chart per
/// metric of its mean against load, a line per setting with its 95 % band.
pub fn html(s: &Sweep, lines: &[Line], baseline: Option<&str>) -> String {
    let mut o = page_start(
        &format!("apiary sweep: {}", s.name),
        &table(s, lines, baseline),
    );
    if let Some(b) = baseline {
        o.push_str("<ul>\n");
        for h in headlines(s, lines, b) {
            let _ = writeln!(o, "<li>{}</li>", esc(&h));
        }
        o.push_str("</ul>\n");
    }
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for l in lines {
        if !groups.contains(&(l.trace.as_str(), l.cluster.as_str())) {
            groups.push((&l.trace, &l.cluster));
        }
    }
    for (trace, cluster) in groups {
        let _ = writeln!(o, "<h2>{} on {}</h2>", esc(trace), esc(cluster));
        for (m, name) in s.metrics.iter().enumerate() {
            let mut series: Vec<Band> = Vec::new();
            for l in lines
                .iter()
                .filter(|l| l.trace == trace && l.cluster == cluster)
            {
                let Some(e) = l.stats[m] else { continue };
                match series.iter_mut().find(|x| x.0 == l.setting) {
                    Some(x) => x.1.push((l.load, e.mean, e.ci95)),
                    None => series.push((l.setting.clone(), vec![(l.load, e.mean, e.ci95)])),
                }
            }
            for x in &mut series {
                x.1.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            o.push_str(&band_chart(
                &format!("{name} against load ({} seeds, 95 % band)", s.seeds.len()),
                "load (x the trace's arrival rate)",
                name,
                &series,
            ));
        }
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_a_paper_table() {
        assert_eq!(human(2_669_900.0), "2,669,900");
        assert_eq!(human(1000.0), "1,000");
        assert_eq!(human(-12_345.6), "-12,346");
        assert_eq!(human(12.345), "12.3");
        assert_eq!(human(0.8512), "0.851");
    }
}

//! A self-contained HTML report: a table and inline SVG charts (JCT CDF,
//! queueing-delay CDF, utilisation over time), no scripts, no external files.
//! Charts are drawn by hand so the bytes depend only on the numbers.

use crate::{Summary, table};
use apiary_model::RunOutcome;
use std::fmt::Write as _;

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 640.0;
const H: f64 = 300.0;
const PAD: f64 = 50.0;

/// `s` escaped for HTML text and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An inline SVG line chart of `series` (name, points), drawn by hand so its bytes
/// depend only on the numbers; `log_x` plots `log10(max(x, 1))`.
pub fn chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    log_x: bool,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let tx = |x: f64| if log_x { x.max(1.0).log10() } else { x };
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for x in xs {
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
    }
    if x0 >= x1 {
        x1 = x0 + 1.0;
    }
    let y1 = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let px = |x: f64| PAD + (tx(x) - x0) / (x1 - x0) * (W - 2.0 * PAD);
    let py = |y: f64| H - PAD + -(y / y1) * (H - 2.0 * PAD);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="16" text-anchor="middle" font-size="13">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let _ = write!(
        o,
        r#"<line x1="{PAD}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{}" stroke="black"/>"#,
        H - PAD,
        W - PAD,
        H - PAD,
        H - PAD
    );
    for k in 0..=4 {
        let fx = x0 + (x1 - x0) * k as f64 / 4.0;
        let label = if log_x {
            format!("{:.0}", 10f64.powf(fx))
        } else {
            format!("{fx:.0}")
        };
        let xp = PAD + (W - 2.0 * PAD) * k as f64 / 4.0;
        let _ = write!(
            o,
            r#"<text x="{xp:.1}" y="{}" text-anchor="middle">{label}</text>"#,
            H - PAD + 15.0
        );
        let yv = y1 * k as f64 / 4.0;
        let _ = write!(
            o,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{yv:.2}</text>"#,
            PAD - 4.0,
            py(yv) + 4.0
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        W / 2.0,
        H - 12.0,
        esc(xlabel)
    );
    let _ = write!(
        o,
        r#"<text x="12" y="{}" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"#,
        H / 2.0,
        H / 2.0,
        esc(ylabel)
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" fill="{c}">{}</text>"#,
            W - PAD - 120.0,
            PAD + 14.0 * i as f64,
            esc(name)
        );
    }
    o.push_str("</svg></figure>\n");
    o
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

/// The opening of a report page: head, title and the summary `table` as text.
pub fn page_start(title: &str, table: &str) -> String {
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em}}figure{{margin:1em 0}}</style></head><body>\n<h1>{t}</h1>\n<pre>{}</pre>\n",
        esc(table),
        t = esc(title)
    )
}

/// Renders the report for several runs of one trace.
pub fn html_report(title: &str, runs: &[(Summary, &RunOutcome)]) -> String {
    let sums: Vec<Summary> = runs.iter().map(|r| r.0.clone()).collect();
    let jct: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|(s, o)| {
            (
                s.policy.clone(),
                cdf(o
                    .jobs
                    .iter()
                    .filter_map(|j| j.finish.map(|f| (f - j.submit) as f64 / 1000.0))
                    .collect()),
            )
        })
        .collect();
    let queue: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|(s, o)| {
            (
                s.policy.clone(),
                cdf(o
                    .jobs
                    .iter()
                    .filter_map(|j| j.first_start.map(|f| (f - j.submit) as f64 / 1000.0))
                    .collect()),
            )
        })
        .collect();
    let over_time = |u: &apiary_model::UtilSeries| -> Vec<(f64, f64)> {
        u.points()
            .into_iter()
            .map(|(t, v)| ((t - u.start) as f64 / 3.6e6, v))
            .collect()
    };
    let util: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|(s, o)| (s.policy.clone(), over_time(&o.util)))
        .collect();
    // ElasticFlow's cluster efficiency, for runs whose jobs carry throughput tables.
    let ce: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .filter_map(|(s, o)| Some((s.policy.clone(), over_time(o.cluster_efficiency.as_ref()?))))
        .collect();
    let mut h = page_start(title, &table(&sums));
    h.push_str(&chart(
        "JCT CDF",
        "JCT (s, log scale)",
        "fraction of jobs",
        true,
        &jct,
    ));
    h.push_str(&chart(
        "Queueing delay CDF",
        "queueing delay + 1 (s, log scale)",
        "fraction of jobs",
        true,
        &queue
            .into_iter()
            .map(|(n, p)| (n, p.into_iter().map(|(x, y)| (x + 1.0, y)).collect()))
            .collect::<Vec<_>>(),
    ));
    h.push_str(&chart(
        "GPU utilisation over time",
        "hours since first submission",
        "utilisation",
        false,
        &util,
    ));
    if !ce.is_empty() {
        h.push_str(&chart(
            "Cluster efficiency over time (ElasticFlow: speed-up over one GPU per cluster GPU)",
            "hours since first submission",
            "cluster efficiency",
            false,
            &ce,
        ));
    }
    h.push_str("</body></html>\n");
    h
}

/// `x` rounded to a whole number with thousands separators: `2,669,900`.
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if x <= -0.5 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A named line of a [`band_chart`]: points of x, mean and the half-width of its band.
pub type Band = (String, Vec<(f64, f64, f64)>);

/// An inline SVG chart of lines with 95 % bands: `series` are (name, points of x, mean,
/// half-width). It scales to the page's width; the legend sits right of the plot, off
/// the data; axis labels carry thousands separators.
pub fn band_chart(title: &str, xlabel: &str, ylabel: &str, series: &[Band]) -> String {
    const BW: f64 = 960.0;
    const BH: f64 = 380.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 230.0;
    const TOP: f64 = 30.0;
    const BOTTOM: f64 = 50.0;
    let pts = || series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    let mut y1 = 0.0f64;
    for &(x, m, h) in pts() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(m + h);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let pw = BW - LEFT - RIGHT;
    let ph = BH - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| TOP + ph - (y / y1).clamp(0.0, 1.0) * ph;
    let label = |v: f64| {
        if v.abs() >= 1000.0 {
            thousands(v)
        } else if v.abs() >= 10.0 || v == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    };
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {BW} {BH}" font-family="sans-serif" font-size="13">"#
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + pw / 2.0,
        esc(title)
    );
    for k in 0..=5 {
        let yv = y1 * k as f64 / 5.0;
        let y = py(yv);
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            label(yv)
        );
        let xv = x0 + (x1 - x0) * k as f64 / 5.0;
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(xv),
            TOP + ph + 18.0,
            label(xv)
        );
    }
    let _ = write!(
        o,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        BH - 10.0,
        esc(xlabel)
    );
    let _ = write!(
        o,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(ylabel)
    );
    for (i, (name, p)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        if p.iter().any(|q| q.2 > 0.0) {
            let upper = p
                .iter()
                .map(|&(x, m, h)| format!("{:.1},{:.1}", px(x), py(m + h)));
            let lower = p
                .iter()
                .rev()
                .map(|&(x, m, h)| format!("{:.1},{:.1}", px(x), py(m - h)));
            let ring: Vec<String> = upper.chain(lower).collect();
            let _ = write!(
                o,
                r#"<polygon fill="{c}" fill-opacity="0.15" stroke="none" points="{}"/>"#,
                ring.join(" ")
            );
        }
        let line: Vec<String> = p
            .iter()
            .map(|&(x, m, _)| format!("{:.1},{:.1}", px(x), py(m)))
            .collect();
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for &(x, m, _) in p {
            let _ = write!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(x),
                py(m)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let _ = write!(
            o,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + pw + 14.0,
            LEFT + pw + 34.0,
            LEFT + pw + 40.0,
            ly + 4.0,
            esc(name)
        );
    }
    o.push_str("</svg></figure>\n");
    o
}

//! Charts as a paper figure draws them: inline SVG at the page's full width, the legend
//! right of the plot (never over the data), gridlines at round values, and axes labelled
//! in the units a reader thinks in (`1 h`, `3 d`, `40 %`, `12,000`). Drawn by hand so
//! the bytes depend only on the numbers.

use crate::present;
use crate::text::esc;
use std::fmt::Write as _;

/// Line colours, distinct from one another (tab10).
pub const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];

/// What an axis's values are, and so how its ticks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Plain numbers, with thousands separators.
    Number,
    /// Seconds, labelled `30 s`, `10 min`, `4 h`, `2 d`.
    Seconds,
    /// Hours, labelled in hours, or in days past three days.
    Hours,
    /// Fractions, labelled as percentages.
    Percent,
}

/// A line of a chart: its name and points of x, y and the half-width of a band around
/// y (0: no band).
pub type Line = (String, Vec<(f64, f64, f64)>);

/// A chart.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// The x axis's label.
    pub xlabel: &'a str,
    /// The y axis's label.
    pub ylabel: &'a str,
    /// The x values' unit.
    pub x: Unit,
    /// A log-scale x axis (values below the smallest positive one are drawn at it).
    pub log_x: bool,
    /// The y values' unit.
    pub y: Unit,
    /// A log-scale y axis, for values that span more than a factor of ten (values at or
    /// below 0 are drawn at the smallest positive one).
    pub log_y: bool,
    /// Mark each point with a dot, and tick the x axis at each point's x when there are
    /// few (a sweep's loads).
    pub dots: bool,
}

const BW: f64 = 960.0;
const BH: f64 = 380.0;
const LEFT: f64 = 86.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 32.0;
const BOTTOM: f64 = 52.0;

/// A tick label for `v` in `unit`; `days` labels hours as days.
fn label(v: f64, unit: Unit, days: bool) -> String {
    match unit {
        Unit::Number => present::short(v, 2),
        Unit::Seconds => present::duration_tick(v),
        Unit::Hours if days => format!("{} d", present::short(v / 24.0, 1)),
        Unit::Hours => format!("{} h", present::short(v, 1)),
        Unit::Percent => format!("{} %", present::short(v * 100.0, 1)),
    }
}

/// Round ticks covering `[lo, hi]`: steps of 1, 2 or 5 times a power of ten of
/// `scale` (so days tick at whole days), at most about six of them.
fn nice_ticks(lo: f64, hi: f64, scale: f64) -> Vec<f64> {
    let (lo, hi) = (lo / scale, hi / scale);
    let span = (hi - lo).max(1e-12);
    let raw = span / 6.0;
    let e = raw.log10().floor() as i32;
    let pow = 10f64.powi(e.abs());
    // step = m * 10^e; each tick is n*m scaled by 10^e, divided rather than multiplied
    // by a fraction so 3 x 0.2 reads 0.6, not 0.6000000000000001.
    let at = |n: f64, m: f64| if e < 0 { n * m / pow } else { n * m * pow };
    let m = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| at(1.0, *m) >= raw)
        .unwrap_or(10.0);
    let step = at(1.0, m);
    let first = (lo / step).ceil();
    let mut out = Vec::new();
    let mut n = first;
    while at(n, m) <= hi + step * 1e-9 && out.len() < 12 {
        out.push(at(n, m) * scale);
        n += 1.0;
    }
    out
}

/// Ticks of a log axis over `[lo, hi]` (both positive): round durations for seconds,
/// powers of ten otherwise; where those give fewer than three, a denser set (1-2-5, or
/// durations such as 3 h and 12 h).
fn log_ticks(lo: f64, hi: f64, unit: Unit) -> Vec<f64> {
    let sparse = log_ticks_sparse(lo, hi, unit);
    if sparse.len() >= 3 {
        return sparse;
    }
    let dense: Vec<f64> = if unit == Unit::Seconds {
        vec![
            1.0,
            10.0,
            30.0,
            60.0,
            300.0,
            600.0,
            1800.0,
            3600.0,
            10_800.0,
            43_200.0,
            86_400.0,
            259_200.0,
            864_000.0,
            2_592_000.0,
            8_640_000.0,
        ]
    } else {
        (-6..=12)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .collect()
    };
    let t: Vec<f64> = dense
        .into_iter()
        .filter(|t| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
        .collect();
    if t.len() > sparse.len() { t } else { sparse }
}

fn log_ticks_sparse(lo: f64, hi: f64, unit: Unit) -> Vec<f64> {
    let candidates: Vec<f64> = if unit == Unit::Seconds {
        vec![
            0.001,
            0.01,
            0.1,
            1.0,
            10.0,
            60.0,
            600.0,
            3600.0,
            86_400.0,
            864_000.0,
            8_640_000.0,
            86_400_000.0,
        ]
    } else {
        (-6..=12).map(|e| 10f64.powi(e)).collect()
    };
    candidates
        .into_iter()
        .filter(|t| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
        .collect()
}

/// A chart with its lines, owned: what a report draws inline and also writes as files
/// (SVG, its numbers as CSV, and for papers pgfplots).
#[derive(Clone, Debug)]
pub struct Figure {
    /// A file name for it, without extension.
    pub name: String,
    /// Title above the plot.
    pub title: String,
    /// The x axis's label.
    pub xlabel: String,
    /// The y axis's label.
    pub ylabel: String,
    /// The x values' unit.
    pub x: Unit,
    /// A log-scale x axis.
    pub log_x: bool,
    /// The y values' unit.
    pub y: Unit,
    /// A log-scale y axis.
    pub log_y: bool,
    /// Dots at each point.
    pub dots: bool,
    /// The CSV's names of the x and y columns (`seconds`, `fraction`).
    pub columns: (&'static str, &'static str),
    /// Its lines.
    pub lines: Vec<Line>,
}

impl Figure {
    fn chart(&self) -> Chart<'_> {
        Chart {
            title: &self.title,
            xlabel: &self.xlabel,
            ylabel: &self.ylabel,
            x: self.x,
            log_x: self.log_x,
            y: self.y,
            log_y: self.log_y,
            dots: self.dots,
        }
    }

    /// It, as `format` writes it.
    pub fn render(&self, format: Format) -> String {
        render(&self.chart(), &self.lines, format)
    }

    /// Its numbers: a row per point, named by its line, with the half-width of the
    /// point's band where the figure has bands.
    pub fn csv(&self) -> String {
        let bands = self.lines.iter().any(|l| l.1.iter().any(|p| p.2 > 0.0));
        let (x, y) = self.columns;
        let mut o = format!("line,{x},{y}");
        o.push_str(if bands { ",ci95_half_width\n" } else { "\n" });
        for (name, points) in &self.lines {
            let name = if name.contains([',', '"']) {
                format!("\"{}\"", name.replace('"', "\"\""))
            } else {
                name.clone()
            };
            for &(px, py, h) in points {
                let _ = write!(o, "{name},{px},{py}");
                if bands {
                    let _ = write!(o, ",{h}");
                }
                o.push('\n');
            }
        }
        o
    }
}

/// What a chart is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Inline SVG in a `<figure>`, for pages and screens.
    Svg,
    /// A pgfplots `tikzpicture`, for papers ([`crate::pgf`]).
    Pgf,
}

/// `lines` on `c`, as `format` writes them.
pub fn render(c: &Chart, lines: &[Line], format: Format) -> String {
    match format {
        Format::Svg => draw(c, lines),
        Format::Pgf => crate::pgf::pgf(c, lines),
    }
}

/// Draws `lines` on `c`.
pub fn draw(c: &Chart, lines: &[Line]) -> String {
    let pts = || lines.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    let mut y1 = 0.0f64;
    let min_pos = pts()
        .map(|p| p.0)
        .filter(|x| *x > 0.0)
        .fold(f64::MAX, f64::min);
    // Values of 0 on a log axis (waits that never happened) are drawn at 1 (one second,
    // one millisecond), or at the smallest positive value when that is below it.
    let floor = if min_pos == f64::MAX {
        1.0
    } else if pts().any(|p| p.0 <= 0.0) {
        min_pos.min(1.0)
    } else {
        min_pos
    };
    let tx = |x: f64| if c.log_x { x.max(floor).log10() } else { x };
    for &(x, m, h) in pts() {
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
        y1 = y1.max(m + h);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    // A log y axis runs from the smallest positive value to the largest, a little
    // padded on both sides.
    let ymin = pts()
        .map(|p| p.1)
        .filter(|y| *y > 0.0)
        .fold(f64::MAX, f64::min);
    let log_y = c.log_y && ymin < f64::MAX && y1 > ymin;
    let (ly0, ly1) = if log_y {
        let (a, b) = (ymin.log10(), (y1 / 1.05).log10());
        let pad = (b - a).max(1e-9) * 0.05;
        (a - pad, b + pad)
    } else {
        (0.0, 1.0)
    };
    let pw = BW - LEFT - RIGHT;
    let ph = BH - TOP - BOTTOM;
    let px = |x: f64| LEFT + (tx(x) - x0) / (x1 - x0) * pw;
    let pxt = |t: f64| LEFT + (t - x0) / (x1 - x0) * pw;
    let py = |y: f64| {
        let f = if log_y {
            (y.max(ymin).log10() - ly0) / (ly1 - ly0)
        } else {
            y / y1
        };
        TOP + ph - f.clamp(0.0, 1.0) * ph
    };
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {BW} {BH}" font-family="sans-serif" font-size="13"><rect width="{BW}" height="{BH}" fill="white"/>"#
    );
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + pw / 2.0,
        esc(c.title)
    );
    // y gridlines and labels.
    let y_days = c.y == Unit::Hours && y1 > 72.0;
    let yscale = if y_days { 24.0 } else { 1.0 };
    let yticks: Vec<(f64, String)> = if log_y {
        // Hours tick at round durations (a minute, an hour, a day), read as durations.
        let (lo, hi) = (10f64.powf(ly0), 10f64.powf(ly1));
        match c.y {
            Unit::Hours => log_ticks(lo * 3600.0, hi * 3600.0, Unit::Seconds)
                .into_iter()
                .map(|v| (v / 3600.0, present::duration_tick(v)))
                .collect(),
            u => log_ticks(lo, hi, u)
                .into_iter()
                .map(|v| (v, label(v, u, false)))
                .collect(),
        }
    } else {
        nice_ticks(0.0, y1, yscale)
            .into_iter()
            .map(|v| (v, label(v, c.y, y_days)))
            .collect()
    };
    for (yv, text) in yticks {
        let y = py(yv);
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            text
        );
    }
    // x ticks.
    let x_days = c.x == Unit::Hours && !c.log_x && x1 > 72.0;
    let mut at_points: Vec<f64> = pts().map(|p| p.0).collect();
    at_points.sort_by(f64::total_cmp);
    at_points.dedup();
    let xticks: Vec<(f64, f64)> = if c.dots && at_points.len() <= 12 {
        // Few points (a sweep's loads): a tick at each.
        at_points.iter().map(|&v| (tx(v), v)).collect()
    } else if c.log_x {
        log_ticks(10f64.powf(x0), 10f64.powf(x1), c.x)
            .into_iter()
            .map(|v| (v.log10(), v))
            .collect()
    } else {
        nice_ticks(x0, x1, if x_days { 24.0 } else { 1.0 })
            .into_iter()
            .map(|v| (v, v))
            .collect()
    };
    for (t, v) in xticks {
        let x = pxt(t);
        let _ = write!(
            o,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 18.0,
            label(v, c.x, x_days)
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
        esc(c.xlabel)
    );
    let _ = write!(
        o,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(c.ylabel)
    );
    for (i, (name, p)) in lines.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
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
                r#"<polygon fill="{col}" fill-opacity="0.15" stroke="none" points="{}"/>"#,
                ring.join(" ")
            );
        }
        let line: Vec<String> = p
            .iter()
            .map(|&(x, m, _)| format!("{:.1},{:.1}", px(x), py(m)))
            .collect();
        let _ = write!(
            o,
            r#"<polyline fill="none" stroke="{col}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        if c.dots {
            for &(x, m, _) in p {
                let _ = write!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{col}"/>"#,
                    px(x),
                    py(m)
                );
            }
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let _ = write!(
            o,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{col}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
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

/// Points without bands, as [`Line`]s.
pub fn lines(series: &[(String, Vec<(f64, f64)>)]) -> Vec<Line> {
    series
        .iter()
        .map(|(n, p)| (n.clone(), p.iter().map(|&(x, y)| (x, y, 0.0)).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_labels_human() {
        assert_eq!(nice_ticks(0.0, 1.05, 1.0), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            nice_ticks(0.0, 1000.0, 24.0),
            [0.0, 240.0, 480.0, 720.0, 960.0]
        );
        assert_eq!(nice_ticks(0.0, 1600.0, 1.0), [0.0, 500.0, 1000.0, 1500.0]);
        assert_eq!(label(3_517_712.0, Unit::Number, false), "3,517,712");
        assert_eq!(label(0.25, Unit::Number, false), "0.25");
        assert_eq!(label(480.0, Unit::Hours, true), "20 d");
        assert_eq!(label(0.4, Unit::Percent, false), "40 %");
        assert_eq!(label(3600.0, Unit::Seconds, false), "1 h");
        assert_eq!(
            log_ticks(2.0, 100_000.0, Unit::Seconds),
            [10.0, 60.0, 600.0, 3600.0, 86_400.0]
        );
    }

    #[test]
    fn the_legend_sits_right_of_the_plot() {
        let svg = draw(
            &Chart {
                title: "t",
                xlabel: "x",
                ylabel: "y",
                x: Unit::Hours,
                log_x: false,
                y: Unit::Percent,
                log_y: false,
                dots: false,
            },
            &lines(&[("fifo".into(), vec![(0.0, 0.1), (200.0, 0.5)])]),
        );
        // The plot ends at LEFT + pw = 740; the legend's text starts beyond it.
        assert!(
            svg.contains(r#"<text x="780.0" y="46.0">fifo</text>"#),
            "{svg}"
        );
        assert!(svg.contains(">8 d</text>"), "{svg}");
    }
}

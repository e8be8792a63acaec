//! Charts as PGF/TikZ (pgfplots) for papers: the same [`Chart`] and lines that
//! [`crate::chart::draw`] renders as SVG, written as a `tikzpicture` that LaTeX typesets
//! in the document's own fonts at the column's width, with its numbers inline. A paper
//! includes it with `\usepackage{pgfplots}` and `\input{chart.tex}` inside a figure;
//! the title becomes a comment, as the caption carries it.

use crate::chart::{COLORS, Chart, Line, Unit};
use std::fmt::Write as _;

/// `s` with LaTeX's special characters escaped.
fn tex(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str(r"\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                o.push('\\');
                o.push(c);
            }
            '~' => o.push_str(r"\textasciitilde{}"),
            '^' => o.push_str(r"\textasciicircum{}"),
            c => o.push(c),
        }
    }
    o
}

/// `v` to six significant figures, trailing zeros dropped: what a figure can show.
fn num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let d = (5 - v.abs().log10().floor() as i32).clamp(0, 15) as usize;
    let s = format!("{v:.d$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// How values of `unit` are written and what the label adds: a factor and a suffix.
fn scale(unit: Unit, largest: f64) -> (f64, &'static str) {
    match unit {
        Unit::Number => (1.0, ""),
        Unit::Seconds => (1.0, " (s)"),
        // As the SVG does: past three days, hours read as days.
        Unit::Hours if largest > 72.0 => (1.0 / 24.0, " (d)"),
        Unit::Hours => (1.0, " (h)"),
        Unit::Percent => (100.0, " (\\%)"),
    }
}

/// `lines` on `c` as a pgfplots `tikzpicture`.
pub fn pgf(c: &Chart, lines: &[Line]) -> String {
    let finite = |p: &&(f64, f64, f64)| p.0.is_finite() && p.1.is_finite() && p.2.is_finite();
    let pts = || lines.iter().flat_map(|l| l.1.iter()).filter(finite);
    let (fx, xs) = scale(c.x, pts().map(|p| p.0).fold(0.0, f64::max));
    let (fy, ys) = scale(c.y, pts().map(|p| p.1 + p.2).fold(0.0, f64::max));
    let mut o = String::new();
    let _ = writeln!(o, "% {}", c.title.replace('\n', " "));
    o.push_str(
        "% apiary: \\usepackage{pgfplots} (compat 1.16 or later), then \\input this file.\n",
    );
    o.push_str("\\begin{tikzpicture}\n\\begin{axis}[\n");
    o.push_str("  width=\\columnwidth, height=0.62\\columnwidth, font=\\footnotesize,\n");
    let _ = writeln!(o, "  xlabel={{{}{xs}}},", tex(c.xlabel));
    let _ = writeln!(o, "  ylabel={{{}{ys}}},", tex(c.ylabel));
    if c.log_x {
        o.push_str("  xmode=log,\n");
    }
    if c.log_y {
        o.push_str("  ymode=log,\n");
    } else {
        o.push_str("  ymin=0,\n");
    }
    // A sweep's few loads tick where they are, as plain numbers.
    let mut xt: Vec<f64> = pts().map(|p| p.0 * fx).collect();
    xt.sort_by(f64::total_cmp);
    xt.dedup();
    if c.dots && xt.len() <= 10 && !xt.is_empty() {
        let t: Vec<String> = xt.iter().map(|&x| num(x)).collect();
        let _ = writeln!(
            o,
            "  xtick={{{}}}, xticklabels={{{}}},",
            t.join(","),
            t.join(",")
        );
        if c.log_x {
            o.push_str("  xminorticks=false,\n");
        }
    }
    o.push_str("  grid=major, major grid style={black!12}, unbounded coords=discard,\n");
    o.push_str(
        "  legend style={font=\\scriptsize, draw=none, at={(0.5,1.02)}, anchor=south, legend columns=3},\n",
    );
    o.push_str("]\n");
    for (i, (name, points)) in lines.iter().enumerate() {
        let rgb = COLORS[i % COLORS.len()].trim_start_matches('#');
        let ch = |k: usize| u8::from_str_radix(&rgb[k..k + 2], 16).unwrap_or(0);
        let color = format!("{{rgb,255:red,{};green,{};blue,{}}}", ch(0), ch(2), ch(4));
        let bands = points.iter().any(|p| p.2 > 0.0);
        let mut style = format!("color={color}, thick");
        style.push_str(if c.dots {
            ", mark=*, mark size=1.2pt"
        } else {
            ", no markers"
        });
        if bands {
            style.push_str(", error bars/.cd, y dir=both, y explicit");
        }
        let _ = write!(o, "\\addplot[{style}] coordinates {{");
        for &(x, y, h) in points.iter().filter(|p| finite(p)) {
            // Log axes have no place for 0; those points are left out.
            if (c.log_x && x <= 0.0) || (c.log_y && y <= 0.0) {
                continue;
            }
            let _ = write!(o, "\n  ({},{})", num(x * fx), num(y * fy));
            if bands {
                let _ = write!(o, " +- (0,{})", num(h * fy));
            }
        }
        o.push_str("\n};\n");
        let _ = writeln!(o, "\\addlegendentry{{{}}}", tex(name));
    }
    o.push_str("\\end{axis}\n\\end{tikzpicture}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_chart_in_pgfplots() {
        let c = Chart {
            title: "mean JCT against load",
            xlabel: "load (x the trace's arrival rate)",
            ylabel: "mean JCT",
            x: Unit::Number,
            log_x: true,
            y: Unit::Hours,
            log_y: true,
            dots: true,
        };
        let lines: Vec<Line> = vec![
            ("fifo".into(), vec![(1.0, 100.0, 5.0), (2.0, 200.0, 10.0)]),
            (
                "tiresias:thresholds=1000;5000".into(),
                vec![(1.0, 2.0, 0.5), (2.0, 0.0, 0.0)],
            ),
        ];
        let t = pgf(&c, &lines);
        assert!(t.starts_with("% mean JCT against load\n"), "{t}");
        assert!(t.contains("ylabel={mean JCT (d)}"), "{t}");
        assert!(t.contains("xmode=log,\n  ymode=log,"), "{t}");
        assert!(t.contains("xtick={1,2}, xticklabels={1,2}"), "{t}");
        // Hours read as days past three days: 100 h is 4.1666 d, its band 5 h.
        assert!(t.contains("(1,4.16667) +- (0,0.208333)"), "{t}");
        // 0 has no place on a log axis.
        assert!(!t.contains("(2,0)"), "{t}");
        assert!(
            t.contains("color={rgb,255:red,31;green,119;blue,180}"),
            "{t}"
        );
        assert!(
            t.contains("\\addlegendentry{tiresias:thresholds=1000;5000}"),
            "{t}"
        );
        assert_eq!(t.matches("\\addplot").count(), 2);
        assert!(t.ends_with("\\end{axis}\n\\end{tikzpicture}\n"));
    }

    #[test]
    fn numbers_keep_six_figures() {
        assert_eq!(num(4.166666666666666), "4.16667");
        assert_eq!(num(0.000123456789), "0.000123457");
        assert_eq!(num(1234567.8), "1234568");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(-0.5), "-0.5");
    }

    #[test]
    fn latex_specials_are_escaped() {
        assert_eq!(tex("a_b 50% #1 {x} & $"), r"a\_b 50\% \#1 \{x\} \& \$");
        assert_eq!(
            tex(r"a\b~^"),
            r"a\textbackslash{}b\textasciitilde{}\textasciicircum{}"
        );
    }
}

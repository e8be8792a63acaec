//! Chart files beside a report: each chart as SVG and its numbers as CSV, and with
//! `--figures pgf` as a pgfplots figure for papers.

use anyhow::{Context, Result};
use apiary_report::chart::{Figure, Format};
use clap::ValueEnum;
use std::path::Path;

/// Chart files for papers, beside each SVG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Figures {
    /// pgfplots (`.tex`): typeset by LaTeX in the paper's fonts at the column's width.
    Pgf,
}

/// Writes one chart as `dir/STEM.svg` (from its `<figure>` HTML), `STEM.csv` and, when
/// given, `STEM.tex`.
pub fn write(
    dir: &Path,
    stem: &str,
    figure_html: &str,
    csv: String,
    tex: Option<String>,
) -> Result<()> {
    let stem = stem.replace(['/', '\\', ' '], "_");
    let svg = figure_html
        .trim_start_matches("<figure>")
        .trim_end()
        .trim_end_matches("</figure>");
    let files = [
        ("svg", Some(format!("{svg}\n"))),
        ("csv", Some(csv)),
        ("tex", tex),
    ];
    for (ext, body) in files {
        let Some(body) = body else { continue };
        let f = dir.join(format!("{stem}.{ext}"));
        std::fs::write(&f, body).with_context(|| format!("writing {}", f.display()))?;
    }
    Ok(())
}

/// Writes `figures` into `dir`, emptied first of the chart files an earlier report
/// left there.
pub fn write_all<'a>(
    dir: &Path,
    figures: impl Iterator<Item = &'a Figure>,
    pgf: Option<Figures>,
) -> Result<()> {
    if dir.is_dir() {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e
                .with_context(|| format!("reading {}", dir.display()))?
                .path();
            let ours = p
                .extension()
                .is_some_and(|x| x == "svg" || x == "csv" || x == "tex");
            if ours && p.is_file() {
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for f in figures {
        let tex = (pgf == Some(Figures::Pgf)).then(|| f.render(Format::Pgf));
        write(dir, &f.name, &f.render(Format::Svg), f.csv(), tex)?;
    }
    Ok(())
}

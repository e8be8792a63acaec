//! Result files: one CSV file per cell under `DIR/cells/` (written whole and renamed
//! into place, so a killed run leaves no half file), and `results.csv`, their rows in
//! cell order. A cell with a file whose `error` column is empty is done and is skipped
//! when the sweep runs again; one that failed runs again.

use crate::cell::{CellError, Metric};
use crate::plan::Cell;
use crate::spec::{Sweep, SweepError};
use apiary_report::Summary;
use std::path::{Path, PathBuf};

/// One row of results: a cell and what it measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The cell's id.
    pub cell: usize,
    /// Trace label.
    pub trace: String,
    /// Cluster.
    pub cluster: String,
    /// Load multiplier.
    pub load: f64,
    /// Policy setting label.
    pub setting: String,
    /// Seed.
    pub seed: u64,
    /// The sweep's metrics, in its order (`None`: the run has no value for it).
    pub values: Vec<Option<f64>>,
    /// Why the cell failed, if it did.
    pub error: Option<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn header(s: &Sweep) -> Vec<String> {
    let mut h: Vec<String> = ["cell", "trace", "cluster", "load", "setting", "seed"]
        .map(String::from)
        .to_vec();
    h.extend(s.metrics.iter().cloned());
    h.push("error".into());
    h
}

impl Row {
    /// The row of `cell` with its outcome.
    pub fn of<M: Metric>(s: &Sweep, cell: &Cell, outcome: Result<&M, &CellError>) -> Row {
        let (values, error) = match outcome {
            Ok(sum) => (s.metrics.iter().map(|m| sum.metric(m)).collect(), None),
            Err(e) => (vec![None; s.metrics.len()], Some(e.to_string())),
        };
        Row {
            cell: cell.id,
            trace: s.traces[cell.trace].name.clone(),
            cluster: s.clusters[cell.cluster].clone(),
            load: cell.load,
            setting: s.settings[cell.setting].label.clone(),
            seed: cell.seed,
            values,
            error,
        }
    }

    fn record(&self) -> Vec<String> {
        let mut r = vec![
            self.cell.to_string(),
            self.trace.clone(),
            self.cluster.clone(),
            self.load.to_string(),
            self.setting.clone(),
            self.seed.to_string(),
        ];
        r.extend(
            self.values
                .iter()
                .map(|v| v.map_or(String::new(), |x| x.to_string())),
        );
        r.push(self.error.clone().unwrap_or_default());
        r
    }
}

/// The file holding `cell`'s row.
pub fn cell_path(dir: &Path, cell: usize) -> PathBuf {
    dir.join("cells").join(format!("{cell:06}.csv"))
}

fn to_csv(s: &Sweep, rows: &[&Row]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing to memory cannot fail.
    let _ = w.write_record(header(s));
    for r in rows {
        let _ = w.write_record(r.record());
    }
    w.into_inner().unwrap_or_default()
}

/// Writes `bytes` to `path` whole: into a temporary file renamed into place, so a
/// killed process leaves the old file or the new one, never half of one.
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), SweepError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Writes `row` as its cell's file.
pub fn write_cell(dir: &Path, s: &Sweep, row: &Row) -> Result<(), SweepError> {
    let cells = dir.join("cells");
    std::fs::create_dir_all(&cells).map_err(io(&cells))?;
    write_whole(&cell_path(dir, row.cell), &to_csv(s, &[row]))
}

/// Opens a results file whose header must be `want`.
fn open_checked(path: &Path, want: &[String]) -> Result<csv::Reader<std::fs::File>, SweepError> {
    let bad = |message: String| SweepError::Results {
        path: path.to_path_buf(),
        line: 1,
        message,
    };
    let mut r = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
    let got: Vec<String> = r
        .headers()
        .map_err(|e| bad(e.to_string()))?
        .iter()
        .map(String::from)
        .collect();
    if got != want {
        return Err(bad(format!(
            "columns are {} but this sweep writes {}",
            got.join(","),
            want.join(",")
        )));
    }
    Ok(r)
}

/// Reads the rows of a results or cell file written for `s`.
pub fn read_rows(path: &Path, s: &Sweep) -> Result<Vec<Row>, SweepError> {
    let bad = |line: u64, message: String| SweepError::Results {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut r = open_checked(path, &header(s))?;
    let m = s.metrics.len();
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| bad(0, e.to_string()))?;
        let line = rec.position().map_or(0, |p| p.line());
        let num = |i: usize, what: &str| -> Result<f64, SweepError> {
            rec[i]
                .parse::<f64>()
                .map_err(|_| bad(line, format!("{what} '{}' is not a number", &rec[i])))
        };
        let mut values = Vec::with_capacity(m);
        for (k, name) in s.metrics.iter().enumerate() {
            values.push(if rec[6 + k].is_empty() {
                None
            } else {
                Some(num(6 + k, name)?)
            });
        }
        let error = &rec[6 + m];
        out.push(Row {
            cell: rec[0]
                .parse()
                .map_err(|_| bad(line, format!("cell '{}' is not a number", &rec[0])))?,
            trace: rec[1].to_string(),
            cluster: rec[2].to_string(),
            load: num(3, "load")?,
            setting: rec[4].to_string(),
            seed: rec[5]
                .parse()
                .map_err(|_| bad(line, format!("seed '{}' is not a number", &rec[5])))?,
            values,
            error: (!error.is_empty()).then(|| error.to_string()),
        });
    }
    Ok(out)
}

/// One VC of one cell: its label, and the sweep's `per_vc` metrics over its jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct VcResult {
    /// The cell's row, its values the VC's (in `per_vc` order).
    pub row: Row,
    /// The VC.
    pub vc: String,
}

fn vc_header(s: &Sweep) -> Vec<String> {
    let mut h: Vec<String> = ["cell", "trace", "cluster", "load", "setting", "seed", "vc"]
        .map(String::from)
        .to_vec();
    h.extend(s.per_vc.iter().cloned());
    h
}

/// The file holding `cell`'s per-VC rows.
pub fn vc_cell_path(dir: &Path, cell: usize) -> PathBuf {
    dir.join("cells").join(format!("{cell:06}.vc.csv"))
}

fn vc_csv(s: &Sweep, rows: &[VcResult]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(vc_header(s));
    for r in rows {
        let mut rec = r.row.record();
        rec.pop(); // the error column: a VC row is written only for a run that finished
        rec.insert(6, r.vc.clone());
        let _ = w.write_record(rec);
    }
    w.into_inner().unwrap_or_default()
}

/// The per-VC rows of `cell`'s summaries `vcs`.
pub fn vc_results(s: &Sweep, cell: &Cell, vcs: &[(String, Summary)]) -> Vec<VcResult> {
    vcs.iter()
        .map(|(vc, sum)| {
            let mut row = Row::of(s, cell, Ok(sum));
            row.values = s.per_vc.iter().map(|m| sum.metric(m)).collect();
            VcResult {
                row,
                vc: vc.clone(),
            }
        })
        .collect()
}

/// Writes `cell`'s per-VC rows, before its row (which marks the cell done).
pub fn write_vc_cell(
    dir: &Path,
    s: &Sweep,
    cell: usize,
    rows: &[VcResult],
) -> Result<(), SweepError> {
    let cells = dir.join("cells");
    std::fs::create_dir_all(&cells).map_err(io(&cells))?;
    write_whole(&vc_cell_path(dir, cell), &vc_csv(s, rows))
}

/// Reads per-VC rows written for `s` (a cell's file or `vc-results.csv`).
pub fn read_vc_rows(path: &Path, s: &Sweep) -> Result<Vec<VcResult>, SweepError> {
    let bad = |line: u64, message: String| SweepError::Results {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut r = open_checked(path, &vc_header(s))?;
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| bad(0, e.to_string()))?;
        let line = rec.position().map_or(0, |p| p.line());
        let num = |i: usize, what: &str| -> Result<f64, SweepError> {
            rec[i]
                .parse::<f64>()
                .map_err(|_| bad(line, format!("{what} '{}' is not a number", &rec[i])))
        };
        let mut values = Vec::with_capacity(s.per_vc.len());
        for (k, name) in s.per_vc.iter().enumerate() {
            values.push(if rec[7 + k].is_empty() {
                None
            } else {
                Some(num(7 + k, name)?)
            });
        }
        out.push(VcResult {
            row: Row {
                cell: num(0, "cell")? as usize,
                trace: rec[1].to_string(),
                cluster: rec[2].to_string(),
                load: num(3, "load")?,
                setting: rec[4].to_string(),
                seed: num(5, "seed")? as u64,
                values,
                error: None,
            },
            vc: rec[6].to_string(),
        });
    }
    Ok(out)
}

/// Which of `cells` have a file without an error.
pub fn done(dir: &Path, s: &Sweep, cells: &[Cell]) -> Vec<bool> {
    cells
        .iter()
        .map(|c| {
            read_rows(&cell_path(dir, c.id), s)
                .is_ok_and(|rows| rows.len() == 1 && rows[0].error.is_none())
        })
        .collect()
}

/// What [`merge`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Cells with results.
    pub done: usize,
    /// Cells that failed.
    pub failed: Vec<usize>,
    /// Cells with no file yet.
    pub missing: Vec<usize>,
}

/// Writes `DIR/results.csv` from the cell files of `cells`, in cell order.
pub fn merge(dir: &Path, s: &Sweep, cells: &[Cell]) -> Result<Merged, SweepError> {
    let mut rows = Vec::with_capacity(cells.len());
    let mut m = Merged::default();
    for c in cells {
        let p = cell_path(dir, c.id);
        if !p.exists() {
            m.missing.push(c.id);
            continue;
        }
        let mut r = read_rows(&p, s)?;
        if r.len() != 1 || r[0].cell != c.id {
            return Err(SweepError::Results {
                path: p,
                line: 2,
                message: format!("expected the one row of cell {}", c.id),
            });
        }
        let row = r.remove(0);
        if row.error.is_some() {
            m.failed.push(c.id);
        } else {
            m.done += 1;
        }
        rows.push(row);
    }
    let refs: Vec<&Row> = rows.iter().collect();
    write_whole(&dir.join("results.csv"), &to_csv(s, &refs))?;
    if !s.per_vc.is_empty() {
        let mut vcs = Vec::new();
        for r in rows.iter().filter(|r| r.error.is_none()) {
            let p = vc_cell_path(dir, r.cell);
            // A trace without VCs writes none.
            if p.exists() {
                vcs.extend(read_vc_rows(&p, s)?);
            }
        }
        write_whole(&dir.join("vc-results.csv"), &vc_csv(s, &vcs))?;
    }
    Ok(m)
}

/// Cell ids as ranges for people: `3-5, 9`.
pub fn ranges(ids: &[usize]) -> String {
    let ids: Vec<u64> = ids.iter().map(|&i| i as u64).collect();
    apiary_report::present::id_ranges(&ids)
}

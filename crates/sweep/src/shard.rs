//! A sweep planned into a folder, to be run in shards by whatever launches them.
//!
//! The shard, not any one engine, is the unit of work: `plan` writes the sweep file's
//! copy and a manifest (fixed cell ids, seeds and resolved paths) into a folder; any
//! process that can see the folder runs shard `I` (cells `I*K .. I*K+K`), writing one
//! file per cell; `merge` then writes `results.csv` in cell order. A thread pool, a
//! Slurm job array and a Kubernetes Indexed Job are thin launchers over the same three
//! steps, so the merged file is byte-identical whichever ran the shards.

use crate::plan::{Cell, plan};
use crate::results::write_whole;
use crate::spec::{Sweep, SweepError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The folder's copy of the sweep file.
pub const KEPT: &str = "sweep.toml";
/// The folder's manifest.
pub const MANIFEST: &str = "manifest.toml";

/// What `plan -o DIR` writes beside the sweep file's copy: where its relative paths
/// point, and every cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The sweep's name.
    pub sweep: String,
    /// The sweep file it was planned from.
    pub source: PathBuf,
    /// The folder that file's relative paths resolve against.
    pub base: PathBuf,
    /// Every cell, in id order.
    #[serde(rename = "cell")]
    pub cells: Vec<ManifestCell>,
}

/// One cell as the manifest records it, for people and launchers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestCell {
    /// Its id.
    pub id: usize,
    /// Trace label.
    pub trace: String,
    /// The trace file, resolved.
    pub trace_path: PathBuf,
    /// Cluster.
    pub cluster: String,
    /// Load multiplier.
    pub load: f64,
    /// Policy setting label.
    pub setting: String,
    /// Seed.
    pub seed: u64,
}

impl ManifestCell {
    fn of(s: &Sweep, c: &Cell) -> ManifestCell {
        ManifestCell {
            id: c.id,
            trace: s.traces[c.trace].name.clone(),
            trace_path: s.traces[c.trace].path.clone(),
            cluster: s.clusters[c.cluster].clone(),
            load: c.load,
            setting: s.settings[c.setting].label.clone(),
            seed: c.seed,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn folder(dir: &Path, message: impl Into<String>) -> SweepError {
    SweepError::Folder {
        dir: dir.to_path_buf(),
        message: message.into(),
    }
}

/// A planned sweep: the sweep, its cells and the folder they write to.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The sweep.
    pub sweep: Sweep,
    /// Its cells, in id order.
    pub cells: Vec<Cell>,
    /// The results folder.
    pub dir: PathBuf,
}

/// Plans the sweep file `file` into `dir`: keeps a copy of the file and writes the
/// manifest. A folder that holds another sweep's results is refused, so two sweeps'
/// results never mix; planning the same file again is harmless.
pub fn plan_into(file: &Path, dir: &Path) -> Result<Planned, SweepError> {
    let text = std::fs::read(file).map_err(io(file))?;
    let base = file
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base = std::fs::canonicalize(base).map_err(io(base))?;
    let source = base.join(file.file_name().unwrap_or_default());
    let stem = file
        .file_stem()
        .map_or("sweep".into(), |s| s.to_string_lossy().into_owned());
    let utf8 = String::from_utf8(text.clone()).map_err(|_| SweepError::Parse {
        path: file.to_path_buf(),
        message: "not UTF-8 text".into(),
    })?;
    let sweep = Sweep::parse(&utf8, file, &base, &stem)?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let kept = dir.join(KEPT);
    match std::fs::read(&kept) {
        Ok(old) if old != text => {
            return Err(folder(
                dir,
                format!(
                    "holds the results of a different sweep file ({}); give another folder \
                     or remove it",
                    kept.display()
                ),
            ));
        }
        Ok(_) => {}
        Err(_) => write_whole(&kept, &text)?,
    }
    let cells = plan(&sweep);
    let manifest = Manifest {
        sweep: sweep.name.clone(),
        source,
        base,
        cells: cells.iter().map(|c| ManifestCell::of(&sweep, c)).collect(),
    };
    let body = toml::to_string(&manifest).map_err(|e| folder(dir, e.to_string()))?;
    let head = "# Written by `apiary sweep plan`: the cells of the sweep in sweep.toml, with \
                their fixed ids.\n# `apiary sweep run DIR --index I --count K` runs cells \
                I*K to I*K+K-1; `apiary sweep merge DIR` merges them.\n";
    write_whole(&dir.join(MANIFEST), format!("{head}{body}").as_bytes())?;
    Ok(Planned {
        sweep,
        cells,
        dir: dir.to_path_buf(),
    })
}

/// Opens a folder planned by [`plan_into`], checking that its manifest still names the
/// cells its sweep file expands to.
pub fn open(dir: &Path) -> Result<Planned, SweepError> {
    let mpath = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&mpath).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            folder(
                dir,
                format!(
                    "has no {MANIFEST}: plan it first with `apiary sweep plan FILE -o {}`",
                    dir.display()
                ),
            )
        } else {
            SweepError::Io {
                path: mpath.clone(),
                source: e,
            }
        }
    })?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| SweepError::Parse {
        path: mpath.clone(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let kept = dir.join(KEPT);
    let body = std::fs::read_to_string(&kept).map_err(io(&kept))?;
    let stem = manifest
        .source
        .file_stem()
        .map_or("sweep".into(), |s| s.to_string_lossy().into_owned());
    let sweep = Sweep::parse(&body, &kept, &manifest.base, &stem)?;
    let cells = plan(&sweep);
    let expected: Vec<ManifestCell> = cells.iter().map(|c| ManifestCell::of(&sweep, c)).collect();
    if expected != manifest.cells {
        return Err(folder(
            dir,
            format!(
                "{MANIFEST} does not list the cells of {KEPT} (edited by hand?); plan the \
                 sweep again into a new folder"
            ),
        ));
    }
    Ok(Planned {
        sweep,
        cells,
        dir: dir.to_path_buf(),
    })
}

/// How many shards of `count` cells `cells` cells make.
pub fn shards(cells: usize, count: usize) -> usize {
    cells.div_ceil(count.max(1))
}

/// The cells of shard `index` when each holds `count`.
pub fn shard(cells: &[Cell], index: usize, count: usize) -> Result<&[Cell], ShardError> {
    let count = count.max(1);
    let n = shards(cells.len(), count);
    if index >= n {
        return Err(ShardError::OutOfRange {
            index,
            shards: n,
            cells: cells.len(),
            count,
        });
    }
    let start = index * count;
    Ok(&cells[start..(start + count).min(cells.len())])
}

/// Where a shard's index came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexSource {
    /// `--index`.
    Argument,
    /// Slurm's job array.
    Slurm,
    /// A Kubernetes Indexed Job.
    Kubernetes,
}

impl IndexSource {
    /// How people name it.
    pub fn name(self) -> &'static str {
        match self {
            IndexSource::Argument => "--index",
            IndexSource::Slurm => "SLURM_ARRAY_TASK_ID",
            IndexSource::Kubernetes => "JOB_COMPLETION_INDEX",
        }
    }
}

/// Why a shard cannot run.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// The index is past the last shard.
    #[error(
        "shard {index} does not exist: {cells} cells in shards of {count} make {shards} \
         shards (0 to {last})",
        last = shards.saturating_sub(1)
    )]
    OutOfRange {
        /// The index asked for.
        index: usize,
        /// How many shards there are.
        shards: usize,
        /// How many cells.
        cells: usize,
        /// Cells per shard.
        count: usize,
    },
    /// An index variable does not hold a number.
    #[error("{var}='{value}' is not a shard index (a whole number from 0)")]
    NotAnIndex {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

/// The shard index: the argument, else Slurm's array task id, else a Kubernetes Indexed
/// Job's completion index; `None` when none is set (run every cell).
pub fn index(
    arg: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<(usize, IndexSource)>, ShardError> {
    if let Some(i) = arg {
        return Ok(Some((i, IndexSource::Argument)));
    }
    for src in [IndexSource::Slurm, IndexSource::Kubernetes] {
        if let Some(v) = env(src.name()) {
            let i = v.trim().parse().map_err(|_| ShardError::NotAnIndex {
                var: src.name(),
                value: v.clone(),
            })?;
            return Ok(Some((i, src)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(n: usize) -> Vec<Cell> {
        (0..n)
            .map(|id| Cell {
                id,
                trace: 0,
                cluster: 0,
                load: 1.0,
                setting: 0,
                seed: id as u64,
            })
            .collect()
    }

    #[test]
    fn shards_cover_every_cell_once() {
        let all = cells(10);
        for count in 1..=11 {
            let n = shards(all.len(), count);
            let ids: Vec<usize> = (0..n)
                .flat_map(|i| shard(&all, i, count).unwrap().iter().map(|c| c.id))
                .collect();
            assert_eq!(ids, (0..10).collect::<Vec<_>>(), "count {count}");
        }
        assert_eq!(shard(&all, 3, 3).unwrap().len(), 1);
        let e = shard(&all, 4, 3).unwrap_err().to_string();
        assert_eq!(
            e,
            "shard 4 does not exist: 10 cells in shards of 3 make 4 shards (0 to 3)"
        );
    }

    #[test]
    fn the_index_comes_from_the_argument_then_slurm_then_kubernetes() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = env(&[("SLURM_ARRAY_TASK_ID", "3"), ("JOB_COMPLETION_INDEX", "5")]);
        assert_eq!(index(Some(1), both), Ok(Some((1, IndexSource::Argument))));
        assert_eq!(index(None, both), Ok(Some((3, IndexSource::Slurm))));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "5")]);
        assert_eq!(index(None, k8s), Ok(Some((5, IndexSource::Kubernetes))));
        assert_eq!(index(None, env(&[])), Ok(None));
        let bad = index(None, env(&[("SLURM_ARRAY_TASK_ID", "x")])).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "SLURM_ARRAY_TASK_ID='x' is not a shard index (a whole number from 0)"
        );
    }
}

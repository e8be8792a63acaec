//! Failure models as `--failures` and sweeps name them: a preset, or a TOML file and
//! the CSV incident log it may name beside it.

use apiary_model::failures::{FailureError, FailureModel, PRESETS};
use std::path::{Path, PathBuf};

/// A failure model that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum FailuresError {
    /// Neither a preset nor a file that reads.
    #[error("'{spec}' is neither a preset ({presets}) nor a readable file: {source}", presets = PRESETS.join(", "))]
    Unknown {
        /// What was given.
        spec: String,
        /// Why the file did not read.
        source: std::io::Error,
    },
    /// The incident log the model names does not read.
    #[error("{model}: log: reading {}: {source}", path.display())]
    Log {
        /// The model's file.
        model: String,
        /// The log's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The model or its log is malformed.
    #[error(transparent)]
    Model(#[from] FailureError),
}

/// The preset `spec` names, or the model in file `spec` (relative to `base`) with the
/// rows of its `log` (relative to the model's file) among its events.
pub fn load(spec: &str, base: &Path) -> Result<FailureModel, FailuresError> {
    if let Some(m) = FailureModel::preset(spec) {
        return Ok(m);
    }
    let file = base.join(spec);
    let text = std::fs::read_to_string(&file).map_err(|source| FailuresError::Unknown {
        spec: spec.into(),
        source,
    })?;
    let name = file.display().to_string();
    let mut m = FailureModel::parse(&text, &name)?;
    if let Some(log) = m.log.clone() {
        let path = file.parent().unwrap_or(Path::new(".")).join(&log);
        let text = std::fs::read_to_string(&path).map_err(|source| FailuresError::Log {
            model: name.clone(),
            path: path.clone(),
            source,
        })?;
        m.add_log(&text, &path.display().to_string())?;
    }
    Ok(m)
}

//! The agent's durable records, in its state directory: the process group of every
//! attempt it started (so that its next incarnation finds and ends what it left), and
//! every exit the server has not acknowledged (so that none is lost with the agent).
//! Each record is one small JSON file, written to a temporary name, synced and renamed.

use crate::AgentError;
use apiary_api::Exit;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// One attempt's processes: the group its supervisor leads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Job id.
    pub job: u64,
    /// Attempt number.
    pub attempt: u32,
    /// The supervisor's pid, which is the group's id.
    pub pgid: i32,
    /// The supervisor's start time (clock ticks since boot), which tells it from a later
    /// process that reuses its pid.
    pub start: u64,
}

/// The state directory.
#[derive(Clone, Debug)]
pub struct Records {
    dir: PathBuf,
}

fn name(job: u64, attempt: u32) -> String {
    format!("{job}-{attempt}.json")
}

impl Records {
    /// Opens (creating) the state directory, readable by the agent's user only.
    pub fn open(dir: &Path) -> Result<Records, AgentError> {
        use std::os::unix::fs::PermissionsExt as _;
        for sub in ["attempts", "exits"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(AgentError::io("creating", dir.join(sub)))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(AgentError::io("restricting", dir))?;
        Ok(Records {
            dir: dir.to_path_buf(),
        })
    }

    fn write(&self, sub: &str, file: &str, body: &[u8]) -> Result<(), AgentError> {
        let d = self.dir.join(sub);
        let tmp = d.join(format!(".{file}.tmp"));
        let path = d.join(file);
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&d).and_then(|d| d.sync_all())
        })();
        written.map_err(AgentError::io("writing", path))
    }

    fn remove(&self, sub: &str, file: &str) -> Result<(), AgentError> {
        let path = self.dir.join(sub).join(file);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(AgentError::io("removing", path)(e)),
        }
    }

    fn read_all<T: serde::de::DeserializeOwned>(&self, sub: &str) -> Result<Vec<T>, AgentError> {
        let d = self.dir.join(sub);
        let mut names: Vec<PathBuf> = std::fs::read_dir(&d)
            .map_err(AgentError::io("reading", &d))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| {
                let text = std::fs::read(p).map_err(AgentError::io("reading", p))?;
                serde_json::from_slice(&text).map_err(|source| AgentError::Record {
                    path: p.clone(),
                    source,
                })
            })
            .collect()
    }

    /// Records a started attempt.
    pub fn started(&self, r: &AttemptRecord) -> Result<(), AgentError> {
        self.write("attempts", &name(r.job, r.attempt), &serde_json::to_vec(r)?)
    }

    /// Records an attempt's exit (durable before the attempt's record goes).
    pub fn exited(&self, e: &Exit) -> Result<(), AgentError> {
        self.write("exits", &name(e.job, e.attempt), &serde_json::to_vec(e)?)?;
        self.remove("attempts", &name(e.job, e.attempt))
    }

    /// Forgets an exit the server acknowledged.
    pub fn acked(&self, job: u64, attempt: u32) -> Result<(), AgentError> {
        self.remove("exits", &name(job, attempt))
    }

    /// Attempts started and not known to have ended.
    pub fn attempts(&self) -> Result<Vec<AttemptRecord>, AgentError> {
        self.read_all("attempts")
    }

    /// Exits not yet acknowledged.
    pub fn exits(&self) -> Result<Vec<Exit>, AgentError> {
        self.read_all("exits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reopen_until_acknowledged() {
        let dir = std::env::temp_dir().join(format!("apiary-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Records::open(&dir).unwrap();
        let a = AttemptRecord {
            job: 7,
            attempt: 2,
            pgid: 1234,
            start: 99,
        };
        r.started(&a).unwrap();
        let again = Records::open(&dir).unwrap();
        assert_eq!(again.attempts().unwrap(), vec![a]);
        let e = Exit {
            job: 7,
            attempt: 2,
            code: -1,
            lost: true,
            output_tail: "bye".into(),
        };
        again.exited(&e).unwrap();
        assert!(again.attempts().unwrap().is_empty());
        assert_eq!(Records::open(&dir).unwrap().exits().unwrap(), vec![e]);
        again.acked(7, 2).unwrap();
        assert!(again.exits().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Who this agent is: a fresh instance id at every start, and the lock that keeps a
//! second agent off the same state directory (which would end the first one's jobs as
//! leftovers). The id of the previous instance on the directory is kept, so that the
//! server lets a restarted agent take its node over from its own predecessor.

use crate::AgentError;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::Path;

/// This agent's identity, held for its life.
pub struct Identity {
    /// `PID@HOST/RANDOM`.
    pub instance: String,
    /// The instance that used the state directory before, if any.
    pub previous: Option<String>,
    /// Holds the state directory's lock until the agent exits.
    _lock: File,
}

/// Eight random bytes as hex, from the kernel.
fn random_hex() -> String {
    let mut b = [0u8; 8];
    let read = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        // No /dev/urandom: the time still tells two starts apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        b = t.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

impl Identity {
    /// Locks `state` (created by [`crate::records::Records::open`]) and records a new
    /// instance there. A second agent on the same directory is refused, naming the pid
    /// that holds it.
    pub fn claim(state: &Path) -> Result<Identity, AgentError> {
        let path = state.join("lock");
        let mut lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(AgentError::io("opening", &path))?;
        if lock.try_lock().is_err() {
            let mut holder = String::new();
            let _ = lock.read_to_string(&mut holder);
            return Err(AgentError::StateInUse {
                dir: state.to_path_buf(),
                holder: holder.trim().to_string(),
            });
        }
        let instance = format!("{}@{}/{}", std::process::id(), host(), random_hex());
        lock.set_len(0)
            .and_then(|()| lock.write_all(format!("{instance}\n").as_bytes()))
            .map_err(AgentError::io("writing", &path))?;
        let file = state.join("instance");
        let previous = std::fs::read_to_string(&file)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let tmp = state.join(".instance.tmp");
        std::fs::write(&tmp, format!("{instance}\n"))
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(AgentError::io("writing", &file))?;
        Ok(Identity {
            instance,
            previous,
            _lock: lock,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_on_one_state_directory_is_refused_and_the_next_knows_its_predecessor() {
        let dir = std::env::temp_dir().join(format!("apiary-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = Identity::claim(&dir).unwrap();
        assert!(first.previous.is_none());
        let e = Identity::claim(&dir).err().unwrap().to_string();
        assert!(e.contains(&first.instance), "{e}");
        let name = first.instance.clone();
        drop(first);
        let second = Identity::claim(&dir).unwrap();
        assert_eq!(second.previous.as_deref(), Some(name.as_str()));
        assert_ne!(second.instance, name);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! One fuzz target per reader and config parser (see the crate docs). Each proptest
//! feeds arbitrary bytes and mutated samples and requires an `Ok` or an `Err`, within a
//! watchdog.

mod configs;
mod traces;

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scratch file or folder under the temporary directory, removed when dropped: the
/// proptests write thousands per run, which would otherwise pile up.
pub struct Scratch(PathBuf);

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = if self.0.is_dir() {
            std::fs::remove_dir_all(&self.0)
        } else {
            std::fs::remove_file(&self.0)
        };
    }
}

fn scratch_path(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "apiary-fuzz-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A fresh file holding `body`.
pub fn tmp_file(name: &str, body: &[u8]) -> Scratch {
    let p = scratch_path(name);
    std::fs::write(&p, body).unwrap();
    Scratch(p)
}

/// A fresh, empty folder.
pub fn tmp_dir(name: &str) -> Scratch {
    let p = scratch_path(name);
    std::fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

//! Integration tests of the engine with real policies: data-driven scenarios from
//! `testdata/scenarios`, invariants under random workloads, and determinism.

mod adding;
mod carbon;
mod conformance;
mod efficiency;
mod engine;
mod failures;
mod io;
mod online;
mod pollux;
mod props;
mod scenarios;
mod sharing;

/// A file under `../shared` (beside the repository), or `None` when this checkout has
/// none: CI always has it, so there its absence fails the test; elsewhere it skips,
/// loudly.
pub fn shared(rel: &str) -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared")
        .join(rel);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} missing under CI",
        path.display()
    );
    eprintln!("skipping: {} not present", path.display());
    None
}

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

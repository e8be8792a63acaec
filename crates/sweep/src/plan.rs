//! The cells of a sweep: every trace x cluster x load x policy setting x seed, numbered
//! in that order, so a cell's id depends only on the sweep file.

use crate::spec::Sweep;

/// One run of a sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Its number, from 0, in plan order.
    pub id: usize,
    /// Index into [`Sweep::traces`].
    pub trace: usize,
    /// Index into [`Sweep::clusters`].
    pub cluster: usize,
    /// The arrival-rate multiplier.
    pub load: f64,
    /// Index into [`Sweep::settings`].
    pub setting: usize,
    /// The seed.
    pub seed: u64,
}

/// Every cell of `s`, in id order.
pub fn plan(s: &Sweep) -> Vec<Cell> {
    let mut out = Vec::new();
    for trace in 0..s.traces.len() {
        for cluster in 0..s.clusters.len() {
            for &load in &s.loads {
                for setting in 0..s.settings.len() {
                    for &seed in &s.seeds {
                        out.push(Cell {
                            id: out.len(),
                            trace,
                            cluster,
                            load,
                            setting,
                            seed,
                        });
                    }
                }
            }
        }
    }
    out
}

impl Cell {
    /// What the cell runs, for people: `philly n16g8 load=2 tiresias seed=3`.
    pub fn describe(&self, s: &Sweep) -> String {
        let load = s.load_word();
        format!(
            "{} {} {load}={} {} seed={}",
            s.traces[self.trace].name,
            s.clusters[self.cluster],
            self.load,
            s.settings[self.setting].label,
            self.seed
        )
    }
}

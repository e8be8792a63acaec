//! What policies set for the attempts an agent runs, beyond their GPUs, and how each
//! reaches its processes: CPU pins ([`crate::cpus`]), GPU power limits
//! ([`crate::power`]), and the shares the job keeps to itself ([`crate::handed`]):
//! cache and remote bandwidth, and the SM share beside an online service. Every reply
//! names each attempt's current values; an attempt that starts gets them before it
//! runs, and a running one as they change.

use crate::cpus::Pins;
use crate::handed::{self, Handed};
use crate::power::Power;
use apiary_api::{AttemptRef, HeartbeatReply};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An attempt's values as it starts.
pub struct AtStart {
    /// The CPUs to pin it to.
    pub cpus: Option<Vec<usize>>,
    /// Its `APIARY_IO` text.
    pub io: Option<String>,
    /// Its SM share and `APIARY_SM_SHARE` text.
    pub sm: Option<(f64, String)>,
}

/// The values given, and what was applied.
pub struct Given {
    pins: Pins,
    power: Power,
    io: Handed,
    sm: Handed,
    sm_shares: BTreeMap<AttemptRef, f64>,
}

impl Given {
    /// Nothing given yet; `smi` is `nvidia-smi`'s path.
    pub fn new(smi: PathBuf) -> Given {
        Given {
            pins: Pins::default(),
            power: Power::new(smi),
            io: Handed::new("io"),
            sm: Handed::new("sm"),
            sm_shares: BTreeMap::new(),
        }
    }

    /// Takes a reply's values.
    pub fn take(&mut self, reply: &HeartbeatReply) {
        let at = |job, attempt| AttemptRef { job, attempt };
        self.pins.take(&reply.cpus);
        self.io.take(
            reply
                .io
                .iter()
                .map(|g| (at(g.job, g.attempt), handed::io_text(&g.share))),
        );
        self.sm.take(
            reply
                .sm
                .iter()
                .map(|g| (at(g.job, g.attempt), handed::sm_text(g.share, g.memory))),
        );
        self.sm_shares = reply
            .sm
            .iter()
            .map(|g| (at(g.job, g.attempt), g.share))
            .collect();
    }

    /// Attempt `a`'s values, as it starts.
    pub fn at_start(&self, a: &AttemptRef) -> AtStart {
        AtStart {
            cpus: self.pins.planned(a),
            io: self.io.of(a).map(str::to_string),
            sm: self
                .sm_shares
                .get(a)
                .map(|&s| (s, self.sm.of(a).unwrap_or_default().to_string())),
        }
    }

    /// The files attempt `(job, attempt)` reads its IO and SM shares from.
    pub fn paths(&self, logs: &Path, job: u64, attempt: u32) -> (PathBuf, PathBuf) {
        (
            self.io.path(logs, job, attempt),
            self.sm.path(logs, job, attempt),
        )
    }

    /// Records what attempt `a` started with.
    pub fn started(&mut self, a: AttemptRef, s: AtStart) {
        if let Some(c) = s.cpus {
            self.pins.started(a, c);
        }
        if let Some(t) = s.io {
            self.io.started(a, t);
        }
        if let Some((_, t)) = s.sm {
            self.sm.started(a, t);
        }
    }

    /// Applies what changed to the running attempts: `running` gives each (not
    /// stopping) its supervisor's pid and its GPUs. Files are written only with `logs`
    /// (not while the agent stops). Returns what could not be done, to log.
    pub fn apply(
        &mut self,
        reply: &HeartbeatReply,
        logs: Option<&Path>,
        running: &BTreeMap<AttemptRef, (i32, Vec<u32>)>,
    ) -> Vec<String> {
        let mut said = Vec::new();
        if let Some(logs) = logs {
            said.extend(self.io.apply(logs, |a| running.contains_key(a)));
            said.extend(self.sm.apply(logs, |a| running.contains_key(a)));
        }
        let pids: BTreeMap<AttemptRef, i32> = running.iter().map(|(a, r)| (*a, r.0)).collect();
        said.extend(self.pins.apply(&pids));
        said.extend(
            self.power
                .apply(&reply.power, |a| running.get(a).map(|r| r.1.as_slice())),
        );
        said
    }

    /// Puts the GPUs' power limits back to their defaults (the agent stops).
    pub fn restore(&mut self) -> Vec<String> {
        self.power.apply(&[], |_| None)
    }
}

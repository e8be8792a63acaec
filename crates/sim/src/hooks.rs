//! Artifact quirks as engine hooks: behaviour a paper's simulator has that is not part
//! of the system it models, kept so its numbers can be reproduced, and kept out of the
//! engine loop so the loop stays the same for every policy.
//!
//! A hook runs once per time stamp, after that time's events and before the policy is
//! asked, and may change running jobs' remaining work; the engine then reschedules the
//! completions of the jobs it names.

use crate::overhead::muri_restart_overhead;
use apiary_model::Time;
use apiary_policy::{JobIdx, World};

/// Runs at every time stamp, between the events and the policy's pass.
pub trait Hook {
    /// Time moved from `prev` to `now` and every event at `now` is applied. Jobs whose
    /// remaining work the hook changed are pushed onto `touched`.
    fn advanced(&mut self, world: &mut World, prev: Time, now: Time, touched: &mut Vec<JobIdx>);
}

/// Muri's simulator (and its Tiresias/SRTF baselines): at every event, every running
/// job loses its model's restart overhead ([`muri_restart_overhead`]) from the interval
/// just ended, whether or not the event touched it; a member of a group sharing GPUs
/// loses the sum of its members' overheads, as that simulator charges the group's
/// restart as one. See `docs/fidelity.md`.
#[derive(Clone, Debug)]
pub struct MuriOverhead {
    own: Vec<Time>,
    group: Vec<Time>,
}

impl MuriOverhead {
    /// The overheads of `world`'s jobs.
    pub fn new(world: &World) -> MuriOverhead {
        MuriOverhead {
            own: world
                .jobs
                .iter()
                .map(|j| muri_restart_overhead(j.model.as_deref(), j.gpus))
                .collect(),
            group: vec![0; world.jobs.len()],
        }
    }
}

impl Hook for MuriOverhead {
    fn advanced(&mut self, world: &mut World, prev: Time, now: Time, touched: &mut Vec<JobIdx>) {
        if now <= prev {
            return;
        }
        for &j in world.running() {
            if let Some(g) = world.share_group(j) {
                self.group[g as usize] += self.own[j as usize];
            }
        }
        for k in 0..world.running().len() {
            let j = world.running()[k];
            let before = world.rt[j as usize].last_update;
            world.sync(j);
            let charge = match world.share_group(j) {
                Some(g) => self.group[g as usize],
                None => self.own[j as usize],
            };
            let rt = &mut world.rt[j as usize];
            let lost = charge.min(now - before);
            if lost > 0 {
                rt.remaining += lost as f64 * rt.rate;
                touched.push(j);
            }
        }
        for &j in world.running() {
            if let Some(g) = world.share_group(j) {
                self.group[g as usize] = 0;
            }
        }
    }
}

//! Jobs that share GPUs (`gpu_milli`): the policy schedules whole GPUs and never sees
//! them. The core packs them onto GPUs it holds for sharing, each GPU allocated in the
//! world as long as one process holds a part of it, so that no whole-GPU job lands
//! there. A job's hold lasts until its agent confirms the process ended (or its node is
//! given up), never only until the job's record says it ended, so no GPU is ever
//! promised more than 1000 thousandths to live processes.
//!
//! Placement is the artifact's best fit for a fractional pod (FGD's `-gpusel best`): the
//! shared GPU with the least room left that still holds the job, and only when none does,
//! a free GPU on the node with the fewest free GPUs (whole nodes stay whole for gangs).
//! Jobs go by priority, then submission; one that does not fit lets later ones try.

use super::{ApiError, Core, note};
use crate::types::{GpuShares, JobSpec, JobState, NodeHealth, Part, ShareHolder, StoppingPart};
use apiary_model::Placement;
use apiary_policy::JobIdx;
use std::collections::BTreeSet;

/// A GPU's thousandths.
pub const MILLI: u32 = 1000;
/// Most CPU thousandths and memory MiB one job may ask for (far above any node, and
/// small enough that a node's holds never overflow when summed).
const MAX_CPU_MILLI: u64 = 1 << 32;
const MAX_MEMORY_MIB: u64 = 1 << 40;

/// A process holding part of a shared GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hold {
    pub job: u64,
    pub attempt: u32,
    pub milli: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// What a GPU-sharing job asks for.
#[derive(Clone, Copy, Debug)]
struct Ask {
    milli: u32,
    cpu_milli: u64,
    memory_mib: u64,
}

impl Ask {
    /// Whether `other` asks at least as much of everything.
    fn within(&self, other: &Ask) -> bool {
        self.milli <= other.milli
            && self.cpu_milli <= other.cpu_milli
            && self.memory_mib <= other.memory_mib
    }
}

impl Core {
    /// Whether job `j` shares a GPU (the core places it, not the policy).
    pub(super) fn is_fractional(&self, j: JobIdx) -> bool {
        self.jobs[j as usize].spec.gpu_milli.is_some()
    }

    /// Checks a submission's share of a GPU, CPU and memory against the cluster.
    pub(super) fn validate_share(&self, s: &JobSpec) -> Result<(), ApiError> {
        let Some(m) = s.gpu_milli else {
            if s.cpu_milli.is_some() || s.memory_mib.is_some() {
                let f = if s.cpu_milli.is_some() {
                    "cpu_milli"
                } else {
                    "memory_mib"
                };
                return Err(ApiError::bad(
                    f,
                    "CPU and memory are asked for with a share of a GPU (gpu_milli); a \
                     whole-GPU job has its GPUs' nodes",
                ));
            }
            return Ok(());
        };
        if !(1..MILLI).contains(&m) {
            return Err(ApiError::bad(
                "gpu_milli",
                format!(
                    "must be 1..=999 thousandths of one GPU (got {m}); ask for whole GPUs with gpus"
                ),
            ));
        }
        if s.gpus != 1 {
            return Err(ApiError::bad(
                "gpus",
                format!(
                    "a job sharing a GPU (gpu_milli) asks for 1 GPU (got {})",
                    s.gpus
                ),
            ));
        }
        if let Some(sharing) = self.cfg.sharing {
            return Err(ApiError::bad(
                "gpu_milli",
                format!("GPU sharing does not run beside {sharing} VC sharing yet"),
            ));
        }
        let (cpu, mem) = (s.cpu_milli.unwrap_or(0), s.memory_mib.unwrap_or(0));
        if cpu > MAX_CPU_MILLI {
            return Err(ApiError::bad(
                "cpu_milli",
                format!("at most {MAX_CPU_MILLI}"),
            ));
        }
        if mem > MAX_MEMORY_MIB {
            return Err(ApiError::bad(
                "memory_mib",
                format!("at most {MAX_MEMORY_MIB}"),
            ));
        }
        let of_type =
            |n: &&crate::config::NodeConfig| s.gpu_type.as_deref().is_none_or(|t| t == n.gpu_type);
        if !self
            .cfg
            .nodes
            .iter()
            .filter(of_type)
            .any(|n| n.cpus.is_none_or(|c| cpu <= u64::from(c) * 1000))
        {
            return Err(ApiError::bad(
                "cpu_milli",
                format!("no node has {cpu} CPU thousandths (their cpus in the server's config)"),
            ));
        }
        if !self
            .cfg
            .nodes
            .iter()
            .filter(of_type)
            .any(|n| n.memory_gib.is_none_or(|g| mem <= u64::from(g) * 1024))
        {
            return Err(ApiError::bad(
                "memory_mib",
                format!("no node has {mem} MiB (their memory_gib in the server's config)"),
            ));
        }
        Ok(())
    }

    /// Takes back a GPU-sharing record after a restart: a running one keeps its share
    /// (or goes back to the queue if its GPU is gone or full), and processes still
    /// stopping keep theirs.
    pub(super) fn recover_fractional(&mut self, j: JobIdx, now: u64) {
        if !self.recover_holds(j) {
            self.requeue_recovered(j, now, "its share of a GPU is no longer free");
        }
        self.hold_for_dependencies(j);
        self.queue_share(j);
    }

    /// Notes that GPU-sharing job `j` is queued (again), for the next share pass.
    pub(super) fn queue_share(&mut self, j: JobIdx) {
        if self.is_fractional(j) && self.jobs[j as usize].state == JobState::Queued {
            self.share_queue.insert(j);
        }
    }

    /// Queued GPU-sharing jobs (the core places them, not the policy).
    pub fn queued_shares(&self) -> usize {
        self.share_queue
            .iter()
            .filter(|&&j| self.jobs[j as usize].state == JobState::Queued)
            .count()
    }

    /// Thousandths held on GPU `g` of node `n`.
    pub(super) fn used_milli(&self, n: u32, g: u32) -> u32 {
        self.shares
            .get(&(n, g))
            .map_or(0, |v| v.iter().map(|h| h.milli).sum())
    }

    /// CPU thousandths and memory MiB that holds take on node `n`.
    pub(super) fn node_taken(&self, n: u32) -> (u64, u64) {
        self.shares
            .range((n, 0)..=(n, u32::MAX))
            .flat_map(|(_, v)| v)
            .fold((0, 0), |(c, m), h| (c + h.cpu_milli, m + h.memory_mib))
    }

    /// Whether node `n` has the CPU and memory for `a` beside its holds.
    fn node_fits(&self, n: u32, a: &Ask) -> bool {
        let cfg = &self.cfg.nodes[n as usize];
        let (cpu, mem) = self.node_taken(n);
        cfg.cpus
            .is_none_or(|c| cpu + a.cpu_milli <= u64::from(c) * 1000)
            && cfg
                .memory_gib
                .is_none_or(|g| mem + a.memory_mib <= u64::from(g) * 1024)
    }

    /// Adds a hold on GPU `g` of node `n`, allocating the GPU in the world when it is
    /// its first. False (changing nothing) when the GPU is neither shared nor free.
    pub(super) fn add_hold(&mut self, n: u32, g: u32, h: Hold) -> bool {
        let bit = 1u64 << g;
        let node = &self.nodes[n as usize];
        if node.shared & bit == 0 {
            if g >= node.gpus
                || self
                    .world
                    .state
                    .allocate(&Placement {
                        parts: vec![(n, bit)],
                    })
                    .is_err()
            {
                return false;
            }
            self.nodes[n as usize].shared |= bit;
        }
        self.shares.entry((n, g)).or_default().push(h);
        true
    }

    /// Drops the holds of `job`'s `attempt` on node `n` (its process ended or was given
    /// up), freeing GPUs no process holds any more. Returns whether there were any.
    pub(super) fn drop_holds(&mut self, job: u64, attempt: u32, n: u32) -> bool {
        let keys: Vec<(u32, u32)> = self
            .shares
            .range((n, 0)..=(n, u32::MAX))
            .filter(|(_, v)| v.iter().any(|h| h.job == job && h.attempt == attempt))
            .map(|(k, _)| *k)
            .collect();
        for k in &keys {
            let v = self.shares.get_mut(k).expect("listed just now");
            v.retain(|h| !(h.job == job && h.attempt == attempt));
            if v.is_empty() {
                self.shares.remove(k);
                let bit = 1u64 << k.1;
                let _ = self.world.state.release(&Placement {
                    parts: vec![(n, bit)],
                });
                self.nodes[n as usize].shared &= !bit;
            }
        }
        if !keys.is_empty()
            && let Some(&j) = self.by_id.get(&job)
        {
            self.dirty.insert(j);
        }
        !keys.is_empty()
    }

    /// Drops every hold on node `n` (its processes were given up with the node).
    pub(super) fn drop_node_holds(&mut self, n: u32) {
        let held: BTreeSet<(u64, u32)> = self
            .shares
            .range((n, 0)..=(n, u32::MAX))
            .flat_map(|(_, v)| v.iter().map(|h| (h.job, h.attempt)))
            .collect();
        for (job, attempt) in held {
            self.drop_holds(job, attempt, n);
        }
    }

    /// Whether `h` is its job's running attempt (otherwise its process is stopping).
    fn is_current(&self, h: &Hold) -> bool {
        self.by_id.get(&h.job).is_some_and(|&j| {
            let r = &self.jobs[j as usize];
            r.state == JobState::Running && r.attempt == h.attempt
        })
    }

    /// Running GPU-sharing jobs with a process on node `n`.
    pub(super) fn sharing_on(&self, n: u32) -> Vec<JobIdx> {
        self.current_holders(self.shares.range((n, 0)..=(n, u32::MAX)).map(|(_, v)| v))
    }

    /// Every running GPU-sharing job.
    pub(super) fn sharing_running(&self) -> Vec<JobIdx> {
        self.current_holders(self.shares.values())
    }

    /// The jobs whose running attempt holds a share in `holds`, each once.
    fn current_holders<'a>(&self, holds: impl Iterator<Item = &'a Vec<Hold>>) -> Vec<JobIdx> {
        let mut out: Vec<JobIdx> = holds
            .flatten()
            .filter(|h| self.is_current(h))
            .filter_map(|h| self.by_id.get(&h.job).copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Processes of earlier attempts (or of jobs that ended) still holding shares on
    /// node `n`: (job, attempt).
    pub(super) fn stopping_shares(&self, n: u32) -> Vec<(u64, u32)> {
        let mut out: Vec<(u64, u32)> = self
            .shares
            .range((n, 0)..=(n, u32::MAX))
            .flat_map(|(_, v)| v)
            .filter(|h| !self.is_current(h))
            .map(|h| (h.job, h.attempt))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Job `id`'s processes still stopping on shared GPUs, as its record keeps them.
    pub(super) fn stopping_share_parts(&self, id: u64) -> Vec<StoppingPart> {
        self.shares
            .iter()
            .flat_map(|(&(n, g), v)| v.iter().map(move |h| (n, g, h)))
            .filter(|(_, _, h)| h.job == id && !self.is_current(h))
            .map(|(n, g, h)| StoppingPart {
                attempt: h.attempt,
                node: self.nodes[n as usize].name.clone(),
                gpus: vec![g],
            })
            .collect()
    }

    /// Node `n`'s shared GPUs and their holders, for `GET /v1/nodes` and the dashboard.
    pub fn gpu_shares(&self, n: u32) -> Vec<GpuShares> {
        self.shares
            .range((n, 0)..=(n, u32::MAX))
            .map(|(&(_, g), v)| GpuShares {
                gpu: g,
                used_milli: v.iter().map(|h| h.milli).sum(),
                holders: v
                    .iter()
                    .map(|h| ShareHolder {
                        job: h.job,
                        attempt: h.attempt,
                        milli: h.milli,
                    })
                    .collect(),
            })
            .collect()
    }

    fn ask_of(&self, j: JobIdx) -> Ask {
        let s = &self.jobs[j as usize].spec;
        Ask {
            milli: s.gpu_milli.unwrap_or(MILLI),
            cpu_milli: s.cpu_milli.unwrap_or(0),
            memory_mib: s.memory_mib.unwrap_or(0),
        }
    }

    /// Where `j` would go now: (node, GPU).
    pub(super) fn share_place(&self, j: JobIdx) -> Option<(u32, u32)> {
        let a = self.ask_of(j);
        let ty = self.jobs[j as usize].spec.gpu_type.as_deref();
        let open = |n: u32| {
            let node = &self.nodes[n as usize];
            !node.cordoned
                && node.health != NodeHealth::Down
                && ty.is_none_or(|t| t == node.gpu_type)
                && self.node_fits(n, &a)
        };
        // The shared GPU with the least room left that holds it.
        let mut best: Option<(u32, (u32, u32))> = None;
        for &(n, g) in self.shares.keys() {
            let used = self.used_milli(n, g);
            if used + a.milli <= MILLI
                && best.is_none_or(|(left, _)| MILLI - used - a.milli < left)
                && open(n)
            {
                best = Some((MILLI - used - a.milli, (n, g)));
            }
        }
        if let Some((_, at)) = best {
            return Some(at);
        }
        // Else a free GPU on the node with the fewest free GPUs.
        (0..self.nodes.len() as u32)
            .filter(|&n| self.world.state.free_mask(n) != 0 && open(n))
            .min_by_key(|&n| (self.world.state.free_on(n), n))
            .map(|n| (n, self.world.state.free_mask(n).trailing_zeros()))
    }

    /// Places the queued GPU-sharing jobs that fit. Returns whether any started.
    pub(super) fn share_pass(&mut self, now: u64) -> bool {
        let jobs = &self.jobs;
        self.share_queue
            .retain(|&j| jobs[j as usize].state == JobState::Queued);
        if self.share_queue.is_empty() {
            return false;
        }
        let holding: BTreeSet<u64> = self.shares.values().flatten().map(|h| h.job).collect();
        let mut queued: Vec<JobIdx> = self
            .share_queue
            .iter()
            .copied()
            .filter(|&j| {
                // A job whose earlier attempt still stops waits for it: never two at once.
                !self.is_held(j) && !holding.contains(&self.jobs[j as usize].id)
            })
            .collect();
        queued.sort_by_key(|&j| {
            let r = &self.jobs[j as usize];
            (std::cmp::Reverse(r.spec.priority), r.id)
        });
        let mut started = false;
        let mut packer = self.packer.take();
        let whole = match &mut packer {
            Some(p) => {
                let whole = self.whole_pods();
                self.sync_packer(p, &whole);
                whole
            }
            None => Vec::new(),
        };
        // Nothing is freed within a pass, so a job asking at least what one that did not
        // fit asked (of its GPU type, or of any) does not fit either: with many queued,
        // each shape is tried about once.
        let mut misses: Vec<(Ask, Option<String>)> = Vec::new();
        for j in queued {
            let a = self.ask_of(j);
            let ty = &self.jobs[j as usize].spec.gpu_type;
            if misses
                .iter()
                .any(|(m, t)| m.within(&a) && (t.is_none() || t == ty))
            {
                continue;
            }
            let at = match &mut packer {
                Some(p) => self.pack(p, j),
                None => self.share_place(j),
            };
            let Some((n, g)) = at else {
                misses.push((a, self.jobs[j as usize].spec.gpu_type.clone()));
                continue;
            };
            let placed = self.start_share(j, n, g, now);
            started |= placed;
            if let Some(p) = &mut packer {
                // What the scheduler counted, or, if the hold failed, what is there.
                self.resync_node(p, n, &whole);
            }
        }
        self.packer = packer;
        started
    }

    /// Starts GPU-sharing job `j` on GPU `g` of node `n`. False if the GPU could not
    /// take its hold (then nothing changed).
    fn start_share(&mut self, j: JobIdx, n: u32, g: u32, now: u64) -> bool {
        let a = self.ask_of(j);
        let r = &self.jobs[j as usize];
        let hold = Hold {
            job: r.id,
            attempt: r.attempt + 1,
            milli: a.milli,
            cpu_milli: a.cpu_milli,
            memory_mib: a.memory_mib,
        };
        if !self.add_hold(n, g, hold) {
            return false;
        }
        self.counters.count("start");
        let node = self.nodes[n as usize].name.clone();
        let r = &mut self.jobs[j as usize];
        r.attempt += 1;
        r.state = JobState::Running;
        r.parts = vec![Part {
            node: node.clone(),
            gpus: vec![g],
            gpu_milli: Some(a.milli),
            exit: None,
            output_tail: String::new(),
        }];
        note(r, now, "running", format!("{node}[{g}] {}/1000", a.milli));
        self.dirty.insert(j);
        true
    }

    /// Takes back the holds of a recovered GPU-sharing record: its running part, and
    /// processes of earlier attempts still stopping. False if its running part's GPU is
    /// no longer the config's or is taken.
    pub(super) fn recover_holds(&mut self, j: JobIdx) -> bool {
        let a = self.ask_of(j);
        let r = &self.jobs[j as usize];
        let (id, attempt, running) = (r.id, r.attempt, r.state == JobState::Running);
        let mut places: Vec<(u32, u32, u32)> = r
            .stopping
            .iter()
            .filter_map(|s| Some((*self.node_ix.get(&s.node)?, *s.gpus.first()?, s.attempt)))
            .collect();
        let mut ok = true;
        if running {
            match r
                .parts
                .iter()
                .find(|p| p.exit.is_none())
                .and_then(|p| Some((*self.node_ix.get(&p.node)?, *p.gpus.first()?)))
            {
                Some((n, g)) => places.push((n, g, attempt)),
                None => ok = false,
            }
        }
        for (n, g, at) in places {
            let h = Hold {
                job: id,
                attempt: at,
                milli: a.milli,
                cpu_milli: a.cpu_milli,
                memory_mib: a.memory_mib,
            };
            let room = self.used_milli(n, g) + a.milli <= MILLI;
            if !(room && self.add_hold(n, g, h)) && at == attempt && running {
                ok = false;
            }
        }
        ok
    }
}

//! Muri (SIGCOMM '22): jobs of equal GPU count share GPUs in groups of up to four and
//! interleave their iteration stages. Groups come from maximum-weight matching on the
//! interleaving efficiency, merged only while the demand exceeds the cluster. The pass
//! follows the artifact's `multi_resource_blossom_same_sim_jobs` (docs/policies/muri.md
//! lists its steps); Muri-S orders by remaining GPU-time, Muri-L by attained GPU-time.

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::placement::{self, PlacementStrategy};
use crate::runs::{by_gpus_descending, total_key};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::interleave::{self, Member, Ordering};
use apiary_solver::matching;
use std::collections::{BTreeMap, HashMap};
/// `muri-s`: its spec.
pub const MURI_S: PolicySpec = PolicySpec {
    name: "muri-s",
    about: "Muri: same-size jobs interleave stages on shared GPUs, grouped by blossom matching; remaining GPU-time first (oracle)",
    capabilities: Capabilities::of(&[
        Capability::SharedGpus,
        Capability::SpeedFactors,
        Capability::Durations,
        Capability::Profiles,
    ]),
    params: MURI_PARAMS,
    build: |p| Ok(Box::new(Muri::new(true, p)?)),
};

/// `muri-l`: its spec.
pub const MURI_L: PolicySpec = PolicySpec {
    name: "muri-l",
    about: "Muri: interleaved groups by blossom matching; least attained GPU-time first (no job knowledge)",
    capabilities: Capabilities::of(&[
        Capability::SharedGpus,
        Capability::SpeedFactors,
        Capability::Profiles,
    ]),
    params: MURI_PARAMS,
    build: |p| Ok(Box::new(Muri::new(false, p)?)),
};

const MURI_PARAMS: &[ParamSpec] = &[ORDERING, BLOSSOM, GROUP, AUTOPACK, TIES];

const ORDERING: ParamSpec = ParamSpec {
    key: "ordering",
    default: "best",
    about: "cyclic order of a group's stages: best | worst (ablation) | index",
};

const BLOSSOM: ParamSpec = ParamSpec {
    key: "blossom",
    default: "true",
    about: "group by maximum-weight matching; false: candidates in chunks of `group` (ablation)",
};

const GROUP: ParamSpec = ParamSpec {
    key: "group",
    default: "4",
    about: "the artifact's packing_num: largest group, candidates per slot, matching rounds (1 to 4; the ablations use 2 and 3)",
};

const AUTOPACK: ParamSpec = ParamSpec {
    key: "autopack",
    default: "true",
    about: "split a group whose interleaving is slower than time-sharing",
};

const TIES: ParamSpec = ParamSpec {
    key: "ties",
    default: "0",
    about: "how the matching breaks ties between equal-weight matchings: 0, by candidate order; any other number seeds a shuffle of each matching's vertex labels (a diagnostic: how much tie-breaking alone moves the schedule)",
};

/// Jobs per group at most (`packing_num`).
const PACKING: usize = 4;
/// Resource slots of the model (`multi_resource`).
const SLOTS: usize = 4;
/// Most groups one matching instance takes. The artifact matches every candidate of a
/// GPU count at once; on its 64-GPU cluster that is at most 256 (64 one-GPU slots x 4),
/// so every artifact run is one window. Larger clusters match consecutive windows of
/// candidates in priority order, keeping each instance O(W³).
pub const MATCH_WINDOW: usize = 256;
const NO_STAGES: u32 = u32::MAX;

/// The Muri policy and its ablations.
#[derive(Debug)]
pub struct Muri {
    /// Durations known: order by remaining GPU-time (Muri-S); else attained (Muri-L).
    know_duration: bool,
    ordering: Ordering,
    blossom: bool,
    max_group: usize,
    autopack: bool,
    active: Vec<JobIdx>,
    solver: matching::Blossom,
    /// Per job: its interned stage times (`NO_STAGES` if it has none) and its solo
    /// iteration time in ms.
    stage_of: Vec<u32>,
    solo: Vec<f64>,
    stages: Vec<[f64; 3]>,
    stage_ids: BTreeMap<[u64; 3], u32>,
    /// Charged time and summed stage times of a group of 2..=4, by its members' stage
    /// ids (sorted, unless the order is by index): a group's time depends only on them.
    times: HashMap<[u32; PACKING], Option<(f64, f64)>>,
    /// The same under the best order, for the auto-unpack test when another order is
    /// in force (the artifact tests with its default, the best order).
    times_best: HashMap<[u32; PACKING], Option<(f64, f64)>>,
    key: Vec<f64>,
    marked: Vec<bool>,
    refill: placement::Refill,
    /// Sort keys with their positions, reused by every pass's sorts.
    sort_buf: Vec<(u64, u64)>,
    /// The merge sort's scratch: its other list and its run bounds.
    merge_buf: Vec<(u64, u64)>,
    bounds: Vec<usize>,
    /// Per job, its GPU count (read at every pass; the jobs themselves are large).
    gpus: Vec<u32>,
    /// Admission's entries, reused by every pass.
    entries: Vec<(f64, Group)>,
    /// A job list reused by every pass's sort by GPU count.
    scratch: Vec<JobIdx>,
    /// The candidates' lists per GPU count, reused by every pass.
    by_size: Vec<(u32, Vec<JobIdx>, usize)>,
    edges: Vec<(usize, usize, i64)>,
    /// Per GPU count its candidate groups (the first `used` entries of a pass), the
    /// next matching round's list, the admitted groups, and `run_groups`' lists: kept
    /// from pass to pass, so that a pass allocates nothing once they have grown.
    classes: Vec<(u32, Vec<Group>)>,
    next: Vec<Group>,
    kept: Vec<Group>,
    intact: Vec<bool>,
    stop: Vec<JobIdx>,
    start: Vec<usize>,
    /// With `ties` set: the stream that relabels each matching's vertices.
    ties: Option<apiary_model::rng::Rng>,
}

/// A candidate group: member jobs, all of one GPU count.
#[derive(Debug, Clone, Copy)]
struct Group {
    jobs: Members,
    gpus: u32,
}

/// A group's members, at most [`PACKING`], kept inline: a pass builds a group per
/// candidate and copies them through every matching round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Members {
    ids: [JobIdx; PACKING],
    len: u8,
}

impl Members {
    fn one(j: JobIdx) -> Members {
        let mut ids = [0; PACKING];
        ids[0] = j;
        Members { ids, len: 1 }
    }

    fn push(&mut self, j: JobIdx) {
        self.ids[self.len as usize] = j;
        self.len += 1;
    }

    fn extend(&mut self, more: &[JobIdx]) {
        for &j in more {
            self.push(j);
        }
    }
}

impl<'a> IntoIterator for &'a Members {
    type Item = &'a JobIdx;
    type IntoIter = std::slice::Iter<'a, JobIdx>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::ops::Deref for Members {
    type Target = [JobIdx];
    fn deref(&self) -> &[JobIdx] {
        &self.ids[..self.len as usize]
    }
}

impl Muri {
    /// `know_duration` picks Muri-S (true) or Muri-L; parameters as [`MURI_S`] lists
    /// them.
    pub fn new(know_duration: bool, p: &Params) -> Result<Muri, ParamError> {
        let ordering = p.choice(
            &ORDERING,
            &[
                ("best", Ordering::Best),
                ("worst", Ordering::Worst),
                ("index", Ordering::ByIndex),
            ],
        )?;
        let max_group = p.u64(&GROUP)? as usize;
        if !(1..=PACKING).contains(&max_group) {
            return Err(ParamError::Bad {
                key: "group".into(),
                value: max_group.to_string(),
                message: "expected 1 to 4".into(),
            });
        }
        Ok(Muri {
            know_duration,
            ordering,
            blossom: p.bool(&BLOSSOM)?,
            max_group,
            autopack: p.bool(&AUTOPACK)?,
            active: Vec::new(),
            solver: matching::Blossom::new(),
            stage_of: Vec::new(),
            solo: Vec::new(),
            stages: Vec::new(),
            stage_ids: BTreeMap::new(),
            times: HashMap::new(),
            times_best: HashMap::new(),
            key: Vec::new(),
            marked: Vec::new(),
            refill: placement::Refill::default(),
            sort_buf: Vec::new(),
            merge_buf: Vec::new(),
            bounds: Vec::new(),
            by_size: Vec::new(),
            scratch: Vec::new(),
            gpus: Vec::new(),
            entries: Vec::new(),
            edges: Vec::new(),
            classes: Vec::new(),
            next: Vec::new(),
            kept: Vec::new(),
            intact: Vec::new(),
            stop: Vec::new(),
            start: Vec::new(),
            ties: match p.u64(&TIES)? {
                0 => None,
                seed => Some(apiary_model::rng::Rng::stream(seed, "muri-ties")),
            },
        })
    }

    fn sort_val(&self, ctx: &Ctx<'_>, j: JobIdx) -> f64 {
        let g = self.gpus[j as usize] as f64;
        if self.know_duration {
            ctx.remaining(j) * g
        } else {
            ctx.attained(j) as f64
        }
    }

    /// Records a job's stage times and solo iteration time.
    fn learn(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        let i = j as usize;
        if self.stage_of.len() <= i {
            self.stage_of.resize(i + 1, NO_STAGES);
            self.solo.resize(i + 1, 0.0);
            self.key.resize(i + 1, 0.0);
            self.marked.resize(i + 1, false);
            self.gpus.resize(i + 1, 0);
        }
        let job = ctx.job(j);
        self.gpus[i] = job.gpus;
        let (Some(st), Some(iters)) = (
            job.extras().stages.as_ref(),
            job.iterations.filter(|&n| n > 0),
        ) else {
            return;
        };
        let v = [st.data, st.gpu, st.net];
        let next = self.stages.len() as u32;
        let id = *self.stage_ids.entry(v.map(f64::to_bits)).or_insert(next);
        if id == next {
            self.stages.push(v);
        }
        self.stage_of[i] = id;
        self.solo[i] = job.duration as f64 / iters as f64;
    }

    /// The charged iteration time of a group (ms) and the members' summed stage
    /// times; `None` if a member has no profile.
    fn charged(&mut self, jobs: &[JobIdx]) -> Option<(f64, f64)> {
        self.charged_in(jobs, self.ordering)
    }

    /// As [`Muri::charged`], under the given order.
    fn charged_in(&mut self, jobs: &[JobIdx], ordering: Ordering) -> Option<(f64, f64)> {
        let mut key = [NO_STAGES; PACKING];
        for (k, &j) in key.iter_mut().zip(jobs) {
            *k = self.stage_of[j as usize];
            if *k == NO_STAGES {
                return None;
            }
        }
        if jobs.len() == 1 {
            let j = jobs[0] as usize;
            return Some((self.solo[j], self.stages[key[0] as usize].iter().sum()));
        }
        if ordering == Ordering::ByIndex {
            let mut by: [(JobIdx, u32); PACKING] = [(JobIdx::MAX, NO_STAGES); PACKING];
            for (b, &j) in by.iter_mut().zip(jobs) {
                *b = (j, self.stage_of[j as usize]);
            }
            by[..jobs.len()].sort_unstable();
            for (k, b) in key.iter_mut().zip(by) {
                *k = b.1;
            }
        } else {
            key[..jobs.len()].sort_unstable();
        }
        let cache = if ordering == self.ordering {
            &self.times
        } else {
            &self.times_best
        };
        if let Some(&t) = cache.get(&key) {
            return t;
        }
        let n = jobs.len();
        let members: Vec<Member<'_>> = key[..n]
            .iter()
            .enumerate()
            .map(|(pos, &id)| Member {
                stages: &self.stages[id as usize],
                // Unused for groups of two or more.
                solo: 0.0,
                index: pos as u64,
            })
            .collect();
        let t = interleave::group_time(&members, SLOTS, ordering)
            .ok()
            .map(|(raw, _)| {
                let used: f64 = members.iter().map(|m| m.stages.iter().sum::<f64>()).sum();
                (interleave::charged(raw, n, !self.blossom), used)
            });
        if ordering == self.ordering {
            self.times.insert(key, t);
        } else {
            self.times_best.insert(key, t);
        }
        t
    }

    /// The matching weight of merging groups: Σ stage times over slots × the charged
    /// time (the artifact's `calc_used_ratio`).
    fn weight(&mut self, jobs: &[JobIdx]) -> f64 {
        match self.charged(jobs) {
            Some((t, used)) if t > 0.0 => used / (SLOTS as f64 * t),
            _ => 0.0,
        }
    }

    /// One matching round over each GPU count's groups, merging while the demand
    /// exceeds the cluster.
    fn round(&mut self, classes: &mut [(u32, Vec<Group>)], required: &mut u64, cluster: u64) {
        let mut merged: Vec<JobIdx> = Vec::with_capacity(PACKING);
        for (g, groups) in classes.iter_mut() {
            let mut next = std::mem::take(&mut self.next);
            next.clear();
            // (first, second) of each matched pair, in the order the artifact lists
            // them: at the pair's larger vertex.
            for w0 in (0..groups.len()).step_by(MATCH_WINDOW) {
                let win = &groups[w0..(w0 + MATCH_WINDOW).min(groups.len())];
                if *required <= cluster {
                    // No pair of this window would be merged: skip its matching.
                    next.extend_from_slice(win);
                    continue;
                }
                let n = win.len();
                // The matcher's vertex labels: candidate order, or shuffled (`ties`).
                let label: Option<Vec<usize>> = self.ties.as_mut().map(|rng| {
                    let mut l: Vec<usize> = (0..n).collect();
                    rng.shuffle(&mut l);
                    l
                });
                let lab = |u: usize| label.as_ref().map_or(u, |l| l[u]);
                self.edges.clear();
                for u in 0..n {
                    for v in u + 1..n {
                        if win[u].jobs.len() + win[v].jobs.len() > self.max_group {
                            continue;
                        }
                        merged.clear();
                        merged.extend(&win[u].jobs);
                        merged.extend(&win[v].jobs);
                        let w = matching::scale(self.weight(&merged));
                        if w > 0 {
                            self.edges.push((lab(u), lab(v), w));
                        }
                    }
                }
                let mate = if self.edges.is_empty() {
                    vec![None; n]
                } else {
                    let edges = std::mem::take(&mut self.edges);
                    let by_label = matching::max_weight_matching_with(&mut self.solver, n, &edges)
                        .expect("a window is within the solver's limits")
                        .mate;
                    self.edges = edges;
                    match &label {
                        None => by_label,
                        Some(label) => {
                            let mut candidate = vec![0; n];
                            for (u, &l) in label.iter().enumerate() {
                                candidate[l] = u;
                            }
                            label
                                .iter()
                                .map(|&l| by_label[l].map(|m| candidate[m]))
                                .collect()
                        }
                    }
                };
                for u in 0..n {
                    match mate[u] {
                        Some(v) if v < u => {
                            if *required > cluster {
                                let mut a = win[v];
                                a.jobs.extend(&win[u].jobs);
                                *required -= *g as u64;
                                next.push(a);
                            } else {
                                next.push(win[v]);
                                next.push(win[u]);
                            }
                        }
                        Some(_) => {}
                        None => next.push(win[u]),
                    }
                }
            }
            std::mem::swap(groups, &mut next);
            self.next = next;
        }
    }
}

/// The positions of `keys` in stable sorted order, as `(key, position)` pairs in `out`
/// (`buf` and `bounds` are the sort's scratch).
fn stable_order(
    keys: impl Iterator<Item = u64>,
    out: &mut Vec<(u64, u64)>,
    buf: &mut Vec<(u64, u64)>,
    bounds: &mut Vec<usize>,
) {
    out.clear();
    out.extend(keys.enumerate().map(|(i, k)| (k, i as u64)));
    crate::runs::sort_stable_by_key(out, buf, bounds);
}

/// The steps of a pass (the numbers are the artifact's).
impl Muri {
    /// 2. Candidates: per GPU count, the jobs in `order`, as many chosen as would fit an
    ///    emptied cluster in groups of `max_group`; each chosen job a group of its own
    ///    (in `classes`' first entries, whose count comes back), and the GPUs they
    ///    would need.
    fn candidates(
        &mut self,
        ctx: &Ctx<'_>,
        order: &[JobIdx],
        classes: &mut Vec<(u32, Vec<Group>)>,
    ) -> (usize, u64) {
        let cluster = ctx.cluster();
        // Per GPU count in order of first appearance: its jobs in order, and how many
        // are chosen. The lists are kept from pass to pass, so filling them allocates
        // nothing once they have grown.
        let mut by_size = std::mem::take(&mut self.by_size);
        for e in &mut by_size {
            e.1.clear();
            e.2 = 0;
        }
        let mut used = 0;
        for &j in order {
            let g = self.gpus[j as usize];
            let i = match by_size[..used].iter().position(|e| e.0 == g) {
                Some(i) => i,
                None => {
                    match by_size[used..].iter().position(|e| e.0 == g) {
                        Some(k) => by_size.swap(used, used + k),
                        None => {
                            by_size.push((g, Vec::new(), 0));
                            let last = by_size.len() - 1;
                            by_size.swap(used, last);
                        }
                    }
                    used += 1;
                    used - 1
                }
            };
            by_size[i].1.push(j);
        }
        let sizes = &mut by_size[..used];
        for &j in order {
            if self.marked[j as usize] {
                continue;
            }
            let g = self.gpus[j as usize];
            if self.refill.fits(cluster, g) {
                let Some(s) = sizes.iter_mut().find(|e| e.0 == g) else {
                    continue;
                };
                let up = (s.2 + self.max_group).min(s.1.len());
                for &k in &s.1[s.2..up] {
                    self.marked[k as usize] = true;
                }
                s.2 = up;
            }
        }
        for &j in order {
            self.marked[j as usize] = false;
        }
        self.refill.clear();
        let mut required = 0u64;
        if classes.len() < used {
            classes.resize_with(used, Default::default);
        }
        for ((g, jobs, chosen), (cg, groups)) in sizes.iter().zip(classes.iter_mut()) {
            required += *chosen as u64 * *g as u64;
            *cg = *g;
            groups.clear();
            groups.extend(jobs[..*chosen].iter().map(|&j| Group {
                jobs: Members::one(j),
                gpus: *g,
            }));
        }
        self.by_size = by_size;
        (used, required)
    }

    /// 3. Grouping: blossom matching rounds until the chosen jobs fit (or the naive
    ///    ablation's chunks).
    fn group(&mut self, classes: &mut [(u32, Vec<Group>)], required: &mut u64, total: u64) {
        if self.blossom {
            // A round with the demand already within the cluster merges nothing.
            for _ in 0..self.max_group {
                if *required <= total {
                    break;
                }
                self.round(classes, required, total);
            }
        } else {
            // The naive ablation: chunks of four in candidate order.
            for (g, groups) in classes.iter_mut() {
                let singles: Vec<JobIdx> =
                    groups.iter().flat_map(|x| x.jobs.iter().copied()).collect();
                let mut out = Vec::new();
                for chunk in singles.chunks(self.max_group) {
                    let mut head = Group {
                        jobs: Members::one(chunk[0]),
                        gpus: *g,
                    };
                    for &k in &chunk[1..] {
                        if *required > total && head.jobs.len() < self.max_group {
                            head.jobs.push(k);
                            *required -= *g as u64;
                        } else {
                            out.push(Group {
                                jobs: Members::one(k),
                                gpus: *g,
                            });
                        }
                    }
                    out.push(head);
                }
                *groups = out;
            }
        }
    }

    /// 4. Auto-unpack, then admission by the best member's priority: the groups that
    ///    fit an emptied cluster, in that order.
    fn admit_groups(
        &mut self,
        ctx: &Ctx<'_>,
        classes: &[(u32, Vec<Group>)],
        key: &[f64],
        kept: &mut Vec<Group>,
    ) {
        let cluster = ctx.cluster();
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        for (_, groups) in classes {
            for &grp in groups {
                let unpack = self.autopack && grp.jobs.len() > 1 && {
                    let solo_sum: f64 = grp
                        .jobs
                        .iter()
                        .filter(|&&j| self.stage_of[j as usize] != NO_STAGES)
                        .map(|&j| self.solo[j as usize])
                        .sum();
                    self.charged_in(&grp.jobs, Ordering::Best)
                        .is_none_or(|(t, _)| t / solo_sum > 1.0)
                };
                if unpack {
                    for &j in &grp.jobs {
                        entries.push((
                            key[j as usize],
                            Group {
                                jobs: Members::one(j),
                                gpus: grp.gpus,
                            },
                        ));
                    }
                } else {
                    let best = grp
                        .jobs
                        .iter()
                        .map(|&j| key[j as usize])
                        .fold(f64::INFINITY, f64::min);
                    entries.push((best, grp));
                }
            }
        }
        let mut order = std::mem::take(&mut self.sort_buf);
        stable_order(
            entries.iter().map(|e| total_key(e.0)),
            &mut order,
            &mut self.merge_buf,
            &mut self.bounds,
        );
        kept.clear();
        for &(_, k) in &order {
            let grp = &entries[k as usize].1;
            if self.refill.fits(cluster, grp.gpus) {
                kept.push(*grp);
            }
        }
        self.sort_buf = order;
        self.entries = entries;
        self.refill.clear();
    }

    /// 5. Run them: a running group that is unchanged keeps its GPUs; anything else
    ///    running stops, and the kept groups start largest first.
    fn run_groups(&mut self, ctx: &mut Ctx<'_>, kept: &[Group]) -> Result<(), PolicyError> {
        let mut intact = std::mem::take(&mut self.intact);
        intact.clear();
        intact.resize(kept.len(), false);
        let groups = ctx.groups()?;
        for (gi, grp) in kept.iter().enumerate() {
            let first = grp.jobs[0];
            let sg = groups.share_group(first);
            intact[gi] = groups.status(first) == Status::Running
                && groups.sharing_count(first) as usize == grp.jobs.len()
                && (grp.jobs.len() == 1
                    || (sg.is_some()
                        && grp.jobs.iter().all(|&j| {
                            groups.status(j) == Status::Running && groups.share_group(j) == sg
                        })));
            for &j in &grp.jobs {
                self.marked[j as usize] = intact[gi];
            }
        }
        // Stopped in index order; only the few that stop are sorted.
        let mut stop = std::mem::take(&mut self.stop);
        stop.clear();
        stop.extend(
            ctx.running()
                .iter()
                .copied()
                .filter(|&j| !self.marked[j as usize]),
        );
        stop.sort_unstable();
        for &j in &stop {
            ctx.preempt(j);
        }
        self.stop = stop;
        for grp in kept {
            for &j in &grp.jobs {
                self.marked[j as usize] = false;
            }
        }
        let mut start = std::mem::take(&mut self.start);
        start.clear();
        start.extend((0..kept.len()).filter(|&gi| !intact[gi]));
        self.intact = intact;
        start.sort_by_key(|&gi| std::cmp::Reverse(kept[gi].gpus));
        for &gi in &start {
            ctx.groups()?
                .start_group(&kept[gi].jobs, PlacementStrategy::Consolidated);
        }
        self.start = start;
        Ok(())
    }

    /// 6. Speeds: a member runs at its solo iteration time over the group's.
    fn set_speeds(&mut self, ctx: &mut Ctx<'_>, kept: &[Group]) -> Result<(), PolicyError> {
        for grp in kept {
            if ctx.status(grp.jobs[0]) != Status::Running {
                continue;
            }
            // A job alone runs at its own speed: no group time to look up.
            if let [j] = grp.jobs[..] {
                ctx.speeds()?.set_speed(j, 1.0);
                continue;
            }
            let t = self.charged(&grp.jobs).map(|c| c.0);
            for &j in &grp.jobs {
                let solo = (self.stage_of[j as usize] != NO_STAGES).then(|| self.solo[j as usize]);
                let f = match (solo, t) {
                    (Some(s), Some(t)) if grp.jobs.len() > 1 && t > 0.0 => s / t,
                    _ => 1.0,
                };
                ctx.speeds()?.set_speed(j, f);
            }
        }
        Ok(())
    }
}

impl Muri {
    /// Sorts the active jobs by `key`, stably (ties keep their order).
    fn sort_active(&mut self, key: impl Fn(JobIdx) -> u64) {
        let mut buf = std::mem::take(&mut self.sort_buf);
        buf.clear();
        buf.extend(self.active.iter().map(|&j| (key(j), u64::from(j))));
        // Keys beside the jobs: no indirect read per comparison. A merge of the runs the
        // list comes in with (the last pass's order).
        crate::runs::sort_stable_by_key(&mut buf, &mut self.merge_buf, &mut self.bounds);
        for (slot, &(_, j)) in self.active.iter_mut().zip(&buf) {
            *slot = j as JobIdx;
        }
        self.sort_buf = buf;
    }

    /// Sorts the active jobs by GPU count, largest first, stably.
    fn sort_active_by_gpus(&mut self) {
        let mut out = std::mem::take(&mut self.scratch);
        by_gpus_descending(&self.active, &self.gpus, &mut out);
        self.scratch = std::mem::replace(&mut self.active, out);
    }
}

impl Policy for Muri {
    fn spec(&self) -> &'static PolicySpec {
        if self.know_duration { &MURI_S } else { &MURI_L }
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.learn(ctx, j);
        self.active.push(j);
        Ok(())
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        self.active.retain(|&j| ctx.status(j) != Status::Finished);
        // 1. Priority, stable over the previous pass's order (as the artifact sorts its
        //    runnable list in place).
        for i in 0..self.active.len() {
            let j = self.active[i];
            self.key[j as usize] = self.sort_val(ctx, j);
        }
        let key = std::mem::take(&mut self.key);
        self.sort_active(|j| total_key(key[j as usize]));
        let order = std::mem::take(&mut self.active);
        let total = ctx.cluster().total_gpus as u64;
        let mut classes = std::mem::take(&mut self.classes);
        let (used, mut required) = self.candidates(ctx, &order, &mut classes);
        self.group(&mut classes[..used], &mut required, total);
        let mut kept = std::mem::take(&mut self.kept);
        self.admit_groups(ctx, &classes[..used], &key, &mut kept);
        self.classes = classes;
        self.key = key;
        self.active = order;
        // The artifact leaves its runnable list sorted by GPU count, largest first
        // (stable), before placing: the next pass's stable sort breaks ties that way.
        self.sort_active_by_gpus();
        self.run_groups(ctx, &kept)?;
        self.set_speeds(ctx, &kept)?;
        self.kept = kept;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer keys order floats as `total_cmp` does, and the pairs give the order
    /// a stable sort gives, ties and signed zeros included.
    #[test]
    fn integer_keys_sort_as_a_stable_total_cmp_sort() {
        let values = [
            3.5,
            -0.0,
            0.0,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -2.25,
            3.5,
            1e-300,
            -1e-300,
            0.0,
            -2.25,
            f64::MIN_POSITIVE,
        ];
        let mut want: Vec<usize> = (0..values.len()).collect();
        want.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        let mut got = Vec::new();
        stable_order(
            values.iter().map(|&x| total_key(x)),
            &mut got,
            &mut Vec::new(),
            &mut Vec::new(),
        );
        let got: Vec<usize> = got.iter().map(|&(_, i)| i as usize).collect();
        assert_eq!(got, want);
    }
}

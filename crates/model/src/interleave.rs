//! Muri's interleaving model (SIGCOMM '22): jobs that share GPUs run their iteration
//! stages (data loading and CPU, GPU compute, network) in turn, so that each resource
//! serves one job while the others use the rest. A group's iteration time depends on
//! the cyclic order of its members; the model below is the one Muri's simulator
//! (`simulator/matching.py`) computes, call for call.
//!
//! * With `slots` resource types and as many stage times per job, order σ gives
//!   `T(σ) = Σ_s max_p t[σ(p)][(s − p) mod slots]`.
//! * With four slots and three measured stages (Muri's traces), a periodic schedule
//!   over four slots is iterated instead, in which the first stage may span two slots
//!   ([`recurrence`]); for two jobs one more arrangement is tried.
//! * The best (or, for the ablation, the worst) of all orders is taken; permutations
//!   are tried in lexicographic order and the first strictly better one kept.
//! * A group of one runs at its own (measured) iteration time.
//!
//! The empirical overheads of [`OVERHEAD`] multiply the group time when jobs are
//! charged; the interleaving efficiency ([`efficiency`]) uses the raw time.

/// How members are ordered around the cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// The fastest order (Muri).
    Best,
    /// The slowest order (the worst-ordering ablation).
    Worst,
    /// Members in job-index order (no search).
    ByIndex,
}

/// One member of a group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Member<'a> {
    /// Stage times of one iteration, in resource order.
    pub stages: &'a [f64],
    /// Its iteration time alone (what a group of one runs at).
    pub solo: f64,
    /// Job index (ordering ties and [`Ordering::ByIndex`]).
    pub index: u64,
}

/// Muri's overhead factors by group size 1..=4, as its simulator applies them: solo
/// iteration times are scaled by 1.015 when loaded, and a group of k ≥ 2 by the
/// measured slowdown over that (1.33, 1.5, 1.37 for k = 2, 3, 4).
pub const OVERHEAD: [f64; 4] = [1.015, 1.33 / 1.015, 1.5 / 1.015, 1.37 / 1.015];
/// The four-job factor of the no-Blossom ablation (`multi-resource-gpu-unaware`).
pub const OVERHEAD_4_NAIVE: f64 = 1.3 / 1.015;

/// Python's `math.isclose(a, b, rel_tol)` with no absolute tolerance.
fn isclose(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// The period of the four-slot schedule of `perm` (three stages each: load/CPU, GPU,
/// network), iterated until it repeats within 0.1 % or for two rounds. Slot `i + 1`
/// ends once the job whose network stage falls in it, the one whose GPU stage does,
/// and the one whose load stage began a slot earlier (it may span two slots) are done.
pub fn recurrence(perm: &[&[f64]]) -> f64 {
    const ROUNDS: usize = 2;
    let k = perm.len();
    let mut fi = [0.0f64; 4 * ROUNDS + 1];
    for i in 0..4 * ROUNDS {
        if (i + 1) % 4 < k {
            fi[i + 1] = fi[i + 1].max(fi[i] + perm[(i + 1) % 4][2]);
        }
        if (i + 2) % 4 < k {
            fi[i + 1] = fi[i + 1].max(fi[i] + perm[(i + 2) % 4][1]);
        }
        if i > 0 && (i + 3) % 4 < k {
            fi[i + 1] = fi[i + 1].max(fi[i - 1] + perm[(i + 3) % 4][0]);
        }
        if i >= 4 && isclose(fi[i + 1] - fi[i - 3], fi[i] - fi[i - 4], 1e-3) {
            return fi[i + 1] - fi[i - 3];
        }
    }
    fi[4 * ROUNDS] - fi[4 * ROUNDS - 4]
}

/// `T(σ)` for `slots` resources and `slots` stages per member.
fn cyclic(perm: &[&[f64]], slots: usize) -> f64 {
    (0..slots)
        .map(|s| {
            perm.iter()
                .enumerate()
                .map(|(p, st)| st[(s + slots - p) % slots])
                .fold(0.0, f64::max)
        })
        .sum()
}

/// Why a group cannot be timed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// Groups hold one to four jobs.
    #[error("a group holds 1 to 4 jobs, not {0}")]
    Size(usize),
    /// Stage counts must equal the slots (or be three with four slots).
    #[error("a job has {stages} stage times but the model has {slots} resource slots")]
    Stages {
        /// The job's stage count.
        stages: usize,
        /// Slots.
        slots: usize,
    },
}

/// A group's raw iteration time (no overhead factor) and the order achieving it
/// (member positions; `None` marks the gap of the special two-job arrangement).
pub fn group_time(
    members: &[Member<'_>],
    slots: usize,
    ordering: Ordering,
) -> Result<(f64, Vec<Option<usize>>), GroupError> {
    let k = members.len();
    if !(1..=4).contains(&k) {
        return Err(GroupError::Size(k));
    }
    if k == 1 {
        return Ok((members[0].solo, vec![Some(0)]));
    }
    let three = slots == 4 && members.iter().all(|m| m.stages.len() == 3);
    if let Some(m) = members.iter().find(|m| m.stages.len() != slots)
        && !three
    {
        return Err(GroupError::Stages {
            stages: m.stages.len(),
            slots,
        });
    }
    let time = |order: &[usize]| {
        let perm: Vec<&[f64]> = order.iter().map(|&i| members[i].stages).collect();
        if three {
            recurrence(&perm)
        } else {
            cyclic(&perm, slots)
        }
    };
    let (mut best, mut order): (f64, Vec<usize>);
    match ordering {
        Ordering::ByIndex => {
            order = (0..k).collect();
            order.sort_by_key(|&i| members[i].index);
            best = time(&order);
        }
        Ordering::Best | Ordering::Worst => {
            let worst = ordering == Ordering::Worst;
            best = if worst { 0.0 } else { f64::INFINITY };
            order = Vec::new();
            let mut perm: Vec<usize> = (0..k).collect();
            loop {
                let t = time(&perm);
                if (!worst && t < best) || (worst && t > best) {
                    best = t;
                    order = perm.clone();
                }
                if !next_permutation(&mut perm) {
                    break;
                }
            }
            if k == 2 && three {
                // One job loads while the other computes and communicates, in turn.
                let (a, b) = (members[0].stages, members[1].stages);
                let t = a[0].max(b[1] + b[2]) + b[0].max(a[1] + a[2]);
                if (!worst && t < best) || (worst && t > best) {
                    return Ok((t, vec![Some(0), None, Some(1)]));
                }
            }
        }
    }
    Ok((best, order.into_iter().map(Some).collect()))
}

/// Lexicographic next permutation (as Python's `itertools.permutations` visits them
/// from the identity); false after the last.
fn next_permutation(p: &mut [usize]) -> bool {
    let Some(i) = (1..p.len()).rev().find(|&i| p[i - 1] < p[i]) else {
        return false;
    };
    let j = (i..p.len()).rev().find(|&j| p[j] > p[i - 1]).unwrap_or(i);
    p.swap(i - 1, j);
    p[i..].reverse();
    true
}

/// Interleaving efficiency γ: the share of resource-time slots doing useful work,
/// `Σ stage times / (slots × T)`, from the raw group time.
pub fn efficiency(members: &[Member<'_>], slots: usize, raw: f64) -> f64 {
    if raw <= 0.0 {
        return 0.0;
    }
    let used: f64 = members.iter().map(|m| m.stages.iter().sum::<f64>()).sum();
    used / (slots as f64 * raw)
}

/// The time a group's members are charged per iteration: the raw time times the
/// group-size overhead (`naive` selects the no-Blossom ablation's four-job factor).
pub fn charged(raw: f64, k: usize, naive: bool) -> f64 {
    match k {
        0 | 1 => raw,
        4 if naive => raw * OVERHEAD_4_NAIVE,
        k => raw * OVERHEAD[k.min(4) - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(stages: &[f64], index: u64) -> Member<'_> {
        Member {
            stages,
            solo: stages.iter().sum(),
            index,
        }
    }

    #[test]
    fn two_complementary_jobs_interleave_perfectly() {
        // Two resources: A = (3, 1), B = (1, 3). Order AB: slot 0 max(3, 3)=3, slot 1
        // max(1, 1)=1 -> 4; order BA is the same by symmetry. Alone they take 4 + 4.
        let (a, b) = ([3.0, 1.0], [1.0, 3.0]);
        let g = [m(&a, 0), m(&b, 1)];
        let (t, order) = group_time(&g, 2, Ordering::Best).unwrap();
        assert_eq!(t, 4.0);
        assert_eq!(order, vec![Some(0), Some(1)]);
        assert_eq!(efficiency(&g, 2, t), 1.0);
        // Two identical jobs gain nothing: T = 3 + 3 = 6 vs 4 each, γ = 8 / 12.
        let g = [m(&a, 0), m(&a, 1)];
        let (t, _) = group_time(&g, 2, Ordering::Best).unwrap();
        assert_eq!(t, 6.0);
        assert!((efficiency(&g, 2, t) - 8.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn best_and_worst_orders_of_three_jobs_on_three_resources() {
        // Stages (r0, r1, r2). T(σ) = Σ_s max_p t[σ(p)][(s − p) mod 3].
        let (a, b, c) = ([4.0, 1.0, 1.0], [1.0, 4.0, 1.0], [1.0, 1.0, 4.0]);
        let g = [m(&a, 0), m(&b, 1), m(&c, 2)];
        // Order (a, c, b): slot 0 uses a0, c2, b1 = 4,4,4 -> 4; slot 1 a1, c0, b2 =
        // 1,1,1 -> 1; slot 2 a2, c1, b0 -> 1. T = 6 (every resource busy 2/3 of it).
        let (best, order) = group_time(&g, 3, Ordering::Best).unwrap();
        assert_eq!(best, 6.0);
        assert_eq!(order, vec![Some(0), Some(2), Some(1)]);
        // Order (a, b, c): slot 0 a0, c1, b2 -> 4; slot 1 a1, b0, c2 -> 4; slot 2 a2,
        // b1, c0 -> 4. T = 12.
        let (worst, _) = group_time(&g, 3, Ordering::Worst).unwrap();
        assert_eq!(worst, 12.0);
        assert_eq!(group_time(&g, 3, Ordering::ByIndex).unwrap().0, 12.0);
    }

    #[test]
    fn three_stages_on_four_slots_use_the_recurrence() {
        // Muri's traces: load/CPU, GPU, network. One job alone: its measured time.
        let a = [0.5, 0.3, 0.1];
        let solo = Member {
            stages: &a,
            solo: 0.93,
            index: 0,
        };
        assert_eq!(group_time(&[solo], 4, Ordering::Best).unwrap().0, 0.93);
        // Two jobs (load, GPU, network): a = (0.5, 0.3, 0.1), b = (0.2, 0.3, 0.1).
        // Order (a, b), slot by slot: f1 = 0.1 (b's network), f2 = 0.5 (a's load),
        // f3 = max(f2 + a.gpu, f1 + b.load) = 0.8, f4 = max(f3 + a.net, f3 + b.gpu) =
        // 1.1, f5 = f4 + b.net = 1.2; f5 − f1 = f4 − f0 = 1.1: the period.
        let b = [0.2, 0.3, 0.1];
        assert!((recurrence(&[&a, &b]) - 1.1).abs() < 1e-12);
        // Order (b, a): f1 = 0.1, f2 = 0.2, f3 = max(0.5, 0.6) = 0.6, f4 = max(0.7,
        // 0.9) = 0.9, f5 = 1.0: period 0.9.
        assert!((recurrence(&[&b, &a]) - 0.9).abs() < 1e-12);
        // The special arrangement max(L_A, G_B + N_B) + max(L_B, G_A + N_A) = 0.5 + 0.4
        // = 0.9 ties the best order, which is kept.
        let g = [m(&a, 0), m(&b, 1)];
        let (t, order) = group_time(&g, 4, Ordering::Best).unwrap();
        assert!((t - 0.9).abs() < 1e-12, "{t}");
        assert_eq!(order, vec![Some(1), Some(0)]);
        // Here the special arrangement wins: max(1, 0.1 + 1) + max(2, 0.5 + 2) = 3.6
        // against 5.0 and 4.0 for the cyclic orders (values from Muri's own code).
        let (c, d) = ([1.0, 0.5, 2.0], [2.0, 0.1, 1.0]);
        assert!((recurrence(&[&c, &d]) - 5.0).abs() < 1e-9);
        assert!((recurrence(&[&d, &c]) - 4.0).abs() < 1e-9);
        // Three and four jobs, against Muri's code on the same inputs.
        let e = [0.4, 0.1, 0.6];
        let f = [1.0, 0.2, 0.2];
        assert!((recurrence(&[&a, &b, &e]) - 1.3).abs() < 1e-9);
        assert!((recurrence(&[&e, &a, &b, &f]) - 1.5).abs() < 1e-9);
        let g = [m(&c, 0), m(&d, 1)];
        let (t, order) = group_time(&g, 4, Ordering::Best).unwrap();
        assert!((t - 3.6).abs() < 1e-12, "{t}");
        assert_eq!(order, vec![Some(0), None, Some(1)]);
    }

    #[test]
    fn overheads_and_errors() {
        assert_eq!(charged(2.0, 1, false), 2.0);
        assert!((charged(1.0, 2, false) - 1.33 / 1.015).abs() < 1e-12);
        assert!((charged(1.0, 4, true) - 1.3 / 1.015).abs() < 1e-12);
        let a = [1.0, 2.0];
        assert_eq!(group_time(&[], 2, Ordering::Best), Err(GroupError::Size(0)));
        assert_eq!(
            group_time(&[m(&a, 0), m(&a, 1)], 3, Ordering::Best),
            Err(GroupError::Stages {
                stages: 2,
                slots: 3
            })
        );
        let mut p = vec![0, 1, 2];
        let mut all = vec![p.clone()];
        while next_permutation(&mut p) {
            all.push(p.clone());
        }
        assert_eq!(all.len(), 6);
        assert_eq!(all[1], vec![0, 2, 1]);
        assert_eq!(all[5], vec![2, 1, 0]);
    }
}

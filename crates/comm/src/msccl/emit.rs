//! A tree schedule turned into an MSCCL algorithm, as ForestColl's exporter maps it.

use super::{Algo, Gpu, MAX_CHANNELS, MscclError, STEP_CHUNKS, Step, Tb};
use crate::optimum::Collective;
use crate::schedule::{Schedule, Tree};
use crate::topology::Topology;
use std::collections::BTreeMap;

/// Builds threadblocks and steps, splitting large counts and recording dependencies.
/// Threadblocks are keyed by (peer, direction, channel): every tree that sends from a
/// GPU to the same peer on a channel appends its steps to the same threadblock, in one
/// global order (phase, then tree), so sends and receives pair up in the same order on
/// both ends and no step can wait on a later tree.
struct Builder {
    gpus: Vec<Gpu>,
    index: BTreeMap<(usize, i32, i32, u32), usize>,
}

type StepRef = (usize, usize);

impl Builder {
    fn tb(&mut self, g: usize, send: i32, recv: i32, chan: u32) -> usize {
        if let Some(&t) = self.index.get(&(g, send, recv, chan)) {
            return t;
        }
        self.gpus[g].tbs.push(Tb {
            send,
            recv,
            chan,
            steps: Vec::new(),
        });
        let t = self.gpus[g].tbs.len() - 1;
        self.index.insert((g, send, recv, chan), t);
        t
    }

    /// Appends steps moving `cnt` chunks (several steps when `cnt` is large); the first
    /// waits for `dep`. Returns the last step.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        g: usize,
        tb: usize,
        ty: &str,
        src: (char, u32),
        dst: (char, u32),
        cnt: u32,
        dep: Option<StepRef>,
    ) -> StepRef {
        let mut done = 0;
        let mut first = true;
        while done < cnt {
            let c = (cnt - done).min(STEP_CHUNKS);
            let (depid, deps) = match dep.filter(|_| first) {
                Some((t, s)) if t != tb => {
                    self.gpus[g].tbs[t].steps[s].hasdep = true;
                    (t as i32, s as i32)
                }
                _ => (-1, -1),
            };
            self.gpus[g].tbs[tb].steps.push(Step {
                ty: ty.to_string(),
                srcbuf: src.0,
                srcoff: src.1 + done,
                dstbuf: dst.0,
                dstoff: dst.1 + done,
                cnt: c,
                depid,
                deps,
                hasdep: false,
            });
            done += c;
            first = false;
        }
        (tb, self.gpus[g].tbs[tb].steps.len() - 1)
    }
}

/// Per tree: parent and children of each rank.
struct Shape {
    parent: Vec<i32>,
    children: Vec<Vec<usize>>,
}

fn shape(tree: &Tree, rank: &[usize], n: usize) -> Shape {
    let mut parent = vec![-1; n];
    let mut children = vec![Vec::new(); n];
    for e in &tree.edges {
        let (a, b) = (rank[e.from as usize], rank[e.to as usize]);
        parent[b] = a as i32;
        children[a].push(b);
    }
    Shape { parent, children }
}

/// A channel per tree: the lowest on which the tree shares no directed rank pair with
/// the trees already there (ForestColl's rule, so trees run in parallel threadblocks);
/// when every channel has a conflict, the one with the fewest.
fn channels(shapes: &[Shape], n: usize, max: u32) -> Vec<u32> {
    let mut used: Vec<std::collections::BTreeSet<(usize, usize)>> = Vec::new();
    let mut out = Vec::new();
    for sh in shapes {
        let pairs: Vec<(usize, usize)> = (0..n)
            .filter(|&v| sh.parent[v] >= 0)
            .flat_map(|v| [(sh.parent[v] as usize, v), (v, sh.parent[v] as usize)])
            .collect();
        let conflicts = |set: &std::collections::BTreeSet<(usize, usize)>| {
            pairs.iter().filter(|p| set.contains(p)).count()
        };
        let c = match used.iter().position(|set| conflicts(set) == 0) {
            Some(c) => c,
            None if (used.len() as u32) < max => {
                used.push(Default::default());
                used.len() - 1
            }
            None => (0..used.len())
                .min_by_key(|&c| conflicts(&used[c]))
                .unwrap_or(0),
        };
        used[c].extend(pairs);
        out.push(c as u32);
    }
    out
}

/// Turns a schedule into an MSCCL algorithm for `coll`. For allgather `s` is the
/// topology's schedule; for reduce-scatter the reversed topology's, its trees run
/// towards their roots; allreduce runs one schedule's trees up then down, so it needs
/// trees that are valid both ways (a symmetric topology). `channels` caps the channels
/// used (at most 32).
pub fn emit(
    t: &Topology,
    s: &Schedule,
    coll: Collective,
    name: &str,
    max_channels: u32,
) -> Result<Algo, MscclError> {
    if coll == Collective::Allreduce && !t.is_symmetric() {
        return Err(MscclError::Invalid(
            "allreduce emission runs each tree up and down, which needs symmetric links".into(),
        ));
    }
    let n = t.n();
    let mut rank = vec![usize::MAX; t.nodes().len()];
    for (r, &c) in t.compute().iter().enumerate() {
        rank[c as usize] = r;
    }
    let k = u32::try_from(s.k).map_err(|_| MscclError::Invalid("k too large".into()))?;
    let total = n as u32 * k;
    // Chunk ranges: each tree takes the next `weight` chunks of its root's k.
    let mut next = vec![0u32; n];
    let mut trees = Vec::new();
    let mut shapes = Vec::new();
    for tree in &s.trees {
        let r = rank[tree.root as usize];
        let w = tree.weight as u32;
        shapes.push(shape(tree, &rank, n));
        trees.push((r, r as u32 * k + next[r], next[r], w));
        next[r] += w;
    }
    let chans = channels(&shapes, n, max_channels.clamp(1, MAX_CHANNELS));
    let (i_chunks, o_chunks, s_chunks) = match coll {
        Collective::Allgather => (k, total, 0),
        Collective::ReduceScatter => (total, k, total),
        Collective::Allreduce => (total, total, 0),
    };
    let mut b = Builder {
        gpus: (0..n)
            .map(|_| Gpu {
                i_chunks,
                o_chunks,
                s_chunks,
                tbs: Vec::new(),
            })
            .collect(),
        index: BTreeMap::new(),
    };
    // The local copy every tree's data starts from, one step per 64 chunks.
    let work = if coll == Collective::ReduceScatter {
        's'
    } else {
        'o'
    };
    let mut copy: Vec<Vec<StepRef>> = vec![Vec::new(); n];
    for (g, c) in copy.iter_mut().enumerate() {
        let tb = b.tb(g, -1, -1, 0);
        if coll == Collective::Allgather {
            b.step(g, tb, "cpy", ('i', 0), ('o', g as u32 * k), k, None);
            continue;
        }
        let mut at = 0;
        while at < total {
            let cnt = (total - at).min(STEP_CHUNKS);
            c.push(b.step(g, tb, "cpy", ('i', at), (work, at), cnt, None));
            at += cnt;
        }
    }
    // The copy step that covers the last chunk of a range (copies run in order).
    let copied = |g: usize, chunk: u32, w: u32| copy[g][((chunk + w - 1) / STEP_CHUNKS) as usize];
    if coll == Collective::Allgather {
        for ((sh, &(root, chunk, off, w)), &chan) in shapes.iter().zip(&trees).zip(&chans) {
            broadcast(&mut b, sh, root, chunk, w, chan, ('i', off), None, n);
        }
    } else {
        // Up: each child's partial sum is reduced in, one child after another, then
        // the total goes to the parent (at the root it is final).
        let mut up_done = Vec::new();
        for ((sh, &(root, chunk, off, w)), &chan) in shapes.iter().zip(&trees).zip(&chans) {
            let mut at_root = None;
            for v in 0..n {
                let mut last = copied(v, chunk, w);
                for &c in &sh.children[v] {
                    let tb = b.tb(v, -1, c as i32, chan);
                    last = b.step(v, tb, "rrc", (work, chunk), (work, chunk), w, Some(last));
                }
                if v == root {
                    if coll == Collective::ReduceScatter {
                        let tb = b.tb(v, -1, -1, 0);
                        b.step(v, tb, "cpy", (work, chunk), ('o', off), w, Some(last));
                    }
                    at_root = Some(last);
                } else {
                    let tb = b.tb(v, sh.parent[v], -1, chan);
                    b.step(v, tb, "s", (work, chunk), (work, chunk), w, Some(last));
                }
            }
            up_done.push(at_root.expect("every tree has its root"));
        }
        if coll == Collective::Allreduce {
            // Down: the root's total is broadcast back along the same tree.
            for (((sh, &(root, chunk, _, w)), &chan), &done) in
                shapes.iter().zip(&trees).zip(&chans).zip(&up_done)
            {
                broadcast(
                    &mut b,
                    sh,
                    root,
                    chunk,
                    w,
                    chan,
                    ('o', chunk),
                    Some(done),
                    n,
                );
            }
        }
    }
    let nchannels = chans.iter().max().map_or(1, |&c| c + 1);
    let algo = Algo {
        name: name.to_string(),
        proto: "Simple".to_string(),
        nchannels,
        nchunksperloop: total,
        coll: coll.msccl_name().to_string(),
        inplace: false,
        outofplace: true,
        min_bytes: 0,
        max_bytes: 1 << 40,
        gpus: b.gpus,
    };
    algo.check().map_err(|e| {
        MscclError::Invalid(format!(
            "{e} (try a small fixed k, e.g. --k 1, or more channels)"
        ))
    })?;
    Ok(algo)
}

/// Sends a tree's chunks from the root (`src` there, after `root_dep`) down every edge;
/// other ranks receive into the output and forward.
#[allow(clippy::too_many_arguments)]
fn broadcast(
    b: &mut Builder,
    sh: &Shape,
    root: usize,
    chunk: u32,
    w: u32,
    chan: u32,
    src: (char, u32),
    root_dep: Option<StepRef>,
    n: usize,
) {
    // Parents first, so a forward's dependency exists when it is written.
    let mut order = vec![root];
    let mut i = 0;
    let mut got = vec![None; n];
    got[root] = root_dep;
    while i < order.len() {
        let v = order[i];
        i += 1;
        if v != root {
            let tb = b.tb(v, -1, sh.parent[v], chan);
            got[v] = Some(b.step(v, tb, "r", ('o', chunk), ('o', chunk), w, None));
        }
        let from = if v == root { src } else { ('o', chunk) };
        for &c in &sh.children[v] {
            let tb = b.tb(v, c as i32, -1, chan);
            b.step(v, tb, "s", from, ('o', chunk), w, got[v]);
            order.push(c);
        }
    }
}

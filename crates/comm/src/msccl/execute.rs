//! An algorithm run on symbolic data, to prove it completes and computes its collective.

use super::{Algo, MscclError};
use std::collections::{BTreeMap, VecDeque};

/// A symbolic chunk: which input chunk it derives from and whose contributions it sums.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Val {
    chunk: u32,
    ranks: Vec<u64>,
}

impl Val {
    fn add(&self, other: &Val) -> Option<Val> {
        if self.chunk != other.chunk || self.ranks.iter().zip(&other.ranks).any(|(a, b)| a & b != 0)
        {
            return None;
        }
        Some(Val {
            chunk: self.chunk,
            ranks: self
                .ranks
                .iter()
                .zip(&other.ranks)
                .map(|(a, b)| a | b)
                .collect(),
        })
    }
}

impl Algo {
    /// Runs the algorithm on symbolic data: every step fires once its dependency is done
    /// and, for a receive, the matching send (same pair, same channel, in order) has
    /// happened. Fails on a deadlock, a reduction of mismatched or overlapping data, or a
    /// wrong result for the collective.
    pub fn execute(&self) -> Result<(), MscclError> {
        let bad = |m: String| Err(MscclError::Invalid(m));
        let n = self.gpus.len();
        let words = n.div_ceil(64);
        let k = self.nchunksperloop / n as u32;
        let one = |r: usize, chunk: u32| {
            let mut ranks = vec![0u64; words];
            ranks[r / 64] |= 1 << (r % 64);
            Val { chunk, ranks }
        };
        // Buffers per rank: i, o, s.
        let mut bufs: Vec<[Vec<Option<Val>>; 3]> = self
            .gpus
            .iter()
            .enumerate()
            .map(|(r, g)| {
                let input = (0..g.i_chunks)
                    .map(|c| {
                        let global = if self.coll == "allgather" {
                            r as u32 * k + c
                        } else {
                            c
                        };
                        Some(one(r, global))
                    })
                    .collect();
                [
                    input,
                    vec![None; g.o_chunks as usize],
                    vec![None; g.s_chunks as usize],
                ]
            })
            .collect();
        let bi = |b: char| match b {
            'i' => 0,
            'o' => 1,
            _ => 2,
        };
        let mut pc: Vec<Vec<usize>> = self.gpus.iter().map(|g| vec![0; g.tbs.len()]).collect();
        let mut fifo: BTreeMap<(usize, usize, u32), VecDeque<Vec<Val>>> = BTreeMap::new();
        loop {
            let mut progressed = false;
            for g in 0..n {
                for t in 0..self.gpus[g].tbs.len() {
                    let tb = &self.gpus[g].tbs[t];
                    while let Some(st) = tb.steps.get(pc[g][t]) {
                        if st.depid >= 0 && pc[g][st.depid as usize] <= st.deps as usize {
                            break;
                        }
                        let recvs = matches!(st.ty.as_str(), "r" | "rcs" | "rrc" | "rrs" | "rrcs");
                        let key = (tb.recv.max(0) as usize, g, tb.chan);
                        if recvs && fifo.get(&key).is_none_or(|q| q.is_empty()) {
                            break;
                        }
                        let (sb, db) = (bi(st.srcbuf), bi(st.dstbuf));
                        let range = |off: u32| off as usize..(off + st.cnt) as usize;
                        let local: Vec<Option<Val>> = bufs[g][sb][range(st.srcoff)].to_vec();
                        let data: Vec<Val> = if recvs {
                            let got = fifo
                                .get_mut(&key)
                                .and_then(|q| q.pop_front())
                                .expect("checked");
                            if got.len() != st.cnt as usize {
                                return bad(format!(
                                    "gpu {g} tb {t}: received {} chunks, step expects {}",
                                    got.len(),
                                    st.cnt
                                ));
                            }
                            if st.ty.starts_with("rr") {
                                let mut out = Vec::new();
                                for (a, b) in got.iter().zip(&local) {
                                    let Some(b) = b else {
                                        return bad(format!(
                                            "gpu {g} tb {t}: reduces with an empty chunk"
                                        ));
                                    };
                                    match a.add(b) {
                                        Some(v) => out.push(v),
                                        None => {
                                            return bad(format!(
                                                "gpu {g} tb {t}: reduces mismatched or overlapping data"
                                            ));
                                        }
                                    }
                                }
                                out
                            } else {
                                got
                            }
                        } else {
                            let mut out = Vec::new();
                            for v in &local {
                                match v {
                                    Some(v) => out.push(v.clone()),
                                    None => {
                                        return bad(format!(
                                            "gpu {g} tb {t} step {}: reads a chunk nothing wrote",
                                            pc[g][t]
                                        ));
                                    }
                                }
                            }
                            out
                        };
                        if matches!(st.ty.as_str(), "r" | "rcs" | "rrc" | "rrcs" | "cpy") {
                            for (i, v) in data.iter().enumerate() {
                                bufs[g][db][st.dstoff as usize + i] = Some(v.clone());
                            }
                        }
                        if matches!(st.ty.as_str(), "s" | "rcs" | "rrs" | "rrcs") {
                            fifo.entry((g, tb.send as usize, tb.chan))
                                .or_default()
                                .push_back(data);
                        }
                        pc[g][t] += 1;
                        progressed = true;
                    }
                }
            }
            if !progressed {
                break;
            }
        }
        for (g, (gpu, pcs)) in self.gpus.iter().zip(&pc).enumerate() {
            for (t, tb) in gpu.tbs.iter().enumerate() {
                if pcs[t] < tb.steps.len() {
                    return bad(format!("deadlock: gpu {g} tb {t} stops at step {}", pcs[t]));
                }
            }
        }
        let all: Vec<u64> = (0..words)
            .map(|w| {
                if (w + 1) * 64 <= n {
                    u64::MAX
                } else {
                    (1u64 << (n % 64)) - 1
                }
            })
            .collect();
        for (g, buf) in bufs.iter().enumerate() {
            let out = &buf[1];
            for (c, v) in out.iter().enumerate() {
                let want = match self.coll.as_str() {
                    "allgather" => Some((c as u32, None)),
                    "allreduce" => Some((c as u32, Some(&all))),
                    "reducescatter" => Some((g as u32 * k + c as u32, Some(&all))),
                    _ => None,
                };
                let Some((chunk, ranks)) = want else {
                    return bad(format!("cannot check coll '{}'", self.coll));
                };
                let ok = v.as_ref().is_some_and(|v| {
                    v.chunk == chunk
                        && match ranks {
                            Some(r) => &v.ranks == r,
                            None => {
                                v.ranks.iter().map(|w| w.count_ones()).sum::<u32>() == 1
                                    && v.ranks[(chunk / k) as usize / 64]
                                        >> ((chunk / k) as usize % 64)
                                        & 1
                                        == 1
                            }
                        }
                });
                if !ok {
                    return bad(format!("rank {g} output chunk {c} is wrong: {v:?}"));
                }
            }
        }
        Ok(())
    }
}

//! MSCCL XML (collectives.md §3.1): the format the MSCCL executor for NCCL and RCCL's
//! built-in MSCCL load from `MSCCL_ALGO_DIR`. [`emit`] turns a tree schedule into an
//! algorithm, [`Algo::to_xml`] writes it with every attribute the executor's parser
//! requires, [`Algo::parse`] reads it back and enforces the executor's limits, and
//! [`Algo::execute`] runs it on symbolic data to prove it completes and computes the
//! collective.
//!
//! The mapping follows ForestColl's exporter: each tree owns `weight` contiguous chunks
//! of its root's `k`; one threadblock per tree edge direction at each GPU; trees share a
//! channel only when they use no common directed GPU pair.

mod emit;
mod execute;
mod xml;

pub use emit::emit;

use std::collections::BTreeMap;

/// Threadblocks per channel the executor accepts (`MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`).
pub const MAX_TBS_PER_CHANNEL: usize = 32;
/// Channels the executor accepts.
pub const MAX_CHANNELS: u32 = 32;
/// Steps per threadblock in the executor's default build (`MSCCL_MAX_NUM_STEPS`).
pub const MAX_STEPS: usize = 64;
/// A step's `cnt` must be below this (`MSCCL_MAX_COUNT`).
pub const MAX_COUNT: u32 = 72;
/// Chunks one emitted step moves at most.
const STEP_CHUNKS: u32 = 64;

/// Why an algorithm could not be emitted or read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MscclError {
    /// The XML is malformed or misses an attribute the executor requires.
    #[error("MSCCL XML line {line}: {msg}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// The algorithm breaks one of the executor's limits or is inconsistent.
    #[error("MSCCL algorithm: {0}")]
    Invalid(String),
}

/// One step of a threadblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// `s`, `r`, `rcs`, `rrc`, `rrs`, `rrcs`, `cpy`, `re`, `nop`.
    pub ty: String,
    /// `i`, `o` or `s`.
    pub srcbuf: char,
    /// Offset in chunks.
    pub srcoff: u32,
    /// `i`, `o` or `s`.
    pub dstbuf: char,
    /// Offset in chunks.
    pub dstoff: u32,
    /// Chunks.
    pub cnt: u32,
    /// Threadblock of the step this one waits for (`-1`: none).
    pub depid: i32,
    /// Index of that step.
    pub deps: i32,
    /// Some step waits for this one.
    pub hasdep: bool,
}

/// A threadblock: at most one send peer and one receive peer on one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tb {
    /// Send peer (`-1`: none).
    pub send: i32,
    /// Receive peer (`-1`: none).
    pub recv: i32,
    /// Channel.
    pub chan: u32,
    /// Steps, run in order.
    pub steps: Vec<Step>,
}

/// One rank's program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Input chunks.
    pub i_chunks: u32,
    /// Output chunks.
    pub o_chunks: u32,
    /// Scratch chunks.
    pub s_chunks: u32,
    /// Threadblocks; a threadblock's id is its index.
    pub tbs: Vec<Tb>,
}

/// An MSCCL algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Algo {
    /// Name.
    pub name: String,
    /// `Simple`, `LL` or `LL128`.
    pub proto: String,
    /// Channels used.
    pub nchannels: u32,
    /// Chunks the buffer is cut into per loop.
    pub nchunksperloop: u32,
    /// `allgather`, `reducescatter`, `allreduce`, ...
    pub coll: String,
    /// Runs in place.
    pub inplace: bool,
    /// Runs out of place.
    pub outofplace: bool,
    /// Smallest buffer it is used for, bytes.
    pub min_bytes: u64,
    /// Largest buffer it is used for, bytes.
    pub max_bytes: u64,
    /// One program per rank; a rank's id is its index.
    pub gpus: Vec<Gpu>,
}

impl Algo {
    /// The executor's limits and internal consistency: peers and dependencies exist,
    /// at most one threadblock per (peer, direction, channel) on a GPU, `hasdep` set
    /// exactly where some step waits.
    pub fn check(&self) -> Result<(), MscclError> {
        let bad = |m: String| Err(MscclError::Invalid(m));
        let n = self.gpus.len() as i32;
        if !["Simple", "LL", "LL128"].contains(&self.proto.as_str()) {
            return bad(format!("proto '{}' is not Simple, LL or LL128", self.proto));
        }
        if self.nchannels == 0 || self.nchannels > MAX_CHANNELS {
            return bad(format!(
                "nchannels {} is not in 1..={MAX_CHANNELS}",
                self.nchannels
            ));
        }
        for (g, gpu) in self.gpus.iter().enumerate() {
            let mut per_chan = vec![0usize; self.nchannels as usize];
            let mut sends = BTreeMap::new();
            let mut recvs = BTreeMap::new();
            let mut waited = std::collections::BTreeSet::new();
            for (t, tb) in gpu.tbs.iter().enumerate() {
                if tb.chan >= self.nchannels {
                    return bad(format!("gpu {g} tb {t}: channel {} >= nchannels", tb.chan));
                }
                per_chan[tb.chan as usize] += 1;
                for (peer, map, what) in
                    [(tb.send, &mut sends, "send"), (tb.recv, &mut recvs, "recv")]
                {
                    if peer == -1 {
                        continue;
                    }
                    if peer < 0 || peer >= n || peer == g as i32 {
                        return bad(format!(
                            "gpu {g} tb {t}: {what} peer {peer} is not another rank"
                        ));
                    }
                    if map.insert((peer, tb.chan), t).is_some() {
                        return bad(format!(
                            "gpu {g}: two threadblocks {what} with rank {peer} on channel {}",
                            tb.chan
                        ));
                    }
                }
                if tb.steps.len() > MAX_STEPS {
                    return bad(format!(
                        "gpu {g} tb {t}: {} steps, at most {MAX_STEPS}",
                        tb.steps.len()
                    ));
                }
                for (s, st) in tb.steps.iter().enumerate() {
                    let at = format!("gpu {g} tb {t} step {s}");
                    if st.cnt == 0 || st.cnt >= MAX_COUNT {
                        return bad(format!("{at}: cnt {} is not in 1..{MAX_COUNT}", st.cnt));
                    }
                    let sends = matches!(st.ty.as_str(), "s" | "rcs" | "rrs" | "rrcs");
                    let recvs = matches!(st.ty.as_str(), "r" | "rcs" | "rrc" | "rrs" | "rrcs");
                    if !(sends || recvs || matches!(st.ty.as_str(), "cpy" | "re" | "nop")) {
                        return bad(format!("{at}: unknown type '{}'", st.ty));
                    }
                    if sends && tb.send == -1 || recvs && tb.recv == -1 {
                        return bad(format!(
                            "{at}: '{}' needs a peer the threadblock lacks",
                            st.ty
                        ));
                    }
                    for (buf, off) in [(st.srcbuf, st.srcoff), (st.dstbuf, st.dstoff)] {
                        let size = match buf {
                            'i' => gpu.i_chunks,
                            'o' => gpu.o_chunks,
                            's' => gpu.s_chunks,
                            _ => return bad(format!("{at}: buffer '{buf}'")),
                        };
                        if off + st.cnt > size {
                            return bad(format!(
                                "{at}: chunks {off}..{} outside buffer '{buf}' ({size})",
                                off + st.cnt
                            ));
                        }
                    }
                    if st.depid != -1 {
                        let ok = usize::try_from(st.depid)
                            .ok()
                            .and_then(|d| gpu.tbs.get(d))
                            .and_then(|d| {
                                usize::try_from(st.deps).ok().and_then(|i| d.steps.get(i))
                            })
                            .is_some();
                        if !ok {
                            return bad(format!("{at}: depends on a step that does not exist"));
                        }
                        waited.insert((st.depid as usize, st.deps as usize));
                    }
                }
            }
            if let Some(c) = per_chan.iter().position(|&c| c > MAX_TBS_PER_CHANNEL) {
                return bad(format!(
                    "gpu {g}: {} threadblocks on channel {c}, at most {MAX_TBS_PER_CHANNEL}",
                    per_chan[c]
                ));
            }
            for (t, tb) in gpu.tbs.iter().enumerate() {
                for (s, st) in tb.steps.iter().enumerate() {
                    if st.hasdep != waited.contains(&(t, s)) {
                        return bad(format!(
                            "gpu {g} tb {t} step {s}: hasdep does not match the steps that wait for it"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

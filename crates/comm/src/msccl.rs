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

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use crate::optimum::Collective;
use crate::schedule::{Schedule, Tree};
use crate::topology::Topology;

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
    /// The XML, every attribute written.
    pub fn to_xml(&self) -> String {
        let mut x = String::new();
        let b = |v: bool| u8::from(v);
        let _ = writeln!(
            x,
            "<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"{}\" maxBytes=\"{}\">",
            escape(&self.name),
            self.proto,
            self.nchannels,
            self.nchunksperloop,
            self.gpus.len(),
            self.coll,
            b(self.inplace),
            b(self.outofplace),
            self.min_bytes,
            self.max_bytes
        );
        for (g, gpu) in self.gpus.iter().enumerate() {
            let _ = writeln!(
                x,
                "  <gpu id=\"{g}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">",
                gpu.i_chunks, gpu.o_chunks, gpu.s_chunks
            );
            for (t, tb) in gpu.tbs.iter().enumerate() {
                let _ = writeln!(
                    x,
                    "    <tb id=\"{t}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                    tb.send, tb.recv, tb.chan
                );
                for (s, st) in tb.steps.iter().enumerate() {
                    let _ = writeln!(
                        x,
                        "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{}\" deps=\"{}\" hasdep=\"{}\"/>",
                        st.ty,
                        st.srcbuf,
                        st.srcoff,
                        st.dstbuf,
                        st.dstoff,
                        st.cnt,
                        st.depid,
                        st.deps,
                        b(st.hasdep)
                    );
                }
                x.push_str("    </tb>\n");
            }
            x.push_str("  </gpu>\n");
        }
        x.push_str("</algo>\n");
        x
    }

    /// Reads MSCCL XML as the executor does: every attribute required, ids in order,
    /// then [`Algo::check`].
    pub fn parse(text: &str) -> Result<Algo, MscclError> {
        parse(text)
    }

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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A start or empty tag: name, attributes, self-closing, line.
struct Tag {
    name: String,
    attrs: BTreeMap<String, String>,
    close: bool,
    empty: bool,
    line: usize,
}

/// Splits the document into tags (the format has no text content).
fn tags(text: &str) -> Result<Vec<Tag>, MscclError> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    let line_at = |off: usize| text[..off].matches('\n').count() + 1;
    while let Some(lt) = rest.find('<') {
        if !rest[..lt].trim().is_empty() {
            return Err(MscclError::Parse {
                line: line_at(offset),
                msg: "text outside tags".into(),
            });
        }
        let start = offset + lt;
        let after = &rest[lt..];
        let (end, skip) = if after.starts_with("<!--") {
            (after.find("-->").map(|e| e + 3), true)
        } else if after.starts_with("<?") {
            (after.find("?>").map(|e| e + 2), true)
        } else {
            (after.find('>').map(|e| e + 1), false)
        };
        let end = end.ok_or_else(|| MscclError::Parse {
            line: line_at(start),
            msg: "unterminated tag".into(),
        })?;
        if !skip {
            out.push(tag(&after[1..end - 1], line_at(start))?);
        }
        offset = start + end;
        rest = &text[offset..];
    }
    if !rest.trim().is_empty() {
        return Err(MscclError::Parse {
            line: line_at(offset),
            msg: "text after the last tag".into(),
        });
    }
    Ok(out)
}

fn tag(body: &str, line: usize) -> Result<Tag, MscclError> {
    let err = |m: String| MscclError::Parse { line, msg: m };
    let (close, body) = match body.strip_prefix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let (empty, body) = match body.strip_suffix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let body = body.trim();
    let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
    let name = body[..name_end].to_string();
    let mut attrs = BTreeMap::new();
    let mut rest = body[name_end..].trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| err(format!("<{name}>: attribute without a value")))?;
        let key = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let quote = after
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| err(format!("<{name}>: attribute {key} is not quoted")))?;
        let close_q = after[1..]
            .find(quote)
            .ok_or_else(|| err(format!("<{name}>: attribute {key} is not closed")))?;
        let value = unescape(&after[1..1 + close_q]);
        if attrs.insert(key.clone(), value).is_some() {
            return Err(err(format!("<{name}>: attribute {key} twice")));
        }
        rest = after[close_q + 2..].trim_start();
    }
    Ok(Tag {
        name,
        attrs,
        close,
        empty,
        line,
    })
}

fn attr<T: std::str::FromStr>(t: &Tag, key: &str) -> Result<T, MscclError> {
    let v = t.attrs.get(key).ok_or_else(|| MscclError::Parse {
        line: t.line,
        msg: format!("Attribute {key} not found in <{}>", t.name),
    })?;
    v.parse().map_err(|_| MscclError::Parse {
        line: t.line,
        msg: format!("<{}> attribute {key}: cannot read '{v}'", t.name),
    })
}

/// The executor indexes gpus, threadblocks and steps by position: ids must count up.
fn in_order(t: &Tag, key: &str, expected: usize, what: &str) -> Result<(), MscclError> {
    if attr::<usize>(t, key)? != expected {
        return Err(MscclError::Parse {
            line: t.line,
            msg: format!("{what} must be 0, 1, ... in order"),
        });
    }
    Ok(())
}

fn parse(text: &str) -> Result<Algo, MscclError> {
    let tags = tags(text)?;
    let mut it = tags.into_iter().peekable();
    let expect = |t: Option<Tag>, name: &str, close: bool| -> Result<Tag, MscclError> {
        match t {
            Some(t) if t.name == name && t.close == close => Ok(t),
            Some(t) => Err(MscclError::Parse {
                line: t.line,
                msg: format!(
                    "expected <{}{name}>, found <{}{}>",
                    if close { "/" } else { "" },
                    if t.close { "/" } else { "" },
                    t.name
                ),
            }),
            None => Err(MscclError::Parse {
                line: 0,
                msg: format!("missing <{name}>"),
            }),
        }
    };
    let a = expect(it.next(), "algo", false)?;
    let ngpus: u32 = attr(&a, "ngpus")?;
    let bool_attr = |t: &Tag, k: &str| -> Result<bool, MscclError> { Ok(attr::<u8>(t, k)? != 0) };
    let mut algo = Algo {
        name: attr(&a, "name")?,
        proto: attr(&a, "proto")?,
        nchannels: attr(&a, "nchannels")?,
        nchunksperloop: attr(&a, "nchunksperloop")?,
        coll: attr(&a, "coll")?,
        inplace: bool_attr(&a, "inplace")?,
        outofplace: bool_attr(&a, "outofplace")?,
        min_bytes: attr(&a, "minBytes")?,
        max_bytes: attr(&a, "maxBytes")?,
        gpus: Vec::new(),
    };
    while it.peek().is_some_and(|t| t.name == "gpu" && !t.close) {
        let g = it.next().expect("peeked");
        in_order(&g, "id", algo.gpus.len(), "gpu ids")?;
        let mut gpu = Gpu {
            i_chunks: attr(&g, "i_chunks")?,
            o_chunks: attr(&g, "o_chunks")?,
            s_chunks: attr(&g, "s_chunks")?,
            tbs: Vec::new(),
        };
        while it.peek().is_some_and(|t| t.name == "tb" && !t.close) {
            let t = it.next().expect("peeked");
            in_order(&t, "id", gpu.tbs.len(), "tb ids")?;
            let mut tb = Tb {
                send: attr(&t, "send")?,
                recv: attr(&t, "recv")?,
                chan: attr(&t, "chan")?,
                steps: Vec::new(),
            };
            if !t.empty {
                while it.peek().is_some_and(|t| t.name == "step") {
                    let s = it.next().expect("peeked");
                    in_order(&s, "s", tb.steps.len(), "step numbers")?;
                    let buf = |k: &str| -> Result<char, MscclError> {
                        let v: String = attr(&s, k)?;
                        let mut c = v.chars();
                        match (c.next(), c.next()) {
                            (Some(b), None) => Ok(b),
                            _ => Err(MscclError::Parse {
                                line: s.line,
                                msg: format!("{k} '{v}' is not one letter"),
                            }),
                        }
                    };
                    tb.steps.push(Step {
                        ty: attr(&s, "type")?,
                        srcbuf: buf("srcbuf")?,
                        srcoff: attr(&s, "srcoff")?,
                        dstbuf: buf("dstbuf")?,
                        dstoff: attr(&s, "dstoff")?,
                        cnt: attr(&s, "cnt")?,
                        depid: attr(&s, "depid")?,
                        deps: attr(&s, "deps")?,
                        hasdep: bool_attr(&s, "hasdep")?,
                    });
                }
                expect(it.next(), "tb", true)?;
            }
            gpu.tbs.push(tb);
        }
        expect(it.next(), "gpu", true)?;
        algo.gpus.push(gpu);
    }
    expect(it.next(), "algo", true)?;
    if let Some(t) = it.next() {
        return Err(MscclError::Parse {
            line: t.line,
            msg: "content after </algo>".into(),
        });
    }
    if algo.gpus.len() != ngpus as usize {
        return Err(MscclError::Parse {
            line: a.line,
            msg: format!(
                "ngpus is {ngpus} but {} <gpu> elements follow",
                algo.gpus.len()
            ),
        });
    }
    algo.check()?;
    Ok(algo)
}

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

//! Automatic prefix caching: prompts that begin with the same tokens reuse the KV
//! blocks an earlier request computed, as vLLM's automatic prefix caching and
//! Mooncake's KV cache do.
//!
//! Traces name prompt content by block hashes (Mooncake's `hash_ids`: one id per
//! 512-token block, equal ids for equal prefixes up to and including that block). An
//! instance keeps the blocks of prompts it has computed; a new prompt skips the
//! prefill of its longest cached run of leading full blocks (always recomputing its
//! last token, whose logits it needs). A cached block held by a running request is
//! pinned; one no request holds sits in free memory and is evicted, least recently
//! released first and deepest block first among equals (vLLM frees a request's blocks
//! tail first), whenever the free blocks no longer hold it.
//!
//! The cache saves compute, not memory: each running request holds its whole prompt's
//! blocks, so two requests running at once with a shared prefix each hold a copy, where
//! vLLM would share one. Evictable blocks count as free, as vLLM counts them.
//!
//! Below the instances' caches, [`HostTier`] is Mooncake's KV cache pool in the
//! cluster's host memory: every prompt block any instance computed is written there
//! (asynchronously, at no cost to the iteration), and a prompt whose next leading
//! blocks are there, past those its instance holds, loads them instead of computing
//! them, the load taking its time in the prefill's iteration.

use crate::workload::{Prefixes, Request};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
struct Entry {
    refs: u32,
    released: u64,
}

/// One instance's cache of computed prompt blocks.
#[derive(Debug)]
pub struct PrefixCache {
    table: Arc<Prefixes>,
    /// KV blocks one hashed block takes.
    kv_blocks: u32,
    entries: HashMap<u64, Entry>,
    /// Entries no request holds, by (release order, hash): the first is evicted first.
    idle: BTreeSet<(u64, u64)>,
    idle_blocks: u64,
    clock: u64,
    /// Prompt tokens skipped because their blocks were cached.
    pub hit_tokens: u64,
    /// Prompt tokens the prefills would have computed without a cache.
    pub prompt_tokens: u64,
    /// Entries evicted.
    pub evictions: u64,
}

impl PrefixCache {
    /// An empty cache over `table`'s hashes, for KV blocks of `block_size` tokens.
    pub fn new(table: Arc<Prefixes>, block_size: u32) -> PrefixCache {
        let kv_blocks = table.block_tokens.div_ceil(block_size.max(1));
        PrefixCache {
            table,
            kv_blocks,
            entries: HashMap::new(),
            idle: BTreeSet::new(),
            idle_blocks: 0,
            clock: 0,
            hit_tokens: 0,
            prompt_tokens: 0,
            evictions: 0,
        }
    }

    /// The hashes of `req`'s full prompt blocks.
    pub fn hashes<'a>(&'a self, req: &Request) -> &'a [u64] {
        self.table.of(req)
    }

    /// Tokens of one hashed block.
    pub fn block_tokens(&self) -> u32 {
        self.table.block_tokens
    }

    /// Leading prompt blocks of `req` that are cached, and the tokens of its prefill of
    /// `len` tokens they save (at most `len - 1`).
    pub fn lookup(&self, req: &Request, len: u32) -> (u32, u32) {
        let n = self
            .table
            .of(req)
            .iter()
            .take_while(|h| self.entries.contains_key(h))
            .count() as u32;
        let saved = (n * self.table.block_tokens).min(len.saturating_sub(1));
        (n, saved)
    }

    /// Records a prefill of `len` tokens of which `saved` were cached.
    pub fn count(&mut self, len: u32, saved: u32) {
        self.prompt_tokens += u64::from(len);
        self.hit_tokens += u64::from(saved);
    }

    /// Pins blocks `from..to` of `req`'s prompt, caching those not cached yet.
    pub fn acquire(&mut self, req: &Request, from: usize, to: usize) {
        // Fields borrowed apart: the table is read while the entries change.
        for &h in &self.table.of(req)[from..to] {
            let e = self.entries.entry(h).or_insert(Entry {
                refs: 0,
                released: u64::MAX,
            });
            if e.refs == 0 && e.released != u64::MAX {
                self.idle.remove(&(e.released, h));
                self.idle_blocks -= u64::from(self.kv_blocks);
            }
            e.refs += 1;
        }
    }

    /// Unpins the first `held` blocks of `req`'s prompt, the last first.
    pub fn release(&mut self, req: &Request, held: usize) {
        for &h in self.table.of(req)[..held].iter().rev() {
            let Some(e) = self.entries.get_mut(&h) else {
                continue;
            };
            e.refs -= 1;
            if e.refs == 0 {
                e.released = self.clock;
                self.clock += 1;
                self.idle.insert((e.released, h));
                self.idle_blocks += u64::from(self.kv_blocks);
            }
        }
    }

    /// Evicts until the unpinned cached blocks fit in `free` blocks.
    pub fn fit(&mut self, free: u32) {
        while self.idle_blocks > u64::from(free) {
            let Some((_, h)) = self.idle.pop_first() else {
                break;
            };
            self.entries.remove(&h);
            self.idle_blocks -= u64::from(self.kv_blocks);
            self.evictions += 1;
        }
    }

    /// KV blocks of cached entries no request holds.
    pub fn idle_blocks(&self) -> u64 {
        self.idle_blocks
    }
}

/// How big the host tier is and how fast it loads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostTierConfig {
    /// Hashed prompt blocks it holds.
    pub blocks: u64,
    /// Nanoseconds to load one token's KV into an instance (each GPU its shard).
    pub ns_per_token: f64,
}

/// The cluster's host-memory pool of prompt blocks (Mooncake's DRAM tier), least
/// recently used evicted first.
#[derive(Debug, Default)]
pub struct HostTier {
    /// Hashed blocks it holds at most.
    capacity: u64,
    /// Each block's last use.
    last: HashMap<u64, u64>,
    /// Blocks by (last use, hash): the first goes first.
    order: BTreeSet<(u64, u64)>,
    clock: u64,
    /// Prompt tokens loaded from it instead of computed.
    pub hit_tokens: u64,
    /// Seconds of iterations spent loading them.
    pub load_secs: f64,
    /// Blocks evicted.
    pub evictions: u64,
}

impl HostTier {
    /// An empty pool of `capacity` hashed blocks.
    pub fn new(capacity: u64) -> HostTier {
        HostTier {
            capacity,
            ..HostTier::default()
        }
    }

    /// How many of `hashes`, from the first, it holds.
    pub fn leading(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.last.contains_key(h))
            .count()
    }

    /// Marks `hashes` used now, adding those it lacks and evicting the least recently
    /// used past its capacity.
    pub fn touch(&mut self, hashes: &[u64]) {
        for &h in hashes {
            if let Some(t) = self.last.insert(h, self.clock) {
                self.order.remove(&(t, h));
            }
            self.order.insert((self.clock, h));
            self.clock += 1;
        }
        while self.last.len() as u64 > self.capacity {
            let Some((_, h)) = self.order.pop_first() else {
                break;
            };
            self.last.remove(&h);
            self.evictions += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(input: u32, prefix: (u32, u32)) -> Request {
        Request {
            arrival: 0,
            input,
            output: 1,
            priority: 0,
            prefix,
        }
    }

    #[test]
    fn the_host_tier_keeps_the_most_recently_used_blocks() {
        let mut t = HostTier::new(3);
        t.touch(&[1, 2, 3]);
        assert_eq!(t.leading(&[1, 2, 3, 4]), 3);
        // Block 1 used again, then 4 added: 2 is the least recently used and goes.
        t.touch(&[1]);
        t.touch(&[4]);
        assert_eq!((t.leading(&[1, 2]), t.leading(&[3, 4, 1])), (1, 3));
        assert_eq!(t.evictions, 1);
    }

    #[test]
    fn reuses_leading_blocks_and_evicts_least_recently_released() {
        let table = Arc::new(Prefixes {
            block_tokens: 32,
            hashes: vec![1, 2, 3, 1, 2, 9, 7],
        });
        let mut c = PrefixCache::new(table, 16);
        let a = req(100, (0, 3)); // blocks 1 2 3 (96 tokens full)
        let b = req(70, (3, 3)); // blocks 1 2 9, only two full
        let d = req(40, (6, 1));
        assert_eq!(c.lookup(&a, 100), (0, 0));
        c.acquire(&a, 0, 3);
        assert_eq!(c.lookup(&b, 70), (2, 64));
        c.release(&a, 3);
        assert_eq!(c.idle_blocks(), 6);
        // A whole cached prompt still recomputes its last token.
        let e = req(64, (0, 2));
        assert_eq!(c.lookup(&e, 64), (2, 63));
        // Block 3 was released first (tail first), so it goes first.
        c.fit(4);
        assert_eq!(c.evictions, 1);
        assert_eq!(c.lookup(&a, 100), (2, 64));
        c.acquire(&b, 0, 2);
        assert_eq!(c.idle_blocks(), 0);
        c.fit(0);
        assert_eq!(c.lookup(&b, 70), (2, 64), "pinned blocks are never evicted");
        c.acquire(&d, 0, 1);
        c.release(&d, 1);
        c.release(&b, 2);
        c.fit(2);
        assert_eq!(c.lookup(&d, 40), (0, 0), "released before blocks 1 and 2");
        assert_eq!(
            c.lookup(&a, 100),
            (1, 32),
            "the deeper block 2 goes before 1"
        );
    }
}

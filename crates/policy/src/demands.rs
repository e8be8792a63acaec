//! How many pending jobs want each GPU count: what a pass asks before it walks any job
//! (the smallest demand, and the sum, say whether anything can start or everything
//! fits). A job enters and leaves this count at every arrival and start, so it is kept
//! as an array for the counts jobs nearly always ask for, with a bit per count in use,
//! and an ordered map only for counts past that: as a map alone it was a tenth of an
//! SRTF event.

use std::collections::BTreeMap;

/// GPU counts below this are counted in the array.
const SMALL: usize = 256;

/// Pending jobs per GPU count.
#[derive(Clone, Debug)]
pub struct Demands {
    small: Box<[u32; SMALL]>,
    /// Bit `g` set when `small[g] > 0`.
    used: [u64; SMALL / 64],
    large: BTreeMap<u32, u32>,
    /// GPUs wanted by all counted jobs together.
    sum: u64,
}

impl Default for Demands {
    fn default() -> Self {
        Demands {
            small: Box::new([0; SMALL]),
            used: [0; SMALL / 64],
            large: BTreeMap::new(),
            sum: 0,
        }
    }
}

impl Demands {
    /// A job of `gpus` GPUs is pending.
    pub fn add(&mut self, gpus: u32) {
        self.sum += u64::from(gpus);
        match self.small.get_mut(gpus as usize) {
            Some(c) => {
                *c += 1;
                self.used[gpus as usize / 64] |= 1 << (gpus % 64);
            }
            None => *self.large.entry(gpus).or_default() += 1,
        }
    }

    /// A pending job of `gpus` GPUs is pending no more. A count with no jobs stays 0.
    pub fn remove(&mut self, gpus: u32) {
        let gone = match self.small.get_mut(gpus as usize) {
            Some(0) => false,
            Some(c) => {
                *c -= 1;
                if *c == 0 {
                    self.used[gpus as usize / 64] &= !(1 << (gpus % 64));
                }
                true
            }
            None => match self.large.get_mut(&gpus) {
                Some(c) => {
                    *c -= 1;
                    if *c == 0 {
                        self.large.remove(&gpus);
                    }
                    true
                }
                None => false,
            },
        };
        if gone {
            self.sum -= u64::from(gpus);
        }
    }

    /// The smallest GPU count a pending job wants.
    pub fn min(&self) -> Option<u32> {
        self.used
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| (i * 64) as u32 + w.trailing_zeros())
            .or_else(|| self.large.keys().next().copied())
    }

    /// GPUs wanted by all pending jobs together.
    pub fn sum(&self) -> u64 {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against an ordered map, over counts on both sides of the array's end and
    /// removals of counts that no job wants.
    #[test]
    fn counts_as_an_ordered_map_does() {
        let mut d = Demands::default();
        let mut m: BTreeMap<u32, u32> = BTreeMap::new();
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let g = match (x >> 33) % 4 {
                0 => (x >> 40) as u32 % 8,
                1 => 1 << ((x >> 40) % 10),
                2 => 250 + (x >> 40) as u32 % 12,
                _ => (x >> 40) as u32 % 100_000,
            };
            if (x >> 20) & 1 == 0 {
                d.add(g);
                *m.entry(g).or_default() += 1;
            } else {
                d.remove(g);
                if let Some(c) = m.get_mut(&g) {
                    *c -= 1;
                    if *c == 0 {
                        m.remove(&g);
                    }
                }
            }
            assert_eq!(d.min(), m.keys().next().copied());
            let sum: u64 = m.iter().map(|(g, c)| u64::from(*g) * u64::from(*c)).sum();
            assert_eq!(d.sum(), sum);
        }
    }
}

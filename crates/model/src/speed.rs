//! Measured slowdown of a job whose GPUs span several nodes ("spread") against the same
//! job packed on the fewest nodes ("consolidated").
//!
//! The table is plain data; loaders for Gavel's unconsolidated throughputs and Pollux's
//! placement profiles live in `apiary-trace`, and the simulator's placement-sensitive
//! throughput model reads it. Factors are keyed by model family, batch size (0 = any),
//! GPU count and node count (0 = any multi-node placement), so a coarse source (Gavel:
//! "unconsolidated") and a fine one (Pollux: the exact node count) share one lookup.

use std::collections::BTreeMap;

/// Speed factors (≤ 1) for multi-node placements.
#[derive(Clone, Debug, Default)]
pub struct SpreadTable {
    /// Human-readable source, for reports.
    pub source: String,
    families: BTreeMap<String, u32>,
    entries: BTreeMap<(u32, u32, u32, u32), f64>,
    /// Factor for a model the table does not know (1.0: no slowdown).
    pub unknown: f64,
}

/// Which table family a trace's model name belongs to, for names that are not table
/// keys themselves. Matching is on the lower-cased name with `-`, `_` and spaces removed:
/// the first entry whose key is a prefix of the name and whose family the table has.
/// Gavel's families come first, then Pollux's.
pub const FAMILY_ALIASES: &[(&str, &str)] = &[
    ("resnet18", "resnet18"),
    ("cifar", "resnet18"),
    ("resnet", "resnet50"),
    ("imagenet", "resnet50"),
    ("inception", "resnet50"),
    ("vgg", "resnet50"),
    ("yolo", "resnet50"),
    ("transformer", "transformer"),
    ("bert", "transformer"),
    ("gpt", "transformer"),
    ("lm", "lm"),
    ("lstm", "lm"),
    ("deepspeech", "lm"),
    ("recommendation", "recommendation"),
    ("ncf", "recommendation"),
    ("a3c", "a3c"),
    ("a2c", "a3c"),
    ("dqn", "a3c"),
    ("cyclegan", "cyclegan"),
    ("cifar", "cifar10"),
    ("resnet", "imagenet"),
    ("inception", "imagenet"),
    ("vgg", "imagenet"),
    ("transformer", "bert"),
    ("gpt", "bert"),
    ("deepspeech", "deepspeech2"),
    ("yolo", "yolov3"),
    ("recommendation", "ncf"),
];

fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

impl SpreadTable {
    /// An empty table from `source`.
    pub fn new(source: impl Into<String>) -> SpreadTable {
        SpreadTable {
            source: source.into(),
            unknown: 1.0,
            ..SpreadTable::default()
        }
    }

    fn family_id(&mut self, family: &str) -> u32 {
        let n = self.families.len() as u32;
        *self.families.entry(squash(family)).or_insert(n)
    }

    /// Records a factor. `batch` 0 means any batch size; `nodes` 0 means any placement on
    /// more than one node.
    pub fn insert(&mut self, family: &str, batch: u32, gpus: u32, nodes: u32, factor: f64) {
        let f = self.family_id(family);
        self.entries.insert((f, batch, gpus, nodes), factor);
    }

    /// Adds, for every (family, GPUs, nodes) that has per-batch entries but no batch-0
    /// entry, the geometric mean over batch sizes.
    pub fn fill_any_batch(&mut self) {
        let mut acc: BTreeMap<(u32, u32, u32), (f64, u32)> = BTreeMap::new();
        for (&(f, b, g, n), &v) in &self.entries {
            if b != 0 && v > 0.0 {
                let e = acc.entry((f, g, n)).or_insert((0.0, 0));
                e.0 += v.ln();
                e.1 += 1;
            }
        }
        for ((f, g, n), (s, k)) in acc {
            self.entries
                .entry((f, 0, g, n))
                .or_insert((s / k as f64).exp());
        }
    }

    /// Number of factors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table family of a model name, if any.
    pub fn family_of(&self, model: &str) -> Option<u32> {
        let s = squash(model);
        // Gavel job types carry the batch: "ResNet-18 (batch size 32)".
        let base = s.split('(').next().unwrap_or(&s);
        if let Some(&f) = self.families.get(base) {
            return Some(f);
        }
        FAMILY_ALIASES
            .iter()
            .filter(|(k, _)| base.starts_with(k))
            .find_map(|(_, fam)| self.families.get(*fam).copied())
    }

    /// Speed factor of a job of `model` with `gpus` GPUs and batch size `batch` on a
    /// placement spanning `nodes` nodes: 1 on one node; otherwise the entry for the
    /// largest measured GPU count ≤ `gpus` (exact batch first, then any batch) and the
    /// largest measured node count ≤ `nodes`; capped at 1 (spreading never speeds a job
    /// up; ratios above 1 in the sources are measurement noise).
    pub fn factor(&self, model: Option<&str>, batch: Option<u32>, gpus: u32, nodes: u32) -> f64 {
        if nodes <= 1 {
            return 1.0;
        }
        let Some(f) = model.and_then(|m| self.family_of(m)) else {
            return self.unknown.min(1.0);
        };
        let batch_from_name = model.and_then(|m| {
            let i = m.find("batch size ")?;
            m[i + 11..].trim_end_matches(')').trim().parse::<u32>().ok()
        });
        let batch = batch.or(batch_from_name);
        let mut g = gpus;
        while g >= 2 {
            for b in batch.into_iter().chain(std::iter::once(0)) {
                if let Some((_, &v)) = self
                    .entries
                    .range((f, b, g, 0)..=(f, b, g, nodes))
                    .next_back()
                {
                    return v.min(1.0);
                }
            }
            g = if g.is_power_of_two() {
                g / 2
            } else {
                1 << (31 - g.leading_zeros())
            };
        }
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_rules() {
        let mut t = SpreadTable::new("test");
        t.insert("ResNet-18", 32, 2, 0, 0.35);
        t.insert("ResNet-18", 64, 2, 0, 0.40);
        t.insert("ResNet-18", 64, 8, 0, 1.2);
        t.insert("bert", 0, 4, 2, 0.9);
        t.insert("bert", 0, 4, 4, 0.5);
        t.fill_any_batch();
        // One node: no slowdown.
        assert_eq!(t.factor(Some("resnet18"), Some(32), 2, 1), 1.0);
        // Exact batch, then any batch (geometric mean of 0.35 and 0.40).
        assert_eq!(t.factor(Some("resnet18"), Some(32), 2, 2), 0.35);
        let gm = (0.35f64 * 0.40).sqrt();
        assert!((t.factor(Some("resnet18"), None, 2, 3) - gm).abs() < 1e-12);
        // Gavel job-type names carry the batch.
        assert_eq!(
            t.factor(Some("ResNet-18 (batch size 64)"), None, 2, 2),
            0.40
        );
        // Above 1 is capped; 6 GPUs fall back to 4, then 2.
        assert_eq!(t.factor(Some("resnet18"), Some(64), 8, 2), 1.0);
        assert_eq!(t.factor(Some("resnet18"), Some(32), 6, 2), 0.35);
        // Node counts: the largest measured ≤ the placement's.
        assert_eq!(t.factor(Some("bert"), None, 4, 3), 0.9);
        assert_eq!(t.factor(Some("bert"), None, 4, 9), 0.5);
        // Unknown models use `unknown`.
        assert_eq!(t.factor(Some("vgg16"), None, 4, 2), 1.0);
        t.unknown = 0.8;
        assert_eq!(t.factor(None, None, 4, 2), 0.8);
    }
}

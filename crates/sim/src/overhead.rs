//! Per-model restart overheads profiled by the Muri authors (`overhead_dict` in their
//! simulator), in seconds, by GPU count; models not in the table cost 10 s.

use apiary_model::{SECOND, Time};

const MODELS: [&str; 8] = [
    "vgg16",
    "vgg19",
    "resnet18",
    "shufflenet_v2_x1_0",
    "bert",
    "gpt2",
    "a2c",
    "dqn",
];
const GPUS: [u32; 6] = [1, 2, 4, 8, 16, 32];
const TABLE: [[u64; 8]; 6] = [
    [7, 7, 4, 4, 10, 10, 38, 5],
    [7, 7, 5, 4, 10, 10, 39, 5],
    [8, 8, 5, 5, 10, 10, 39, 6],
    [9, 9, 7, 5, 10, 10, 46, 6],
    [9, 10, 7, 7, 10, 10, 46, 8],
    [10, 10, 7, 8, 10, 10, 46, 8],
];

/// Restart overhead of `model` on `gpus` GPUs; GPU counts between table rows use the row
/// below (larger than 32 uses the 32 row).
pub fn muri_restart_overhead(model: Option<&str>, gpus: u32) -> Time {
    let Some(m) = model.and_then(|m| MODELS.iter().position(|x| *x == m)) else {
        return 10 * SECOND;
    };
    let row = GPUS.iter().rposition(|&g| g <= gpus).unwrap_or(0);
    TABLE[row][m] * SECOND
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn table() {
        assert_eq!(muri_restart_overhead(Some("a2c"), 8), 46_000);
        assert_eq!(muri_restart_overhead(Some("resnet18"), 3), 5_000);
        assert_eq!(muri_restart_overhead(Some("vgg19"), 64), 10_000);
        assert_eq!(muri_restart_overhead(None, 1), 10_000);
        assert_eq!(muri_restart_overhead(Some("gpt3"), 1), 10_000);
    }
}

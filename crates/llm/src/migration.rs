//! The migration micro-benchmark (Llumnix §6.2, §7 item 1 of the research note): one
//! request of a given length decoding alone on one of two instances is moved to the
//! other, and the time it spends stopped is compared with the two ways of moving a
//! request without live migration.
//!
//! The live migration runs through the engine itself, with Llumnix's migration settings
//! and a policy that pairs the two instances until the request has moved, so the
//! figure is the one every cluster run uses. The baselines are costed in closed form
//! from the same models: *blocking copy* stops the request and sends all its KV in one
//! stage (one stage overhead plus the bytes over the migration bandwidth); *recompute*
//! drops it and prefills its tokens again on the idle destination (one prefill
//! iteration of the replica model).

use crate::LlmError;
use crate::engine::{Cluster, simulate};
use crate::hardware::{GpuSpec, MemoryPlan, ModelSpec, kv_blocks};
use crate::latency::{Batch, EngineKind, IterModel};
use crate::policy::{InstanceView, LlmPolicy, MigrationConfig};
use crate::replica::{Phase, ReplicaConfig};
use crate::workload::{Micros, Request};

/// One length's downtimes.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct MigrationPoint {
    /// Prompt tokens of the request moved.
    pub tokens: u32,
    /// Time the live-migrated request was stopped, seconds.
    pub live_downtime_s: f64,
    /// Copy stages of the live migration, the stop-the-world one included.
    pub stages: u64,
    /// First stage to commit, seconds.
    pub live_total_s: f64,
    /// Blocking copy: stopped while all its KV is sent, seconds.
    pub blocking_copy_s: f64,
    /// Recompute: its prompt prefilled again on the destination, seconds.
    pub recompute_s: f64,
}

/// Sends every request to instance 0 and pairs 0 with 1 until a request has moved.
struct MoveOnce {
    cfg: MigrationConfig,
    interval: Micros,
}

impl LlmPolicy for MoveOnce {
    fn dispatch(&mut self, _req: &Request, _view: &[InstanceView]) -> Option<u32> {
        Some(0)
    }

    fn interval(&self) -> Option<Micros> {
        Some(self.interval)
    }

    fn migration(&self) -> Option<MigrationConfig> {
        Some(self.cfg)
    }

    fn rebalance(&mut self, view: &[InstanceView], pairs: &mut Vec<(u32, u32)>) {
        if let [src, dst] = view
            && !src.migrating
            && dst.load.running == 0
        {
            pairs.push((src.id, dst.id));
        }
    }
}

/// Moves one request of `tokens` prompt tokens between two idle instances of `model`
/// on `tp` x `gpu`, with migration settings `cfg` polled every `interval`.
pub fn migration_point(
    model: &ModelSpec,
    gpu: &GpuSpec,
    tp: u32,
    tokens: u32,
    cfg: MigrationConfig,
    interval: Micros,
) -> Result<MigrationPoint, LlmError> {
    if tokens == 0 {
        return Err(LlmError::Invalid {
            what: "lengths",
            message: "a request of 0 tokens has nothing to move".into(),
        });
    }
    let blocks = kv_blocks(model, gpu, tp, MemoryPlan::default(), 16)?;
    let iter = IterModel::new(model, gpu, tp, 0.005, EngineKind::Sequential);
    // Enough output to outlast any migration: the copy of all its KV, in decode steps.
    let output = 1024;
    let replica = ReplicaConfig::vllm(blocks, tokens + output);
    if replica.blocks(tokens + output) + replica.watermark > blocks {
        return Err(LlmError::Invalid {
            what: "lengths",
            message: format!(
                "{tokens} tokens (plus {output} to generate) do not fit the {blocks} KV blocks of {} on {tp} x {}",
                model.name, gpu.name
            ),
        });
    }
    let per_gpu = model.kv_bytes_per_token / f64::from(tp);
    let cluster = Cluster {
        instances: 2,
        replica,
        model: iter.clone(),
        kv_bytes_per_token_per_gpu: per_gpu,
        prefix_cache: None,
        host_tier: None,
    };
    let req = Request {
        arrival: 0,
        input: tokens,
        output,
        priority: 0,
        prefix: (0, 0),
    };
    let mut policy = MoveOnce { cfg, interval };
    let o = simulate(&cluster, &[req], &[false], &mut policy, &mut |_, _| {})?;
    let q = &o.requests[0];
    if q.phase != Phase::Done || q.migrations != 1 {
        return Err(LlmError::Invalid {
            what: "migration",
            message: format!(
                "the request of {tokens} tokens did not move (migrations {}, aborted {}): raise bandwidth_gbs or max_stages",
                o.migrations, o.aborted_migrations
            ),
        });
    }
    let bytes = f64::from(replica.blocks(tokens) * replica.block_size) * per_gpu;
    let prefill = iter.cost(&Batch {
        prefill_tokens: u64::from(tokens),
        prefill_pairs: f64::from(tokens) * (f64::from(tokens) + 1.0) / 2.0,
        logits: 1,
        ..Batch::default()
    });
    Ok(MigrationPoint {
        tokens,
        live_downtime_s: q.downtime as f64 / 1e6,
        stages: o.migration_stages,
        live_total_s: o.migration_secs,
        blocking_copy_s: cfg.stage_overhead as f64 / 1e6 + bytes / cfg.bandwidth,
        recompute_s: prefill.secs,
    })
}

//! Policies that let a host policy decide GPUs and then allocate a resource beside
//! them: SiloD (cache and remote bandwidth) and GoldMiner (CPUs for input pipelines).
//! The host keeps its own objective; the wrapper only adds its allocation after each
//! of the host's passes, through the one mechanism it declares. The parameters of a
//! hosted policy are written `KEY.NAME` (`host.backfill=true`, `intra.thresholds=...`),
//! and errors name them that way.

use crate::ctx::Ctx;
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::JobIdx;
use crate::{ParamError, Params, Policy, PolicyError};
use apiary_model::Cluster;

/// What a wrapper adds after its host's pass.
pub trait Allocator: Send {
    /// The wrapper's spec.
    const SPEC: &'static PolicySpec;
    /// The mechanism its allocation uses.
    const OWN: Capability;
    /// Allocates its resource to the jobs the host left running.
    fn allocate(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError>;
}

/// A host policy and the allocator after it.
pub struct Hosted<A> {
    host: Box<dyn Policy>,
    alloc: A,
}

impl<A: Allocator> Hosted<A> {
    /// `alloc` after the one of `hosts` that parameter `key` names, built from its
    /// `key.NAME` parameters.
    pub fn new(
        p: &Params,
        key: &ParamSpec,
        hosts: &[&PolicySpec],
        alloc: A,
    ) -> Result<Hosted<A>, ParamError> {
        let name = p.text(key);
        let spec = hosts.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = hosts.iter().map(|s| s.name).collect();
            ParamError::Bad {
                key: key.key.into(),
                value: name.into(),
                message: format!("expected one of {}", names.join(", ")),
            }
        })?;
        let host = spec
            .build_checked(&hosted_params(p, key.key))
            .map_err(|e| prefixed(e, key.key))?;
        Ok(Hosted { host, alloc })
    }
}

/// The `prefix.NAME` parameters of `p`, as the hosted policy reads them (`NAME`).
pub fn hosted_params(p: &Params, prefix: &str) -> Params {
    let prefix = format!("{prefix}.");
    Params(
        p.0.iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
            .collect(),
    )
}

/// A hosted policy's parameter error, naming the key as the user wrote it
/// (`prefix.NAME`).
pub fn prefixed(e: ParamError, prefix: &str) -> ParamError {
    match e {
        ParamError::Bad {
            key,
            value,
            message,
        } => ParamError::Bad {
            key: format!("{prefix}.{key}"),
            value,
            message,
        },
        ParamError::Unknown {
            policy,
            key,
            hint,
            known,
        } => ParamError::Unknown {
            policy,
            key: format!("{prefix}.{key}"),
            hint,
            known,
        },
        other => other,
    }
}

impl<A> std::fmt::Debug for Hosted<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("host", &self.host.name())
            .finish()
    }
}

impl<A: Allocator> Policy for Hosted<A> {
    fn spec(&self) -> &'static PolicySpec {
        A::SPEC
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[A::OWN]).union(self.host.capabilities())
    }
    fn attach(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        self.host.attach(cluster)
    }
    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.host.admit(ctx, j)
    }
    fn on_finish(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        self.host.on_finish(ctx, j)
    }
    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        self.host.on_requeue(ctx, j)
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        self.host.schedule(ctx)?;
        self.alloc.allocate(ctx)
    }
}

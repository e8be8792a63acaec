//! What a policy declares about itself: its name, its parameters, and the capabilities
//! (extension points) it uses beyond the core contract.
//!
//! The core contract is small: read the view, start a job on GPUs the placement chose
//! ([`crate::Ctx::start_with`]), preempt, ask to be woken. Everything else a paper
//! needed (shared GPUs, guests, elastic jobs, admission control, ...) is a
//! [`Capability`] the policy's [`PolicySpec`] declares (and an instance reports with
//! [`crate::Policy::capabilities`]), in the spirit of the Kubernetes scheduler
//! framework's extension points, reached through a handle that opens only when
//! declared ([`crate::Ctx::open`]). Drivers read the declaration to know what they must
//! host (and refuse what they cannot, naming the capability); a mechanism opened
//! undeclared is an error, never a silent `false`.

use crate::{ParamError, Params, Policy};
pub use apiary_core::params::ParamSpec;

/// One mechanism beyond the core contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capability {
    /// Starts jobs on GPUs it picks itself ([`crate::ctx::Gpus`]), not through the
    /// driver's (or a tenant's) placement.
    ChoosesGpus,
    /// Starts groups of jobs on the same GPUs ([`crate::ctx::Groups`], Muri).
    SharedGpus,
    /// Runs guests on GPUs it does not hold ([`crate::ctx::Guests`], AntMan).
    Guests,
    /// Scales a job's modelled speed ([`crate::ctx::Speeds`]).
    SpeedFactors,
    /// Changes a running job's GPUs or count in place ([`crate::ctx::Elastic`]).
    Elastic,
    /// Charges a running job a pause for rescaling or switching, or stops its
    /// progress at a time ([`crate::ctx::Stalls`]).
    Stalls,
    /// Keeps a finished job's GPUs to its plan's end, ends it there
    /// with work left, or judges its deadline there ([`crate::ctx::Holds`]).
    Holds,
    /// Turns pending jobs away for good ([`crate::ctx::Admission`]).
    Declines,
    /// Hosts adaptive jobs that tune their batch size to their GPUs (Pollux).
    Adaptive,
    /// Reads job durations, an oracle a real scheduler lacks.
    Durations,
    /// Reads per-job stage profiles (Muri): jobs without one get one drawn.
    Profiles,
    /// Reads per-job throughput tables by GPU count (ElasticFlow).
    Scaling,
    /// Divides the cluster among tenants (VCs) from a table the driver gives.
    Tenants,
    /// Plans on the whole cluster's layout (Themis refills an emptied cluster), so a
    /// tenant's share, which has no layout of its own, cannot host it.
    WholeCluster,
    /// Reads the run's jobs not yet submitted ([`crate::ctx::Lookahead`]), as its artifact
    /// does: how many are still to come (Gavel, Gandiva's ElasticFlow clock), or the
    /// whole trace's GPU-time distribution (Tiresias' Gittins index). The simulator's
    /// world holds the whole trace; live, only the jobs submitted so far, so there the
    /// policy sees no future.
    Lookahead,
    /// Reads the grid's carbon intensity over time ([`crate::ctx::Carbon`]): the run's
    /// series in the simulator, the file the server re-reads live.
    Carbon,
    /// Allocates cache and remote-storage bandwidth to jobs ([`crate::ctx::Io`],
    /// SiloD): the driver's IO model runs them at what it gives. Live, the agents hand
    /// each job its share (`APIARY_IO`) for its data loader or cache to keep to.
    Io,
    /// Allocates CPUs from the cluster's pool to jobs' input pipelines
    /// ([`crate::ctx::Cpus`], GoldMiner's data workers): the driver's CPU model runs
    /// them at what it gives. Live, the pool is the nodes' CPUs (`cpus` in the server's
    /// config) and each agent pins its part of a job to its share of them, so data
    /// workers do not leave the job's nodes.
    CpuWorkers,
    /// Sets each job's GPU power limit ([`crate::ctx::Power`], GreenFlow's GPU-level
    /// knob): the driver runs and charges it at Zeus's time and power for the limit.
    /// Live, each agent sets the limit on the job's GPUs with `nvidia-smi -pl`.
    PowerLimits,
    /// Runs offline jobs beside online services on their GPUs, setting each GPU's SM
    /// share and evicting on load spikes ([`crate::ctx::Online`], MuxFlow): the
    /// driver's online model runs them at what the share and the service leave.
    OnlineSharing,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 20] = [
        Capability::ChoosesGpus,
        Capability::SharedGpus,
        Capability::Guests,
        Capability::SpeedFactors,
        Capability::Elastic,
        Capability::Stalls,
        Capability::Holds,
        Capability::Declines,
        Capability::Adaptive,
        Capability::Durations,
        Capability::Profiles,
        Capability::Scaling,
        Capability::Tenants,
        Capability::WholeCluster,
        Capability::Lookahead,
        Capability::Carbon,
        Capability::Io,
        Capability::CpuWorkers,
        Capability::PowerLimits,
        Capability::OnlineSharing,
    ];

    /// Its name in `apiary policies` and error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Capability::ChoosesGpus => "chooses-gpus",
            Capability::SharedGpus => "shared-gpus",
            Capability::Guests => "guests",
            Capability::SpeedFactors => "speed-factors",
            Capability::Elastic => "elastic",
            Capability::Stalls => "stalls",
            Capability::Holds => "holds",
            Capability::Declines => "declines",
            Capability::Adaptive => "adaptive",
            Capability::Durations => "durations",
            Capability::Profiles => "profiles",
            Capability::Scaling => "scaling",
            Capability::Tenants => "tenants",
            Capability::WholeCluster => "whole-cluster",
            Capability::Lookahead => "lookahead",
            Capability::Carbon => "carbon",
            Capability::Io => "io",
            Capability::CpuWorkers => "cpu-workers",
            Capability::PowerLimits => "power-limits",
            Capability::OnlineSharing => "online-sharing",
        }
    }

    const fn bit(self) -> u32 {
        1 << self as u32
    }

    /// Whether a policy with it can run inside one tenant's share (a VC), where GPUs
    /// come from the tenant's placer and the tenant's view is all there is.
    pub const fn in_tenant(self) -> bool {
        matches!(
            self,
            Capability::Durations | Capability::Lookahead | Capability::Carbon
        )
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of capabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities(u32);

impl Capabilities {
    /// The core contract only.
    pub const CORE: Capabilities = Capabilities(0);

    /// The set of `list`.
    pub const fn of(list: &[Capability]) -> Capabilities {
        let mut bits = 0;
        let mut i = 0;
        while i < list.len() {
            bits |= list[i].bit();
            i += 1;
        }
        Capabilities(bits)
    }

    /// Whether `c` is in the set.
    pub const fn has(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }

    /// Those of `self` and those of `other`.
    pub const fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    /// Those of `self` that `other` lacks.
    pub const fn minus(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & !other.0)
    }

    /// Whether every member of `other` is in `self`.
    pub const fn contains(self, other: Capabilities) -> bool {
        other.0 & !self.0 == 0
    }

    /// The members, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.has(*c))
    }

    /// The first member that keeps a policy from running inside a tenant's share.
    pub fn tenant_blocker(self) -> Option<Capability> {
        self.iter().find(|c| !c.in_tenant())
    }
}

impl std::fmt::Display for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for c in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            f.write_str(c.name())?;
        }
        if first {
            f.write_str("core")?;
        }
        Ok(())
    }
}

/// A policy's declaration: `apiary policies`, the docs, parameter validation and the
/// drivers all read it.
#[derive(Debug)]
pub struct PolicySpec {
    /// Name on the command line.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// What it uses beyond the core contract.
    pub capabilities: Capabilities,
    /// Parameters.
    pub params: &'static [ParamSpec],
    /// Constructor.
    pub build: fn(&Params) -> Result<Box<dyn Policy>, ParamError>,
}

impl PolicySpec {
    /// Whether it declares `c`.
    pub const fn has(&self, c: Capability) -> bool {
        self.capabilities.has(c)
    }

    /// Its parameter keys.
    pub fn keys(&self) -> Vec<&'static str> {
        self.params.iter().map(|p| p.key).collect()
    }

    /// Builds it, rejecting keys it does not take.
    pub fn build_checked(&self, params: &Params) -> Result<Box<dyn Policy>, ParamError> {
        params.check_known(self.name, &self.keys())?;
        (self.build)(params)
    }
}

impl apiary_core::Spec for PolicySpec {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn params(&self) -> &'static [ParamSpec] {
        self.params
    }
}

/// `backfill`, off by default.
pub const BACKFILL_OFF: ParamSpec = ParamSpec {
    key: "backfill",
    default: "false",
    about: "start later jobs that fit when the head of the queue does not",
};
/// `backfill`, on by default.
pub const BACKFILL_ON: ParamSpec = ParamSpec {
    key: "backfill",
    default: "true",
    about: "start lower-priority jobs that fit past one that does not (the artifacts' first-fit)",
};
/// `placement`, consolidated by default.
pub const PLACE_CONS: ParamSpec = ParamSpec {
    key: "placement",
    default: "consolidated",
    about: "counting | consolidated (yarn) | best-fit | random | topology",
};
/// `placement`, counting by default.
pub const PLACE_COUNT: ParamSpec = ParamSpec {
    key: "placement",
    default: "counting",
    about: "counting | consolidated (yarn) | best-fit | random | topology",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_they_were_given() {
        let s = Capabilities::of(&[Capability::Elastic, Capability::Durations]);
        assert!(s.has(Capability::Elastic) && s.has(Capability::Durations));
        assert!(!s.has(Capability::Guests));
        assert_eq!(s.to_string(), "elastic, durations");
        assert_eq!(Capabilities::CORE.to_string(), "core");
        assert_eq!(s.tenant_blocker(), Some(Capability::Elastic));
        assert_eq!(
            Capabilities::of(&[Capability::Durations]).tenant_blocker(),
            None
        );
        for (i, c) in Capability::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "ALL is in declaration order");
        }
    }
}

//! The list of built-in policies. Each policy's module declares its own
//! [`PolicySpec`]; `apiary policies`, the docs, parameter validation and the drivers
//! read them from here.

use crate::spec::PolicySpec;
use crate::{ParamError, Params, Policy};
use crate::{
    antman, carbon, carbon_window, elasticflow, fifo, gandiva, gavel, goldminer, greenflow, muri,
    muxflow, plugin, pollux, silod, srtf, themis, tiresias, vc,
};
use apiary_core::Registry;

/// Every policy, with the lookups front ends need.
pub const POLICIES: Registry<PolicySpec> = Registry::new("policy", "apiary policies", ALL);

/// Every policy a name on the command line can pick: the built-in ones, then the bridge
/// to policies written in other languages (`plugin`), which needs a command to run.
pub const ALL: &[PolicySpec] = &[
    fifo::FIFO,
    fifo::SJF,
    srtf::SRTF,
    srtf::SRSF,
    tiresias::TIRESIAS,
    tiresias::TIRESIAS_GITTINS,
    gandiva::GANDIVA,
    muri::MURI_S,
    muri::MURI_L,
    themis::THEMIS,
    antman::ANTMAN,
    gavel::GAVEL,
    gavel::GAVEL_MAKESPAN,
    elasticflow::ELASTICFLOW,
    elasticflow::EDF,
    pollux::POLLUX,
    vc::HIVED,
    vc::QUOTA,
    vc::PRIVATE,
    carbon::CARBON_PAUSE,
    carbon_window::CARBON_WINDOW,
    greenflow::GREENFLOW,
    silod::SILOD,
    goldminer::GOLDMINER,
    muxflow::MUXFLOW,
    plugin::PLUGIN,
];

/// The policies implemented here, in Rust: every one of them builds with its defaults
/// and runs on any trace, which the conformance tests rely on. [`ALL`] less the plugin
/// bridge.
pub const BUILTIN: &[PolicySpec] = ALL.split_at(ALL.len() - 1).0;

/// Looks a policy up by name.
pub fn find(name: &str) -> Option<&'static PolicySpec> {
    POLICIES.find(name)
}

/// The error for a name no policy has, with the closest name when one is close.
pub fn unknown(name: &str) -> ParamError {
    POLICIES.unknown(name)
}

/// Builds a policy by name, rejecting unknown parameters.
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Policy>, ParamError> {
    (POLICIES.lookup(name, params)?.build)(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_policy_builds_with_defaults_and_rejects_typos() {
        for s in BUILTIN {
            let p = build(s.name, &Params::default()).unwrap();
            assert_eq!(p.name(), s.name);
            let bad = Params::from_pairs(["no_such_knob=1"]).unwrap();
            assert!(matches!(
                build(s.name, &bad),
                Err(ParamError::Unknown { .. })
            ));
        }
        assert!(build("nope", &Params::default()).is_err());
        let typo = build("tiresia", &Params::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            typo.starts_with("unknown policy 'tiresia' (did you mean 'tiresias'?)"),
            "{typo}"
        );
        let knob = Params::from_pairs(["starvaton=2"]).unwrap();
        let e = build("tiresias", &knob).err().unwrap().to_string();
        assert!(e.contains("(did you mean 'starvation'?)"), "{e}");
        let bad = Params::from_pairs(["placement=sideways"]).unwrap();
        assert!(build("fifo", &bad).is_err());
    }

    /// An instance uses what its spec declares, at most, whatever its parameters, and
    /// its name is its spec's: parameters change what it does, not what it is.
    #[test]
    fn instances_stay_within_their_specs_and_keep_their_names() {
        use crate::spec::{Capabilities, Capability};
        let variants: &[(&str, &str, Capabilities)] = &[
            ("tiresias", "", Capabilities::CORE),
            (
                "tiresias",
                "gittins=true",
                Capabilities::of(&[Capability::Lookahead]),
            ),
            ("tiresias-gittins", "gittins=false", Capabilities::CORE),
            ("gandiva", "", Capabilities::of(&[Capability::ChoosesGpus])),
            (
                "gandiva",
                "clock=elasticflow",
                crate::gandiva::GANDIVA.capabilities,
            ),
        ];
        for s in BUILTIN {
            let p = build(s.name, &Params::default()).unwrap();
            assert!(
                s.capabilities.contains(p.capabilities()),
                "{} uses {} beyond its spec's {}",
                s.name,
                p.capabilities().minus(s.capabilities),
                s.capabilities
            );
        }
        for &(name, params, caps) in variants {
            let params = Params::from_pairs(params.split(',').filter(|p| !p.is_empty())).unwrap();
            let p = build(name, &params).unwrap();
            assert_eq!(p.name(), name, "{name} {params:?} keeps its name");
            assert_eq!(p.capabilities(), caps, "{name} {params:?}");
            assert!(find(name).unwrap().capabilities.contains(caps));
        }
    }

    /// Every policy a VC hosts can be hosted: its capabilities are ones a tenant's
    /// share can serve. (Listing a new plain policy there is a choice, not a duty.)
    #[test]
    fn the_intra_list_holds_only_what_the_capabilities_allow() {
        for s in crate::vc::INTRA {
            assert_eq!(
                s.capabilities.tenant_blocker(),
                None,
                "{} cannot run inside a tenant's share",
                s.name
            );
            assert!(find(s.name).is_some(), "{} is not registered", s.name);
        }
    }

    /// The core context stays small: every mechanism beyond it is a handle of its own
    /// module, not a new method.
    #[test]
    fn the_core_context_has_at_most_22_methods() {
        let src = include_str!("ctx/mod.rs");
        let core = &src[src.find("impl<'a> Ctx<'a> {").unwrap()..];
        let core = &core[..core.find("\n}\n").unwrap()];
        let methods = core.matches("\n    pub fn ").count();
        assert!(methods <= 22, "Ctx has {methods} public methods");
    }

    /// Every policy has a page under docs/policies/ that names it in backticks in its
    /// title.
    #[test]
    fn every_policy_has_a_docs_page() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/policies");
        let titles: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .map(|p| {
                std::fs::read_to_string(&p)
                    .unwrap()
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        for s in BUILTIN {
            let named = format!("`{}`", s.name);
            assert!(
                titles
                    .iter()
                    .any(|t| t.starts_with("# ") && t.contains(&named)),
                "no page under docs/policies/ names {named} in its title"
            );
        }
    }

    /// Every time parameter (in seconds) beyond the 10^12 s input limit, and every
    /// count that sizes a search, is refused by name instead of wrapping the clock or
    /// exhausting memory.
    #[test]
    fn absurd_time_and_size_parameters_are_refused() {
        let huge = "1e300";
        for (policy, key) in [
            ("gavel", "round"),
            ("gavel", "reset"),
            ("pollux", "interval"),
            ("tiresias", "thresholds"),
            ("tiresias-gittins", "gittins_delta"),
            ("gandiva", "quantum"),
            ("gandiva", "tick"),
            ("elasticflow", "slot"),
            ("pollux", "population"),
            ("pollux", "generations"),
        ] {
            let value = if matches!(key, "slot" | "population" | "generations") {
                "1000000000000000000"
            } else {
                huge
            };
            let p = Params::from_pairs([format!("{key}={value}").as_str()]).unwrap();
            match build(policy, &p) {
                Err(ParamError::Bad { key: k, .. }) => assert_eq!(k, key, "{policy}"),
                Err(e) => panic!("{policy} {key}: {e}"),
                Ok(_) => panic!("{policy} accepted {key}={value}"),
            }
        }
        let ok = Params::from_pairs(["thresholds=1,1000000000000"]).unwrap();
        assert!(build("tiresias", &ok).is_ok());
    }
}

//! The list of built-in policies. Each policy's module declares its own
//! [`PolicySpec`]; `apiary policies`, the docs, parameter validation and the drivers
//! read them from here.

use crate::spec::PolicySpec;
use crate::{ParamError, Params, Policy};
use crate::{antman, elasticflow, fifo, gandiva, gavel, muri, pollux, srtf, themis, tiresias, vc};

/// Every built-in policy.
pub const BUILTIN: &[PolicySpec] = &[
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
];

/// Looks a policy up by name.
pub fn find(name: &str) -> Option<&'static PolicySpec> {
    BUILTIN.iter().find(|s| s.name == name)
}

/// The error for a name no policy has, with the closest name when one is close.
pub fn unknown(name: &str) -> ParamError {
    let names = || BUILTIN.iter().map(|s| s.name);
    ParamError::UnknownPolicy {
        name: name.into(),
        hint: crate::params::did_you_mean(name, names()),
        known: names().collect::<Vec<_>>().join(", "),
    }
}

/// Builds a policy by name, rejecting unknown parameters.
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Policy>, ParamError> {
    let spec = find(name).ok_or_else(|| unknown(name))?;
    spec.build_checked(params)
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
        let index = include_str!("../../../docs/policies/README.md");
        for s in BUILTIN {
            assert!(
                index.contains(&format!(" {},", s.name))
                    || index.contains(&format!(" {} ", s.name)),
                "docs/policies/README.md does not list {}",
                s.name
            );
        }
        let bad = Params::from_pairs(["placement=sideways"]).unwrap();
        assert!(build("fifo", &bad).is_err());
    }

    /// The policies a VC can host are exactly those whose capabilities a tenant's
    /// share can serve.
    #[test]
    fn the_intra_list_is_what_the_capabilities_allow() {
        let hostable: Vec<&str> = BUILTIN
            .iter()
            .filter(|s| s.capabilities.tenant_blocker().is_none())
            .map(|s| s.name)
            .collect();
        let intra: Vec<&str> = crate::vc::INTRA.iter().map(|s| s.name).collect();
        assert_eq!(intra, hostable);
        let live: Vec<&str> = BUILTIN
            .iter()
            .filter(|s| s.capabilities.live_blocker().is_some())
            .map(|s| s.name)
            .collect();
        assert_eq!(live, ["elasticflow", "edf", "pollux"]);
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

//! Policies with their own parameters, as `-p` names them: `tiresias`,
//! `tiresias:starvation=2`, `tiresias:starvation=2,queues=3` (a piece with `=` and no
//! policy name continues the setting before it), so one comparison can hold a policy
//! beside itself with other settings. `--set` adds parameters to every policy that has
//! them, and is an error only when none has.

use anyhow::{Result, bail};
use apiary_policy::params::did_you_mean;
use apiary_policy::{Params, registry};

/// One policy with its own parameters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Setting {
    /// How tables and files name it: the text given.
    pub label: String,
    /// The policy.
    pub policy: String,
    /// Its own `key=value` pairs.
    pub own: Vec<String>,
}

impl Setting {
    /// The label as a file-name prefix: `tiresias@starvation=2+queues=3`.
    pub fn file_stem(&self) -> String {
        self.label.replacen(':', "@", 1).replace([',', '/'], "+")
    }
}

/// The settings `text` names, in order.
pub(crate) fn parse(text: &str) -> Result<Vec<Setting>> {
    let mut out: Vec<Setting> = Vec::new();
    for piece in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, own) = match piece.split_once(':') {
            Some((n, rest)) => (n.trim(), Some(rest.trim())),
            None if piece.contains('=') => {
                let Some(last) = out.last_mut() else {
                    bail!("'{piece}' in --policies follows no policy (write policy:{piece})");
                };
                last.own.push(piece.to_string());
                last.label = format!("{},{piece}", last.label);
                continue;
            }
            None => (piece, None),
        };
        if registry::find(name).is_none() {
            return Err(registry::unknown(name).into());
        }
        let own: Vec<String> = own
            .into_iter()
            .filter(|o| !o.is_empty())
            .map(String::from)
            .collect();
        if let Some(bad) = own.iter().find(|o| !o.contains('=')) {
            bail!("'{bad}' in '{piece}' is not key=value");
        }
        out.push(Setting {
            label: piece.to_string(),
            policy: name.to_string(),
            own,
        });
    }
    if out.is_empty() {
        bail!("no policy given");
    }
    for (i, s) in out.iter().enumerate() {
        if out[..i].iter().any(|o| o.label == s.label) {
            bail!("'{}' appears twice in --policies", s.label);
        }
    }
    Ok(out)
}

/// The parameters `s` runs with: the `--set` pairs its policy has, then its own (which
/// win). A `--set` key that no policy of `all` has is an error naming the closest key.
pub(crate) fn params(s: &Setting, set: &[String], all: &[Setting]) -> Result<Params> {
    let key = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).trim().to_string();
    let admits = |policy: &str, k: &str| {
        registry::find(policy).is_some_and(|spec| {
            spec.keys().iter().any(|n| match n.strip_suffix('*') {
                Some(prefix) => k.starts_with(prefix),
                None => *n == k,
            })
        })
    };
    for kv in set {
        let k = key(kv);
        if !all.iter().any(|o| admits(&o.policy, &k)) {
            let mut keys: Vec<&str> = all
                .iter()
                .filter_map(|o| registry::find(&o.policy))
                .flat_map(|spec| spec.keys())
                .collect();
            keys.sort_unstable();
            keys.dedup();
            let names: Vec<&str> = all.iter().map(|o| o.policy.as_str()).collect();
            bail!(
                "--set {kv}: no policy here has a parameter '{k}'{} ({} take: {})",
                did_you_mean(&k, keys.iter().copied()),
                names.join(", "),
                if keys.is_empty() {
                    "nothing".to_string()
                } else {
                    keys.join(", ")
                }
            );
        }
    }
    let mine = set
        .iter()
        .filter(|kv| admits(&s.policy, &key(kv)))
        .chain(&s.own)
        .map(String::as_str);
    Ok(Params::from_pairs(mine)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_can_sit_beside_itself_with_other_settings() {
        let s = parse("tiresias, tiresias:starvation=2,queues=3 ,fifo").unwrap();
        let labels: Vec<&str> = s.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(
            labels,
            ["tiresias", "tiresias:starvation=2,queues=3", "fifo"]
        );
        assert_eq!(s[1].own, ["starvation=2", "queues=3"]);
        assert_eq!(s[1].file_stem(), "tiresias@starvation=2+queues=3");
        let e = parse("fifo,tiresia").unwrap_err().to_string();
        assert!(e.contains("did you mean 'tiresias'?"), "{e}");
        assert!(parse("fifo,fifo").is_err());
        assert!(parse("starvation=2").is_err());
    }

    #[test]
    fn set_reaches_the_policies_that_have_the_key() {
        let all = parse("fifo,tiresias:starvation=3").unwrap();
        let set = vec!["starvation=2".to_string(), "placement=random".to_string()];
        let fifo = params(&all[0], &set, &all).unwrap();
        assert_eq!(fifo.0.get("starvation"), None);
        assert_eq!(fifo.0.get("placement").map(String::as_str), Some("random"));
        // The setting's own value wins over --set.
        let t = params(&all[1], &set, &all).unwrap();
        assert_eq!(t.0.get("starvation").map(String::as_str), Some("3"));
        let e = params(&all[0], &["starvaton=2".into()], &all)
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'starvation'?"), "{e}");
    }
}

//! Policies with their own parameters, as `-p` names them: `tiresias`,
//! `tiresias:starvation=2`, `tiresias:starvation=2,backfill=true` (a piece with `=` and
//! no policy name continues the setting before it), so one comparison can hold a policy
//! beside itself with other settings. A list value is written `key=[a,b]` or `key=a;b`
//! (`tiresias:thresholds=[1000,5000]`), since a bare comma starts the next piece.
//! `--set` adds parameters to every policy that has them, and is an error only when
//! none has.

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
    /// The label as a file-name prefix: `tiresias@thresholds=1000+5000+starvation=2`.
    pub fn file_stem(&self) -> String {
        self.label
            .replacen(':', "@", 1)
            .replace([',', '/', ';'], "+")
            .replace(['[', ']'], "")
    }
}

/// `text` cut at the commas outside brackets.
fn pieces(text: &str) -> Result<Vec<&str>> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| anyhow::anyhow!("unmatched ']' in '{text}'"))?;
            }
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        bail!("unmatched '[' in '{text}'");
    }
    out.push(&text[start..]);
    Ok(out
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect())
}

/// A `key=value` pair with a list written `[a,b]` or `a;b` turned into the `a,b` the
/// parameters read.
pub(crate) fn list_value(kv: &str) -> String {
    match kv.split_once('=') {
        Some((k, v)) => {
            let v = v.trim();
            let v = v
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix(']'))
                .unwrap_or(v);
            let items: Vec<&str> = v.split([',', ';']).map(str::trim).collect();
            format!("{}={}", k.trim(), items.join(","))
        }
        None => kv.to_string(),
    }
}

/// The settings `text` names, in order.
pub(crate) fn parse(text: &str) -> Result<Vec<Setting>> {
    let mut out: Vec<Setting> = Vec::new();
    for piece in pieces(text)? {
        let (name, own) = match piece.split_once(':') {
            Some((n, rest)) => (n.trim(), Some(rest.trim())),
            None if piece.contains('=') => {
                let Some(last) = out.last_mut() else {
                    bail!("'{piece}' in --policies follows no policy (write policy:{piece})");
                };
                last.own.push(list_value(piece));
                last.label = format!("{},{piece}", last.label);
                continue;
            }
            None => (piece, None),
        };
        if registry::find(name).is_none() {
            if own.is_none()
                && let Some(last) = out.last()
                && let Some(kv) = last.own.last()
            {
                bail!(
                    "'{piece}' in --policies is not a policy; if it continues {kv}'s list, \
                     write {}=[{},{piece}] (or {0}={1};{piece})",
                    kv.split_once('=').map_or("", |x| x.0),
                    kv.split_once('=').map_or("", |x| x.1),
                );
            }
            return Err(registry::unknown(name).into());
        }
        let own: Vec<String> = own
            .into_iter()
            .filter(|o| !o.is_empty())
            .map(list_value)
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
    let set: Vec<String> = set.iter().map(|kv| list_value(kv)).collect();
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
        let s = parse("tiresias, tiresias:starvation=2,backfill=true ,fifo").unwrap();
        let labels: Vec<&str> = s.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(
            labels,
            ["tiresias", "tiresias:starvation=2,backfill=true", "fifo"]
        );
        assert_eq!(s[1].own, ["starvation=2", "backfill=true"]);
        assert_eq!(s[1].file_stem(), "tiresias@starvation=2+backfill=true");
        let e = parse("fifo,tiresia").unwrap_err().to_string();
        assert!(e.contains("did you mean 'tiresias'?"), "{e}");
        assert!(parse("fifo,fifo").is_err());
        assert!(parse("starvation=2").is_err());
    }

    #[test]
    fn list_values_are_written_in_brackets_or_with_semicolons() {
        let s = parse(
            "fifo,tiresias:thresholds=[1000,5000],starvation=2,tiresias:thresholds=1000;9000",
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].own, ["thresholds=1000,5000", "starvation=2"]);
        assert_eq!(
            s[1].file_stem(),
            "tiresias@thresholds=1000+5000+starvation=2"
        );
        assert_eq!(s[2].own, ["thresholds=1000,9000"]);
        let p = params(&s[1], &[], &s).unwrap();
        assert_eq!(p.0.get("thresholds").map(String::as_str), Some("1000,5000"));
        // A bare comma inside a list is the next piece: the error shows how to write it.
        let e = parse("fifo,tiresias:thresholds=1000,5000")
            .unwrap_err()
            .to_string();
        assert!(e.contains("thresholds=[1000,5000]"), "{e}");
        assert!(parse("tiresias:thresholds=[1000,5000").is_err());
        // --set takes the same forms.
        let all = parse("tiresias").unwrap();
        let p = params(&all[0], &["thresholds=[10,20]".into()], &all).unwrap();
        assert_eq!(p.0.get("thresholds").map(String::as_str), Some("10,20"));
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

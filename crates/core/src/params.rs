//! Parameters from `--set key=value` or a config file, checked against the spec of
//! what they configure (a policy, an LLM scheduler) so a typo is an error, not a
//! silently ignored knob.
//!
//! A parameter's default is written once, as text in its [`ParamSpec`]: the readers
//! parse it with the same parser as a value the user gives, so what `apiary policies`
//! and the docs print is what the code runs with.

use crate::time::Time;
use std::collections::BTreeMap;

fn secs_at_least(key: &str, v: f64, min: f64) -> Result<Time, ParamError> {
    match crate::time::secs_f64(v) {
        Some(ms) if v >= min => Ok(ms),
        _ => Err(ParamError::Bad {
            key: key.into(),
            value: v.to_string(),
            message: if min > 0.0 {
                format!("expected seconds, at least {min} and at most 10^12")
            } else {
                "expected seconds, at most 10^12".into()
            },
        }),
    }
}

/// A parameter that could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamError {
    /// Not a parameter of this policy.
    #[error("policy '{policy}' has no parameter '{key}'{hint} (it takes: {known})")]
    Unknown {
        /// The policy.
        policy: String,
        /// The key given.
        key: String,
        /// ` (did you mean 'x'?)` when a known key is close, else empty.
        hint: String,
        /// The keys it accepts.
        known: String,
    },
    /// Nothing in a registry has this name.
    #[error("unknown {what} '{name}'{hint} (known: {known}; see `{listing}`)")]
    UnknownName {
        /// What the registry holds ("policy", "LLM policy").
        what: &'static str,
        /// The command that lists them.
        listing: &'static str,
        /// The name given.
        name: String,
        /// ` (did you mean 'x'?)` when a known name is close, else empty.
        hint: String,
        /// The names there are.
        known: String,
    },
    /// The value did not parse.
    #[error("parameter '{key}' = '{value}': {message}")]
    Bad {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What was expected.
        message: String,
    },
}

/// The candidate closest to `word` by edit distance, when it is close enough to be a
/// typo of it (at most a third of its letters off, and at least one).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w: Vec<char> = word.to_lowercase().chars().collect();
    let limit = (w.len() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| {
            (
                edit_distance(&w, &c.to_lowercase().chars().collect::<Vec<_>>()),
                c,
            )
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, one row at a time.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// ` (did you mean 'x'?)` for the candidate closest to `word`, or nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates).map_or(String::new(), |c| format!(" (did you mean '{c}'?)"))
}

/// One parameter of a policy (or of anything a [`crate::Registry`] builds): its key, its
/// default and what it does.
#[derive(Debug)]
pub struct ParamSpec {
    /// Key for `--set key=value`.
    pub key: &'static str,
    /// Default, as the text a user would write; it is what the code reads when the key
    /// is not given. A default that is a rule over other parameters (read with
    /// [`Params::bool_given`]) is written as that rule.
    pub default: &'static str,
    /// What it does.
    pub about: &'static str,
}

/// Key-value parameters, in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(pub BTreeMap<String, String>);

impl Params {
    /// Parses `key=value` strings.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<Params, ParamError> {
        let mut m = BTreeMap::new();
        for p in pairs {
            let (k, v) = p.split_once('=').ok_or_else(|| ParamError::Bad {
                key: p.to_string(),
                value: String::new(),
                message: "expected key=value".into(),
            })?;
            m.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Params(m))
    }

    /// The value given for `spec`'s key, else its default.
    pub fn text<'a>(&'a self, spec: &'a ParamSpec) -> &'a str {
        self.0.get(spec.key).map_or(spec.default, String::as_str)
    }

    fn bad(spec: &ParamSpec, value: &str, message: impl Into<String>) -> ParamError {
        ParamError::Bad {
            key: spec.key.into(),
            value: value.into(),
            message: message.into(),
        }
    }

    fn parse<T: std::str::FromStr>(&self, spec: &ParamSpec, what: &str) -> Result<T, ParamError> {
        let v = self.text(spec);
        v.parse()
            .map_err(|_| Self::bad(spec, v, format!("expected {what}")))
    }

    /// A boolean (`true`/`false`).
    pub fn bool(&self, spec: &ParamSpec) -> Result<bool, ParamError> {
        self.parse(spec, "true or false")
    }
    /// A boolean if the key is given; `None` leaves the default to the caller's rule
    /// (the one `spec.default` describes).
    pub fn bool_given(&self, spec: &ParamSpec) -> Result<Option<bool>, ParamError> {
        self.0
            .contains_key(spec.key)
            .then(|| self.bool(spec))
            .transpose()
    }
    /// A non-negative float.
    pub fn f64(&self, spec: &ParamSpec) -> Result<f64, ParamError> {
        let v: f64 = self.parse(spec, "a number")?;
        if !v.is_finite() || v < 0.0 {
            return Err(Self::bad(
                spec,
                &v.to_string(),
                "expected a non-negative number",
            ));
        }
        Ok(v)
    }
    /// A finite number of either sign (a threshold that may be negative).
    pub fn signed(&self, spec: &ParamSpec) -> Result<f64, ParamError> {
        let v: f64 = self.parse(spec, "a number")?;
        if !v.is_finite() {
            return Err(Self::bad(spec, &v.to_string(), "expected a finite number"));
        }
        Ok(v)
    }
    /// A non-negative integer.
    pub fn u64(&self, spec: &ParamSpec) -> Result<u64, ParamError> {
        self.parse(spec, "a non-negative integer")
    }
    /// An integer in `range` (counts that size allocations or loops).
    pub fn u64_in(
        &self,
        spec: &ParamSpec,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ParamError> {
        let v = self.u64(spec)?;
        if !range.contains(&v) {
            return Err(Self::bad(
                spec,
                &v.to_string(),
                format!("expected {}..={}", range.start(), range.end()),
            ));
        }
        Ok(v)
    }
    /// A duration given in seconds, at least `min` seconds and at most
    /// [`crate::time::MAX_INPUT`], as milliseconds.
    pub fn secs(&self, spec: &ParamSpec, min: f64) -> Result<Time, ParamError> {
        let v = self.f64(spec)?;
        secs_at_least(spec.key, v, min)
    }
    /// A comma-separated list of durations in seconds (each within
    /// [`crate::time::MAX_INPUT`]), as milliseconds.
    pub fn secs_list(&self, spec: &ParamSpec) -> Result<Vec<Time>, ParamError> {
        self.f64_list(spec)?
            .into_iter()
            .map(|v| secs_at_least(spec.key, v, 0.0))
            .collect()
    }
    /// A comma-separated list of non-negative numbers.
    pub fn f64_list(&self, spec: &ParamSpec) -> Result<Vec<f64>, ParamError> {
        let v = self.text(spec);
        v.split(',')
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && *f >= 0.0)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Self::bad(spec, v, "expected comma-separated non-negative numbers"))
    }
    /// One of the named `options`; an unknown name is an error that lists the accepted
    /// ones.
    pub fn choice<T: Copy>(
        &self,
        spec: &ParamSpec,
        options: &[(&str, T)],
    ) -> Result<T, ParamError> {
        let v = self.text(spec);
        options
            .iter()
            .find(|(name, _)| *name == v)
            .map(|&(_, t)| t)
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                Self::bad(spec, v, format!("expected one of: {}", names.join(", ")))
            })
    }
    /// A raw string.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Fails on any key not in `known`.
    pub fn check_known(&self, policy: &str, known: &[&str]) -> Result<(), ParamError> {
        for k in self.0.keys() {
            // `prefix.*` admits every `prefix.key` (passed on to a hosted policy).
            let admitted = known.iter().any(|&n| match n.strip_suffix('*') {
                Some(prefix) => k.starts_with(prefix),
                None => n == k,
            });
            if !admitted {
                return Err(ParamError::Unknown {
                    policy: policy.into(),
                    key: k.clone(),
                    hint: did_you_mean(k, known.iter().copied()),
                    known: if known.is_empty() {
                        "nothing".into()
                    } else {
                        known.join(", ")
                    },
                });
            }
        }
        Ok(())
    }
}

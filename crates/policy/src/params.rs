//! Policy parameters from `--set key=value` or a config file, checked against the
//! registry so a typo is an error, not a silently ignored knob.

use apiary_model::Time;
use std::collections::BTreeMap;

fn secs_at_least(key: &str, v: f64, min: f64) -> Result<Time, ParamError> {
    match apiary_model::time::secs_f64(v) {
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
    #[error("policy '{policy}' has no parameter '{key}' (it takes: {known})")]
    Unknown {
        /// The policy.
        policy: String,
        /// The key given.
        key: String,
        /// The keys it accepts.
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

    fn get<T: std::str::FromStr>(
        &self,
        key: &str,
        default: T,
        what: &str,
    ) -> Result<T, ParamError> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| ParamError::Bad {
                key: key.into(),
                value: v.clone(),
                message: format!("expected {what}"),
            }),
        }
    }

    /// A boolean (`true`/`false`).
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ParamError> {
        self.get(key, default, "true or false")
    }
    /// A non-negative float.
    pub fn f64(&self, key: &str, default: f64) -> Result<f64, ParamError> {
        let v: f64 = self.get(key, default, "a number")?;
        if !v.is_finite() || v < 0.0 {
            return Err(ParamError::Bad {
                key: key.into(),
                value: v.to_string(),
                message: "expected a non-negative number".into(),
            });
        }
        Ok(v)
    }
    /// A non-negative integer.
    pub fn u64(&self, key: &str, default: u64) -> Result<u64, ParamError> {
        self.get(key, default, "a non-negative integer")
    }
    /// An integer in `range` (counts that size allocations or loops).
    pub fn u64_in(
        &self,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ParamError> {
        let v = self.u64(key, default)?;
        if !range.contains(&v) {
            return Err(ParamError::Bad {
                key: key.into(),
                value: v.to_string(),
                message: format!("expected {}..={}", range.start(), range.end()),
            });
        }
        Ok(v)
    }
    /// A duration given in seconds, at least `min` seconds and at most
    /// [`apiary_model::time::MAX_INPUT`], as milliseconds.
    pub fn secs(&self, key: &str, default: f64, min: f64) -> Result<Time, ParamError> {
        let v = self.f64(key, default)?;
        secs_at_least(key, v, min)
    }
    /// A comma-separated list of durations in seconds (each within
    /// [`apiary_model::time::MAX_INPUT`]), as milliseconds.
    pub fn secs_list(&self, key: &str, default: &[f64]) -> Result<Vec<Time>, ParamError> {
        self.f64_list(key, default)?
            .into_iter()
            .map(|v| secs_at_least(key, v, 0.0))
            .collect()
    }
    /// A comma-separated list of non-negative numbers.
    pub fn f64_list(&self, key: &str, default: &[f64]) -> Result<Vec<f64>, ParamError> {
        match self.0.get(key) {
            None => Ok(default.to_vec()),
            Some(v) => v
                .split(',')
                .map(|x| {
                    x.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|f| f.is_finite() && *f >= 0.0)
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ParamError::Bad {
                    key: key.into(),
                    value: v.clone(),
                    message: "expected comma-separated non-negative numbers".into(),
                }),
        }
    }
    /// One of the named `options`, `default` when `key` is absent; an unknown name is
    /// an error that lists the accepted ones.
    pub fn choice<T: Copy>(
        &self,
        key: &str,
        default: T,
        options: &[(&str, T)],
    ) -> Result<T, ParamError> {
        let Some(v) = self.0.get(key) else {
            return Ok(default);
        };
        options
            .iter()
            .find(|(name, _)| name == v)
            .map(|&(_, t)| t)
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
                ParamError::Bad {
                    key: key.into(),
                    value: v.clone(),
                    message: format!("expected one of: {}", names.join(", ")),
                }
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

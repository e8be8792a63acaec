//! Submitting as sbatch does: the environment a job takes from its submitter
//! (`--export`), job arrays submitted task by task (`--array` with `%K`), and waiting
//! for a job's end (`--wait`) with its exit status.

use crate::client::{Client, ClientError};
use crate::sbatch::Array;
use apiary_api::{JobRecord, JobSpec, JobState, limits};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

/// Why a submission could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// A variable `--export` names.
    #[error("--export {name}: {why}")]
    Export {
        /// The variable.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The environment to send is past the server's limits.
    #[error(
        "your environment has {vars} variables ({bytes} bytes), over the server's limit of {} \
         variables and {} bytes; submit with --export=NONE or --export=NAME,...",
        limits::ENV_VARS,
        limits::ENV_BYTES
    )]
    TooLarge {
        /// Variables.
        vars: usize,
        /// Their bytes.
        bytes: usize,
    },
    /// A task of an array.
    #[error("submitting task {task} of the array: {source}")]
    Task {
        /// Its index.
        task: u64,
        /// Why.
        source: ClientError,
    },
    /// The server.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Variables the agent sets for each job, never taken from the submitter.
pub fn reserved(name: &str) -> bool {
    name.starts_with("APIARY_") || name == "CUDA_VISIBLE_DEVICES"
}

/// Variables that name the submitter or their shell, left out of `--export=ALL` (the
/// agent gives the job its own user's).
const PERSONAL: &[&str] = &["USER", "LOGNAME", "HOME", "PWD", "OLDPWD", "SHLVL", "_"];

/// Whether a variable's name says it holds a secret (`*_KEY`, `*_TOKEN`, `*_SECRET`,
/// `*PASSWORD*`, in any case): `--export=ALL` leaves it out unless it is named.
pub fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["_KEY", "_TOKEN", "_SECRET"].iter().any(|s| n.ends_with(s))
        || n.contains("PASSWORD")
        || ["KEY", "TOKEN", "SECRET"].contains(&n.as_str())
}

/// What `--export=SPEC` sends.
#[derive(Debug, Default)]
pub struct Exported {
    /// The job's environment.
    pub env: BTreeMap<String, String>,
    /// Variables left out for not being UTF-8 (with `ALL`).
    pub unreadable: usize,
    /// Variables left out of `ALL` because their names look like secrets.
    pub secrets: Vec<String>,
}

/// The environment a job gets under `--export=SPEC` from the submitter's `vars`.
pub fn exported_env(
    spec: &str,
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Result<Exported, SubmitError> {
    let mut mine = BTreeMap::new();
    let mut unreadable = 0usize;
    for (k, v) in vars {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => {
                mine.insert(k, v);
            }
            _ => unreadable += 1,
        }
    }
    let items: Vec<&str> = spec
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect();
    let mut out = BTreeMap::new();
    let all = items.contains(&"ALL");
    let mut secrets = Vec::new();
    if all {
        for (k, v) in &mine {
            if reserved(k) || PERSONAL.contains(&k.as_str()) || k.starts_with("BASH_FUNC_") {
                continue;
            }
            if looks_secret(k) {
                secrets.push(k.clone());
                continue;
            }
            out.insert(k.clone(), v.clone());
        }
    }
    for item in items {
        if item == "ALL" || item == "NONE" {
            continue;
        }
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (item, None),
        };
        let bad = |why: String| SubmitError::Export {
            name: k.to_string(),
            why,
        };
        if reserved(k) {
            return Err(bad(format!(
                "the agent sets {k} for each job; it cannot be exported"
            )));
        }
        match v.or_else(|| mine.get(k).cloned()) {
            Some(v) => {
                secrets.retain(|s| s != k);
                out.insert(k.to_string(), v);
            }
            None => return Err(bad(format!("{k} is not set here (give {k}=VALUE)"))),
        }
    }
    let bytes: usize = out.iter().map(|(k, v)| k.len() + v.len()).sum();
    if out.len() > limits::ENV_VARS || bytes > limits::ENV_BYTES {
        return Err(SubmitError::TooLarge {
            vars: out.len(),
            bytes,
        });
    }
    Ok(Exported {
        env: out,
        unreadable: if all { unreadable } else { 0 },
        secrets,
    })
}

/// Submits `spec` as the job array `a`, task by task: each named `NAME[i]` with
/// `APIARY_ARRAY_TASK_ID`, `_COUNT`, `_MIN` and `_MAX`, and with `%K` each task waiting
/// for the end of the one K places before it, so that at most K run at once.
pub fn submit_array(
    client: &Client,
    spec: &JobSpec,
    a: &Array,
) -> Result<Vec<JobRecord>, SubmitError> {
    let base = spec
        .name
        .clone()
        .or_else(|| spec.command.first().cloned())
        .unwrap_or_default();
    let mut records: Vec<JobRecord> = Vec::with_capacity(a.tasks.len());
    for (pos, &task) in a.tasks.iter().enumerate() {
        let mut t = spec.clone();
        t.name = Some(format!("{base}[{task}]"));
        t.array = Some(apiary_api::ArrayTask {
            task,
            of: records.first().map(|r| r.id),
        });
        let env = [
            ("APIARY_ARRAY_TASK_ID", task),
            ("APIARY_ARRAY_TASK_COUNT", a.tasks.len() as u64),
            ("APIARY_ARRAY_TASK_MIN", a.tasks[0]),
            ("APIARY_ARRAY_TASK_MAX", a.tasks[a.tasks.len() - 1]),
        ];
        for (k, v) in env {
            t.env.insert(k.to_string(), v.to_string());
        }
        if let Some(k) = a.at_once
            && pos >= k
        {
            t.after_any.push(records[pos - k].id);
        }
        let r: JobRecord = client
            .post("/v1/jobs", &t)
            .map_err(|source| SubmitError::Task { task, source })?;
        records.push(r);
    }
    Ok(records)
}

/// Polls job `id` until it is in a final state, easing off from 0.2 s to 2 s.
pub fn wait_for(client: &Client, id: u64) -> Result<JobRecord, ClientError> {
    let mut pause = Duration::from_millis(200);
    loop {
        let r: JobRecord = client.get(&format!("/v1/jobs/{id}"))?;
        if r.state.terminal() {
            return Ok(r);
        }
        std::thread::sleep(pause);
        pause = (pause * 3 / 2).min(Duration::from_secs(2));
    }
}

/// The exit status `submit --wait` ends with for a finished job: 0 when it succeeded,
/// its first non-zero exit code when it failed, 1 when it was cancelled, refused or
/// killed.
pub fn exit_code(r: &JobRecord) -> i32 {
    if r.state == JobState::Succeeded {
        return 0;
    }
    // Stopped by apiary (cancelled, past its time limit): its processes' own codes
    // say only how the stop went.
    if r.state == JobState::Cancelled || r.history.last().is_some_and(|t| t.event == "timeout") {
        return 1;
    }
    r.parts
        .iter()
        .filter_map(|p| p.exit)
        .find(|&c| c != 0)
        .filter(|c| (1..=255).contains(c))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> impl Iterator<Item = (OsString, OsString)> {
        v.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn export_follows_sbatch_less_what_the_agent_sets() {
        let here = [
            ("FOO", "bar"),
            ("PATH", "/opt/bin"),
            ("HOME", "/home/me"),
            ("APIARY_TOKEN", "secret-token"),
            ("CUDA_VISIBLE_DEVICES", "3"),
        ];
        let all = exported_env("ALL", vars(&here)).unwrap().env;
        assert_eq!(
            all.keys().map(String::as_str).collect::<Vec<_>>(),
            ["FOO", "PATH"]
        );
        assert!(exported_env("NONE", vars(&here)).unwrap().env.is_empty());
        let some = exported_env("FOO,X=1", vars(&here)).unwrap().env;
        assert_eq!(some.len(), 2);
        assert_eq!(some["X"], "1");
        let plus = exported_env("ALL,HOME", vars(&here)).unwrap().env;
        assert_eq!(plus["HOME"], "/home/me");
        let e = exported_env("APIARY_TOKEN", vars(&here)).unwrap_err();
        assert!(e.to_string().contains("cannot be exported"), "{e}");
        assert!(exported_env("NOPE", vars(&here)).is_err());
    }

    #[test]
    fn export_all_leaves_out_names_that_look_like_secrets_unless_named() {
        let here = [
            ("AWS_SECRET_ACCESS_KEY", "a"),
            ("WANDB_API_KEY", "b"),
            ("GITHUB_TOKEN", "c"),
            ("DB_PASSWORD_FILE", "d"),
            ("my_secret", "e"),
            ("KEYBOARD", "f"),
            ("LR", "0.1"),
        ];
        let e = exported_env("ALL", vars(&here)).unwrap();
        assert_eq!(e.env.keys().collect::<Vec<_>>(), ["KEYBOARD", "LR"]);
        assert_eq!(
            e.secrets,
            [
                "AWS_SECRET_ACCESS_KEY",
                "DB_PASSWORD_FILE",
                "GITHUB_TOKEN",
                "WANDB_API_KEY",
                "my_secret"
            ]
        );
        let named = exported_env("ALL,WANDB_API_KEY", vars(&here)).unwrap();
        assert_eq!(named.env["WANDB_API_KEY"], "b");
        assert!(!named.secrets.contains(&"WANDB_API_KEY".to_string()));
    }
}

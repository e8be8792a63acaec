//! What `apiary cancel` cancels, as scancel takes it: job ids, array tasks (`12_3`,
//! `12_[3-5]`, `12_[1,4]`), whole arrays (an array's id cancels every task, as
//! `scancel 12` does), and filters (`--name`, `--state`, `--user`) that narrow the ids
//! given or, with none given, pick among the caller's unfinished jobs.

use crate::sbatch;
use apiary_api::{JobRecord, JobState};

/// Why a cancel target does not read.
#[derive(Debug, thiserror::Error)]
#[error("'{text}': {why}")]
pub struct TargetError {
    /// The target as written.
    pub text: String,
    /// What is wrong.
    pub why: String,
}

/// One target of `apiary cancel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A job, and every task of the array it is the id of.
    Job(u64),
    /// Tasks of the array `array`.
    Tasks {
        /// The array's id.
        array: u64,
        /// Task indices.
        tasks: Vec<u64>,
    },
}

/// Reads `12`, `12_3` or `12_[3-5]` (the brackets take `--array`'s syntax).
pub fn target(text: &str) -> Result<Target, TargetError> {
    let bad = |why: &str| TargetError {
        text: text.to_string(),
        why: why.to_string(),
    };
    let id = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| bad("expected ID, ID_TASK or ID_[TASKS]"))
    };
    match text.split_once('_') {
        None => Ok(Target::Job(id(text)?)),
        Some((a, t)) => {
            let array = id(a)?;
            let list = t
                .strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .unwrap_or(t);
            if list.contains('%') {
                return Err(bad("%K limits a submission, not a cancel"));
            }
            let tasks = sbatch::array(list).map_err(|e| bad(&e.to_string()))?.tasks;
            Ok(Target::Tasks { array, tasks })
        }
    }
}

/// The filters.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Jobs of this name (array tasks match their array's name, `train` for `train[3]`).
    pub name: Option<String>,
    /// Jobs in this state.
    pub state: Option<JobState>,
    /// Jobs of this user.
    pub user: Option<String>,
}

impl Filters {
    /// Whether any filter is set.
    pub fn any(&self) -> bool {
        self.name.is_some() || self.state.is_some() || self.user.is_some()
    }

    fn admit(&self, r: &JobRecord) -> bool {
        let name = r.spec.name.as_deref().unwrap_or("");
        let base = match (r.array_id, name.rfind('[')) {
            (Some(_), Some(i)) => &name[..i],
            _ => name,
        };
        self.name.as_deref().is_none_or(|n| n == name || n == base)
            && self.state.is_none_or(|s| s == r.state)
            && self
                .user
                .as_ref()
                .is_none_or(|u| r.user.as_ref() == Some(u))
    }
}

/// The ids to cancel among `unfinished` (newest first or any order): those the targets
/// name (all of them when there are none) that pass the filters, ascending; and the
/// plain ids named that are not among them, for the server to answer.
pub fn select(unfinished: &[JobRecord], targets: &[Target], f: &Filters) -> (Vec<u64>, Vec<u64>) {
    let named = |r: &JobRecord| {
        targets.is_empty()
            || targets.iter().any(|t| match t {
                Target::Job(id) => r.id == *id || r.array_id == Some(*id),
                Target::Tasks { array, tasks } => {
                    r.array_id == Some(*array)
                        && r.spec.array.is_some_and(|a| tasks.contains(&a.task))
                }
            })
    };
    let mut ids: Vec<u64> = unfinished
        .iter()
        .filter(|r| named(r) && f.admit(r))
        .map(|r| r.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let absent = targets
        .iter()
        .filter_map(|t| match t {
            Target::Job(id) if !unfinished.iter().any(|r| r.id == *id) => Some(*id),
            _ => None,
        })
        .collect();
    (ids, absent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, name: &str, array: Option<(u64, u64)>, user: Option<&str>) -> JobRecord {
        let mut spec: apiary_api::JobSpec = serde_json::from_value(
            serde_json::json!({"gpus": 1, "command": ["true"], "name": name}),
        )
        .unwrap();
        spec.array = array.map(|(a, task)| apiary_api::ArrayTask {
            task,
            of: (a != id).then_some(a),
        });
        JobRecord {
            schema_version: 1,
            id,
            spec,
            vc: "a".into(),
            user: user.map(String::from),
            array_id: array.map(|(a, _)| a),
            state: JobState::Queued,
            submitted_ms: 0,
            attempt: 0,
            parts: Vec::new(),
            history: Vec::new(),
            stopping: Vec::new(),
            hints: None,
            cpus: None,
            power_limit: None,
            io: None,
            sm_share: None,
            reason: None,
        }
    }

    #[test]
    fn targets_and_filters_read_as_scancel() {
        assert_eq!(target("12").unwrap(), Target::Job(12));
        assert_eq!(
            target("12_[3-5]").unwrap(),
            Target::Tasks {
                array: 12,
                tasks: vec![3, 4, 5]
            }
        );
        assert_eq!(
            target("12_1").unwrap(),
            Target::Tasks {
                array: 12,
                tasks: vec![1]
            }
        );
        assert!(target("x").is_err());
        assert!(target("12_[1-3%2]").is_err());
        let list = [
            rec(12, "train[0]", Some((12, 0)), None),
            rec(13, "train[1]", Some((12, 1)), None),
            rec(14, "train[2]", Some((12, 2)), Some("bob")),
            rec(15, "eval", None, Some("alice")),
        ];
        let none = Filters::default();
        assert_eq!(select(&list, &[Target::Job(12)], &none).0, [12, 13, 14]);
        assert_eq!(
            select(&list, &[target("12_[1-2]").unwrap()], &none).0,
            [13, 14]
        );
        let by_name = Filters {
            name: Some("train".into()),
            ..Default::default()
        };
        assert_eq!(select(&list, &[], &by_name).0, [12, 13, 14]);
        let by_user = Filters {
            user: Some("alice".into()),
            ..Default::default()
        };
        assert_eq!(select(&list, &[], &by_user).0, [15]);
        assert_eq!(select(&list, &[Target::Job(99)], &none), (vec![], vec![99]));
    }
}

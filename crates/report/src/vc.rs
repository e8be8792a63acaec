//! Per-VC numbers of one run, and the sharing anomaly against the same trace run with
//! every VC on its own private cluster.
//!
//! Queueing delay is first start − submit, as in [`crate::Summary`]. A job suffers the
//! sharing anomaly when it waited longer for its first start than it did in the private
//! run (jobs are matched by position and id; the traces must be the same).

use crate::present::duration;
use crate::text::esc;
use apiary_model::RunOutcome;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One VC of one run. Times in seconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VcRow {
    /// VC name (`default` for jobs without one).
    pub vc: String,
    /// Jobs of the VC.
    pub jobs: usize,
    /// Of which finished.
    pub finished: usize,
    /// Mean queueing delay of jobs that started.
    pub queue_mean: f64,
    /// Mean JCT of finished jobs.
    pub jct_mean: f64,
    /// Against the private run, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anomaly: Option<Anomaly>,
}

/// Jobs that waited longer than in their VC's private cluster.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Anomaly {
    /// How many.
    pub jobs: usize,
    /// Their extra queueing delay, summed, seconds.
    pub extra_total: f64,
    /// The largest extra queueing delay, seconds.
    pub extra_max: f64,
}

/// Why two runs cannot be compared job by job.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("runs {a} and {b} are not of the same trace (job {index}: {id_a} vs {id_b})")]
pub struct NotSameTrace {
    a: String,
    b: String,
    index: usize,
    id_a: String,
    id_b: String,
}

/// Per-VC rows of `o` (VCs in name order), with the anomaly against `private`.
pub fn vc_rows(o: &RunOutcome, private: Option<&RunOutcome>) -> Result<Vec<VcRow>, NotSameTrace> {
    if let Some(p) = private {
        let mismatch = (o.jobs.len() != p.jobs.len())
            .then_some(o.jobs.len().min(p.jobs.len()))
            .or_else(|| o.jobs.iter().zip(&p.jobs).position(|(a, b)| a.id != b.id));
        if let Some(index) = mismatch {
            let id = |r: &RunOutcome| r.jobs.get(index).map_or("-".into(), |j| j.id.to_string());
            return Err(NotSameTrace {
                a: o.policy.clone(),
                b: p.policy.clone(),
                index,
                id_a: id(o),
                id_b: id(p),
            });
        }
    }
    #[derive(Default)]
    struct Acc {
        jobs: usize,
        finished: usize,
        started: usize,
        queue: f64,
        jct: f64,
        anomaly: usize,
        extra: f64,
        extra_max: f64,
    }
    let mut by: BTreeMap<&str, Acc> = BTreeMap::new();
    for (i, j) in o.jobs.iter().enumerate() {
        let a = by.entry(j.vc.as_deref().unwrap_or("default")).or_default();
        a.jobs += 1;
        if let Some(st) = j.first_start {
            a.started += 1;
            a.queue += (st - j.submit) as f64 / 1000.0;
            if let Some(p) = private.and_then(|p| p.jobs[i].first_start) {
                let extra = (st - j.submit) as f64 / 1000.0 - (p - j.submit) as f64 / 1000.0;
                if extra > 0.0 {
                    a.anomaly += 1;
                    a.extra += extra;
                    a.extra_max = a.extra_max.max(extra);
                }
            }
        }
        if let Some(f) = j.finish {
            a.finished += 1;
            a.jct += (f - j.submit) as f64 / 1000.0;
        }
    }
    Ok(by
        .into_iter()
        .map(|(vc, a)| VcRow {
            vc: vc.to_string(),
            jobs: a.jobs,
            finished: a.finished,
            queue_mean: a.queue / a.started.max(1) as f64,
            jct_mean: a.jct / a.finished.max(1) as f64,
            anomaly: private.map(|_| Anomaly {
                jobs: a.anomaly,
                extra_total: a.extra,
                extra_max: a.extra_max,
            }),
        })
        .collect())
}

/// The metrics of [`crate::METRICS`] that mean something for one VC's jobs alone: those
/// of jobs' times and counts. Utilisation, cluster efficiency and makespan are the
/// cluster's, and finish-time fairness counts contention over the whole cluster.
pub const VC_METRICS: &[&str] = &[
    "jct_mean",
    "jct_median",
    "jct_p95",
    "jct_p99",
    "queue_mean",
    "queue_median",
    "pending_mean",
    "pending_median",
    "slowdown_mean",
    "slowdown_p99",
    "jain",
    "preemptions",
    "finished",
    "unfinished",
    "rejected",
];

/// The summary of each VC's jobs alone (`default` for jobs without one), in name
/// order, for the metrics of [`VC_METRICS`]; empty when the run has fewer than two VCs.
pub fn vc_summaries(o: &RunOutcome, pct: crate::Percentile) -> Vec<(String, crate::Summary)> {
    let mut by: BTreeMap<&str, Vec<apiary_model::JobOutcome>> = BTreeMap::new();
    for j in &o.jobs {
        by.entry(j.vc.as_deref().unwrap_or("default"))
            .or_default()
            .push(j.clone());
    }
    if by.len() < 2 {
        return Vec::new();
    }
    by.into_iter()
        .map(|(vc, jobs)| {
            let mut part = RunOutcome::of_jobs(o.cluster.clone(), o.total_gpus, jobs);
            part.policy = o.policy.clone();
            part.seed = o.seed;
            (vc.to_string(), crate::Summary::of(&part, pct))
        })
        .collect()
}

/// Every VC of `runs`, in name order.
fn vc_names(runs: &[(String, Vec<VcRow>)]) -> Vec<&str> {
    let mut vcs: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.1.iter().map(|v| v.vc.as_str()))
        .collect();
    vcs.sort_unstable();
    vcs.dedup();
    vcs
}

/// A text table: one line per VC, a column group per run.
pub fn vc_table(runs: &[(String, Vec<VcRow>)]) -> String {
    let vcs = vc_names(runs);
    let vw = vcs.iter().map(|v| v.len()).max().unwrap_or(2).max(2);
    let mut out = String::new();
    let _ = write!(out, "{:vw$}  {:>6}", "VC", "jobs");
    for (name, rows) in runs {
        let anomaly = rows.iter().any(|r| r.anomaly.is_some());
        let _ = write!(out, "  | {:>19} {:>10}", format!("{name} queue"), "JCT");
        if anomaly {
            let _ = write!(out, " {:>8} {:>12}", "anomaly", "max extra");
        }
    }
    out.push('\n');
    for vc in vcs {
        let jobs = runs
            .iter()
            .find_map(|r| r.1.iter().find(|x| x.vc == vc))
            .map_or(0, |x| x.jobs);
        let _ = write!(out, "{vc:vw$}  {jobs:>6}");
        for (_, rows) in runs {
            let row = rows.iter().find(|x| x.vc == vc);
            let anomaly = rows.iter().any(|r| r.anomaly.is_some());
            match row {
                Some(r) => {
                    let _ = write!(
                        out,
                        "  | {:>19} {:>10}",
                        duration(r.queue_mean),
                        duration(r.jct_mean)
                    );
                    if let Some(a) = &r.anomaly {
                        let _ = write!(out, " {:>8} {:>12}", a.jobs, duration(a.extra_max));
                    } else if anomaly {
                        let _ = write!(out, " {:>8} {:>12}", "-", "-");
                    }
                }
                None => {
                    let _ = write!(out, "  | {:>19} {:>10}", "-", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The same table as HTML, for report.html: a row per VC, per run its first-start
/// delay and JCT, and against the private run the jobs that waited longer and the
/// longest extra wait.
pub fn vc_html(runs: &[(String, Vec<VcRow>)]) -> String {
    let vcs = vc_names(runs);
    let anomaly = |rows: &[VcRow]| rows.iter().any(|r| r.anomaly.is_some());
    let mut o = String::from("<h2>Tenants</h2>\n");
    if runs.iter().any(|r| anomaly(&r.1)) {
        o.push_str(
            "<p class=\"note\">The sharing anomaly: jobs that waited longer for their first start \
             than on their VC's private cluster (the <code>private</code> run), and the longest \
             extra wait.</p>\n",
        );
    } else {
        o.push_str(
            "<p class=\"note\">Add <code>private</code> to the policies to see the sharing \
             anomaly.</p>\n",
        );
    }
    o.push_str("<table class=\"cmp\">\n<thead><tr><th></th><th></th>");
    for (name, rows) in runs {
        let span = if anomaly(rows) { 4 } else { 2 };
        let _ = write!(o, "<th colspan=\"{span}\">{}</th>", esc(name));
    }
    o.push_str("</tr><tr><th>VC</th><th>jobs</th>");
    for (_, rows) in runs {
        o.push_str("<th>first-start delay</th><th>JCT</th>");
        if anomaly(rows) {
            o.push_str("<th>anomaly jobs</th><th>max extra wait</th>");
        }
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for vc in vcs {
        let jobs = runs
            .iter()
            .find_map(|r| r.1.iter().find(|x| x.vc == vc))
            .map_or(0, |x| x.jobs);
        let _ = write!(o, "<tr><th>{}</th><td>{jobs}</td>", esc(vc));
        for (_, rows) in runs {
            let row = rows.iter().find(|x| x.vc == vc);
            match row {
                Some(r) => {
                    let _ = write!(
                        o,
                        "<td>{}</td><td>{}</td>",
                        duration(r.queue_mean),
                        duration(r.jct_mean)
                    );
                    match &r.anomaly {
                        Some(a) => {
                            let _ =
                                write!(o, "<td>{}</td><td>{}</td>", a.jobs, duration(a.extra_max));
                        }
                        None if anomaly(rows) => o.push_str("<td>-</td><td>-</td>"),
                        None => {}
                    }
                }
                None => {
                    let n = if anomaly(rows) { 4 } else { 2 };
                    for _ in 0..n {
                        o.push_str("<td>-</td>");
                    }
                }
            }
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody></table>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{JobOutcome, UtilSeries};

    fn run(policy: &str, starts: &[(&str, Option<u64>)]) -> RunOutcome {
        RunOutcome {
            cluster_efficiency: None,
            occupancy: None,
            energy: None,
            io: None,
            cpu: None,
            online: None,
            failures: None,
            policy: policy.into(),
            params: Vec::new(),
            cluster: "c".into(),
            total_gpus: 8,
            jobs: starts
                .iter()
                .enumerate()
                .map(|(i, (vc, st))| JobOutcome {
                    id: apiary_model::format_compact!("{i}"),
                    submit: 1000,
                    gpus: 1,
                    duration: 1000,
                    vc: Some((*vc).into()),
                    first_start: *st,
                    finish: st.map(|s| s + 1000),
                    preemptions: 0,
                    executed: 1000,
                    gpu_time: 1000,
                    rejected: None,
                    deadline: None,
                    judged: None,
                })
                .collect(),
            util: UtilSeries::new(0, 8),
            events: 0,
            passes: 0,
            seed: 0,
        }
    }

    #[test]
    fn anomaly_counts_jobs_that_waited_longer_than_in_private() {
        let private = run(
            "private",
            &[("a", Some(1000)), ("a", Some(61_000)), ("b", Some(2000))],
        );
        let shared = run(
            "quota",
            &[("a", Some(121_000)), ("a", Some(1000)), ("b", Some(2000))],
        );
        let rows = vc_rows(&shared, Some(&private)).unwrap();
        assert_eq!(rows.len(), 2);
        let a = &rows[0];
        assert_eq!((a.vc.as_str(), a.jobs, a.finished), ("a", 2, 2));
        assert_eq!(a.queue_mean, 60.0);
        assert_eq!(a.jct_mean, 61.0);
        let an = a.anomaly.as_ref().unwrap();
        assert_eq!((an.jobs, an.extra_total, an.extra_max), (1, 120.0, 120.0));
        assert_eq!(rows[1].anomaly.as_ref().unwrap().jobs, 0);
        assert!(vc_rows(&private, None).unwrap()[0].anomaly.is_none());
        let table = vc_table(&[("quota".into(), rows.clone())]);
        assert!(table.contains("anomaly"), "{table}");
        assert!(table.lines().nth(1).unwrap().contains("2.0 min"), "{table}");
        let html = vc_html(&[("quota".into(), rows)]);
        assert!(html.contains("<td>1</td><td>2.0 min</td>"), "{html}");
        let other = run("x", &[("a", Some(1000))]);
        assert!(vc_rows(&other, Some(&private)).is_err());
    }

    fn vc_job(vc: Option<&str>, jct: u64) -> JobOutcome {
        JobOutcome {
            id: "j".into(),
            submit: 0,
            gpus: 1,
            duration: 1000,
            vc: vc.map(Into::into),
            first_start: Some(jct - 1000),
            finish: Some(jct),
            preemptions: 0,
            executed: 1000,
            gpu_time: 1000,
            rejected: None,
            deadline: None,
            judged: None,
        }
    }

    #[test]
    fn each_vc_is_summarised_alone() {
        let o = RunOutcome::of_jobs(
            "c",
            4,
            vec![
                vc_job(Some("b"), 4000),
                vc_job(None, 1000),
                vc_job(Some("b"), 2000),
            ],
        );
        let v = vc_summaries(&o, crate::Percentile::NearestRank);
        let names: Vec<&str> = v.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["b", "default"]);
        assert_eq!(v[0].1.jct_mean, 3.0);
        assert_eq!(v[0].1.finished, 2);
        assert_eq!(v[1].1.pending_mean, 0.0);
        // One VC is the whole cluster: nothing to break down.
        let mut one = o.clone();
        one.jobs.truncate(1);
        assert!(vc_summaries(&one, crate::Percentile::NearestRank).is_empty());
    }
}

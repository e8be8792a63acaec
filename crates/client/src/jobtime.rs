//! A live job's times and outcome as Slurm users read them: TIME is the time it has run
//! (squeue's, frozen when the job ends), ELAPSED its first start to its end (sacct's),
//! EXIT its exit code or how it was stopped; history times are local date-times with
//! their age, as people read a log.

use apiary_api::{JobRecord, JobState};

/// Events that leave a job running (`started`: a node reported its process up).
fn keeps_running(event: &str) -> bool {
    matches!(event, "running" | "started")
}

/// Milliseconds the job has run: the sum of its running spans, the open one counted to
/// `now` only while the job is still running.
pub fn run_ms(r: &JobRecord, now: u64) -> u64 {
    let mut total = 0u64;
    let mut since: Option<u64> = None;
    for t in &r.history {
        if t.event == "running" {
            since.get_or_insert(t.at_ms);
        } else if !keeps_running(&t.event)
            && let Some(s) = since.take()
        {
            total += t.at_ms.saturating_sub(s);
        }
    }
    if let Some(s) = since
        && r.state == JobState::Running
    {
        total += now.saturating_sub(s);
    }
    total
}

/// When the job ended (its last event, once it is in a final state).
pub fn ended_ms(r: &JobRecord) -> Option<u64> {
    r.state
        .terminal()
        .then(|| r.history.last().map_or(r.submitted_ms, |t| t.at_ms))
}

/// Milliseconds from the job's first start to its end, or to `now` while it lasts;
/// `None` before it ever started.
pub fn elapsed_ms(r: &JobRecord, now: u64) -> Option<u64> {
    let first = r.history.iter().find(|t| t.event == "running")?.at_ms;
    Some(ended_ms(r).unwrap_or(now).saturating_sub(first))
}

/// The exit as sacct shows it: `0`, the first non-zero code, `killed` for a process
/// ended by a signal or lost with its node; `-` while running or when it never ran.
pub fn exit_text(r: &JobRecord) -> String {
    if !r.state.terminal() {
        return "-".into();
    }
    if r.history.last().is_some_and(|t| t.event == "timeout") {
        return "timeout".into();
    }
    let codes: Vec<i32> = r.parts.iter().filter_map(|p| p.exit).collect();
    match codes.iter().find(|&&c| c != 0) {
        Some(-1) => "killed".into(),
        Some(c) => c.to_string(),
        None if codes.is_empty() => "-".into(),
        None => "0".into(),
    }
}

/// A duration as squeue prints TIME: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn squeue_time(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// Seconds from a time limit as sbatch's `--time` takes it: `MM`, `MM:SS`, `HH:MM:SS`,
/// `D-HH`, `D-HH:MM` or `D-HH:MM:SS`.
pub fn parse_slurm_time(t: &str) -> Option<f64> {
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (num(d)?, r),
        None => (0, t),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Option<_>>()?;
    let secs = match (t.contains('-'), parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (false, [h, m, s]) | (true, [h, m, s]) => h * 3600 + m * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return None,
    };
    let total = days * 86_400 + secs;
    (total > 0).then_some(total as f64)
}

/// A time as sacct's `--starttime` takes it, in unix ms: `now-3days`, `now-6hours`,
/// `now-30minutes` (or `d`, `h`, `m`, `s`), a local date `2026-11-20` (its midnight),
/// a local date-time `2026-11-20T10:00[:00]`, or unix seconds.
pub fn parse_since(t: &str, now_ms: u64) -> Option<u64> {
    let t = t.trim();
    if let Some(rel) = t.strip_prefix("now-") {
        return Some(now_ms.saturating_sub(relative_ms(rel)?));
    }
    absolute(t)
}

/// A time as sbatch's `--deadline` takes it, in unix ms: `now+2hours` (units as
/// [`parse_since`]'s), a local date or date-time, or unix seconds.
pub fn parse_deadline(t: &str, now_ms: u64) -> Option<u64> {
    let t = t.trim();
    if let Some(rel) = t.strip_prefix("now+") {
        return now_ms.checked_add(relative_ms(rel)?);
    }
    absolute(t)
}

/// `3days`, `6h`: milliseconds.
fn relative_ms(rel: &str) -> Option<u64> {
    let split = rel.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = rel.split_at(split);
    let n: u64 = n.parse().ok()?;
    let s = match unit {
        "d" | "day" | "days" => 86_400,
        "h" | "hour" | "hours" => 3600,
        "m" | "min" | "minute" | "minutes" => 60,
        "s" | "sec" | "second" | "seconds" => 1,
        _ => return None,
    };
    n.checked_mul(s)?.checked_mul(1000)
}

/// A local date (its midnight), a local date-time, or unix seconds: unix ms.
fn absolute(t: &str) -> Option<u64> {
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<u64>().ok()?.checked_mul(1000);
    }
    let dt: jiff::civil::DateTime = match t.parse::<jiff::civil::DateTime>() {
        Ok(dt) => dt,
        Err(_) => t
            .parse::<jiff::civil::Date>()
            .ok()?
            .to_datetime(jiff::civil::Time::midnight()),
    };
    let tz = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    let ms = dt.to_zoned(tz).ok()?.timestamp().as_millisecond();
    u64::try_from(ms).ok()
}

/// Unix milliseconds as a local date-time, `2026-11-25 14:51:40`, in the system's time
/// zone (TZ, else /etc/localtime), or in UTC with a `Z` when the zone is unknown.
pub fn local(unix_ms: u64) -> String {
    let Ok(ts) = jiff::Timestamp::from_millisecond(unix_ms as i64) else {
        return apiary_core::time::rfc3339_utc(unix_ms);
    };
    match jiff::tz::TimeZone::try_system() {
        Ok(tz) => ts.to_zoned(tz).strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => ts.strftime("%Y-%m-%d %H:%M:%SZ").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_as_sacct_starttime() {
        let now = 1_795_700_000_000;
        assert_eq!(parse_since("now-2days", now), Some(now - 2 * 86_400_000));
        assert_eq!(parse_since("now-90m", now), Some(now - 5_400_000));
        assert_eq!(parse_since("1795000000", now), Some(1_795_000_000_000));
        let d = parse_since("2026-11-20", now).unwrap();
        let dt = parse_since("2026-11-20T06:00", now).unwrap();
        assert_eq!(dt - d, 6 * 3_600_000);
        assert_eq!(parse_since("yesterday", now), None);
        assert_eq!(parse_since("now-3weeks", now), None);
    }

    #[test]
    fn deadlines_read_forward_from_now() {
        let now = 1_795_700_000_000;
        assert_eq!(parse_deadline("now+2hours", now), Some(now + 7_200_000));
        assert_eq!(parse_deadline("1795800000", now), Some(1_795_800_000_000));
        assert_eq!(parse_deadline("now-2hours", now), None);
    }
    use apiary_api::{JobSpec, Part, RestartPolicy, Transition};

    fn record(state: JobState, events: &[(u64, &str)], exits: &[Option<i32>]) -> JobRecord {
        JobRecord {
            schema_version: 1,
            id: 7,
            spec: JobSpec {
                name: None,
                gpus: 1,
                gpu_milli: None,
                cpu_milli: None,
                memory_mib: None,
                gpu_type: None,
                vc: None,
                priority: 0,
                command: vec!["x".into()],
                env: Default::default(),
                workdir: None,
                estimated_duration_s: None,
                deadline_unix_s: None,
                restart: RestartPolicy::default(),
                time_limit_s: None,
                after_ok: Vec::new(),
                after_any: Vec::new(),
                array: None,
                checkpoint_dir: None,
                elastic: None,
                adaptive: None,
                model: None,
                dataset_gb: None,
                grace_s: None,
            },
            vc: "default".into(),
            user: None,
            array_id: None,
            state,
            submitted_ms: 0,
            attempt: 1,
            parts: exits
                .iter()
                .map(|&exit| Part {
                    node: "n".into(),
                    gpus: vec![0],
                    gpu_milli: None,
                    exit,
                    output_tail: String::new(),
                })
                .collect(),
            history: events
                .iter()
                .map(|&(at_ms, e)| Transition {
                    at_ms,
                    event: e.into(),
                    detail: String::new(),
                })
                .collect(),
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
    fn time_is_run_time_and_freezes_when_the_job_ends() {
        let ev = [
            (0, "queued"),
            (10_000, "running"),
            (11_000, "started"),
            (70_000, "preempted"),
            (100_000, "running"),
            (130_000, "succeeded"),
        ];
        let done = record(JobState::Succeeded, &ev, &[Some(0)]);
        assert_eq!(run_ms(&done, 10_000_000), 90_000);
        assert_eq!(elapsed_ms(&done, 10_000_000), Some(120_000));
        assert_eq!(exit_text(&done), "0");
        let running = record(JobState::Running, &ev[..5], &[None]);
        assert_eq!(run_ms(&running, 160_000), 120_000);
        assert_eq!(exit_text(&running), "-");
        let killed = record(JobState::Failed, &ev, &[Some(0), Some(-1)]);
        assert_eq!(exit_text(&killed), "killed");
        let failed = record(JobState::Failed, &ev, &[Some(3)]);
        assert_eq!(exit_text(&failed), "3");
        let never = record(JobState::Cancelled, &[(0, "queued"), (5, "cancelled")], &[]);
        assert_eq!((run_ms(&never, 99), elapsed_ms(&never, 99)), (0, None));
        assert_eq!(squeue_time(90_000), "1:30");
        assert_eq!(squeue_time(3_723_000), "1:02:03");
        assert_eq!(squeue_time(90_061_000), "1-01:01:01");
        assert_eq!(apiary_core::time::fmt_age(100_000, 40_000), "1m ago");
        assert_eq!(parse_slurm_time("30"), Some(1800.0));
        assert_eq!(parse_slurm_time("1:30"), Some(90.0));
        assert_eq!(parse_slurm_time("2:00:05"), Some(7205.0));
        assert_eq!(parse_slurm_time("1-2"), Some(93_600.0));
        assert_eq!(parse_slurm_time("1-02:30"), Some(95_400.0));
        assert_eq!(parse_slurm_time("0-00:00:10"), Some(10.0));
        for bad in ["", "x", "1:2:3:4", "-5", "1-", "0", "1:-2"] {
            assert_eq!(parse_slurm_time(bad), None, "{bad}");
        }
        let timed = record(
            JobState::Failed,
            &[(0, "queued"), (10, "running"), (5010, "timeout")],
            &[None],
        );
        assert_eq!(exit_text(&timed), "timeout");
        assert_eq!(run_ms(&timed, 99_999), 5000);
    }
}

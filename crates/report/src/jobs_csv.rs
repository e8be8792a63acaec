//! The per-job CSV (`jobs.csv`), one row per trace job.
//!
//! Every run writes it, a sweep once per cell, and Philly's has 82,247 rows. Written
//! field by field through `write!`, it was a quarter of a whole Tiresias run on Philly
//! (formatting machinery, padding, an adapter per call); each row is now built in one
//! reused buffer, and the text is the same byte for byte.

use crate::pending_ms;
use apiary_model::RunOutcome;
use std::io::Write;

const HEADER: &str = "id,submit,gpus,vc,first_start,finish,jct,queueing_delay,pending,preemptions,executed,gpu_time,status\n";

/// Writes one row per job.
pub fn write_jobs_csv(o: &RunOutcome, mut w: impl Write) -> std::io::Result<()> {
    w.write_all(HEADER.as_bytes())?;
    let mut r = Row::default();
    for j in &o.jobs {
        let status = if j.rejected.is_some() {
            "rejected"
        } else if j.finish.is_some() {
            "finished"
        } else if j.first_start.is_some() {
            "unfinished"
        } else {
            "never-started"
        };
        r.buf.clear();
        r.text(&j.id);
        r.secs(Some(j.submit));
        r.int(j.gpus);
        r.text(j.vc.as_deref().unwrap_or(""));
        r.secs(j.first_start);
        r.secs(j.finish);
        r.secs(j.finish.map(|f| f - j.submit));
        r.secs(j.first_start.map(|st| st - j.submit));
        r.secs(j.finish.map(|f| pending_ms(f - j.submit, j.executed)));
        r.int(j.preemptions);
        r.secs(Some(j.executed));
        r.secs(Some(j.gpu_time));
        r.buf.extend_from_slice(status.as_bytes());
        r.buf.push(b'\n');
        w.write_all(&r.buf)?;
    }
    w.flush()
}

/// A row being written: each field is followed by its comma.
#[derive(Default)]
struct Row {
    buf: Vec<u8>,
    num: itoa::Buffer,
}

impl Row {
    fn int(&mut self, v: impl itoa::Integer) {
        self.buf.extend_from_slice(self.num.format(v).as_bytes());
        self.buf.push(b',');
    }

    /// A text field, quoted when it holds a comma, quote or line break.
    fn text(&mut self, s: &str) {
        if s.contains([',', '"', '\n']) {
            self.buf.push(b'"');
            self.buf
                .extend_from_slice(s.replace('"', "\"\"").as_bytes());
            self.buf.push(b'"');
        } else {
            self.buf.extend_from_slice(s.as_bytes());
        }
        self.buf.push(b',');
    }

    /// Milliseconds as seconds with three decimals (nothing for `None`), in integer
    /// arithmetic: the text `{:.3}` gives for `ms / 1000.0`.
    fn secs(&mut self, ms: Option<u64>) {
        match ms {
            None => {}
            // Below 10^12 s (apiary's longest input time, under 2^40 s) the f64 is within
            // 2^-13 s of the exact value, so rounding it to 3 decimals gives that value.
            Some(ms) if ms < 1_000_000_000_000_000 => {
                self.buf
                    .extend_from_slice(self.num.format(ms / 1000).as_bytes());
                let frac = (ms % 1000) as u16;
                self.buf.extend_from_slice(&[
                    b'.',
                    b'0' + (frac / 100) as u8,
                    b'0' + (frac / 10 % 10) as u8,
                    b'0' + (frac % 10) as u8,
                ]);
            }
            Some(ms) => {
                let s = format!("{:.3}", ms as f64 / 1000.0);
                self.buf.extend_from_slice(s.as_bytes());
            }
        }
        self.buf.push(b',');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::JobOutcome;

    /// The text one field writes, without its comma.
    fn text(field: impl FnOnce(&mut Row)) -> String {
        let mut r = Row::default();
        field(&mut r);
        assert_eq!(r.buf.pop(), Some(b','));
        String::from_utf8(r.buf).expect("UTF-8")
    }

    #[test]
    fn seconds_print_as_float_formatting_does() {
        let mut x = 1u64;
        let mut cases = vec![
            0,
            1,
            999,
            1000,
            1001,
            123_456_789,
            999_999_999_999_999,
            1_000_000_000_000_000,
            (1 << 53) - 1,
            1 << 53,
            u64::MAX,
        ];
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            cases.push(x >> (x % 64));
        }
        for ms in cases {
            assert_eq!(
                text(|r| r.secs(Some(ms))),
                format!("{:.3}", ms as f64 / 1000.0),
                "{ms}"
            );
        }
        assert_eq!(text(|r| r.secs(None)), "");
        assert_eq!(text(|r| r.text("a,b\"c")), "\"a,b\"\"c\"");
        assert_eq!(text(|r| r.text("plain")), "plain");
    }

    /// The writer this module replaced, field by field through `write!`.
    fn reference(o: &RunOutcome) -> String {
        let secs =
            |ms: Option<u64>| ms.map_or(String::new(), |ms| format!("{:.3}", ms as f64 / 1000.0));
        let quoted = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        let mut out = HEADER.to_string();
        for j in &o.jobs {
            let status = match (&j.rejected, j.finish, j.first_start) {
                (Some(_), _, _) => "rejected",
                (None, Some(_), _) => "finished",
                (None, None, Some(_)) => "unfinished",
                (None, None, None) => "never-started",
            };
            out += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                quoted(&j.id),
                secs(Some(j.submit)),
                j.gpus,
                quoted(j.vc.as_deref().unwrap_or("")),
                secs(j.first_start),
                secs(j.finish),
                secs(j.finish.map(|f| f - j.submit)),
                secs(j.first_start.map(|st| st - j.submit)),
                secs(j.finish.map(|f| pending_ms(f - j.submit, j.executed))),
                j.preemptions,
                secs(Some(j.executed)),
                secs(Some(j.gpu_time)),
                status
            );
        }
        out
    }

    #[test]
    fn rows_are_what_field_by_field_formatting_wrote() {
        let mut rng = apiary_model::Rng::new(7);
        let mut next = |m: u64| rng.below(m);
        let ids = ["7", "job-1", "a,b", "say \"hi\"", "line\nbreak", ""];
        let jobs: Vec<JobOutcome> = (0..2_000)
            .map(|k| {
                let submit = next(1 << 40);
                let first_start = (next(4) > 0).then(|| submit + next(1 << 30));
                let finish = first_start
                    .filter(|_| next(3) > 0)
                    .map(|s| s + next(1 << 30));
                JobOutcome {
                    id: format!("{}{k}", ids[k % ids.len()]).into(),
                    submit,
                    gpus: next(1 << 20) as u32,
                    duration: next(1 << 30),
                    vc: (next(2) == 0).then(|| ids[(k + 1) % ids.len()].into()),
                    first_start,
                    finish,
                    preemptions: next(100) as u32,
                    executed: next(1 << 30),
                    gpu_time: if k % 97 == 0 {
                        u64::MAX - k as u64
                    } else {
                        next(1 << 50)
                    },
                    rejected: (next(10) == 0).then(|| "too big".into()),
                    deadline: None,
                    judged: None,
                }
            })
            .collect();
        let o = RunOutcome::of_jobs("c", 8, jobs);
        let mut got = Vec::new();
        write_jobs_csv(&o, &mut got).expect("written");
        assert_eq!(String::from_utf8(got).expect("UTF-8"), reference(&o));
    }
}

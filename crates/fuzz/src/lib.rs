//! Fuzzing for apiary's readers and config parsers, as proptests so that CI runs them
//! with nothing but cargo: every trace format, the cluster specs, HiveD configs,
//! topologies, the server config and the API's JSON bodies get arbitrary bytes and
//! structured mutations of a valid sample (fields replaced by extreme values, lines
//! dropped, repeated or swapped, Windows line endings, truncation). A target passes
//! when every input is accepted or refused with an error: no panic, no abort, and no
//! run (of the parser, or of the simulator on what a trace reader accepts) that
//! outlasts a watchdog.
//!
//! `APIARY_FUZZ_CASES` sets the cases per target (default 64, what the README's test
//! command runs); `APIARY_FUZZ_SEED` a seed (default 0, so a plain test run is
//! reproducible) or `random` for a fresh one, printed when a case fails.

use proptest::prelude::*;
#[cfg(test)]
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed};
use std::time::Duration;

/// The runner configuration every target uses (see the crate docs for the variables).
pub fn config() -> Config {
    let cases = std::env::var("APIARY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let rng_seed = match std::env::var("APIARY_FUZZ_SEED").ok().as_deref() {
        Some("random") => RngSeed::Random,
        Some(s) => RngSeed::Fixed(s.parse().unwrap_or(0)),
        None => RngSeed::Fixed(0),
    };
    Config {
        cases,
        rng_seed,
        // Failures are reported with their input; files of regressions would make a
        // found bug fail every later run before it is fixed.
        failure_persistence: None,
        ..Config::default()
    }
}

/// Values that have broken parsers before: integers at and past every width, signs,
/// non-finite and extreme floats, impossible dates, empty and non-ASCII text.
pub const EXTREMES: &[&str] = &[
    "",
    "0",
    "-1",
    "-0",
    "1",
    "255",
    "65536",
    "2147483648",
    "4294967296",
    "4294967297",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e15",
    "1e17",
    "1e300",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "-inf",
    "0.0000001",
    "5000000",
    "2017-02-30 00:00:00",
    "2017-03-01 -1:00:00",
    "900000000-10-01 00:00:00",
    "true",
    "null",
    "[]",
    "{}",
    "\"",
    "'",
    "\u{0}",
    "é",
    "🐝",
    "a,b",
    "\t",
];

/// One structured change to a text.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Replace the n-th token (text between separators) with an extreme value.
    Token(prop::sample::Index, &'static str),
    /// Drop a line.
    DropLine(prop::sample::Index),
    /// Repeat a line.
    RepeatLine(prop::sample::Index),
    /// Swap two lines.
    SwapLines(prop::sample::Index, prop::sample::Index),
    /// Cut the text at a byte.
    Truncate(prop::sample::Index),
    /// Insert a byte.
    InsertByte(prop::sample::Index, u8),
    /// Windows line endings.
    Crlf,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let idx = any::<prop::sample::Index>;
    prop_oneof![
        6 => (idx(), prop::sample::select(EXTREMES)).prop_map(|(i, v)| Mutation::Token(i, v)),
        1 => idx().prop_map(Mutation::DropLine),
        1 => idx().prop_map(Mutation::RepeatLine),
        1 => (idx(), idx()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        1 => idx().prop_map(Mutation::Truncate),
        1 => (idx(), any::<u8>()).prop_map(|(i, b)| Mutation::InsertByte(i, b)),
        1 => Just(Mutation::Crlf),
    ]
}

fn is_separator(b: u8) -> bool {
    matches!(
        b,
        b',' | b'\t' | b'\n' | b':' | b'=' | b'"' | b'{' | b'}' | b'[' | b']' | b' '
    )
}

/// Applies one mutation.
pub fn apply(text: &mut Vec<u8>, m: &Mutation) {
    let lines =
        |t: &[u8]| -> Vec<Vec<u8>> { t.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect() };
    match m {
        Mutation::Token(i, v) => {
            let mut spans = Vec::new();
            let mut start = None;
            for (k, &b) in text.iter().enumerate() {
                match (is_separator(b), start) {
                    (false, None) => start = Some(k),
                    (true, Some(s)) => {
                        spans.push((s, k));
                        start = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = start {
                spans.push((s, text.len()));
            }
            if !spans.is_empty() {
                let (a, b) = spans[i.index(spans.len())];
                text.splice(a..b, v.bytes());
            }
        }
        Mutation::DropLine(i) => {
            let mut l = lines(text);
            l.remove(i.index(l.len()));
            *text = l.join(&b'\n');
        }
        Mutation::RepeatLine(i) => {
            let mut l = lines(text);
            let k = i.index(l.len());
            l.insert(k, l[k].clone());
            *text = l.join(&b'\n');
        }
        Mutation::SwapLines(a, b) => {
            let mut l = lines(text);
            let n = l.len();
            l.swap(a.index(n), b.index(n));
            *text = l.join(&b'\n');
        }
        Mutation::Truncate(i) => {
            let k = i.index(text.len() + 1);
            text.truncate(k);
        }
        Mutation::InsertByte(i, b) => {
            let k = i.index(text.len() + 1);
            text.insert(k, *b);
        }
        Mutation::Crlf => {
            let mut out = Vec::with_capacity(text.len() + text.len() / 8);
            for &b in text.iter() {
                if b == b'\n' {
                    out.push(b'\r');
                }
                out.push(b);
            }
            *text = out;
        }
    }
}

/// A valid sample with one to four mutations applied.
pub fn mutated(sample: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(mutation(), 1..=4).prop_map(move |ms| {
        let mut t = sample.as_bytes().to_vec();
        for m in &ms {
            apply(&mut t, m);
        }
        t
    })
}

/// Arbitrary bytes, or (half the time) a mutated sample: raw bytes mostly test the
/// first line's checks, mutations reach the row parsers.
pub fn input(sample: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        mutated(sample),
        mutated(sample),
    ]
}

/// Runs `f` on its own thread and returns its result; a run past `limit` fails the
/// case as a hang (the thread is left behind: the test has failed anyway).
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = worker.join();
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {limit:?} (a hang)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_change_what_they_say() {
        let mut t = b"a,b\n1,2\n".to_vec();
        apply(&mut t, &Mutation::Crlf);
        assert_eq!(t, b"a,b\r\n1,2\r\n");
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let i = any::<prop::sample::Index>()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut t = b"a,b\n1,2".to_vec();
        apply(&mut t, &Mutation::RepeatLine(i));
        assert_eq!(t.split(|&b| b == b'\n').count(), 3);
        let mut t = b"a,b\n1,2".to_vec();
        apply(&mut t, &Mutation::Token(i, "NaN"));
        assert_eq!(String::from_utf8(t).unwrap().matches("NaN").count(), 1);
        let r = std::panic::catch_unwind(|| {
            within(Duration::from_millis(50), "spin", || {
                loop {
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        });
        assert!(r.is_err());
        assert_eq!(within(Duration::from_secs(5), "quick", || 7), 7);
    }
}

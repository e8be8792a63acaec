//! Policies without Rust: the example Python plugin (examples/plugins/fifo.py) gives the
//! built-in `fifo`'s jobs.csv byte for byte under both drivers, and a plugin that breaks
//! the protocol stops the run with a message naming the command and what it broke.
//! Needs `python3`; without it the tests skip, except under CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_apiary");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("apiary-plugin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn apiary(args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(root())
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || std::env::var("CI").is_err(),
        "python3 missing under CI"
    );
    ok
}

const FIFO_PY: &str = "plugin:cmd=python3 examples/plugins/fifo.py";

#[test]
fn the_python_fifo_plugin_gives_fifo_byte_for_byte_under_both_drivers() {
    if !python() {
        return;
    }
    let d = scratch("fifo");
    let native = d.join("native");
    let o = apiary(&[
        "simulate",
        "-q",
        "-p",
        "fifo",
        "-o",
        native.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let expected = std::fs::read(native.join("jobs.csv")).unwrap();
    for driver in ["sim", "live"] {
        let out = d.join(driver);
        let o = apiary(&[
            "simulate",
            "-q",
            "-p",
            FIFO_PY,
            "--driver",
            driver,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{driver}: {}", text(&o.stderr));
        let got = std::fs::read(out.join("jobs.csv")).unwrap();
        assert!(got == expected, "{driver}: jobs.csv differs from fifo's");
        let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
        assert!(summary.contains(r#""finished": 3000"#), "{summary}");
    }
}

/// Writes a plugin script that answers `hello` with `hello` and then each `schedule`
/// with `reply` (a Python expression over `msg`).
fn script(d: &Path, name: &str, hello: &str, reply: &str) -> String {
    let path = d.join(name);
    let body = format!(
        "import json, sys\n\
         for line in sys.stdin:\n\
         \x20   msg = json.loads(line)\n\
         \x20   if msg['type'] == 'hello':\n\
         \x20       print({hello}, flush=True)\n\
         \x20   elif msg['type'] == 'schedule':\n\
         \x20       print({reply}, flush=True)\n"
    );
    std::fs::write(&path, body).unwrap();
    format!("plugin:cmd=python3 {}", path.display())
}

#[test]
fn a_plugin_that_breaks_the_protocol_stops_the_run_and_says_how() {
    if !python() {
        return;
    }
    let d = scratch("broken");
    let hello = r#"'{"type": "hello", "protocol": 1}'"#;
    let cases = [
        (
            script(&d, "v2.py", r#"'{"type": "hello", "protocol": 2}'"#, "''"),
            "speaks protocol 2; this apiary speaks 1",
        ),
        (
            script(&d, "garbage.py", hello, "'not json'"),
            "output line 2: expected its `decide` message",
        ),
        (
            script(
                &d,
                "typo.py",
                hello,
                r#"'{"type": "decide", "actoins": []}'"#,
            ),
            "unknown field `actoins`",
        ),
        (
            script(
                &d,
                "future.py",
                hello,
                r#"'{"type": "decide", "actions": [{"start": 999999}]}'"#,
            ),
            "names job 999999, but only",
        ),
        (
            script(
                &d,
                "place.py",
                hello,
                r#"json.dumps({"type": "decide", "actions": [{"start": 0, "placement": "sideways"}]})"#,
            ),
            "actions[0].placement `sideways` is none of",
        ),
        (
            script(&d, "quits.py", hello, "sys.exit(3)"),
            "exited (exit status: 3) where its `decide` was due",
        ),
        (
            "plugin:cmd=/nonexistent/plugin".to_string(),
            "cannot start it",
        ),
    ];
    for (policy, want) in cases {
        let o = apiary(&["simulate", "-q", "-p", &policy]);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{policy} succeeded");
        assert!(err.contains("plugin `"), "{policy}: {err}");
        assert!(err.contains(want), "{policy}: wanted `{want}` in: {err}");
    }
    let o = apiary(&["simulate", "-q", "-p", "plugin"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("give the plugin's command"),
        "{}",
        text(&o.stderr)
    );
}

/// A preemptive plugin: least attained service first over whole-cluster counting, from
/// the `running` view. It exercises preemptions and wake-ups, and every job finishes.
#[test]
fn a_preemptive_plugin_reads_the_running_jobs_and_preempts() {
    if !python() {
        return;
    }
    let d = scratch("las");
    let out = d.join("out");
    let o = apiary(&[
        "simulate",
        "-q",
        "-p",
        "plugin:cmd=python3 examples/plugins/las.py",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["finished"], 3000, "{summary}");
    assert!(summary["preemptions"].as_u64().unwrap() > 0, "{summary}");
    // Least attained service keeps short jobs from waiting behind long ones: far below
    // FIFO's 42.5 h of mean pending time on this sample.
    assert!(
        summary["pending_mean"].as_f64().unwrap() < 3.0 * 3600.0,
        "{summary}"
    );
}

//! Data-driven HiveD scenarios: `testdata/hived/*.txt` hold a replay scenario, a `----`
//! line, then one JSON object per checked step; every key given must match the replay's
//! report for that step.

use std::path::{Path, PathBuf};

use apiary_hived::Config;
use apiary_hived::replay::{self, ConfigRef, Scenario};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hived")
}

fn load(r: &ConfigRef) -> Result<Config, String> {
    match r {
        ConfigRef::Inline(c) => Ok((**c).clone()),
        ConfigRef::Path(p) => {
            let text = std::fs::read_to_string(dir().join(p)).map_err(|e| e.to_string())?;
            Config::parse(&text).map_err(|e| e.to_string())
        }
    }
}

fn run_file(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let (scen, expected) = text.split_once("\n----\n").expect("a ---- separator");
    let scenario = Scenario::parse(scen).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let checked = replay::run_checked(&scenario, &load, true).unwrap();
    for (i, (_, v)) in checked.iter().enumerate() {
        assert!(v.is_empty(), "{} step {i}: {v:#?}", path.display());
    }
    let lines: Vec<serde_json::Value> = checked.into_iter().map(|c| c.0).collect();
    if std::env::var_os("HIVED_DUMP").is_some() {
        for l in &lines {
            let mut l = l.clone();
            if let Some(m) = l.as_object_mut() {
                m.remove("clusterStatus");
                m.remove("affinityGroups");
            }
            eprintln!("{l}");
        }
    }
    let mut failures = Vec::new();
    for (i, l) in expected.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let want: Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("{}: expected line {}: {e}", path.display(), i + 1));
        let step = want["step"].as_u64().expect("step") as usize;
        let got = &lines[step];
        for (k, v) in want.as_object().unwrap() {
            // Keys starting with '/' are JSON pointers into the report (inspect included).
            let actual = if k.starts_with('/') {
                got.pointer(k).unwrap_or(&Value::Null)
            } else {
                &got[k]
            };
            if actual != v {
                failures.push(format!(
                    "{} step {step}: {k} = {} (want {v})",
                    path.file_name().unwrap().to_string_lossy(),
                    actual
                ));
            }
        }
    }
    failures
}

#[test]
fn hived_scenarios() {
    let mut failures = Vec::new();
    let mut n = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txt") {
            n += 1;
            failures.extend(run_file(&p));
        }
    }
    assert!(n > 0, "no scenarios found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

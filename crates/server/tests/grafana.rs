//! The Grafana dashboard in deploy/grafana/ queries only metrics the server exports:
//! every `apiary_*` name in its expressions (histogram series by their base name) is a
//! metric `/metrics` writes, with the labels the queries select on.

mod common;

use apiary_server::core::Core;

#[test]
fn every_metric_the_dashboard_queries_exists() {
    let text = include_str!("../../../deploy/grafana/apiary.json");
    let dash: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            exprs.push(q.to_string());
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");

    // What /metrics writes, on a server with jobs waiting and running.
    let cfg = common::two_nodes("fifo", "").unwrap();
    let mut c = Core::new(cfg, 0).unwrap();
    for gpus in [4, 8, 8] {
        let s =
            serde_json::from_value(serde_json::json!({"gpus": gpus, "command": ["true"]})).unwrap();
        c.submit(s, 0).unwrap();
    }
    c.schedule(0);
    let metrics = apiary_server::http::metrics_text(&c);
    let exported: Vec<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();

    let mut seen = 0;
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("apiary_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| exported.contains(b))
                .unwrap_or(&name);
            assert!(
                exported.contains(&base),
                "the dashboard queries {name}, which /metrics does not export ({exported:?})"
            );
            seen += 1;
        }
    }
    assert!(seen >= 12, "{seen} metric references");
    // The labels the dashboard groups and filters by are on the series.
    for label in ["vc=", "state=", "health=", "kind=", "le="] {
        assert!(metrics.contains(label), "no {label} label in:\n{metrics}");
    }
    assert!(
        metrics.contains("apiary_queue_length{vc=\"default\"}"),
        "{metrics}"
    );
}

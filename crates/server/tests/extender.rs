//! The Kubernetes scheduler extender over real HTTP, replaying the golden files in
//! `testdata/extender/`: each step is a command (with a JSON body for raw requests),
//! `----`, and what it printed. `APIARY_REWRITE=1` writes what the steps print now.
//!
//! The API server is `apiary_server::extender::stub` (no API server installs here).
//!
//! Commands:
//! - `node NAME ready|notready`: the API server's node.
//! - `pod NS/NAME UID` + the pod's scheduling spec (YAML, one line): a pending pod that
//!   opts in to HiveD.
//! - `delete NS/NAME`, `complete NS/NAME`: the pod is deleted, or ends.
//! - `sync`: the extender lists pods and nodes.
//! - `restart`: a fresh extender over the same API server (recovery).
//! - `filter NS/NAME NODES`, `preempt NS/NAME NODES`, `bind NS/NAME NODE`: the call as
//!   kube-scheduler makes it for the pod (NODES comma-separated).
//! - `POST PATH` / `GET PATH` + an optional JSON body: a raw request, as recorded.
//! - `bound [N]`: the bindings the API server has created (waiting for N of them).

use apiary_server::extender::http::{Shared, router};
use apiary_server::extender::kube::Kube;
use apiary_server::extender::stub::Stub;
use apiary_server::extender::{Extender, serve::sync_once};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const HIVED: &str = "../../testdata/hived/feature-config-2.yaml";

struct World {
    rt: tokio::runtime::Runtime,
    stub: Stub,
    app: Arc<Shared>,
    url: String,
    agent: ureq::Agent,
}

fn extender(rt: &tokio::runtime::Runtime, kube: &str) -> (Arc<Shared>, String) {
    let cfg = apiary_hived::Config::parse(&std::fs::read_to_string(HIVED).unwrap()).unwrap();
    let app = Arc::new(Shared {
        ext: Mutex::new(Extender::new(&cfg, 3).unwrap()),
        kube: Kube::new(kube, None),
    });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let r = router(app.clone());
    rt.spawn(async move { axum::serve(listener, r).await });
    (app, url)
}

impl World {
    fn new() -> World {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let stub = rt.block_on(Stub::start()).unwrap();
        let (app, url) = extender(&rt, &stub.url);
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build(),
        );
        World {
            rt,
            stub,
            app,
            url,
            agent,
        }
    }

    fn pod(&self, key: &str) -> Value {
        let o = self.stub.objects.lock().unwrap();
        o.pods
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no pod {key}"))
    }

    fn post(&self, path: &str, body: &Value) -> String {
        let mut r = self
            .agent
            .post(&format!("{}{path}", self.url))
            .send_json(body)
            .unwrap();
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        format!("{status} {}", compact(&text))
    }

    fn get(&self, path: &str) -> String {
        let mut r = self
            .agent
            .get(&format!("{}{path}", self.url))
            .call()
            .unwrap();
        let status = r.status().as_u16();
        format!(
            "{status} {}",
            compact(&r.body_mut().read_to_string().unwrap())
        )
    }

    fn run(&mut self, cmd: &str, body: &str) -> String {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let nodes = |s: &str| -> Vec<String> { s.split(',').map(str::to_string).collect() };
        match words.as_slice() {
            ["node", name, state] => {
                self.stub.set_node(name, *state == "ready");
                "ok".into()
            }
            ["pod", key, uid] => {
                let (ns, name) = key.split_once('/').unwrap();
                self.stub.add_pod(json!({
                    "metadata": {"name": name, "namespace": ns, "uid": uid,
                                 "annotations": {"hivedscheduler.microsoft.com/pod-scheduling-spec": body.trim()}},
                    "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "main", "image": "busybox",
                             "resources": {"limits": {"hivedscheduler.microsoft.com/pod-scheduling-enable": "1"}}}]},
                    "status": {"phase": "Pending"}
                }));
                "ok".into()
            }
            ["delete", key] => {
                assert!(self.stub.delete_pod(key), "no pod {key}");
                "ok".into()
            }
            ["complete", key] => {
                let mut o = self.stub.objects.lock().unwrap();
                o.pods.get_mut(*key).unwrap()["status"]["phase"] = json!("Succeeded");
                "ok".into()
            }
            ["sync"] => {
                let app = self.app.clone();
                let problems = self.rt.block_on(async move {
                    tokio::task::spawn_blocking(move || sync_once(&app))
                        .await
                        .unwrap()
                });
                let problems = problems.unwrap();
                if problems.is_empty() {
                    "ok".into()
                } else {
                    problems.join("\n")
                }
            }
            ["restart"] => {
                let (app, url) = extender(&self.rt, &self.stub.url);
                self.app = app;
                self.url = url;
                "ok".into()
            }
            ["filter", key, ns] => self.post(
                "/v1/extender/filter",
                &json!({"pod": self.pod(key), "nodenames": nodes(ns)}),
            ),
            ["prioritize", key, ns] => self.post(
                "/v1/extender/prioritize",
                &json!({"pod": self.pod(key), "nodenames": nodes(ns)}),
            ),
            ["preempt", key, ns] => {
                let victims: serde_json::Map<String, Value> = nodes(ns)
                    .into_iter()
                    .map(|n| (n, json!({"pods": [], "numPDBViolations": 0})))
                    .collect();
                self.post(
                    "/v1/extender/preempt",
                    &json!({"pod": self.pod(key), "nodeNameToMetaVictims": victims}),
                )
            }
            ["bind", key, node] => {
                let p = self.pod(key);
                let m = &p["metadata"];
                self.post(
                    "/v1/extender/bind",
                    &json!({"podName": m["name"], "podNamespace": m["namespace"], "podUID": m["uid"], "node": node}),
                )
            }
            ["POST", path] => {
                // The body as recorded, byte for byte (malformed ones included).
                let mut r = self
                    .agent
                    .post(&format!("{}{path}", self.url))
                    .content_type("application/json")
                    .send(body.trim())
                    .unwrap();
                let status = r.status().as_u16();
                format!(
                    "{status} {}",
                    compact(&r.body_mut().read_to_string().unwrap())
                )
            }
            ["GET", path] => self.get(path),
            ["bound", rest @ ..] => {
                // `bound N`: a bind under way in the background (a force bind) is waited
                // for, up to 10 s, until the API server has N.
                let want: usize = rest.first().map_or(0, |n| n.parse().unwrap());
                let t0 = std::time::Instant::now();
                while self.stub.objects.lock().unwrap().bindings.len() < want
                    && t0.elapsed() < std::time::Duration::from_secs(10)
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let o = self.stub.objects.lock().unwrap();
                let mut out: Vec<String> = o
                    .bindings
                    .iter()
                    .map(|(k, n)| {
                        let iso = o.pods[k]["metadata"]["annotations"]["hivedscheduler.microsoft.com/pod-leaf-cell-isolation"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        format!("{k} -> {n} [{iso}]")
                    })
                    .collect();
                if out.is_empty() {
                    out.push("none".into());
                }
                out.join("\n")
            }
            _ => panic!("unknown command: {cmd}"),
        }
    }
}

fn compact(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| text.to_string())
}

/// A step: the command, its body, and what it printed.
struct Step {
    /// The comment lines above it.
    notes: String,
    cmd: String,
    body: String,
    expected: String,
}

fn parse(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut notes = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim().is_empty() {
            continue;
        }
        if l.starts_with('#') {
            notes.push_str(l);
            notes.push('\n');
            continue;
        }
        let cmd = l.to_string();
        let mut body = String::new();
        for b in lines.by_ref() {
            if b == "----" {
                break;
            }
            body.push_str(b);
            body.push('\n');
        }
        let mut expected = String::new();
        while let Some(e) = lines.peek() {
            if e.is_empty() {
                break;
            }
            expected.push_str(e);
            expected.push('\n');
            lines.next();
        }
        steps.push(Step {
            notes: std::mem::take(&mut notes),
            cmd,
            body,
            expected: expected.trim_end().to_string(),
        });
    }
    steps
}

#[test]
fn golden_files() {
    let dir = PathBuf::from("../../testdata/extender");
    let rewrite = std::env::var("APIARY_REWRITE").is_ok();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the golden files are there");
    let mut failures = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let steps = parse(&text);
        let mut w = World::new();
        let mut out = String::new();
        for (i, s) in steps.iter().enumerate() {
            let got = w.run(&s.cmd, &s.body);
            if got != s.expected {
                failures.push(format!(
                    "{} step {} ({}):\n  expected: {}\n  got:      {}",
                    f.display(),
                    i + 1,
                    s.cmd,
                    s.expected,
                    got
                ));
            }
            out.push_str(&format!(
                "{}{}\n{}----\n{}\n\n",
                s.notes, s.cmd, s.body, got
            ));
        }
        if rewrite {
            std::fs::write(&f, out.trim_end().to_string() + "\n").unwrap();
        }
    }
    if !rewrite {
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

//! A stand-in for the Kubernetes API server, for tests and `apiary bench` only: no API
//! server binary installs on the machines these run on. It serves the three calls the
//! extender makes, as the API server answers them: lists of pods and nodes, and a pod's
//! binding, created at most once (a second is refused with 409, a missing pod with
//! 404). Pods and nodes are plain JSON, added and removed by the test.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The stub's objects.
#[derive(Default)]
pub struct Objects {
    /// Pods by `namespace/name`.
    pub pods: BTreeMap<String, Value>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Value>,
    /// Bindings created, in order: (`namespace/name`, node).
    pub bindings: Vec<(String, String)>,
}

/// A running stub.
pub struct Stub {
    /// Its URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Its objects, shared with its handlers.
    pub objects: Arc<Mutex<Objects>>,
}

impl Stub {
    /// Starts a stub on a loopback port on the current tokio runtime.
    pub async fn start() -> std::io::Result<Stub> {
        let objects = Arc::new(Mutex::new(Objects::default()));
        let app = Router::new()
            .route("/api/v1/pods", get(pods))
            .route("/api/v1/nodes", get(nodes))
            .route("/api/v1/namespaces/{ns}/pods/{name}/binding", post(bind))
            .with_state(objects.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Stub { url, objects })
    }

    /// Adds (or replaces) a pod.
    pub fn add_pod(&self, pod: Value) {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let key = format!("{ns}/{}", pod["metadata"]["name"].as_str().unwrap_or(""));
        self.objects
            .lock()
            .expect("stub lock")
            .pods
            .insert(key, pod);
    }

    /// Deletes a pod by `namespace/name`.
    pub fn delete_pod(&self, key: &str) -> bool {
        self.objects
            .lock()
            .expect("stub lock")
            .pods
            .remove(key)
            .is_some()
    }

    /// Adds (or replaces) a node, `Ready` or not.
    pub fn set_node(&self, name: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        self.objects.lock().expect("stub lock").nodes.insert(
            name.to_string(),
            json!({"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": status}]}}),
        );
    }
}

type Objs = Arc<Mutex<Objects>>;

async fn pods(State(o): State<Objs>) -> impl IntoResponse {
    let items: Vec<Value> = o
        .lock()
        .expect("stub lock")
        .pods
        .values()
        .cloned()
        .collect();
    axum::Json(json!({"kind": "PodList", "apiVersion": "v1", "items": items}))
}

async fn nodes(State(o): State<Objs>) -> impl IntoResponse {
    let items: Vec<Value> = o
        .lock()
        .expect("stub lock")
        .nodes
        .values()
        .cloned()
        .collect();
    axum::Json(json!({"kind": "NodeList", "apiVersion": "v1", "items": items}))
}

fn status(code: StatusCode, reason: &str, message: String) -> axum::response::Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    (code, axum::Json(body)).into_response()
}

async fn bind(
    State(o): State<Objs>,
    Path((ns, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let Ok(b) = serde_json::from_slice::<super::wire::Binding>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "not a Binding".into(),
        );
    };
    let key = format!("{ns}/{name}");
    let mut o = o.lock().expect("stub lock");
    let Some(pod) = o.pods.get_mut(&key) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pods \"{name}\" not found"),
        );
    };
    if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{node}\""
            ),
        );
    }
    if !b.metadata.uid.is_empty()
        && pod["metadata"]["uid"].as_str() != Some(b.metadata.uid.as_str())
    {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!("pod {name}: UID precondition failed"),
        );
    }
    pod["spec"]["nodeName"] = json!(b.target.name);
    for (k, v) in &b.metadata.annotations {
        pod["metadata"]["annotations"][k] = json!(v);
    }
    o.bindings.push((key, b.target.name.clone()));
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201});
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

//! The extender's HTTP face: `POST /v1/extender/{filter,prioritize,preempt,bind}` in
//! Kubernetes' extender JSON, and HiveD's inspect API (`GET /v1/inspect/...`).
//!
//! A body that is not the call's JSON is answered 400 with the JSON path of the field at
//! fault, in the call's result shape (`{"error": "pod.metadata.uid: invalid type ..."}`)
//! so kube-scheduler logs it; a call the pod's state refuses is answered 400 the same
//! way, and one the scheduler cannot serve 500. Preempt has no error field: its errors
//! are a JSON string, as upstream.

use super::kube::{Kube, KubeError};
use super::wire::*;
use super::{BindOrder, Extender, ExtenderError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use std::sync::{Arc, Mutex};

/// What the handlers share: the state machine and the API server that binds.
pub struct Shared {
    /// The state machine; every call holds it briefly, never across I/O.
    pub ext: Mutex<Extender>,
    /// Where binds are written.
    pub kube: Kube,
}

impl Shared {
    /// The state machine, locked (briefly: never across I/O).
    pub fn ext(&self) -> std::sync::MutexGuard<'_, Extender> {
        self.ext.lock().expect("the extender's lock")
    }
}

type App = Arc<Shared>;

/// The paths served, for `GET /`.
pub const PATHS: &[&str] = &[
    "/v1/extender/filter",
    "/v1/extender/prioritize",
    "/v1/extender/preempt",
    "/v1/extender/bind",
    "/v1/inspect/affinitygroups/",
    "/v1/inspect/clusterstatus",
    "/v1/inspect/clusterstatus/physicalcluster",
    "/v1/inspect/clusterstatus/virtualclusters/",
    "/v1/inspect/pods",
    "/healthz",
];

/// The router.
pub fn router(app: App) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { axum::Json(serde_json::json!({ "paths": PATHS })) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/extender/filter", post(filter))
        .route("/v1/extender/prioritize", post(prioritize))
        .route("/v1/extender/preempt", post(preempt))
        .route("/v1/extender/bind", post(bind))
        .route("/v1/inspect/affinitygroups/", get(groups))
        .route("/v1/inspect/affinitygroups/{*name}", get(group))
        .route("/v1/inspect/clusterstatus", get(cluster))
        .route("/v1/inspect/clusterstatus/physicalcluster", get(physical))
        .route("/v1/inspect/clusterstatus/virtualclusters/", get(virtuals))
        .route(
            "/v1/inspect/clusterstatus/virtualclusters/{vc}",
            get(virtual_one),
        )
        .route("/v1/inspect/pods", get(pods))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::http::MAX_BODY * 16,
        ))
        .with_state(app)
}

/// Serves the extender on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
}

fn reply<T: serde::Serialize>(status: u16, v: &T) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(v)).into_response()
}

/// Parses a body, naming the JSON path of a bad field. Well-formed bodies take the plain
/// parser; only a refused one is parsed again to find the path (tracking it costs on
/// every one of a filter's 5,000 node names).
fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, String> {
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let v: T = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("{what}: {}", e.into_inner())
        } else {
            format!("{what}: {path}: {}", e.into_inner())
        }
    })?;
    de.end()
        .map_err(|e| format!("{what}: after the JSON value: {e}"))?;
    Ok(v)
}

async fn filter(State(app): State<App>, body: Bytes) -> Response {
    let refuse = |status, error: String| {
        reply(
            status,
            &ExtenderFilterResult {
                error,
                ..ExtenderFilterResult::default()
            },
        )
    };
    let args: ExtenderArgs = match parse(&body, "ExtenderArgs") {
        Ok(a) => a,
        Err(e) => return refuse(400, e),
    };
    let r = app.ext().filter(args);
    match r {
        Ok((res, force)) => {
            if let Some(order) = force {
                tokio::task::spawn_blocking(move || write_bind(&app, &order));
            }
            reply(200, &res)
        }
        Err(e) => refuse(e.status(), e.to_string()),
    }
}

async fn prioritize(State(app): State<App>, body: Bytes) -> Response {
    match parse::<ExtenderArgs>(&body, "ExtenderArgs") {
        Ok(args) => reply(200, &app.ext().prioritize(&args)),
        Err(e) => reply(400, &e),
    }
}

async fn preempt(State(app): State<App>, body: Bytes) -> Response {
    let args: ExtenderPreemptionArgs = match parse(&body, "ExtenderPreemptionArgs") {
        Ok(a) => a,
        Err(e) => return reply(400, &e),
    };
    let r = app.ext().preempt(&args);
    match r {
        Ok(res) => reply(200, &res),
        Err(e) => reply(e.status(), &e.to_string()),
    }
}

async fn bind(State(app): State<App>, body: Bytes) -> Response {
    let refuse = |status, error: String| reply(status, &ExtenderBindingResult { error });
    let args: ExtenderBindingArgs = match parse(&body, "ExtenderBindingArgs") {
        Ok(a) => a,
        Err(e) => return refuse(400, e),
    };
    let order = match app.ext().bind(&args) {
        Ok(o) => o,
        Err(e) => return refuse(e.status(), e.to_string()),
    };
    let app2 = app.clone();
    match tokio::task::spawn_blocking(move || write_bind(&app2, &order)).await {
        Ok(Ok(())) => reply(200, &ExtenderBindingResult::default()),
        Ok(Err(e)) => refuse(500, e.to_string()),
        Err(e) => refuse(500, format!("the bind did not finish: {e}")),
    }
}

/// Writes a bind to the API server and records it. A 409 means the pod is bound
/// already (an earlier bind or a force bind got there first): Kubernetes binds once.
pub fn write_bind(app: &Shared, order: &BindOrder) -> Result<(), ExtenderError> {
    match app.kube.bind(&order.binding) {
        Ok(()) | Err(KubeError::Refused { status: 409, .. }) => {
            app.ext().bound(&order.uid);
            Ok(())
        }
        Err(e) => Err(ExtenderError::Platform(e.to_string())),
    }
}

async fn groups(State(app): State<App>) -> Response {
    let items = app.ext().hived().affinity_groups();
    reply(200, &serde_json::json!({ "items": items }))
}

async fn group(State(app): State<App>, Path(name): Path<String>) -> Response {
    let g = app.ext().hived().affinity_group(&name);
    match g {
        Some(g) => reply(200, &g),
        None => reply(
            400,
            &format!("affinity group {name} is neither allocated nor preempting"),
        ),
    }
}

async fn cluster(State(app): State<App>) -> Response {
    reply(200, &app.ext().hived().cluster_status())
}

async fn physical(State(app): State<App>) -> Response {
    reply(200, &app.ext().hived().physical_cluster_status())
}

async fn virtuals(State(app): State<App>) -> Response {
    reply(200, &app.ext().hived().cluster_status().virtual_clusters)
}

async fn virtual_one(State(app): State<App>, Path(vc): Path<String>) -> Response {
    let s = app.ext().hived().virtual_cluster_status(&vc);
    match s {
        Some(s) => reply(200, &s),
        None => reply(400, &format!("virtual cluster {vc} does not exist")),
    }
}

async fn pods(State(app): State<App>) -> Response {
    reply(200, &app.ext().counts())
}

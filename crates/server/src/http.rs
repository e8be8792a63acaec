//! The JSON API under `/v1`. Errors are `{"error": {"status", "field", "message"}}` with
//! the field's JSON path when one is at fault; bodies are limited to [`MAX_BODY`].

use crate::core::ApiError;
use crate::service::Handle;
use crate::types::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Largest request body accepted, bytes.
pub const MAX_BODY: usize = 1 << 20;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::json!({"error": {
            "status": self.status,
            "field": self.field,
            "message": self.message,
        }});
        (code, axum::Json(body)).into_response()
    }
}

fn json<T: serde::Serialize>(code: StatusCode, v: &T) -> Response {
    (code, axum::Json(v)).into_response()
}

/// Parses a body, naming the JSON path of a bad field.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        ApiError {
            status: 400,
            field,
            message: e.into_inner().to_string(),
        }
    })
}

/// The router over a running scheduler.
pub fn router(h: Handle) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{name}/cordon", post(cordon))
        .route("/v1/nodes/{name}/uncordon", post(uncordon))
        .route("/v1/agents/heartbeat", post(heartbeat))
        .route("/v1/cluster", get(cluster))
        .route("/v1/policy", get(policy))
        .fallback(|| async {
            ApiError::not_found("no such endpoint (see /v1/jobs, /v1/nodes, /v1/cluster)")
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(h)
}

async fn submit(State(h): State<Handle>, body: Bytes) -> Result<Response, ApiError> {
    let spec: JobSpec = parse(&body)?;
    let r = h.submit(spec).await?;
    Ok(json(StatusCode::CREATED, &r))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    vc: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
}

async fn list_jobs(
    State(h): State<Handle>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad("query", e.body_text()))?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(
            serde_json::from_value::<JobState>(serde_json::Value::String(s.into()))
                .map_err(|_| ApiError::bad("state", format!("unknown state '{s}'")))?,
        ),
    };
    let limit = q.limit.unwrap_or(1000);
    let vc = q.vc;
    let jobs = h
        .read(move |c| {
            c.jobs(vc.as_deref(), state, limit)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        })
        .await?;
    Ok(json(StatusCode::OK, &jobs))
}

fn id_of(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad("id", format!("'{s}' is not a job id")))
}

async fn get_job(State(h): State<Handle>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = id_of(&id)?;
    let r = h.read(move |c| c.job(id).cloned()).await??;
    Ok(json(StatusCode::OK, &r))
}

async fn cancel(State(h): State<Handle>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let r = h.cancel(id_of(&id)?).await?;
    Ok(json(StatusCode::OK, &r))
}

async fn nodes(State(h): State<Handle>) -> Result<Response, ApiError> {
    Ok(json(StatusCode::OK, &h.read(|c| c.nodes()).await?))
}

async fn cordon(State(h): State<Handle>, Path(n): Path<String>) -> Result<Response, ApiError> {
    h.cordon(n, true).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn uncordon(State(h): State<Handle>, Path(n): Path<String>) -> Result<Response, ApiError> {
    h.cordon(n, false).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn heartbeat(State(h): State<Handle>, body: Bytes) -> Result<Response, ApiError> {
    let hb: Heartbeat = parse(&body)?;
    Ok(json(StatusCode::OK, &h.heartbeat(hb).await?))
}

async fn cluster(State(h): State<Handle>) -> Result<Response, ApiError> {
    Ok(json(StatusCode::OK, &h.read(|c| c.cluster()).await?))
}

async fn policy(State(h): State<Handle>) -> Result<Response, ApiError> {
    let v = h
        .read(|c| {
            serde_json::json!({
                "policy": c.config().policy,
                "params": c.config().params,
            })
        })
        .await?;
    Ok(json(StatusCode::OK, &v))
}

/// Serves the API on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    h: Handle,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(h))
        .with_graceful_shutdown(shutdown)
        .await
}

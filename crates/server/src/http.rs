//! The JSON API under `/v1`. Errors are `{"error": {"status", "field", "message"}}` with
//! the field's JSON path when one is at fault; bodies are limited to [`MAX_BODY`].

use crate::auth::{App, Caller};
use crate::config::TokenConfig;
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
        let mut r = (code, axum::Json(body)).into_response();
        if self.status == 401 {
            r.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

fn json<T: serde::Serialize>(code: StatusCode, v: &T) -> Response {
    (code, axum::Json(v)).into_response()
}

/// Parses a body, naming the JSON path of a bad field; anything but whitespace after
/// the value is refused.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let v = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        ApiError {
            status: 400,
            field,
            message: e.into_inner().to_string(),
        }
    })?;
    de.end().map_err(|e| ApiError {
        status: 400,
        field: None,
        message: format!("after the JSON value: {e}"),
    })?;
    Ok(v)
}

/// The router over a running scheduler; `tokens` empty leaves the API open.
pub fn router(h: Handle, tokens: Vec<TokenConfig>) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list_jobs))
        .route("/v1/jobs/archived", get(list_archived))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/output", get(output))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{name}/{action}", post(node_action))
        .route("/v1/agents/heartbeat", post(heartbeat))
        .route("/v1/cluster", get(cluster))
        .route("/v1/vcs", get(vcs))
        .route("/v1/vcs/{name}", axum::routing::put(put_vc))
        .route("/v1/policy", get(policy))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/", get(|| async { axum::response::Redirect::to("/ui") }))
        .route("/ui", get(crate::ui::overview))
        .route("/ui/jobs/{id}", get(crate::ui::job))
        .route("/ui/jobs/{id}/cancel", post(crate::ui::cancel))
        .fallback(|| async {
            ApiError::not_found("no such endpoint (see /v1/jobs, /v1/nodes, /v1/cluster)")
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(App::new(h, tokens))
}

async fn submit(State(app): State<App>, who: Caller, body: Bytes) -> Result<Response, ApiError> {
    who.user()?;
    let mut spec: JobSpec = parse(&body)?;
    if let Caller::Tenant { vc, .. } = &who {
        match &spec.vc {
            Some(v) if v != vc => {
                return Err(ApiError {
                    status: 403,
                    field: Some("vc".into()),
                    message: format!("this token submits to VC {vc} only"),
                });
            }
            _ => spec.vc = Some(vc.clone()),
        }
    }
    let r = app.h.submit_as(spec, who.name().map(String::from)).await?;
    Ok(json(StatusCode::CREATED, &r))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    vc: Option<String>,
    /// One state or several, comma-separated.
    state: Option<String>,
    limit: Option<usize>,
    after: Option<u64>,
    /// Unix seconds: archived jobs that ended from then on.
    since: Option<u64>,
    /// Only this user's jobs.
    user: Option<String>,
}

/// A listing's VC (a tenant's own, whatever it asks), states and page size.
fn selection(
    who: &Caller,
    q: &ListQuery,
) -> Result<(Option<String>, Vec<JobState>, usize), ApiError> {
    use crate::types::paging::LIST_MAX;
    let mut vc = q.vc.clone();
    if let Caller::Tenant { vc: own, .. } = who {
        if vc.as_ref().is_some_and(|v| v != own) {
            return Err(ApiError::forbidden(format!(
                "this token sees VC {own} only"
            )));
        }
        vc = Some(own.clone());
    }
    let mut states = Vec::new();
    for s in q.state.iter().flat_map(|s| s.split(',')) {
        states.push(
            serde_json::from_value::<JobState>(serde_json::Value::String(s.into())).map_err(
                |_| {
                    ApiError::bad(
                        "state",
                        format!(
                            "unknown state '{s}' (queued, running, succeeded, failed, cancelled)"
                        ),
                    )
                },
            )?,
        );
    }
    let limit = q.limit.unwrap_or(LIST_MAX);
    if !(1..=LIST_MAX).contains(&limit) {
        return Err(ApiError::bad(
            "limit",
            format!("{limit} is not 1 to {LIST_MAX}"),
        ));
    }
    Ok((vc, states, limit))
}

/// A page of records as `who` may see them, with the next page's `after` in its
/// header.
fn page(who: &Caller, jobs: Vec<JobRecord>, next: Option<u64>) -> Response {
    let jobs: Vec<JobRecord> = jobs.into_iter().map(|r| who.redact(r)).collect();
    let mut r = json(StatusCode::OK, &jobs);
    if let Some(n) = next {
        r.headers_mut().insert(
            crate::types::paging::NEXT_PAGE_HEADER,
            axum::http::HeaderValue::from(n),
        );
    }
    r
}

/// `GET /v1/jobs`: newest first, filtered by VC and state, in pages (see
/// [`crate::types::paging`]).
async fn list_jobs(
    State(app): State<App>,
    who: Caller,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    who.user()?;
    let Query(q) = q.map_err(|e| ApiError::bad("query", e.body_text()))?;
    if q.since.is_some() {
        return Err(ApiError::bad(
            "since",
            "the hot list has every job not yet archived: `since` is for /v1/jobs/archived",
        ));
    }
    let (vc, states, limit) = selection(&who, &q)?;
    let query = crate::core::JobQuery {
        vc,
        states,
        user: q.user.clone(),
        after: q.after,
        limit,
    };
    let (jobs, next) = app
        .h
        .read(move |c| c.page(&query, crate::types::paging::LIST_BYTES))
        .await?;
    Ok(page(&who, jobs, next))
}

/// `GET /v1/jobs/archived?since=UNIX_S`: jobs that left the hot state and ended at or
/// after `since`, as `GET /v1/jobs` pages them.
async fn list_archived(
    State(app): State<App>,
    who: Caller,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    who.user()?;
    let Query(q) = q.map_err(|e| ApiError::bad("query", e.body_text()))?;
    let (vc, states, limit) = selection(&who, &q)?;
    let Some(since) = q.since else {
        return Err(ApiError::bad(
            "since",
            "the archive is read from a time on: give since (unix seconds)",
        ));
    };
    let query = crate::archive::ArchiveQuery {
        since_ms: since.saturating_mul(1000),
        vc,
        states,
        user: q.user.clone(),
        after: q.after,
        limit,
    };
    let archive = app.h.archive();
    let (jobs, next) = tokio::task::spawn_blocking(move || {
        archive.query(&query, crate::types::paging::LIST_BYTES)
    })
    .await
    .map_err(|e| ApiError {
        status: 500,
        field: None,
        message: e.to_string(),
    })?
    .map_err(|e| ApiError {
        status: 500,
        field: None,
        message: e.to_string(),
    })?;
    Ok(page(&who, jobs, next))
}

fn id_of(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad("id", format!("'{s}' is not a job id")))
}

/// The job, if this caller may see it.
async fn visible(app: &App, who: &Caller, id: u64) -> Result<JobRecord, ApiError> {
    who.user()?;
    let r = app.h.read(move |c| c.job(id).map(|r| c.shown(r))).await??;
    if !who.sees(&r.vc) {
        return Err(ApiError::forbidden(format!(
            "job {id} belongs to another VC"
        )));
    }
    Ok(r)
}

async fn get_job(
    State(app): State<App>,
    who: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = id_of(&id)?;
    match visible(&app, &who, id).await {
        Err(e) if e.status == 404 => {}
        r => return Ok(json(StatusCode::OK, &who.redact(r?))),
    }
    // Archived in the last 31 days, as sacct finds it.
    let archive = app.h.archive();
    let since = crate::service::unix_ms().saturating_sub(31 * 86_400_000);
    let found = tokio::task::spawn_blocking(move || archive.find(id, since))
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
    match found {
        Some(r) if who.sees(&r.vc) => Ok(json(StatusCode::OK, &who.redact(r))),
        Some(_) => Err(ApiError::forbidden(format!(
            "job {id} belongs to another VC"
        ))),
        None => Err(ApiError::not_found(format!("no job {id}"))),
    }
}

/// `POST /v1/jobs/{id}/cancel` (and `DELETE /v1/jobs/{id}`). The body, if any, is
/// read and ignored, so that the connection closes after the reply with nothing left
/// unread in it.
async fn cancel(
    State(app): State<App>,
    who: Caller,
    Path(id): Path<String>,
    _body: Bytes,
) -> Result<Response, ApiError> {
    let id = id_of(&id)?;
    visible(&app, &who, id).await?;
    let r = app.h.cancel(id).await?;
    Ok(json(StatusCode::OK, &who.redact(r)))
}

/// The output the server holds of each part of the job's current attempt, for
/// `apiary logs -f`.
async fn output(
    State(app): State<App>,
    who: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = id_of(&id)?;
    visible(&app, &who, id).await?;
    let parts = app.h.read(move |c| c.output(id)).await??;
    Ok(json(StatusCode::OK, &parts))
}

async fn nodes(State(app): State<App>, who: Caller) -> Result<Response, ApiError> {
    who.user()?;
    let seen = who.clone();
    let list = app
        .h
        .read(move |c| {
            let mut list = c.nodes();
            // A tenant sees the nodes, but only its own VC's job ids on them.
            if !matches!(seen, Caller::Open | Caller::Admin(_)) {
                for n in &mut list {
                    n.jobs
                        .retain(|&id| c.job(id).is_ok_and(|r| seen.sees(&r.vc)));
                    // A shared GPU shows how full it is, and only the caller's holders.
                    for s in &mut n.shares {
                        s.holders
                            .retain(|h| c.job(h.job).is_ok_and(|r| seen.sees(&r.vc)));
                    }
                }
            }
            list
        })
        .await?;
    Ok(json(StatusCode::OK, &list))
}

/// `POST /v1/nodes/{name}/cordon`, `/uncordon` and `/drain`.
async fn node_action(
    State(app): State<App>,
    who: Caller,
    Path((n, verb)): Path<(String, String)>,
    _body: Bytes,
) -> Result<Response, ApiError> {
    who.admin()?;
    match verb.as_str() {
        "cordon" => app.h.cordon(n, true).await?,
        "uncordon" => app.h.cordon(n, false).await?,
        "drain" => {
            let requeued = app.h.drain(n).await?;
            return Ok(json(
                StatusCode::OK,
                &serde_json::json!({"requeued": requeued}),
            ));
        }
        _ => return Err(ApiError::not_found(format!("no node action '{verb}'"))),
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn heartbeat(State(app): State<App>, who: Caller, body: Bytes) -> Result<Response, ApiError> {
    if !matches!(who, Caller::Open | Caller::Admin(_) | Caller::Agent(_)) {
        return Err(ApiError::forbidden("heartbeats need an agent token"));
    }
    let hb: Heartbeat = parse(&body)?;
    who.serves(&hb.node)?;
    Ok(json(StatusCode::OK, &app.h.heartbeat(hb).await?))
}

async fn vcs(State(app): State<App>, who: Caller) -> Result<Response, ApiError> {
    who.user()?;
    let all = app.h.read(|c| c.vcs()).await?;
    let mine: Vec<_> = all
        .into_iter()
        .filter(|v| v["name"].as_str().is_some_and(|n| who.sees(n)))
        .collect();
    Ok(json(StatusCode::OK, &mine))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VcBody {
    #[serde(default)]
    quota_gpus: Option<u64>,
}

async fn put_vc(
    State(app): State<App>,
    who: Caller,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    who.admin()?;
    let b: VcBody = parse(&body)?;
    app.h.set_vc(name.clone(), b.quota_gpus).await?;
    let v = app
        .h
        .read(move |c| c.vcs().into_iter().find(|v| v["name"] == name.as_str()))
        .await?;
    Ok(json(StatusCode::OK, &v))
}

async fn cluster(State(app): State<App>, who: Caller) -> Result<Response, ApiError> {
    who.user()?;
    Ok(json(StatusCode::OK, &app.h.read(|c| c.cluster()).await?))
}

async fn policy(State(app): State<App>, who: Caller) -> Result<Response, ApiError> {
    who.user()?;
    let v = app
        .h
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
    tokens: Vec<TokenConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(h, tokens))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Prometheus text exposition (format 0.0.4) of the scheduler's state and counters.
pub fn metrics_text(c: &crate::core::Core) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let head = |o: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    let esc = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let cl = c.cluster();
    head(
        &mut out,
        "apiary_queue_length",
        "gauge",
        "Jobs waiting, per VC.",
    );
    for (vc, q) in c.queued_by_vc() {
        let _ = writeln!(out, "apiary_queue_length{{vc=\"{}\"}} {q}", esc(&vc));
    }
    for (name, help, v) in [
        (
            "apiary_running_jobs",
            "Jobs running.",
            cl.jobs.get("running").copied().unwrap_or(0),
        ),
        ("apiary_gpus_total", "GPUs in the cluster.", cl.gpus_total),
        (
            "apiary_gpus_allocated",
            "GPUs held by running jobs.",
            cl.gpus_allocated,
        ),
    ] {
        head(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    head(&mut out, "apiary_jobs", "gauge", "Jobs by state.");
    for (state, n) in &cl.jobs {
        let _ = writeln!(out, "apiary_jobs{{state=\"{state}\"}} {n}");
    }
    head(&mut out, "apiary_nodes", "gauge", "Nodes by health.");
    for (h, n) in &cl.nodes {
        let _ = writeln!(out, "apiary_nodes{{health=\"{h}\"}} {n}");
    }
    let k = c.counters();
    head(
        &mut out,
        "apiary_submissions_total",
        "counter",
        "Jobs accepted.",
    );
    let _ = writeln!(out, "apiary_submissions_total {}", k.submissions);
    head(
        &mut out,
        "apiary_decisions_total",
        "counter",
        "Scheduling decisions and job outcomes by kind.",
    );
    for kind in ["start", "preempt", "requeue", "succeed", "fail", "cancel"] {
        let n = k.decisions.get(kind).copied().unwrap_or(0);
        let _ = writeln!(out, "apiary_decisions_total{{kind=\"{kind}\"}} {n}");
    }
    head(
        &mut out,
        "apiary_failures_total",
        "counter",
        "Attempts ended by a failure rather than by the job, by cause.",
    );
    for cause in crate::core::Failure::ALL.map(crate::core::Failure::name) {
        let n = k.failures.get(cause).copied().unwrap_or(0);
        let _ = writeln!(out, "apiary_failures_total{{cause=\"{cause}\"}} {n}");
    }
    let e = c.energy();
    head(
        &mut out,
        "apiary_gpu_energy_kwh_total",
        "counter",
        "GPU energy since the server started, by whether the GPUs held jobs (before the PUE).",
    );
    let _ = writeln!(
        out,
        "apiary_gpu_energy_kwh_total{{gpus=\"busy\"}} {}",
        e.busy_kwh
    );
    let _ = writeln!(
        out,
        "apiary_gpu_energy_kwh_total{{gpus=\"idle\"}} {}",
        e.idle_kwh
    );
    head(
        &mut out,
        "apiary_carbon_kg_total",
        "counter",
        "Carbon of that energy (times the PUE) at the grid's intensity, kg CO2eq.",
    );
    let _ = writeln!(
        out,
        "apiary_carbon_kg_total{{gpus=\"busy\"}} {}",
        e.busy_carbon_kg
    );
    let _ = writeln!(
        out,
        "apiary_carbon_kg_total{{gpus=\"idle\"}} {}",
        e.idle_carbon_kg
    );
    head(
        &mut out,
        "apiary_carbon_intensity",
        "gauge",
        "The grid's carbon intensity now, gCO2eq/kWh (carbon_file, or the constant default).",
    );
    let _ = writeln!(out, "apiary_carbon_intensity {}", c.intensity_now());
    let h = "apiary_scheduling_pass_seconds";
    head(&mut out, h, "histogram", "Time of one scheduling pass.");
    let mut cum = 0;
    let bounds = crate::core::PASS_BUCKETS.iter().map(|b| b.to_string());
    for (i, le) in bounds.chain(["+Inf".to_string()]).enumerate() {
        cum += k.pass_buckets[i];
        let _ = writeln!(out, "{h}_bucket{{le=\"{le}\"}} {cum}");
    }
    let _ = writeln!(out, "{h}_sum {}\n{h}_count {cum}", k.pass_sum);
    out
}

/// `/metrics` names every VC and its queue: admins and metrics tokens only.
async fn metrics(State(app): State<App>, who: Caller) -> Result<Response, ApiError> {
    if !matches!(who, Caller::Open | Caller::Admin(_) | Caller::Metrics) {
        return Err(ApiError::forbidden(
            "/metrics needs an admin or a metrics token",
        ));
    }
    let text = app.h.read(metrics_text).await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// The OpenAPI 3.1 document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_every_route() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
        let paths = doc["paths"].as_object().expect("paths");
        let src = include_str!("http.rs");
        let routes: Vec<&str> = src
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".route(\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert!(routes.len() >= 8, "{routes:?}");
        for r in &routes {
            assert!(paths.contains_key(*r), "{r} is not in openapi.json");
        }
        for p in paths.keys() {
            assert!(
                routes.contains(&p.as_str()),
                "{p} is documented but not routed"
            );
        }
    }
}

//! The web dashboard at `/ui`: server-rendered HTML, no front-end build, refreshed by
//! the browser every few seconds. It shows every node's GPUs coloured by the job (and
//! so the VC) using them, the queues per VC, recent jobs, utilisation over time, and a
//! page per job with its history.
//!
//! A browser cannot send a bearer header, so the token comes as `?token=` once and is
//! then kept in an HTTP-only cookie scoped to `/ui`. A tenant sees only its VC's jobs;
//! other VCs' GPUs are shown as taken, without naming the job.

use crate::auth::{App, Caller};
use crate::core::{Core, GpuUse};
use crate::types::{JobRecord, JobState};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A stable colour per VC (and a lighter one per job within it).
fn colour(vc: &str, job: u64) -> String {
    let h = vc
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let hue = h % 360;
    let light = 38 + (job % 4) * 8;
    format!("hsl({hue},65%,{light}%)")
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}\
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}\
.node{display:flex;align-items:center;margin:2px 0}.node .name{width:9em}\
.gpu{width:18px;height:18px;margin:1px;border-radius:3px;background:#e6e6e6;display:inline-block}\
.gpu.blocked{background:repeating-linear-gradient(45deg,#bbb,#bbb 3px,#eee 3px,#eee 6px)}\
.gpu.stopping{background:#f0a}.muted{color:#888}.state-running{color:#070}\
.state-failed{color:#b00}.state-queued{color:#a60}";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
<meta http-equiv=\"refresh\" content=\"5\"><style>{STYLE}</style></head>\
<body><h1>{t}</h1>{body}</body></html>",
        t = esc(title)
    )
}

/// `?token=` in the query.
#[derive(serde::Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// The caller from `?token=` or the `apiary_token` cookie, and a cookie to set; the
/// login form when neither gives a valid token.
fn who(
    app: &App,
    q: &TokenQuery,
    headers: &HeaderMap,
) -> Result<(Caller, Option<String>), Box<Response>> {
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix("apiary_token="))
        .map(str::to_string)
        .next();
    let given = q.token.clone().or(cookie);
    let set = q
        .token
        .as_ref()
        .map(|t| format!("apiary_token={t}; Path=/ui; HttpOnly; SameSite=Strict"));
    match app.caller(given.as_deref()) {
        Ok(c) => Ok((c, set)),
        Err(e) => Err(Box::new(login(&e.message))),
    }
}

fn login(message: &str) -> Response {
    let body = format!(
        "<p>{}</p><form method=\"get\" action=\"/ui\"><label>Token \
<input name=\"token\" type=\"password\" autofocus></label> <button>Open</button></form>",
        esc(message)
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page("apiary", &body),
    )
        .into_response()
}

fn html(body: String, cookie: Option<String>) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    if let Some(c) = cookie
        && let Ok(v) = header::HeaderValue::from_str(&c)
    {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn job_name(r: &JobRecord) -> String {
    r.spec
        .name
        .clone()
        .or_else(|| r.spec.command.first().cloned())
        .unwrap_or_default()
}

fn render_overview(c: &Core, caller: &Caller) -> String {
    let cl = c.cluster();
    let mut b = String::new();
    let _ = write!(
        b,
        "<p>Policy <b>{}</b> · GPUs allocated <b id=\"gpus\">{}/{}</b> · jobs {}</p>",
        esc(&cl.policy),
        cl.gpus_allocated,
        cl.gpus_total,
        esc(&cl
            .jobs
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", "))
    );
    b.push_str("<h2>Nodes</h2>");
    let health: BTreeMap<String, String> = c
        .nodes()
        .into_iter()
        .map(|n| {
            let h = if n.cordoned {
                "cordoned".to_string()
            } else {
                format!("{:?}", n.health).to_lowercase()
            };
            (n.name, h)
        })
        .collect();
    for (node, gpus) in c.gpu_map() {
        let _ = write!(
            b,
            "<div class=\"node\"><span class=\"name\">{} <span class=\"muted\">{}</span></span>",
            esc(&node),
            esc(health.get(&node).map_or("", String::as_str))
        );
        for (i, g) in gpus.iter().enumerate() {
            match g {
                GpuUse::Free => {
                    let _ = write!(b, "<span class=\"gpu\" title=\"GPU {i}: free\"></span>");
                }
                GpuUse::Blocked => {
                    let _ = write!(
                        b,
                        "<span class=\"gpu blocked\" title=\"GPU {i}: unavailable\"></span>"
                    );
                }
                GpuUse::Stopping(j) => {
                    let _ = write!(
                        b,
                        "<span class=\"gpu stopping\" title=\"GPU {i}: job {j} stopping\"></span>"
                    );
                }
                GpuUse::Job(j, vc) if caller.sees(vc) => {
                    let _ = write!(
                        b,
                        "<a href=\"/ui/jobs/{j}\" class=\"gpu\" style=\"background:{}\" title=\"GPU {i}: job {j} ({})\"></a>",
                        colour(vc, *j),
                        esc(vc)
                    );
                }
                GpuUse::Job(..) => {
                    let _ = write!(
                        b,
                        "<span class=\"gpu\" style=\"background:#999\" title=\"GPU {i}: another VC\"></span>"
                    );
                }
            }
        }
        b.push_str("</div>");
    }
    b.push_str(
        "<h2>Queues</h2><table><tr><th>VC</th><th>queued</th><th>next, with why it waits</th></tr>",
    );
    let mut queues: BTreeMap<String, Vec<&JobRecord>> = BTreeMap::new();
    for r in c.jobs(None, Some(JobState::Queued), usize::MAX) {
        if caller.sees(&r.vc) {
            queues.entry(r.vc.clone()).or_default().push(r);
        }
    }
    if queues.is_empty() {
        b.push_str("<tr><td colspan=\"3\" class=\"muted\">nothing waits</td></tr>");
    }
    for (vc, mut jobs) in queues {
        jobs.sort_by_key(|r| r.id);
        let next: Vec<String> = jobs
            .iter()
            .take(8)
            .map(|r| {
                format!(
                    "<a href=\"/ui/jobs/{0}\">{0}</a> <span class=\"muted reason\">{1}</span>",
                    r.id,
                    c.reason(r).unwrap_or("")
                )
            })
            .collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&vc),
            jobs.len(),
            next.join(" ")
        );
    }
    b.push_str("</table><h2>Utilisation</h2>");
    b.push_str(&util_svg(c, cl.gpus_total));
    b.push_str(
        "<h2>Jobs</h2><table id=\"jobs\"><tr><th>id</th><th>VC</th><th>name</th><th>state</th><th>GPUs</th><th>nodes</th></tr>",
    );
    for r in c
        .jobs(None, None, usize::MAX)
        .into_iter()
        .filter(|r| caller.sees(&r.vc))
        .take(50)
    {
        let nodes = if r.state == JobState::Running {
            r.parts
                .iter()
                .map(|p| p.node.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            String::new()
        };
        let _ = write!(
            b,
            "<tr><td><a href=\"/ui/jobs/{id}\">{id}</a></td><td>{vc}</td><td>{name}</td>\
<td class=\"state-{st}\">{st}</td><td>{g}</td><td>{n}</td></tr>",
            id = r.id,
            vc = esc(&r.vc),
            name = esc(&job_name(r)),
            st = r.state.as_str(),
            g = r.spec.gpus,
            n = esc(&nodes)
        );
    }
    b.push_str("</table>");
    page("apiary", &b)
}

/// GPUs allocated over time as an inline SVG line.
fn util_svg(c: &Core, total: u64) -> String {
    let pts: Vec<(u64, u64)> = c.utilisation().copied().collect();
    let (w, h) = (600.0, 120.0);
    let mut s = format!(
        "<svg id=\"util\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
aria-label=\"GPUs allocated over time\"><rect width=\"{w}\" height=\"{h}\" fill=\"#f7f7f7\"/>"
    );
    if let (Some(first), Some(last)) = (pts.first(), pts.last())
        && total > 0
    {
        let span = (last.0 - first.0).max(1) as f64;
        let line: Vec<String> = pts
            .iter()
            .map(|&(t, g)| {
                format!(
                    "{:.1},{:.1}",
                    (t - first.0) as f64 / span * w,
                    h - g as f64 / total as f64 * (h - 4.0) - 2.0
                )
            })
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"#2a7\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        let _ = write!(
            s,
            "<text x=\"4\" y=\"14\" font-size=\"11\">{total} GPUs</text>"
        );
    }
    s.push_str("</svg>");
    s
}

fn render_job(r: &JobRecord) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<p><a href=\"/ui\">← cluster</a></p><table>\
<tr><th>state</th><td class=\"state-{st}\">{st}</td></tr>\
<tr><th>VC</th><td>{vc}</td></tr><tr><th>GPUs</th><td>{g}</td></tr>\
<tr><th>priority</th><td>{p}</td></tr><tr><th>attempt</th><td>{a}</td></tr>\
<tr><th>command</th><td><code>{cmd}</code></td></tr></table>",
        st = r.state.as_str(),
        vc = esc(&r.vc),
        g = r.spec.gpus,
        p = r.spec.priority,
        a = r.attempt,
        cmd = esc(&r.spec.command.join(" "))
    );
    if !r.parts.is_empty() {
        b.push_str("<h2>Placement</h2><table><tr><th>node</th><th>GPUs</th><th>exit</th></tr>");
        for p in &r.parts {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{:?}</td><td>{}</td></tr>",
                esc(&p.node),
                p.gpus,
                p.exit.map_or(String::new(), |e| e.to_string())
            );
        }
        b.push_str("</table>");
    }
    b.push_str(
        "<h2>History</h2><table><tr><th>time (unix ms)</th><th>event</th><th>detail</th></tr>",
    );
    for t in &r.history {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            t.at_ms,
            esc(&t.event),
            esc(&t.detail)
        );
    }
    b.push_str("</table>");
    page(&format!("job {} · {}", r.id, job_name(r)), &b)
}

/// `GET /ui`.
pub async fn overview(
    State(app): State<App>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
) -> Response {
    let (caller, cookie) = match who(&app, &q, &headers) {
        Ok(x) => x,
        Err(login) => return *login,
    };
    match app.h.read(move |c| render_overview(c, &caller)).await {
        Ok(body) => html(body, cookie),
        Err(e) => e.into_response(),
    }
}

/// `GET /ui/jobs/{id}`.
pub async fn job(
    State(app): State<App>,
    Path(id): Path<u64>,
    Query(q): Query<TokenQuery>,
    headers: HeaderMap,
) -> Response {
    let (caller, cookie) = match who(&app, &q, &headers) {
        Ok(x) => x,
        Err(login) => return *login,
    };
    let r = app.h.read(move |c| c.job(id).cloned()).await;
    match r {
        Ok(Ok(r)) if caller.sees(&r.vc) => html(render_job(&r), cookie),
        Ok(Ok(_)) => (StatusCode::FORBIDDEN, "job of another VC").into_response(),
        Ok(Err(e)) | Err(e) => e.into_response(),
    }
}

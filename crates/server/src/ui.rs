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
use crate::types::{JobRecord, JobState, PartOutput};
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

/// A stable hue per VC.
fn vc_hue(vc: &str) -> u32 {
    vc.bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
        % 360
}

/// A GPU's style for `job` of `vc`: a hue of its own, so jobs side by side are told
/// apart (consecutive ids step round the colour wheel by the golden angle, far from
/// each other), with the VC's colour as a band along its foot.
/// A shared GPU: a bar of each holder's thousandths in its job's colour (grey for
/// another VC's), the idle rest left blank.
fn shared_gpu(b: &mut String, i: usize, holders: &[(u64, String, u32)], caller: &Caller) {
    let mut stops = Vec::new();
    let mut titles = Vec::new();
    let mut at = 0u32;
    for (j, vc, milli) in holders {
        let (c, who) = if caller.sees(vc) {
            (job_hsl(vc, *j), format!("job {j} {milli}/1000"))
        } else {
            ("#999".to_string(), format!("another VC {milli}/1000"))
        };
        let end = (at + milli).min(1000);
        stops.push(format!("{c} {}% {}%", at / 10, end / 10));
        titles.push(who);
        at = end;
    }
    stops.push(format!("#e6e6e6 {}% 100%", at / 10));
    let _ = write!(
        b,
        "<span class=\"gpu shared\" style=\"background:linear-gradient(to top,{})\" title=\"GPU {i}: shared, {}\"></span>",
        stops.join(","),
        esc(&titles.join(", "))
    );
}

fn colour(vc: &str, job: u64) -> String {
    format!(
        "background:{};box-shadow:inset 0 -5px 0 hsl({},80%,25%)",
        job_hsl(vc, job),
        vc_hue(vc)
    )
}

fn job_hsl(vc: &str, job: u64) -> String {
    let hue = (vc_hue(vc) as f64 + job as f64 * 137.508) % 360.0;
    format!("hsl({hue:.0},70%,50%)")
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}\
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}\
.node{display:flex;align-items:center;margin:2px 0}.node .name{width:9em}\
.gpu{width:18px;height:18px;margin:1px;border-radius:3px;background:#e6e6e6;display:inline-block}\
.gpu.blocked{background:repeating-linear-gradient(45deg,#bbb,#bbb 3px,#eee 3px,#eee 6px)}\
.gpu.stopping{background:#f0a}.muted{color:#888}.state-running{color:#070}\
.state-failed{color:#b00}.state-queued{color:#a60}\
pre.output{background:#f6f6f6;padding:.6em;max-height:24em;overflow:auto;white-space:pre-wrap}\
button{font:inherit;padding:3px 12px;margin:.8em 0}";

/// Shows every `<time>` in the browser's own time zone (the server writes UTC).
const LOCAL_TIMES: &str = "<script>for(const t of document.querySelectorAll('time[datetime]')){\
const d=new Date(t.getAttribute('datetime'));if(!isNaN(d)){const p=n=>String(n).padStart(2,'0');\
t.textContent=d.getFullYear()+'-'+p(d.getMonth()+1)+'-'+p(d.getDate())+' '+p(d.getHours())+':'+\
p(d.getMinutes())+':'+p(d.getSeconds());t.title='UTC '+t.getAttribute('datetime');}}</script>";

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
<meta http-equiv=\"refresh\" content=\"5\"><style>{STYLE}</style></head>\
<body><h1>{t}</h1>{body}{LOCAL_TIMES}</body></html>",
        t = esc(title)
    )
}

/// A time for people: a `<time>` the page's script turns into the browser's local
/// date-time (UTC without scripts), and its age.
fn when(at_ms: u64, now_ms: u64) -> String {
    let utc = apiary_model::rfc3339_utc(at_ms);
    let age = apiary_model::fmt_age(now_ms, at_ms);
    format!(
        "<time datetime=\"{utc}\">{} UTC</time> <span class=\"muted\">{age}</span>",
        &utc[..19].replace('T', " ")
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

fn render_overview(c: &Core, caller: &Caller, now: u64) -> String {
    let cl = c.cluster();
    let free = c.free_gpus();
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
                        "<a href=\"/ui/jobs/{j}\" class=\"gpu\" style=\"{}\" title=\"GPU {i}: job {j} ({})\"></a>",
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
                GpuUse::Shared(holders) => shared_gpu(&mut b, i, holders, caller),
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
                    c.reason_with(&free, r).unwrap_or("")
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
    b.push_str(&util_svg(c, cl.gpus_total, now));
    b.push_str(
        "<h2>Jobs</h2><table id=\"jobs\"><tr><th>id</th><th>VC</th><th>name</th><th>state</th><th>GPUs</th><th>nodes (or why it waits)</th></tr>",
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
        } else if let Some(why) = c.reason_with(&free, r) {
            format!("({why})")
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

/// GPUs allocated over time as an inline SVG chart: the share of GPUs (0 to 100 %) on
/// the y axis, the time before now on the x axis.
fn util_svg(c: &Core, total: u64, now: u64) -> String {
    let pts: Vec<(u64, u64)> = c.utilisation().copied().collect();
    let (w, h) = (640.0, 160.0);
    let (left, right, top, bottom) = (44.0, 10.0, 10.0, 24.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let mut s = format!(
        "<svg id=\"util\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
aria-label=\"GPUs allocated over time\" font-size=\"11\" font-family=\"system-ui,sans-serif\">\
<rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"#f7f7f7\" stroke=\"#ccc\"/>"
    );
    for (frac, label) in [(0.0, "0 %"), (0.5, "50 %"), (1.0, "100 %")] {
        let y = top + ph - frac * ph;
        let _ = write!(
            s,
            "<line x1=\"{left}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            left + pw,
            left - 4.0,
            y + 4.0
        );
    }
    let start = pts.first().map_or(now, |p| p.0).min(now);
    let span = now.saturating_sub(start).max(60_000) as f64;
    // Ticks at round minutes or hours before now.
    let step_ms: u64 = [
        60_000, 300_000, 900_000, 1_800_000, 3_600_000, 10_800_000, 21_600_000, 86_400_000,
    ]
    .into_iter()
    .find(|st| span / *st as f64 <= 6.0)
    .unwrap_or(86_400_000);
    let mut k = 0u64;
    while (k * step_ms) as f64 <= span {
        let x = left + pw - (k * step_ms) as f64 / span * pw;
        let ago = k * step_ms / 60_000;
        let label = match ago {
            0 => "now".to_string(),
            m if m % 60 == 0 => format!("-{} h", m / 60),
            m => format!("-{m} min"),
        };
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"#eee\"/>\
<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            top + ph,
            h - 8.0
        );
        k += 1;
    }
    if total > 0 && !pts.is_empty() {
        let line: Vec<String> = pts
            .iter()
            .map(|&(t, g)| {
                format!(
                    "{:.1},{:.1}",
                    left + pw - now.saturating_sub(t) as f64 / span * pw,
                    top + ph - g as f64 / total as f64 * ph
                )
            })
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"#2a7\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#555\">share of {total} GPUs allocated</text></svg>",
        left + 6.0,
        top + 14.0
    );
    s
}

fn render_job(
    r: &JobRecord,
    reason: Option<&str>,
    live: &[PartOutput],
    may_cancel: bool,
    now: u64,
) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<p><a href=\"/ui\">← cluster</a></p><table>\
<tr><th>state</th><td class=\"state-{st}\">{st}{why}</td></tr>\
<tr><th>VC</th><td>{vc}</td></tr><tr><th>GPUs</th><td>{g}</td></tr>\
<tr><th>priority</th><td>{p}</td></tr><tr><th>attempt</th><td>{a}</td></tr>\
<tr><th>submitted</th><td>{sub}</td></tr>\
<tr><th>command</th><td><code>{cmd}</code></td></tr></table>",
        st = r.state.as_str(),
        why = reason
            .map(String::from)
            .or_else(|| {
                // How it ended, where the state does not say it (a timeout, a refusal).
                let last = r.history.last()?;
                (r.state.terminal() && last.event != r.state.as_str()).then(|| last.event.clone())
            })
            .map_or(String::new(), |w| format!(
                " <span class=\"muted reason\">({})</span>",
                esc(&w)
            )),
        vc = esc(&r.vc),
        g = r.spec.gpus,
        p = r.spec.priority,
        a = r.attempt,
        sub = when(r.submitted_ms, now),
        cmd = esc(&r.spec.command.join(" "))
    );
    if may_cancel && !r.state.terminal() {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/ui/jobs/{}/cancel\"><button id=\"cancel\">Cancel job {}</button></form>",
            r.id, r.id
        );
    }
    if !r.parts.is_empty() {
        b.push_str("<h2>Placement</h2><table><tr><th>node</th><th>GPUs</th><th>exit</th></tr>");
        for p in &r.parts {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{:?}</td><td>{}</td></tr>",
                esc(&p.node),
                p.gpus,
                p.exit.map_or_else(
                    || if r.state.terminal() {
                        "stopping".into()
                    } else {
                        String::new()
                    },
                    |e| e.to_string()
                )
            );
        }
        b.push_str("</table><h2>Output</h2>");
        for p in &r.parts {
            if p.exit.is_none() && r.state.terminal() {
                let so_far = live
                    .iter()
                    .find(|l| l.node == p.node)
                    .map_or(String::new(), |l| l.data.clone());
                let _ = write!(
                    b,
                    "<p>{} ({}; asked to stop, its exit not reported yet{})</p><pre class=\"output\">{}</pre>",
                    esc(&p.node),
                    r.state.as_str(),
                    if so_far.is_empty() {
                        "; no output"
                    } else {
                        "; its last output"
                    },
                    esc(&so_far)
                );
            } else if p.exit.is_none() {
                match live.iter().find(|l| l.node == p.node) {
                    Some(l) if !l.data.is_empty() => {
                        let _ = write!(
                            b,
                            "<p>{} (running; its output so far{})</p><pre class=\"output\">{}</pre>",
                            esc(&p.node),
                            if l.start > 0 { ", the last 64 KiB" } else { "" },
                            esc(&l.data)
                        );
                    }
                    _ => {
                        let _ = write!(
                            b,
                            "<p class=\"muted\">{}: running; no output yet.</p>",
                            esc(&p.node)
                        );
                    }
                }
            } else if p.output_tail.is_empty() {
                let _ = write!(b, "<p class=\"muted\">{}: no output.</p>", esc(&p.node));
            } else {
                let _ = write!(
                    b,
                    "<p>{} (the last 16 KiB)</p><pre class=\"output\">{}</pre>",
                    esc(&p.node),
                    esc(&p.output_tail)
                );
            }
        }
    }
    b.push_str("<h2>History</h2><table><tr><th>time</th><th>event</th><th>detail</th></tr>");
    for t in &r.history {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            when(t.at_ms, now),
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
    let now = crate::service::unix_ms();
    match app.h.read(move |c| render_overview(c, &caller, now)).await {
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
    let r = app
        .h
        .read(move |c| {
            c.job(id)
                .map(|r| (r.clone(), c.reason(r), c.output(id).unwrap_or_default()))
        })
        .await;
    match r {
        Ok(Ok((r, why, live))) if caller.sees(&r.vc) => {
            let may_cancel = caller.user().is_ok();
            html(
                render_job(&r, why, &live, may_cancel, crate::service::unix_ms()),
                cookie,
            )
        }
        Ok(Ok(_)) => (StatusCode::FORBIDDEN, "job of another VC").into_response(),
        Ok(Err(e)) | Err(e) => e.into_response(),
    }
}

/// `POST /ui/jobs/{id}/cancel`: the job page's cancel button, for callers who may
/// cancel the job (its VC's tenant, an admin); then back to the job's page. The token
/// cookie is `SameSite=Strict`, so another site's form cannot send it.
pub async fn cancel(
    State(app): State<App>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    _form: axum::body::Bytes,
) -> Response {
    let q = TokenQuery { token: None };
    let (caller, _) = match who(&app, &q, &headers) {
        Ok(x) => x,
        Err(login) => return *login,
    };
    if let Err(e) = caller.user() {
        return e.into_response();
    }
    match app.h.read(move |c| c.job(id).map(|r| r.vc.clone())).await {
        Ok(Ok(vc)) if caller.sees(&vc) => {}
        Ok(Ok(_)) => return (StatusCode::FORBIDDEN, "job of another VC").into_response(),
        Ok(Err(e)) | Err(e) => return e.into_response(),
    }
    match app.h.cancel(id).await {
        Ok(_) => axum::response::Redirect::to(&format!("/ui/jobs/{id}")).into_response(),
        Err(e) => e.into_response(),
    }
}

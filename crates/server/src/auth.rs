//! Who is calling: the bearer token read into a [`Caller`], and what each caller may do.
//! The JSON API and the dashboard both check through it.

use crate::config::{Role, TokenConfig};
use crate::core::ApiError;
use crate::service::Handle;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::Arc;

/// The router's state: the scheduler and the tokens.
#[derive(Clone, Debug)]
pub struct App {
    pub(crate) h: Handle,
    tokens: Arc<Vec<TokenConfig>>,
}

impl App {
    pub(crate) fn new(h: Handle, tokens: Vec<TokenConfig>) -> App {
        App {
            h,
            tokens: Arc::new(tokens),
        }
    }
}

/// Who is calling, from the `Authorization: Bearer` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// No tokens are configured: everyone may do everything.
    Open,
    /// An admin token.
    Admin,
    /// An agent token, for these nodes (`*`: any).
    Agent(Vec<String>),
    /// A metrics token: `/metrics` only.
    Metrics,
    /// A tenant token of this VC.
    Tenant(String),
}

/// Compares without an early exit, so response time does not tell how much of a guess
/// was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Caller, ApiError> {
        let given = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        app.caller(given)
    }
}

impl App {
    /// The caller a token speaks for (any caller when no tokens are configured).
    pub(crate) fn caller(&self, given: Option<&str>) -> Result<Caller, ApiError> {
        if self.tokens.is_empty() {
            return Ok(Caller::Open);
        }
        let given =
            given.ok_or_else(|| ApiError::unauthorized("missing 'Authorization: Bearer TOKEN'"))?;
        let app = self;
        let mut found = None;
        for t in app.tokens.iter() {
            if same(t.token.as_bytes(), given.trim().as_bytes()) {
                found = Some(t);
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match found {
            None => Err(ApiError::unauthorized("unknown or revoked token")),
            Some(t) if t.expires_unix_s.is_some_and(|e| now >= e) => {
                Err(ApiError::unauthorized("token expired"))
            }
            Some(t) => Ok(match t.role {
                Role::Admin => Caller::Admin,
                Role::Agent => Caller::Agent(t.nodes.clone()),
                Role::Metrics => Caller::Metrics,
                Role::Tenant => Caller::Tenant(t.vc.clone().unwrap_or_default()),
            }),
        }
    }
}

impl Caller {
    pub(crate) fn admin(&self) -> Result<(), ApiError> {
        match self {
            Caller::Open | Caller::Admin => Ok(()),
            _ => Err(ApiError::forbidden("this needs an admin token")),
        }
    }
    pub(crate) fn user(&self) -> Result<(), ApiError> {
        match self {
            Caller::Agent(_) => Err(ApiError::forbidden("agent tokens only send heartbeats")),
            Caller::Metrics => Err(ApiError::forbidden("metrics tokens only read /metrics")),
            _ => Ok(()),
        }
    }
    /// Whether this caller may see and cancel a job of `vc`.
    pub(crate) fn sees(&self, vc: &str) -> bool {
        match self {
            Caller::Open | Caller::Admin => true,
            Caller::Agent(_) | Caller::Metrics => false,
            Caller::Tenant(v) => v == vc,
        }
    }
    /// Whether this caller may heartbeat for `node`: an agent token bound to it, or an
    /// admin (for tools), never a tenant.
    pub(crate) fn serves(&self, node: &str) -> Result<(), ApiError> {
        match self {
            Caller::Open | Caller::Admin => Ok(()),
            Caller::Agent(nodes) if nodes.iter().any(|n| n == "*" || n == node) => Ok(()),
            Caller::Agent(_) => Err(ApiError::forbidden(format!(
                "this agent token does not serve node {node}"
            ))),
            _ => Err(ApiError::forbidden("heartbeats need an agent token")),
        }
    }
}

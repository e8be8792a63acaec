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
    /// An admin token, and the user it names.
    Admin(Option<String>),
    /// An agent token, for these nodes (`*`: any).
    Agent(Vec<String>),
    /// A metrics token: `/metrics` only.
    Metrics,
    /// A tenant token of a VC, and the user it names.
    Tenant {
        /// Its VC.
        vc: String,
        /// Its user.
        user: Option<String>,
    },
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
                Role::Admin => Caller::Admin(t.user.clone()),
                Role::Agent => Caller::Agent(t.nodes.clone()),
                Role::Metrics => Caller::Metrics,
                Role::Tenant => Caller::Tenant {
                    vc: t.vc.clone().unwrap_or_default(),
                    user: t.user.clone(),
                },
            }),
        }
    }
}

impl Caller {
    pub(crate) fn admin(&self) -> Result<(), ApiError> {
        match self {
            Caller::Open | Caller::Admin(_) => Ok(()),
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
            Caller::Open | Caller::Admin(_) => true,
            Caller::Agent(_) | Caller::Metrics => false,
            Caller::Tenant { vc: v, .. } => v == vc,
        }
    }
    /// The user this caller speaks for, if its token names one.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            Caller::Admin(u) | Caller::Tenant { user: u, .. } => u.as_deref(),
            _ => None,
        }
    }

    /// A record as this caller may see it: the environment's values only for admins
    /// and the job's submitter (the same token user, or both unnamed); others get the
    /// names with empty values.
    pub(crate) fn redact(&self, mut r: crate::types::JobRecord) -> crate::types::JobRecord {
        let own = match self {
            Caller::Open | Caller::Admin(_) => true,
            Caller::Tenant { user, .. } => *user == r.user,
            Caller::Agent(_) | Caller::Metrics => false,
        };
        if !own {
            for v in r.spec.env.values_mut() {
                v.clear();
            }
        }
        r
    }

    /// Whether this caller may heartbeat for `node`: an agent token bound to it, or an
    /// admin (for tools), never a tenant.
    pub(crate) fn serves(&self, node: &str) -> Result<(), ApiError> {
        match self {
            Caller::Open | Caller::Admin(_) => Ok(()),
            Caller::Agent(nodes) if nodes.iter().any(|n| n == "*" || n == node) => Ok(()),
            Caller::Agent(_) => Err(ApiError::forbidden(format!(
                "this agent token does not serve node {node}"
            ))),
            _ => Err(ApiError::forbidden("heartbeats need an agent token")),
        }
    }
}

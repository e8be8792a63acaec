//! The errors the core gives: [`ApiError`] answers a request with an HTTP status;
//! [`CoreError`] says why a core could not be built.

use apiary_policy::{ParamError, PolicyError};

/// An API error: an HTTP status, the offending field if any, and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// JSON path of the offending field, e.g. `gpus`.
    pub field: Option<String>,
    /// What was wrong.
    pub message: String,
}

impl ApiError {
    /// 400 for a field.
    pub fn bad(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            field: None,
            message: message.into(),
        }
    }
    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 401,
            field: None,
            message: message.into(),
        }
    }
    /// 403.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 403,
            field: None,
            message: message.into(),
        }
    }
    /// 413 for a field over its size limit.
    pub fn too_large(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 413,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 429 for a field whose limit is reached.
    pub fn too_many(field: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 429,
            field: Some(field.into()),
            message: message.into(),
        }
    }
    /// 422: the policy refuses the job.
    pub fn refused(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 422,
            field: None,
            message: message.into(),
        }
    }
    /// 409.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 409,
            field: None,
            message: message.into(),
        }
    }
}

/// Why a [`Core`](super::Core) could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The configured nodes do not make a cluster.
    #[error("{0}")]
    Nodes(#[from] apiary_model::ClusterSpecError),
    /// A replay's cluster does not have the config's nodes, in order.
    #[error("the cluster's nodes are not the config's")]
    NodesDiffer,
    /// The policy is unknown or a parameter is wrong.
    #[error("{0}")]
    Params(#[from] ParamError),
    /// The policy refused the cluster.
    #[error("policy {0}")]
    Policy(#[from] PolicyError),
}

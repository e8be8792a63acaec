//! The Kubernetes API server, as the extender uses it: list pods and nodes, and create a
//! pod's binding. Plain HTTP with Kubernetes' own JSON; in a cluster the extender talks
//! to a `kubectl proxy` beside it in its pod (the manifests under `deploy/kubernetes/`),
//! which holds the service account's credentials and TLS, so this client needs neither.
//! A bearer token (`kube_token_file`) is sent where one is given.

use super::wire::{Binding, Node, NodeList, Pod, PodList};
use std::time::Duration;

/// A failed API server call.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// Nothing answered.
    #[error("{what}: the API server at {base} did not answer: {source}")]
    Unreachable {
        /// The call.
        what: String,
        /// The server.
        base: String,
        /// Why.
        source: Box<ureq::Error>,
    },
    /// The API server refused the call.
    #[error("{what}: {status}: {message}")]
    Refused {
        /// The call.
        what: String,
        /// HTTP status (409: the pod is already bound).
        status: u16,
        /// Its `Status` message.
        message: String,
    },
    /// The reply was not the JSON expected.
    #[error("{what}: unreadable reply: {source}")]
    Reply {
        /// The call.
        what: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// A client of one API server.
#[derive(Clone)]
pub struct Kube {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Kube {
    /// A client of the API server at `base` (`http://127.0.0.1:8001`).
    pub fn new(base: &str, token: Option<String>) -> Kube {
        let cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        Kube {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent: ureq::Agent::new_with_config(cfg),
        }
    }

    /// Every pod in every namespace.
    pub fn pods(&self) -> Result<Vec<Pod>, KubeError> {
        let l: PodList = self.get("/api/v1/pods")?;
        Ok(l.items)
    }

    /// Every node.
    pub fn nodes(&self) -> Result<Vec<Node>, KubeError> {
        let l: NodeList = self.get("/api/v1/nodes")?;
        Ok(l.items)
    }

    /// Creates a pod's binding. Kubernetes binds a pod at most once: a second binding
    /// is refused with 409.
    pub fn bind(&self, b: &Binding) -> Result<(), KubeError> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}/binding",
            b.metadata.namespace, b.metadata.name
        );
        let what = format!("POST {path}");
        let mut req = self.agent.post(&format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let body = serde_json::to_vec(b).expect("a binding serialises");
        let r = req
            .header("Content-Type", "application/json")
            .send(&body[..]);
        self.finish::<serde_json::Value>(what, r).map(|_| ())
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, KubeError> {
        let mut req = self.agent.get(&format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let r = req.call();
        self.finish(format!("GET {path}"), r)
    }

    fn finish<T: serde::de::DeserializeOwned>(
        &self,
        what: String,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, KubeError> {
        let mut r = r.map_err(|source| KubeError::Unreachable {
            what: what.clone(),
            base: self.base.clone(),
            source: Box::new(source),
        })?;
        let status = r.status().as_u16();
        let text = r
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .unwrap_or_default();
        if !(200..300).contains(&status) {
            // Kubernetes answers errors with a `Status` object.
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("message")?.as_str().map(str::to_string))
                .unwrap_or(text);
            return Err(KubeError::Refused {
                what,
                status,
                message,
            });
        }
        serde_json::from_str(&text).map_err(|source| KubeError::Reply { what, source })
    }
}

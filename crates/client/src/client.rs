//! A JSON client of the live service's API that keeps the server's error messages, and
//! where a client finds the server.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::time::Duration;

/// Why a call to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached.
    #[error("{what}: cannot reach the server at {base}: {source}")]
    Unreachable {
        /// The call (`GET /v1/jobs`).
        what: String,
        /// The server.
        base: String,
        /// Why.
        source: Box<ureq::Error>,
    },
    /// The server refused the call, with its message.
    #[error("{what}: {status}: {message}")]
    Refused {
        /// The call.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The server's message (its `field: message` when it names one).
        message: String,
    },
    /// The server's reply did not read as what the call expects.
    #[error("{what}: unreadable reply: {source}")]
    Reply {
        /// The call.
        what: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The client config file.
    #[error("reading {path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl ClientError {
    /// The server's host refused the connection: nothing listens at the address, so
    /// no server runs there.
    pub fn connection_refused(&self) -> bool {
        matches!(self, ClientError::Unreachable { source, .. }
            if matches!(source.as_ref(), ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused))
    }

    /// The server refused the call with `status`.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A JSON client of one server.
pub struct Client {
    base: String,
    agent: ureq::Agent,
    token: Option<String>,
}

impl Client {
    /// A client of `base` (e.g. `http://127.0.0.1:8800`).
    pub fn new(base: &str, timeout: Duration) -> Client {
        let cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build();
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent: ureq::Agent::new_with_config(cfg),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer TOKEN`.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    /// The server's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    fn finish<T: DeserializeOwned>(
        &self,
        what: String,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let mut r = r.map_err(|source| ClientError::Unreachable {
            what: what.clone(),
            base: self.base.clone(),
            source: Box::new(source),
        })?;
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| {
                    let e = v.get("error")?;
                    let m = e.get("message")?.as_str()?.to_string();
                    Some(match e.get("field").and_then(|f| f.as_str()) {
                        Some(f) => format!("{f}: {m}"),
                        None => m,
                    })
                })
                .unwrap_or(text);
            return Err(ClientError::Refused {
                what,
                status,
                message,
            });
        }
        let text = if text.is_empty() { "null" } else { &text };
        serde_json::from_str(text).map_err(|source| ClientError::Reply { what, source })
    }

    /// GET.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let mut req = self.agent.get(&format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", &a);
        }
        let r = req.call();
        self.finish(format!("GET {path}"), r)
    }

    /// GET a list in pages, following the server's next-page header
    /// ([`apiary_api::paging`]) to the end.
    pub fn get_all<T: DeserializeOwned>(&self, path: &str) -> Result<Vec<T>, ClientError> {
        use apiary_api::paging::NEXT_PAGE_HEADER;
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page_path = match &after {
                None => path.to_string(),
                Some(a) => {
                    let sep = if path.contains('?') { '&' } else { '?' };
                    format!("{path}{sep}after={a}")
                }
            };
            let mut req = self.agent.get(&format!("{}{page_path}", self.base));
            if let Some(a) = self.auth() {
                req = req.header("Authorization", &a);
            }
            let r = req.call();
            let next = r.as_ref().ok().and_then(|r| {
                r.headers()
                    .get(NEXT_PAGE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            });
            let page: Vec<T> = self.finish(format!("GET {page_path}"), r)?;
            out.extend(page);
            match next {
                Some(n) if after.as_deref() != Some(n.as_str()) => after = Some(n),
                _ => return Ok(out),
            }
        }
    }

    /// PUT a JSON body.
    pub fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.send("PUT", path, body)
    }

    /// POST a JSON body.
    pub fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.send("POST", path, body)
    }

    fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = if method == "PUT" {
            self.agent.put(&url)
        } else {
            self.agent.post(&url)
        };
        if let Some(a) = self.auth() {
            req = req.header("Authorization", &a);
        }
        let r = req.send_json(body);
        self.finish(format!("{method} {path}"), r)
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    server: Option<String>,
    token: Option<String>,
}

/// The client config file: `$APIARY_CONFIG`, default `~/.config/apiary/client.toml`
/// (none when it does not exist).
fn client_file() -> Result<ClientFile, ClientError> {
    let path = match std::env::var_os("APIARY_CONFIG") {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".config/apiary/client.toml"),
            None => return Ok(ClientFile::default()),
        },
    };
    let bad = |message: String| ClientError::Config {
        path: path.clone(),
        message,
    };
    match std::fs::read_to_string(&path) {
        Ok(t) => toml::from_str(&t).map_err(|e| bad(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ClientFile::default()),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// The client of the server a user means: `server` and `token` as given (flags or the
/// environment), else the client config file's, else `http://127.0.0.1:8800` and no
/// token.
pub fn connect(server: Option<&str>, token: Option<&str>) -> Result<Client, ClientError> {
    let file = if server.is_none() || token.is_none() {
        client_file()?
    } else {
        ClientFile::default()
    };
    let server = server
        .map(str::to_string)
        .or(file.server)
        .unwrap_or_else(|| "http://127.0.0.1:8800".into());
    let token = token.map(str::to_string).or(file.token);
    Ok(Client::new(&server, Duration::from_secs(30)).with_token(token))
}

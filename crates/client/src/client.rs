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

/// A JSON client of a server, or of several that share one state on etcd (one leads;
/// the others answer 503, naming it): a call that finds nothing listening, or a
/// follower, goes on to the next URL, and the client keeps the one that answered.
pub struct Client {
    bases: Vec<String>,
    /// Index in `bases` of the URL that answered last.
    current: std::sync::atomic::AtomicUsize,
    agent: ureq::Agent,
    token: Option<String>,
}

/// Resolves a URL whose host is an IP address without a lookup, and any other through
/// ureq's resolver. Under a timeout that resolver looks names up on a thread of its
/// own, and it does so for every call, even `127.0.0.1`: a thread started and joined
/// per request, which was most of a loaded client's system time.
#[derive(Debug, Default)]
struct LiteralFirst(ureq::unversioned::resolver::DefaultResolver);

impl ureq::unversioned::resolver::Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().unwrap_or_default();
        // `[::1]` is written bracketed in a URL.
        let ip = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse::<std::net::IpAddr>();
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        });
        match (ip, port) {
            (Ok(ip), Some(port)) => {
                let mut v = self.empty();
                v.push(std::net::SocketAddr::new(ip, port));
                Ok(v)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

/// Whether a refusal came from a server that follows another (the leader serves).
fn from_follower(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { status: 503, message, .. } if message.contains("is not the leader"))
}

impl Client {
    /// A client of `base` (e.g. `http://127.0.0.1:8800`), or of several servers'
    /// URLs separated by commas.
    pub fn new(base: &str, timeout: Duration) -> Client {
        let cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build();
        let mut bases: Vec<String> = base
            .split(',')
            .map(|b| b.trim().trim_end_matches('/').to_string())
            .filter(|b| !b.is_empty())
            .collect();
        if bases.is_empty() {
            bases.push(String::new());
        }
        Client {
            bases,
            current: std::sync::atomic::AtomicUsize::new(0),
            agent: ureq::Agent::with_parts(
                cfg,
                ureq::unversioned::transport::DefaultConnector::default(),
                LiteralFirst::default(),
            ),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer TOKEN`.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    /// The URL of the server that answered last (the first, before any call).
    pub fn base(&self) -> &str {
        &self.bases[self.current.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()]
    }

    /// Makes `call` on the current URL, and on the next ones while nothing listens there
    /// or a follower answers (neither took the call, so a retry is safe); keeps the URL
    /// that answered.
    fn failover<T>(&self, call: impl Fn(&str) -> Result<T, ClientError>) -> Result<T, ClientError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            match call(&self.bases[i]) {
                Err(e) if n > 1 && (e.connection_refused() || from_follower(&e)) => last = Some(e),
                r => {
                    self.current.store(i, Ordering::Relaxed);
                    return r;
                }
            }
        }
        Err(last.expect("at least one URL was tried"))
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    fn finish<T: DeserializeOwned>(
        &self,
        base: &str,
        what: String,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let mut r = r.map_err(|source| ClientError::Unreachable {
            what: what.clone(),
            base: base.to_string(),
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
        self.failover(|base| {
            let mut req = self.agent.get(&format!("{base}{path}"));
            if let Some(a) = self.auth() {
                req = req.header("Authorization", &a);
            }
            let r = req.call();
            self.finish(base, format!("GET {path}"), r)
        })
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
            let (page, next): (Vec<T>, Option<String>) = self.failover(|base| {
                let mut req = self.agent.get(&format!("{base}{page_path}"));
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
                Ok((self.finish(base, format!("GET {page_path}"), r)?, next))
            })?;
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
        self.failover(|base| {
            let url = format!("{base}{path}");
            let mut req = if method == "PUT" {
                self.agent.put(&url)
            } else {
                self.agent.post(&url)
            };
            if let Some(a) = self.auth() {
                req = req.header("Authorization", &a);
            }
            let r = req.send_json(body);
            self.finish(base, format!("{method} {path}"), r)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use ureq::unversioned::resolver::Resolver;

    fn resolve(url: &str) -> Vec<std::net::SocketAddr> {
        let timeout = ureq::unversioned::transport::NextTimeout {
            after: Duration::from_secs(5).into(),
            reason: ureq::Timeout::Global,
            per_read: None,
            per_write: None,
        };
        let uri: ureq::http::Uri = url.parse().expect("uri");
        LiteralFirst::default()
            .resolve(&uri, &ureq::config::Config::default(), timeout)
            .expect("resolves")
            .to_vec()
    }

    #[test]
    fn ip_hosts_resolve_to_themselves_and_names_through_ureq() {
        assert_eq!(
            resolve("http://127.0.0.1:8800/v1/jobs"),
            ["127.0.0.1:8800".parse().unwrap()]
        );
        assert_eq!(resolve("http://[::1]/"), ["[::1]:80".parse().unwrap()]);
        assert_eq!(
            resolve("https://10.0.0.7"),
            ["10.0.0.7:443".parse().unwrap()]
        );
        // A name is looked up; `localhost` is a loopback address on any host.
        let local = resolve("http://localhost:9/");
        assert!(!local.is_empty() && local.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
    }
}

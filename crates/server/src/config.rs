//! The server's configuration file (TOML). Nodes are declared, as in Slurm's
//! `slurm.conf`: an agent serves one declared node.

use apiary_policy::vc::Sharing;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse or a field was wrong (the message names line and field).
    #[error("server config {file}: {message}")]
    Parse {
        /// Where it came from.
        file: String,
        /// What was wrong.
        message: String,
    },
    /// It parsed but cannot be served.
    #[error("server config {file}: {field}: {message}")]
    Invalid {
        /// Where it came from.
        file: String,
        /// The field.
        field: String,
        /// What was wrong.
        message: String,
    },
}

/// One `[[vcs]]` entry.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VcConfig {
    /// Its name.
    pub name: String,
    /// GPUs it may hold at once (`sharing = "quota"`).
    #[serde(default)]
    pub quota_gpus: Option<u64>,
    /// Node cells it owns (`sharing = "hived"`).
    #[serde(default)]
    pub nodes: Option<u32>,
    /// The local account its jobs run as on every node (a name or a uid), as Slurm runs
    /// a job as its submitter: an agent running as root runs them so, and fails a job
    /// whose account its node lacks. No two VCs share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
}

/// One declared node.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Its name, which its agent announces.
    pub name: String,
    /// GPUs (1..=64).
    pub gpus: u32,
    /// GPU model.
    #[serde(default = "gpu")]
    pub gpu_type: String,
    /// CPU cores that jobs sharing GPUs here may ask for, all together (unchecked when
    /// absent); under a `cpu-workers` policy (goldminer), the cores its jobs' input
    /// pipelines share, which every node must then declare.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory that jobs sharing GPUs here may ask for, GiB (unchecked when absent).
    #[serde(default)]
    pub memory_gib: Option<u32>,
    /// Each GPU's memory, GiB: a job with a share of a GPU may pin that share of it
    /// (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`).
    #[serde(default)]
    pub gpu_memory_gib: Option<u32>,
}

fn gpu() -> String {
    "GPU".into()
}

/// `apiary serve --config FILE`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    #[serde(default = "listen")]
    pub listen: String,
    /// Directory of the state file (`state.redb`); `:memory:` keeps state in memory (for
    /// tests: a restart forgets everything). With `store = "etcd"` the state is on etcd
    /// and this directory holds the archive of finished jobs.
    #[serde(default = "data_dir")]
    pub data_dir: PathBuf,
    /// Where the state lives: `redb` (a file in `data_dir`, the default) or `etcd` (the
    /// cluster at `etcd_endpoints`, under `etcd_prefix`; a build with `--features etcd`).
    #[serde(default = "store_kind")]
    pub store: String,
    /// The etcd cluster's client URLs (`http://host:2379`), with `store = "etcd"`.
    #[serde(default)]
    pub etcd_endpoints: Vec<String>,
    /// The key prefix of this cluster's state on etcd (one etcd may serve several).
    #[serde(default = "etcd_prefix")]
    pub etcd_prefix: String,
    /// How the other servers on the same etcd prefix name this one to clients (its URL);
    /// `http://` and `listen` when absent.
    #[serde(default)]
    pub advertise_url: Option<String>,
    /// Seconds a leader's lease lasts on etcd: a server that stops renewing it (dead,
    /// cut off) is replaced within about this long. Kubernetes' default, 15.
    #[serde(default = "leader_lease")]
    pub leader_lease_s: f64,
    /// Policy: any that `apiary policies` lists and the service can host (with
    /// `sharing`, the one each VC runs).
    #[serde(default = "policy")]
    pub policy: String,
    /// Its parameters.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Seconds between an agent's heartbeats.
    #[serde(default = "interval")]
    pub heartbeat_interval_s: f64,
    /// Seconds without a heartbeat before a node is down and its jobs are requeued.
    #[serde(default = "timeout")]
    pub node_timeout_s: f64,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    #[serde(default = "grace")]
    pub grace_s: f64,
    /// Job events on stderr: `text` (default), `json` (one object per line) or `off`.
    #[serde(default = "log_format")]
    pub log_format: String,
    /// How VCs share the cluster: `none` (the policy alone decides), `quota` (each VC
    /// holds at most its `quota_gpus`), `hived` (each VC owns `nodes` node cells, bound
    /// by HiveD's buddy cell allocation) or `private` (each VC alone on `nodes` nodes).
    /// The simulator's `quota`, `hived` and `private` policies, with `policy` inside
    /// each VC.
    #[serde(default, deserialize_with = "sharing")]
    pub sharing: Option<Sharing>,
    /// The VCs jobs may name; none: any name.
    #[serde(default)]
    pub vcs: Vec<VcConfig>,
    /// The nodes.
    pub nodes: Vec<NodeConfig>,
    /// API tokens. With none (here or in `tokens_file`) the API is open: for a laptop,
    /// never a shared cluster.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// A TOML file of more `[[tokens]]`, so that secrets live apart from the config
    /// (relative paths are relative to the config file).
    #[serde(default)]
    pub tokens_file: Option<PathBuf>,
    /// A CSV of the grid's carbon intensity by hour, dated (a `timestamp` column and
    /// `g_per_kwh` or `avg_CI`, docs/carbon.md), for the carbon-aware policies; read
    /// again whenever it changes (relative paths are relative to the config file).
    /// Without it they see the documented constant.
    #[serde(default)]
    pub carbon_file: Option<PathBuf>,
    /// The storage an `io` policy (silod) allocates, as the simulator's `--io` takes it:
    /// `default`, or `cache_gb_per_gpu=N,bandwidth_mbs_per_gpu=N` over the defaults
    /// (docs/io.md). Without it such a policy gets the defaults.
    #[serde(default)]
    pub io: Option<String>,
    /// How many of the nodes, the first ones, have GPUs that serve online inference
    /// services run outside apiary: an `online-sharing` policy (muxflow) runs offline
    /// jobs beside them, by what their agents measure the services use.
    #[serde(default)]
    pub online_nodes: Option<u32>,
    /// How jobs that share GPUs (`gpu_milli`) are packed: one of FGD's six policies
    /// (`fgd`, `bestfit`, `dotprod`, `gpu-packing`, `gpu-clustering`, `random`; `apiary
    /// policies` lists them), fragmentation measured against the shapes of the jobs the
    /// server admitted. Every node must then declare `cpus` and `memory_gib` (the
    /// policies weigh them) and have at most 8 GPUs, as FGD's nodes do. Absent: the
    /// fullest GPU that holds the job (docs/serve.md, "Sharing GPUs").
    #[serde(default)]
    pub share_policy: Option<String>,
    /// Its parameters.
    #[serde(default)]
    pub share_params: BTreeMap<String, String>,
    /// Jobs one VC may have unfinished (queued or running) at once, like Slurm's
    /// `MaxSubmitJobs`; a submission past it gets a 429.
    #[serde(default = "max_jobs")]
    pub max_jobs_per_vc: u64,
    /// Where finished jobs are archived: `data_dir/archive` when absent. Servers
    /// sharing state on etcd should share this too (a shared filesystem, as Slurm's
    /// backup controllers share `StateSaveLocation`), so that a new leader reads what
    /// the last one archived; only the leader writes it.
    #[serde(default)]
    pub archive_dir: Option<PathBuf>,
    /// Seconds a finished job stays in the hot state (`apiary jobs -a`, the store)
    /// before it moves to the archive (`archive_dir`, read by `jobs -a --since`).
    #[serde(default = "retain")]
    pub retain_finished_s: f64,
    /// Records one VC may hold in the hot state, finished ones included: past it its
    /// oldest finished jobs move to the archive early, and a submission when none has
    /// finished gets a 429.
    #[serde(default = "max_records")]
    pub max_records_per_vc: u64,
    /// Bytes of records (their JSON, about) one VC may hold in the hot state, likewise.
    #[serde(default = "max_record_bytes")]
    pub max_record_bytes_per_vc: u64,
}

fn store_kind() -> String {
    "redb".into()
}
fn etcd_prefix() -> String {
    "apiary".into()
}
fn leader_lease() -> f64 {
    15.0
}

fn retain() -> f64 {
    86_400.0
}
fn max_records() -> u64 {
    20_000
}
fn max_record_bytes() -> u64 {
    64 << 20
}

/// Who a bearer token speaks for.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything.
    Admin,
    /// Node agents: heartbeats only, for the nodes the token names.
    Agent,
    /// One VC's jobs.
    Tenant,
    /// `/metrics` only (a Prometheus scraper).
    Metrics,
}

/// One `[[tokens]]` entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The secret (at least 16 characters).
    pub token: String,
    /// Its role.
    pub role: Role,
    /// The VC of a tenant token.
    #[serde(default)]
    pub vc: Option<String>,
    /// The person a tenant or admin token speaks for: jobs it submits record them, and
    /// only they (and admins) see those jobs' environment values.
    #[serde(default)]
    pub user: Option<String>,
    /// Unix time (seconds) after which the token is refused.
    #[serde(default)]
    pub expires_unix_s: Option<u64>,
    /// The nodes an agent token may heartbeat for (`["*"]`: any declared node).
    #[serde(default)]
    pub nodes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<TokenConfig>,
}

fn listen() -> String {
    "127.0.0.1:8800".into()
}
fn data_dir() -> PathBuf {
    "apiary-data".into()
}
fn policy() -> String {
    "fifo".into()
}
fn interval() -> f64 {
    2.0
}
fn timeout() -> f64 {
    10.0
}
fn grace() -> f64 {
    10.0
}
fn log_format() -> String {
    "text".into()
}
/// `sharing`: `none`, or the name of a way VCs share the cluster.
fn sharing<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Sharing>, D::Error> {
    let name = String::deserialize(d)?;
    if name == "none" {
        return Ok(None);
    }
    Sharing::parse(&name).map(Some).ok_or_else(|| {
        let ways: Vec<&str> = Sharing::ALL.iter().map(|s| s.name()).collect();
        serde::de::Error::custom(format!("'{name}': one of none, {}", ways.join(", ")))
    })
}
fn max_jobs() -> u64 {
    10_000
}

impl ServerConfig {
    /// The policy to build and its parameters: `policy` itself, or with `sharing` the
    /// VC-sharing policy of that name hosting `policy` inside each VC (its parameters
    /// passed as `intra.KEY`).
    pub fn policy_params(&self) -> (String, apiary_policy::Params) {
        let Some(sharing) = self.sharing else {
            return (
                self.policy.clone(),
                apiary_policy::Params(self.params.clone()),
            );
        };
        let mut p: BTreeMap<String, String> = self
            .params
            .iter()
            .map(|(k, v)| (format!("intra.{k}"), v.clone()))
            .collect();
        p.insert("intra".into(), self.policy.clone());
        (sharing.name().to_string(), apiary_policy::Params(p))
    }

    /// Checks `store` and, for etcd, its endpoints and prefix.
    fn check_store(&self) -> Result<(), (String, String)> {
        match self.store.as_str() {
            "redb" => Ok(()),
            "etcd" if !cfg!(feature = "etcd") => Err((
                "store".into(),
                "this apiary was built without etcd: build it with `cargo build --release \
                 -p apiary-cli --features etcd` (which needs protoc)"
                    .into(),
            )),
            "etcd" => {
                if self.etcd_endpoints.is_empty() {
                    return Err((
                        "etcd_endpoints".into(),
                        "list the etcd cluster's client URLs, e.g. [\"http://10.0.0.1:2379\"]"
                            .into(),
                    ));
                }
                if let Some(e) = self
                    .etcd_endpoints
                    .iter()
                    .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
                {
                    return Err((
                        "etcd_endpoints".into(),
                        format!("'{e}' is not an http:// or https:// URL"),
                    ));
                }
                if self.etcd_prefix.is_empty() || self.etcd_prefix.contains('\0') {
                    return Err((
                        "etcd_prefix".into(),
                        "must be a non-empty key prefix".into(),
                    ));
                }
                let lease = self.leader_lease_s;
                if !(lease.is_finite() && (2.0..=3600.0).contains(&lease)) {
                    return Err((
                        "leader_lease_s".into(),
                        format!("must be 2 to 3600 seconds (got {lease})"),
                    ));
                }
                Ok(())
            }
            other => Err((
                "store".into(),
                format!("unknown store '{other}' (redb or etcd)"),
            )),
        }
    }

    /// Whether the service can run `policy` (with `sharing`): why not, naming the
    /// capability that blocks it. The capabilities are those of the policy built with
    /// its parameters, which the live core checks again when it starts.
    fn check_policy(&self) -> Result<(), (String, String)> {
        self.check_share_policy()?;
        let Some(spec) = apiary_policy::find(&self.policy) else {
            let names: Vec<&str> = apiary_policy::registry::ALL
                .iter()
                .map(|s| s.name)
                .collect();
            return Err((
                "policy".into(),
                format!(
                    "unknown policy '{}' (one of {})",
                    self.policy,
                    names.join(", ")
                ),
            ));
        };
        let own = apiary_policy::registry::build(
            &self.policy,
            &apiary_policy::Params(self.params.clone()),
        )
        .map_err(|e| ("params".to_string(), e.to_string()))?;
        let capabilities = own.capabilities();
        if capabilities.has(apiary_policy::Capability::Tenants) {
            return Err((
                "policy".into(),
                format!(
                    "'{}' divides the cluster among VCs: write sharing = \"{}\" with the policy \
                     each VC runs as `policy`",
                    spec.name, spec.name
                ),
            ));
        }
        if let Some(io) = &self.io {
            apiary_model::io::Storage::parse(io).map_err(|e| ("io".to_string(), e.to_string()))?;
        }
        if capabilities.has(apiary_policy::Capability::CpuWorkers)
            && let Some(i) = self.nodes.iter().position(|n| n.cpus.is_none())
        {
            return Err((
                format!("nodes[{i}].cpus"),
                format!(
                    "'{}' gives jobs CPUs for their input pipelines from the nodes' CPUs: \
                     declare every node's `cpus`",
                    spec.name
                ),
            ));
        }
        if let Some(k) = self.online_nodes
            && k as usize > self.nodes.len()
        {
            return Err((
                "online_nodes".into(),
                format!("{k} nodes asked but the config has {}", self.nodes.len()),
            ));
        }
        if capabilities.has(apiary_policy::Capability::OnlineSharing)
            && self.online_nodes.is_none_or(|k| k == 0)
        {
            return Err((
                "online_nodes".into(),
                format!(
                    "'{}' runs offline jobs beside online services: say how many nodes, \
                     the first ones, serve them (online_nodes = N)",
                    spec.name
                ),
            ));
        }
        if let Some(sharing) = self.sharing
            && let Some(c) = capabilities.tenant_blocker()
        {
            return Err((
                "policy".into(),
                format!(
                    "'{}' cannot run inside a VC with sharing = \"{}\": it needs the `{c}` \
                     capability (one of {} can)",
                    spec.name,
                    sharing,
                    apiary_policy::vc::INTRA
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let (name, params) = self.policy_params();
        apiary_policy::registry::build(&name, &params)
            .map(|_| ())
            .map_err(|e| ("params".into(), e.to_string()))
    }
    /// Checks `share_policy`: a known policy, its parameters, and nodes it can score.
    fn check_share_policy(&self) -> Result<(), (String, String)> {
        let Some(name) = &self.share_policy else {
            if !self.share_params.is_empty() {
                return Err((
                    "share_params".into(),
                    "parameters without a share_policy".into(),
                ));
            }
            return Ok(());
        };
        if !apiary_share::is_share_policy(name) {
            let names: Vec<&str> = apiary_share::POLICIES.names().collect();
            return Err((
                "share_policy".into(),
                format!(
                    "unknown GPU-sharing policy '{name}' (one of {})",
                    names.join(", ")
                ),
            ));
        }
        apiary_share::build(name, &apiary_policy::Params(self.share_params.clone()))
            .map_err(|e| ("share_params".to_string(), e.to_string()))?;
        for (i, n) in self.nodes.iter().enumerate() {
            let max = apiary_model::share::MAX_GPUS_PER_NODE;
            if n.gpus as usize > max {
                return Err((
                    format!("nodes[{i}].gpus"),
                    format!("share_policy '{name}' scores nodes of at most {max} GPUs, as FGD's"),
                ));
            }
            for (f, v) in [("cpus", n.cpus), ("memory_gib", n.memory_gib)] {
                if v.is_none() {
                    return Err((
                        format!("nodes[{i}].{f}"),
                        format!(
                            "share_policy '{name}' weighs the nodes' CPU and memory: declare \
                             every node's `cpus` and `memory_gib`"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Parses and checks a config.
    pub fn parse(text: &str, file: &str) -> Result<ServerConfig, ConfigError> {
        let c: ServerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.into(),
            message: e.to_string(),
        })?;
        let bad = |field: String, message: String| ConfigError::Invalid {
            file: file.into(),
            field,
            message,
        };
        c.check_policy()
            .map_err(|(field, message)| bad(field, message))?;
        if !["text", "json", "off"].contains(&c.log_format.as_str()) {
            return Err(bad(
                "log_format".into(),
                format!("'{}': one of text, json, off", c.log_format),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        let mut accounts = std::collections::BTreeMap::new();
        for (i, v) in c.vcs.iter().enumerate() {
            if v.name.is_empty() || !names.insert(v.name.as_str()) {
                return Err(bad(
                    format!("vcs[{i}].name"),
                    format!("'{}' is empty or repeated", v.name),
                ));
            }
            if let Some(a) = &v.run_as {
                if a.is_empty() || a.contains(char::is_whitespace) || a.contains(':') {
                    return Err(bad(
                        format!("vcs[{i}].run_as"),
                        format!("'{a}' is not an account name or uid"),
                    ));
                }
                if let Some(other) = accounts.insert(a.as_str(), v.name.as_str()) {
                    return Err(bad(
                        format!("vcs[{i}].run_as"),
                        format!(
                            "'{a}' is VC {other}'s account too: two tenants under one uid could read and signal each other's jobs"
                        ),
                    ));
                }
            }
            match c.sharing {
                Some(Sharing::Quota) if v.quota_gpus.is_none() => {
                    return Err(bad(
                        format!("vcs[{i}].quota_gpus"),
                        "quota sharing needs every VC's quota_gpus".into(),
                    ));
                }
                Some(s) if s.cells() && v.nodes.is_none_or(|n| n == 0) => {
                    return Err(bad(
                        format!("vcs[{i}].nodes"),
                        format!("{s} sharing needs every VC's nodes (at least 1)"),
                    ));
                }
                _ => {}
            }
        }
        if let Some(s) = c.sharing
            && c.vcs.is_empty()
        {
            return Err(bad(
                "vcs".into(),
                format!("sharing = \"{s}\" needs [[vcs]]"),
            ));
        }
        let cells: u32 = c.vcs.iter().filter_map(|v| v.nodes).sum();
        if c.sharing.is_some_and(Sharing::cells) && cells as usize > c.nodes.len() {
            return Err(bad(
                "vcs".into(),
                format!(
                    "{cells} node cells assigned but {} nodes declared",
                    c.nodes.len()
                ),
            ));
        }
        if c.nodes.is_empty() {
            return Err(bad("nodes".into(), "declare at least one node".into()));
        }
        c.check_store().map_err(|(f, m)| bad(f, m))?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, n) in c.nodes.iter().enumerate() {
            if n.name.is_empty() || !seen.insert(n.name.as_str()) {
                return Err(bad(
                    format!("nodes[{i}].name"),
                    format!("'{}' is empty or repeated", n.name),
                ));
            }
            if !(1..=64).contains(&n.gpus) {
                return Err(bad(format!("nodes[{i}].gpus"), "must be 1..=64".into()));
            }
            for (f, v, max) in [
                ("cpus", n.cpus, 1 << 20),
                ("memory_gib", n.memory_gib, 1 << 24),
                ("gpu_memory_gib", n.gpu_memory_gib, 1 << 16),
            ] {
                if v.is_some_and(|v| v > max) {
                    return Err(bad(format!("nodes[{i}].{f}"), format!("at most {max}")));
                }
            }
        }
        for (f, v) in [
            ("heartbeat_interval_s", c.heartbeat_interval_s),
            ("node_timeout_s", c.node_timeout_s),
            ("grace_s", c.grace_s),
            ("retain_finished_s", c.retain_finished_s),
        ] {
            // Bounded so that timeouts in milliseconds added to the clock never wrap.
            if !(v.is_finite() && v > 0.0 && v <= 1e9) {
                return Err(bad(
                    f.into(),
                    "must be a positive number of seconds, at most 10^9".into(),
                ));
            }
        }
        if c.node_timeout_s <= 2.0 * c.heartbeat_interval_s {
            return Err(bad(
                "node_timeout_s".into(),
                "must exceed two heartbeat intervals".into(),
            ));
        }
        if c.max_jobs_per_vc == 0 {
            return Err(bad("max_jobs_per_vc".into(), "must be at least 1".into()));
        }
        if c.max_records_per_vc < c.max_jobs_per_vc {
            return Err(bad(
                "max_records_per_vc".into(),
                format!(
                    "{} is below max_jobs_per_vc ({}): the unfinished jobs are records too",
                    c.max_records_per_vc, c.max_jobs_per_vc
                ),
            ));
        }
        // One record of the largest size a submission may have must fit.
        if c.max_record_bytes_per_vc < 1 << 20 {
            return Err(bad(
                "max_record_bytes_per_vc".into(),
                "must be at least 1 MiB (1048576)".into(),
            ));
        }
        for (i, t) in c.tokens.iter().enumerate() {
            c.check_token(t)
                .map_err(|m| bad(format!("tokens[{i}]"), m))?;
        }
        Ok(c)
    }

    /// The files holding tokens that others than their owner may read: `config` itself
    /// when it has `[[tokens]]`, and `tokens_file` (relative to `config_dir`).
    pub fn readable_token_files(
        &self,
        config: &std::path::Path,
        config_dir: &std::path::Path,
    ) -> Vec<(PathBuf, u32)> {
        use std::os::unix::fs::PermissionsExt as _;
        let mut files = Vec::new();
        if !self.tokens.is_empty() {
            files.push(config.to_path_buf());
        }
        if let Some(f) = &self.tokens_file {
            files.push(config_dir.join(f));
        }
        files
            .into_iter()
            .filter_map(|f| {
                let mode = std::fs::metadata(&f).ok()?.permissions().mode() & 0o777;
                (mode & 0o044 != 0).then_some((f, mode))
            })
            .collect()
    }

    /// Reads `tokens_file` (relative to `config_dir`) into `tokens`.
    pub fn load_tokens(&mut self, config_dir: &std::path::Path) -> Result<(), ConfigError> {
        let Some(f) = &self.tokens_file else {
            return Ok(());
        };
        let path = config_dir.join(f);
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::Parse {
            file: file.clone(),
            message: e.to_string(),
        })?;
        let t: TokensFile = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            file: file.clone(),
            message: e.to_string(),
        })?;
        for (i, tok) in t.tokens.iter().enumerate() {
            self.check_token(tok)
                .map_err(|message| ConfigError::Invalid {
                    file: file.clone(),
                    field: format!("tokens[{i}]"),
                    message,
                })?;
        }
        self.tokens.extend(t.tokens);
        Ok(())
    }

    /// Whether the state lives only in memory.
    pub fn in_memory(&self) -> bool {
        self.data_dir.as_os_str() == ":memory:"
    }

    /// The archive's directory; none when the state is in memory (so is the archive).
    pub fn archive_path(&self) -> Option<PathBuf> {
        if self.in_memory() {
            return None;
        }
        Some((self.archive_dir.clone()).unwrap_or_else(|| self.data_dir.join("archive")))
    }

    fn check_token(&self, t: &TokenConfig) -> Result<(), String> {
        if t.token.len() < 16 || t.token.chars().any(char::is_whitespace) {
            return Err("token must be at least 16 characters, without spaces".into());
        }
        match (&t.role, &t.vc) {
            (Role::Tenant, None) => return Err("a tenant token names its vc".into()),
            (Role::Admin | Role::Agent | Role::Metrics, Some(_)) => {
                return Err("only tenant tokens name a vc".into());
            }
            _ => {}
        }
        match (&t.role, t.nodes.is_empty()) {
            // A token that can heartbeat for any node can take over any node's jobs:
            // the operator must say which nodes each agent serves.
            (Role::Agent, true) => Err(
                "an agent token names the nodes it serves (nodes = [\"n0\"], or [\"*\"] for all)"
                    .into(),
            ),
            (Role::Agent, false) => match t
                .nodes
                .iter()
                .find(|n| n.as_str() != "*" && !self.nodes.iter().any(|d| &d.name == *n))
            {
                Some(n) => Err(format!("nodes: '{n}' is not a declared node")),
                None => Ok(()),
            },
            (_, false) => Err("only agent tokens name nodes".into()),
            (_, true) => Ok(()),
        }
    }
}

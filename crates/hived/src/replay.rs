//! Replays a scenario of HiveD algorithm calls and reports each result as one JSON line.
//!
//! A scenario (YAML or JSON) holds `config` (inline, or a path the caller resolves),
//! `pods` (name -> pod scheduling spec) and `steps`:
//! `schedule {pod, phase, suggestedNodes, commit}`, `deleteAllocatedPod`,
//! `deleteUnallocatedPod`, `setNodeBad`, `setNodeHealthy`, `restart {config}`; and optionally
//! `usableOrder` (`fewer-opportunistic` or upstream's `list-order`).
//! The replayer plays Kubernetes: it commits binds, remembers bind info, and on `restart`
//! rebuilds the scheduler and re-adds every bound pod from its record (recovery).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::{BindInfo, Config, Decision, Hived, Phase, PodSpec, Suggested, UsableOrder};

/// A config given inline or as a path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigRef {
    /// Path, relative to the scenario file.
    Path(String),
    /// Inline config.
    Inline(Box<Config>),
}

/// A replay scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// The scheduler config.
    pub config: ConfigRef,
    /// Pod specs by name.
    #[serde(default)]
    pub pods: BTreeMap<String, PodSpec>,
    /// The calls, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// `fewer-opportunistic` (default) or upstream's `list-order`; see [`UsableOrder`].
    #[serde(default)]
    pub usable_order: UsableOrder,
}

/// `suggestedNodes`: `ALL`, a list, or `{allExcept: [...]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SuggestedSpec {
    /// `ALL`.
    Word(String),
    /// Only these nodes.
    List(Vec<String>),
    /// `{allExcept: [...]}`.
    Except {
        /// Nodes left out.
        #[serde(rename = "allExcept")]
        all_except: Vec<String>,
    },
}

/// A pod named directly or as `{pod: NAME}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PodRef {
    /// `NAME`.
    Name(String),
    /// `{pod: NAME}`.
    Obj {
        /// The pod.
        pod: String,
    },
}

impl PodRef {
    fn name(&self) -> &str {
        match self {
            PodRef::Name(n) | PodRef::Obj { pod: n } => n,
        }
    }
}

/// A node named directly or as `{node: NAME}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NodeRef {
    /// `NAME`.
    Name(String),
    /// `{node: NAME}`.
    Obj {
        /// The node.
        node: String,
    },
}

impl NodeRef {
    fn name(&self) -> &str {
        match self {
            NodeRef::Name(n) | NodeRef::Obj { node: n } => n,
        }
    }
}

/// One call.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    /// `Schedule(pod, suggestedNodes, phase)`, committed on bind unless `commit: false`.
    #[serde(rename_all = "camelCase")]
    Schedule {
        /// The pod.
        pod: String,
        /// Default `Preempting`.
        #[serde(default)]
        phase: Option<Phase>,
        /// Default `ALL`.
        #[serde(default)]
        suggested_nodes: Option<SuggestedSpec>,
        /// Default true.
        #[serde(default)]
        commit: Option<bool>,
    },
    /// A bound pod ends.
    DeleteAllocatedPod(PodRef),
    /// A waiting pod goes away.
    DeleteUnallocatedPod(PodRef),
    /// A node fails.
    SetNodeBad(NodeRef),
    /// A node recovers.
    SetNodeHealthy(NodeRef),
    /// The scheduler restarts (optionally with a new config) and recovers.
    Restart {
        /// New config; default the current one.
        #[serde(default)]
        config: Option<ConfigRef>,
    },
}

/// Why a scenario cannot run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The scenario text is malformed.
    #[error("scenario: {0}")]
    Parse(String),
    /// The config is invalid.
    #[error("config: {0}")]
    Config(String),
}

impl Scenario {
    /// Parses YAML or JSON.
    pub fn parse(text: &str) -> Result<Scenario, ReplayError> {
        if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| ReplayError::Parse(e.to_string()))
        } else {
            serde_saphyr::from_str(text).map_err(|e| ReplayError::Parse(e.to_string()))
        }
    }
}

/// The replay state: the scheduler plus what Kubernetes would know.
pub struct Replayer<'a> {
    /// The scheduler.
    pub hived: Hived,
    bound: Vec<(String, BindInfo)>,
    pods: &'a BTreeMap<String, PodSpec>,
    load: &'a dyn Fn(&ConfigRef) -> Result<Config, String>,
    inspect: bool,
}

fn to_suggested(s: &Option<SuggestedSpec>) -> Result<Suggested, String> {
    Ok(match s {
        None => Suggested::All,
        Some(SuggestedSpec::Word(w)) if w.eq_ignore_ascii_case("all") => Suggested::All,
        Some(SuggestedSpec::Word(w)) => {
            return Err(format!(
                "suggestedNodes: expected ALL, a list of nodes or {{allExcept: [...]}}, got {w}"
            ));
        }
        Some(SuggestedSpec::List(l)) => Suggested::Only(l.iter().map(Into::into).collect()),
        Some(SuggestedSpec::Except { all_except }) => {
            Suggested::AllExcept(all_except.iter().map(Into::into).collect())
        }
    })
}

impl<'a> Replayer<'a> {
    /// Builds the scheduler (all nodes healthy, reported in config order).
    pub fn new(
        scenario: &'a Scenario,
        load: &'a dyn Fn(&ConfigRef) -> Result<Config, String>,
        inspect: bool,
    ) -> Result<Replayer<'a>, ReplayError> {
        let cfg = load(&scenario.config).map_err(ReplayError::Config)?;
        let mut hived =
            Hived::with_all_nodes_healthy(&cfg).map_err(|e| ReplayError::Config(e.to_string()))?;
        hived.set_usable_order(scenario.usable_order);
        Ok(Replayer {
            hived,
            bound: Vec::new(),
            pods: &scenario.pods,
            load,
            inspect,
        })
    }

    fn group_of(&self, pod: &str) -> Option<String> {
        let s = self.pods.get(pod)?;
        Some(
            s.affinity_group
                .as_ref()
                .map_or_else(|| pod.to_string(), |g| g.name.clone()),
        )
    }

    fn spec(&self, pod: &str) -> Result<&'a PodSpec, String> {
        self.pods
            .get(pod)
            .ok_or_else(|| format!("pod {pod} is not defined under pods"))
    }

    /// Runs one step and returns its report line.
    pub fn step(&mut self, index: usize, step: &Step) -> Value {
        self.hived.set_now(index as i64);
        let mut out = match step {
            Step::Schedule {
                pod,
                phase,
                suggested_nodes,
                commit,
            } => {
                let mut line = json!({"step": index, "op": "schedule", "pod": pod});
                match self.schedule(
                    pod,
                    phase.unwrap_or(Phase::Preempting),
                    suggested_nodes,
                    commit.unwrap_or(true),
                ) {
                    Ok(fields) => {
                        for (k, v) in fields {
                            line[k] = v;
                        }
                    }
                    Err(e) => {
                        line["result"] = json!("error");
                        line["error"] = json!(e);
                    }
                }
                if let Some(group) = self.group_of(pod)
                    && let Some(state) = self.hived.group_state(&group)
                {
                    line["groupState"] = json!(state);
                }
                line
            }
            Step::DeleteAllocatedPod(p) => {
                let r = self.delete_allocated(p.name());
                report(index, "deleteAllocatedPod", json!({"pod": p.name()}), r)
            }
            Step::DeleteUnallocatedPod(p) => {
                let r = self.spec(p.name()).and_then(|s| {
                    self.hived
                        .delete_unallocated_pod(p.name(), s)
                        .map_err(|e| e.to_string())
                });
                report(index, "deleteUnallocatedPod", json!({"pod": p.name()}), r)
            }
            Step::SetNodeBad(n) => {
                let r = self.hived.set_node_bad(n.name()).map_err(|e| e.to_string());
                report(index, "setNodeBad", json!({"node": n.name()}), r)
            }
            Step::SetNodeHealthy(n) => {
                let r = self
                    .hived
                    .set_node_healthy(n.name())
                    .map_err(|e| e.to_string());
                report(index, "setNodeHealthy", json!({"node": n.name()}), r)
            }
            Step::Restart { config } => {
                let mut line = json!({"step": index, "op": "restart"});
                match self.restart(config.as_ref()) {
                    Ok(ignored) => {
                        line["result"] = json!("ok");
                        line["recovered"] = json!(self.bound.len());
                        if !ignored.is_empty() {
                            line["ignored"] = json!(ignored);
                        }
                        // Guaranteed groups that came back without their VC cells (their
                        // records no longer map onto the new config): they run on,
                        // lazily preempted.
                        let mut lazy: Vec<String> = self
                            .bound
                            .iter()
                            .filter(|(pod, _)| self.spec(pod).is_ok_and(|s| s.priority >= 0))
                            .filter_map(|(pod, _)| self.group_of(pod))
                            .filter(|g| self.hived.group_is_lazy_or_opportunistic(g) == Some(true))
                            .collect();
                        lazy.sort();
                        lazy.dedup();
                        line["lazyPreempted"] = json!(lazy);
                    }
                    Err(e) => {
                        line["result"] = json!("error");
                        line["error"] = json!(e);
                    }
                }
                line
            }
        };
        if self.inspect {
            out["affinityGroups"] = json!({"items": self.hived.affinity_groups()});
            out["clusterStatus"] = json!(self.hived.cluster_status());
        }
        out
    }

    fn schedule(
        &mut self,
        pod: &str,
        phase: Phase,
        suggested: &Option<SuggestedSpec>,
        commit: bool,
    ) -> Result<Vec<(&'static str, Value)>, String> {
        let spec = self.spec(pod)?;
        if self.bound.iter().any(|(p, _)| p == pod) {
            return Err(format!("pod {pod} is already bound"));
        }
        let sugg = to_suggested(suggested)?;
        let d = self
            .hived
            .schedule(pod, spec, &sugg, phase)
            .map_err(|e| e.to_string())?;
        Ok(match d {
            Decision::Bind(info) => {
                let mut f = vec![
                    ("result", json!("bind")),
                    ("node", json!(info.node)),
                    ("leafCellIndices", json!(info.leaf_cell_isolation)),
                ];
                if commit {
                    self.hived
                        .add_allocated_pod(pod, spec, &info)
                        .map_err(|e| e.to_string())?;
                    self.bound.push((pod.to_string(), info));
                } else {
                    f.push(("committed", json!(false)));
                }
                f
            }
            Decision::Preempt(v) => vec![("result", json!("preempt")), ("victims", json!(v))],
            Decision::Wait(r) => vec![("result", json!("wait")), ("reason", json!(r))],
        })
    }

    fn delete_allocated(&mut self, pod: &str) -> Result<(), String> {
        let spec = self.spec(pod)?;
        let Some(i) = self.bound.iter().position(|(p, _)| p == pod) else {
            return Err(format!("pod {pod} is not bound"));
        };
        self.hived
            .delete_allocated_pod(pod, spec, &self.bound[i].1)
            .map_err(|e| e.to_string())?;
        self.bound.remove(i);
        Ok(())
    }

    fn restart(&mut self, config: Option<&ConfigRef>) -> Result<Vec<String>, String> {
        let cfg = match config {
            Some(c) => (self.load)(c)?,
            None => self.hived.config().clone(),
        };
        let mut h = Hived::new(&cfg).map_err(|e| e.to_string())?;
        h.set_usable_order(self.hived.usable_order);
        for n in h.nodes().to_vec() {
            if !self.hived.node_is_bad(&n) {
                h.set_node_healthy(&n).map_err(|e| e.to_string())?;
            }
        }
        let mut ignored = Vec::new();
        for (pod, info) in &self.bound {
            let spec = self.spec(pod)?;
            if h.add_allocated_pod(pod, spec, info).is_err() {
                ignored.push(pod.clone());
            }
        }
        self.hived = h;
        Ok(ignored)
    }
}

fn report(index: usize, op: &str, subject: Value, r: Result<(), String>) -> Value {
    let mut line = json!({"step": index, "op": op});
    if let Value::Object(m) = subject {
        for (k, v) in m {
            line[k] = v;
        }
    }
    match r {
        Ok(()) => line["result"] = json!("ok"),
        Err(e) => {
            line["result"] = json!("error");
            line["error"] = json!(e);
        }
    }
    line
}

/// Runs a whole scenario and checks hived.md §9's invariants after every step: the report
/// lines, and per step the violations found (empty when the state is consistent).
pub fn run_checked(
    scenario: &Scenario,
    load: &dyn Fn(&ConfigRef) -> Result<Config, String>,
    inspect: bool,
) -> Result<Vec<(Value, Vec<String>)>, ReplayError> {
    let mut r = Replayer::new(scenario, load, inspect)?;
    Ok(scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let line = r.step(i, s);
            (line, r.hived.check_invariants())
        })
        .collect())
}

/// Runs a whole scenario, one report line per step.
pub fn run(
    scenario: &Scenario,
    load: &dyn Fn(&ConfigRef) -> Result<Config, String>,
    inspect: bool,
) -> Result<Vec<Value>, ReplayError> {
    let mut r = Replayer::new(scenario, load, inspect)?;
    Ok(scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| r.step(i, s))
        .collect())
}

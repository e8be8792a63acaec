//! `apiary serve --extender`: HiveD's scheduling as a Kubernetes scheduler extender, as
//! HiveD itself is deployed. A stock kube-scheduler calls filter, prioritize, preempt and
//! bind over HTTP ([`wire`]); this module is the state machine behind those calls
//! (no I/O, no clock), upstream's `pkg/scheduler/scheduler.go` over [`apiary_hived::Hived`].
//!
//! A pod goes Waiting → (Preempting) → Binding → Bound. Filter decides and commits the
//! placement at once (`AddAllocatedPod`), so the next pod's decision sees it; bind then
//! writes it to the API server with the pod's bind info in its annotations. The API
//! server is the only durable state, as upstream: a restarted (or newly elected)
//! extender rebuilds every bound pod's cells from its `pod-bind-info` annotation
//! ([`Extender::sync`]), and a pod whose bind never reached the API server is simply
//! scheduled again. Kubernetes binds a pod at most once (a second binding is refused with
//! 409), so no pod is ever bound twice, whoever dies when.
//!
//! One difference from upstream: pods are learned from the filter call's pod object and
//! forgotten by the periodic list of pods ([`Extender::sync`]) rather than through
//! informers, so a pod the extender never saw in a filter is unknown to it until it is
//! bound (upstream answers such a pod's calls with the same 400).

pub mod http;
pub mod kube;
pub mod serve;
pub mod stub;
pub mod wire;

use apiary_hived::{
    BindInfo, Decision, GroupSpec, Hived, HivedError, MemberSpec, Phase, Suggested,
};
use std::collections::{BTreeMap, BTreeSet};
use wire::*;

/// The pod annotation holding HiveD's pod scheduling spec (YAML).
pub const SPEC_ANNOTATION: &str = "hivedscheduler.microsoft.com/pod-scheduling-spec";
/// The container resource limit by which a pod opts in to HiveD.
pub const ENABLE_RESOURCE: &str = "hivedscheduler.microsoft.com/pod-scheduling-enable";
/// The annotation written at bind time: where the pod and its group went.
pub const BIND_INFO_ANNOTATION: &str = "hivedscheduler.microsoft.com/pod-bind-info";
/// The annotation written at bind time: the pod's device indices, comma-separated
/// (for `NVIDIA_VISIBLE_DEVICES` through the downward API).
pub const ISOLATION_ANNOTATION: &str = "hivedscheduler.microsoft.com/pod-leaf-cell-isolation";
/// The name wait reasons are filed under in a filter's failed nodes.
pub const COMPONENT: &str = "apiary";

/// An extender call that cannot be served: the caller's fault (HTTP 400) or ours (500).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExtenderError {
    /// The request is wrong for the pod's state or the pod is wrong.
    #[error("user error: {0}")]
    User(String),
    /// The scheduler cannot serve it.
    #[error("platform error: {0}")]
    Platform(String),
}

impl ExtenderError {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            ExtenderError::User(_) => 400,
            ExtenderError::Platform(_) => 500,
        }
    }
}

/// HiveD's message about a pod, which names it by the UID it is known by, naming it as
/// people do (`namespace/name`).
fn about(e: HivedError, uid: &str, key: &str) -> ExtenderError {
    let named = |m: String| m.replace(&format!("pod {uid}"), &format!("pod {key}"));
    match e {
        HivedError::User(m) => ExtenderError::User(named(m)),
        HivedError::Platform(m) => ExtenderError::Platform(named(m)),
    }
}

impl From<HivedError> for ExtenderError {
    fn from(e: HivedError) -> Self {
        match e {
            HivedError::User(m) => ExtenderError::User(m),
            HivedError::Platform(m) => ExtenderError::Platform(m),
        }
    }
}

fn user(msg: impl Into<String>) -> ExtenderError {
    ExtenderError::User(msg.into())
}

/// Where a pod is in its scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PodState {
    /// Nothing fits it now.
    Waiting,
    /// Its victims are being deleted.
    Preempting,
    /// Placed (its cells are taken); the bind to the API server is under way.
    Binding,
    /// The API server has it on its node.
    Bound,
}

#[derive(Clone, Debug)]
struct Tracked {
    key: String,
    namespace: String,
    name: String,
    spec: apiary_hived::PodSpec,
    state: PodState,
    info: Option<BindInfo>,
    attempts: u32,
    /// The sync generation current when the pod was learned: a list of pods begun
    /// before it cannot have it.
    learned: u64,
}

/// A bind to write to the API server: `POST /api/v1/namespaces/NS/pods/NAME/binding`.
#[derive(Clone, Debug, PartialEq)]
pub struct BindOrder {
    /// The pod's UID.
    pub uid: String,
    /// The body.
    pub binding: Binding,
}

/// The extender's state: HiveD's algorithm and the pods it is deciding for.
pub struct Extender {
    hived: Hived,
    pods: BTreeMap<String, Tracked>,
    force_bind_threshold: u32,
    /// The nodes the API server has (from the last sync).
    nodes: BTreeSet<String>,
    generation: u64,
}

impl Extender {
    /// An extender over HiveD built from `config`; every node is bad until a sync finds
    /// it `Ready` (as upstream). A filter answered with the same node this many times
    /// without a bind binds the pod itself ("force bind").
    pub fn new(
        config: &apiary_hived::Config,
        force_bind_threshold: u32,
    ) -> Result<Extender, apiary_hived::ConfigError> {
        Ok(Extender {
            hived: Hived::new(config)?,
            pods: BTreeMap::new(),
            force_bind_threshold: force_bind_threshold.max(1),
            nodes: BTreeSet::new(),
            generation: 0,
        })
    }

    /// HiveD's algorithm, for the inspect API.
    pub fn hived(&self) -> &Hived {
        &self.hived
    }

    /// A pod's state, by UID.
    pub fn pod_state(&self, uid: &str) -> Option<PodState> {
        self.pods.get(uid).map(|t| t.state)
    }

    /// Pods by state, for `/v1/inspect/pods`.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for t in self.pods.values() {
            let k = match t.state {
                PodState::Waiting => "waiting",
                PodState::Preempting => "preempting",
                PodState::Binding => "binding",
                PodState::Bound => "bound",
            };
            *out.entry(k).or_insert(0) += 1;
        }
        out
    }

    /// The filter call: bind, preempt or wait. A bind comes back as the single node that
    /// fits; a force bind, when due, as an order for the caller to write.
    pub fn filter(
        &mut self,
        args: ExtenderArgs,
    ) -> Result<(ExtenderFilterResult, Option<BindOrder>), ExtenderError> {
        let (pod, names) = args.into_parts();
        let pod = &pod;
        let uid = uid_of(pod)?;
        let suggested = Suggested::Only(names);
        if let Some(t) = self.pods.get_mut(uid) {
            match t.state {
                PodState::Bound => return Err(already_bound(t)),
                PodState::Binding => {
                    // Insist on the decision: it is committed and cannot be rolled back.
                    t.attempts += 1;
                    let info = t.info.clone().expect("a binding pod has its bind info");
                    let order = self.force_due(uid, &suggested);
                    return Ok((only(&info.node), order));
                }
                PodState::Waiting | PodState::Preempting => {}
            }
        }
        let spec = self.learn(pod)?;
        let d = (self
            .hived
            .schedule(uid, &spec, &suggested, Phase::Filtering))
        .map_err(|e| about(e, uid, &pod.key()))?;
        match d {
            Decision::Bind(info) => {
                (self.hived.add_allocated_pod(uid, &spec, &info))
                    .map_err(|e| about(e, uid, &pod.key()))?;
                let node = info.node.clone();
                let t = self.pods.get_mut(uid).expect("learnt above");
                t.state = PodState::Binding;
                t.info = Some(info);
                let order = self.force_due(uid, &suggested);
                Ok((only(&node), order))
            }
            Decision::Preempt(victims) => {
                // Tell kube-scheduler that preemption may help, naming the victims.
                let mut failed: BTreeMap<String, String> = BTreeMap::new();
                for v in victims {
                    let key = self
                        .pods
                        .get(&v.pod)
                        .map_or(v.pod.clone(), |t| t.key.clone());
                    failed
                        .entry(v.node.clone())
                        .and_modify(|m| {
                            m.push_str(", ");
                            m.push_str(&key);
                        })
                        .or_insert_with(|| format!("node({}) has preemptible Pods: {key}", v.node));
                }
                Ok((
                    ExtenderFilterResult {
                        failed_nodes: failed,
                        ..ExtenderFilterResult::default()
                    },
                    None,
                ))
            }
            Decision::Wait(reason) => {
                self.set_state(uid, PodState::Waiting);
                let mut failed = BTreeMap::new();
                failed.insert(COMPONENT.to_string(), waiting(&reason));
                Ok((
                    ExtenderFilterResult {
                        failed_nodes: failed,
                        ..ExtenderFilterResult::default()
                    },
                    None,
                ))
            }
        }
    }

    /// The prioritize call: the node a pod is binding to scores highest, every other
    /// node 0 (the decision is filter's; this only keeps other extenders from steering
    /// kube-scheduler elsewhere).
    pub fn prioritize(&self, args: &ExtenderArgs) -> Vec<HostPriority> {
        let bound = (self.pods.get(&args.pod.metadata.uid))
            .and_then(|t| t.info.as_ref())
            .map(|i| i.node.as_str());
        (args.node_names().into_iter())
            .map(|host| HostPriority {
                score: if Some(host.as_str()) == bound {
                    MAX_EXTENDER_PRIORITY
                } else {
                    0
                },
                host,
            })
            .collect()
    }

    /// The preempt call: schedule again over the nodes kube-scheduler would preempt on,
    /// and name the victims HiveD chooses (their deletion is kube-scheduler's).
    pub fn preempt(
        &mut self,
        args: &ExtenderPreemptionArgs,
    ) -> Result<ExtenderPreemptionResult, ExtenderError> {
        let uid = uid_of(&args.pod)?;
        if let Some(t) = self.pods.get(uid) {
            match t.state {
                PodState::Bound => return Err(already_bound(t)),
                PodState::Binding => {
                    return Err(user(format!(
                        "pod {} is already binding to node {}",
                        t.key,
                        t.info.as_ref().map_or("", |i| i.node.as_str())
                    )));
                }
                PodState::Waiting | PodState::Preempting => {}
            }
        }
        let spec = self.learn(&args.pod)?;
        let d = (self.hived.schedule(
            uid,
            &spec,
            &Suggested::Only(args.node_names().into_iter().map(Into::into).collect()),
            Phase::Preempting,
        ))
        .map_err(|e| about(e, uid, &args.pod.key()))?;
        match d {
            // Free cells appeared: the next filter binds.
            Decision::Bind(_) => Ok(ExtenderPreemptionResult::default()),
            Decision::Preempt(victims) => {
                self.set_state(uid, PodState::Preempting);
                let mut out: BTreeMap<String, MetaVictims> = BTreeMap::new();
                for v in victims {
                    out.entry(v.node)
                        .or_default()
                        .pods
                        .push(MetaPod { uid: v.pod });
                }
                Ok(ExtenderPreemptionResult {
                    node_name_to_meta_victims: out,
                })
            }
            Decision::Wait(_) => {
                self.set_state(uid, PodState::Waiting);
                Ok(ExtenderPreemptionResult::default())
            }
        }
    }

    /// The bind call: only a pod filter placed, on the node filter chose. The order is
    /// for the caller to write; [`Extender::bound`] records that it was.
    pub fn bind(&mut self, args: &ExtenderBindingArgs) -> Result<BindOrder, ExtenderError> {
        for (field, v) in [
            ("podName", &args.pod_name),
            ("podNamespace", &args.pod_namespace),
            ("podUID", &args.pod_uid),
            ("node", &args.node),
        ] {
            if v.is_empty() {
                return Err(user(format!("{field}: must not be empty")));
            }
        }
        let t = (self.pods.get(&args.pod_uid)).ok_or_else(|| {
            user(format!(
                "pod {}/{} (uid {}) cannot be bound without a placement: filter has not placed it",
                args.pod_namespace, args.pod_name, args.pod_uid
            ))
        })?;
        match t.state {
            PodState::Binding => {}
            PodState::Bound => return Err(already_bound(t)),
            s => {
                return Err(user(format!(
                    "pod {} cannot be bound without a placement: it is {s:?}, asked for node {}",
                    t.key, args.node
                )));
            }
        }
        let info = t.info.as_ref().expect("a binding pod has its bind info");
        if info.node != args.node {
            return Err(user(format!(
                "pod {} binds to node {}, not {}",
                t.key, info.node, args.node
            )));
        }
        Ok(order(&args.pod_uid, t))
    }

    /// The API server has bound pod `uid` (or refused a second binding: it was bound).
    pub fn bound(&mut self, uid: &str) {
        if let Some(t) = self.pods.get_mut(uid)
            && t.state == PodState::Binding
        {
            t.state = PodState::Bound;
        }
    }

    /// Starts a sync: lists of pods and nodes taken from now on are applied with the
    /// generation returned.
    pub fn begin_sync(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Applies the API server's pods and nodes, listed after `begin_sync` returned
    /// `generation`: node health follows `Ready`; bound pods carrying bind info are taken up
    /// (recovery after a restart); pods gone or completed release their cells. Returns
    /// what could not be applied (a bind info that no longer fits the config), one line
    /// each, for the log; nothing stops on them.
    pub fn sync(&mut self, generation: u64, pods: &[Pod], nodes: &[Node]) -> Vec<String> {
        let mut problems = Vec::new();
        self.nodes = nodes.iter().map(|n| n.metadata.name.clone()).collect();
        let healthy: BTreeSet<&str> = (nodes.iter())
            .filter(|n| n.healthy())
            .map(|n| n.metadata.name.as_str())
            .collect();
        for n in self.hived.nodes().to_vec() {
            let ok = healthy.contains(n.as_str());
            if ok == self.hived.node_is_bad(&n) {
                let r = if ok {
                    self.hived.set_node_healthy(&n)
                } else {
                    self.hived.set_node_bad(&n)
                };
                if let Err(e) = r {
                    problems.push(format!("node {n}: {e}"));
                }
            }
        }
        let mut live = BTreeSet::new();
        for p in pods {
            if p.completed() || p.metadata.uid.is_empty() || !opted_in(p) {
                continue;
            }
            live.insert(p.metadata.uid.as_str());
            if p.spec.node_name.is_empty() {
                continue;
            }
            match self.pods.get_mut(&p.metadata.uid) {
                Some(t) if t.state == PodState::Binding => t.state = PodState::Bound,
                Some(t) if t.state == PodState::Bound => {}
                _ => {
                    if let Err(e) = self.recover(p) {
                        problems.push(format!("pod {}: {e}", p.key()));
                    }
                }
            }
        }
        let gone: Vec<String> = (self.pods.iter())
            .filter(|(uid, t)| t.learned < generation && !live.contains(uid.as_str()))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            let t = self.pods.remove(&uid).expect("listed above");
            let r = match (&t.info, t.state) {
                (Some(info), PodState::Binding | PodState::Bound) => {
                    self.hived.delete_allocated_pod(&uid, &t.spec, info)
                }
                _ => self.hived.delete_unallocated_pod(&uid, &t.spec),
            };
            if let Err(e) = r {
                problems.push(format!("pod {}: {e}", t.key));
            }
        }
        problems
    }

    /// A bound pod the extender does not track: its cells from its bind info.
    fn recover(&mut self, p: &Pod) -> Result<(), ExtenderError> {
        let Some(text) = p.metadata.annotations.get(BIND_INFO_ANNOTATION) else {
            // Bound by something else: HiveD never placed it, so it holds no cells.
            return Ok(());
        };
        let info: BindInfo = serde_saphyr::from_str(text)
            .map_err(|e| user(format!("annotation {BIND_INFO_ANNOTATION}: {e}")))?;
        let spec = spec_of(p)?;
        (self.hived.add_allocated_pod(&p.metadata.uid, &spec, &info))
            .map_err(|e| about(e, &p.metadata.uid, &p.key()))?;
        let learned = self.generation;
        self.pods.insert(
            p.metadata.uid.clone(),
            Tracked {
                key: p.key(),
                namespace: namespace(p),
                name: p.metadata.name.clone(),
                spec,
                state: PodState::Bound,
                info: Some(info),
                attempts: 0,
                learned,
            },
        );
        Ok(())
    }

    /// Tracks the pod of a filter or preempt call (Waiting if new) and returns its spec.
    fn learn(&mut self, pod: &Pod) -> Result<apiary_hived::PodSpec, ExtenderError> {
        if let Some(t) = self.pods.get(&pod.metadata.uid) {
            return Ok(t.spec.clone());
        }
        if !opted_in(pod) {
            return Err(user(format!(
                "pod {}: pod.spec.containers[].resources.limits: no container sets {ENABLE_RESOURCE} above 0, so the pod is not HiveD's",
                pod.key()
            )));
        }
        let spec = spec_of(pod)?;
        self.pods.insert(
            pod.metadata.uid.clone(),
            Tracked {
                key: pod.key(),
                namespace: namespace(pod),
                name: pod.metadata.name.clone(),
                spec: spec.clone(),
                state: PodState::Waiting,
                info: None,
                attempts: 0,
                learned: self.generation,
            },
        );
        Ok(spec)
    }

    fn set_state(&mut self, uid: &str, s: PodState) {
        if let Some(t) = self.pods.get_mut(uid) {
            t.state = s;
        }
    }

    /// A force bind when the pod's filters have insisted often enough, or its node is no
    /// longer suggested or known.
    fn force_due(&self, uid: &str, suggested: &Suggested) -> Option<BindOrder> {
        let t = self.pods.get(uid)?;
        let node = &t.info.as_ref()?.node;
        let suggests = match suggested {
            Suggested::All => true,
            Suggested::Only(l) => l.iter().any(|n| n == node),
            Suggested::AllExcept(l) => !l.iter().any(|n| n == node),
        };
        let stale = !suggests || (!self.nodes.is_empty() && !self.nodes.contains(node));
        (t.attempts >= self.force_bind_threshold || stale).then(|| order(uid, t))
    }
}

fn order(uid: &str, t: &Tracked) -> BindOrder {
    let info = t.info.as_ref().expect("a binding pod has its bind info");
    let isolation: Vec<String> = info
        .leaf_cell_isolation
        .iter()
        .map(i32::to_string)
        .collect();
    let mut annotations = BTreeMap::new();
    annotations.insert(ISOLATION_ANNOTATION.to_string(), isolation.join(","));
    // JSON is YAML: upstream's YAML reader takes the record as written.
    annotations.insert(
        BIND_INFO_ANNOTATION.to_string(),
        serde_json::to_string(info).expect("bind info serialises"),
    );
    BindOrder {
        uid: uid.to_string(),
        binding: Binding {
            api_version: "v1".into(),
            kind: "Binding".into(),
            metadata: ObjectMeta {
                name: t.name.clone(),
                namespace: t.namespace.clone(),
                uid: uid.to_string(),
                annotations,
            },
            target: ObjectReference {
                kind: "Node".into(),
                name: info.node.clone(),
            },
        },
    }
}

fn only(node: &str) -> ExtenderFilterResult {
    ExtenderFilterResult {
        nodenames: Some(vec![node.to_string()]),
        ..ExtenderFilterResult::default()
    }
}

fn waiting(reason: &str) -> String {
    format!("Pod is waiting for preemptible or free resource to appear: {reason}")
}

fn already_bound(t: &Tracked) -> ExtenderError {
    user(format!(
        "pod {} has already been bound to node {}",
        t.key,
        t.info.as_ref().map_or("", |i| i.node.as_str())
    ))
}

fn uid_of(pod: &Pod) -> Result<&str, ExtenderError> {
    if pod.metadata.uid.is_empty() {
        return Err(user("pod.metadata.uid: must not be empty"));
    }
    Ok(&pod.metadata.uid)
}

fn namespace(p: &Pod) -> String {
    if p.metadata.namespace.is_empty() {
        "default".into()
    } else {
        p.metadata.namespace.clone()
    }
}

fn opted_in(p: &Pod) -> bool {
    p.limit(ENABLE_RESOURCE).is_some_and(|v| v > 0.0)
}

/// The pod's HiveD spec from its annotation, with upstream's default group (the pod
/// alone, named `namespace/name`).
fn spec_of(p: &Pod) -> Result<apiary_hived::PodSpec, ExtenderError> {
    let field = || format!("pod.metadata.annotations[\"{SPEC_ANNOTATION}\"]");
    let text = (p.metadata.annotations.get(SPEC_ANNOTATION))
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| user(format!("pod {}: {}: missing or empty", p.key(), field())))?;
    let mut spec: apiary_hived::PodSpec = serde_saphyr::from_str(text)
        .map_err(|e| user(format!("pod {}: {}: {e}", p.key(), field())))?;
    if spec.affinity_group.is_none() {
        spec.affinity_group = Some(GroupSpec {
            name: p.key(),
            members: vec![MemberSpec {
                pod_number: 1,
                leaf_cell_number: spec.leaf_cell_number,
            }],
        });
    }
    Ok(spec)
}

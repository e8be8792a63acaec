//! Kubernetes' scheduler-extender JSON (`k8s.io/kube-scheduler/extender/v1`) and the few
//! fields of `v1.Pod`, `v1.Node` and `v1.Binding` the extender reads or writes.
//!
//! The extender types are in neither k8s-openapi nor kube (they are Go-only), so they are
//! defined here. Keys are read as kube-scheduler sends them today (`pod`, `nodenames`) and
//! as the Go field names HiveD-era schedulers sent before the types had JSON tags (`Pod`,
//! `NodeNames`); replies use today's keys, which every kube-scheduler decodes (Go's
//! decoder matches keys case-insensitively). Unknown fields are ignored, as Kubernetes
//! adds fields to Pods every release.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `ExtenderArgs`: the pod and the candidate nodes of a filter or prioritize call.
#[derive(Clone, Debug, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(alias = "Pod")]
    pub pod: Pod,
    /// Candidate nodes as objects (an extender without `nodeCacheCapable`).
    #[serde(default, alias = "Nodes")]
    pub nodes: Option<NodeList>,
    /// Candidate node names (`nodeCacheCapable: true`).
    #[serde(default, alias = "NodeNames")]
    pub nodenames: Option<Vec<compact_str::CompactString>>,
}

impl ExtenderArgs {
    /// The pod and the candidate nodes' names, taken without copying them.
    pub fn into_parts(self) -> (Pod, Vec<compact_str::CompactString>) {
        let names = match (self.nodenames, self.nodes) {
            (Some(n), _) => n,
            (None, Some(l)) => (l.items.into_iter())
                .map(|n| n.metadata.name.into())
                .collect(),
            (None, None) => Vec::new(),
        };
        (self.pod, names)
    }

    /// The candidate nodes' names, whichever way they came.
    pub fn node_names(&self) -> Vec<String> {
        match (&self.nodenames, &self.nodes) {
            (Some(n), _) => n.iter().map(|s| s.to_string()).collect(),
            (None, Some(l)) => l.items.iter().map(|n| n.metadata.name.clone()).collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// `ExtenderFilterResult`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// The nodes that fit, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodenames: Option<Vec<String>>,
    /// Nodes that do not fit, and why; preemption may help.
    #[serde(
        default,
        rename = "failedNodes",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes that do not fit, and why; preemption would not help.
    #[serde(
        default,
        rename = "failedAndUnresolvableNodes",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// What went wrong, when the call failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// One entry of a `HostPriorityList`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    pub host: String,
    /// Score, 0 to [`MAX_EXTENDER_PRIORITY`].
    pub score: i64,
}

/// Kubernetes' `MaxExtenderPriority`.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// `ExtenderPreemptionArgs`.
#[derive(Clone, Debug, Deserialize)]
pub struct ExtenderPreemptionArgs {
    /// The preemptor.
    #[serde(alias = "Pod")]
    pub pod: Pod,
    /// Victims kube-scheduler found, by node, as pod objects (no node cache).
    #[serde(default, rename = "nodeToVictims", alias = "NodeNameToVictims")]
    pub node_to_victims: Option<BTreeMap<String, Victims>>,
    /// Victims kube-scheduler found, by node, as UIDs (`nodeCacheCapable: true`).
    #[serde(
        default,
        rename = "nodeNameToMetaVictims",
        alias = "NodeNameToMetaVictims"
    )]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

impl ExtenderPreemptionArgs {
    /// The nodes kube-scheduler would preempt on: HiveD's suggested nodes.
    pub fn node_names(&self) -> Vec<String> {
        let mut out: Vec<String> = (self.node_name_to_meta_victims.iter())
            .flat_map(|m| m.keys().cloned())
            .chain(self.node_to_victims.iter().flat_map(|m| m.keys().cloned()))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// `Victims`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Victims {
    /// The pods.
    #[serde(default, alias = "Pods")]
    pub pods: Vec<Pod>,
    /// PodDisruptionBudget violations.
    #[serde(default, rename = "numPDBViolations", alias = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `MetaVictims`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetaVictims {
    /// The pods, by UID.
    #[serde(default, alias = "Pods")]
    pub pods: Vec<MetaPod>,
    /// PodDisruptionBudget violations.
    #[serde(default, rename = "numPDBViolations", alias = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `MetaPod`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPod {
    /// The pod's UID.
    #[serde(alias = "UID")]
    pub uid: String,
}

/// `ExtenderPreemptionResult`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderPreemptionResult {
    /// The victims to delete, by node.
    #[serde(
        default,
        rename = "nodeNameToMetaVictims",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

/// `ExtenderBindingArgs`.
#[derive(Clone, Debug, Deserialize)]
pub struct ExtenderBindingArgs {
    /// Pod name.
    #[serde(rename = "podName", alias = "PodName")]
    pub pod_name: String,
    /// Pod namespace.
    #[serde(rename = "podNamespace", alias = "PodNamespace")]
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "podUID", alias = "PodUID")]
    pub pod_uid: String,
    /// The node kube-scheduler binds it to.
    #[serde(alias = "Node")]
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// What went wrong, when the bind failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The fields of `v1.ObjectMeta` read here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace (`default` when absent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// UID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The fields of `v1.Pod` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: PodSpec,
    /// Status.
    #[serde(default)]
    pub status: PodStatus,
}

impl Pod {
    /// `namespace/name`, as Kubernetes names a pod in messages.
    pub fn key(&self) -> String {
        let ns = if self.metadata.namespace.is_empty() {
            "default"
        } else {
            &self.metadata.namespace
        };
        format!("{ns}/{}", self.metadata.name)
    }

    /// Whether the pod has ended (its phase is `Succeeded` or `Failed`): to the
    /// scheduler the same as deleted.
    pub fn completed(&self) -> bool {
        matches!(self.status.phase.as_str(), "Succeeded" | "Failed")
    }

    /// The largest limit any container sets on resource `name`, as a number (a
    /// quantity without a suffix), if one does.
    pub fn limit(&self, name: &str) -> Option<f64> {
        (self.spec.containers.iter())
            .filter_map(|c| c.resources.limits.get(name))
            .filter_map(|q| match q {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .reduce(f64::max)
    }
}

/// The fields of `v1.PodSpec` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodSpec {
    /// The node the pod is bound to, once it is.
    #[serde(default, rename = "nodeName")]
    pub node_name: String,
    /// Its containers (for their resource limits).
    #[serde(default)]
    pub containers: Vec<Container>,
}

/// The fields of `v1.Container` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Container {
    /// Requests and limits.
    #[serde(default)]
    pub resources: Resources,
}

/// `v1.ResourceRequirements`: quantities are strings (`"1"`) or numbers.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Resources {
    /// Limits.
    #[serde(default)]
    pub limits: BTreeMap<String, serde_json::Value>,
}

/// The fields of `v1.PodStatus` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default)]
    pub phase: String,
}

/// `v1.PodList`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodList {
    /// The pods.
    #[serde(default)]
    pub items: Vec<Pod>,
}

/// `v1.NodeList`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeList {
    /// The nodes.
    #[serde(default)]
    pub items: Vec<Node>,
}

/// The fields of `v1.Node` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Spec.
    #[serde(default)]
    pub spec: NodeSpec,
    /// Status.
    #[serde(default)]
    pub status: NodeStatus,
}

impl Node {
    /// HiveD's `IsNodeHealthy`: schedulable and `Ready`.
    pub fn healthy(&self) -> bool {
        !self.spec.unschedulable
            && (self.status.conditions.iter()).any(|c| c.kind == "Ready" && c.status == "True")
    }
}

/// The fields of `v1.NodeSpec` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeSpec {
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
}

/// The fields of `v1.NodeStatus` read here.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeStatus {
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<NodeCondition>,
}

/// One `v1.NodeCondition`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeCondition {
    /// `Ready`, `MemoryPressure`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
}

/// `v1.Binding`, the body of `POST .../pods/NAME/binding`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `Binding`.
    pub kind: String,
    /// The pod (name, namespace, UID) and the annotations to set on it.
    pub metadata: ObjectMeta,
    /// The node.
    pub target: ObjectReference,
}

/// `v1.ObjectReference`, as a binding's target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObjectReference {
    /// `Node`.
    pub kind: String,
    /// The node's name.
    pub name: String,
}

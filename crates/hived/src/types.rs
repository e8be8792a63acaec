//! The request and result shapes of HiveD's algorithm calls: the pod scheduling spec,
//! the bind info recorded at bind time (also the recovery record), and decisions.

use serde::{Deserialize, Serialize};

/// HiveD's pod scheduling spec (`hivedscheduler.microsoft.com/pod-scheduling-spec`).
/// The old names `gpuType` and `gpuNumber` are accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// VC name.
    #[serde(default)]
    pub virtual_cluster: String,
    /// -1 opportunistic, 0..=1000 guaranteed.
    #[serde(default)]
    pub priority: i64,
    /// Use this pinned cell of the VC.
    #[serde(default)]
    pub pinned_cell_id: String,
    /// Leaf type; empty means any.
    #[serde(default, alias = "gpuType", alias = "skuType")]
    pub leaf_cell_type: String,
    /// Leaf cells for this pod.
    #[serde(default, alias = "gpuNumber", alias = "skuNumber")]
    pub leaf_cell_number: i64,
    /// The gang; default: a one-pod group named after the pod.
    #[serde(default)]
    pub affinity_group: Option<GroupSpec>,
    /// May be downgraded to opportunistic instead of preempted.
    #[serde(default)]
    pub lazy_preemption_enable: bool,
    /// If false, avoid nodes the caller did not suggest.
    #[serde(default = "yes")]
    pub ignore_k8s_suggested_nodes: bool,
    /// Parsed, unused (as upstream).
    #[serde(default)]
    pub gang_release_enable: bool,
}

fn yes() -> bool {
    true
}

/// `affinityGroup`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSpec {
    /// Group name.
    #[serde(default)]
    pub name: String,
    /// Members by pod size.
    #[serde(default)]
    pub members: Vec<MemberSpec>,
}

/// `{podNumber, leafCellNumber}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberSpec {
    /// Pods of this size.
    #[serde(default)]
    pub pod_number: i64,
    /// Leaf cells per pod.
    #[serde(default, alias = "gpuNumber", alias = "skuNumber")]
    pub leaf_cell_number: i64,
}

/// `hivedscheduler.microsoft.com/pod-bind-info`: where one pod goes and where its whole
/// group went, the record recovery rebuilds state from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindInfo {
    /// This pod's node.
    pub node: String,
    /// This pod's device indices.
    pub leaf_cell_isolation: Vec<i32>,
    /// Chain of the placement.
    pub cell_chain: String,
    /// The whole group, one entry per pod size.
    pub affinity_group_bind_info: Vec<MemberBindInfo>,
}

/// One pod size of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberBindInfo {
    /// One entry per pod slot.
    pub pod_placements: Vec<PodPlacement>,
}

/// One pod slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacement {
    /// Node.
    pub physical_node: String,
    /// Device indices.
    pub physical_leaf_cell_indices: Vec<i32>,
    /// Per leaf: type of the VC preassigned cell it was bound through, `""` if
    /// opportunistic. Absent in records from before this field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preassigned_cell_types: Option<Vec<String>>,
}

/// A pod the decision asks to preempt.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Victim {
    /// Node the pod runs on.
    pub node: String,
    /// Pod name.
    pub pod: String,
}

/// The answer to one `schedule` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Bind the pod here (the caller commits with `add_allocated_pod`).
    Bind(BindInfo),
    /// Delete these pods first (the complete set, sorted by node then pod).
    Preempt(Vec<Victim>),
    /// Nothing fits now.
    Wait(String),
}

/// Which nodes the caller (Kubernetes, or the simulator) suggests. Names are compact
/// strings: kube-scheduler sends every candidate's name with every filter (5,000 on a
/// large cluster), and node names fit inline, with no allocation each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Suggested {
    /// Every node.
    All,
    /// Only these.
    Only(Vec<compact_str::CompactString>),
    /// Every node except these.
    AllExcept(Vec<compact_str::CompactString>),
}

/// The scheduling phase of the Kubernetes extender protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Filter callback: preemption state is not created.
    Filtering,
    /// Preempt callback: preemption state is created and cancelled.
    Preempting,
}

/// An error from an algorithm call. Errors never change state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HivedError {
    /// The request is invalid (HTTP 4xx class).
    #[error("user error: {0}")]
    User(String),
    /// The scheduler's state cannot serve the request (HTTP 5xx class).
    #[error("platform error: {0}")]
    Platform(String),
}

pub(crate) fn user(msg: impl Into<String>) -> HivedError {
    HivedError::User(msg.into())
}

//! A pod's request, validated.

use crate::types::{HivedError, PodSpec, user};
use std::collections::BTreeMap;

/// A validated pod request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub vc: String,
    pub priority: i32,
    pub pinned: String,
    pub leaf_type: String,
    pub size: usize,
    pub group: String,
    /// (size, pod count), ascending by size.
    pub sizes: Vec<(usize, usize)>,
    pub lazy: bool,
    pub ignore_suggested: bool,
}

impl Request {
    pub fn new(pod: &str, s: &PodSpec) -> Result<Request, HivedError> {
        if s.virtual_cluster.is_empty() {
            return Err(user(format!("pod {pod}: virtualCluster is empty")));
        }
        if !(-1..=1000).contains(&s.priority) {
            return Err(user(format!(
                "pod {pod}: priority {} is not in [-1, 1000]",
                s.priority
            )));
        }
        if s.leaf_cell_number <= 0 || s.leaf_cell_number > 1 << 20 {
            return Err(user(format!(
                "pod {pod}: leafCellNumber {} must be positive",
                s.leaf_cell_number
            )));
        }
        let size = s.leaf_cell_number as usize;
        let (group, members) = match &s.affinity_group {
            None => (pod.to_string(), vec![(size, 1usize)]),
            Some(g) => {
                if g.name.is_empty() {
                    return Err(user(format!("pod {pod}: affinityGroup.name is empty")));
                }
                let mut m = Vec::new();
                for (i, x) in g.members.iter().enumerate() {
                    if x.pod_number <= 0 || x.pod_number > 1 << 16 {
                        return Err(user(format!(
                            "pod {pod}: affinityGroup.members[{i}].podNumber {} must be positive",
                            x.pod_number
                        )));
                    }
                    if x.leaf_cell_number <= 0 || x.leaf_cell_number > 1 << 20 {
                        return Err(user(format!(
                            "pod {pod}: affinityGroup.members[{i}].leafCellNumber {} must be positive",
                            x.leaf_cell_number
                        )));
                    }
                    m.push((x.leaf_cell_number as usize, x.pod_number as usize));
                }
                (g.name.clone(), m)
            }
        };
        let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for (s, n) in members {
            *sizes.entry(s).or_default() += n;
        }
        if !sizes.contains_key(&size) {
            return Err(user(format!(
                "pod {pod}: leafCellNumber {size} matches no member of affinity group {group}"
            )));
        }
        Ok(Request {
            vc: s.virtual_cluster.clone(),
            priority: s.priority as i32,
            pinned: s.pinned_cell_id.clone(),
            leaf_type: s.leaf_cell_type.clone(),
            size,
            group,
            sizes: sizes.into_iter().collect(),
            lazy: s.lazy_preemption_enable,
            ignore_suggested: s.ignore_k8s_suggested_nodes,
        })
    }
}

//! A pod's request, validated.

use crate::types::{HivedError, PodSpec, user};

/// A validated pod request, borrowing its names from the pod and its spec (a decision
/// reads it several times per pod; owned copies were a tenth of a decision's cost).
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub vc: &'a str,
    pub priority: i32,
    pub pinned: &'a str,
    pub leaf_type: &'a str,
    pub size: usize,
    pub group: &'a str,
    /// (size, pod count), ascending by size.
    pub sizes: Vec<(usize, usize)>,
    pub lazy: bool,
    pub ignore_suggested: bool,
}

impl<'a> Request<'a> {
    pub fn new(pod: &'a str, s: &'a PodSpec) -> Result<Request<'a>, HivedError> {
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
            None => (pod, vec![(size, 1usize)]),
            Some(g) => {
                if g.name.is_empty() {
                    return Err(user(format!("pod {pod}: affinityGroup.name is empty")));
                }
                let mut m = Vec::with_capacity(g.members.len());
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
                (g.name.as_str(), m)
            }
        };
        // Pod counts summed per size, ascending by size.
        let mut sizes = members;
        sizes.sort_unstable_by_key(|&(s, _)| s);
        sizes.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 += later.1;
            }
            same
        });
        if !sizes.iter().any(|&(s, _)| s == size) {
            return Err(user(format!(
                "pod {pod}: leafCellNumber {size} matches no member of affinity group {group}"
            )));
        }
        Ok(Request {
            vc: &s.virtual_cluster,
            priority: s.priority as i32,
            pinned: &s.pinned_cell_id,
            leaf_type: &s.leaf_cell_type,
            size,
            group,
            sizes,
            lazy: s.lazy_preemption_enable,
            ignore_suggested: s.ignore_k8s_suggested_nodes,
        })
    }
}

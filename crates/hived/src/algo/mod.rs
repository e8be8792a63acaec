//! HiveD's algorithm: buddy cell allocation, lazy virtual-to-physical binding with the
//! safety check, priorities and stateful preemption, lazy preemption, bad hardware and
//! doomed cells, and recovery from bind info.
//!
//! The structure follows upstream `pkg/algorithm` call for call, because exact placements
//! depend on list orders (free lists swap-remove, node views re-sort stably with Go's
//! algorithm). Where upstream panics or corrupts state (hived.md §13) we keep the state
//! consistent instead; those places say so.

use foldhash::fast::FixedState;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::cells::{Built, Chain, FREE, PCell, VCell, Vc};
use crate::config::{Config, ConfigError};

mod bind;
mod buddy;
mod groups;
mod health;
mod recover;
mod request;
mod schedule;
mod topo;

use request::Request;
use topo::new_view;

/// A hash map with a fixed seed, for the lookups a decision makes (nothing iterates
/// one in an order that shows).
pub(crate) type Map<K, V> = HashMap<K, V, FixedState>;

/// A group's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GroupState {
    /// Bound and running.
    Allocated,
    /// Holds reservations, waits for its victims to go.
    Preempting,
    /// Some of its cells are reserved by a preemptor.
    BeingPreempted,
}

/// Per size class -> pod slot -> leaf.
pub(crate) type Placement = Vec<Vec<Vec<Option<usize>>>>;

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub name: String,
    pub vc: usize,
    pub priority: i32,
    pub lazy_enable: bool,
    pub ignore_suggested: bool,
    /// Pod sizes, ascending.
    pub sizes: Vec<usize>,
    pub phys: Placement,
    pub virt: Option<Placement>,
    /// Per size class -> slot -> (pod, node id).
    pub allocated: Vec<Vec<Option<(String, String)>>>,
    pub preempting: BTreeSet<String>,
    pub state: GroupState,
    pub lazy: Option<(String, i64)>,
}

impl Group {
    fn size_index(&self, size: usize) -> Option<usize> {
        self.sizes.iter().position(|&s| s == size)
    }
    pub(crate) fn leaves(&self) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
        self.phys.iter().enumerate().flat_map(|(si, pods)| {
            pods.iter().enumerate().flat_map(move |(pi, leaves)| {
                leaves
                    .iter()
                    .enumerate()
                    .filter_map(move |(li, l)| l.map(|l| (si, pi, li, l)))
            })
        })
    }
}

/// The order in which buddy allocation and cell mapping try usable physical cells.
///
/// Upstream's `getUsablePhysicalCells` means to put cells with fewer opportunistic pods
/// first ("to reduce preemption"), but sorts its input list in place and returns the
/// usable cells in their original order, so the preference shows only on later calls.
/// The feature README's lazy preemption demo needs the preference on the same call: with
/// the list order, the preemptor of a lazily preempted group is mapped straight back onto
/// the victim's freed node and preempts it (`testdata/hived/feature-lazy-preemption*.txt`
/// replay both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UsableOrder {
    /// Fewer opportunistic pods first, as documented and as the demos show.
    #[default]
    FewerOpportunistic,
    /// Upstream's code: the list's own order (the list is still re-sorted for later
    /// calls).
    ListOrder,
}

/// The scheduler state. See the crate docs for the calling contract.
#[derive(Debug, Clone)]
pub struct Hived {
    pub(crate) config: Config,
    pub(crate) chains: Vec<Chain>,
    pub(crate) pcells: Vec<PCell>,
    pub(crate) vcells: Vec<VCell>,
    pub(crate) vcs: Vec<Vc>,
    pub(crate) nodes: Vec<String>,
    pub(crate) node_ids: Map<String, usize>,
    pub(crate) node_leaves: Vec<Vec<usize>>,
    pub(crate) leaf_chains: BTreeMap<String, Vec<usize>>,
    pub(crate) chain_ids: BTreeMap<String, usize>,
    pub(crate) free: Vec<Vec<Vec<usize>>>,
    /// Scratch: a decision's copy of one chain's free lists.
    pub(crate) free_copy: Vec<Vec<usize>>,
    /// Scratch: a decision's node infos.
    pub(crate) node_infos: Vec<topo::NodeInfo>,
    pub(crate) vc_free: Vec<Vec<Vec<i64>>>,
    pub(crate) all_vc_free: Vec<Vec<i64>>,
    pub(crate) total_left: Vec<Vec<i64>>,
    pub(crate) bad_free: Vec<Vec<Vec<usize>>>,
    pub(crate) vc_doomed: Vec<Vec<Vec<Vec<usize>>>>,
    pub(crate) all_vc_doomed: Vec<Vec<i64>>,
    pub(crate) bad_nodes: Vec<bool>,
    pub(crate) opp_views: Vec<Vec<usize>>,
    pub(crate) groups: Vec<Option<Group>>,
    /// The empty slots of `groups`: a new group takes the lowest.
    pub(crate) free_groups: BTreeSet<usize>,
    /// Removed groups whose vectors the next groups reuse.
    pub(crate) group_pool: Vec<Group>,
    /// Leaves in opportunistic use.
    pub(crate) opportunistic_leaves: i64,
    /// Groups by name, hashed with a fixed seed (read per pod several times; nothing
    /// iterates it without sorting the names).
    pub(crate) group_ids: Map<String, usize>,
    pub(crate) now: i64,
    pub(crate) usable_order: UsableOrder,
    /// Set while a recovered group is allocated: no new doomed cells are forecast until
    /// all its leaves are in place (see `release_all_doomed`).
    pub(crate) forecast_paused: bool,
}

trait TreeCell {
    fn parent(&self) -> Option<usize>;
    fn children(&self) -> &[usize];
    fn prio(&self) -> i32;
    fn set_prio(&mut self, p: i32);
    fn used_mut(&mut self) -> &mut crate::cells::Used;
}

macro_rules! tree_cell {
    ($t:ty) => {
        impl TreeCell for $t {
            fn parent(&self) -> Option<usize> {
                self.parent
            }
            fn children(&self) -> &[usize] {
                &self.children
            }
            fn prio(&self) -> i32 {
                self.priority
            }
            fn set_prio(&mut self, p: i32) {
                self.priority = p;
            }
            fn used_mut(&mut self) -> &mut crate::cells::Used {
                &mut self.used
            }
        }
    };
}
tree_cell!(PCell);
tree_cell!(VCell);

/// Priority of a cell = max of its children's; propagates upward.
fn set_priority<T: TreeCell>(cells: &mut [T], mut c: usize, mut p: i32) {
    loop {
        let original = cells[c].prio();
        cells[c].set_prio(p);
        let Some(parent) = cells[c].parent() else {
            return;
        };
        let pp = cells[parent].prio();
        if p > pp {
            c = parent;
        } else if original == pp && p < original {
            let max = cells[parent]
                .children()
                .iter()
                .map(|&b| cells[b].prio())
                .max()
                .unwrap_or(FREE)
                .max(FREE);
            c = parent;
            p = max;
        } else {
            return;
        }
    }
}

fn update_used<T: TreeCell>(cells: &mut [T], c: usize, p: i32, delta: i64) {
    let mut cur = Some(c);
    while let Some(x) = cur {
        cells[x].used_mut().add(p, delta);
        cur = cells[x].parent();
    }
}

fn swap_remove(list: &mut Vec<usize>, c: usize) -> bool {
    if let Some(i) = list.iter().position(|&x| x == c) {
        list.swap_remove(i);
        true
    } else {
        false
    }
}

/// A vertex of a binding path: a virtual cell to bind and its children to bind.
#[derive(Debug, Clone)]
pub(crate) struct PathVertex {
    pub cell: usize,
    pub children: Vec<PathVertex>,
}

/// Where a candidate list for cell mapping lives.
#[derive(Clone, Copy)]
enum ListRef {
    /// The scratch free list at a level.
    Free(usize),
    /// Children of a physical cell.
    Children(usize),
}

pub(crate) struct Ctx<'a> {
    pub suggested: &'a [bool],
    pub ignore: bool,
}

impl Ctx<'_> {
    pub(crate) fn node_ok(&self, n: usize) -> bool {
        self.ignore || self.suggested.get(n).copied().unwrap_or(false)
    }
}

impl Hived {
    /// Builds the scheduler from a config. Every node starts bad, as upstream (Kubernetes
    /// then reports the healthy ones); use [`Hived::with_all_nodes_healthy`] to mark them
    /// healthy in config order.
    pub fn new(config: &Config) -> Result<Hived, ConfigError> {
        let b = Built::from_config(config)?;
        let nchains = b.chains.len();
        let nvcs = b.vcs.len();
        let levels = |c: &Chain| vec![0i64; c.top + 1];
        let mut h = Hived {
            config: config.clone(),
            free: b
                .chains
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut l = vec![Vec::new(); c.top + 1];
                    l[c.top] = b.tops[i].clone();
                    l
                })
                .collect(),
            all_vc_free: b.chains.iter().map(levels).collect(),
            total_left: b.chains.iter().map(levels).collect(),
            bad_free: b
                .chains
                .iter()
                .map(|c| vec![Vec::new(); c.top + 1])
                .collect(),
            vc_doomed: (0..nvcs)
                .map(|_| {
                    b.chains
                        .iter()
                        .map(|c| vec![Vec::new(); c.top + 1])
                        .collect()
                })
                .collect(),
            all_vc_doomed: b.chains.iter().map(levels).collect(),
            bad_nodes: vec![false; b.nodes.len()],
            opp_views: Vec::new(),
            groups: Vec::new(),
            free_copy: Vec::new(),
            node_infos: Vec::new(),
            free_groups: BTreeSet::new(),
            group_pool: Vec::new(),
            opportunistic_leaves: 0,
            group_ids: HashMap::default(),
            now: 0,
            usable_order: UsableOrder::default(),
            forecast_paused: false,
            vc_free: b.vc_free,
            chains: b.chains,
            pcells: b.pcells,
            vcells: b.vcells,
            vcs: b.vcs,
            nodes: b.nodes,
            node_ids: b.node_ids.into_iter().collect(),
            node_leaves: b.node_leaves,
            leaf_chains: b.leaf_chains,
            chain_ids: b.chain_ids,
        };
        // The start-up safety check (hived.md §5.1) ran before the virtual cells were
        // built (cells.rs); here the VCs' needs are summed for the doomed-cell check.
        for vcf in &h.vc_free {
            for (c, levels) in vcf.iter().enumerate() {
                for (l, n) in levels.iter().enumerate() {
                    h.all_vc_free[c][l] += n;
                }
            }
        }
        for c in 0..nchains {
            let top = h.chains[c].top;
            h.total_left[c][top] = h.free[c][top].len() as i64;
            for l in (2..=top).rev() {
                h.total_left[c][l - 1] = h.total_left[c][l] * h.chains[c].level_fanout[l] as i64;
            }
        }
        // Views.
        h.opp_views = (0..nchains)
            .map(|c| {
                new_view(
                    &h.chains[c].full,
                    |x| h.pcells[x].parent,
                    |x| h.node_level_or_above_p(x),
                )
            })
            .collect();
        for vi in 0..h.vcs.len() {
            let chains: Vec<usize> = h.vcs[vi].chains.keys().copied().collect();
            for c in chains {
                let view = new_view(
                    &h.vcs[vi].chains[&c].full,
                    |x| h.vcells[x].parent,
                    |x| h.chains[h.vcells[x].chain].level_at_or_above_node[h.vcells[x].level],
                );
                h.vcs[vi].chains.get_mut(&c).expect("chain").view = view;
            }
            let pins: Vec<String> = h.vcs[vi].pinned.keys().cloned().collect();
            for pid in pins {
                let view = new_view(
                    &h.vcs[vi].pinned[&pid].0.full,
                    |x| h.vcells[x].parent,
                    |x| h.chains[h.vcells[x].chain].level_at_or_above_node[h.vcells[x].level],
                );
                h.vcs[vi].pinned.get_mut(&pid).expect("pin").0.view = view;
            }
        }
        // Pinned cells are bound statically.
        for (vc, _pid, pc, root) in b.pinned {
            let _ = h.allocate_preassigned(pc, vc, false);
            h.bind(pc, root);
        }
        for n in 0..h.nodes.len() {
            h.set_node_bad_id(n);
        }
        Ok(h)
    }

    /// [`Hived::new`], then every node reported healthy in config order.
    pub fn with_all_nodes_healthy(config: &Config) -> Result<Hived, ConfigError> {
        let mut h = Hived::new(config)?;
        for n in 0..h.nodes.len() {
            h.set_node_healthy_id(n);
        }
        Ok(h)
    }

    /// The config this state was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Node names in config order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Chooses the order usable physical cells are tried in (see [`UsableOrder`]).
    pub fn set_usable_order(&mut self, order: UsableOrder) {
        self.usable_order = order;
    }

    /// Sets the clock used to stamp lazy preemptions (ms, simulated or wall).
    pub fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    fn node_level_or_above_p(&self, x: usize) -> bool {
        self.chains[self.pcells[x].chain].level_at_or_above_node[self.pcells[x].level]
    }

    pub(crate) fn group(&self, g: usize) -> &Group {
        self.groups[g].as_ref().expect("live group")
    }
    pub(crate) fn group_mut(&mut self, g: usize) -> &mut Group {
        self.groups[g].as_mut().expect("live group")
    }
}

//! Shared by the property tests: random small topologies.

use apiary_comm::{Frac, Topology, TopologyBuilder, TopologyError};

/// `nodes` nodes, the first `compute` of them GPUs, the rest switches. Each link
/// `(u, v, a, b)` gives `u → v` bandwidth `a + 1` and `v → u` bandwidth `b + 1`; links
/// touching a switch use `a + 1` both ways so switches stay balanced. `None` when the
/// GPUs are not all connected.
pub fn random_topology(
    nodes: usize,
    compute: usize,
    links: &[(usize, usize, u8, u8)],
) -> Option<Topology> {
    let mut b = TopologyBuilder::new("random");
    let ids: Vec<u32> = (0..nodes)
        .map(|i| {
            if i < compute {
                b.compute(&format!("g{i}"))
            } else {
                b.switch(&format!("s{i}"))
            }
        })
        .collect();
    for &(u, v, c1, c2) in links {
        let (u, v) = (u % nodes, v % nodes);
        if u == v {
            continue;
        }
        let (c1, c2) = (Frac::int(c1 as u128 + 1), Frac::int(c2 as u128 + 1));
        if u >= compute || v >= compute {
            b.link(ids[u], ids[v], c1);
        } else {
            b.arc(ids[u], ids[v], c1);
            b.arc(ids[v], ids[u], c2);
        }
    }
    match b.build() {
        Ok(t) => Some(t),
        Err(TopologyError::Disconnected { .. }) => None,
        Err(e) => panic!("unexpected: {e}"),
    }
}

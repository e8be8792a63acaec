//! Built-in topologies (collectives.md §2.3–2.4), named by a short string such as
//! `dgx-h100:2` or `torus:3x3`. One table lists them for `apiary comm presets` and the
//! docs.

use crate::closed::BoxShape;
use crate::frac::Frac;
use crate::topology::{Topology, TopologyBuilder, TopologyError};

/// A preset family: its syntax and what it builds.
pub struct Preset {
    /// Syntax, e.g. `ring:N[:BW]`.
    pub syntax: &'static str,
    /// One-line description.
    pub about: &'static str,
}

/// Every preset family, in the order `apiary comm presets` lists them.
pub const PRESETS: &[Preset] = &[
    Preset {
        syntax: "ring:N[:BW]",
        about: "unidirectional ring of N GPUs, BW GB/s per link (default 1)",
    },
    Preset {
        syntax: "bring:N[:BW]",
        about: "bidirectional ring of N GPUs, BW GB/s each way (default 1)",
    },
    Preset {
        syntax: "complete:N[:BW]",
        about: "every GPU linked to every other, BW GB/s each way (default 1)",
    },
    Preset {
        syntax: "star:N[:BW]",
        about: "N GPUs on one switch, BW GB/s each way (default 1)",
    },
    Preset {
        syntax: "torus:RxC[:BW]",
        about: "R×C 2-D torus, BW GB/s each way (default 1)",
    },
    Preset {
        syntax: "triangle",
        about: "three GPUs, a–b 2, b–c 1, a–c 1 (heterogeneous links)",
    },
    Preset {
        syntax: "leaf-spine:L:G:DOWN:UP",
        about: "L leaf switches of G GPUs (GPU–leaf DOWN GB/s) under one spine (leaf–spine UP GB/s)",
    },
    Preset {
        syntax: "dgx1[:BW]",
        about: "DGX-1 V100 hybrid cube-mesh, BW GB/s per NVLink (default 25)",
    },
    Preset {
        syntax: "dgx-a100:N[:FABRIC]",
        about: "N DGX A100 boxes: NVSwitch 300 GB/s per GPU, one 25 GB/s NIC per GPU (fabric default rails2, as ForestColl's model)",
    },
    Preset {
        syntax: "dgx-h100:N[:FABRIC]",
        about: "N DGX H100 boxes: NVSwitch 450 GB/s per GPU, one 50 GB/s NIC per GPU (fabric default rails)",
    },
    Preset {
        syntax: "dgx:N:G:NV:NIC[:FABRIC]",
        about: "N boxes of G GPUs, NVSwitch NV GB/s per GPU, one NIC of NIC GB/s per GPU",
    },
    Preset {
        syntax: "mi250:N",
        about: "N AMD MI250 boxes (16 GCDs, xGMI 50 GB/s per link, ForestColl's link matrix), 16 GB/s per GCD to one IB switch",
    },
];

/// Fabric choices for the box presets (`FABRIC` above).
pub const FABRICS: &str = "rails (one switch per GPU index), rails2 (odd/even GPUs on two switches), single (one switch), leafK (a leaf switch per K boxes under one spine, full bisection), leafK/O (the same, uplinks oversubscribed O:1)";

fn bad(name: &str, why: &str) -> TopologyError {
    TopologyError::Syntax {
        at: format!("preset '{name}'"),
        msg: format!("{why}; `apiary comm presets` lists the presets"),
    }
}

fn num(name: &str, s: &str, what: &str) -> Result<u32, TopologyError> {
    s.parse::<u32>()
        .ok()
        .filter(|&v| v > 0 && v <= 4096)
        .ok_or_else(|| bad(name, &format!("{what} '{s}' is not a count in 1..=4096")))
}

fn bw(name: &str, s: Option<&str>, default: u32) -> Result<Frac, TopologyError> {
    match s {
        None => Ok(Frac::int(default as u128)),
        Some(s) => Frac::parse_decimal(s)
            .filter(|f| *f > Frac::ZERO)
            .ok_or_else(|| bad(name, &format!("bandwidth '{s}' is not a positive decimal"))),
    }
}

/// Builds the preset `spec` (e.g. `dgx-a100:2`).
pub fn preset(spec: &str) -> Result<Topology, TopologyError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let arg = |i: usize| parts.get(i).copied();
    let need = |i: usize, what: &str| arg(i).ok_or_else(|| bad(spec, &format!("missing {what}")));
    let t = match parts[0] {
        "ring" | "bring" | "complete" | "star" => {
            let n = num(spec, need(1, "N")?, "N")?;
            let b = bw(spec, arg(2), 1)?;
            match parts[0] {
                "ring" => ring(spec, n, b, false),
                "bring" => ring(spec, n, b, true),
                "complete" => complete(spec, n, b),
                _ => star(spec, n, b),
            }
        }
        "torus" => {
            let (r, c) = need(1, "RxC")?
                .split_once('x')
                .ok_or_else(|| bad(spec, "torus size must be RxC"))?;
            torus(
                spec,
                num(spec, r, "R")?,
                num(spec, c, "C")?,
                bw(spec, arg(2), 1)?,
            )
        }
        "triangle" => triangle(spec),
        "leaf-spine" => leaf_spine(
            spec,
            num(spec, need(1, "L")?, "L")?,
            num(spec, need(2, "G")?, "G")?,
            bw(spec, Some(need(3, "DOWN")?), 0)?,
            bw(spec, Some(need(4, "UP")?), 0)?,
        ),
        "dgx1" => dgx1(spec, bw(spec, arg(1), 25)?),
        "dgx-a100" | "dgx-h100" => {
            let n = num(spec, need(1, "N")?, "N")?;
            let (nv, nic, fabric) = if parts[0] == "dgx-a100" {
                (300, 25, arg(2).unwrap_or("rails2"))
            } else {
                (450, 50, arg(2).unwrap_or("rails"))
            };
            boxes(spec, n, 8, Frac::int(nv), Frac::int(nic), fabric)?
        }
        "dgx" => boxes(
            spec,
            num(spec, need(1, "N")?, "N")?,
            num(spec, need(2, "G")?, "G")?,
            bw(spec, Some(need(3, "NV")?), 0)?,
            bw(spec, Some(need(4, "NIC")?), 0)?,
            arg(5).unwrap_or("rails"),
        )?,
        "mi250" => mi250(spec, num(spec, need(1, "N")?, "N")?),
        _ => return Err(bad(spec, "unknown preset")),
    };
    t.build()
}

fn gpus(b: &mut TopologyBuilder, n: u32) -> Vec<u32> {
    (0..n).map(|i| b.compute(&format!("gpu{i}"))).collect()
}

fn ring(name: &str, n: u32, bw: Frac, both: bool) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let g = gpus(&mut b, n);
    for i in 0..n as usize {
        let j = (i + 1) % n as usize;
        if i == j || (both && n == 2 && i == 1) {
            continue;
        }
        if both {
            b.link(g[i], g[j], bw);
        } else {
            b.arc(g[i], g[j], bw);
        }
    }
    b
}

fn complete(name: &str, n: u32, bw: Frac) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let g = gpus(&mut b, n);
    for i in 0..g.len() {
        for j in i + 1..g.len() {
            b.link(g[i], g[j], bw);
        }
    }
    b
}

fn star(name: &str, n: u32, bw: Frac) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let g = gpus(&mut b, n);
    let s = b.switch("switch");
    for &x in &g {
        b.link(x, s, bw);
    }
    b.shape(BoxShape {
        boxes: 1,
        gpus: n,
        intra: bw,
        nic: Frac::ZERO,
    });
    b
}

fn torus(name: &str, r: u32, c: u32, bw: Frac) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let g = gpus(&mut b, r * c);
    let at = |i: u32, j: u32| g[(i % r * c + j % c) as usize];
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..r {
        for j in 0..c {
            for (a, z) in [(at(i, j), at(i, j + 1)), (at(i, j), at(i + 1, j))] {
                // Small tori wrap onto the same neighbour twice; that is one link.
                if a != z && seen.insert((a.min(z), a.max(z))) {
                    b.link(a, z, bw);
                }
            }
        }
    }
    b
}

fn triangle(name: &str) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let (a, x, c) = (b.compute("a"), b.compute("b"), b.compute("c"));
    b.link(a, x, Frac::int(2));
    b.link(x, c, Frac::int(1));
    b.link(a, c, Frac::int(1));
    b
}

fn leaf_spine(name: &str, leaves: u32, per: u32, down: Frac, up: Frac) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let spine = b.switch("spine");
    for l in 0..leaves {
        let leaf = b.switch(&format!("leaf{l}"));
        b.link(leaf, spine, up);
        for i in 0..per {
            let g = b.compute(&format!("l{l}.gpu{i}"));
            b.link(g, leaf, down);
        }
    }
    b
}

/// DGX-1's NVLink counts between its eight V100s (hybrid cube-mesh; six links per GPU).
const DGX1_LINKS: [[u8; 8]; 8] = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
];

fn dgx1(name: &str, bw: Frac) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let g = gpus(&mut b, 8);
    for i in 0..8 {
        for j in i + 1..8 {
            let l = DGX1_LINKS[i][j];
            if l > 0 {
                b.link(g[i], g[j], bw.times(Frac::int(l as u128)));
            }
        }
    }
    b
}

/// Boxes of `g` GPUs on an NVSwitch, each GPU with its own NIC, joined by `fabric`.
pub(crate) fn boxes(
    name: &str,
    n: u32,
    g: u32,
    nv: Frac,
    nic: Frac,
    fabric: &str,
) -> Result<TopologyBuilder, TopologyError> {
    let mut b = TopologyBuilder::new(name);
    let mut nics = Vec::new();
    for x in 0..n {
        let nvs = b.switch(&format!("b{x}.nvswitch"));
        for i in 0..g {
            let gpu = b.compute(&format!("b{x}.gpu{i}"));
            b.link(gpu, nvs, nv);
            if n > 1 {
                let card = b.switch(&format!("b{x}.nic{i}"));
                b.link(gpu, card, nic);
                nics.push((x, i, card));
            }
        }
    }
    if n > 1 {
        fabric_switches(&mut b, name, &nics, n, g, nic, fabric)?;
    }
    b.shape(BoxShape {
        boxes: n,
        gpus: g,
        intra: nv,
        nic,
    });
    Ok(b)
}

fn fabric_switches(
    b: &mut TopologyBuilder,
    name: &str,
    nics: &[(u32, u32, u32)],
    n: u32,
    g: u32,
    nic: Frac,
    fabric: &str,
) -> Result<(), TopologyError> {
    match fabric {
        "rails" | "rails2" => {
            let count = if fabric == "rails" { g } else { 2.min(g) };
            let rails: Vec<u32> = (0..count).map(|r| b.switch(&format!("rail{r}"))).collect();
            for &(_, i, card) in nics {
                b.link(card, rails[(i % count) as usize], nic);
            }
        }
        "single" => {
            let s = b.switch("fabric");
            for &(_, _, card) in nics {
                b.link(card, s, nic);
            }
        }
        leaf if leaf.starts_with("leaf") => {
            let rest = &leaf[4..];
            let (per, over) = match rest.split_once('/') {
                Some((k, o)) => (k, Some(o)),
                None => (rest, None),
            };
            let per = num(name, per, "boxes per leaf")?;
            let over = match over {
                Some(o) => Frac::parse_decimal(o)
                    .filter(|f| *f >= Frac::int(1))
                    .ok_or_else(|| bad(name, "oversubscription must be a decimal >= 1"))?,
                None => Frac::int(1),
            };
            let spine = b.switch("spine");
            let leaves = n.div_ceil(per);
            for l in 0..leaves {
                let leaf = b.switch(&format!("leaf{l}"));
                let boxes_here = per.min(n - l * per);
                let down = nic.times(Frac::int((boxes_here * g) as u128));
                b.link(leaf, spine, down.over(over));
                for &(x, _, card) in nics.iter().filter(|c| c.0 / per == l) {
                    let _ = x;
                    b.link(card, leaf, nic);
                }
            }
        }
        _ => {
            return Err(bad(
                name,
                &format!("unknown fabric '{fabric}' (one of: {FABRICS})"),
            ));
        }
    }
    Ok(())
}

/// xGMI link counts between the 16 GCDs of an MI250 box, as in ForestColl's model.
const MI250_LINKS: [[u8; 16]; 16] = [
    [0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    [2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0],
    [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2],
    [0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0],
];

fn mi250(name: &str, n: u32) -> TopologyBuilder {
    let mut b = TopologyBuilder::new(name);
    let ib = (n > 1).then(|| b.switch("ib"));
    for x in 0..n {
        let g: Vec<u32> = (0..16)
            .map(|i| b.compute(&format!("b{x}.gcd{i}")))
            .collect();
        for i in 0..16 {
            for j in i + 1..16 {
                let l = MI250_LINKS[i][j];
                if l > 0 {
                    b.link(g[i], g[j], Frac::int(50 * l as u128));
                }
            }
            if let Some(ib) = ib {
                b.link(g[i], ib, Frac::int(16));
            }
        }
    }
    b
}

//! NCCL graph XML (`NCCL_GRAPH_FILE`, collectives.md §3.4): makes unmodified NCCL take
//! its ring channels from a file instead of its own search.
//!
//! A graph file can only say, per channel, in which order one node's GPUs form a chain
//! (framed by the NICs it enters and leaves), so it cannot carry ForestColl's trees.
//! It is emitted only where a ring reaches the optimum: one box of GPUs on a switch,
//! where the ring's allreduce time, `2(N−1)/N · S/B`, is the bound `2·x*/N · S` with
//! `x* = (N−1)/B`. Elsewhere [`ring_graph`] says why and points to MSCCL XML.

use crate::frac::Frac;
use crate::optimum::{Bandwidths, Collective};
use crate::topology::Topology;

/// Why a topology gets no NCCL graph file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// The topology is not a single box (or declares no shape).
    #[error(
        "{0}: a ring reaches the optimum only within one box of GPUs on a switch; NCCL graph files cannot express ForestColl's trees (use --emit-msccl)"
    )]
    NotOneBox(String),
    /// One box, but the ring falls short of the optimum (uneven links).
    #[error(
        "{name}: the ring reaches {ring} GB/s of the optimal {optimum} GB/s allreduce bandwidth; use --emit-msccl"
    )]
    RingShort {
        /// The topology.
        name: String,
        /// Ring allreduce algbw.
        ring: String,
        /// Optimal allreduce algbw.
        optimum: String,
    },
    /// No channels asked for.
    #[error("channels must be 1..=64, got {0}")]
    Channels(u32),
}

/// The ring graph of a one-box topology with `channels` channels, each a ring over the
/// GPUs in index order, rotated by its channel number so every GPU starts one.
pub fn ring_graph(t: &Topology, channels: u32) -> Result<String, GraphError> {
    if !(1..=64).contains(&channels) {
        return Err(GraphError::Channels(channels));
    }
    let shape = match t.shape() {
        Some(s) if s.boxes == 1 && s.gpus as usize == t.n() => s,
        _ => return Err(GraphError::NotOneBox(t.name().to_string())),
    };
    let n = t.n() as u128;
    // Ring: each rank sends 2(N−1)/N of the buffer through its link of B GB/s.
    let ring_s_per_gb = Frac::new(2 * (n - 1), n).over(shape.intra);
    let optimum = Bandwidths::of(t).seconds_per_gb(Collective::Allreduce, t.n());
    if ring_s_per_gb != optimum {
        return Err(GraphError::RingShort {
            name: t.name().to_string(),
            ring: format!("{:.1}", 1.0 / ring_s_per_gb.to_f64()),
            optimum: format!("{:.1}", 1.0 / optimum.to_f64()),
        });
    }
    // NCCL reads `speedintra` as GB/s per channel; PCIe-class links are PIX.
    let per_channel = shape.intra.to_f64() / channels as f64;
    let typeintra = if shape.intra > Frac::int(32) {
        "NVL"
    } else {
        "PIX"
    };
    let mut x = String::from("<graphs version=\"1\">\n");
    x += &format!(
        "  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"{channels}\" speedintra=\"{per_channel}\" speedinter=\"{per_channel}\" latencyinter=\"0\" typeintra=\"{typeintra}\" typeinter=\"PIX\" samechannels=\"0\">\n"
    );
    for c in 0..channels {
        x += "    <channel>\n";
        for i in 0..t.n() as u32 {
            // NCCL reads `dev` in hexadecimal (2.19 on; decimal before, the same below 10).
            x += &format!("      <gpu dev=\"{:x}\"/>\n", (i + c) % t.n() as u32);
        }
        x += "    </channel>\n";
    }
    x += "  </graph>\n</graphs>\n";
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset;

    #[test]
    fn one_box_gets_rotated_rings() {
        let t = preset("dgx-h100:1").unwrap();
        let x = ring_graph(&t, 2).unwrap();
        assert!(x.starts_with("<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"2\" speedintra=\"225\""));
        assert!(x.contains("typeintra=\"NVL\""));
        assert_eq!(x.matches("<channel>").count(), 2);
        assert_eq!(x.matches("<gpu dev=").count(), 16);
        let second = x.split("<channel>").nth(2).unwrap();
        assert!(second.trim_start().starts_with("<gpu dev=\"1\"/>"));
    }

    #[test]
    fn elsewhere_it_says_why() {
        let e = ring_graph(&preset("dgx-a100:2").unwrap(), 8).unwrap_err();
        assert!(matches!(e, GraphError::NotOneBox(_)));
        assert!(e.to_string().contains("use --emit-msccl"));
        assert!(matches!(
            ring_graph(&preset("ring:4").unwrap(), 8),
            Err(GraphError::NotOneBox(_))
        ));
        assert_eq!(
            ring_graph(&preset("dgx-h100:1").unwrap(), 0),
            Err(GraphError::Channels(0))
        );
    }
}

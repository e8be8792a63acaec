//! The max-flow optimum against brute-force cut enumeration on random small graphs, and
//! bad topology input.

mod common;

use apiary_comm::{Frac, Topology, optimum};
use common::random_topology;
use proptest::prelude::*;

/// `max |S ∩ Vc| / B⁺(S)` over every vertex set holding some compute nodes but not all.
fn brute_force(t: &Topology) -> Frac {
    let n = t.nodes().len();
    let is_compute: Vec<bool> = (0..n).map(|i| t.compute().contains(&(i as u32))).collect();
    let mut best = Frac::ZERO;
    for mask in 1u32..(1 << n) - 1 {
        let inside = (0..n)
            .filter(|&i| mask >> i & 1 == 1 && is_compute[i])
            .count();
        if inside == 0 || inside == t.n() {
            continue;
        }
        let out: u64 = t
            .edges()
            .iter()
            .filter(|e| mask >> e.from & 1 == 1 && mask >> e.to & 1 == 0)
            .map(|e| e.cap)
            .sum();
        let r = Frac::new(inside as u128, out as u128).over(t.unit());
        best = best.max(r);
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn newton_optimum_equals_brute_force(
        nodes in 3usize..=9,
        compute in 2usize..=6,
        links in proptest::collection::vec((0usize..9, 0usize..9, 0u8..6, 0u8..6), 2..18),
    ) {
        let compute = compute.min(nodes);
        let Some(t) = random_topology(nodes, compute, &links) else {
            return Ok(());
        };
        let o = optimum(&t);
        prop_assert_eq!(o.x_star, brute_force(&t));
        // The returned cut attains it.
        let side: Vec<bool> = (0..t.nodes().len() as u32).map(|i| o.cut.contains(&i)).collect();
        let inside = t.compute().iter().filter(|&&c| side[c as usize]).count() as u128;
        let out: u64 = t.edges().iter().filter(|e| side[e.from as usize] && !side[e.to as usize]).map(|e| e.cap).sum();
        prop_assert_eq!(Frac::new(inside, out as u128).over(t.unit()), o.x_star);
        prop_assert_eq!(o.u.over(Frac::int(o.k as u128)), o.x_star);
    }
}

fn err(text: &str) -> String {
    Topology::parse(text, "topo.json").unwrap_err().to_string()
}

#[test]
fn bad_input_names_the_file_line_and_field() {
    let unknown = "{\n \"compute\": [\"a\", \"b\"],\n \"links\": [\n  {\"from\": \"a\", \"to\": \"b\", \"bw\": 1},\n  {\"from\": \"b\", \"to\": \"zz\", \"bw\": 1}\n ]\n}";
    assert_eq!(
        err(unknown),
        "topo.json:5: links[1].to: unknown node 'zz' (declare it under `compute` or `switches`)"
    );
    let negative = r#"{"compute": ["a", "b"], "links": [{"from": "a", "to": "b", "bw": -3}]}"#;
    assert_eq!(
        err(negative),
        "topo.json: links[0].bw: bandwidth -3 must be a positive number (GB/s per direction)"
    );
    let zero = r#"{"compute": ["a", "b"], "links": [{"from": "a", "to": "b", "bw": 0}]}"#;
    assert!(err(zero).contains("links[0].bw: bandwidth 0 must be a positive"));
    let apart = r#"{"compute": ["a", "b", "c", "d"], "links": [{"from": "a", "to": "b", "bw": 1}, {"from": "c", "to": "d", "bw": 1}]}"#;
    assert_eq!(
        err(apart),
        "topo.json: compute nodes are disconnected: 'c' cannot be reached from 'a'"
    );
    let oneway = r#"{"compute": ["a", "b"], "links": [{"from": "a", "to": "b", "bw": 1, "directed": true}]}"#;
    assert!(
        err(oneway).contains("'a' cannot be reached from 'b'"),
        "{}",
        err(oneway)
    );
    let dup = r#"{"compute": ["a", "a"], "links": []}"#;
    assert!(
        err(dup).contains("compute[1]: node 'a' is declared twice"),
        "{}",
        err(dup)
    );
    let unbalanced = r#"{"compute": ["a", "b"], "switches": ["s"], "links": [{"from": "a", "to": "s", "bw": 2, "directed": true}, {"from": "s", "to": "b", "bw": 1, "directed": true}, {"from": "b", "to": "a", "bw": 1, "directed": true}]}"#;
    assert!(
        err(unbalanced).contains("switch 's' is unbalanced: 2 GB/s in, 1 GB/s out"),
        "{}",
        err(unbalanced)
    );
    let lonely = r#"{"compute": ["a"], "links": []}"#;
    assert!(err(lonely).contains("needs at least 2 compute nodes, has 1"));
    let typo = "{\n \"compute\": [\"a\", \"b\"],\n \"linkz\": []\n}";
    assert!(err(typo).starts_with("topo.json:3:"), "{}", err(typo));
    assert!(err(typo).contains("unknown field `linkz`"), "{}", err(typo));
    let toml =
        "compute = [\"a\", \"b\"]\nlinks = [\n  { from = \"a\", to = \"b\", bw = \"fast\" },\n]\n";
    let e = Topology::parse(toml, "t.toml").unwrap_err().to_string();
    assert!(e.starts_with("t.toml:3:"), "{e}");
}

/// A declared `shape` feeds the closed forms of `apiary comm compare`; one that
/// contradicts the links used to print closed forms for another topology.
#[test]
fn a_shape_that_contradicts_the_links_is_refused() {
    let star = |shape: &str| {
        format!(
            r#"{{"compute": ["a", "b", "c"], "switches": ["s"], "links": [{{"from": "a", "to": "s", "bw": 300}}, {{"from": "b", "to": "s", "bw": 300}}, {{"from": "c", "to": "s", "bw": 300}}], "shape": {shape}}}"#
        )
    };
    let e = err(&star(r#"{"boxes": 2, "gpus": 8, "intra": 300, "nic": 50}"#));
    assert_eq!(
        e,
        "topo.json: shape { boxes = 2, gpus = 8, intra = 300, nic = 50 }: describes 16 GPUs, the links 3 compute nodes"
    );
    let e = err(&star(r#"{"boxes": 1, "gpus": 3, "intra": 900}"#));
    assert!(
        e.ends_with("gives each GPU 900 GB/s out, but 'a' has links for 300 GB/s"),
        "{e}"
    );
    let e = err(&star(r#"{"boxes": 0, "gpus": 3, "intra": 300}"#));
    assert!(e.ends_with("boxes and gpus must be at least 1"), "{e}");
    let e = err(&star(
        r#"{"boxes": 4294967295, "gpus": 4294967295, "intra": 300, "nic": 1}"#,
    ));
    assert!(e.contains("describes 18446744065119617025 GPUs"), "{e}");
    // The shape the links do describe is accepted, as is the committed example (whose
    // extra direct links give more than the shape needs).
    assert!(Topology::parse(&star(r#"{"boxes": 1, "gpus": 3, "intra": 300}"#), "t.json").is_ok());
    // Boxes of one GPU need no intra-box bandwidth, only their NICs.
    let pair = r#"{"compute": ["a", "b"], "switches": ["r"], "links": [{"from": "a", "to": "r", "bw": 25}, {"from": "b", "to": "r", "bw": 25}], "shape": {"boxes": 2, "gpus": 1, "intra": 300, "nic": 25}}"#;
    assert!(Topology::parse(pair, "t.json").is_ok());
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/topologies/example.toml"
    );
    assert!(Topology::read(std::path::Path::new(example)).is_ok());
}

#[test]
fn files_round_trip_through_the_json_export() {
    let t = apiary_comm::preset("dgx-a100:2").unwrap();
    let back = Topology::parse(&t.to_json(), "export.json").unwrap();
    let named = |t: &Topology| {
        let mut v: Vec<(String, String, Frac)> = t
            .edges()
            .iter()
            .map(|e| {
                let name = |i: u32| t.nodes()[i as usize].name.clone();
                (name(e.from), name(e.to), t.bandwidth(e.cap))
            })
            .collect();
        v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        v
    };
    assert_eq!(named(&back), named(&t));
    assert_eq!(back.shape(), t.shape());
    assert_eq!(optimum(&back).x_star, optimum(&t).x_star);
}

#[test]
fn unknown_presets_say_where_to_look() {
    let e = apiary_comm::load("torus:3").unwrap_err().to_string();
    assert!(e.contains("torus size must be RxC"), "{e}");
    let e = apiary_comm::load("nope").unwrap_err().to_string();
    assert!(
        e.contains("unknown preset") && e.contains("apiary comm presets"),
        "{e}"
    );
    let e = apiary_comm::load("missing.json").unwrap_err().to_string();
    assert_eq!(e, "missing.json: no such file");
}

//! Invalid HiveD configs are refused with the offending field's path.

use apiary_hived::{Config, Hived};

fn err(yaml: &str) -> String {
    let cfg = Config::parse(yaml).unwrap();
    Hived::new(&cfg).unwrap_err().to_string()
}

const TYPES: &str = "physicalCluster:\n  cellTypes:\n    S: {childCellType: G, childCellNumber: 2}\n    N: {childCellType: S, childCellNumber: 2, isNodeLevel: true}\n    R: {childCellType: N, childCellNumber: 2}\n";

#[test]
fn each_error_names_its_field() {
    let e = err(&format!("{TYPES}  physicalCells: [{{cellType: X}}]\n"));
    assert!(
        e.contains("physicalCells[0].cellType") && e.contains("unknown cell type X"),
        "{e}"
    );
    let e = err(&format!("{TYPES}  physicalCells: [{{cellType: S}}]\n"));
    assert!(e.contains("must be node level or above"), "{e}");
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: R, cellChildren: [{{cellAddress: a}}]}}]\n"
    ));
    assert!(
        e.contains("physicalCells[0].cellChildren") && e.contains("bad fan-out"),
        "{e}"
    );
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}, {{cellType: N, cellAddress: a}}]\n"
    ));
    assert!(
        e.contains("physicalCells[1].cellAddress") && e.contains("duplicate"),
        "{e}"
    );
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\nvirtualClusters:\n  v: {{virtualCells: [{{cellType: R.N, cellNumber: 1}}]}}\n"
    ));
    assert!(
        e.contains("virtualClusters.v.virtualCells[0].cellType") && e.contains("must start with"),
        "{e}"
    );
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\nvirtualClusters:\n  v: {{virtualCells: [{{cellType: N.G, cellNumber: 1}}]}}\n"
    ));
    assert!(e.contains("G is not a child type of N"), "{e}");
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\nvirtualClusters:\n  v: {{virtualCells: [{{cellType: N, cellNumber: 2}}]}}\n"
    ));
    assert!(
        e.contains("cannot map onto the physical cells")
            && e.contains("needs 2 cells, 1 available"),
        "{e}"
    );
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\nvirtualClusters:\n  v: {{pinnedCells: [{{pinnedCellId: P}}]}}\n"
    ));
    assert!(
        e.contains("pinnedCells[0].pinnedCellId") && e.contains("no physical cell"),
        "{e}"
    );
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a, cellChildren: [{{cellChildren: [{{cellAddress: x}}, {{}}]}}, {{}}]}}]\n"
    ));
    assert!(e.contains("device index"), "{e}");
}

#[test]
fn design_config_builds_and_reports_status() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/hived/design.yaml"
    ))
    .unwrap();
    let h = Hived::with_all_nodes_healthy(&Config::parse(&text).unwrap()).unwrap();
    let s = h.cluster_status();
    assert_eq!(s.physical_cluster.len(), 10);
    assert_eq!(s.virtual_clusters.len(), 2);
    // VC1's pinned IB rack is bound from the start.
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"cellAddress\":\"9\"") && json.contains("\"vc\":\"VC1\""));
    assert!(h.check_invariants().is_empty());
}

/// A chain of `n` cell types, each with one child, over a node-level type of 8 GPUs.
fn chain(n: usize) -> String {
    let mut y = String::from(
        "physicalCluster:\n  cellTypes:\n    T0: {childCellType: G, childCellNumber: 8, isNodeLevel: true}\n",
    );
    for i in 1..n {
        y += &format!(
            "    T{i}: {{childCellType: T{}, childCellNumber: 1}}\n",
            i - 1
        );
    }
    y += &format!("  physicalCells: [{{cellType: T{}}}]\n", n - 1);
    y
}

/// A cell-type chain tens of thousands deep used to overflow the stack (an abort, not
/// an error); it is refused by name, and the deepest allowed chain builds.
#[test]
fn deep_type_chains_are_refused_without_recursion() {
    let e = err(&chain(40_000));
    assert!(
        e.starts_with("physicalCluster.cellTypes.T") && e.contains("more than 64 levels"),
        "{e}"
    );
    // 63 types plus the leaf: 64 levels.
    let ok = Config::parse(&chain(63)).unwrap();
    let h = Hived::with_all_nodes_healthy(&ok).unwrap();
    assert!(h.check_invariants().is_empty());
    assert!(err(&chain(64)).contains("more than 64 levels"));
    // Cycles are still named along their path.
    let e = err(
        "physicalCluster:\n  cellTypes:\n    A: {childCellType: B, childCellNumber: 2}\n    B: {childCellType: C, childCellNumber: 2}\n    C: {childCellType: A, childCellNumber: 2}\n  physicalCells: [{cellType: A}]\n",
    );
    assert!(e.contains("cycle: A -> B -> C -> A"), "{e}");
}

/// `cellNumber` in the billions used to allocate gigabytes of virtual cells (and hang);
/// a physical cluster whose fan-outs multiply past the bound used to allocate every
/// cell. Both are refused before anything is built.
#[test]
fn huge_cell_counts_are_refused_before_allocating() {
    let e = err(&format!(
        "{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\nvirtualClusters:\n  v: {{virtualCells: [{{cellType: N, cellNumber: 1000000000}}]}}\n  w: {{virtualCells: [{{cellType: N, cellNumber: 9223372036854775807}}]}}\n"
    ));
    assert!(
        e.contains("cannot map onto the physical cells") && e.contains("1 available"),
        "{e}"
    );
    let e = err(
        "physicalCluster:\n  cellTypes:\n    N: {childCellType: G, childCellNumber: 8, isNodeLevel: true}\n    R: {childCellType: N, childCellNumber: 4096}\n    S: {childCellType: R, childCellNumber: 4096}\n  physicalCells: [{cellType: S}]\n",
    );
    assert!(
        e.contains("physicalCells[0]") && e.contains("more than 4000000 cells"),
        "{e}"
    );
}

/// An empty config, or one whose only section is misspelt, used to build an empty
/// cluster silently.
#[test]
fn empty_configs_and_unknown_top_level_keys_are_refused() {
    for text in ["", "{}", "virtualClusters: {}\n"] {
        let e = err(text);
        assert!(
            e.contains("physicalCluster.physicalCells: no physical cells"),
            "{text:?}: {e}"
        );
    }
    let e = Config::parse(&TYPES.replace("physicalCluster:", "physicalClusters:"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("physicalClusters: unknown top-level key"),
        "{e}"
    );
    let e = Config::parse("{\"physicalCluster\": {}, \"virtualCluster\": {}}")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("virtualCluster: unknown top-level key"),
        "{e}"
    );
    // Upstream's scheduler settings load and are ignored.
    let cfg = Config::parse(&format!(
        "webServerAddress: ':9096'\nwaitingPodSchedulingBlockMilliSec: 50\n{TYPES}  physicalCells: [{{cellType: N, cellAddress: a}}]\n"
    ))
    .unwrap();
    assert!(Hived::new(&cfg).is_ok());
}

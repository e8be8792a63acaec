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

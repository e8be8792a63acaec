//! The Kubernetes scheduler extender under kube-scheduler's load: 5,000 nodes, every
//! pod filtered over all of them (the node-name list kube-scheduler sends, ~80 KB) and
//! bound through the stand-in API server, one pod at a time as kube-scheduler's
//! scheduling loop makes the calls. Real HTTP on loopback, both servers in-process.

use anyhow::{Context, Result};
use apiary_server::extender::http::Shared;
use apiary_server::extender::kube::Kube;
use apiary_server::extender::stub::Stub;
use apiary_server::extender::{Extender, serve::sync_once};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What `apiary bench` reports of the extender.
#[derive(Debug, serde::Serialize)]
pub struct ExtenderFigures {
    /// Nodes of the cluster.
    pub nodes: usize,
    /// Pods scheduled.
    pub pods: usize,
    /// Filter calls, client side (HTTP and JSON included): p50, µs.
    pub filter_p50_us: f64,
    /// p99, µs.
    pub filter_p99_us: f64,
    /// Pods through filter and bind (the binding written to the API server) per second.
    pub pods_per_s: f64,
}

fn config(nodes: usize, vcs: usize) -> String {
    let mut t = String::from(
        "physicalCluster:\n  cellTypes:\n    NODE: {childCellType: V100, childCellNumber: 8, isNodeLevel: true}\n    POOL: {childCellType: NODE, childCellNumber: 100}\n  physicalCells:\n",
    );
    for p in 0..nodes / 100 {
        t.push_str("  - cellType: POOL\n    cellChildren:\n");
        for n in 0..100 {
            t.push_str(&format!("    - cellAddress: n{}\n", p * 100 + n));
        }
    }
    t.push_str("virtualClusters:\n");
    for v in 0..vcs {
        t.push_str(&format!(
            "  vc{v}:\n    virtualCells:\n    - {{cellType: POOL.NODE, cellNumber: {}}}\n",
            nodes / vcs
        ));
    }
    t
}

/// Schedules `pods` 4-GPU pods over 5,000 8-GPU nodes in 10 VCs.
pub fn extender(pods: usize) -> Result<ExtenderFigures> {
    let nodes = 5_000;
    let hived =
        apiary_hived::Config::parse(&config(nodes, 10)).context("the bench's HiveD config")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let stub = rt.block_on(Stub::start())?;
    let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
    for n in &names {
        stub.set_node(n, true);
    }
    let app = Arc::new(Shared {
        ext: Mutex::new(Extender::new(&hived, 3)?),
        kube: Kube::new(&stub.url, None),
    });
    sync_once(&app)?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    rt.spawn(apiary_server::extender::http::serve(
        listener,
        app.clone(),
        std::future::pending(),
    ));
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build(),
    );
    let names_json = serde_json::to_string(&names)?;
    let mut filter_us = Vec::with_capacity(pods);
    let t0 = Instant::now();
    for i in 0..pods {
        let (ns, name, uid) = ("bench", format!("p{i}"), format!("uid-{i}"));
        let spec = format!(
            "virtualCluster: vc{}\npriority: 0\nleafCellNumber: 4\n",
            i % 10
        );
        let pod = json!({
            "metadata": {"name": name, "namespace": ns, "uid": uid,
                         "annotations": {apiary_server::extender::SPEC_ANNOTATION: spec}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {apiary_server::extender::ENABLE_RESOURCE: "1"}}}]},
            "status": {"phase": "Pending"}
        });
        stub.add_pod(pod.clone());
        // kube-scheduler writes the list on its own machine: written once here.
        let body = format!("{{\"pod\":{pod},\"nodenames\":{names_json}}}");
        let t = Instant::now();
        let mut r = agent
            .post(&format!("{url}/v1/extender/filter"))
            .content_type("application/json")
            .send(body.as_bytes())?;
        let res: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string()?)?;
        filter_us.push(t.elapsed().as_secs_f64() * 1e6);
        let node = res["nodenames"][0]
            .as_str()
            .with_context(|| format!("pod {i} was not placed: {res}"))?
            .to_string();
        let mut r = agent
            .post(&format!("{url}/v1/extender/bind"))
            .send_json(json!({"podName": name, "podNamespace": ns, "podUID": uid, "node": node}))?;
        let status = r.status().as_u16();
        anyhow::ensure!(
            status == 200 && r.body_mut().read_to_string()? == "{}",
            "pod {i}: bind answered {status}"
        );
    }
    let wall = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        stub.objects.lock().unwrap().bindings.len() == pods,
        "every pod is bound"
    );
    filter_us.sort_by(f64::total_cmp);
    let q = |p: f64| filter_us[((filter_us.len() - 1) as f64 * p).round() as usize];
    Ok(ExtenderFigures {
        nodes,
        pods,
        filter_p50_us: q(0.5),
        filter_p99_us: q(0.99),
        pods_per_s: pods as f64 / wall,
    })
}

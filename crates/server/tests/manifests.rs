//! The manifests under `deploy/kubernetes/` parse, and agree with each other and with
//! what the extender serves: the scheduler config names the extender's verbs on its
//! port with HiveD's managed resource; the extender's config loads (HiveD's cluster
//! included) and reaches the API server through the proxy the Deployment runs; the
//! Deployment mounts the configs where the commands read them; RBAC grants the calls.

use apiary_server::extender::serve::ExtenderConfig;
use apiary_server::extender::{ENABLE_RESOURCE, http::PATHS};
use serde_json::Value;

const DIR: &str = "../../deploy/kubernetes";

fn docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{DIR}/{file}")).unwrap();
    let docs: Vec<Value> = text
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .collect();
    for d in &docs {
        for field in ["apiVersion", "kind"] {
            assert!(
                d[field].is_string(),
                "{file}: a document without {field}: {d}"
            );
        }
        assert!(
            d["metadata"]["name"].is_string(),
            "{file}: a document without a name"
        );
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn manifests_agree_with_each_other_and_the_extender() {
    let cm = docs("configmap.yaml");
    let data = &find(&cm, "ConfigMap", "apiary-scheduler-config")["data"];

    // The scheduler config.
    let sched: Value =
        serde_saphyr::from_str(data["scheduler-config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(sched["apiVersion"], "kubescheduler.config.k8s.io/v1");
    assert_eq!(sched["kind"], "KubeSchedulerConfiguration");
    assert_eq!(sched["profiles"][0]["schedulerName"], "apiary");
    let ext = &sched["extenders"].as_array().unwrap()[0];
    let prefix = ext["urlPrefix"].as_str().unwrap();
    for verb in ["filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"] {
        let v = ext[verb].as_str().unwrap();
        let path = format!("/v1/extender/{v}");
        assert!(
            PATHS.contains(&path.as_str()),
            "{verb} {v}: the extender does not serve {path}"
        );
        assert!(prefix.ends_with("/v1/extender"), "{prefix}");
    }
    assert_eq!(ext["nodeCacheCapable"], true, "requests carry node names");
    assert_eq!(ext["managedResources"][0]["name"], ENABLE_RESOURCE);
    assert_eq!(ext["managedResources"][0]["ignoredByScheduler"], true);

    // The extender's config loads, with HiveD's cluster, from the files the ConfigMap
    // mounts side by side.
    let dir = std::env::temp_dir().join(format!("apiary-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["extender.toml", "hived.yaml"] {
        std::fs::write(dir.join(f), data[f].as_str().unwrap()).unwrap();
    }
    let (cfg, hived) = ExtenderConfig::load(&dir.join("extender.toml")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!hived.virtual_clusters.is_empty());
    apiary_hived::Hived::new(&hived).unwrap();
    let port = cfg.listen.rsplit(':').next().unwrap();
    assert!(
        prefix.starts_with(&format!("http://127.0.0.1:{port}/")),
        "{prefix} vs listen {}",
        cfg.listen
    );

    // The Deployment: the commands read the mounted configs; the proxy is where the
    // extender looks for the API server.
    let dep = docs("deployment.yaml");
    let spec = &find(&dep, "Deployment", "apiary-scheduler")["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().unwrap();
    let by_name = |n: &str| {
        containers
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("no container {n}"))
    };
    let mount = by_name("extender")["volumeMounts"][0]["mountPath"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        spec["volumes"][0]["configMap"]["name"],
        "apiary-scheduler-config"
    );
    let cmd: Vec<&str> = (by_name("extender")["command"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&cmd[..3], ["apiary", "serve", "--extender"]);
    assert_eq!(cmd[4], format!("{mount}/extender.toml"));
    let ks: Vec<&str> = (by_name("kube-scheduler")["command"]
        .as_array()
        .unwrap()
        .iter())
    .map(|v| v.as_str().unwrap())
    .collect();
    assert!(
        ks.contains(&format!("--config={mount}/scheduler-config.yaml").as_str()),
        "{ks:?}"
    );
    let proxy: Vec<&str> = (by_name("kubectl-proxy")["command"]
        .as_array()
        .unwrap()
        .iter())
    .map(|v| v.as_str().unwrap())
    .collect();
    let proxy_port = proxy
        .iter()
        .find_map(|a| a.strip_prefix("--port="))
        .unwrap();
    assert_eq!(cfg.kube_api, format!("http://127.0.0.1:{proxy_port}"));
    assert_eq!(spec["serviceAccountName"], "apiary-scheduler");
    // Several replicas: their kube-schedulers elect one leader, on a Lease the account
    // may write, which lasts longer than the extenders take to sync from the API server.
    let replicas = find(&dep, "Deployment", "apiary-scheduler")["spec"]["replicas"]
        .as_u64()
        .unwrap();
    let election = &sched["leaderElection"];
    if replicas > 1 {
        assert_eq!(
            election["leaderElect"], true,
            "{replicas} replicas need one leader"
        );
        assert_eq!(election["resourceLock"], "leases");
        // kube-scheduler's default lease is 15 s.
        let lease_s = election["leaseDuration"]
            .as_str()
            .map_or(15.0, |d| d.trim_end_matches('s').parse().unwrap());
        assert!(
            cfg.resync_s * 2.0 < lease_s,
            "a standby's state is synced well within the lease"
        );
    }

    // RBAC: the extender's calls, and kube-scheduler's own roles, for that account.
    let rbac = docs("rbac.yaml");
    let rules = find(&rbac, "ClusterRole", "apiary-extender")["rules"]
        .as_array()
        .unwrap();
    let grants = |res: &str, verb: &str| {
        rules.iter().any(|r| {
            r["resources"].as_array().unwrap().iter().any(|x| x == res)
                && r["verbs"].as_array().unwrap().iter().any(|x| x == verb)
        })
    };
    for (res, verb) in [
        ("pods", "list"),
        ("nodes", "list"),
        ("pods/binding", "create"),
    ] {
        assert!(grants(res, verb), "the extender may not {verb} {res}");
    }
    let ns = sched["leaderElection"]["resourceNamespace"]
        .as_str()
        .unwrap();
    assert!(
        rbac.iter().any(|r| r["kind"] == "Role"
            && r["metadata"]["namespace"] == ns
            && r["rules"].as_array().unwrap().iter().any(|x| {
                x["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == "leases")
                    && x["verbs"].as_array().unwrap().iter().any(|v| v == "update")
            })),
        "the account may not hold the Lease in {ns}"
    );
    for role in [
        "apiary-extender",
        "system:kube-scheduler",
        "system:volume-scheduler",
    ] {
        assert!(
            rbac.iter().any(|d| d["kind"] == "ClusterRoleBinding"
                && d["roleRef"]["name"] == role
                && d["subjects"][0]["name"] == "apiary-scheduler"),
            "no binding of {role} to the scheduler's account"
        );
    }
}

//! Server config errors name the file and field.

use apiary_server::config::ServerConfig;

fn err(text: &str) -> String {
    ServerConfig::parse(text, "server.toml")
        .unwrap_err()
        .to_string()
}

const NODE: &str = "[[nodes]]\nname = \"n0\"\ngpus = 8\n";

#[test]
fn bad_configs_are_refused_with_the_field() {
    for (text, want) in [
        (
            format!("policy = \"silod\"\nio = \"cache_gb_per_gpu=x\"\n{NODE}"),
            "io: --io cache_gb_per_gpu",
        ),
        (
            format!("policy = \"muxflow\"\n{NODE}"),
            "online_nodes: 'muxflow' runs offline jobs beside online services: say how many \
             nodes, the first ones, serve them (online_nodes = N)",
        ),
        (
            format!("policy = \"goldminer\"\n{NODE}"),
            "nodes[0].cpus: 'goldminer' gives jobs CPUs for their input pipelines from the \
             nodes' CPUs: declare every node's `cpus`",
        ),
        (
            format!("policy = \"hived\"\n{NODE}"),
            "policy: 'hived' divides the cluster among VCs: write sharing = \"hived\"",
        ),
        (
            format!(
                "policy = \"gandiva\"\nsharing = \"quota\"\n[[vcs]]\nname = \"a\"\nquota_gpus = 4\n{NODE}"
            ),
            "policy: 'gandiva' cannot run inside a VC with sharing = \"quota\": it needs the \
             `chooses-gpus` capability",
        ),
        (
            format!("policy = \"nope\"\n{NODE}"),
            "policy: unknown policy 'nope'",
        ),
        (
            format!("sharing = \"hive\"\n{NODE}"),
            "'hive': one of none, hived, quota, private",
        ),
        (
            format!("sharing = \"quota\"\n{NODE}"),
            "vcs: sharing = \"quota\" needs [[vcs]]",
        ),
        (
            format!("params = {{ thresholds = \"x\" }}\npolicy = \"tiresias\"\n{NODE}"),
            "params: parameter 'thresholds'",
        ),
        (
            "policy = \"fifo\"\nnodes = []\n".to_string(),
            "nodes: declare at least one node",
        ),
        ("policy = \"fifo\"\n".to_string(), "missing field `nodes`"),
        (
            format!("{NODE}{NODE}"),
            "nodes[1].name: 'n0' is empty or repeated",
        ),
        (
            "[[nodes]]\nname = \"x\"\ngpus = 65\n".to_string(),
            "nodes[0].gpus",
        ),
        (
            "[[nodes]]\nname = \"x\"\ngpus = 8\ngpu_memory_gib = 100000\n".to_string(),
            "nodes[0].gpu_memory_gib: at most 65536",
        ),
        (
            format!("node_timeout_s = 1\nheartbeat_interval_s = 1\n{NODE}"),
            "node_timeout_s",
        ),
        (
            format!("grace_s = 1e300\n{NODE}"),
            "grace_s: must be a positive number of seconds, at most 10^9",
        ),
        (
            format!("[[tokens]]\ntoken = \"short\"\nrole = \"admin\"\n{NODE}"),
            "tokens[0]: token must be at least 16",
        ),
        (
            format!("[[tokens]]\ntoken = \"0123456789abcdef\"\nrole = \"tenant\"\n{NODE}"),
            "a tenant token names its vc",
        ),
        (
            format!("colour = \"red\"\n{NODE}"),
            "unknown field `colour`",
        ),
        (
            format!("[[tokens]]\ntoken = \"0123456789abcdef\"\nrole = \"agent\"\n{NODE}"),
            "tokens[0]: an agent token names the nodes it serves",
        ),
        (
            format!(
                "[[tokens]]\ntoken = \"0123456789abcdef\"\nrole = \"agent\"\nnodes = [\"n9\"]\n{NODE}"
            ),
            "tokens[0]: nodes: 'n9' is not a declared node",
        ),
        (
            format!(
                "[[tokens]]\ntoken = \"0123456789abcdef\"\nrole = \"admin\"\nnodes = [\"n0\"]\n{NODE}"
            ),
            "only agent tokens name nodes",
        ),
        (
            format!("max_jobs_per_vc = 0\n{NODE}"),
            "max_jobs_per_vc: must be at least 1",
        ),
    ] {
        let e = err(&text);
        assert!(e.contains("server.toml"), "{e}");
        assert!(e.contains(want), "{text}\n-> {e}");
    }
    for elastic in ["elasticflow", "edf", "greenflow"] {
        ServerConfig::parse(&format!("policy = \"{elastic}\"\n{NODE}"), "server.toml").unwrap();
    }
    let ok = ServerConfig::parse(NODE, "server.toml").unwrap();
    assert_eq!((ok.policy.as_str(), ok.nodes.len()), ("fifo", 1));
    assert_eq!(ok.sharing, None);
    // What the built policy uses is checked, with its parameters: Tiresias reading the
    // jobs to come (the Gittins index) can run inside a VC.
    let text = format!(
        "policy = \"tiresias\"\nparams = {{ gittins = \"true\" }}\nsharing = \"quota\"\n\
         [[vcs]]\nname = \"a\"\nquota_gpus = 4\n{NODE}"
    );
    let gittins = ServerConfig::parse(&text, "server.toml").unwrap();
    assert_eq!(gittins.sharing, Some(apiary_policy::vc::Sharing::Quota));
}

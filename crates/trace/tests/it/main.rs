//! Every reader on the real files in `../shared/traces`, and on malformed input.

use apiary_trace::{Format, ReadOptions, read};
use std::io::Write;
use std::path::{Path, PathBuf};

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
}

fn real(rel: &str) -> Option<PathBuf> {
    let p = shared().join(rel);
    if p.is_file() {
        Some(p)
    } else {
        // CI always has ../shared; a checkout without it skips, loudly.
        assert!(
            std::env::var("CI").is_err(),
            "{} missing under CI",
            p.display()
        );
        eprintln!("skipping: {} not present", p.display());
        None
    }
}

#[test]
fn real_traces_load_with_documented_counts() {
    let cases: &[(&str, Format, usize, u64)] = &[
        // (file, format, jobs, total GPUs over jobs)
        ("philly/philly.csv", Format::Philly, 82_247, 0),
        (
            "philly/gavel_msr_seed0/0e4a51.trace",
            Format::Gavel,
            1_181,
            0,
        ),
        (
            "philly/elasticflow_philly_103959.csv",
            Format::Elasticflow,
            876,
            0,
        ),
        ("itp/raw/cluster10.csv", Format::Itp, 260, 0),
        (
            "itp/elasticflow/cluster10.csv",
            Format::ItpElasticflow,
            260,
            0,
        ),
        ("itp/elasticflow/195job.csv", Format::ItpElasticflow, 195, 0),
        (
            "peers/elasticflow/elasticVpollux_e.csv",
            Format::Elasticflow,
            195,
            0,
        ),
        (
            "peers/elasticflow/resnet_cifar_trace.csv",
            Format::Elasticflow,
            5,
            0,
        ),
        (
            "peers/muri/cluster_exp/cluster_trace.csv",
            Format::Muri,
            400,
            0,
        ),
        ("peers/muri/trace-data/trace3.csv", Format::Muri, 992, 0),
        ("peers/tiresias/60_job.csv", Format::Tiresias, 60, 0),
        (
            "peers/gavel/physical_cluster/max_min_fairness.trace",
            Format::Gavel10,
            96,
            0,
        ),
    ];
    for &(rel, fmt, n, _) in cases {
        let Some(p) = real(rel) else { continue };
        // The Fig. 8(a) trace names Pollux's T4 models.
        let opts = ReadOptions {
            elasticflow_gpu: rel.contains("elasticVpollux").then(|| "T4".into()),
            ..ReadOptions::default()
        };
        let t = read(&p, &opts).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(t.format, fmt, "{rel}");
        assert_eq!(t.jobs.len(), n, "{rel}");
        assert_eq!(t.skipped, 0, "{rel}");
        assert!(
            t.jobs.windows(2).all(|w| w[0].submit <= w[1].submit),
            "{rel} not sorted"
        );
        assert!(t.jobs.iter().all(|j| j.gpus > 0), "{rel}");
    }
}

#[test]
fn elasticflow_traces_carry_throughput_tables() {
    if let Some(p) = real("itp/elasticflow/cluster10.csv") {
        let t = read(&p, &ReadOptions::default()).unwrap();
        assert!(t.jobs.iter().all(|j| j.extras().scaling.is_some()));
        // bert, batch 128, 16 GPUs, 6503 iterations at 10.77 it/s: 604 s, the trace's
        // own duration.
        let j = t
            .jobs
            .iter()
            .find(|j| j.id.starts_with("5dc7d9cd"))
            .unwrap();
        assert_eq!(j.duration, 604_000);
        assert_eq!(j.extras().scaling.as_ref().unwrap().max_gpus, 16);
    }
    if let Some(p) = real("peers/elasticflow/elasticVpollux_e.csv") {
        let e = read(&p, &ReadOptions::default()).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("--elasticflow-gpu"),
            "{e}"
        );
    }
}

#[test]
fn real_trace_details() {
    if let Some(p) = real("philly/philly.csv") {
        let t = read(&p, &ReadOptions::default()).unwrap();
        let gpu_h: f64 = t.jobs.iter().map(|j| j.gpu_time() as f64).sum::<f64>() / 3.6e6;
        assert!((gpu_h - 978_078.47).abs() < 0.1, "{gpu_h}");
        assert_eq!(t.jobs.iter().filter(|j| j.gpus == 128).count(), 3);
        assert_eq!(t.jobs[0].submit, 0);
        assert_eq!(
            t.jobs
                .iter()
                .filter_map(|j| j.vc.as_deref())
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            15
        );
    }
    if let Some(p) = real("peers/muri/cluster_exp/cluster_trace.csv") {
        let t = read(
            &p,
            &ReadOptions {
                muri_itertime_factor: Some(1.0),
                ..Default::default()
            },
        )
        .unwrap();
        let j = t.jobs.iter().find(|j| j.id == "0").unwrap();
        assert_eq!(
            (j.gpus, j.duration, j.iterations),
            (8, 10_956 * 437, Some(10_956))
        );
        assert_eq!(j.extras().stages.unwrap().gpu, 419.0);
        assert_eq!(
            t.jobs.iter().find(|j| j.id == "1").unwrap().submit,
            1_534_000
        );
    }
    if let Some(p) = real("alibaba/gpu-v2023/openb_pod_list_default.csv") {
        let t = read(&p, &ReadOptions::default()).unwrap();
        assert_eq!(t.format, Format::Alibaba);
        let cpu_only = t
            .excluded
            .iter()
            .find(|e| e.0.contains("CPU-only"))
            .map_or(0, |e| e.1);
        assert_eq!(cpu_only, 1_088);
        assert_eq!(
            t.jobs.len() as u64 + t.excluded.iter().map(|e| e.1).sum::<u64>(),
            8_152
        );
    }
    if let Some(p) = real("philly/pollux_workloads/workload-6.csv") {
        let t = read(&p, &ReadOptions::default()).unwrap();
        assert_eq!(t.jobs.len(), 160);
        assert!(t.jobs.iter().all(|j| j.extras().adaptive.is_some()));
        // An application the built-in data does not know names file, line and field.
        let dir = std::env::temp_dir().join(format!("apiary-pollux-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("w.csv");
        std::fs::write(
            &bad,
            "name,time,application,num_replicas,batch_size\nx-0,5,resnet,1,64\n",
        )
        .unwrap();
        let e = read(&bad, &ReadOptions::default()).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("application") && e.contains("cifar10"),
            "{e}"
        );
    }
    for rel in [
        "itp/raw/cluster01.csv",
        "itp/raw/cluster04.csv",
        "itp/elasticflow/cluster08.csv",
    ] {
        if let Some(p) = real(rel) {
            read(&p, &ReadOptions::default()).unwrap_or_else(|e| panic!("{rel}: {e}"));
        }
    }
}

fn tmp(name: &str, body: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("apiary-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn err_of(p: &Path) -> String {
    read(p, &ReadOptions::default()).unwrap_err().to_string()
}

#[test]
fn malformed_rows_name_file_line_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "philly.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-13-09 07:01:55,66.0,1,66.0,a\n",
            "line 3, field 'timestamp'",
        ),
        (
            "philly2.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,-4,1,66.0,a\n",
            "line 2, field 'duration'",
        ),
        (
            "itp.csv",
            "job_id,submission_time,duration,num_gpu\nx,1,2,two\n",
            "line 2, field 'num_gpu'",
        ),
        (
            "itpef.csv",
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\nx,1,5,bert,zz,32,1,3\n",
            "line 2, field 'deadline'",
        ),
        (
            "ef.csv",
            "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration\n0,1,5,bert,9,32,1\n",
            "line 2, field 'record'",
        ),
        (
            "muri.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,NaN,1,1,1,0\n",
            "line 2, field 'iteration_time'",
        ),
        (
            "tiresias.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,606,vgg19,,30\n",
            "line 2, field 'duration'",
        ),
        (
            "ali.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1,1,1,1000,,LS,Running,5,3,4\n",
            "line 2, field 'deletion_time'",
        ),
        (
            "canon.csv",
            "id,submit,gpus,duration\na,1,1,x\n",
            "line 2, field 'duration'",
        ),
        (
            "canon2.csv",
            "id,submit,gpus,duration,colour\na,1,1,1,red\n",
            "field 'colour'",
        ),
        (
            "canon.jsonl",
            "{\"id\":\"a\",\"submit\":1,\"gpus\":1,\"duration\":2}\n{\"id\":\"b\",\"submit\":-1,\"gpus\":1,\"duration\":2}\n",
            "line 2, field 'submit'",
        ),
        (
            "gavel.trace",
            "ResNet-18 (batch size 32)\tcmd\t--num_steps\t1\tmany\t0.0\t1\n",
            "line 1, field 'total_steps'",
        ),
        (
            "nonsense.csv",
            "hello,world\n1,2\n",
            "unrecognised trace format",
        ),
        // Blank lines (the CSV reader skips them without counting) and quoted line
        // breaks: the file's own line is named.
        (
            "itp-blank.csv",
            "job_id,submission_time,duration,num_gpu\na,1,2,1\n\n\nb,x,2,1\n",
            "line 5, field 'submission_time'",
        ),
        (
            "itp-quoted.csv",
            "job_id,submission_time,duration,num_gpu\n\"a\nb\",1,2,1\n\nc,x,2,1\n",
            "line 5, field 'submission_time'",
        ),
        // Times that would overflow (or spin) the simulator's integer clock.
        (
            "ali-far.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np0,1,1,1,1000,,LS,Running,0,100,0\np1,1,1,1,1000,,LS,Running,18000000000000000,18000000000000100,18000000000000000\n",
            "line 3, field 'creation_time': 18000000000000000 s is beyond",
        ),
        (
            "ali-long.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np1,1,1,1,1000,,LS,Running,1,18000000000000000,1\n",
            "line 2, field 'deletion_time'",
        ),
        (
            "philly-far.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,100,1,100,a\n900000000-10-01 00:00:00,100,1,100,a\n",
            "line 3, field 'timestamp': '900000000-10-01 00:00:00': year 900000000",
        ),
        (
            "philly-long.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,1e16,1,100,a\n",
            "line 2, field 'duration': 10000000000000000 s is beyond",
        ),
        (
            "muri-long.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,1000000000000,gpt2,4,5,9,1e9,1,1,1,0\n",
            "line 2, field 'iteration_time'",
        ),
        (
            "pollux-batch.csv",
            "name,time,application,num_replicas,batch_size\ncifar10-0,53,cifar10,6,5000000\n",
            "line 2, field 'batch_size': 5000000 is outside cifar10's batch sizes 1..=4096",
        ),
        (
            "pollux-batch0.csv",
            "name,time,application,num_replicas,batch_size\ncifar10-0,53,cifar10,6,0\n",
            "line 2, field 'batch_size'",
        ),
        // Integers that used to wrap or truncate.
        (
            "muri-prio.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,1,1,1,1,4294967297\n",
            "line 2, field 'priority': 4294967297 is out of range",
        ),
        (
            "itpef-batch.csv",
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\nx,1,5,bert,9,4294967328,1,3\n",
            "line 2, field 'batch_size': 4294967328 is out of range",
        ),
        (
            "canon-gpus.csv",
            "id,submit,gpus,duration\na,1,4294967297,1\n",
            "line 2, field 'gpus'",
        ),
        (
            "canon-batch.csv",
            "id,submit,gpus,duration,batch_size\na,1,1,1,4294967297\n",
            "line 2, field 'batch_size'",
        ),
        // Absurd floats.
        (
            "muri-stage.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,1,1e308,1,1,0\n",
            "line 2, field 'resource_time_0'",
        ),
        (
            "canon-stage.csv",
            "id,submit,gpus,duration,stage_gpu_ms\na,1,1,1,1e308\n",
            "line 2, field 'stage_gpu_ms'",
        ),
        (
            "canon-stage.jsonl",
            "{\"id\":\"a\",\"submit\":1,\"gpus\":1,\"duration\":2,\"stage_net_ms\":1e308}\n",
            "line 1, field 'stage_net_ms'",
        ),
        (
            "canon-far.jsonl",
            "{\"id\":\"a\",\"submit\":1e300,\"gpus\":1,\"duration\":2}\n",
            "line 1, field 'submit'",
        ),
        // Invalid dates.
        (
            "philly-feb30.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-02-30 00:00:00,100,1,100,a\n",
            "line 2, field 'timestamp': '2017-02-30 00:00:00': 2017-02 has no day 30",
        ),
        (
            "philly-neghour.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-03-01 -1:00:00,100,1,100,a\n",
            "line 2, field 'timestamp'",
        ),
        // Duplicated columns.
        (
            "itp-dupcol.csv",
            "job_id,submission_time,duration,num_gpu,duration\nx,1,2,1,3\n",
            "line 1, field 'duration': column appears twice (columns 3 and 5)",
        ),
        (
            "canon-dupcol.csv",
            "id,submit,gpus,duration,gpus\na,1,1,1,2\n",
            "line 1, field 'gpus': column appears twice",
        ),
        // Duplicate ids, in every format with ids.
        (
            "itp-dup.csv",
            "job_id,submission_time,duration,num_gpu\nx,1,2,1\ny,1,2,1\nx,3,2,1\n",
            "line 4, field 'job_id': job id 'x' repeats the job on line 2",
        ),
        (
            "itpef-dup.csv",
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\nx,1,5,bert,9,64,1,3\nx,1,5,bert,9,64,1,3\n",
            "line 3, field 'job_id': job id 'x' repeats",
        ),
        (
            "ef-dup.csv",
            "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration\n0,1,5,bert,9,64,1,3\n0,1,5,bert,9,64,1,3\n",
            "line 3, field 'job_id'",
        ),
        (
            "muri-dup.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,1,1,1,1,0\n0,8,0,10,gpt2,4,5,9,1,1,1,1,0\n",
            "line 3, field 'job_id'",
        ),
        (
            "tiresias-dup.csv",
            "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,606,vgg19,5,30\n0,1,0,606,vgg19,5,30\n",
            "line 3, field 'job_id'",
        ),
        (
            "ali-dup.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\np,1,1,1,1000,,LS,Running,3,5,4\np,1,1,1,1000,,LS,Running,3,5,4\n",
            "line 3, field 'name'",
        ),
        (
            "pollux-dup.csv",
            "name,time,application,num_replicas,batch_size\ncifar10-0,53,cifar10,6,2048\ncifar10-0,54,cifar10,6,2048\n",
            "line 3, field 'name'",
        ),
        (
            "canon-dup.csv",
            "id,submit,gpus,duration\na,1,1,1\na,2,1,1\n",
            "line 3, field 'id': job id 'a' repeats the job on line 2",
        ),
        (
            "canon-dup.jsonl",
            "{\"id\":\"a\",\"submit\":1,\"gpus\":1,\"duration\":2}\n\n{\"id\":\"a\",\"submit\":1,\"gpus\":1,\"duration\":2}\n",
            "line 3, field 'id': job id 'a' repeats the job on line 1",
        ),
        (
            "canon-noid.jsonl",
            "{\"id\":\"\",\"submit\":1,\"gpus\":1,\"duration\":2}\n",
            "line 1, field 'id': empty job id",
        ),
    ];
    for (name, body, want) in cases {
        let p = tmp(name, body.as_bytes());
        let e = if name.ends_with(".trace") {
            read(
                &p,
                &ReadOptions {
                    gavel_throughputs: real("peers/gavel/simulation_throughputs.json"),
                    ..Default::default()
                },
            )
            .map(|_| ())
            .unwrap_err()
            .to_string()
        } else {
            err_of(&p)
        };
        assert!(
            e.contains(want) && e.contains(name),
            "{name}: got '{e}', want '{want}'"
        );
        // The same file with Windows line endings (Muri's peer traces have them) names
        // the same line.
        if !name.ends_with(".trace") {
            let crlf = format!("crlf-{name}");
            let p = tmp(&crlf, body.replace('\n', "\r\n").as_bytes());
            let e = err_of(&p);
            assert!(e.contains(want), "{crlf}: got '{e}', want '{want}'");
        }
    }
}

#[test]
fn muri_itertime_factor_must_be_positive() {
    let p = tmp(
        "muri-factor.csv",
        b"job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n0,8,0,10,gpt2,4,5,9,1,1,1,1,0\n",
    );
    for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
        let e = read(
            &p,
            &ReadOptions {
                muri_itertime_factor: Some(bad),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--muri-itertime-factor: ") && e.contains("not a positive number"),
            "{bad}: {e}"
        );
    }
    let t = read(
        &p,
        &ReadOptions {
            muri_itertime_factor: Some(2.0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(t.jobs[0].duration, 20);
}

#[test]
fn a_duplicate_id_is_a_skippable_row() {
    let p = tmp(
        "dup-skip.csv",
        b"job_id,submission_time,duration,num_gpu\na,1,2,1\na,2,2,1\nb,4,5,2\n",
    );
    let t = read(
        &p,
        &ReadOptions {
            skip_bad_rows: true,
            ..Default::default()
        },
    )
    .unwrap();
    let ids: Vec<&str> = t.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(t.skipped, 1);
    assert!(t.first_skip.unwrap().contains("line 3, field 'job_id'"));
}

#[test]
fn skip_bad_rows_counts_and_keeps_the_rest() {
    let p = tmp(
        "skip.csv",
        b"job_id,submission_time,duration,num_gpu\na,1,2,1\nb,x,2,1\nc,3,2,\nd,4,5,2\n",
    );
    let t = read(
        &p,
        &ReadOptions {
            skip_bad_rows: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(t.jobs.len(), 2);
    assert_eq!(t.skipped, 2);
    assert!(t.first_skip.unwrap().contains("line 3"));
}

#[test]
fn compressed_files_and_canonical_roundtrip() {
    let body = b"job_id,submission_time,duration,num_gpu\na,1,2,1\nb,3.5,2,4\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body).unwrap();
    let pg = tmp("t.csv.gz", &gz.finish().unwrap());
    let pz = tmp("t.csv.zst", &zstd_compress(body));
    let a = read(&pg, &ReadOptions::default()).unwrap();
    let b = read(&pz, &ReadOptions::default()).unwrap();
    assert_eq!(a.jobs, b.jobs);
    assert_eq!(a.jobs[1].submit, 3_500);
    let mut a = a;
    a.jobs[0].extras_mut().type_speeds = Some(
        [
            ("k80".to_string(), 0.140_855_503_4),
            ("v100".to_string(), 1.0),
        ]
        .into(),
    );
    let mut csv = Vec::new();
    apiary_trace::write_csv(&a.jobs, &mut csv).unwrap();
    let c = read(&tmp("canon-rt.csv", &csv), &ReadOptions::default()).unwrap();
    assert_eq!(c.format, Format::Apiary);
    assert_eq!(c.jobs, a.jobs);
    let bad = String::from_utf8(csv.clone())
        .unwrap()
        .replace("k80:0.", "k80:-0.");
    let e = err_of(&tmp("canon-bad-speed.csv", bad.as_bytes()));
    assert!(e.contains("line 2") && e.contains("type_speeds"), "{e}");
    let mut jl = Vec::new();
    apiary_trace::write_jsonl(&a.jobs, &mut jl).unwrap();
    assert_eq!(
        read(&tmp("canon-rt.jsonl", &jl), &ReadOptions::default())
            .unwrap()
            .jobs,
        a.jobs
    );
}

fn zstd_compress(b: &[u8]) -> Vec<u8> {
    // A minimal zstd frame with one raw block, so the test needs no encoder.
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, b.len() as u8];
    let hdr = ((b.len() as u32) << 3) | 1; // last block, raw
    out.extend_from_slice(&hdr.to_le_bytes()[..3]);
    out.extend_from_slice(b);
    out
}

#[test]
fn spread_tables_from_gavel_and_pollux() {
    use apiary_trace::speed::{gavel_spread, pollux_spread};
    if let Some(p) = real("peers/gavel/simulation_throughputs.json") {
        let t = gavel_spread(&p, "v100").unwrap();
        // LM, batch 5, 2 GPUs: 40.352 / 185.724 iterations/s spread vs packed.
        let f = t.factor(Some("LM (batch size 5)"), None, 2, 2);
        assert!(
            (f - 40.35214697555348 / 185.72383101933428).abs() < 1e-9,
            "{f}"
        );
        // One node is never slowed; an unknown GPU type is an error naming it.
        assert_eq!(t.factor(Some("LM (batch size 5)"), None, 2, 1), 1.0);
        let e = gavel_spread(&p, "h100").unwrap_err().to_string();
        assert!(e.contains("h100"), "{e}");
    }
    if let Some(p) = real("peers/pollux/bert/placements.csv") {
        let t = pollux_spread(p.parent().unwrap().parent().unwrap()).unwrap();
        // Four bert replicas on four nodes are slower than on one.
        let four = t.factor(Some("bert"), None, 4, 4);
        assert!(four < 0.9, "{four}");
        // Two nodes are measured too (shapes 22 and 13), and are slower still for bert.
        let two = t.factor(Some("bert"), None, 4, 2);
        assert!(two < 1.0 && two != four, "{two} {four}");
        // Trace names map onto Pollux's models (resnet -> imagenet).
        assert!(t.factor(Some("resnet50"), None, 4, 4) < 1.0);
    }
}

#[test]
fn spread_loader_errors_name_file_and_line() {
    let dir = std::env::temp_dir().join(format!("apiary-pollux-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("m")).unwrap();
    std::fs::write(
        dir.join("m/placements.csv"),
        "placement,local_bsz,step_time,sync_time\n1,4,0.5,0.1\n1x,4,0.5,0.1\n",
    )
    .unwrap();
    let e = apiary_trace::speed::pollux_spread(&dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 3") && e.contains("placement"), "{e}");
    std::fs::write(
        dir.join("m/placements.csv"),
        "placement,local_bsz,step_time,sync_time\n1,4,-1,0.1\n",
    )
    .unwrap();
    let e = apiary_trace::speed::pollux_spread(&dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("step_time"), "{e}");
    // Windows line endings and a blank line: the same file line is named.
    std::fs::write(
        dir.join("m/placements.csv"),
        "placement,local_bsz,step_time,sync_time\r\n1,4,0.5,0.1\r\n\r\n1x,4,0.5,0.1\r\n",
    )
    .unwrap();
    let e = apiary_trace::speed::pollux_spread(&dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 4") && e.contains("placement"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_of_per_vc_files_is_one_trace_with_vcs() {
    let dir = std::env::temp_dir().join(format!("apiary-vc-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head = "timestamp,duration,num_gpus,gpu_time,cluster\n";
    std::fs::write(
        dir.join("b.trace"),
        format!("{head}2017-10-09 07:00:00,10,1,10,x\n2017-10-09 07:00:05,10,2,20,x\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("a.trace"),
        format!("{head}2017-10-09 07:00:05,10,4,40,y\n"),
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "not a trace").unwrap();
    let t = read(&dir, &ReadOptions::default()).unwrap();
    let got: Vec<_> = t
        .jobs
        .iter()
        .map(|j| (j.id.clone(), j.vc.clone(), j.gpus))
        .collect();
    // Each file keeps its own clock (its first job at 0), and equal submit times keep
    // file name order: a's job, then b's two.
    assert_eq!(got.len(), 3);
    assert_eq!((got[0].1.as_deref(), got[0].2), (Some("a"), 4));
    assert!(got[0].0.starts_with("a/"));
    assert_eq!((got[1].1.as_deref(), got[1].2), (Some("b"), 1));
    assert_eq!((got[2].1.as_deref(), got[2].2), (Some("b"), 2));
    assert_eq!(t.jobs[2].submit - t.jobs[1].submit, 5000);
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(err_of(&empty).contains("per-VC *.trace files"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gavel_per_vc_directory_carries_philly_vcs() {
    let p = shared().join("philly/gavel_msr_seed0");
    if !p.is_dir() {
        return;
    }
    let t = read(&p, &ReadOptions::default()).unwrap();
    let vcs: std::collections::BTreeSet<&str> =
        t.jobs.iter().filter_map(|j| j.vc.as_deref()).collect();
    assert_eq!(vcs.len(), 15);
    assert!(t.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
}

#[test]
fn gavel_physical_trace_carries_speeds_per_gpu_type() {
    let p = shared().join("peers/gavel/physical_cluster/artifact_evaluation.trace");
    if !p.is_file() {
        return;
    }
    let t = read(&p, &ReadOptions::default()).unwrap();
    // Job 0 is ResNet-50 at batch 64 on one GPU: 0.619 steps/s on a K80, 4.395 on a V100.
    let j = &t.jobs[0];
    assert_eq!(j.model.as_deref(), Some("ResNet-50 (batch size 64)"));
    assert!((j.type_speed("K80") - 0.619_028_220_2 / 4.394_774_823_3).abs() < 1e-9);
    assert_eq!(j.type_speed("v100"), 1.0);
    assert!(t.jobs.iter().all(|j| {
        j.extras()
            .type_speeds
            .as_ref()
            .is_some_and(|m| m.len() == 3)
    }));
}

#[test]
fn elasticflow_generator_gives_the_artifacts_fig10_trace() {
    // `generate_trace.py --num_jobs=100 --lam=1500 --min_ddl=1.5 --seed=1`: the job
    // ids, arrivals and deadlines below are those of the authors' shipped Fig. 10 log
    // (`pkusys/ElasticFlow`, `plot_figure/logs/figure10/edf/job.csv`, Apache-2.0).
    let o = apiary_trace::efgen::EfGenOptions {
        jobs: 100,
        lam: 1500.0,
        seed: 1,
        min_ddl: 1.5,
        max_ddl: 1.5,
        ..Default::default()
    };
    let tables = apiary_trace::elasticflow::Tables::builtin("A100").unwrap();
    let jobs = apiary_trace::efgen::generate(&o, &tables).unwrap();
    assert_eq!(jobs.len(), 100);
    for (id, submit, ddl) in [
        (0, 0, 5896),
        (1, 4686, 11932),
        (2, 9116, 10244),
        (3, 9203, 25437),
        (4, 9336, 11357),
        (5, 12043, 156466),
        (6, 14041, 161534),
        (13, 21461, 167129),
        (26, 44699, 917121),
        (40, 72602, 914377),
        (83, 152878, 668055),
        (93, 166596, 1026822),
        (99, 175378, 176516),
    ] {
        let j = &jobs[id];
        assert_eq!(
            (j.submit.trunc() as i64, j.ddl.trunc() as i64),
            (submit, ddl),
            "job {id}"
        );
    }
    // What the CSV says reads back as an ElasticFlow trace with its tables.
    let mut csv = Vec::new();
    apiary_trace::efgen::write(&jobs, &mut csv).unwrap();
    let p = tmp("efgen-fig10.csv", &csv);
    let t = apiary_trace::read(&p, &Default::default()).unwrap();
    assert_eq!(t.jobs.len(), 100);
    assert!(
        t.jobs
            .iter()
            .all(|j| j.extras().scaling.is_some() && j.deadline.is_some())
    );
    assert_eq!(t.jobs[0].submit, 0);
    assert_eq!(t.jobs[0].deadline, Some(5_896_000));
    // Another seed, another trace; the same seed, the same one.
    let again = apiary_trace::efgen::generate(&o, &tables).unwrap();
    assert_eq!(jobs, again);
    let seed2 = apiary_trace::efgen::EfGenOptions { seed: 2, ..o };
    let other = apiary_trace::efgen::generate(&seed2, &tables).unwrap();
    assert_ne!(other[1].submit, jobs[1].submit);
}

/// The quick path (plain files split on bytes) and the CSV reader it stands in for read
/// every real file alike: the same file with its first header field quoted, or for the
/// tab-separated traces a lone `\r` at the end (a blank record the reader skips), goes
/// through the CSV reader and must give the same jobs; so must Windows line endings.
#[test]
fn the_quick_path_reads_as_the_csv_reader_does() {
    for (rel, tab) in [
        ("philly/philly.csv", false),
        ("philly/gavel_msr_seed0/0e4a51.trace", true),
        ("itp/elasticflow/cluster10.csv", false),
        ("peers/muri/trace-data/trace3.csv", false),
        ("peers/tiresias/60_job.csv", false),
        ("peers/gavel/physical_cluster/max_min_fairness.trace", true),
    ] {
        let Some(p) = real(rel) else { continue };
        let data = std::fs::read(&p).unwrap();
        let ext = if tab { "trace" } else { "csv" };
        let slow = if tab {
            let mut d = data.clone();
            d.push(b'\r');
            d
        } else {
            let text = String::from_utf8(data.clone()).unwrap();
            let (head, rest) = text.split_once(',').unwrap();
            format!("\"{head}\",{rest}").into_bytes()
        };
        let crlf = String::from_utf8(data.clone())
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes();
        let opts = ReadOptions {
            format: Some(read(&p, &ReadOptions::default()).unwrap().format),
            ..ReadOptions::default()
        };
        let jobs = |bytes: &[u8], name: &str| {
            let f = tmp(&format!("quick-{name}.{ext}"), bytes);
            let t = read(&f, &opts).unwrap_or_else(|e| panic!("{rel} ({name}): {e}"));
            format!("{:?} {} {:?}", t.jobs, t.skipped, t.excluded)
        };
        let quick = jobs(&data, "quick");
        assert_eq!(quick, jobs(&slow, "slow"), "{rel}: CSV reader differs");
        assert_eq!(quick, jobs(&crlf, "crlf"), "{rel}: CRLF differs");
    }
}

/// The GPU-sharing reader keeps every pod of the openb lists, CPU-only ones too, and
/// every node.
#[test]
fn openb_pods_and_nodes_are_read_whole() {
    use apiary_trace::openb::{read_nodes, read_pods};
    if let Some(p) = real("alibaba/gpu-v2023/openb_pod_list_default.csv") {
        let pods = read_pods(&p).unwrap();
        assert_eq!(pods.len(), 8152);
        let cpu_only = pods.iter().filter(|p| p.num_gpu == 0).count();
        let fractional = pods.iter().filter(|p| p.is_fractional()).count();
        assert!(
            cpu_only > 0 && fractional > cpu_only,
            "{cpu_only} {fractional}"
        );
        assert_eq!(
            pods.iter().map(|p| p.total_gpu_milli()).sum::<u64>(),
            6_086_800
        );
        assert!(pods.iter().all(|p| p.qos.is_some() && p.creation.is_some()));
    }
    if let Some(p) = real("alibaba/gpu-v2023/openb_pod_list_gpuspec33.csv") {
        let pods = read_pods(&p).unwrap();
        let constrained = pods.iter().filter(|p| !p.gpu_spec.is_empty()).count();
        assert_eq!(constrained, 8152 - 5764);
        let v100 = pods.iter().find(|p| p.gpu_spec.len() == 2).unwrap();
        assert!(v100.accepts_type("V100M32") && !v100.accepts_type("T4"));
    }
    if let Some(p) = real("alibaba/gpu-v2023/openb_node_list_gpu_node.csv") {
        let nodes = read_nodes(&p).unwrap();
        assert_eq!(nodes.len(), 1213);
        assert_eq!(nodes.iter().map(|n| u64::from(n.gpus)).sum::<u64>(), 6212);
    }
}

#[test]
fn malformed_openb_rows_name_file_line_and_field() {
    use apiary_trace::openb::{read_nodes, read_pods};
    let head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";
    let ok = "p0,1000,1024,1,500,,LS,Running,0,10,0\n";
    let cases = [
        (
            "p1,1000,1024,2,500,,LS,Running,0,10,0\n",
            "field 'gpu_milli'",
            "only a one-GPU pod shares",
        ),
        (
            "p1,1000,1024,1,1500,,LS,Running,0,10,0\n",
            "field 'gpu_milli'",
            "over the most allowed, 1000",
        ),
        (
            "p1,x,1024,1,500,,LS,Running,0,10,0\n",
            "field 'cpu_milli'",
            "not a whole number",
        ),
        (
            "p1,1000,1024,9,1000,,LS,Running,0,10,0\n",
            "field 'num_gpu'",
            "most allowed, 8",
        ),
        (
            "p1,1000,1024,1,500,,Gold,Running,0,10,0\n",
            "field 'qos'",
            "one of LS, BE",
        ),
        (
            "p1,1000,1024,1,500,,LS,Running,20,10,0\n",
            "field 'deletion_time'",
            "before creation_time",
        ),
        (
            "p1,1000,1024,1,0,,LS,Running,0,10,0\n",
            "field 'gpu_milli'",
            "0 for a pod with GPUs",
        ),
    ];
    for (row, field, msg) in cases {
        let p = tmp("openb.csv", format!("{head}{ok}{row}").as_bytes());
        let e = read_pods(&p).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains(field) && e.contains(msg),
            "{row}: {e}"
        );
    }
    let p = tmp("nocol.csv", b"name,cpu_milli\np,1\n");
    assert!(
        read_pods(&p)
            .unwrap_err()
            .to_string()
            .contains("field 'memory_mib': no such column")
    );
    let p = tmp(
        "nodes.csv",
        b"sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n",
    );
    let e = read_nodes(&p).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("field 'model'"), "{e}");
}

//! The IO model (`--io`): jobs slowed by what they read, worked by hand on one job; the
//! model off changes nothing; SiloD's shares fit the cluster and beat LRU caches.

use apiary_model::cpu::CpuPool;
use apiary_model::io::{CacheMode, DataProfile, GB, MB, Storage};
use apiary_model::{ClusterSpec, Job, RunOutcome, SECOND};
use apiary_policy::spec::{Capabilities, Capability, PolicySpec};
use apiary_policy::{Ctx, Handles, Params, PlacementStrategy, Policy, PolicyError, registry};
use apiary_report::{Percentile, Summary};
use apiary_sim::{Config, DurationModel, SimError};

fn run(
    cluster: &str,
    policy: &mut dyn Policy,
    jobs: Vec<Job>,
    io: Option<Storage>,
) -> Result<RunOutcome, SimError> {
    let c = ClusterSpec::preset(cluster).unwrap().build().unwrap();
    let cfg = Config {
        io,
        ..Config::default()
    };
    apiary_sim::run(c, jobs, policy, &DurationModel, &cfg, &mut |_| {})
}

fn build(name: &str, params: &[&str]) -> Box<dyn Policy> {
    registry::build(name, &Params::from_pairs(params.iter().copied()).unwrap()).unwrap()
}

/// A 1-GPU job of 10,000 s reading 100 MB/s at full speed: 10^6 samples of 100 KB,
/// 1,000 a second, so an epoch is 1,000 s of its work.
fn reader() -> Job {
    let mut j = Job::new("r", 0, 1, 10_000 * SECOND);
    j.extras_mut().data = Some(DataProfile {
        model: 0,
        dataset: 100.0 * GB,
        sample: 100e3,
        gpu_rate: 1000.0,
    });
    j
}

fn storage(cache_gb: f64, mbs: f64, cache: CacheMode) -> Storage {
    Storage {
        cache_per_gpu: cache_gb * GB,
        bandwidth_per_gpu: mbs * MB,
        cache,
    }
}

#[test]
fn a_job_runs_at_the_min_of_its_gpus_and_its_io() {
    let finish = |io| {
        let out = run(
            "n1g1",
            build("fifo", &[]).as_mut(),
            vec![reader()],
            Some(io),
        )
        .unwrap();
        (out.jobs[0].finish.unwrap(), out)
    };
    // No cache and 50 MB/s: half speed throughout.
    let (t, out) = finish(storage(0.0, 50.0, CacheMode::Uniform));
    assert_eq!(t, 20_000 * SECOND);
    let io = out.io.unwrap();
    assert_eq!(io.hit_ratio(), 0.0);
    // It read its 10 epochs (1 TB) from remote storage, at full use of the link.
    assert!((io.remote_bytes - 1e12).abs() < 1e3, "{}", io.remote_bytes);
    assert!((io.util() - 1.0).abs() < 1e-9);
    // Its GPU waited for data half of the 20,000 s.
    assert!(
        (io.stalled_gpu_s - 10_000.0).abs() < 1e-6,
        "{}",
        io.stalled_gpu_s
    );
    // Half the dataset pinned: the first epoch is cold (1,000 s of work at half speed),
    // then it hits half and needs 50 MB/s, which it has.
    let (t, out) = finish(storage(50.0, 50.0, CacheMode::Uniform));
    assert_eq!(t, 11_000 * SECOND);
    assert!((out.io.unwrap().hit_ratio() - 0.45).abs() < 1e-9);
    // LRU of half the dataset hits 0.5 + 0.5 ln 0.5 = 15.3 %: IO-bound after warming.
    let (t, _) = finish(storage(50.0, 50.0, CacheMode::Lru));
    let lru = 0.5 + 0.5 * 0.5f64.ln();
    let want = 2000.0 + 9000.0 * (1.0 - lru) / 0.5;
    assert!(
        ((t / SECOND) as f64 - want).abs() <= 1.0,
        "{t} against {want}"
    );
    // Enough bandwidth: trace speed.
    let (t, _) = finish(storage(0.0, 100.0, CacheMode::Lru));
    assert_eq!(t, 10_000 * SECOND);
}

#[test]
fn jobs_share_remote_bandwidth_max_min() {
    // Two readers on two GPUs and 50 MB/s per GPU: 100 MB/s for 200 MB/s of demand,
    // so both run at half speed and end together.
    let mut b = reader();
    b.id = "s".into();
    let out = run(
        "n1g2",
        build("fifo", &[]).as_mut(),
        vec![reader(), b],
        Some(storage(0.0, 50.0, CacheMode::Lru)),
    )
    .unwrap();
    assert!(out.jobs.iter().all(|j| j.finish == Some(20_000 * SECOND)));
    // A small job beside a reader: the small one gets all it needs.
    let mut small = reader();
    small.id = "small".into();
    small.extras_mut().data.as_mut().unwrap().gpu_rate = 100.0;
    let out = run(
        "n1g2",
        build("fifo", &[]).as_mut(),
        vec![reader(), small],
        Some(storage(0.0, 50.0, CacheMode::Lru)),
    )
    .unwrap();
    assert_eq!(out.jobs[1].finish, Some(10_000 * SECOND));
    // The reader gets the other 90 MB/s, 0.9 of full speed, for 10,000 s, then all
    // 100 MB/s for its last 1,000 s of work.
    assert_eq!(out.jobs[0].finish, Some(11_000 * SECOND));
}

#[test]
fn without_io_nothing_changes_and_with_room_to_spare_neither_does() {
    let jobs = apiary_sim::testing::sample_jobs();
    let c = "n4g4";
    let plain = run(c, build("tiresias", &[]).as_mut(), jobs.clone(), None).unwrap();
    assert!(plain.io.is_none());
    let roomy = run(
        c,
        build("tiresias", &[]).as_mut(),
        jobs,
        Some(storage(0.0, 1e6, CacheMode::Lru)),
    )
    .unwrap();
    let f = |o: &RunOutcome| o.jobs.iter().map(|j| j.finish).collect::<Vec<_>>();
    assert_eq!(f(&plain), f(&roomy));
    let io = roomy.io.unwrap();
    assert_eq!(io.assigned.drawn_sizes, 16);
    assert!(io.remote_bytes > 0.0);
}

/// A policy that gives its one running job more cache than the cluster has.
struct Greedy;
const GREEDY: PolicySpec = PolicySpec {
    name: "greedy-cache",
    about: "test",
    capabilities: Capabilities::of(&[Capability::Io]),
    params: &[],
    build: |_| Ok(Box::new(Greedy)),
};
impl Policy for Greedy {
    fn spec(&self) -> &'static PolicySpec {
        &GREEDY
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let pending: Vec<_> = ctx.pending_jobs().unwrap_or_default().to_vec();
        for j in pending {
            ctx.start_with(j, PlacementStrategy::Consolidated);
        }
        let running: Vec<_> = ctx.running().to_vec();
        let mut io = ctx.io()?;
        let too_much = io.total_cache() * 2.0;
        for j in running {
            io.set(j, too_much, 0.0);
        }
        Ok(())
    }
}

#[test]
fn a_policy_cannot_give_more_cache_than_there_is() {
    let e = run(
        "n1g1",
        &mut Greedy,
        vec![reader()],
        Some(storage(10.0, 50.0, CacheMode::Lru)),
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(
            e,
            SimError::OverAllocated {
                resource: "cache",
                ..
            }
        ),
        "{m}"
    );
    assert!(m.contains("greedy-cache") && m.contains("cache"), "{m}");
}

fn sample() -> Vec<Job> {
    let trace = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/traces/philly-sample.csv");
    apiary_trace::read(&trace, &Default::default())
        .unwrap()
        .jobs
}

#[test]
fn silod_beats_sjf_with_lru_caches_on_the_philly_sample() {
    let summary = |policy: &str, io: Option<Storage>| {
        let out = run("n64g8", build(policy, &[]).as_mut(), sample(), io).unwrap();
        Summary::of(&out, Percentile::NearestRank)
    };
    let io = Some(Storage::default());
    let sjf = summary("sjf", io);
    let silod = summary("silod", io);
    let free = summary("sjf", None);
    assert!(
        silod.jct_mean < sjf.jct_mean,
        "{} {}",
        silod.jct_mean,
        sjf.jct_mean
    );
    // Pooled uniform caching serves nearly every byte, so reads never hold SJF back.
    assert!(silod.cache_hit_ratio.unwrap() > sjf.cache_hit_ratio.unwrap());
    assert!((silod.jct_mean - free.jct_mean).abs() < 1e-6 * free.jct_mean);
    assert_eq!(silod.io_model.unwrap().allocated_by, "policy");
    assert_eq!(sjf.io_model.unwrap().allocated_by, "lru");
    // silod without --io runs under the defaults rather than refusing.
    let default = summary("silod", None);
    assert_eq!(default.jct_mean, silod.jct_mean);
}

/// A 1-GPU ResNet-18 of 2,400 s: Synergy's speed is 1 at 9 CPUs per GPU, 1/2.4 at 3.
fn res18(id: &str) -> Job {
    let mut j = Job::new(id, 0, 1, 2400 * SECOND);
    j.model = Some("resnet18".into());
    j
}

fn run_cpu(
    cluster: &str,
    policy: &mut dyn Policy,
    jobs: Vec<Job>,
    cpus_per_gpu: f64,
) -> RunOutcome {
    let c = ClusterSpec::preset(cluster).unwrap().build().unwrap();
    let cfg = Config {
        cpu: Some(CpuPool { cpus_per_gpu }),
        ..Config::default()
    };
    apiary_sim::run(c, jobs, policy, &DurationModel, &cfg, &mut |_| {}).unwrap()
}

#[test]
fn input_pipelines_hold_gpus_back_and_goldminer_lends_idle_cpus() {
    // Fixed CPUs: 3 per GPU, so 2.4 times as long; its GPU waits 1.4/2.4 of the time.
    let out = run_cpu("n1g4", build("fifo", &[]).as_mut(), vec![res18("a")], 3.0);
    assert_eq!(out.jobs[0].finish, Some(5760 * SECOND));
    let cpu = out.cpu.as_ref().unwrap();
    assert!(
        (cpu.stalled_gpu_s - 3360.0).abs() < 1e-6,
        "{}",
        cpu.stalled_gpu_s
    );
    assert_eq!(cpu.allocated_by, "fixed");
    // 3 of the node's 12 CPUs in use the whole run.
    assert!((cpu.util() - 0.25).abs() < 1e-9);
    // GoldMiner gives the job the idle GPUs' CPUs too: 9 it can use of 12.
    let out = run_cpu(
        "n1g4",
        build("goldminer", &[]).as_mut(),
        vec![res18("a")],
        3.0,
    );
    assert_eq!(out.jobs[0].finish, Some(2400 * SECOND));
    assert_eq!(out.cpu.as_ref().unwrap().allocated_by, "policy");
    // Four jobs share the 12 CPUs. Synergy's curve gains more from a 4th CPU than from
    // a 3rd, so the greedy gives 4, 3, 3 and 2 (speeds 1.3, 1, 1 and 0.72 of 2.4, more
    // in all than four times 1): the mean JCT is below fixed CPUs' 5,760 s.
    let four: Vec<Job> = (0..4).map(|k| res18(&format!("j{k}"))).collect();
    let out = run_cpu("n1g4", build("goldminer", &[]).as_mut(), four, 3.0);
    let mean = out.jobs.iter().map(|j| j.finish.unwrap()).sum::<u64>() as f64 / 4.0;
    assert!(mean < 5760.0 * SECOND as f64, "{mean}");
    // The first, with 4, ends first: 2,400 s of work at 1.3 / 2.4.
    let first = out.jobs[0].finish.unwrap() as f64;
    assert!((first - 2400e3 * 2.4 / 1.3).abs() <= 1.0, "{first}");
    // A language model needs a CPU per GPU and no more: GoldMiner gives the rest to the
    // image model beside it, which then runs at 6 CPUs' speed (1.75 / 2.4) until...
    let mut lm = Job::new("lm", 0, 1, 2400 * SECOND);
    lm.model = Some("bert".into());
    let out = run_cpu(
        "n1g2",
        build("goldminer", &[]).as_mut(),
        vec![res18("a"), lm],
        3.0,
    );
    assert_eq!(out.jobs[1].finish, Some(2400 * SECOND));
    // ... the language model ends: 5 CPUs for 2,400 s (1.53/2.4 of its work), then 6.
    let done = 2400.0 * 1.53 / 2.4;
    let want = 2400.0 + (2400.0 - done) / (1.75 / 2.4);
    let got = out.jobs[0].finish.unwrap() as f64 / SECOND as f64;
    assert!((got - want).abs() <= 1.0, "{got} against {want}");
}

#[test]
fn goldminer_beats_fixed_cpus_on_the_philly_sample() {
    let summary = |policy: &str| {
        let out = run_cpu("n64g8", build(policy, &[]).as_mut(), sample(), 3.0);
        Summary::of(&out, Percentile::NearestRank)
    };
    let fixed = summary("fifo");
    let gm = summary("goldminer");
    assert!(
        gm.jct_mean < fixed.jct_mean,
        "{} {}",
        gm.jct_mean,
        fixed.jct_mean
    );
    assert!(gm.util_computing.unwrap() > fixed.util_computing.unwrap());
    assert!(gm.cpu_util.unwrap() > fixed.cpu_util.unwrap());
    assert_eq!(gm.cpu_model.unwrap().allocated_by, "policy");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// Under both models, on random jobs and settings, SiloD's and GoldMiner's shares
    /// always fit (the models stop the run otherwise), every job finishes, and no job
    /// runs faster than its GPUs allow.
    #[test]
    fn shares_fit_and_every_job_finishes(
        w in proptest::collection::vec((0u64..400, 0usize..4, 1u64..300), 1..30),
        mbs in 1.0f64..100.0,
        gb in 0.0f64..50.0,
        cpus in 0.5f64..12.0,
        seed in 0u64..1000,
    ) {
        let mut w = w;
        w.sort_by_key(|x| x.0);
        let jobs: Vec<Job> = w
            .iter()
            .enumerate()
            .map(|(i, &(s, g, d))| Job::new(format!("{i}"), s * SECOND, [1, 2, 4, 8][g], d * SECOND))
            .collect();
        for policy in ["fifo", "silod", "silod:host=themis", "goldminer", "goldminer:host=tiresias"] {
            let (name, params) = policy.split_once(':').unwrap_or((policy, ""));
            let params: Vec<&str> = params.split(',').filter(|p| !p.is_empty()).collect();
            let c = ClusterSpec::preset("n2g8").unwrap().build().unwrap();
            let cfg = Config {
                io: Some(storage(gb, mbs, CacheMode::Lru)),
                cpu: Some(CpuPool { cpus_per_gpu: cpus }),
                seed,
                ..Config::default()
            };
            let out = apiary_sim::run(c, jobs.clone(), build(name, &params).as_mut(), &DurationModel, &cfg, &mut |_| {});
            let out = out.map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{policy}: {e}")))?;
            for j in &out.jobs {
                let f = j.finish.ok_or_else(|| proptest::test_runner::TestCaseError::fail(format!("{policy}: job {} never finished", j.id)))?;
                proptest::prop_assert!(f - j.first_start.unwrap() + 1 >= j.duration, "{policy}: job {} ran faster than its GPUs", j.id);
            }
        }
    }
}

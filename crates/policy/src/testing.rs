//! Conformance suites for this crate's extension traits, in the manner of openraft's
//! store suite: what every [`Placer`] and every [`crate::Tenancy`] must keep whatever it
//! decides. Each implementation's tests call the suite; a new implementation does the
//! same. The suites panic, naming the implementation and the case, on a violation.

use crate::placement::PlacementStrategy;
use crate::vc::{DEFAULT_VC, QuotaPlacer, Sharing, hived_config};
use crate::world::{JobIdx, Status, World};
use crate::{Params, Placer, Policy, TenantShare, TenantWait};
use apiary_model::{Cluster, ClusterSpec, Job, Placement};

/// Jobs of one tenant (`vc`), submitted at once, of the GPU counts given.
fn tenant_jobs(vc: &str, sizes: &[u32]) -> Vec<Job> {
    sizes
        .iter()
        .enumerate()
        .map(|(k, &g)| {
            let mut j = Job::new(format!("{vc}-{k}"), 0, g, 1_000);
            j.vc = Some(vc.into());
            j
        })
        .collect()
}

/// Checks `placer` (given `capacity` GPUs of `cluster` for tenant `vc`) on a run of
/// placements: what it places is free, exactly as many GPUs as asked, on nodes of the
/// cluster; a refusal leaves nothing behind; what it places after releases fits again;
/// nothing larger than its share places; and two placers built alike decide alike.
pub fn placer_suite(
    name: &str,
    cluster: &Cluster,
    capacity: u32,
    make: &dyn Fn() -> Box<dyn Placer>,
) {
    let sizes = [1, 2, 4, 1, capacity, capacity + 1, 3, 2];
    let run = |p: &mut dyn Placer| -> Vec<Option<Placement>> {
        let mut w = World::new(cluster.clone(), tenant_jobs(DEFAULT_VC, &sizes));
        let mut got = Vec::new();
        for i in 0..sizes.len() as JobIdx {
            w.submit(i);
            let mut out = Placement::default();
            let placed = p.place(&w, i, PlacementStrategy::Consolidated, &mut out);
            if !placed {
                assert!(
                    out.parts.is_empty(),
                    "{name}: a refusal leaves GPUs in `out`"
                );
                got.push(None);
                continue;
            }
            assert_eq!(
                out.gpus(),
                sizes[i as usize],
                "{name}: job {i} got other than it asked"
            );
            let mut nodes: Vec<u32> = out.parts.iter().map(|p| p.0).collect();
            nodes.dedup();
            assert_eq!(nodes.len(), out.parts.len(), "{name}: a node named twice");
            assert!(
                out.parts
                    .iter()
                    .all(|&(n, m)| (n as usize) < cluster.nodes.len()
                        && m & !w.state.free_mask(n) == 0),
                "{name}: job {i} placed on GPUs that are not free"
            );
            assert!(
                w.start(i, out.clone()),
                "{name}: its placement does not start"
            );
            got.push(Some(out));
        }
        assert!(
            got[5].is_none(),
            "{name}: a job larger than the tenant's {capacity} GPUs placed"
        );
        // Everything goes back; the largest job that fits places again.
        for i in 0..sizes.len() as JobIdx {
            if w.rt[i as usize].status == Status::Running {
                w.finish(i);
            }
            p.release(i);
        }
        let mut again = World::new(cluster.clone(), tenant_jobs(DEFAULT_VC, &[capacity]));
        again.submit(0);
        let mut out = Placement::default();
        assert!(
            p.place(&again, 0, PlacementStrategy::Consolidated, &mut out),
            "{name}: its whole share does not place after everything was released"
        );
        got
    };
    let first = run(make().as_mut());
    assert!(
        first[0].is_some(),
        "{name}: a 1-GPU job does not place on an empty share"
    );
    assert_eq!(
        first,
        run(make().as_mut()),
        "{name}: two placers built alike differ"
    );
}

/// Runs [`placer_suite`] on every placer of this crate.
pub fn every_placer() {
    let c = ClusterSpec::preset("n4g4")
        .and_then(|s| s.build())
        .expect("preset");
    placer_suite("quota", &c, c.total_gpus, &|| Box::new(QuotaPlacer));
    for racks in [true, false] {
        let all: Vec<u32> = (0..c.nodes.len() as u32).collect();
        let vcs = vec![(DEFAULT_VC.to_string(), 2), ("other".to_string(), 2)];
        let cfg = hived_config(&c, &all, &vcs, racks).expect("config");
        placer_suite(&format!("hived racks={racks}"), &c, 8, &|| {
            Box::new(crate::vc::HivedPlacer::new(&c, &cfg).expect("placer"))
        });
    }
}

/// Checks a VC-sharing `policy` as a [`crate::Tenancy`] on `cluster`: its plan for `jobs`
/// names every VC of the jobs once and fits the cluster; once attached, a job that fits
/// its empty VC's share does not wait for its tenant, one that does not is refused at
/// admission, a started job counts against its share; and it says how it shares.
pub fn tenancy_suite(name: &str, cluster: &Cluster, jobs: &[Job], mut policy: Box<dyn Policy>) {
    let sharing = Sharing::parse(policy.name());
    let t = policy
        .tenancy()
        .unwrap_or_else(|| panic!("{name}: no tenancy"));
    assert_eq!(t.sharing(), sharing, "{name}: shares as it is named");
    let table = t
        .plan(cluster, jobs)
        .unwrap_or_else(|e| panic!("{name}: plan: {e}"));
    let mut names: Vec<&str> = table.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    let unique = names.len();
    names.dedup();
    assert_eq!(names.len(), unique, "{name}: a VC twice in its plan");
    for j in jobs {
        let vc = j.vc.as_deref().unwrap_or(DEFAULT_VC);
        assert!(
            names.contains(&vc),
            "{name}: VC {vc} of job {} has no share",
            j.id
        );
    }
    if sharing.is_some_and(Sharing::cells) {
        let nodes: u64 = table.iter().map(|s| u64::from(s.nodes)).sum();
        assert!(
            nodes <= cluster.nodes.len() as u64,
            "{name}: more cells than nodes"
        );
    }
    let shares: Vec<TenantShare> = table.clone();
    t.set_table(table);
    policy
        .attach(cluster)
        .unwrap_or_else(|e| panic!("{name}: attach: {e}"));
    let mut w = World::new(cluster.clone(), jobs.to_vec());
    let mut pass = crate::Pass::default();
    let who = crate::Declared::of(policy.as_ref());
    let mut admitted = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let i = i as JobIdx;
        w.submit(i);
        let vc = j.vc.as_deref().unwrap_or(DEFAULT_VC);
        let share = shares.iter().find(|s| s.name == vc).expect("planned");
        let cap = match sharing {
            Some(Sharing::Quota) => share.gpus,
            _ => u64::from(share.nodes) * u64::from(cluster.nodes[0].gpus),
        };
        let ok = policy.admit(&pass.ctx(&mut w, who), i).is_ok();
        assert_eq!(
            ok,
            u64::from(j.gpus) <= cap,
            "{name}: job {} of {} GPUs against a share of {cap}",
            j.id,
            j.gpus
        );
        if ok {
            admitted.push(i);
        }
    }
    let tenants = policy.tenants().expect("a tenancy reads");
    for &i in &admitted {
        assert_eq!(
            tenants.why_waits(&w.jobs[i as usize]),
            None,
            "{name}: job {i} waits for its tenant before anything runs"
        );
    }
    // A pass starts what fits; then a job of a VC whose share is taken says so.
    policy
        .schedule(&mut pass.ctx(&mut w, who))
        .unwrap_or_else(|e| panic!("{name}: schedule: {e}"));
    let tenants = policy.tenants().expect("a tenancy reads");
    for &i in &admitted {
        if w.rt[i as usize].status != Status::Pending {
            continue;
        }
        if let Some(TenantWait::ShareTaken { used, capacity }) =
            tenants.why_waits(&w.jobs[i as usize])
        {
            assert!(
                used + u64::from(w.jobs[i as usize].gpus) > capacity,
                "{name}: job {i} said to wait for a share with room"
            );
        }
    }
}

/// Runs [`tenancy_suite`] on every way of sharing, hosting FIFO.
pub fn every_tenancy() {
    let c = ClusterSpec::preset("n4g4")
        .and_then(|s| s.build())
        .expect("preset");
    let mut jobs = tenant_jobs("a", &[4, 4, 2, 1]);
    jobs.extend(tenant_jobs("b", &[1, 2, 12]));
    for sharing in Sharing::ALL {
        let params = Params::from_pairs(["intra=fifo"]).expect("pairs");
        let policy = crate::registry::build(sharing.name(), &params).expect("builds");
        tenancy_suite(sharing.name(), &c, &jobs, policy);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_placer_conforms() {
        super::every_placer();
    }

    #[test]
    fn every_tenancy_conforms() {
        super::every_tenancy();
    }
}

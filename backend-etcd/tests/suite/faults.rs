//! Safety through member failures, each test on a private three-member
//! cluster of its own, with the real clock:
//!
//! * the leader killed in the middle of a mixed workload (admissions with
//!   `Interrupt` over overlapping scopes, renewals, transitions, takeovers,
//!   queue claims and settlements): no two owners of a scope, every fence
//!   unique and growing, no acknowledged admission or terminal write lost,
//!   and the killed member, restarted, serves all of it;
//! * two of three members down: every call answers `Err` (retryable, outcome
//!   unknown) or a true outcome, a keeper fail-stops at its confirmed
//!   deadline, and once the quorum returns nothing unsafe happens: the
//!   record is taken over only after the keeper stopped, under a greater
//!   fence;
//! * a member killed and restarted from its data directory rejoins and
//!   serves what was written while it was down.
//!
//! Nothing here asserts a duration: every wait is for a condition, bounded
//! generously. Each test prints its figures (calls, errors, leader change)
//! on stderr; RELIABILITY.md quotes them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_backend_etcd::{EtcdConfig, EtcdStore};
use tenure_keeper::Keeper;
use tenure_keeper::{AdmitOutcome, KeeperConfig, LossCause};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, JobSettle, JobState, NewJob};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, Error, FenceStore, LeaseRecord, LeaseStore,
    Renewal, Status, StatusChange, Takeover, TakeoverRequest, Transition,
};
use tenure_test_support::etcd::{PrivateEtcd, MAX_TXN_OPS};
use tokio::time::Instant;

/// How long one call may take before it answers `Timeout`: short, so calls
/// during an election fail fast instead of piling up.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The most any condition may take to come true, however loaded the
/// machine.
const PATIENCE: Duration = Duration::from_secs(60);
/// Pause between two looks at a condition.
const POLL_STEP: Duration = Duration::from_millis(50);
/// Workers of the mixed workload, and rounds each runs.
const WORKERS: usize = 4;
const ROUNDS: usize = 30;
/// The scopes they admit over, two overlapping ones per admission.
const SCOPES: [&str; 4] = ["s0", "s1", "s2", "s3"];

/// A three-member cluster, or `None` when etcd is not installed (the test
/// then skips, or fails under `TENURE_REQUIRE_SERVICES=1`).
async fn cluster(test: &str) -> Option<PrivateEtcd> {
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required(test, &reason);
        return None;
    }
    Some(
        PrivateEtcd::start(3)
            .await
            .expect("a private three-member etcd cluster"),
    )
}

/// A store on `endpoints` under a fresh prefix (or `prefix`).
async fn store_on(endpoints: &[String], prefix: &str) -> EtcdStore {
    let config = EtcdConfig::new(endpoints.iter().cloned(), prefix)
        .operation_timeout(CALL_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .max_txn_ops(MAX_TXN_OPS);
    EtcdStore::connect(config)
        .await
        .expect("the store connects")
}

/// Calls `call` until it answers, every error meanwhile retryable.
async fn answered<T, Fut>(what: &str, mut call: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = tenure_lease_core::Result<T>>,
{
    let give_up = Instant::now() + PATIENCE;
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(error) => {
                assert_unknown(what, &error);
                assert!(Instant::now() < give_up, "{what}: still failing: {error}");
                tokio::time::sleep(POLL_STEP).await;
            }
        }
    }
}

/// Admits `request` (free scopes) until it is known to have landed: a retry
/// after an unknown outcome that answers `AlreadyExists` means the first
/// landed, and the record read back shows its claim.
async fn admitted(store: &EtcdStore, request: &AdmitRequest) -> LeaseRecord {
    let give_up = Instant::now() + PATIENCE;
    loop {
        match store.admit(request).await {
            Ok(admission) => {
                return admission
                    .admitted()
                    .cloned()
                    .expect("admitted on free scopes")
            }
            Err(error) if error.kind() == tenure_lease_core::ErrorKind::AlreadyExists => {
                return answered("read back an admission", || store.get(&request.id))
                    .await
                    .expect("the landed admission exists");
            }
            Err(error) => {
                assert_unknown("admit", &error);
                assert!(Instant::now() < give_up, "admit: still failing: {error}");
                tokio::time::sleep(POLL_STEP).await;
            }
        }
    }
}

/// An error under a member failure must be a retryable, unknown outcome.
fn assert_unknown(what: &str, error: &Error) {
    assert!(
        error.is_retryable() && error.is_outcome_unknown(),
        "{what}: an error under a member failure must be retryable with the outcome unknown: {error}"
    );
}

/// What the workload was told, acknowledged.
#[derive(Debug, Default, Clone)]
struct Acks {
    /// Every fence handed out in an answer, with who got it.
    fences: Vec<(u64, String)>,
    /// Admitted record ids and their fences.
    admitted: BTreeMap<String, u64>,
    /// Records whose terminal write was applied, and to what.
    terminal: BTreeMap<String, Status>,
    /// Jobs whose completion was settled.
    completed: BTreeSet<String>,
    /// Calls answered, and calls that answered `Err`.
    calls: usize,
    errors: usize,
}

/// One worker of the mixed workload: `ROUNDS` rounds of admission,
/// renewal, transition, takeover and a queue claim; every fence it is
/// handed must exceed the one before.
async fn worker(
    store: EtcdStore,
    worker: usize,
    acks: Arc<Mutex<Acks>>,
    progress: Arc<AtomicUsize>,
) {
    let owner = format!("w{worker}");
    let mut last_fence = 0;
    let mut note = |result: Result<Vec<u64>, &Error>, acks: &Mutex<Acks>| {
        let mut acks = acks.lock().expect("acks");
        acks.calls += 1;
        match result {
            Ok(fences) => {
                for fence in fences {
                    assert!(
                        fence > last_fence,
                        "{owner}: fence {fence} after {last_fence}"
                    );
                    last_fence = fence;
                    acks.fences.push((fence, owner.clone()));
                }
            }
            Err(error) => {
                assert_unknown(&owner, error);
                acks.errors += 1;
            }
        }
    };
    for round in 0..ROUNDS {
        let id = format!("{owner}-{round}");
        let scopes = [
            SCOPES[(worker + round) % SCOPES.len()],
            SCOPES[(worker + round + 1) % SCOPES.len()],
        ];
        let ttl = (round % 2 == 0).then_some(Duration::from_secs(60));
        let mut request = AdmitRequest::new(&id, &owner)
            .scopes(scopes)
            .strategy(AdmitStrategy::Interrupt);
        if let Some(ttl) = ttl {
            request = request.ttl(ttl);
        }
        let claim = match store.admit(&request).await {
            Ok(Admission::Admitted {
                record,
                interrupted,
            }) => {
                // The interruptions' fences come first, then the record's.
                let mut fences: Vec<u64> = interrupted.iter().map(|holder| holder.fence).collect();
                fences.push(record.fence);
                note(Ok(fences), &acks);
                acks.lock()
                    .expect("acks")
                    .admitted
                    .insert(id.clone(), record.fence);
                record.claim()
            }
            Ok(_) => {
                note(Ok(Vec::new()), &acks);
                None
            }
            Err(error) => {
                note(Err(&error), &acks);
                None
            }
        };
        if let Some(claim) = claim {
            if let Some(ttl) = ttl {
                let renewed = store.renew(&claim, ttl).await.map(|_| Vec::new());
                note(renewed.as_ref().map(Clone::clone), &acks);
            }
            let change = if round % 3 == 0 {
                StatusChange::succeeded()
            } else {
                StatusChange::running()
            };
            match store.transition(&claim, &change).await {
                Ok(Transition::Applied(record)) => {
                    note(Ok(Vec::new()), &acks);
                    if record.status.is_terminal() {
                        acks.lock()
                            .expect("acks")
                            .terminal
                            .insert(id.clone(), record.status);
                    }
                }
                Ok(_) => note(Ok(Vec::new()), &acks),
                Err(error) => note(Err(&error), &acks),
            }
        }
        // A neighbour's record of the round before, reclaimable when it has
        // no lease.
        if round > 0 {
            let neighbour = format!("w{}-{}", (worker + 1) % WORKERS, round - 1);
            match store
                .claim_for_takeover(&TakeoverRequest::adopt(&neighbour, &owner, None))
                .await
            {
                Ok(Takeover::Taken(record)) => note(Ok(vec![record.fence]), &acks),
                Ok(_) => note(Ok(Vec::new()), &acks),
                Err(error) => note(Err(&error), &acks),
            }
        }
        let job =
            NewJob::new("faults", serde_json::json!({ "round": round })).id(format!("job-{id}"));
        match store.enqueue(&job).await {
            Ok(_) => note(Ok(Vec::new()), &acks),
            Err(error) if error.kind() == tenure_lease_core::ErrorKind::AlreadyExists => {}
            Err(error) => note(Err(&error), &acks),
        }
        match store
            .claim(&ClaimRequest::new(
                "faults",
                &owner,
                Duration::from_secs(60),
            ))
            .await
        {
            Ok(claimed) => {
                note(
                    Ok(claimed.iter().map(|job| job.claim.fence).collect()),
                    &acks,
                );
                for job in claimed {
                    match store.complete(&job.claim).await {
                        Ok(JobSettle::Settled(settled)) => {
                            note(Ok(Vec::new()), &acks);
                            acks.lock().expect("acks").completed.insert(settled.id);
                        }
                        Ok(_) => note(Ok(Vec::new()), &acks),
                        Err(error) => note(Err(&error), &acks),
                    }
                }
            }
            Err(error) => note(Err(&error), &acks),
        }
        progress.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (bounded) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < give_up, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(POLL_STEP).await;
    }
}

/// Checks what `store` keeps against what the workload was told.
async fn check_acknowledged(store: &EtcdStore, acks: &Acks) {
    let mut fences: Vec<u64> = acks.fences.iter().map(|(fence, _)| *fence).collect();
    fences.sort_unstable();
    let before = fences.len();
    fences.dedup();
    assert_eq!(
        fences.len(),
        before,
        "a fence was handed out twice: {:?}",
        acks.fences
    );
    for (id, fence) in &acks.admitted {
        let record = answered("read an admitted record", || store.get(id))
            .await
            .unwrap_or_else(|| panic!("acknowledged admission {id} lost"));
        assert!(
            record.fence >= *fence,
            "{id}: fence {} below the admitted {fence}",
            record.fence
        );
    }
    for (id, status) in &acks.terminal {
        let record = answered("read a finished record", || store.get(id))
            .await
            .unwrap_or_else(|| panic!("finished record {id} lost"));
        assert_eq!(
            record.status, *status,
            "{id}: acknowledged terminal write lost"
        );
    }
    for id in &acks.completed {
        let job = answered("read a completed job", || store.get_job(id))
            .await
            .unwrap_or_else(|| panic!("completed job {id} lost"));
        assert_eq!(
            job.state,
            JobState::Completed,
            "{id}: acknowledged completion lost"
        );
    }
    for scope in SCOPES {
        let holders: Vec<String> = answered("list a scope", || store.list_by_scope(scope))
            .await
            .into_iter()
            .filter(LeaseRecord::is_active)
            .map(|record| record.id)
            .collect();
        assert!(
            holders.len() <= 1,
            "scope {scope} has two owners: {holders:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_mid_workload_loses_nothing_acknowledged_and_rejoins() {
    let Some(mut cluster) =
        cluster("leader_killed_mid_workload_loses_nothing_acknowledged_and_rejoins").await
    else {
        return;
    };
    let endpoints = cluster.endpoints();
    let prefix = format!("faults/{}", tenure_lease_core::generate_id());
    let store = store_on(&endpoints, &prefix).await;
    let acks = Arc::new(Mutex::new(Acks::default()));
    let progress = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|index| {
            tokio::spawn(worker(
                store.clone(),
                index,
                Arc::clone(&acks),
                Arc::clone(&progress),
            ))
        })
        .collect();

    // Mid-workload: a third of the rounds done.
    until("a third of the workload", || {
        progress.load(Ordering::SeqCst) >= WORKERS * ROUNDS / 3
    })
    .await;
    let leader = cluster.leader().await.expect("the cluster has a leader");
    let killed_at = progress.load(Ordering::SeqCst);
    cluster.kill(leader).await.expect("the leader is killed");
    for handle in workers {
        handle.await.expect("a worker panicked");
    }
    let new_leader = cluster.leader().await.expect("a new leader is elected");
    assert_ne!(new_leader, leader, "the killed member cannot lead");

    let acks = acks.lock().expect("acks").clone();
    check_acknowledged(&store, &acks).await;

    // The killed member restarts from its data directory and, alone, serves
    // everything acknowledged (a linearizable read through it needs it to
    // have rejoined the cluster).
    cluster
        .restart(leader)
        .await
        .expect("the killed member restarts");
    let alone = store_on(&endpoints[leader..=leader], &prefix).await;
    check_acknowledged(&alone, &acks).await;
    eprintln!(
        "etcd faults (a): {} calls, {} answered Err (unknown), {} fences, {} admissions, {} terminal writes, \
         {} completions acknowledged; leader m{leader} killed after {killed_at} of {} rounds, m{new_leader} took over",
        acks.calls,
        acks.errors,
        acks.fences.len(),
        acks.admitted.len(),
        acks.terminal.len(),
        acks.completed.len(),
        WORKERS * ROUNDS
    );
    store.delete_prefix().await.expect("the prefix is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_down_answers_err_or_truth_and_the_keeper_fail_stops() {
    let Some(mut cluster) =
        cluster("two_of_three_down_answers_err_or_truth_and_the_keeper_fail_stops").await
    else {
        return;
    };
    let endpoints = cluster.endpoints();
    let prefix = format!("faults/{}", tenure_lease_core::generate_id());
    let store = store_on(&endpoints, &prefix).await;
    let shared: Arc<dyn LeaseStore> = Arc::new(store.clone());
    let keeper_ttl = Duration::from_secs(3);
    let keeper = Keeper::builder(
        shared,
        KeeperConfig::with_ttl(keeper_ttl)
            .renew_interval(Duration::from_millis(500))
            .auto_reconcile(false)
            .worker_id("keeper"),
    )
    .start()
    .expect("keeper config");
    let request = keeper.request("kept").scope("kept-scope");
    let AdmitOutcome::Admitted { guard, .. } = keeper.admit(request).await.expect("keeper admit")
    else {
        panic!("the keeper's admission was refused");
    };
    let kept = guard.claim().clone();
    let token = guard.token();
    let direct = match store
        .admit(&AdmitRequest::new("direct", "worker").ttl(Duration::from_secs(60)))
        .await
    {
        Ok(Admission::Admitted { record, .. }) => record.claim().expect("an owner"),
        other => panic!("direct admission: {other:?}"),
    };

    // Two of three down: no quorum.
    cluster.kill(0).await.expect("member 0 is killed");
    cluster.kill(1).await.expect("member 1 is killed");
    let mut answers = Vec::new();
    let mut unknown = 0;
    let mut truths = 0;
    let mut record = |what: &str, result: Result<String, Error>| match result {
        Ok(answer) => {
            truths += 1;
            answers.push(format!("{what}: {answer}"));
        }
        Err(error) => {
            assert_unknown(what, &error);
            unknown += 1;
        }
    };
    let admitted_blind = AdmitRequest::new("blind", "worker").scope("blind-scope");
    record(
        "admit",
        store
            .admit(&admitted_blind)
            .await
            .map(|a| a.label().to_owned()),
    );
    record(
        "renew",
        store
            .renew(&direct, Duration::from_secs(60))
            .await
            .map(|r| r.label().to_owned()),
    );
    record(
        "transition",
        store
            .transition(&direct, &StatusChange::succeeded())
            .await
            .map(|t| t.label().to_owned()),
    );
    record(
        "takeover",
        store
            .claim_for_takeover(&TakeoverRequest::fail("direct", "peer", "gone"))
            .await
            .map(|t| t.label().to_owned()),
    );
    record(
        "get",
        store
            .get("direct")
            .await
            .map(|r| format!("{:?}", r.map(|r| r.fence))),
    );
    record(
        "list_active",
        store.list_active().await.map(|r| r.len().to_string()),
    );
    record(
        "enqueue",
        store
            .enqueue(&NewJob::new("q", serde_json::json!(1)))
            .await
            .map(|j| j.id),
    );
    record(
        "claim",
        store
            .claim(&ClaimRequest::new("q", "worker", Duration::from_secs(5)))
            .await
            .map(|c| c.len().to_string()),
    );
    record(
        "check_fence",
        store
            .check_fence("res", direct.fence)
            .await
            .map(|c| format!("{c:?}")),
    );

    // The keeper cannot renew: it fail-stops at its confirmed deadline.
    tokio::time::timeout(PATIENCE, token.cancelled())
        .await
        .expect("the keeper fail-stops without a quorum");
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));

    // The quorum returns: nothing unsafe. The keeper's record is taken over
    // only after the keeper stopped, under a greater fence; the direct
    // claim renews or is lost, never both owners.
    cluster.restart(0).await.expect("member 0 restarts");
    cluster.restart(1).await.expect("member 1 restarts");
    let peer = "peer";
    let give_up = Instant::now() + PATIENCE;
    let taken = loop {
        let takeover = TakeoverRequest::adopt("kept", peer, None);
        match answered("peer takeover", || store.claim_for_takeover(&takeover)).await {
            Takeover::Taken(record) => break record,
            other => {
                assert!(Instant::now() < give_up, "never taken over: {other:?}");
                tokio::time::sleep(POLL_STEP).await;
            }
        }
    };
    assert!(
        token.is_cancelled(),
        "taken over while the keeper still ran"
    );
    assert!(
        taken.fence > kept.fence,
        "fence {} not above the keeper's {}",
        taken.fence,
        kept.fence
    );
    let renewal = answered("the keeper's claim renews", || {
        store.renew(&kept, Duration::from_secs(5))
    })
    .await;
    assert!(
        matches!(renewal, Renewal::Lost(_)),
        "the displaced keeper's claim still renews: {renewal:?}"
    );
    let holders: Vec<String> = answered("the keeper's scope", || store.list_by_scope("kept-scope"))
        .await
        .into_iter()
        .filter(LeaseRecord::is_active)
        .map(|record| record.id)
        .collect();
    assert_eq!(
        holders,
        ["kept"],
        "the scope is held once, by the taken-over record"
    );
    for (what, claim) in [("direct", &direct)] {
        let record = answered(what, || store.get(&claim.id))
            .await
            .expect("the direct record exists");
        assert!(record.fence >= claim.fence, "{what}: fence went back");
    }
    eprintln!(
        "etcd faults (b): without a quorum {unknown} of {} calls answered Err (unknown), {truths} a true outcome \
         ({answers:?}); the keeper (ttl {keeper_ttl:?}) fail-stopped with DeadlinePassed; taken over afterwards \
         under fence {} > {}",
        unknown + truths,
        taken.fence,
        kept.fence
    );
    drop(keeper);
    store.delete_prefix().await.expect("the prefix is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_from_its_data_directory_rejoins() {
    let Some(mut cluster) = cluster("a_member_restarted_from_its_data_directory_rejoins").await
    else {
        return;
    };
    let endpoints = cluster.endpoints();
    let prefix = format!("faults/{}", tenure_lease_core::generate_id());
    let store = store_on(&endpoints, &prefix).await;
    admitted(&store, &AdmitRequest::new("before", "w")).await;

    let leader = cluster.leader().await.expect("a leader");
    let follower = (leader + 1) % cluster.size();
    cluster.kill(follower).await.expect("a follower is killed");
    // A third of the requests go to the dead member first: they cannot
    // connect, so they were never sent, and go to the next member instead
    // of failing.
    let mut written: Vec<Claim> = Vec::new();
    let mut first_try_errors = 0;
    for index in 0..30 {
        let request = AdmitRequest::new(format!("while-down-{index}"), "w");
        let record = match store.admit(&request).await {
            Ok(admission) => admission
                .admitted()
                .cloned()
                .expect("admitted on free scopes"),
            Err(error) => {
                assert!(
                    !error.to_string().contains("connect"),
                    "a request that could not connect surfaced instead of going to another member: {error}"
                );
                first_try_errors += 1;
                admitted(&store, &request).await
            }
        };
        written.push(record.claim().expect("an owner"));
    }
    cluster
        .restart(follower)
        .await
        .expect("the follower restarts");
    let alone = store_on(&endpoints[follower..=follower], &prefix).await;
    for claim in &written {
        let record = answered("read through the rejoined member", || alone.get(&claim.id))
            .await
            .unwrap_or_else(|| panic!("{} missing on the rejoined member", claim.id));
        assert_eq!(record.fence, claim.fence);
    }
    assert!(answered("read the first", || alone.get("before"))
        .await
        .is_some());
    // And it takes writes again.
    let fence = admitted(&alone, &AdmitRequest::new("after", "w"))
        .await
        .fence;
    assert!(
        written.iter().all(|claim| claim.fence < fence),
        "fences went back after the rejoin"
    );
    eprintln!(
        "etcd faults (c): {} admissions with member m{follower} down, {first_try_errors} answered Err (none a \
         connect error); it rejoined and served all of them",
        written.len()
    );
    store.delete_prefix().await.expect("the prefix is deleted");
}

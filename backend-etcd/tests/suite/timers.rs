//! Expiry on etcd's own timers, on a private single-member cluster: a
//! caller whose clock runs far ahead cannot end a lease or a job claim that
//! etcd still keeps alive, the lease ends once etcd's timer has, and one
//! etcd lease serves every lease of one ttl written together.

use std::sync::Arc;
use std::time::Duration;

use tenure_backend_etcd::{EtcdConfig, EtcdStore};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, Clock, ExpiredQuery, LeaseStore, NotTakenReason,
    Renewal, SystemClock, Takeover, TakeoverRequest, Timestamp,
};
use tenure_test_support::etcd::PrivateEtcd;
use tokio::time::Instant;

/// The offset of the rogue host's clock.
const AHEAD: Duration = Duration::from_secs(3600);
/// The most a condition may take to come true, however loaded the machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// The host's clock, `AHEAD` fast.
#[derive(Debug)]
struct Ahead;

impl Clock for Ahead {
    fn now(&self) -> Timestamp {
        clock::add(SystemClock.now(), AHEAD)
    }
}

async fn cluster(test: &str) -> Option<PrivateEtcd> {
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required(test, &reason);
        return None;
    }
    Some(
        PrivateEtcd::start(1)
            .await
            .expect("a private single-member etcd cluster"),
    )
}

/// Two stores on one prefix: a host with a true clock and one an hour
/// ahead.
async fn true_and_rogue(cluster: &PrivateEtcd) -> (EtcdStore, EtcdStore) {
    let url = cluster.url("timers");
    let honest = EtcdStore::connect(url.as_str()).await.expect("connect");
    let rogue = EtcdStore::connect(EtcdConfig::from(url.as_str()).clock(Arc::new(Ahead)))
        .await
        .expect("connect");
    (honest, rogue)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_running_ahead_cannot_end_a_lease_etcd_still_keeps() {
    let Some(cluster) = cluster("a_clock_running_ahead_cannot_end_a_lease_etcd_still_keeps").await
    else {
        return;
    };
    let (honest, rogue) = true_and_rogue(&cluster).await;
    let ttl = Duration::from_secs(4);
    let Admission::Admitted { record, .. } = honest
        .admit(
            &AdmitRequest::new("run-1", "honest")
                .scope("account:1")
                .ttl(ttl),
        )
        .await
        .expect("admit")
    else {
        panic!("the first admission is admitted");
    };

    // An hour ahead, the rogue host's clock says the lease ended long ago.
    let takeover = TakeoverRequest::adopt("run-1", "rogue", Some(ttl));
    match rogue.claim_for_takeover(&takeover).await.expect("takeover") {
        Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }) => assert!(
            !retry_after.is_zero(),
            "a lease etcd keeps alive is valid, with a retry hint"
        ),
        other => panic!("etcd keeps the lease alive, so no takeover: {other:?}"),
    }
    let interrupt = AdmitRequest::new("run-2", "rogue")
        .scope("account:1")
        .strategy(AdmitStrategy::Interrupt)
        .ttl(ttl);
    assert!(
        matches!(
            rogue.admit(&interrupt).await.expect("admit"),
            Admission::Conflict {
                retry_after: Some(_),
                ..
            }
        ),
        "an interrupting admission is blocked by the live holder"
    );
    let expired = rogue
        .list_expired(&ExpiredQuery::new(Duration::ZERO))
        .await
        .expect("list_expired");
    assert!(
        expired.records.is_empty(),
        "nothing is listed expired: {expired:?}"
    );
    assert!(
        matches!(
            honest
                .renew(&record.claim().expect("owned"), ttl)
                .await
                .expect("renew"),
            Renewal::Renewed { .. }
        ),
        "the holder still holds it"
    );

    // Once etcd has ended the timer (and the holder stopped renewing), the
    // rogue host may take over, under a greater fence.
    let give_up = Instant::now() + PATIENCE;
    let taken = loop {
        match rogue.claim_for_takeover(&takeover).await.expect("takeover") {
            Takeover::Taken(taken) => break taken,
            Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }) => {
                assert!(Instant::now() < give_up, "etcd never ended the lease");
                tokio::time::sleep(retry_after.min(Duration::from_millis(250))).await;
            }
            other => panic!("the takeover answered {other:?}"),
        }
    };
    assert!(
        taken.fence > record.fence,
        "the takeover drew a greater fence"
    );
    honest.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_running_ahead_cannot_reap_a_claim_etcd_still_keeps() {
    let Some(cluster) = cluster("a_clock_running_ahead_cannot_reap_a_claim_etcd_still_keeps").await
    else {
        return;
    };
    let (honest, rogue) = true_and_rogue(&cluster).await;
    honest
        .enqueue(&NewJob::new("mail", serde_json::json!({})).id("job-1"))
        .await
        .expect("enqueue");
    let claimed = honest
        .claim(&ClaimRequest::new("mail", "honest", Duration::from_secs(4)))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "the job is claimed");

    let reaped = rogue.reap(Duration::ZERO).await.expect("reap");
    assert!(
        reaped.requeued.is_empty() && reaped.dead_lettered.is_empty(),
        "a claim etcd keeps alive is not reaped: {reaped:?}"
    );

    let give_up = Instant::now() + PATIENCE;
    loop {
        let reaped = rogue.reap(Duration::ZERO).await.expect("reap");
        if !reaped.requeued.is_empty() {
            assert_eq!(reaped.requeued[0].id, "job-1");
            break;
        }
        assert!(Instant::now() < give_up, "etcd never ended the claim");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    honest.delete_prefix().await.expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_etcd_lease_serves_the_leases_of_one_ttl_written_together() {
    let Some(cluster) =
        cluster("one_etcd_lease_serves_the_leases_of_one_ttl_written_together").await
    else {
        return;
    };
    let store = EtcdStore::connect(cluster.url("many").as_str())
        .await
        .expect("connect");
    let ttl = Duration::from_secs(600);
    for index in 0..200 {
        let admitted = store
            .admit(&AdmitRequest::new(format!("run-{index}"), "worker").ttl(ttl))
            .await
            .expect("admit");
        assert!(admitted.admitted().is_some());
    }
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("a client of the cluster");
    let leases = client.leases().await.expect("the cluster's leases");
    // One per epoch (75 s for this ttl): a slow machine may start a second
    // one mid-way.
    assert!(
        (1..=2).contains(&leases.leases().len()),
        "200 leases of one ttl share etcd's leases: {} of them",
        leases.leases().len()
    );
    store.delete_prefix().await.expect("clean up");
}

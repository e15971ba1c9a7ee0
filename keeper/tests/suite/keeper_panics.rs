//! Panics in the keeper's background work (issue 13, item 8): a store call
//! that panics inside the heartbeat or the reconciler, or a recovery callback
//! that panics, is caught, logged, counted (`tenure.keeper.task_panics`
//! and [`Keeper::health`]), fails its work closed, and leaves the keeper
//! working: `reconcile_now()` answers again, no lease is extended by a
//! renewal that panicked, and no lease is kept by nobody.
//!
//! Paused tokio clock (current-thread runtime), so the thread-local metrics
//! recorder each test installs sees every task's counters.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{
    config, faulty_store, ms, start, Fault, FaultControl, FaultyStore, OnEvent, Op, BEAT, TTL,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tenure_keeper::telemetry::{label, TASK_PANICS};
use tenure_keeper::{
    AdmitOutcome, Keeper, KeeperError, KeeperState, LossCause, ReconcileAction, ReconcileError,
    Recovered, RunGuard, WriteError,
};
use tenure_lease_core::{AdmitRequest, LeaseStore, Status, StatusChange};
use tokio::time::Instant;

/// Counts `tenure.keeper.task_panics` per `tenure.task` label.
#[derive(Default)]
struct PanicCounters(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl PanicCounters {
    fn get(&self, task: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(task)
            .map_or(0, |count| count.load(Ordering::SeqCst))
    }
}

impl Recorder for PanicCounters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != TASK_PANICS.name {
            return Counter::noop();
        }
        let task = key
            .labels()
            .find(|label| label.key() == label::TASK)
            .map_or_else(String::new, |label| label.value().to_owned());
        let count = Arc::clone(self.0.lock().unwrap().entry(task).or_default());
        Counter::from_arc(count)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

async fn admit(keeper: &Keeper, id: &str) -> RunGuard {
    match keeper
        .admit(keeper.request(id).scope(format!("scope:{id}")))
        .await
        .unwrap()
    {
        AdmitOutcome::Admitted { guard, .. } => guard,
        other => panic!("{id} not admitted: {other:?}"),
    }
}

/// A record with no lease, owned by a worker that is not running.
async fn orphan(store: &FaultyStore, id: &str) {
    let mut request = AdmitRequest::new(id, "ghost:1:dead");
    request.ttl = None;
    store.inner().admit(&request).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_panics_extends_nothing_and_the_heartbeat_goes_on() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = faulty_store();
    // Batch renewal even for one lease, so the panic is in `renew_many`.
    let keeper = start(&store, config().solo_renewal_limit(0));
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    let admitted_deadline = guard.confirmed_deadline().unwrap();
    store.inject(Op::RenewMany, None, Fault::PanicOnce);

    common::at(t0, BEAT + ms(10)).await; // the first beat panicked
    assert_eq!(store.calls(Op::RenewMany), 1);
    assert_eq!(
        guard.confirmed_deadline(),
        Some(admitted_deadline),
        "a renewal that panicked extends nothing"
    );
    assert_eq!(guard.loss(), None, "unknown, not lost, before the deadline");
    let health = keeper.health();
    assert_eq!(health.state, KeeperState::Running);
    assert_eq!(health.heartbeat_panics, 1);
    assert!(
        health
            .last_panic
            .as_deref()
            .is_some_and(|text| text.contains("injected panic in renew_many")),
        "{health:?}"
    );
    assert_eq!(counters.get("heartbeat"), 1);

    common::at(t0, BEAT * 2 + ms(10)).await; // the next beat renews again
    assert_eq!(
        store.calls(Op::RenewMany),
        2,
        "the in-flight mark was freed"
    );
    assert!(guard.confirmed_deadline().unwrap() > admitted_deadline);
    assert_eq!(guard.loss(), None);
    assert_eq!(keeper.health().heartbeat_panics, 1);
}

/// A log hook panicking inside the keeper: a `tracing` subscriber that
/// panics on the first `limit` events whose text contains one of
/// `triggers`.
fn panicking_log_hook(
    triggers: Vec<&'static str>,
    limit: u64,
) -> OnEvent<impl Fn(String) + Send + Sync + 'static> {
    let fired = AtomicU64::new(0);
    OnEvent(move |event: String| {
        if triggers.iter().any(|trigger| event.contains(trigger))
            && fired.fetch_add(1, Ordering::SeqCst) < limit
        {
            panic!("log hook panicked on {event:?}");
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_loop_that_panics_is_restarted_and_keeps_renewing() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let _subscriber =
        tracing::subscriber::set_default(panicking_log_hook(vec!["work lost its lease"], 1));
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let doomed = admit(&keeper, "doomed").await;
    let kept = admit(&keeper, "kept").await;
    store.inject(Op::Renew, Some("doomed"), Fault::Unavailable);

    // At 3 s the loop fail-stops "doomed"; logging that loss panics.
    common::at(t0, TTL + ms(10)).await;
    assert_eq!(doomed.loss(), Some(LossCause::DeadlinePassed));
    let health = keeper.health();
    assert_eq!(health.heartbeat_panics, 1, "{health:?}");
    assert_eq!(health.state, KeeperState::Running);
    assert_eq!(counters.get("heartbeat"), 1);

    let deadline = kept.confirmed_deadline().unwrap();
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(kept.loss(), None);
    assert!(
        kept.confirmed_deadline().unwrap() > deadline + TTL,
        "the restarted heartbeat renews"
    );
    keeper.shutdown(Instant::now()).await;
    assert_eq!(keeper.health().state, KeeperState::Stopping);
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_loop_that_keeps_panicking_gives_up_and_stops_everything_held() {
    // Every loss the loop reports panics: with five runs overdue at once,
    // the loop dies on the first of them each time it is restarted.
    gives_up_and_stops_everything_held(vec!["work lost its lease"]).await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_gives_up_even_when_reporting_its_own_panics_panics() {
    gives_up_and_stops_everything_held(vec!["work lost its lease", "heartbeat"]).await;
}

/// Five overdue runs and one healthy run, under a log hook that panics on
/// every event containing one of `triggers`.
async fn gives_up_and_stops_everything_held(triggers: Vec<&'static str>) {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let _subscriber = tracing::subscriber::set_default(panicking_log_hook(triggers, u64::MAX));
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let mut doomed = Vec::new();
    for index in 0..5 {
        let id = format!("doomed-{index}");
        doomed.push(admit(&keeper, &id).await);
        store.inject(Op::Renew, Some(&id), Fault::Unavailable);
    }
    common::at(t0, BEAT * 2).await;
    let kept = admit(&keeper, "kept").await;

    common::at(t0, TTL + BEAT).await;
    let health = keeper.health();
    assert_eq!(health.state, KeeperState::Failed { task: "heartbeat" });
    assert_eq!(health.heartbeat_panics, 3, "{health:?}");
    assert_eq!(counters.get("heartbeat"), 3);
    for guard in doomed.iter().chain([&kept]) {
        assert!(guard.loss().is_some(), "{} is still held", guard.id());
        assert!(guard.token().is_cancelled());
    }
    assert_eq!(kept.loss(), Some(LossCause::HeartbeatFailed));
    assert_eq!(
        keeper.held_count(),
        0,
        "nothing is kept that nothing renews"
    );
    assert!(matches!(
        keeper.admit(keeper.request("late")).await,
        Err(KeeperError::HeartbeatFailed)
    ));
    assert!(
        store.inner().get("late").await.unwrap().is_none(),
        "a refused admission never reaches the store"
    );
}

#[tokio::test(start_paused = true)]
async fn renewals_that_keep_panicking_fail_stop_the_run_at_its_confirmed_deadline() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    let deadline = guard.confirmed_deadline().unwrap();
    for _ in 0..10 {
        store.inject(Op::Renew, None, Fault::PanicOnce);
    }

    tokio::time::sleep_until(deadline + ms(1)).await;
    assert_eq!(
        guard.loss(),
        Some(LossCause::DeadlinePassed),
        "a lease whose renewals panic is not silently kept"
    );
    assert!(guard.token().is_cancelled());
    assert!(!keeper.holds("run"));
    let health = keeper.health();
    assert_eq!(health.state, KeeperState::Running);
    assert_eq!(health.heartbeat_panics, 2, "the beats at 1 s and 2 s");
    assert_eq!(counters.get("heartbeat"), 2);

    // The heartbeat still serves new work.
    store.clear();
    let next = admit(&keeper, "next").await;
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(next.loss(), None);
}

#[tokio::test(start_paused = true)]
async fn a_scan_that_panics_frees_reconcile_now() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = faulty_store();
    let keeper = start(&store, config());
    orphan(&store, "orphan").await;
    store.inject(Op::ListExpired, None, Fault::PanicOnce);

    let error = keeper.reconcile_now().await.unwrap_err();
    assert!(
        matches!(&error, ReconcileError::Scan(cause) if cause.to_string().contains("panicked")),
        "{error:?}"
    );
    assert_eq!(keeper.health().reconciler_panics, 1);
    assert_eq!(counters.get("reconciler"), 1);

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.recovered, ["orphan"]);
    assert_eq!(keeper.health().state, KeeperState::Running);
}

#[tokio::test(start_paused = true)]
async fn a_takeover_that_panics_is_a_claim_error_and_the_pass_goes_on() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = faulty_store();
    let keeper = start(&store, config());
    orphan(&store, "orphan-a").await;
    orphan(&store, "orphan-b").await;
    store.inject(Op::Takeover, Some("orphan-a"), Fault::PanicOnce);

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.claim_errors, 1);
    assert_eq!(report.recovered, ["orphan-b"]);
    assert_eq!(keeper.health().reconciler_panics, 1);
    assert_eq!(counters.get("reconciler"), 1);

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.recovered, ["orphan-a"]);
}

#[tokio::test(start_paused = true)]
async fn a_recovery_callback_that_panics_is_a_failed_callback_and_its_lease_is_not_kept() {
    let counters = PanicCounters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = faulty_store();
    let keeper = Keeper::builder(
        store.clone(),
        config().reconcile_action(ReconcileAction::Adopt),
    )
    .on_recovered(|recovered: Recovered| async move {
        assert_ne!(recovered.record.id, "orphan-a", "callback bug");
        if let Some(guard) = recovered.guard {
            guard.complete(StatusChange::succeeded()).await?;
        }
        Ok::<(), WriteError>(())
    })
    .start()
    .unwrap();
    orphan(&store, "orphan-a").await;
    orphan(&store, "orphan-b").await;

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.recovered, ["orphan-a", "orphan-b"]);
    assert_eq!(report.callback_failed, ["orphan-a"]);
    let health = keeper.health();
    assert_eq!(health.recovery_callback_panics, 1);
    assert_eq!(health.state, KeeperState::Running);
    assert_eq!(counters.get("recovery_callback"), 1);
    assert!(
        !keeper.holds("orphan-a"),
        "the adopted guard died with the callback: the lease is left to expire"
    );
    let adopted = store.inner().get("orphan-a").await.unwrap().unwrap();
    assert_eq!(adopted.status, Status::Running);
    assert_eq!(adopted.owner.as_deref(), Some(keeper.worker_id()));
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        store.inner().get("orphan-a").await.unwrap().unwrap(),
        adopted,
        "nobody renews it"
    );
    assert_eq!(
        store.inner().get("orphan-b").await.unwrap().unwrap().status,
        Status::Succeeded
    );
    assert!(keeper.reconcile_now().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_terminal_write_that_panics_or_is_dropped_fails_closed() {
    let store = faulty_store();
    let keeper = start(&store, config());

    let panicked = admit(&keeper, "panicked").await;
    store.inject(Op::Transition, Some("panicked"), Fault::PanicOnce);
    let work = panicked.spawn(|guard| async move {
        let _ = guard.complete(StatusChange::succeeded()).await;
    });
    assert!(work.await.unwrap_err().is_panic());
    assert_eq!(panicked.loss(), Some(LossCause::UnconfirmedWrite));
    assert!(!keeper.holds("panicked"), "no longer renewed");

    let dropped = admit(&keeper, "dropped").await;
    store.inject(Op::Transition, Some("dropped"), Fault::Hang);
    let gave_up = tokio::time::timeout(ms(100), dropped.complete(StatusChange::succeeded())).await;
    assert!(gave_up.is_err());
    assert_eq!(dropped.loss(), Some(LossCause::UnconfirmedWrite));
    assert!(!keeper.holds("dropped"), "no longer renewed");
    let renewals = store.calls(Op::Renew);
    tokio::time::sleep(TTL).await;
    assert_eq!(store.calls(Op::Renew), renewals);
}

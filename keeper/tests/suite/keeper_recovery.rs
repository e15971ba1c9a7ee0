//! `Keeper::cancel_anywhere` and the reconciler's per-kind handling against
//! the memory store on tokio's paused clock: exact retry-afters, the
//! settling run, the configuration checks, and the metric and trace labels.
//! Their behaviour on every backend is checked by the kit's
//! `keeper_cancel` and `keeper_kinds` cases.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{config, faulty_store, ms, start, Fault, FaultControl, FaultyStore, OnEvent, Op};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tenure_keeper::telemetry::{label, TAKEOVERS};
use tenure_keeper::{
    AdmitOutcome, CancelAnywhereOutcome, Keeper, OrphanHandling, ReconcileAction, RELEASED,
};
use tenure_lease_core::{AdmitRequest, LeaseRecord, LeaseStore, Status, StatusChange};

const INTERNAL: &str = "checkpoint_write";

/// A record of `kind` owned by a worker that is not running.
async fn orphan(store: &FaultyStore, id: &str, kind: &str, ttl: Option<Duration>) -> LeaseRecord {
    let mut request = AdmitRequest::new(id, "ghost:1:dead").kind(kind);
    request.ttl = ttl;
    store
        .inner()
        .admit(&request)
        .await
        .unwrap()
        .admitted()
        .unwrap()
        .clone()
}

#[tokio::test(start_paused = true)]
async fn cancel_anywhere_answers_the_exact_retry_after_then_takes_over_past_grace() {
    let store = faulty_store();
    let keeper = start(&store, config().grace(Duration::from_secs(5)));
    let owned = orphan(&store, "owned", "run", Some(Duration::from_secs(60))).await;

    let outcome = keeper.cancel_anywhere("owned").await;
    assert!(
        matches!(outcome, CancelAnywhereOutcome::LeaseValidElsewhere { retry_after } if retry_after == Duration::from_secs(65)),
        "{outcome:?}"
    );
    store.clock().jump(Duration::from_secs(64));
    let outcome = keeper.cancel_anywhere("owned").await;
    assert!(
        matches!(outcome, CancelAnywhereOutcome::LeaseValidElsewhere { retry_after } if retry_after == Duration::from_secs(1)),
        "within grace the owner may still renew: {outcome:?}"
    );
    store.clock().jump(Duration::from_secs(1));
    let CancelAnywhereOutcome::CancelledByTakeover { record } =
        keeper.cancel_anywhere("owned").await
    else {
        panic!("not cancelled at the end of the grace");
    };
    assert_eq!(record.owner.as_deref(), Some(keeper.worker_id()));
    assert!(record.fence > owned.fence);

    orphan(&store, "no-lease", "run", None).await;
    let outcome = keeper.cancel_anywhere("no-lease").await;
    assert!(
        matches!(outcome, CancelAnywhereOutcome::CancelledByTakeover { ref record } if record.status == Status::Failed),
        "a record without a lease is always reclaimable: {outcome:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_anywhere_of_a_run_writing_its_end_answers_completing() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let AdmitOutcome::Admitted { guard, .. } = keeper.admit(keeper.request("run")).await.unwrap()
    else {
        panic!("not admitted");
    };
    store.inject(Op::Transition, Some("run"), Fault::Hang);
    let completing = tokio::spawn(async move { guard.complete(StatusChange::succeeded()).await });
    while store.calls(Op::Transition) == 0 {
        tokio::time::sleep(ms(1)).await;
    }

    let outcome = keeper.cancel_anywhere("run").await;
    assert!(
        matches!(outcome, CancelAnywhereOutcome::Completing),
        "{outcome:?}"
    );
    store.release_hangs();
    let done = completing.await.unwrap().unwrap();
    assert_eq!(done.status, Status::Succeeded, "the run was not stopped");
    let outcome = keeper.cancel_anywhere("run").await;
    assert!(
        matches!(
            outcome,
            CancelAnywhereOutcome::NotCancellable {
                status: Status::Succeeded
            }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn reconcile_kinds_are_checked_when_the_keeper_starts() {
    let store = faulty_store();
    let moved = config()
        .recover_kinds(["run", INTERNAL])
        .release_kinds_silently([INTERNAL]);
    assert_eq!(
        moved.reconcile_kinds.handling(INTERNAL),
        OrphanHandling::ReleaseSilently,
        "the later setter moves a kind out of the other list"
    );
    let mut both = config().recover_kinds(["run", INTERNAL]);
    both.reconcile_kinds
        .release_silently
        .insert(INTERNAL.to_owned());
    let error = Keeper::builder(store.clone(), both).start().unwrap_err();
    assert_eq!(error.field(), Some("reconcile_kinds"));
    assert!(error.to_string().contains(INTERNAL), "{error}");

    let empty = config().release_kinds_silently([""]);
    let error = Keeper::builder(store.clone(), empty).start().unwrap_err();
    assert_eq!(error.field(), Some("reconcile_kinds"));

    let adopt_nothing = config()
        .reconcile_action(ReconcileAction::Adopt)
        .unlisted_kinds(OrphanHandling::ReleaseSilently);
    Keeper::builder(store.clone(), adopt_nothing)
        .start()
        .expect("nothing is recovered, so no callback is needed");
    let adopt_some = config()
        .reconcile_action(ReconcileAction::Adopt)
        .recover_kinds(["run"])
        .unlisted_kinds(OrphanHandling::ReleaseSilently);
    let error = Keeper::builder(store, adopt_some).start().unwrap_err();
    assert_eq!(error.field(), Some("on_recovered"));
}

/// Counts `tenure.keeper.takeovers` per `tenure.takeover.action`.
#[derive(Default)]
struct Takeovers(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl Takeovers {
    fn get(&self, action: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(action)
            .map_or(0, |count| count.load(std::sync::atomic::Ordering::SeqCst))
    }
}

impl Recorder for Takeovers {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != TAKEOVERS.name {
            return Counter::noop();
        }
        let action = key
            .labels()
            .find(|label| label.key() == label::TAKEOVER_ACTION)
            .map_or_else(String::new, |label| label.value().to_owned());
        Counter::from_arc(Arc::clone(
            self.0.lock().unwrap().entry(action).or_default(),
        ))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test(start_paused = true)]
async fn silent_releases_and_cancelling_takeovers_carry_their_own_labels() {
    let takeovers = Takeovers::default();
    let _recorder = metrics::set_default_local_recorder(&takeovers);
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let captured = Arc::clone(&events);
    let _subscriber = tracing::subscriber::set_default(OnEvent(move |event| {
        captured.lock().unwrap().push(event);
    }));
    let store = faulty_store();
    let keeper = start(&store, config().release_kinds_silently([INTERNAL]));
    orphan(&store, "internal", INTERNAL, None).await;
    orphan(&store, "user", "run", None).await;

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.released, ["internal"]);
    assert_eq!(report.recovered, ["user"]);
    let released = store.inner().get("internal").await.unwrap().unwrap();
    assert_eq!(released.stop_reason.as_deref(), Some(RELEASED));
    orphan(&store, "cancelled", "run", None).await;
    let outcome = keeper.cancel_anywhere("cancelled").await;
    assert!(
        matches!(outcome, CancelAnywhereOutcome::CancelledByTakeover { .. }),
        "{outcome:?}"
    );

    assert_eq!(
        (
            takeovers.get("release"),
            takeovers.get("fail"),
            takeovers.get("cancel")
        ),
        (1, 1, 1)
    );
    let events = events.lock().unwrap();
    let release = events
        .iter()
        .find(|event| event.contains("released orphan silently"))
        .expect("the release is traced");
    assert!(
        release.contains("lease.id=internal")
            && release.contains(&format!("lease.kind={INTERNAL}"))
            && release.contains("action=\"release\""),
        "{release}"
    );
}

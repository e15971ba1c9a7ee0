//! The layer mechanism: every operation of both traits reaches the hook
//! (none is forwarded around it), `Tracing` counts each one with its
//! outcome, `Timeout` bounds a call that never answers, and layers stack.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tenure_backend_memory::MemoryStore;
use tenure_lease_core::layer::{Answer, Fault, Faults, Hook, LayerExt, Operation, Pending};
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, NewJob};
use tenure_lease_core::telemetry::{attribute, OPERATIONS};
use tenure_lease_core::{
    Admission, AdmitRequest, ErrorKind, ExpiredQuery, LeaseStore, StatusChange, TakeoverRequest,
};

const TTL: Duration = Duration::from_secs(30);

/// An operation's name, id, owner and fence.
type Seen = (String, Option<String>, Option<String>, Option<u64>);

/// Records each operation it sees.
#[derive(Default)]
struct Recording(Mutex<Vec<Seen>>);

impl Hook for Recording {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        self.0.lock().unwrap().push((
            operation.name.to_owned(),
            operation.id.map(str::to_owned),
            operation.owner.map(str::to_owned),
            operation.fence,
        ));
        call
    }
}

/// Never lets a call reach the store, and never answers.
struct Stall;

impl Hook for Stall {
    fn call<'a, T: Answer + 'a>(&'a self, _: Operation<'a>, _: Pending<'a, T>) -> Pending<'a, T> {
        Box::pin(std::future::pending())
    }
}

/// Counts `tenure.store.operations` per (operation, outcome).
#[derive(Default)]
struct Counters(Mutex<HashMap<(String, String), Arc<AtomicU64>>>);

impl Counters {
    fn get(&self, operation: &str, outcome: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(&(operation.to_owned(), outcome.to_owned()))
            .map_or(0, |count| count.load(Ordering::SeqCst))
    }
}

impl Recorder for Counters {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != OPERATIONS.name {
            return Counter::noop();
        }
        let label = |name: &str| {
            key.labels()
                .find(|label| label.key() == name)
                .map_or_else(String::new, |label| label.value().to_owned())
        };
        let count = Arc::clone(
            self.0
                .lock()
                .unwrap()
                .entry((
                    label(attribute::DB_OPERATION_NAME),
                    label(attribute::OUTCOME),
                ))
                .or_default(),
        );
        Counter::from_arc(count)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test]
async fn every_operation_of_both_traits_goes_through_the_hook() {
    let store = MemoryStore::new().layer(Recording::default());
    let Admission::Admitted { record, .. } = store
        .admit(&AdmitRequest::new("run", "worker-a").ttl(TTL))
        .await
        .unwrap()
    else {
        panic!("not admitted");
    };
    let claim = record.claim().unwrap();
    store.renew(&claim, TTL).await.unwrap();
    store
        .renew_many(std::slice::from_ref(&claim), TTL)
        .await
        .unwrap();
    store
        .transition(&claim, &StatusChange::running())
        .await
        .unwrap();
    store
        .claim_for_takeover(&TakeoverRequest::fail("run", "worker-b", "gone"))
        .await
        .unwrap();
    store
        .list_expired(&ExpiredQuery::new(Duration::ZERO))
        .await
        .unwrap();
    store.get("run").await.unwrap();
    store.list_by_scope("scope").await.unwrap();
    store.list_active().await.unwrap();
    store.now().await.unwrap();
    store.purge(Duration::from_secs(60)).await.unwrap();
    store
        .count_purgeable(Duration::from_secs(60))
        .await
        .unwrap();
    store
        .enqueue(&NewJob::new("q", serde_json::json!(1)).id("job-1"))
        .await
        .unwrap();
    store
        .enqueue_batch(&[NewJob::new("q", serde_json::json!(2)).id("job-2")])
        .await
        .unwrap();
    let claimed = store
        .claim(&ClaimRequest::new("q", "worker-a", TTL).limit(2))
        .await
        .unwrap();
    let (first, second) = (&claimed[0].claim, &claimed[1].claim);
    store.renew_job(first, TTL).await.unwrap();
    store
        .renew_jobs(std::slice::from_ref(first), TTL)
        .await
        .unwrap();
    store.defer(first, &BTreeSet::new()).await.unwrap();
    store.complete(second).await.unwrap();
    store
        .complete_many(std::slice::from_ref(second))
        .await
        .unwrap();
    store
        .fail(first, "boom", FailAction::DeadLetter)
        .await
        .unwrap();
    store.reap(Duration::ZERO).await.unwrap();
    store.take_back(first, TTL).await.unwrap();
    store.get_job("job-1").await.unwrap();
    store.list_dead_letters("q", 10).await.unwrap();
    store.list_jobs("q", None, 10).await.unwrap();
    store.count_jobs().await.unwrap();
    store.retry_dead_letter("job-1").await.unwrap();
    store.purge_jobs(Duration::from_secs(60)).await.unwrap();

    let seen = store.hook().0.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "admit",
            "renew",
            "renew_many",
            "transition",
            "claim_for_takeover",
            "list_expired",
            "get",
            "list_by_scope",
            "list_active",
            "now",
            "purge",
            "count_purgeable",
            "enqueue",
            "enqueue_batch",
            "claim",
            "renew_job",
            "renew_jobs",
            "defer",
            "complete",
            "complete_many",
            "fail",
            "reap",
            "take_back",
            "get_job",
            "list_dead_letters",
            "list_jobs",
            "count_jobs",
            "retry_dead_letter",
            "purge_jobs",
        ],
        "each operation reaches the hook exactly once"
    );
    let renew = &seen[1];
    assert_eq!(
        renew,
        &(
            "renew".to_owned(),
            Some("run".to_owned()),
            Some("worker-a".to_owned()),
            Some(claim.fence)
        )
    );
    assert_eq!(seen[15].3, Some(first.fence), "renew_job carries its fence");
}

#[tokio::test]
async fn tracing_counts_every_operation_by_outcome() {
    let counters = Counters::default();
    let _recorder = metrics::set_default_local_recorder(&counters);
    let store = MemoryStore::new().instrumented();
    let request = AdmitRequest::new("run", "worker-a").ttl(TTL).scope("s");
    store.admit(&request).await.unwrap();
    let rival = AdmitRequest::new("rival", "worker-b").ttl(TTL).scope("s");
    store.admit(&rival).await.unwrap();
    assert!(store.admit(&AdmitRequest::new("", "w")).await.is_err());
    store.get("missing").await.unwrap();

    assert_eq!(counters.get("admit", "admitted"), 1);
    assert_eq!(counters.get("admit", "conflict"), 1);
    assert_eq!(counters.get("admit", "invalid_input"), 1);
    assert_eq!(counters.get("get", "missing"), 1);
    assert_eq!(counters.get("get", "found"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_answers_times_out_and_layers_stack() {
    let store = MemoryStore::new()
        .layer(Stall)
        .with_timeout(Duration::from_millis(50))
        .layer(Recording::default());
    let answer = store
        .admit(&AdmitRequest::new("run", "worker-a").ttl(TTL))
        .await;
    let error = answer.expect_err("the stalled call answers with a timeout");
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert!(error.message().contains("admit"), "{error}");
    assert_eq!(
        store.hook().0.lock().unwrap().len(),
        1,
        "the outer layer ran"
    );
    let memory = store.inner().inner().inner();
    assert_eq!(
        memory.get("run").await.unwrap(),
        None,
        "the store was never called"
    );
}

#[tokio::test]
async fn a_lost_reply_applies_the_write_and_answers_a_retryable_unknown() {
    let store = MemoryStore::new().layer(Faults::new());
    store.hook().inject("admit", Some("run"), Fault::ReplyLost);
    let request = AdmitRequest::new("run", "worker-a").ttl(TTL).scope("s");
    let error = store.admit(&request).await.expect_err("the reply was lost");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.is_retryable() && error.is_outcome_unknown(),
        "{error}"
    );
    assert!(
        error.message().contains("admit") && error.message().contains("unknown"),
        "{error}"
    );
    assert_eq!(store.hook().calls("admit"), 1);
    let stored = store
        .inner()
        .get("run")
        .await
        .unwrap()
        .expect("the store applied the admission");
    assert_eq!(stored.scopes, ["s".to_owned()].into());

    // The rule stays until cleared; other ids go through.
    let other = AdmitRequest::new("other", "worker-a").ttl(TTL);
    assert!(matches!(
        store.admit(&other).await,
        Ok(Admission::Admitted { .. })
    ));
    assert!(store.admit(&request).await.is_err());
    store.hook().clear();
    let retried = store.admit(&request).await.expect_err("already there");
    assert_eq!(retried.kind(), ErrorKind::AlreadyExists, "{retried}");
}

#[tokio::test]
async fn every_gate_operation_reaches_the_hook_with_its_resource_and_fence() {
    use tenure_lease_core::FenceStore;

    let store = MemoryStore::new().layer(Recording::default());
    assert!(store.check_fence("report", 7).await.unwrap().is_accepted());
    assert_eq!(store.highest_fence("report").await.unwrap(), Some(7));
    assert_eq!(store.purge_fences(TTL).await.unwrap(), 0);
    let seen = store.hook().0.lock().unwrap().clone();
    let report = Some("report".to_owned());
    assert_eq!(
        seen,
        vec![
            ("check_fence".to_owned(), report.clone(), None, Some(7)),
            ("highest_fence".to_owned(), report, None, None),
            ("purge_fences".to_owned(), None, None, None),
        ]
    );
}

#[tokio::test]
async fn faults_apply_to_gate_checks() {
    use tenure_lease_core::FenceStore;

    let store = MemoryStore::new().layer(Faults::new());
    store
        .hook()
        .inject("check_fence", Some("report"), Fault::Unavailable);
    let error = store.check_fence("report", 7).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(store.inner().highest_fence("report").await.unwrap(), None);
    assert!(store.check_fence("other", 7).await.unwrap().is_accepted());

    store.hook().clear();
    store
        .hook()
        .inject("check_fence", Some("report"), Fault::ReplyLost);
    let error = store.check_fence("report", 7).await.unwrap_err();
    assert!(error.is_outcome_unknown());
    assert_eq!(
        store.inner().highest_fence("report").await.unwrap(),
        Some(7),
        "the lost reply hid a check that raised the gate"
    );
    assert_eq!(store.hook().calls("check_fence"), 3);
}

//! The waiting admission over the memory store, on tokio's paused clock:
//! woken by a release notice, by the holder's end, by the deadline, in the
//! order callers came.

use std::sync::Arc;
use std::time::Duration;

use tenure_backend_memory::MemoryStore;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::wait::{Waiter, POLL_WITH_NOTICES};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, LeaseStore, StatusChange, TokioClock, Transition,
};
use tokio::time::Instant;

const SCOPE: &str = "report";
const LONG: Duration = Duration::from_secs(3600);

fn request(id: &str, ttl: Duration) -> AdmitRequest {
    AdmitRequest::new(id, format!("owner-of-{id}"))
        .scope(SCOPE)
        .ttl(ttl)
}

async fn hold(store: &MemoryStore, id: &str, ttl: Duration) -> Claim {
    let admission = store.admit(&request(id, ttl)).await.unwrap();
    admission.admitted().unwrap().claim().unwrap()
}

async fn release(store: &MemoryStore, claim: &Claim) {
    let done = store
        .transition(claim, &StatusChange::succeeded())
        .await
        .unwrap();
    assert!(matches!(done, Transition::Applied(_)), "{done:?}");
}

#[tokio::test(start_paused = true)]
async fn a_release_admits_the_waiter_before_its_poll() {
    let store = MemoryStore::new();
    let holder = hold(&store, "holder", LONG).await;
    let waiter = Arc::new(Waiter::new(store.clone()));
    let started = Instant::now();
    let waiting = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move { waiter.admit(&request("next", LONG), LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    release(&store, &holder).await;
    let answer = waiting.await.unwrap().unwrap();
    assert!(answer.admitted().is_some(), "{answer:?}");
    assert!(
        started.elapsed() < POLL_WITH_NOTICES,
        "admitted after {:?}: the release notice did not wake the waiter",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupting_waiter_is_admitted_when_the_holder_lapses() {
    let store = MemoryStore::with_clock(Arc::new(TokioClock::new()));
    hold(&store, "holder", Duration::from_secs(5)).await;
    let waiter = Waiter::new(store.clone()).poll(LONG);
    let started = Instant::now();
    let interrupting = request("next", LONG).strategy(AdmitStrategy::Interrupt);
    let answer = waiter.admit(&interrupting, LONG).await.unwrap();
    assert!(answer.admitted().is_some(), "{answer:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "admitted after {waited:?}, the holder lapsed after 5 s"
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_answers_the_last_conflict() {
    let store = MemoryStore::new();
    hold(&store, "holder", LONG).await;
    let waiter = Waiter::new(store);
    let started = Instant::now();
    let answer = waiter
        .admit(&request("next", LONG), Duration::from_secs(3))
        .await
        .unwrap();
    let Admission::Conflict { holder, .. } = answer else {
        panic!("admitted while held: {answer:?}");
    };
    assert_eq!(holder.id, "holder");
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn waiters_are_admitted_in_the_order_they_came() {
    let store = MemoryStore::new();
    let first_holder = hold(&store, "holder", LONG).await;
    let waiter = Arc::new(Waiter::new(store.clone()));
    let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..4 {
        let waiter = Arc::clone(&waiter);
        let store = store.clone();
        let order_tx = order_tx.clone();
        tokio::spawn(async move {
            let id = format!("waiter-{n}");
            let answer = waiter.admit(&request(&id, LONG), LONG).await.unwrap();
            let claim = answer.admitted().unwrap().claim().unwrap();
            order_tx.send(n).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            release(&store, &claim).await;
        });
        // Each joins the line before the next starts.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(order_tx);
    release(&store, &first_holder).await;
    let mut admitted = Vec::new();
    while let Some(n) = order.recv().await {
        admitted.push(n);
    }
    assert_eq!(admitted, [0, 1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_gives_up_leaves_the_line_to_the_next() {
    let store = MemoryStore::new();
    let holder = hold(&store, "holder", LONG).await;
    let waiter = Arc::new(Waiter::new(store.clone()));
    let first = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move { waiter.admit(&request("first", LONG), LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let second = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move { waiter.admit(&request("second", LONG), LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    release(&store, &holder).await;
    let answer = second.await.unwrap().unwrap();
    assert_eq!(
        answer.admitted().map(|record| record.id.as_str()),
        Some("second")
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_without_scopes_is_admitted_at_once() {
    let waiter = Waiter::new(MemoryStore::new());
    let request = AdmitRequest::new("free", "worker");
    let answer = waiter.admit(&request, Duration::ZERO).await.unwrap();
    assert!(answer.admitted().is_some(), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wait_longer_than_an_instant_holds_is_a_wait_for_ever() {
    let store = MemoryStore::new();
    let holder = hold(&store, "holder", LONG).await;
    let waiter = Arc::new(Waiter::new(store.clone()));
    let waiting = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move { waiter.admit(&request("next", LONG), Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    release(&store, &holder).await;
    let answer = waiting.await.unwrap().unwrap();
    assert!(answer.admitted().is_some(), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn a_bad_request_is_refused_at_once_not_when_its_turn_comes() {
    let store = MemoryStore::new();
    hold(&store, "holder", LONG).await;
    let waiter = Arc::new(Waiter::new(store.clone()));
    let first = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move { waiter.admit(&request("first", LONG), LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let started = Instant::now();
    let error = waiter
        .admit(&request("", LONG), LONG)
        .await
        .expect_err("an empty id");
    assert_eq!(error.kind(), tenure_lease_core::ErrorKind::InvalidInput);
    assert!(
        started.elapsed() < Duration::from_millis(1),
        "it waited in line"
    );
    let active: Vec<String> = store
        .list_active()
        .await
        .unwrap()
        .into_iter()
        .map(|record| record.id)
        .collect();
    assert_eq!(active, ["holder"], "the refused request changed nothing");
    first.abort();
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_waiter_is_admitted_when_a_permit_frees() {
    let store = MemoryStore::with_clock(Arc::new(TokioClock::new()));
    let limit = RateLimit::new("reports", 1, Duration::from_secs(5));
    let waiter = Waiter::new(store.clone()).poll(LONG);
    for scoped in [false, true] {
        let limited = |id: &str| {
            let request = AdmitRequest::new(id, "worker").rate_limit(limit.clone());
            if scoped {
                request.scope(format!("{SCOPE}-{id}"))
            } else {
                request
            }
        };
        let first = waiter
            .admit(&limited(&format!("first-{scoped}")), LONG)
            .await;
        assert!(first.unwrap().admitted().is_some());
        let started = Instant::now();
        let answer = waiter
            .admit(&limited(&format!("second-{scoped}")), LONG)
            .await
            .unwrap();
        assert!(answer.admitted().is_some(), "{answer:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
            "admitted after {waited:?}, the permit freed after 5 s"
        );
        let short = waiter
            .admit(&limited(&format!("third-{scoped}")), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(
            matches!(short, Admission::RateLimited { .. }),
            "a deadline before the permit frees answers the refusal: {short:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_waiter_leaves_the_line_to_those_behind() {
    let store = MemoryStore::with_clock(Arc::new(TokioClock::new()));
    let limit = RateLimit::new("reports", 1, Duration::from_secs(60));
    let used = AdmitRequest::new("used", "worker").rate_limit(limit.clone());
    assert!(store.admit(&used).await.unwrap().admitted().is_some());
    let waiter = Arc::new(Waiter::new(store.clone()).poll(LONG));
    let limited = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        let request = request("limited", LONG).rate_limit(limit);
        async move { waiter.admit(&request, LONG).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    let behind = waiter.admit(&request("behind", LONG), LONG).await.unwrap();
    assert!(behind.admitted().is_some(), "{behind:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "admitted after {:?}: the rate-limited caller held the line",
        started.elapsed()
    );
    limited.abort();
}

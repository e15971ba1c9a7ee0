//! The keeper against the memory store, on tokio's paused clock: time only
//! moves when every task waits, so deadlines are crossed exactly and no test
//! sleeps for real. `FaultyStore` (in `common`) injects errors, hangs and
//! slow answers per operation (and per lease id).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    at, config, faulty_store, ms, start, CountDrop, Fault, FaultControl, FaultyStore, OnEvent, Op,
    BEAT, TTL,
};
use tenure_keeper::{
    AdmitOutcome, CancelOutcome, Keeper, KeeperConfig, LossCause, ReconcileAction, ReconcileError,
    Recovered, RunGuard, WriteError,
};
use tenure_lease_core::{
    AdmitRequest, LeaseRecord, LeaseStore, LossReason, Status, StatusChange, Takeover,
    TakeoverRequest,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

// ---------------------------------------------------------------- helpers --

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

/// A record owned by a worker that is not running (no keeper renews it).
async fn orphan(store: &FaultyStore, id: &str, ttl: Option<Duration>) -> LeaseRecord {
    let mut request = AdmitRequest::new(id, "ghost:1:dead");
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

async fn record(store: &FaultyStore, id: &str) -> LeaseRecord {
    store.inner().get(id).await.unwrap().unwrap()
}

/// A peer takes `id` over: store time jumps past its lease, then "peer:2:x"
/// adopts it, unseen by the keeper until it next looks.
async fn peer_takes_over(store: &FaultyStore, id: &str) -> LeaseRecord {
    store.clock().jump(TTL * 10);
    match store
        .inner()
        .claim_for_takeover(&TakeoverRequest::adopt(id, "peer:2:x", Some(TTL * 100)))
        .await
        .unwrap()
    {
        Takeover::Taken(record) => record,
        other => panic!("peer could not take {id} over: {other:?}"),
    }
}

/// How a peer takes a run over in the item-9 tests.
#[derive(Debug, Clone, Copy)]
enum PeerTakeover {
    /// The peer's reconciler fails it (the record ends `Failed`).
    Fail,
    /// The peer adopts it (the record stays `Running`, owned by the peer).
    Adopt,
}

/// A peer takes `id` over with `how`, unseen by the keeper until it next
/// looks (store time jumps past the lease first).
async fn peer_takes_over_by(store: &FaultyStore, id: &str, how: PeerTakeover) -> LeaseRecord {
    store.clock().jump(TTL * 10);
    let request = match how {
        PeerTakeover::Fail => TakeoverRequest::fail(id, "peer:2:x", "orphaned"),
        PeerTakeover::Adopt => TakeoverRequest::adopt(id, "peer:2:x", Some(TTL * 100)),
    };
    match store.inner().claim_for_takeover(&request).await.unwrap() {
        Takeover::Taken(record) => record,
        other => panic!("peer could not take {id} over: {other:?}"),
    }
}

// ------------------------------------------------------------- heartbeat --

#[tokio::test(start_paused = true)]
async fn pending_leases_are_renewed_before_work_starts() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "pending").await;
    let admitted_expiry = record(&store, "pending").await.lease_expires_at.unwrap();

    tokio::time::sleep(TTL * 3).await;

    let now = store.inner().now().await.unwrap();
    let stored = record(&store, "pending").await;
    assert_eq!(stored.status, Status::Pending);
    assert!(
        stored.lease_expires_at.unwrap() > now,
        "lease must still be valid in store time"
    );
    assert!(stored.lease_expires_at.unwrap() > admitted_expiry);
    assert!(
        store.calls(Op::Renew) >= 8,
        "renewed every beat: {}",
        store.calls(Op::Renew)
    );
    assert_eq!(guard.loss(), None);
    assert!(!guard.token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn transient_renewal_error_before_the_deadline_keeps_the_run() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    store.inject(Op::Renew, None, Fault::Unavailable);

    at(t0, ms(1500)).await; // the beat at 1 s failed
    assert_eq!(store.calls(Op::Renew), 1);
    assert_eq!(
        guard.loss(),
        None,
        "unknown is not lost while the deadline is ahead"
    );
    assert_eq!(
        guard.confirmed_deadline(),
        Some(t0 + TTL),
        "an error extends nothing"
    );
    store.clear();

    at(t0, TTL * 4).await;
    assert_eq!(guard.loss(), None);
    assert!(guard.confirmed_deadline().unwrap() > Instant::now());
    assert!(guard.check().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn renewal_errors_through_the_confirmed_deadline_fail_stop_the_run() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    let deadline = guard.confirmed_deadline().unwrap();
    assert_eq!(
        deadline,
        t0 + TTL,
        "confirmed deadline = admission sent + ttl"
    );
    let owner = guard.spawn(|_guard| std::future::pending::<()>());
    store.inject(Op::Renew, None, Fault::Unavailable);

    tokio::time::sleep_until(deadline - ms(1)).await;
    assert_eq!(guard.loss(), None);

    tokio::time::sleep_until(deadline).await;
    tokio::task::yield_now().await;
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
    assert!(guard.token().is_cancelled());
    assert!(
        owner.await.unwrap_err().is_cancelled(),
        "the owner task is aborted"
    );
    assert!(!keeper.holds("run"));
    assert!(matches!(
        guard.complete(StatusChange::succeeded()).await,
        Err(WriteError::OwnershipLost(LossCause::DeadlinePassed))
    ));
    assert_eq!(store.calls(Op::Transition), 0, "no write after the loss");
}

#[tokio::test(start_paused = true)]
async fn hung_renewal_is_cut_at_the_deadline_and_delays_no_other_lease() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let hung = admit(&keeper, "hung").await;
    let healthy = admit(&keeper, "healthy").await;
    store.inject(Op::Renew, Some("hung"), Fault::Hang);
    let deadline = hung.confirmed_deadline().unwrap();

    tokio::time::sleep_until(deadline - ms(1)).await;
    assert_eq!(hung.loss(), None);
    assert_eq!(store.hangs_dropped(), 0);

    tokio::time::sleep(ms(2)).await;
    assert_eq!(hung.loss(), Some(LossCause::DeadlinePassed));
    assert_eq!(
        store.hangs_dropped(),
        1,
        "the hung call is cut at the deadline"
    );

    tokio::time::sleep(TTL * 2).await;
    assert_eq!(healthy.loss(), None);
    assert!(healthy.confirmed_deadline().unwrap() > Instant::now() + BEAT);
    let now = store.inner().now().await.unwrap();
    assert!(record(&store, "healthy").await.lease_expires_at.unwrap() > now);
}

#[tokio::test(start_paused = true)]
async fn no_renewal_is_sent_past_the_confirmed_deadline_even_while_settling() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    store.inject(Op::Renew, None, Fault::Unavailable);
    store.inject(Op::Transition, None, Fault::Hang);
    at(t0, ms(500)).await; // the hung write's store timeout ends at 3.5 s
    let settling = tokio::spawn({
        let guard = guard.clone();
        async move { guard.complete(StatusChange::succeeded()).await }
    });

    // Beats at 1 s and 2 s fail; the one at 3 s meets the passed deadline.
    at(t0, TTL + ms(400)).await;
    assert_eq!(
        store.calls(Op::Renew),
        2,
        "a late renewal only extends an orphan"
    );
    store.release_hangs();
    let _ = settling.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn late_successful_renewal_does_not_revive_the_lease() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    // The beat at 1 s is applied by the store, but its answer lands at 3 s,
    // the confirmed deadline.
    store.inject(Op::Renew, None, Fault::SlowAnswer(ms(2000)));

    at(t0, ms(3001)).await;
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
    let extended = record(&store, "run").await.lease_expires_at.unwrap();
    let admitted = record(&store, "run").await.created_at;
    assert!(
        extended > tenure_lease_core::clock::add(admitted, TTL),
        "the store did renew"
    );
    store.clear();

    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        store.calls(Op::Renew),
        1,
        "never renewed again once fenced locally"
    );
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
    assert!(guard.check().await.is_err());
    assert!(guard.complete(StatusChange::succeeded()).await.is_err());
    assert_eq!(store.calls(Op::Transition), 0);
}

#[tokio::test(start_paused = true)]
async fn loss_noticed_by_check_cancels_the_owner_task_at_once() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    let owner = guard.spawn(|_guard| std::future::pending::<()>());
    tokio::time::sleep(ms(200)).await; // past a tenth of a beat, before the next beat
    peer_takes_over(&store, "run").await;

    let noticed_at = Instant::now();
    let lost = guard.check().await.unwrap_err();
    assert_eq!(lost.cause, LossCause::Lost(LossReason::OwnerChanged));
    assert!(owner.await.unwrap_err().is_cancelled());
    assert_eq!(
        Instant::now(),
        noticed_at,
        "cancelled without waiting for anything"
    );
    assert!(guard.token().is_cancelled());
    assert!(!keeper.holds("run"));
    assert_eq!(
        store.calls(Op::Renew),
        0,
        "the heartbeat had not looked yet"
    );
}

#[tokio::test(start_paused = true)]
async fn heartbeat_notices_a_peer_takeover_within_one_beat() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    let token = guard.token();
    peer_takes_over(&store, "run").await;
    let taken_at = Instant::now();

    token.cancelled().await;
    assert!(Instant::now() <= taken_at + BEAT);
    assert_eq!(
        guard.loss(),
        Some(LossCause::Lost(LossReason::OwnerChanged))
    );
    assert!(matches!(
        guard.complete(StatusChange::succeeded()).await,
        Err(WriteError::OwnershipLost(_))
    ));
    assert_eq!(
        record(&store, "run").await.owner.as_deref(),
        Some("peer:2:x")
    );
}

#[tokio::test(start_paused = true)]
async fn check_reads_the_store_at_most_every_tenth_of_a_beat() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    for _ in 0..50 {
        guard.check().await.unwrap();
    }
    assert_eq!(store.calls(Op::Get), 0, "answered from the admission");
    tokio::time::sleep(ms(150)).await;
    for _ in 0..50 {
        guard.check().await.unwrap();
    }
    assert_eq!(store.calls(Op::Get), 1);
    store.inject(Op::Get, None, Fault::Unavailable);
    tokio::time::sleep(ms(150)).await;
    assert!(guard.check().await.is_ok(), "a failed read is not a loss");
    assert_eq!(store.calls(Op::Get), 2);
}

#[tokio::test(start_paused = true)]
async fn long_side_effect_under_the_work_lock_never_produces_a_loss() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    let work_state = Arc::new(tokio::sync::Mutex::new(Vec::<u32>::new()));
    // One renewal error on the way: the deadline, not lock contention,
    // decides.
    store.inject(Op::Renew, None, Fault::Unavailable);
    let work = guard.spawn({
        let work_state = work_state.clone();
        |guard| async move {
            let mut items = work_state.lock().await;
            tokio::time::sleep(TTL * 4).await; // a side effect far longer than the ttl
            items.push(1);
            drop(items);
            guard.check().await?;
            guard.complete(StatusChange::succeeded()).await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }
    });
    tokio::time::sleep(ms(1500)).await;
    store.clear();
    assert!(work_state.try_lock().is_err(), "the work holds its lock");

    work.await.unwrap().unwrap();
    assert_eq!(guard.loss(), None);
    assert!(!guard.token().is_cancelled());
    assert_eq!(record(&store, "run").await.status, Status::Succeeded);
}

// ------------------------------------------------------------ completion --

#[tokio::test(start_paused = true)]
async fn renewal_answering_lost_after_complete_settled_is_not_a_loss() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = admit(&keeper, "run").await;
    guard.mark_running().await.unwrap();
    // The terminal write commits at 0.5 s; its answer arrives at 2 s, after
    // the beat at 1 s found the record terminal.
    store.inject(Op::Transition, None, Fault::SlowAnswer(ms(1500)));
    at(t0, ms(500)).await;
    let completing = tokio::spawn({
        let guard = guard.clone();
        async move { guard.complete(StatusChange::succeeded()).await }
    });

    at(t0, ms(1500)).await;
    assert_eq!(store.calls(Op::Renew), 1);
    assert_eq!(guard.loss(), None, "lost-after-settle is not a loss");

    let completed = completing.await.unwrap().unwrap();
    assert_eq!(completed.status, Status::Succeeded);
    assert_eq!(guard.loss(), None);
    assert!(!guard.token().is_cancelled());
    assert!(!keeper.holds("run"));
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_terminal_write_fails_closed() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    guard.mark_running().await.unwrap();
    let before = record(&store, "run").await;
    store.inject(Op::Transition, None, Fault::Unavailable);

    let answer = guard.complete(StatusChange::succeeded()).await;
    assert!(
        matches!(answer, Err(WriteError::Unconfirmed(_))),
        "{answer:?}"
    );
    assert_eq!(guard.loss(), Some(LossCause::UnconfirmedWrite));
    assert!(guard.token().is_cancelled());
    assert!(!keeper.holds("run"));
    assert_eq!(
        record(&store, "run").await,
        before,
        "store row left as it was"
    );

    let renewals = store.calls(Op::Renew);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        store.calls(Op::Renew),
        renewals,
        "no renewal after the loss"
    );
    assert!(matches!(
        guard.complete(StatusChange::succeeded()).await,
        Err(WriteError::OwnershipLost(LossCause::UnconfirmedWrite))
    ));
}

#[tokio::test(start_paused = true)]
async fn stale_owner_cannot_overwrite_a_peer_takeover() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "run").await;
    guard.mark_running().await.unwrap();
    let taken = peer_takes_over(&store, "run").await;

    let answer = guard.complete(StatusChange::succeeded()).await;
    assert!(matches!(answer, Err(WriteError::TakenOver)), "{answer:?}");
    assert_eq!(guard.loss(), Some(LossCause::TakenOver));
    assert!(guard.token().is_cancelled());
    assert_eq!(
        record(&store, "run").await,
        taken,
        "the peer's record is untouched"
    );
}

#[tokio::test(start_paused = true)]
async fn complete_after_a_peer_failed_or_adopted_the_run_answers_taken_over() {
    for how in [PeerTakeover::Fail, PeerTakeover::Adopt] {
        let store = faulty_store();
        let keeper = start(&store, config());
        let guard = admit(&keeper, "run").await;
        guard.mark_running().await.unwrap();
        let taken = peer_takes_over_by(&store, "run", how).await;

        let answer = guard.complete(StatusChange::succeeded()).await;
        assert!(
            matches!(answer, Err(WriteError::TakenOver)),
            "{how:?}: {answer:?}"
        );
        assert_eq!(guard.loss(), Some(LossCause::TakenOver), "{how:?}");
        assert!(guard.token().is_cancelled());
        assert!(!keeper.holds("run"));
        assert_eq!(record(&store, "run").await, taken, "{how:?}: untouched");
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_after_a_peer_failed_or_adopted_the_run_answers_taken_over() {
    for (how, pending) in [
        (PeerTakeover::Fail, false),
        (PeerTakeover::Fail, true),
        (PeerTakeover::Adopt, false),
    ] {
        let store = faulty_store();
        let keeper = start(&store, config());
        let guard = admit(&keeper, "run").await;
        if !pending {
            guard.mark_running().await.unwrap();
        }
        let work = guard.spawn(|_guard| std::future::pending::<()>());
        let taken = peer_takes_over_by(&store, "run", how).await;

        assert_eq!(
            keeper.cancel("run").await,
            CancelOutcome::TakenOver,
            "{how:?}, pending {pending}"
        );
        assert!(work.await.unwrap_err().is_cancelled());
        assert!(!keeper.holds("run"));
        assert_eq!(record(&store, "run").await, taken, "{how:?}: untouched");
    }
}

// ------------------------------------------------------------ reconciler --

#[tokio::test(start_paused = true)]
async fn reconciler_claims_expired_and_no_lease_records_and_skips_valid_and_own() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let _own = admit(&keeper, "own").await;
    orphan(&store, "valid", Some(Duration::from_secs(3600))).await;
    orphan(&store, "expired", Some(Duration::from_secs(1))).await;
    orphan(&store, "no-lease", None).await;
    // Store time jumps past "own" and "expired": the keeper still holds "own".
    store.clock().jump(TTL * 2);

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.recovered, ["no-lease", "expired"]);
    assert_eq!(report.skipped_own, ["own"]);
    for id in ["no-lease", "expired"] {
        let stored = record(&store, id).await;
        assert_eq!(stored.status, Status::Failed);
        assert_eq!(stored.owner.as_deref(), Some(keeper.worker_id()));
    }
    assert_eq!(record(&store, "valid").await.status, Status::Pending);
    let own = record(&store, "own").await;
    assert_eq!(own.status, Status::Pending);
    assert_eq!(own.owner.as_deref(), Some(keeper.worker_id()));
    assert!(keeper.holds("own"));
}

#[tokio::test(start_paused = true)]
async fn two_reconcilers_report_one_winner() {
    let store = faulty_store();
    let first = start(&store, config());
    let second = start(&store, config());
    orphan(&store, "orphan", Some(Duration::from_secs(1))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Both scans see the orphan before either claims it.
    store.inject(Op::ListExpired, None, Fault::SlowAnswer(ms(100)));

    let (a, b) = tokio::join!(first.reconcile_now(), second.reconcile_now());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.scanned, b.scanned), (1, 1));
    assert_eq!(a.recovered.len() + b.recovered.len(), 1, "{a:?} {b:?}");
    assert_eq!(a.not_taken + b.not_taken, 1);
    let winner = if a.recovered.is_empty() {
        &second
    } else {
        &first
    };
    assert_eq!(
        record(&store, "orphan").await.owner.as_deref(),
        Some(winner.worker_id())
    );
}

#[tokio::test(start_paused = true)]
async fn reconciler_is_single_flight() {
    let store = faulty_store();
    store.inject(Op::ListExpired, None, Fault::Hang);
    let keeper = start(&store, config().auto_reconcile(true));
    tokio::time::sleep(ms(10)).await; // the start pass is now hanging in its scan

    assert!(matches!(
        keeper.reconcile_now().await,
        Err(ReconcileError::AlreadyRunning)
    ));
    // Timer ticks do nothing either, until the scan's store timeout (= ttl)
    // ends the hung pass.
    tokio::time::sleep(TTL - ms(100)).await;
    assert_eq!(store.calls(Op::ListExpired), 1);

    store.release_hangs();
    tokio::time::sleep(ms(10)).await;
    assert!(keeper.reconcile_now().await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn failing_recovery_callback_logs_every_recovered_id() {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let captured = Arc::clone(&logs);
    let _subscriber = tracing::subscriber::set_default(OnEvent(move |event| {
        captured.lock().unwrap().push(event);
    }));
    let store = faulty_store();
    let keeper = Keeper::builder(store.clone(), config())
        .on_recovered(|recovered: Recovered| async move {
            Err::<(), _>(format!("cannot resume {}", recovered.record.id))
        })
        .start()
        .unwrap();
    orphan(&store, "orphan-a", None).await;
    orphan(&store, "orphan-b", None).await;

    let report = keeper.reconcile_now().await.unwrap();
    assert_eq!(report.recovered, ["orphan-a", "orphan-b"]);
    assert_eq!(report.callback_failed, ["orphan-a", "orphan-b"]);
    let logs = logs.lock().unwrap();
    let summary = logs
        .iter()
        .find(|line| line.contains("recovery callback failed;"))
        .expect("a summary of the failed recovery");
    assert!(
        summary.contains("orphan-a") && summary.contains("orphan-b"),
        "{summary}"
    );
    assert!(logs
        .iter()
        .any(|line| line.contains("cannot resume orphan-b")));
}

#[tokio::test(start_paused = true)]
async fn reconciler_scan_and_callback_never_block_renewal() {
    let store = faulty_store();
    store.inject(Op::ListExpired, None, Fault::Hang);
    let keeper = Keeper::builder(store.clone(), config().auto_reconcile(true))
        .on_recovered(|_recovered: Recovered| async move {
            std::future::pending::<Result<(), std::io::Error>>().await
        })
        .start()
        .unwrap();
    let guard = admit(&keeper, "work").await;
    orphan(&store, "orphan", None).await;

    tokio::time::sleep(TTL * 3).await; // every scan hangs until its store timeout
    let renewals = store.calls(Op::Renew);
    assert!(renewals >= 8, "{renewals}");
    assert_eq!(guard.loss(), None);

    store.release_hangs(); // the scan answers, the callback hangs from now on
    tokio::time::sleep(ms(10)).await;
    assert_eq!(record(&store, "orphan").await.status, Status::Failed);
    tokio::time::sleep(TTL * 3).await;
    assert!(store.calls(Op::Renew) >= renewals + 8);
    assert_eq!(guard.loss(), None);
    assert!(matches!(
        keeper.reconcile_now().await,
        Err(ReconcileError::AlreadyRunning)
    ));
}

// -------------------------------------------------------------- shutdown --

#[tokio::test(start_paused = true)]
async fn shutdown_deadline_cancels_a_stuck_heartbeat_and_a_stuck_callback() {
    let store = faulty_store();
    let callbacks_dropped = Arc::new(AtomicUsize::new(0));
    let keeper = Keeper::builder(store.clone(), config().auto_reconcile(true))
        .on_recovered({
            let dropped = callbacks_dropped.clone();
            move |_recovered: Recovered| {
                let dropped = CountDrop(dropped.clone());
                async move {
                    std::future::pending::<()>().await;
                    drop(dropped);
                    Ok::<(), std::io::Error>(())
                }
            }
        })
        .start()
        .unwrap();
    let t0 = Instant::now();
    orphan(&store, "orphan", None).await;
    tokio::time::sleep(ms(10)).await; // the start pass recovers the orphan
    assert_eq!(record(&store, "orphan").await.status, Status::Failed);
    assert!(matches!(
        keeper.reconcile_now().await,
        Err(ReconcileError::AlreadyRunning)
    ));
    let guard = admit(&keeper, "work").await;
    let work = guard.spawn(|_guard| std::future::pending::<()>());
    store.inject(Op::Renew, None, Fault::Hang);
    at(t0, ms(1200)).await; // the beat at 1 s is hanging

    let deadline = t0 + ms(2000);
    let report = keeper.shutdown(deadline).await;
    assert_eq!(
        Instant::now(),
        deadline,
        "one shared deadline, nothing beyond it"
    );
    assert!(!report.drained);
    assert!(report.reconciler_cancelled);
    assert_eq!(report.stopped_runs, ["work"]);
    assert_eq!(
        callbacks_dropped.load(Ordering::SeqCst),
        1,
        "the stuck callback was cancelled"
    );
    assert_eq!(store.hangs_dropped(), 1, "the stuck renewal was cancelled");
    assert_eq!(guard.loss(), Some(LossCause::Shutdown));
    assert!(work.await.unwrap_err().is_cancelled());
    assert!(matches!(
        keeper.admit(keeper.request("late")).await,
        Err(tenure_keeper::KeeperError::ShuttingDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_work_that_finishes_in_time() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = admit(&keeper, "work").await;
    let work = guard.spawn(|guard| async move {
        tokio::time::sleep(TTL * 2).await;
        guard.complete(StatusChange::succeeded()).await
    });
    let t0 = Instant::now();
    // From a spawned task: shutdown's future must be `Send`.
    let report = tokio::spawn(async move { keeper.shutdown(t0 + TTL * 10).await })
        .await
        .unwrap();
    assert!(report.drained);
    assert!(report.stopped_runs.is_empty());
    assert!(Instant::now() < t0 + TTL * 3);
    assert_eq!(work.await.unwrap().unwrap().status, Status::Succeeded);
}

// ---------------------------------------------------- single-worker mode --

#[tokio::test(start_paused = true)]
async fn single_worker_mode_reclaims_a_crashed_run_at_once_on_restart() {
    let store = faulty_store();
    let (recovered_tx, mut recovered_rx) = mpsc::unbounded_channel();
    let single = || {
        let recovered_tx = recovered_tx.clone();
        Keeper::builder(store.clone(), KeeperConfig::single_worker())
            .on_recovered(move |recovered: Recovered| {
                let recovered_tx = recovered_tx.clone();
                async move { recovered_tx.send(recovered).map_err(|_| "receiver gone") }
            })
            .start()
            .unwrap()
    };
    let crashed = single();
    let guard = admit(&crashed, "run-1").await;
    guard.mark_running().await.unwrap();
    assert_eq!(record(&store, "run-1").await.lease_expires_at, None);
    drop(guard);
    drop(crashed); // a crash: nothing written

    let restarted_at = Instant::now();
    let restarted = single();
    let recovered = recovered_rx.recv().await.unwrap();
    assert_eq!(
        Instant::now(),
        restarted_at,
        "reclaimed at once, no expiry to wait for"
    );
    assert_eq!(recovered.record.id, "run-1");
    assert_eq!(recovered.record.status, Status::Running);
    assert_eq!(
        recovered.record.owner.as_deref(),
        Some(restarted.worker_id())
    );
    assert_eq!(recovered.record.lease_expires_at, None);
    let guard = recovered.guard.unwrap();
    assert!(restarted.holds("run-1"));
    let done = guard.complete(StatusChange::succeeded()).await.unwrap();
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(
        store.calls(Op::Renew) + store.calls(Op::RenewMany),
        0,
        "nothing to renew"
    );
}

// ------------------------------------------------------------------ scale --

#[tokio::test(start_paused = true)]
async fn ten_thousand_leases_renew_through_few_renew_many_calls() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let mut guards = Vec::new();
    for index in 0..10_000 {
        let request = keeper.request(format!("lease-{index:05}"));
        match keeper.admit(request).await.unwrap() {
            AdmitOutcome::Admitted { guard, .. } => guards.push(guard),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(Instant::now(), t0);

    at(t0, ms(1500)).await;
    assert_eq!(store.calls(Op::RenewMany), 10, "chunks of 1000");
    assert_eq!(store.calls(Op::Renew), 0);

    at(t0, TTL * 3 + ms(500)).await;
    assert_eq!(store.calls(Op::RenewMany), 90);
    assert_eq!(keeper.held_count(), 10_000);
    assert!(guards.iter().all(|guard| guard.loss().is_none()));
    let now = store.inner().now().await.unwrap();
    let stored = store.inner().list_active().await.unwrap();
    assert!(stored
        .iter()
        .all(|record| record.lease_expires_at.unwrap() > now));
}

#[tokio::test(start_paused = true)]
async fn a_beat_keeps_at_most_the_configured_renew_many_calls_in_flight() {
    let store = faulty_store();
    let keeper = start(
        &store,
        config()
            .solo_renewal_limit(0)
            .renew_batch_size(10)
            .renew_batches_in_flight(2),
    );
    let t0 = Instant::now();
    let mut guards = Vec::new();
    for index in 0..100 {
        guards.push(admit(&keeper, &format!("lease-{index}")).await);
    }
    store.inject(Op::RenewMany, None, Fault::Hang);

    at(t0, BEAT + ms(500)).await;
    assert_eq!(
        store.calls(Op::RenewMany),
        2,
        "ten batches are due; two are sent, the rest wait their turn"
    );
    store.clear();
    store.release_hangs();
    at(t0, BEAT * 2 + ms(500)).await;
    assert!(
        store.calls(Op::RenewMany) >= 10,
        "once the first turns end, every batch is sent"
    );
    assert!(guards.iter().all(|guard| guard.loss().is_none()));
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_record_costs_its_batch_neighbours_nothing() {
    let store = faulty_store();
    let keeper = start(&store, config().solo_renewal_limit(4));
    let t0 = Instant::now();
    let mut guards = Vec::new();
    for index in 0..10 {
        guards.push(admit(&keeper, &format!("lease-{index}")).await);
    }
    // The batch holding lease-3 fails as undecodable, and so does lease-3 alone.
    store.inject(Op::RenewMany, Some("lease-3"), Fault::Corrupt);
    store.inject(Op::Renew, Some("lease-3"), Fault::Corrupt);

    at(t0, TTL * 3 + ms(500)).await;
    assert!(store.calls(Op::RenewMany) > 0, "the beat renews in batches");
    assert_eq!(
        guards[3].loss(),
        Some(LossCause::DeadlinePassed),
        "the undecodable lease itself fail-stops at its deadline"
    );
    for (index, guard) in guards.iter().enumerate().filter(|(index, _)| *index != 3) {
        assert_eq!(
            guard.loss(),
            None,
            "lease-{index} was renewed lease by lease"
        );
    }
}

// ---------------------------------------------------------------- cancel --

#[tokio::test(start_paused = true)]
async fn cancel_answers_each_outcome() {
    let store = faulty_store();
    let keeper = start(&store, config().grace(Duration::from_secs(5)));

    let pending = admit(&keeper, "pending").await;
    assert_eq!(keeper.cancel("pending").await, CancelOutcome::Cancelled);
    assert_eq!(pending.loss(), Some(LossCause::Cancelled));
    assert!(pending.token().is_cancelled());
    let stored = record(&store, "pending").await;
    assert_eq!(
        (stored.status, stored.stop_reason.as_deref()),
        (Status::Failed, Some("cancelled"))
    );

    let running = admit(&keeper, "running").await;
    running.mark_running().await.unwrap();
    let work = running.spawn(|_guard| std::future::pending::<()>());
    assert_eq!(keeper.cancel("running").await, CancelOutcome::Cancelled);
    assert!(work.await.unwrap_err().is_cancelled());
    assert_eq!(record(&store, "running").await.status, Status::Interrupted);

    assert_eq!(
        keeper.cancel("pending").await,
        CancelOutcome::NotCancellable {
            status: Some(Status::Failed)
        }
    );
    assert_eq!(
        keeper.cancel("nope").await,
        CancelOutcome::NotCancellable { status: None }
    );

    orphan(&store, "elsewhere", Some(Duration::from_secs(60))).await;
    assert_eq!(
        keeper.cancel("elsewhere").await,
        CancelOutcome::LeaseValidElsewhere {
            retry_after: Duration::from_secs(65)
        }
    );
    orphan(&store, "abandoned", None).await;
    assert_eq!(
        keeper.cancel("abandoned").await,
        CancelOutcome::NotActiveLocally
    );

    let raced = admit(&keeper, "raced").await;
    peer_takes_over(&store, "raced").await;
    assert_eq!(keeper.cancel("raced").await, CancelOutcome::TakenOver);
    assert_eq!(raced.loss(), Some(LossCause::Cancelled));
    assert_eq!(
        record(&store, "raced").await.owner.as_deref(),
        Some("peer:2:x")
    );

    store.inject(Op::Get, None, Fault::Unavailable);
    assert_eq!(keeper.cancel("elsewhere").await, CancelOutcome::Unknown);
}

#[tokio::test]
async fn worker_ids_are_unique_and_shaped_host_pid_random() {
    let store = faulty_store();
    let a = start(&store, config());
    let b = start(&store, config());
    assert_ne!(a.worker_id(), b.worker_id());
    let parts: Vec<&str> = a.worker_id().split(':').collect();
    assert_eq!(parts.len(), 3, "{}", a.worker_id());
    assert_eq!(parts[1], std::process::id().to_string());
    assert!(tenure_lease_core::backend::validate::owner("owner", a.worker_id()).is_ok());
}

#[tokio::test]
async fn invalid_configuration_is_refused_naming_the_field() {
    let store = faulty_store();
    let too_slow = KeeperConfig::with_ttl(TTL).renew_interval(TTL);
    let error = Keeper::builder(store.clone(), too_slow)
        .start()
        .unwrap_err();
    assert_eq!(error.field(), Some("renew_interval"));
    let adopt_without_callback = config().reconcile_action(ReconcileAction::Adopt);
    let error = Keeper::builder(store, adopt_without_callback)
        .start()
        .unwrap_err();
    assert_eq!(error.field(), Some("on_recovered"));
}

//! The keeper holding job claims, against the memory store on tokio's paused
//! clock (see tests/keeper.rs): the same guarantees as run leases, through
//! `renew_job` / `renew_jobs`, `get_job` and the fenced `complete` / `fail` /
//! `defer`.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{
    at, config, faulty_store, ms, start, Fault, FaultControl, FaultyStore, Op, BEAT, TTL,
};
use tenure_keeper::{AdmitOutcome, JobGuard, JobWriteError};
use tenure_keeper::{Keeper, KeeperConfig, KeeperError, LossCause, ReconcileAction};
use tenure_lease_core::queue::{
    ClaimRequest, DeadReason, FailAction, Job, JobLoss, JobQueue, JobState, NewJob,
};
use tenure_lease_core::ErrorKind;
use tokio::time::Instant;

const QUEUE: &str = "emails";

async fn enqueue(store: &FaultyStore, id: &str, max_attempts: u32) {
    let job = NewJob::new(QUEUE, serde_json::json!({ "id": id }))
        .id(id)
        .max_attempts(max_attempts);
    store.inner().enqueue(&job).await.unwrap();
}

/// Enqueues job `id` and claims it through the keeper.
async fn claim(keeper: &Keeper, store: &Arc<FaultyStore>, id: &str) -> JobGuard {
    enqueue(store, id, 3).await;
    let mut guards = keeper
        .claim_jobs(
            store.clone(),
            ClaimRequest::new(QUEUE, "overridden", TTL * 100),
        )
        .await
        .unwrap();
    assert_eq!(guards.len(), 1);
    let guard = guards.remove(0);
    assert_eq!(guard.id(), id);
    guard
}

async fn stored(store: &FaultyStore, id: &str) -> Job {
    store.inner().get_job(id).await.unwrap().unwrap()
}

/// Store time jumps far past every lease and the reaper runs.
async fn reaper_runs_after_a_stall(store: &FaultyStore) -> tenure_lease_core::queue::ReapReport {
    store.clock().jump(TTL * 10);
    store.inner().reap(Duration::ZERO).await.unwrap()
}

// ------------------------------------------------------------- renewals --

#[tokio::test(start_paused = true)]
async fn job_lease_is_kept_alive_across_several_ttls() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = claim(&keeper, &store, "kept").await;
    assert_eq!(guard.claim().owner, keeper.worker_id());
    assert_eq!(
        guard.confirmed_deadline(),
        Some(t0 + TTL),
        "claim sent + keeper ttl"
    );
    let claimed = stored(&store, "kept").await;
    assert_eq!(
        claimed.lease_expires_at,
        Some(tenure_lease_core::clock::add(claimed.updated_at, TTL)),
        "claimed under the keeper's ttl, not the request's"
    );
    // A second job claimed straight from the store, with nobody renewing it.
    enqueue(&store, "unkept", 3).await;
    let unkept = store
        .inner()
        .claim(&ClaimRequest::new(QUEUE, "ghost:1:dead", TTL))
        .await
        .unwrap();
    assert_eq!(unkept.len(), 1);

    tokio::time::sleep(TTL * 4).await;

    assert!(
        store.calls(Op::RenewJob) >= 11,
        "{}",
        store.calls(Op::RenewJob)
    );
    assert_eq!(guard.loss(), None);
    assert!(guard.confirmed_deadline().unwrap() > Instant::now() + BEAT);
    let report = store.inner().reap(Duration::ZERO).await.unwrap();
    let requeued: Vec<&str> = report.requeued.iter().map(|job| job.id.as_str()).collect();
    assert_eq!(requeued, ["unkept"], "only the unrenewed claim expired");
    assert_eq!(stored(&store, "kept").await.state, JobState::Claimed);

    let done = guard.complete().await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert!(!keeper.holds_job("kept"));
    assert_eq!(keeper.held_count(), 0);
    let renewals = store.calls(Op::RenewJob);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        store.calls(Op::RenewJob),
        renewals,
        "not renewed once settled"
    );
    assert_eq!(guard.loss(), None);
    assert!(!guard.token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_hung_job_renewal_is_cut_at_its_deadline_and_delays_no_other_job() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let hung = claim(&keeper, &store, "hung").await;
    let healthy = claim(&keeper, &store, "healthy").await;
    store.inject(Op::RenewJob, Some("hung"), Fault::Hang);
    let deadline = hung.confirmed_deadline().unwrap();

    tokio::time::sleep_until(deadline - ms(1)).await;
    assert_eq!(hung.loss(), None);
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
}

#[tokio::test(start_paused = true)]
async fn a_large_beat_renews_job_claims_in_renew_jobs_chunks_one_queue_per_call() {
    let store = faulty_store();
    let other_queue = faulty_store();
    let keeper = start(&store, config().solo_renewal_limit(2).renew_batch_size(2));
    let t0 = Instant::now();
    let mut guards = Vec::new();
    // Claimed in turns, so that by deadline the two queues' claims alternate.
    for (queue, id) in [
        (&store, "a-1"),
        (&other_queue, "b-1"),
        (&store, "a-2"),
        (&other_queue, "b-2"),
        (&store, "a-3"),
    ] {
        guards.push(claim(&keeper, queue, id).await);
        tokio::time::sleep(ms(10)).await;
    }

    at(t0, BEAT + ms(500)).await;
    assert_eq!(
        store.calls(Op::RenewJobs),
        2,
        "three claims in chunks of two"
    );
    assert_eq!(other_queue.calls(Op::RenewJobs), 1, "its own call");
    assert_eq!(
        store.calls(Op::RenewJob) + other_queue.calls(Op::RenewJob),
        0
    );

    at(t0, TTL * 3 + ms(500)).await;
    assert_eq!(store.calls(Op::RenewJobs), 18, "two calls a beat");
    assert_eq!(other_queue.calls(Op::RenewJobs), 9, "one call a beat");
    for guard in &guards {
        assert_eq!(guard.loss(), None, "{}", guard.id());
        assert!(guard.confirmed_deadline().unwrap() > Instant::now() + BEAT);
    }
}

#[tokio::test(start_paused = true)]
async fn a_claim_lost_within_a_batch_costs_its_neighbours_nothing() {
    let store = faulty_store();
    let keeper = start(&store, config().solo_renewal_limit(0));
    let t0 = Instant::now();
    let mut guards = Vec::new();
    for id in ["job-0", "job-1", "job-2"] {
        guards.push(claim(&keeper, &store, id).await);
    }
    // Completed behind the keeper's back, with the keeper's own claim.
    store.inner().complete(guards[1].claim()).await.unwrap();

    at(t0, BEAT + ms(500)).await;
    assert_eq!(store.calls(Op::RenewJobs), 1, "one batch for the three");
    assert_eq!(
        guards[1].loss(),
        Some(LossCause::JobLost(JobLoss::Finished(JobState::Completed)))
    );
    assert!(guards[1].token().is_cancelled());
    assert!(!keeper.holds_job("job-1"));
    for guard in [&guards[0], &guards[2]] {
        assert_eq!(guard.loss(), None, "{}", guard.id());
        assert!(
            guard.confirmed_deadline().unwrap() > t0 + TTL,
            "{} was renewed",
            guard.id()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_job_costs_its_batch_neighbours_nothing() {
    let store = faulty_store();
    let keeper = start(&store, config().solo_renewal_limit(2));
    let t0 = Instant::now();
    let mut guards = Vec::new();
    for index in 0..4 {
        guards.push(claim(&keeper, &store, &format!("job-{index}")).await);
    }
    // The batch holding job-1 fails as undecodable, and so does job-1 alone.
    store.inject(Op::RenewJobs, Some("job-1"), Fault::Corrupt);
    store.inject(Op::RenewJob, Some("job-1"), Fault::Corrupt);

    at(t0, TTL * 3 + ms(500)).await;
    assert!(store.calls(Op::RenewJobs) > 0, "the beat renews in batches");
    assert_eq!(
        guards[1].loss(),
        Some(LossCause::DeadlinePassed),
        "the undecodable job itself fail-stops at its deadline"
    );
    for guard in [&guards[0], &guards[2], &guards[3]] {
        assert_eq!(guard.loss(), None, "{} was renewed job by job", guard.id());
    }
}

#[tokio::test(start_paused = true)]
async fn job_batches_and_run_batches_share_the_in_flight_bound() {
    let store = faulty_store();
    let keeper = start(
        &store,
        config()
            .solo_renewal_limit(0)
            .renew_batch_size(2)
            .renew_batches_in_flight(2),
    );
    let t0 = Instant::now();
    let mut runs = Vec::new();
    for id in ["run-0", "run-1"] {
        match keeper.admit(keeper.request(id)).await.unwrap() {
            AdmitOutcome::Admitted { guard, .. } => runs.push(guard),
            other => panic!("{other:?}"),
        }
    }
    let mut guards = Vec::new();
    for index in 0..4 {
        guards.push(claim(&keeper, &store, &format!("job-{index}")).await);
    }
    store.inject(Op::RenewMany, None, Fault::Hang);
    store.inject(Op::RenewJobs, None, Fault::Hang);

    at(t0, BEAT + ms(500)).await;
    assert_eq!(
        store.calls(Op::RenewMany) + store.calls(Op::RenewJobs),
        2,
        "three batches are due; two are sent, the last waits its turn"
    );
    store.release_hangs();
    at(t0, BEAT * 2 + ms(500)).await;
    assert!(store.calls(Op::RenewMany) >= 1);
    assert!(
        store.calls(Op::RenewJobs) >= 2,
        "once the first turns end, every batch is sent"
    );
    assert!(guards.iter().all(|guard| guard.loss().is_none()));
    assert!(runs.iter().all(|run| run.loss().is_none()));
}

// ----------------------------------------------------------------- loss --

#[tokio::test(start_paused = true)]
async fn job_requeued_by_the_reaper_cancels_its_task_at_once() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = claim(&keeper, &store, "stalled").await;
    let work = guard.spawn(|_guard| std::future::pending::<()>());
    let token = guard.token();

    let report = reaper_runs_after_a_stall(&store).await;
    assert_eq!(report.requeued.len(), 1);
    let reaped_at = Instant::now();

    token.cancelled().await;
    assert!(
        Instant::now() <= reaped_at + BEAT,
        "noticed within one beat"
    );
    assert_eq!(guard.loss(), Some(LossCause::JobLost(JobLoss::Requeued)));
    assert!(
        work.await.unwrap_err().is_cancelled(),
        "the task is aborted"
    );
    assert!(!keeper.holds_job("stalled"));
    assert!(matches!(
        guard.complete().await,
        Err(JobWriteError::OwnershipLost(LossCause::JobLost(
            JobLoss::Requeued
        )))
    ));
    assert_eq!(store.calls(Op::Complete), 0, "no write after the loss");
    let requeued = stored(&store, "stalled").await;
    assert_eq!((requeued.state, requeued.attempt), (JobState::Queued, 1));
}

#[tokio::test(start_paused = true)]
async fn job_dead_lettered_by_the_reaper_is_noticed_by_check() {
    let store = faulty_store();
    let keeper = start(&store, config());
    enqueue(&store, "last-try", 1).await;
    let guard = keeper
        .claim_jobs(store.clone(), ClaimRequest::new(QUEUE, "w", TTL))
        .await
        .unwrap()
        .remove(0);
    let work = guard.spawn(|_guard| std::future::pending::<()>());
    tokio::time::sleep(ms(200)).await; // past a tenth of a beat, before the next beat
    let report = reaper_runs_after_a_stall(&store).await;
    assert_eq!(report.dead_lettered.len(), 1);

    let noticed_at = Instant::now();
    let lost = guard.check().await.unwrap_err();
    let dead = LossCause::JobLost(JobLoss::Finished(JobState::DeadLettered));
    assert_eq!(lost.cause, dead);
    assert!(work.await.unwrap_err().is_cancelled());
    assert_eq!(Instant::now(), noticed_at, "cancelled without waiting");
    assert_eq!(
        store.calls(Op::RenewJob),
        0,
        "the heartbeat had not looked yet"
    );
    let job = stored(&store, "last-try").await;
    assert_eq!(job.dead_reason, Some(DeadReason::LeaseExpired));
}

#[tokio::test(start_paused = true)]
async fn job_renewal_errors_through_the_confirmed_deadline_fail_stop_the_job() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = claim(&keeper, &store, "job").await;
    let work = guard.spawn(|_guard| std::future::pending::<()>());
    store.inject(Op::RenewJob, None, Fault::Unavailable);

    at(t0, ms(1500)).await; // the beat at 1 s failed: unknown, not lost
    assert_eq!(store.calls(Op::RenewJob), 1);
    assert_eq!(guard.loss(), None);
    assert_eq!(
        guard.confirmed_deadline(),
        Some(t0 + TTL),
        "an error extends nothing"
    );

    tokio::time::sleep_until(t0 + TTL - ms(1)).await;
    assert_eq!(guard.loss(), None);
    tokio::time::sleep_until(t0 + TTL).await;
    tokio::task::yield_now().await;
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
    assert!(guard.token().is_cancelled());
    assert!(work.await.unwrap_err().is_cancelled());
    assert!(!keeper.holds_job("job"));
    assert!(matches!(
        guard.fail("boom", FailAction::DeadLetter).await,
        Err(JobWriteError::OwnershipLost(LossCause::DeadlinePassed))
    ));
    assert_eq!(store.calls(Op::Fail), 0, "no write after the loss");
    assert_eq!(stored(&store, "job").await.state, JobState::Claimed);
}

// ------------------------------------------------------------- settling --

#[tokio::test(start_paused = true)]
async fn renewal_answering_lost_after_complete_settled_is_not_a_loss() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let t0 = Instant::now();
    let guard = claim(&keeper, &store, "job").await;
    // The completion commits at 0.5 s; its answer arrives at 2 s, after the
    // beat at 1 s found the job completed.
    store.inject(Op::Complete, None, Fault::SlowAnswer(ms(1500)));
    at(t0, ms(500)).await;
    let completing = tokio::spawn({
        let guard = guard.clone();
        async move { guard.complete().await }
    });

    at(t0, ms(1500)).await;
    assert_eq!(store.calls(Op::RenewJob), 1);
    assert_eq!(stored(&store, "job").await.state, JobState::Completed);
    assert_eq!(guard.loss(), None, "lost-after-settle is not a loss");

    let completed = completing.await.unwrap().unwrap();
    assert_eq!(completed.state, JobState::Completed);
    assert_eq!(guard.loss(), None);
    assert!(!guard.token().is_cancelled());
    assert!(!keeper.holds_job("job"));
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_complete_fails_closed() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = claim(&keeper, &store, "job").await;
    let before = stored(&store, "job").await;
    store.inject(Op::Complete, None, Fault::Unavailable);

    let answer = guard.complete().await;
    assert!(
        matches!(answer, Err(JobWriteError::Unconfirmed(_))),
        "{answer:?}"
    );
    assert_eq!(guard.loss(), Some(LossCause::UnconfirmedWrite));
    assert!(guard.token().is_cancelled());
    assert!(!keeper.holds_job("job"));
    assert_eq!(
        stored(&store, "job").await,
        before,
        "stored job left as it was"
    );

    let renewals = store.calls(Op::RenewJob);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        store.calls(Op::RenewJob),
        renewals,
        "no renewal after the loss"
    );
    assert!(matches!(
        guard.complete().await,
        Err(JobWriteError::OwnershipLost(LossCause::UnconfirmedWrite))
    ));
}

#[tokio::test(start_paused = true)]
async fn settle_refused_because_a_peer_reclaimed_says_taken_away() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let guard = claim(&keeper, &store, "job").await;
    reaper_runs_after_a_stall(&store).await;
    let peer = store
        .inner()
        .claim(&ClaimRequest::new(QUEUE, "peer:2:x", TTL))
        .await
        .unwrap();
    assert_eq!(peer.len(), 1);

    let answer = guard.complete().await;
    assert!(
        matches!(answer, Err(JobWriteError::TakenAway(JobLoss::OwnerChanged))),
        "{answer:?}"
    );
    assert_eq!(
        guard.loss(),
        Some(LossCause::JobLost(JobLoss::OwnerChanged))
    );
    assert!(guard.token().is_cancelled());
    assert_eq!(
        stored(&store, "job").await,
        peer[0].job,
        "the peer's claim is untouched"
    );
}

#[tokio::test(start_paused = true)]
async fn fail_and_defer_settle_the_job_and_stop_renewing() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let failed = claim(&keeper, &store, "failed").await;
    let backoff = Duration::from_secs(60);
    let job = failed
        .fail("smtp down", FailAction::Retry { backoff })
        .await
        .unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.last_error.as_deref(), Some("smtp down"));
    assert!(!keeper.holds_job("failed"));

    let deferred = claim(&keeper, &store, "deferred").await;
    let missing = BTreeSet::from(["gpu".to_owned()]);
    let job = deferred.defer(&missing).await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Queued, 0));
    assert!(job.required_capabilities.contains("gpu"));
    assert!(matches!(
        deferred.complete().await,
        Err(JobWriteError::AlreadySettled)
    ));

    let renewals = store.calls(Op::RenewJob);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(store.calls(Op::RenewJob), renewals);
    assert_eq!(keeper.held_count(), 0);
    assert_eq!((failed.loss(), deferred.loss()), (None, None));
}

// ------------------------------------------------- shutdown and holding --

#[tokio::test(start_paused = true)]
async fn shutdown_stops_held_jobs_at_the_deadline() {
    let store = faulty_store();
    let keeper = start(&store, config());
    let stuck = claim(&keeper, &store, "stuck").await;
    let work = stuck.spawn(|_guard| std::future::pending::<()>());
    let quick = claim(&keeper, &store, "quick").await;
    let quick_work = quick.spawn(|guard| async move {
        tokio::time::sleep(BEAT).await;
        guard.complete().await
    });

    let t0 = Instant::now();
    let report = keeper.shutdown(t0 + TTL * 2).await;
    assert_eq!(Instant::now(), t0 + TTL * 2);
    assert!(!report.drained);
    assert_eq!(report.stopped_jobs, ["stuck"]);
    assert!(report.stopped_runs.is_empty());
    assert_eq!(stuck.loss(), Some(LossCause::Shutdown));
    assert!(work.await.unwrap_err().is_cancelled());
    assert_eq!(
        quick_work.await.unwrap().unwrap().state,
        JobState::Completed
    );
    assert!(matches!(
        keeper
            .claim_jobs(store.clone(), ClaimRequest::new(QUEUE, "w", TTL))
            .await,
        Err(KeeperError::ShuttingDown)
    ));
}

#[tokio::test(start_paused = true)]
async fn hold_job_takes_a_claim_made_elsewhere_and_checks_its_owner() {
    let store = faulty_store();
    let keeper = start(&store, config());
    enqueue(&store, "own", 3).await;
    let lease = TTL * 2;
    let sent = Instant::now();
    let claimed = store
        .inner()
        .claim(&ClaimRequest::new(QUEUE, keeper.worker_id(), lease))
        .await
        .unwrap()
        .remove(0);

    let stranger = tenure_lease_core::queue::ClaimedJob {
        claim: tenure_lease_core::queue::JobClaim {
            owner: "someone-else".to_owned(),
            ..claimed.claim.clone()
        },
        ..claimed.clone()
    };
    let refused = keeper.hold_job(store.clone(), stranger, sent).unwrap_err();
    assert!(
        matches!(&refused, KeeperError::Store(error) if error.field() == Some("claimed.owner")),
        "{refused:?}"
    );

    let guard = keeper.hold_job(store.clone(), claimed, sent).unwrap();
    assert_eq!(
        guard.confirmed_deadline(),
        Some(sent + lease),
        "the claim's own lease"
    );
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(guard.loss(), None);
    assert!(store.calls(Op::RenewJob) >= 8);

    let single = Keeper::builder(
        store.clone(),
        KeeperConfig::single_worker().reconcile_action(ReconcileAction::default()),
    )
    .start()
    .unwrap();
    let answer = single
        .claim_jobs(store.clone(), ClaimRequest::new(QUEUE, "w", TTL))
        .await;
    assert!(matches!(answer, Err(KeeperError::NoTtl)), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn claim_timeout_is_a_store_error() {
    let store = faulty_store();
    let keeper = start(&store, config());
    store.inject(Op::Claim, None, Fault::Hang);
    let answer = keeper
        .claim_jobs(store.clone(), ClaimRequest::new(QUEUE, "w", TTL))
        .await;
    assert!(
        matches!(&answer, Err(KeeperError::Store(error)) if error.kind() == ErrorKind::Timeout),
        "{answer:?}"
    );
}

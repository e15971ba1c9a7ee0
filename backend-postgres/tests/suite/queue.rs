//! PostgreSQL-specific job-queue behaviour the conformance kit cannot reach:
//! claimers on separate pools contending through `SKIP LOCKED`, fences in
//! claim order, undecodable job rows, and enqueues of one uniqueness key
//! racing at every isolation level.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, Enqueued, JobQueue, JobState, NewJob, UniquePolicy,
};
use tenure_lease_core::ErrorKind;
use tokio::sync::Barrier;

use support::{execute, with_store};

const LONG: Duration = Duration::from_secs(600);
const JOBS: usize = 200;
const CLAIMERS: usize = 4;
/// Small batches, so the claimers take many turns against each other.
const CLAIM_BATCH: usize = 3;

fn ids(claimed: &[ClaimedJob]) -> Vec<&str> {
    claimed.iter().map(|each| each.job.id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimers_on_four_pools_claim_every_job_exactly_once() {
    with_store(
        "claimers_on_four_pools_claim_every_job_exactly_once",
        |store, url| async move {
            let jobs: Vec<NewJob> = (0..JOBS)
                .map(|n| {
                    NewJob::new("work", serde_json::json!({ "n": n }))
                        .id(format!("job-{n:03}"))
                        .priority(i32::try_from(n % 5).expect("small"))
                })
                .collect();
            store.enqueue_batch(&jobs).await.expect("enqueue");

            let start = Arc::new(Barrier::new(CLAIMERS));
            let mut claimers = Vec::with_capacity(CLAIMERS);
            for worker in 0..CLAIMERS {
                // A pool of its own per claimer, as separate processes would have.
                let pool = support::connect(&url, store.schema())
                    .await
                    .expect("claimer store");
                let start = start.clone();
                claimers.push(tokio::spawn(async move {
                    let request = ClaimRequest::new("work", format!("worker-{worker}"), LONG)
                        .limit(CLAIM_BATCH);
                    start.wait().await;
                    let mut mine = Vec::new();
                    loop {
                        let batch = pool.claim(&request).await.expect("claim");
                        if batch.is_empty() {
                            break;
                        }
                        let fences: Vec<u64> = batch.iter().map(|each| each.claim.fence).collect();
                        assert!(
                            fences.windows(2).all(|pair| pair[0] < pair[1]),
                            "fences of one claim not ascending: {fences:?}"
                        );
                        mine.extend(batch);
                    }
                    pool.close().await;
                    mine
                }));
            }
            let mut holder_of: BTreeMap<String, String> = BTreeMap::new();
            let mut fences = BTreeSet::new();
            for claimer in claimers {
                for claimed in claimer.await.expect("claimer") {
                    assert!(fences.insert(claimed.claim.fence), "fence handed out twice");
                    assert_eq!(claimed.claim.attempt, 1);
                    let previous = holder_of.insert(claimed.job.id.clone(), claimed.claim.owner);
                    assert_eq!(previous, None, "{} claimed twice", claimed.job.id);
                }
            }
            assert_eq!(holder_of.len(), JOBS, "every job claimed");
            for (id, owner) in &holder_of {
                let job = store.get_job(id).await.expect("get").expect("present");
                assert_eq!(job.state, JobState::Claimed);
                assert_eq!(job.owner.as_ref(), Some(owner));
                assert_eq!(job.attempt, 1);
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_claim_hands_out_fences_in_claim_order() {
    with_store(
        "one_claim_hands_out_fences_in_claim_order",
        |store, _| async move {
            // Enqueued in the reverse of claim order, so fences drawn in
            // table or insertion order would come out descending.
            let jobs: Vec<NewJob> = (0..20)
                .map(|n| {
                    NewJob::new("work", serde_json::json!(null))
                        .id(format!("job-{n:02}"))
                        .priority(n)
                })
                .collect();
            store.enqueue_batch(&jobs).await.expect("enqueue");
            let claimed = store
                .claim(&ClaimRequest::new("work", "worker-a", LONG).limit(20))
                .await
                .expect("claim");
            let expected: Vec<String> = (0..20).rev().map(|n| format!("job-{n:02}")).collect();
            assert_eq!(ids(&claimed), expected);
            let fences: Vec<u64> = claimed.iter().map(|each| each.claim.fence).collect();
            let first = fences[0];
            assert_eq!(fences, (first..first + 20).collect::<Vec<_>>());
        },
    )
    .await;
}

/// A claim drawing its fences when the sequence is below the WAL
/// timeline's floor (the first draw after a promotion, set up here by
/// moving the sequence back) draws every one above the floor, still one
/// per job, ascending in claim order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_below_the_timeline_floor_draws_every_fence_above_it() {
    with_store(
        "a_claim_below_the_timeline_floor_draws_every_fence_above_it",
        |store, url| async move {
            let jobs: Vec<NewJob> = (0..5)
                .map(|n| NewJob::new("work", serde_json::json!(n)).id(format!("job-{n}")))
                .collect();
            store.enqueue_batch(&jobs).await.expect("enqueue");
            execute(&url, &store, "SELECT setval('$schema.fence_seq', 5)").await;
            let claimed = store
                .claim(&ClaimRequest::new("work", "worker-a", LONG).limit(5))
                .await
                .expect("claim");
            let fences: Vec<u64> = claimed.iter().map(|each| each.claim.fence).collect();
            let first = fences[0];
            assert!(
                first > 1 << 40,
                "a fence below the first timeline's floor: {fences:?}"
            );
            assert_eq!(fences, (first..first + 5).collect::<Vec<_>>());
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_jobs_are_skipped_by_claim_and_reap_and_corrupt_on_get() {
    with_store(
        "undecodable_jobs_are_skipped_by_claim_and_reap_and_corrupt_on_get",
        |store, url| async move {
            let jobs: Vec<NewJob> = ["a", "bad", "c"]
                .into_iter()
                .map(|id| NewJob::new("work", serde_json::json!(id)).id(id))
                .collect();
            store.enqueue_batch(&jobs).await.expect("enqueue");
            execute(
                &url,
                &store,
                "ALTER TABLE $schema.jobs DROP CONSTRAINT jobs_attempt_counted; \
                 UPDATE $schema.jobs SET attempt = -5 WHERE id = 'bad';",
            )
            .await;
            let claimed = store
                .claim(&ClaimRequest::new("work", "worker-a", LONG).limit(3))
                .await
                .expect("claim");
            assert_eq!(ids(&claimed), ["a", "c"]);
            let error = store.get_job("bad").await.expect_err("undecodable");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert!(error.message().contains("attempt"), "{error}");

            execute(
                &url,
                &store,
                "UPDATE $schema.jobs SET lease_expires_at = now() - interval '1 hour' \
                 WHERE state = 'claimed';",
            )
            .await;
            let report = store.reap(Duration::ZERO).await.expect("reap");
            let requeued: Vec<&str> = report.requeued.iter().map(|j| j.id.as_str()).collect();
            assert_eq!(requeued, ["a", "c"]);
            assert!(report.dead_lettered.is_empty());
            let bad_state: String = sqlx::query_scalar(&format!(
                "SELECT state FROM \"{}\".jobs WHERE id = 'bad'",
                store.schema()
            ))
            .fetch_one(store.pool())
            .await
            .expect("read state");
            assert_eq!(bad_state, "queued", "the reaper still handles the row");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_in_batch_names_the_existing_id_and_stores_nothing() {
    with_store(
        "duplicate_in_batch_names_the_existing_id_and_stores_nothing",
        |store, _| async move {
            store
                .enqueue(&NewJob::new("work", serde_json::json!(1)).id("taken"))
                .await
                .expect("enqueue");
            let batch = [
                NewJob::new("work", serde_json::json!(2)).id("fresh"),
                NewJob::new("work", serde_json::json!(3)).id("taken"),
            ];
            let error = store.enqueue_batch(&batch).await.expect_err("duplicate");
            assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{error}");
            assert!(error.message().contains("\"taken\""), "{error}");
            assert_eq!(store.get_job("fresh").await.expect("get"), None);
        },
    )
    .await;
}

/// Enqueuers on pools of their own, whose sessions default to each
/// isolation level, race batches naming the same two uniqueness keys in
/// opposite orders: each key is created exactly once, every other answer
/// names that job, and no batch deadlocks on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_enqueues_of_one_key_create_it_once_at_every_isolation_level() {
    const ENQUEUERS: usize = 6;
    with_store(
        "racing_enqueues_of_one_key_create_it_once_at_every_isolation_level",
        |store, url| async move {
            for isolation in ["read committed", "repeatable read", "serializable"] {
                let queue = isolation.replace(' ', "-");
                let start = Arc::new(Barrier::new(ENQUEUERS));
                let mut enqueuers = Vec::with_capacity(ENQUEUERS);
                for n in 0..ENQUEUERS {
                    let pool =
                        support::connect(&support::with_isolation(&url, isolation), store.schema())
                            .await
                            .expect("enqueuer store");
                    let (start, queue) = (start.clone(), queue.clone());
                    enqueuers.push(tokio::spawn(async move {
                        let mut keys = ["a", "b"];
                        if n % 2 == 1 {
                            keys.reverse();
                        }
                        let batch: Vec<NewJob> = keys
                            .iter()
                            .map(|key| {
                                NewJob::new(&queue, serde_json::json!({}))
                                    .id(format!("{queue}-{n}-{key}"))
                                    .unique(*key, UniquePolicy::WhileUnfinished)
                            })
                            .collect();
                        start.wait().await;
                        let answers = pool.enqueue_unique_batch(&batch).await;
                        pool.close().await;
                        answers.expect("enqueue_unique_batch")
                    }));
                }
                let mut answers = Vec::new();
                for enqueuer in enqueuers {
                    answers.extend(enqueuer.await.expect("enqueuer"));
                }
                for key in ["a", "b"] {
                    let of_key: Vec<&Enqueued> = answers
                        .iter()
                        .filter(|answer| answer.job().id.ends_with(&format!("-{key}")))
                        .collect();
                    let created: Vec<&Enqueued> = of_key
                        .iter()
                        .copied()
                        .filter(|answer| answer.is_created())
                        .collect();
                    assert_eq!(created.len(), 1, "{isolation}, key {key}: {answers:?}");
                    assert_eq!(
                        of_key.len(),
                        ENQUEUERS,
                        "{isolation}, key {key}: {answers:?}"
                    );
                    assert!(
                        of_key.iter().all(|answer| answer.job() == created[0].job()),
                        "{isolation}, key {key}: {answers:?}"
                    );
                }
                let stored = store.list_jobs(&queue, None, 100).await.expect("list_jobs");
                assert_eq!(stored.len(), 2, "{isolation}: {stored:?}");
            }
        },
    )
    .await;
}

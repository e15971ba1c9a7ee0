//! First rough measures of renewal and job-claim throughput. Not run by
//! default:
//!
//! ```text
//! TENURE_PG_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo test -j2 --release -p tenure-backend-postgres --test throughput -- --ignored --nocapture
//! ```

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_backend_postgres::PgStore;
use tenure_lease_core::queue::{ClaimRequest, JobQueue, JobSettle, NewJob};
use tenure_lease_core::{Admission, AdmitRequest, Claim, LeaseStore, Renewal};

const LEASES: usize = 256;
const TASKS: usize = 8;
const RUN_FOR: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn renewals_per_second() {
    support::with_store("renewals_per_second", |store, _| async move {
        let mut claims: Vec<Claim> = Vec::with_capacity(LEASES);
        for n in 0..LEASES {
            let request = AdmitRequest::new(format!("op-{n}"), "worker-a")
                .scope(format!("scope-{n}"))
                .ttl(TTL);
            match store.admit(&request).await.expect("admit") {
                Admission::Admitted { record, .. } => claims.push(record.claim().expect("owned")),
                other => panic!("{other:?}"),
            }
        }
        let claims = Arc::new(claims);

        let renewed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let (store, claims, renewed) = (store.clone(), claims.clone(), renewed.clone());
                tokio::spawn(async move {
                    let mut next = task;
                    while started.elapsed() < RUN_FOR {
                        let outcome = store.renew(&claims[next % LEASES], TTL).await;
                        assert!(
                            matches!(outcome, Ok(Renewal::Renewed { .. })),
                            "{outcome:?}"
                        );
                        renewed.fetch_add(1, Ordering::Relaxed);
                        next += TASKS;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("renewal task");
        }
        let single = renewed.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut batched = 0u64;
        while started.elapsed() < RUN_FOR {
            let outcomes = store.renew_many(&claims, TTL).await.expect("renew_many");
            assert!(outcomes
                .iter()
                .all(|o| matches!(o, Renewal::Renewed { .. })));
            batched += outcomes.len() as u64;
        }
        let many = batched as f64 / started.elapsed().as_secs_f64();
        println!(
            "renew: {single:.0}/s ({TASKS} tasks, pool of {}); \
             renew_many: {many:.0} renewals/s (batches of {LEASES})",
            support::POOL_SIZE
        );
    })
    .await;
}

/// Jobs enqueued per measured phase: more than the phase can claim.
const JOBS_PER_PHASE: usize = 40_000;
/// Largest `enqueue_batch` the contract accepts.
const ENQUEUE_BATCH: usize = 10_000;

async fn enqueue_phase(store: &PgStore, queue: &str) {
    for first in (0..JOBS_PER_PHASE).step_by(ENQUEUE_BATCH) {
        let batch: Vec<NewJob> = (first..first + ENQUEUE_BATCH)
            .map(|n| NewJob::new(queue, serde_json::json!({ "n": n })).id(format!("{queue}-{n}")))
            .collect();
        store.enqueue_batch(&batch).await.expect("enqueue");
    }
}

/// Runs `TASKS` tasks doing `step` (which answers how many jobs it handled)
/// for `RUN_FOR`; answers jobs per second.
async fn per_second<F, Fut>(step: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u64> + Send,
{
    let step = Arc::new(step);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (step, done) = (step.clone(), done.clone());
            tokio::spawn(async move {
                while started.elapsed() < RUN_FOR {
                    let handled = step(task).await;
                    assert!(handled > 0, "the phase ran out of jobs");
                    done.fetch_add(handled, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn claims_per_second() {
    support::with_store("claims_per_second", |store, _| async move {
        for queue in ["settled", "claimed", "bare"] {
            enqueue_phase(&store, queue).await;
        }

        let settled = per_second({
            let store = store.clone();
            move |task| {
                let store = store.clone();
                async move {
                    let request = ClaimRequest::new("settled", format!("worker-{task}"), TTL);
                    let claimed = store.claim(&request).await.expect("claim");
                    for job in &claimed {
                        let settle = store.complete(&job.claim).await.expect("complete");
                        assert!(matches!(settle, JobSettle::Settled(_)), "{settle:?}");
                    }
                    claimed.len() as u64
                }
            }
        })
        .await;

        let claimed_only = per_second({
            let store = store.clone();
            move |task| {
                let store = store.clone();
                async move {
                    let request = ClaimRequest::new("claimed", format!("worker-{task}"), TTL);
                    store.claim(&request).await.expect("claim").len() as u64
                }
            }
        })
        .await;

        // The textbook SKIP LOCKED claim, for comparison: one job, no
        // capabilities, no fence, no answer beyond its id.
        let bare_sql = format!(
            "UPDATE \"{schema}\".jobs SET state = 'claimed', owner = $2, \
             lease_expires_at = now() + interval '10 minutes' \
             WHERE id = (SELECT id FROM \"{schema}\".jobs \
               WHERE queue = $1 AND state = 'queued' AND run_at <= now() \
               ORDER BY priority DESC, run_at, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id",
            schema = store.schema()
        );
        let bare = per_second({
            let (pool, bare_sql) = (store.pool().clone(), Arc::new(bare_sql));
            move |task| {
                let (pool, bare_sql) = (pool.clone(), bare_sql.clone());
                async move {
                    let id: Option<String> = sqlx::query_scalar(&bare_sql)
                        .bind("bare")
                        .bind(format!("worker-{task}"))
                        .fetch_optional(&pool)
                        .await
                        .expect("bare claim");
                    u64::from(id.is_some())
                }
            }
        })
        .await;

        println!(
            "{TASKS} tasks, pool of {}: claim + complete: {settled:.0} jobs/s; \
             claim alone: {claimed_only:.0}/s; bare SKIP LOCKED UPDATE: {bare:.0}/s",
            support::POOL_SIZE
        );
    })
    .await;
}

//! The queue rows: tenure's `claim` (limit n) + `complete_many` beside an
//! apalis worker on `apalis-postgres`, draining the same number of jobs
//! from the same PostgreSQL server with the same number of workers.
//!
//! Both sides are counted the same way: every job handed to a worker is
//! tallied by its number, so a job handed out twice is a duplicate and a job
//! never handed out (or, for apalis, not `Done` in its table once the
//! workers stopped) is lost. Both must be 0.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apalis::prelude::{
    BoxDynError, Data, TaskSink, WorkerBuilder, WorkerBuilderExt, WorkerContext,
};
use apalis_postgres::{Config, PgPool, PostgresStorage};
use tenure::queue::{ClaimRequest, JobSettle, NewJob};
use tenure::Store;

use crate::Result;

/// Each worker's claim ttl: far beyond a round, so nothing is reaped.
const TTL: Duration = Duration::from_secs(120);
/// Jobs per `enqueue_batch` / `push_bulk` call.
const ENQUEUE_CHUNK: usize = 1000;
/// How long an apalis round may take before it is reported as stuck.
const APALIS_TIMEOUT: Duration = Duration::from_secs(300);

/// One drain of one queue.
pub struct Drain {
    pub jobs_per_sec: f64,
    /// Jobs handed out more than once.
    pub duplicates: u64,
    /// Jobs never handed out, or not recorded as done.
    pub lost: u64,
    /// Jobs the store itself records as done (apalis: `Done` rows of
    /// `apalis.jobs`; tenure: completions it accepted).
    pub done: u64,
}

/// Per-job tally: how many times each job number was handed to a worker.
struct Seen {
    counts: Vec<AtomicU32>,
    handled: AtomicUsize,
    all_handled: tokio::sync::Notify,
}

impl Seen {
    fn new(jobs: usize) -> Self {
        Seen {
            counts: (0..jobs).map(|_| AtomicU32::new(0)).collect(),
            handled: AtomicUsize::new(0),
            all_handled: tokio::sync::Notify::new(),
        }
    }

    fn record(&self, job: usize) {
        if let Some(count) = self.counts.get(job) {
            count.fetch_add(1, Ordering::SeqCst);
        }
        if self.handled.fetch_add(1, Ordering::SeqCst) + 1 >= self.counts.len() {
            self.all_handled.notify_one();
        }
    }

    /// Duplicates and jobs never seen.
    fn tally(&self) -> (u64, u64) {
        let counts = self.counts.iter().map(|count| count.load(Ordering::SeqCst));
        counts.fold((0, 0), |(duplicates, lost), count| match count {
            0 => (duplicates, lost + 1),
            1 => (duplicates, lost),
            n => (duplicates + u64::from(n - 1), lost),
        })
    }
}

/// tenure: `workers` tasks each `claim` up to `batch` jobs and settle them
/// with one `complete_many`, until a claim answers none.
pub async fn tenure(
    store: &Arc<dyn Store>,
    queue: &str,
    jobs: usize,
    batch: usize,
    workers: usize,
) -> Result<Drain> {
    let new_jobs: Vec<NewJob> = (0..jobs)
        .map(|n| NewJob::new(queue, serde_json::json!(n)).id(format!("{queue}-{n}")))
        .collect();
    for chunk in new_jobs.chunks(ENQUEUE_CHUNK) {
        store.enqueue_batch(chunk).await?;
    }
    let seen = Arc::new(Seen::new(jobs));
    let accepted = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (store, seen, accepted) =
                (Arc::clone(store), Arc::clone(&seen), Arc::clone(&accepted));
            let queue = queue.to_owned();
            tokio::spawn(async move {
                let request =
                    ClaimRequest::new(&queue, format!("{queue}-w{worker}"), TTL).limit(batch);
                loop {
                    let claimed = store.claim(&request).await?;
                    if claimed.is_empty() {
                        return Ok::<_, crate::Error>(());
                    }
                    let claims: Vec<_> = claimed.iter().map(|job| job.claim.clone()).collect();
                    let settled = store.complete_many(&claims).await?;
                    for (job, settle) in claimed.iter().zip(settled) {
                        if !matches!(settle, JobSettle::Settled(_)) {
                            return Err(format!(
                                "completion of {} refused: {settle:?}",
                                job.claim.id
                            )
                            .into());
                        }
                        let number = job.job.payload.as_u64().ok_or("a job without its number")?;
                        seen.record(usize::try_from(number)?);
                        accepted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let (duplicates, lost) = seen.tally();
    Ok(Drain {
        jobs_per_sec: jobs as f64 / elapsed.as_secs_f64(),
        duplicates,
        lost,
        done: accepted.load(Ordering::SeqCst) as u64,
    })
}

/// The apalis job handler: counts the job, does nothing else.
async fn handle(job: u64, seen: Data<Arc<Seen>>) -> std::result::Result<(), BoxDynError> {
    seen.record(usize::try_from(job)?);
    Ok(())
}

/// How the apalis workers of a drain are built, printed under the table.
pub fn apalis_setup(batch: &str) -> String {
    format!(
        "`PostgresStorage::new(&pool).with_config(Config::default().queue(q).batch_size({batch}))` \
         (defaults otherwise: `lock_tasks` and `persist_results` on, no pubsub), each worker \
         `WorkerBuilder::new(name).backend(storage.clone()).data(..).concurrency({batch}).build(handle)`"
    )
}

/// apalis: `workers` workers on one `PostgresStorage` fetch `batch` jobs per
/// poll (`Config::batch_size`) and run at most `batch` at once
/// (`concurrency`); their acknowledgements are written in batches by the
/// storage. Timed from the start of the workers until every worker has
/// stopped, its last acknowledgements flushed.
pub async fn apalis(
    pool: &PgPool,
    queue: &str,
    jobs: usize,
    batch: usize,
    workers: usize,
) -> Result<Drain> {
    let config = Config::default().queue(queue).batch_size(batch);
    let mut storage = PostgresStorage::<u64>::new(pool).with_config(config);
    let numbers: Vec<u64> = (0..jobs as u64).collect();
    for chunk in numbers.chunks(ENQUEUE_CHUNK) {
        storage
            .push_bulk(chunk.to_vec())
            .await
            .map_err(|error| format!("apalis push: {error:?}"))?;
    }
    let seen = Arc::new(Seen::new(jobs));
    let started = Instant::now();
    let mut contexts = Vec::with_capacity(workers);
    let mut runs = Vec::with_capacity(workers);
    for worker in 0..workers {
        let context = WorkerContext::new(&format!("{queue}-w{worker}"));
        let built = WorkerBuilder::new(&context)
            .backend(storage.clone())
            .data(Arc::clone(&seen))
            .concurrency(batch)
            .build(handle);
        runs.push(tokio::spawn(built.run()));
        contexts.push(context);
    }
    tokio::time::timeout(APALIS_TIMEOUT, seen.all_handled.notified())
        .await
        .map_err(|_| {
            format!(
                "apalis handled {} of {jobs} jobs in {APALIS_TIMEOUT:?}",
                seen.handled.load(Ordering::SeqCst)
            )
        })?;
    for context in &contexts {
        context.stop()?;
    }
    for run in runs {
        run.await??;
    }
    let elapsed = started.elapsed();
    let done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?;
    let (duplicates, never_seen) = seen.tally();
    let done = u64::try_from(done)?;
    Ok(Drain {
        jobs_per_sec: jobs as f64 / elapsed.as_secs_f64(),
        duplicates,
        lost: never_seen.max((jobs as u64).saturating_sub(done)),
        done,
    })
}

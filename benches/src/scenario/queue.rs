//! queue: K jobs, N workers, claim + complete until the queue is empty,
//! against the store's bare claim (PostgreSQL `FOR UPDATE SKIP LOCKED`,
//! SQLite `UPDATE … RETURNING`, Redis `LMOVE`, a `VecDeque` for memory).
//!
//! Every completed id is remembered: a job completed twice is a duplicate
//! (must be 0), and completed jobs must add up to K.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::queue::{ClaimRequest, JobSettle, NewJob};
use lease_core::JobQueue;
use serde::Serialize;

use crate::backend::{Backend, RawBaseline};
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{ratio, Latencies, LatencySummary};
use crate::BenchResult;

const QUEUE: &str = "bench";
const TTL: Duration = Duration::from_secs(120);
/// Jobs per `enqueue_batch` call.
const ENQUEUE_CHUNK: usize = 1000;

/// Figures of one drain of the queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueRun {
    /// Jobs completed.
    pub completed: u64,
    /// Wall time to drain, in seconds.
    pub seconds: f64,
    /// Jobs completed per second.
    pub jobs_per_sec: f64,
    /// Latency of a claim.
    pub claim: LatencySummary,
    /// Latency of a completion.
    pub complete: LatencySummary,
    /// Jobs completed more than once (must be 0).
    pub duplicates: u64,
    /// Completions refused (must be 0: nothing else touches the jobs).
    pub refused_completions: u64,
}

/// The queue report.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// Jobs enqueued.
    pub jobs: usize,
    /// Workers draining.
    pub workers: usize,
    /// tenure's `claim` + `complete`.
    pub tenure: QueueRun,
    /// What the raw baseline runs.
    pub raw_baseline: &'static str,
    /// The bare claim + complete.
    pub raw: QueueRun,
    /// tenure jobs/s ÷ raw jobs/s.
    pub throughput_ratio: Option<f64>,
    /// tenure claim p99 ÷ raw claim p99.
    pub claim_p99_ratio: Option<f64>,
}

/// One worker's claim and complete, tenure's or raw.
enum Drainer {
    Tenure(Arc<dyn JobQueue>),
    Raw(Arc<dyn RawBaseline>),
}

/// What a claim answered: a job to complete (with what completing needs), or none left.
enum Claimed {
    Tenure(lease_core::queue::JobClaim),
    Raw(String),
}

impl Drainer {
    async fn claim(&self, worker: &str) -> BenchResult<Option<Claimed>> {
        match self {
            Drainer::Tenure(queue) => {
                let mut jobs = queue.claim(&ClaimRequest::new(QUEUE, worker, TTL)).await?;
                Ok(jobs.pop().map(|job| Claimed::Tenure(job.claim)))
            }
            Drainer::Raw(raw) => Ok(raw.claim_job(QUEUE, worker).await?.map(Claimed::Raw)),
        }
    }

    /// Completes `claimed`; answers its id and whether the store accepted.
    async fn complete(&self, claimed: Claimed, worker: &str) -> BenchResult<(String, bool)> {
        match (self, claimed) {
            (Drainer::Tenure(queue), Claimed::Tenure(claim)) => {
                let settled = matches!(queue.complete(&claim).await?, JobSettle::Settled(_));
                Ok((claim.id, settled))
            }
            (Drainer::Raw(raw), Claimed::Raw(id)) => {
                let done = raw.complete_job(QUEUE, &id, worker).await?;
                Ok((id, done))
            }
            _ => Err("a claim was completed by the other kind of drainer".into()),
        }
    }
}

/// Runs the scenario.
pub async fn run(
    backend: &dyn Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<QueueReport> {
    let queue = backend.queue();
    progress.cell(format!("queue: enqueueing {} jobs", sizes.queue_jobs));
    let jobs: Vec<NewJob> = (0..sizes.queue_jobs)
        .map(|n| NewJob::new(QUEUE, serde_json::json!({ "n": n })).id(format!("job-{n}")))
        .collect();
    for chunk in jobs.chunks(ENQUEUE_CHUNK) {
        queue.enqueue_batch(chunk).await?;
    }
    progress.cell("queue: tenure claim + complete");
    let tenure = drain(Arc::new(Drainer::Tenure(queue)), sizes.queue_workers).await?;
    progress.cell("queue: raw claim + complete");
    let raw = backend.raw();
    raw.seed_jobs(QUEUE, sizes.queue_jobs).await?;
    let raw_run = drain(
        Arc::new(Drainer::Raw(Arc::clone(&raw))),
        sizes.queue_workers,
    )
    .await?;
    Ok(QueueReport {
        jobs: sizes.queue_jobs,
        workers: sizes.queue_workers,
        throughput_ratio: ratio(tenure.jobs_per_sec, raw_run.jobs_per_sec),
        claim_p99_ratio: ratio(tenure.claim.p99_us as f64, raw_run.claim.p99_us as f64),
        tenure,
        raw_baseline: raw.describe(),
        raw: raw_run,
    })
}

async fn drain(drainer: Arc<Drainer>, workers: usize) -> BenchResult<QueueRun> {
    let completed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (drainer, completed) = (Arc::clone(&drainer), Arc::clone(&completed));
            tokio::spawn(async move {
                let name = format!("queue-worker-{worker}");
                let (mut claims, mut completes) = (Latencies::new(), Latencies::new());
                let (mut duplicates, mut refused) = (0_u64, 0_u64);
                loop {
                    let sent = Instant::now();
                    let Some(claimed) = drainer.claim(&name).await? else {
                        break;
                    };
                    claims.record(sent.elapsed());
                    let sent = Instant::now();
                    let (id, accepted) = drainer.complete(claimed, &name).await?;
                    completes.record(sent.elapsed());
                    if !accepted {
                        refused += 1;
                    } else if !completed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id)
                    {
                        duplicates += 1;
                    }
                }
                Ok::<_, crate::BenchError>((claims, completes, duplicates, refused))
            })
        })
        .collect();
    let mut run = QueueRun::default();
    let (mut claims, mut completes) = (Latencies::new(), Latencies::new());
    for task in tasks {
        let (worker_claims, worker_completes, duplicates, refused) = task.await??;
        claims.merge(&worker_claims);
        completes.merge(&worker_completes);
        run.duplicates += duplicates;
        run.refused_completions += refused;
    }
    run.seconds = started.elapsed().as_secs_f64();
    run.completed = completed.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
    run.jobs_per_sec = run.completed as f64 / run.seconds.max(f64::MIN_POSITIVE);
    run.claim = claims.summary();
    run.complete = completes.summary();
    Ok(run)
}

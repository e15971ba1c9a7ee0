//! queue: K jobs, N workers, claim + complete until the queue is empty,
//! against the store's bare claim (PostgreSQL `FOR UPDATE SKIP LOCKED`,
//! SQLite `UPDATE … RETURNING`, Redis `LMOVE`, a `VecDeque` for memory).
//!
//! The jobs are drained in rounds, tenure and raw in each, so the ratio
//! compares the two under the same load. Every completed id is remembered:
//! a job completed twice is a duplicate (must be 0), and completed jobs must
//! add up to K.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tenure_lease_core::queue::{ClaimRequest, JobSettle, NewJob};
use tenure_lease_core::JobQueue;

use crate::backend::{Backend, RawBaseline};
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{ratio, Latencies, LatencySummary};
use crate::BenchResult;

/// Queue name prefix; round `r` drains `bench-r`.
const QUEUE: &str = "bench";
/// The jobs are split into this many rounds, each drained by tenure and by
/// the raw claim (each first in every other round), so both sides see the
/// machine's load of the same minutes.
const ROUNDS: usize = 4;
const TTL: Duration = Duration::from_secs(120);
/// Jobs per `enqueue_batch` call.
const ENQUEUE_CHUNK: usize = 1000;

/// Figures of one drain of the queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueRun {
    /// Jobs completed.
    pub completed: u64,
    /// Wall time to drain, in µs.
    pub elapsed_us: f64,
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
    Tenure(tenure_lease_core::queue::JobClaim),
    Raw(String),
}

impl Drainer {
    async fn claim(&self, queue_name: &str, worker: &str) -> BenchResult<Option<Claimed>> {
        match self {
            Drainer::Tenure(queue) => {
                let mut jobs = queue
                    .claim(&ClaimRequest::new(queue_name, worker, TTL))
                    .await?;
                Ok(jobs.pop().map(|job| Claimed::Tenure(job.claim)))
            }
            Drainer::Raw(raw) => Ok(raw.claim_job(queue_name, worker).await?.map(Claimed::Raw)),
        }
    }

    /// Completes `claimed`; answers its id and whether the store accepted.
    async fn complete(
        &self,
        queue_name: &str,
        claimed: Claimed,
        worker: &str,
    ) -> BenchResult<(String, bool)> {
        match (self, claimed) {
            (Drainer::Tenure(queue), Claimed::Tenure(claim)) => {
                let settled = matches!(queue.complete(&claim).await?, JobSettle::Settled(_));
                Ok((claim.id, settled))
            }
            (Drainer::Raw(raw), Claimed::Raw(id)) => {
                let done = raw.complete_job(queue_name, &id, worker).await?;
                Ok((id, done))
            }
            _ => Err("a claim was completed by the other kind of drainer".into()),
        }
    }
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<QueueReport> {
    let queue = backend.queue.clone();
    let raw = backend.raw.clone();
    let tenure_drainer = Arc::new(Drainer::Tenure(Arc::clone(&queue)));
    let raw_drainer = Arc::new(Drainer::Raw(Arc::clone(&raw)));
    let (mut tenure, mut raw_tally) = (Tally::default(), Tally::default());
    let per_round = sizes.queue_jobs.div_ceil(ROUNDS);
    for (round, first) in (0..sizes.queue_jobs).step_by(per_round.max(1)).enumerate() {
        let count = per_round.min(sizes.queue_jobs - first);
        let queue_name = format!("{QUEUE}-{round}");
        progress.cell(format!(
            "queue: round {}, enqueueing {count} jobs",
            round + 1
        ));
        let jobs: Vec<NewJob> = (first..first + count)
            .map(|n| NewJob::new(&queue_name, serde_json::json!({ "n": n })).id(format!("job-{n}")))
            .collect();
        for chunk in jobs.chunks(ENQUEUE_CHUNK) {
            queue.enqueue_batch(chunk).await?;
        }
        raw.seed_jobs(&queue_name, count).await?;
        progress.cell(format!(
            "queue: round {}, tenure and raw claim + complete",
            round + 1
        ));
        // Each side drains first in every other round.
        let mut sides = [
            (&tenure_drainer, &mut tenure),
            (&raw_drainer, &mut raw_tally),
        ];
        if round % 2 == 1 {
            sides.reverse();
        }
        for (drainer, tally) in sides {
            drain(drainer, &queue_name, sizes.queue_workers, tally).await?;
        }
    }
    let (tenure, raw_run) = (tenure.into_run(), raw_tally.into_run());
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

/// One side's figures, summed over the rounds.
#[derive(Default)]
struct Tally {
    /// `queue/id` of every job completed so far.
    completed: HashSet<String>,
    claims: Latencies,
    completes: Latencies,
    duplicates: u64,
    refused_completions: u64,
    elapsed: Duration,
}

impl Tally {
    fn into_run(self) -> QueueRun {
        let seconds = self.elapsed.as_secs_f64();
        let completed = self.completed.len() as u64;
        QueueRun {
            completed,
            elapsed_us: crate::stats::micros(self.elapsed),
            jobs_per_sec: completed as f64 / seconds.max(f64::MIN_POSITIVE),
            claim: self.claims.summary(),
            complete: self.completes.summary(),
            duplicates: self.duplicates,
            refused_completions: self.refused_completions,
        }
    }
}

/// `workers` tasks claim and complete jobs of `queue_name` until it is
/// empty; what they saw is added to `tally`.
async fn drain(
    drainer: &Arc<Drainer>,
    queue_name: &str,
    workers: usize,
    tally: &mut Tally,
) -> BenchResult<()> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (drainer, queue_name) = (Arc::clone(drainer), queue_name.to_owned());
            tokio::spawn(async move {
                let name = format!("queue-worker-{worker}");
                let mut seen = WorkerTally::default();
                loop {
                    let sent = Instant::now();
                    let Some(claimed) = drainer.claim(&queue_name, &name).await? else {
                        break;
                    };
                    seen.claims.record(sent.elapsed());
                    let sent = Instant::now();
                    let (id, accepted) = drainer.complete(&queue_name, claimed, &name).await?;
                    seen.completes.record(sent.elapsed());
                    if accepted {
                        seen.completed.push(id);
                    } else {
                        seen.refused += 1;
                    }
                }
                Ok::<_, crate::BenchError>(seen)
            })
        })
        .collect();
    let mut seen = Vec::with_capacity(workers);
    for task in tasks {
        seen.push(task.await??);
    }
    tally.elapsed += started.elapsed();
    for worker in seen {
        tally.claims.merge(&worker.claims);
        tally.completes.merge(&worker.completes);
        tally.refused_completions += worker.refused;
        for id in worker.completed {
            if !tally.completed.insert(format!("{queue_name}/{id}")) {
                tally.duplicates += 1;
            }
        }
    }
    Ok(())
}

/// What one worker of [`drain`] saw.
#[derive(Default)]
struct WorkerTally {
    claims: Latencies,
    completes: Latencies,
    /// Ids whose completion was accepted.
    completed: Vec<String>,
    refused: u64,
}

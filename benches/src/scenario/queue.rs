//! queue: K jobs, N workers, claim + complete until the queue is empty,
//! against the store's bare claim (PostgreSQL `FOR UPDATE SKIP LOCKED`,
//! SQLite `UPDATE … RETURNING`, Redis `LMOVE`, a `VecDeque` for memory).
//!
//! The jobs are drained in rounds, tenure and raw in each, so the ratio
//! compares the two under the same load. `queue-batch` and `long-run` drain
//! with the same workers (`drain_rounds`, `drain`). Every completed id is remembered:
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
    /// The server's CPU time per job completed, in µs, where the server
    /// says it (Redis: its main thread, `INFO cpu`; every client's, so run
    /// on a server of its own).
    pub server_us_per_job: Option<f64>,
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

/// How a worker claims and completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `claim` of one job, then `complete` (raw: `claim_job`, `complete_job`).
    One,
    /// `claim` of up to this many jobs, then `complete_many` of them (raw:
    /// `claim_jobs`, `complete_jobs`).
    Batch(usize),
}

/// One worker's claim and complete, tenure's or raw.
pub(crate) enum Drainer {
    Tenure(Arc<dyn JobQueue>),
    Raw(Arc<dyn RawBaseline>),
}

/// What a claim answered: a job to complete (with what completing needs).
enum Claimed {
    Tenure(tenure_lease_core::queue::JobClaim),
    Raw(String),
}

impl Drainer {
    /// Claims what `mode` asks for; empty when the queue is.
    async fn claim(&self, queue_name: &str, worker: &str, mode: Mode) -> BenchResult<Vec<Claimed>> {
        let limit = match mode {
            Mode::One => 1,
            Mode::Batch(limit) => limit,
        };
        match (self, mode) {
            (Drainer::Tenure(queue), _) => {
                let jobs = queue
                    .claim(&ClaimRequest::new(queue_name, worker, TTL).limit(limit))
                    .await?;
                Ok(jobs
                    .into_iter()
                    .map(|job| Claimed::Tenure(job.claim))
                    .collect())
            }
            (Drainer::Raw(raw), Mode::One) => Ok(raw
                .claim_job(queue_name, worker)
                .await?
                .map(Claimed::Raw)
                .into_iter()
                .collect()),
            (Drainer::Raw(raw), Mode::Batch(limit)) => Ok(raw
                .claim_jobs(queue_name, worker, limit)
                .await?
                .into_iter()
                .map(Claimed::Raw)
                .collect()),
        }
    }

    /// Completes `claimed` as `mode` says; answers each id and whether the
    /// store accepted it.
    async fn complete(
        &self,
        queue_name: &str,
        claimed: Vec<Claimed>,
        worker: &str,
        mode: Mode,
    ) -> BenchResult<Vec<(String, bool)>> {
        match self {
            Drainer::Tenure(queue) => {
                let claims = claimed
                    .into_iter()
                    .map(|claimed| match claimed {
                        Claimed::Tenure(claim) => Ok(claim),
                        Claimed::Raw(_) => Err("a raw claim reached tenure's completion"),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let answers = match mode {
                    Mode::One => {
                        let mut answers = Vec::with_capacity(claims.len());
                        for claim in &claims {
                            answers.push(queue.complete(claim).await?);
                        }
                        answers
                    }
                    Mode::Batch(_) => queue.complete_many(&claims).await?,
                };
                Ok(claims
                    .into_iter()
                    .zip(answers)
                    .map(|(claim, answer)| (claim.id, matches!(answer, JobSettle::Settled(_))))
                    .collect())
            }
            Drainer::Raw(raw) => {
                let ids = claimed
                    .into_iter()
                    .map(|claimed| match claimed {
                        Claimed::Raw(id) => Ok(id),
                        Claimed::Tenure(_) => Err("a tenure claim reached the raw completion"),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let done = match mode {
                    Mode::One => {
                        let mut done = Vec::with_capacity(ids.len());
                        for id in &ids {
                            done.push(raw.complete_job(queue_name, id, worker).await?);
                        }
                        done
                    }
                    Mode::Batch(_) => raw.complete_jobs(queue_name, &ids, worker).await?,
                };
                Ok(ids.into_iter().zip(done).collect())
            }
        }
    }
}

/// Enqueues `count` tenure jobs numbered from `first` into `queue_name`, in
/// chunks of [`ENQUEUE_CHUNK`].
pub(crate) async fn enqueue_jobs(
    queue: &dyn JobQueue,
    queue_name: &str,
    first: usize,
    count: usize,
) -> BenchResult<()> {
    let jobs: Vec<NewJob> = (first..first + count)
        .map(|n| {
            NewJob::new(queue_name, serde_json::json!({ "n": n })).id(format!("{queue_name}-{n}"))
        })
        .collect();
    for chunk in jobs.chunks(ENQUEUE_CHUNK) {
        queue.enqueue_batch(chunk).await?;
    }
    Ok(())
}

/// Drains `jobs` jobs in [`ROUNDS`] rounds of queues named
/// `{prefix}-{round}`, tenure and raw each draining their own queue in every
/// round (each first in every other round); answers tenure's and raw's
/// figures.
pub(crate) async fn drain_rounds(
    backend: &Backend,
    prefix: &str,
    jobs: usize,
    workers: usize,
    mode: Mode,
    progress: &Progress,
) -> BenchResult<(QueueRun, QueueRun)> {
    let queue = backend.queue.clone();
    let raw = backend.raw.clone();
    let tenure_drainer = Arc::new(Drainer::Tenure(Arc::clone(&queue)));
    let raw_drainer = Arc::new(Drainer::Raw(Arc::clone(&raw)));
    let (mut tenure, mut raw_tally) = (Tally::default(), Tally::default());
    let per_round = jobs.div_ceil(ROUNDS);
    for (round, first) in (0..jobs).step_by(per_round.max(1)).enumerate() {
        let count = per_round.min(jobs - first);
        let queue_name = format!("{prefix}-{round}");
        progress.cell(format!(
            "{prefix}: round {}, enqueueing {count} jobs",
            round + 1
        ));
        enqueue_jobs(&*queue, &queue_name, first, count).await?;
        raw.seed_jobs(&queue_name, count).await?;
        progress.cell(format!(
            "{prefix}: round {}, tenure and raw claim + complete",
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
            let before = match &backend.server_time {
                Some(server) => Some(server.busy_usec().await?),
                None => None,
            };
            drain(drainer, &queue_name, workers, mode, tally).await?;
            if let (Some(server), Some(before)) = (&backend.server_time, before) {
                let spent = server.busy_usec().await?.saturating_sub(before);
                tally.server_us = Some(tally.server_us.unwrap_or(0) + spent);
            }
        }
    }
    Ok((tenure.into_run(), raw_tally.into_run()))
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<QueueReport> {
    let (tenure, raw_run) = drain_rounds(
        backend,
        QUEUE,
        sizes.queue_jobs,
        sizes.queue_workers,
        Mode::One,
        progress,
    )
    .await?;
    Ok(QueueReport {
        jobs: sizes.queue_jobs,
        workers: sizes.queue_workers,
        throughput_ratio: ratio(tenure.jobs_per_sec, raw_run.jobs_per_sec),
        claim_p99_ratio: ratio(tenure.claim.p99_us as f64, raw_run.claim.p99_us as f64),
        tenure,
        raw_baseline: backend.raw.describe(),
        raw: raw_run,
    })
}

/// One side's figures, summed over the rounds.
#[derive(Default)]
pub(crate) struct Tally {
    /// `queue/id` of every job completed so far.
    completed: HashSet<String>,
    claims: Latencies,
    completes: Latencies,
    duplicates: u64,
    refused_completions: u64,
    elapsed: Duration,
    /// Server µs in commands while this side drained, where counted.
    server_us: Option<u64>,
}

impl Tally {
    pub(crate) fn into_run(self) -> QueueRun {
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
            server_us_per_job: self
                .server_us
                .map(|usec| usec as f64 / (completed.max(1)) as f64),
        }
    }
}

/// `workers` tasks claim and complete jobs of `queue_name` as `mode` says
/// until it is empty; what they saw is added to `tally`.
pub(crate) async fn drain(
    drainer: &Arc<Drainer>,
    queue_name: &str,
    workers: usize,
    mode: Mode,
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
                    let claimed = drainer.claim(&queue_name, &name, mode).await?;
                    if claimed.is_empty() {
                        break;
                    }
                    seen.claims.record(sent.elapsed());
                    let sent = Instant::now();
                    let answers = drainer.complete(&queue_name, claimed, &name, mode).await?;
                    seen.completes.record(sent.elapsed());
                    for (id, accepted) in answers {
                        if accepted {
                            seen.completed.push(id);
                        } else {
                            seen.refused += 1;
                        }
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

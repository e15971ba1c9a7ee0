//! queue-batch: the queue drained at claim batches of 1, 10 and 100. Each
//! worker claims up to `limit` jobs in one `claim` and completes them in one
//! `complete_many`; the raw baseline claims and completes the same batch
//! with the store's bare batched statements (PostgreSQL `UPDATE … WHERE id
//! IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)` and `UPDATE … WHERE id =
//! ANY($1)`, SQLite the same `UPDATE … RETURNING` in one transaction, Redis
//! `n × LMOVE` and `n × LREM` in one pipeline each, memory a `VecDeque`).
//!
//! At every limit the jobs are drained in rounds, tenure and raw in each, as
//! in `queue`; the figures are jobs/s per limit, tenure ÷ raw at the same
//! limit, and each side's speed-up over its own batch of one.

use serde::Serialize;

use super::queue::{drain_rounds, Mode, QueueRun};
use crate::backend::Backend;
use crate::options::{BackendKind, Sizes};
use crate::progress::Progress;
use crate::stats::ratio;
use crate::BenchResult;

/// etcd drains this many times fewer jobs at each limit: its queue runs at
/// a few hundred jobs per second.
const ETCD_SHARE: usize = 10;

/// Figures at one claim limit.
#[derive(Debug, Clone, Serialize)]
pub struct BatchPoint {
    /// Jobs per claim and per `complete_many`.
    pub limit: usize,
    /// Jobs drained by each side.
    pub jobs: usize,
    /// tenure's `claim` (limit) + `complete_many`.
    pub tenure: QueueRun,
    /// The bare batch claim + completion.
    pub raw: QueueRun,
    /// tenure jobs/s ÷ raw jobs/s.
    pub throughput_ratio: Option<f64>,
    /// tenure jobs/s ÷ tenure jobs/s at limit 1.
    pub speedup: Option<f64>,
    /// raw jobs/s ÷ raw jobs/s at limit 1.
    pub raw_speedup: Option<f64>,
}

/// The queue-batch report.
#[derive(Debug, Clone, Serialize)]
pub struct QueueBatchReport {
    /// Workers draining.
    pub workers: usize,
    /// What the raw baseline runs.
    pub raw_baseline: &'static str,
    /// One point per claim limit, in the order of the sizes.
    pub points: Vec<BatchPoint>,
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<QueueBatchReport> {
    let mut points: Vec<BatchPoint> = Vec::with_capacity(sizes.queue_batches.len());
    for size in &sizes.queue_batches {
        let jobs = match backend.kind {
            BackendKind::Etcd => (size.jobs / ETCD_SHARE).max(size.limit),
            _ => size.jobs,
        };
        let prefix = format!("batch{}", size.limit);
        let (tenure, raw) = drain_rounds(
            backend,
            &prefix,
            jobs,
            sizes.queue_workers,
            Mode::Batch(size.limit),
            progress,
        )
        .await?;
        // Each side's jobs/s at limit 1, measured before (or now).
        let one = points
            .iter()
            .find(|point| point.limit == 1)
            .map(|one| (one.tenure.jobs_per_sec, one.raw.jobs_per_sec))
            .or((size.limit == 1).then_some((tenure.jobs_per_sec, raw.jobs_per_sec)));
        points.push(BatchPoint {
            limit: size.limit,
            jobs,
            throughput_ratio: ratio(tenure.jobs_per_sec, raw.jobs_per_sec),
            speedup: one.and_then(|(one, _)| ratio(tenure.jobs_per_sec, one)),
            raw_speedup: one.and_then(|(_, one)| ratio(raw.jobs_per_sec, one)),
            tenure,
            raw,
        });
    }
    Ok(QueueBatchReport {
        workers: sizes.queue_workers,
        raw_baseline: backend.raw.describe_batch(),
        points,
    })
}

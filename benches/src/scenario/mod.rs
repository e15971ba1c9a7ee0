//! The scenarios, one module each, and the timed loop they share.
//!
//! Every scenario takes an opened [`Backend`](crate::backend::Backend) and
//! answers a serialisable report; none prints. Timed loops run each worker
//! as its own tokio task until the cell's time is up (or the work runs
//! out), so latencies include the scheduler as a real caller would see it.

pub mod heartbeat;
pub mod hot_key;
pub mod queue;
pub mod scaling;
pub mod single_op;
pub mod takeover;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::stats::{Latencies, Throughput};
use crate::BenchResult;

/// What one call of a timed operation answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Done; count it and go on.
    Done,
    /// Nothing left to do for this worker; stop it (not counted).
    Exhausted,
}

/// Runs `workers` tasks, each calling `operation(worker, iteration)` until
/// `duration` has passed or it answers [`Step::Exhausted`], and answers the
/// throughput and latency of every counted call. The first error stops the
/// measurement and is answered.
pub async fn drive<F, Fut>(
    workers: usize,
    duration: Duration,
    operation: F,
) -> BenchResult<Throughput>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<Step>> + Send + 'static,
{
    let operation = Arc::new(operation);
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let operation = Arc::clone(&operation);
            tokio::spawn(async move {
                let mut latencies = Latencies::new();
                let mut iteration = 0_u64;
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    if operation(worker, iteration).await? == Step::Exhausted {
                        break;
                    }
                    latencies.record(sent.elapsed());
                    iteration += 1;
                }
                Ok::<_, crate::BenchError>((latencies, Instant::now()))
            })
        })
        .collect();
    let mut all = Latencies::new();
    let mut finished = started;
    for task in tasks {
        let (latencies, ended) = task.await??;
        all.merge(&latencies);
        finished = finished.max(ended);
    }
    Ok(Throughput::from_latencies(&all, finished - started))
}

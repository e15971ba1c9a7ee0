//! The scenarios, one module each, and the timed loop they share.
//!
//! Every scenario takes an opened [`Backend`](crate::backend::Backend) and
//! answers a serialisable report; none prints. Timed loops run each worker
//! as its own tokio task until the cell's time is up (or the work runs
//! out), so latencies include the scheduler as a real caller would see it.

pub mod heartbeat;
pub mod hot_key;
pub mod long_run;
pub mod queue;
pub mod queue_batch;
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

/// Slices [`drive_alternating`] cuts each side's time into.
const SLICES: u32 = 10;

/// Runs two timed operations for `duration` each, in alternating slices
/// (first, second, second, first, …), and answers the throughput and latency of
/// every counted call of each. Each side runs `workers` tasks calling its
/// operation with `(worker, iteration)` until its time is up or it answers
/// [`Step::Exhausted`]; the first error stops the measurement and is
/// answered.
///
/// A ratio of two loops run one after the other also measures whatever the
/// machine did in between (a build starting, a disk flush); alternating
/// short slices gives both sides the same weather, so the ratio between
/// them holds where their absolute figures do not.
pub async fn drive_alternating<F, Fut, G, Gut>(
    workers: usize,
    duration: Duration,
    first: F,
    second: G,
) -> BenchResult<(Throughput, Throughput)>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<Step>> + Send + 'static,
    G: Fn(usize, u64) -> Gut + Send + Sync + 'static,
    Gut: Future<Output = BenchResult<Step>> + Send + 'static,
{
    let slice = duration / SLICES;
    let mut first = TimedLoop::new(workers, first);
    let mut second = TimedLoop::new(workers, second);
    for pair in 0..SLICES {
        // Each side goes first in half the pairs, so neither always runs
        // on what the other left behind (dirty pages, a grown WAL).
        if pair % 2 == 0 {
            first.run_for(slice).await?;
            second.run_for(slice).await?;
        } else {
            second.run_for(slice).await?;
            first.run_for(slice).await?;
        }
    }
    Ok((first.throughput(), second.throughput()))
}

/// One timed operation measured over one or more slices of time. Each
/// worker's iterations count on across slices, so an operation keyed by
/// its iteration never repeats a key.
struct TimedLoop<F> {
    operation: Arc<F>,
    /// Per worker: the next iteration, or `None` once it answered
    /// [`Step::Exhausted`].
    next: Vec<Option<u64>>,
    latencies: Latencies,
    elapsed: Duration,
    /// Ops/s of each slice run.
    slice_rates: Vec<f64>,
}

impl<F, Fut> TimedLoop<F>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<Step>> + Send + 'static,
{
    fn new(workers: usize, operation: F) -> Self {
        TimedLoop {
            operation: Arc::new(operation),
            next: vec![Some(0); workers],
            latencies: Latencies::new(),
            elapsed: Duration::ZERO,
            slice_rates: Vec::new(),
        }
    }

    /// Runs every worker not yet exhausted for `duration`.
    async fn run_for(&mut self, duration: Duration) -> BenchResult<()> {
        let started = Instant::now();
        let deadline = started + duration;
        let tasks: Vec<_> = self
            .next
            .iter()
            .enumerate()
            .filter_map(|(worker, next)| next.map(|first| (worker, first)))
            .map(|(worker, first)| {
                let operation = Arc::clone(&self.operation);
                tokio::spawn(async move {
                    let mut latencies = Latencies::new();
                    let mut iteration = first;
                    let mut exhausted = false;
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        if operation(worker, iteration).await? == Step::Exhausted {
                            exhausted = true;
                            break;
                        }
                        latencies.record(sent.elapsed());
                        iteration += 1;
                    }
                    let next = (!exhausted).then_some(iteration);
                    Ok::<_, crate::BenchError>((worker, next, latencies, Instant::now()))
                })
            })
            .collect();
        if tasks.is_empty() {
            return Ok(());
        }
        let mut finished = started;
        let mut slice = Latencies::new();
        for task in tasks {
            let (worker, next, latencies, ended) = task.await??;
            self.next[worker] = next;
            slice.merge(&latencies);
            finished = finished.max(ended);
        }
        self.latencies.merge(&slice);
        self.elapsed += finished - started;
        let rate = Throughput::from_latencies(&slice, finished - started).ops_per_sec;
        // A slice some worker ran out of work in is not a measure of speed.
        if self.next.iter().all(Option::is_some) {
            self.slice_rates.push(rate);
        }
        Ok(())
    }

    fn throughput(&self) -> Throughput {
        Throughput::from_latencies(&self.latencies, self.elapsed).with_slices(&self.slice_rates)
    }
}

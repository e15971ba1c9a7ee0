//! A rough figure for the job queue: jobs per second through one worker on
//! one store, each job claimed and then completed (two transactions), for
//! each durability, with tens of thousands of jobs waiting in the queue.
//!
//! ```text
//! cargo run --release -p tenure-backend-sqlite --example claim_throughput
//! ```
//!
//! The file lives in a temporary directory (set `TMPDIR` to measure another
//! disk); figures depend mostly on how fast that disk syncs.

use std::time::{Duration, Instant};

use tenure_backend_sqlite::{Durability, SqliteConfig, SqliteStore};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, JobSettle, NewJob};

const QUEUE: &str = "bench";
/// Jobs waiting when the measurement starts: more than one worker gets
/// through in [`MEASURE_FOR`] at `NORMAL` durability.
const JOBS: usize = 50_000;
/// Jobs per `enqueue_batch` (the largest batch allowed).
const BATCH: usize = 10_000;
const MEASURE_FOR: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for durability in [Durability::Full, Durability::Normal] {
        let directory = tempfile::TempDir::new()?;
        let config = SqliteConfig::new(directory.path().join("jobs.db")).durability(durability);
        let store = SqliteStore::open(config).await?;
        for first in (0..JOBS).step_by(BATCH) {
            let batch: Vec<NewJob> = (first..first + BATCH)
                .map(|index| NewJob::new(QUEUE, serde_json::json!({ "index": index })))
                .collect();
            store.enqueue_batch(&batch).await?;
        }

        let request = ClaimRequest::new(QUEUE, "bench-worker", TTL);
        let mut completed = 0;
        let start = Instant::now();
        while start.elapsed() < MEASURE_FOR {
            let Some(claimed) = store.claim(&request).await?.pop() else {
                break;
            };
            if matches!(store.complete(&claimed.claim).await?, JobSettle::Settled(_)) {
                completed += 1;
            }
        }
        let elapsed = start.elapsed();
        println!(
            "{durability:?}: claim + complete {:.0} jobs/s ({completed} jobs in {elapsed:.2?})",
            completed as f64 / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

//! The worker to copy: connect by URL, hold each run under a keeper, stop
//! the work the moment its lease is lost, shut down cleanly.
//!
//! The store is the URL given as the first argument, else `TENURE_URL`,
//! else a SQLite file, `sqlite:worker.db`; any backend whose feature is on
//! (`cargo run --example worker --features sqlite,postgres --
//! 'postgres://app@db/jobs?schema=tenure'`: quote a URL with `?` for the
//! shell). Each run has a new id, so running it again is a new run; the
//! scope keeps two copies of the worker from running the report at once.

use std::sync::Arc;
use std::time::Duration;

use tenure::{AdmitOutcome, Keeper, KeeperConfig, LeaseStore, StatusChange};

#[tokio::main]
async fn main() -> tenure::Result<()> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TENURE_URL").ok());
    run(url.as_deref().unwrap_or("sqlite:worker.db")).await
}

/// One run of the nightly report on the store `url` names.
pub async fn run(url: &str) -> tenure::Result<()> {
    let store: Arc<dyn LeaseStore> = tenure::connect(url).await?;
    let keeper = Keeper::builder(store, KeeperConfig::with_ttl(Duration::from_secs(30))).start()?;

    let request = keeper
        .request(tenure::generate_id())
        .scope("report:nightly");
    match keeper.admit(request).await? {
        AdmitOutcome::Admitted { guard, .. } => {
            let work = guard.spawn(|guard| async move {
                for item in 1..=3 {
                    guard.check().await?; // stop as soon as the lease is gone
                    println!("item {item} of the report, under fence {}", guard.fence());
                }
                guard.complete(StatusChange::succeeded()).await?;
                Ok::<_, tenure::Error>(())
            });
            match work.await {
                Ok(finished) => finished?,
                // The keeper aborts the work the moment the lease is lost.
                Err(stopped) if stopped.is_cancelled() => println!("lost the lease; stopped"),
                Err(panicked) => std::panic::resume_unwind(panicked.into_panic()),
            }
        }
        AdmitOutcome::Conflict {
            holder,
            retry_after,
        } => {
            println!("{} runs the report; retry after {retry_after:?}", holder.id);
        }
        other => println!("not admitted: {other:?}"),
    }
    keeper.shutdown_within(Duration::from_secs(10)).await;
    Ok(())
}

//! A first rough figure: renewals per second on one store (one connection),
//! for each durability, one claim per call and in `renew_many` batches.
//!
//! ```text
//! cargo run --release -p tenure-backend-sqlite --example renew_throughput
//! ```
//!
//! The file lives in a temporary directory (set `TMPDIR` to measure another
//! disk); figures depend mostly on how fast that disk syncs.

use std::time::{Duration, Instant};

use tenure_backend_sqlite::{Durability, SqliteConfig, SqliteStore};
use tenure_lease_core::{AdmitRequest, Claim, LeaseStore, Renewal};

const LEASES: usize = 100;
const MEASURE_FOR: Duration = Duration::from_secs(2);
const TTL: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for durability in [Durability::Full, Durability::Normal] {
        let directory = tempfile::TempDir::new()?;
        let config = SqliteConfig::new(directory.path().join("leases.db")).durability(durability);
        let store = SqliteStore::open(config).await?;
        let mut claims: Vec<Claim> = Vec::with_capacity(LEASES);
        for index in 0..LEASES {
            let request = AdmitRequest::new(format!("lease-{index}"), "bench")
                .scope(format!("scope-{index}"))
                .ttl(TTL);
            let admission = store.admit(&request).await?;
            let record = admission.admitted().ok_or("admission conflicted")?;
            claims.extend(record.claim());
        }

        let (single, single_rate) = measure(|round| {
            let store = &store;
            let claim = &claims[round % claims.len()];
            async move {
                let renewal = store.renew(claim, TTL).await?;
                Ok::<_, tenure_lease_core::Error>(usize::from(matches!(
                    renewal,
                    Renewal::Renewed { .. }
                )))
            }
        })
        .await?;
        let (batched, batched_rate) = measure(|_| {
            let store = &store;
            let claims = &claims;
            async move {
                let renewals = store.renew_many(claims, TTL).await?;
                Ok(renewals
                    .iter()
                    .filter(|renewal| matches!(renewal, Renewal::Renewed { .. }))
                    .count())
            }
        })
        .await?;
        println!(
            "{durability:?}: renew {single_rate:.0}/s ({single} renewals), \
             renew_many x{LEASES} {batched_rate:.0}/s ({batched} renewals)"
        );
    }
    Ok(())
}

/// Runs `round` back to back for [`MEASURE_FOR`]; answers how many renewals
/// succeeded and how many per second.
async fn measure<F, Fut>(mut round: F) -> Result<(usize, f64), tenure_lease_core::Error>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<usize, tenure_lease_core::Error>>,
{
    let start = Instant::now();
    let mut renewed = 0;
    let mut rounds = 0;
    while start.elapsed() < MEASURE_FOR {
        renewed += round(rounds).await?;
        rounds += 1;
    }
    Ok((renewed, renewed as f64 / start.elapsed().as_secs_f64()))
}

//! A first rough measure of renewal throughput. Not run by default:
//!
//! ```text
//! TENURE_PG_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo test -j2 --release -p backend-postgres --test throughput -- --ignored --nocapture
//! ```

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{Admission, AdmitRequest, Claim, LeaseStore, Renewal};

const LEASES: usize = 256;
const TASKS: usize = 8;
const RUN_FOR: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release with --ignored --nocapture"]
async fn renewals_per_second() {
    support::with_store("renewals_per_second", |store, _| async move {
        let mut claims: Vec<Claim> = Vec::with_capacity(LEASES);
        for n in 0..LEASES {
            let request = AdmitRequest::new(format!("op-{n}"), "worker-a")
                .scope(format!("scope-{n}"))
                .ttl(TTL);
            match store.admit(&request).await.expect("admit") {
                Admission::Admitted { record, .. } => claims.push(record.claim().expect("owned")),
                other => panic!("{other:?}"),
            }
        }
        let claims = Arc::new(claims);

        let renewed = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let (store, claims, renewed) = (store.clone(), claims.clone(), renewed.clone());
                tokio::spawn(async move {
                    let mut next = task;
                    while started.elapsed() < RUN_FOR {
                        let outcome = store.renew(&claims[next % LEASES], TTL).await;
                        assert!(
                            matches!(outcome, Ok(Renewal::Renewed { .. })),
                            "{outcome:?}"
                        );
                        renewed.fetch_add(1, Ordering::Relaxed);
                        next += TASKS;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("renewal task");
        }
        let single = renewed.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut batched = 0u64;
        while started.elapsed() < RUN_FOR {
            let outcomes = store.renew_many(&claims, TTL).await.expect("renew_many");
            assert!(outcomes
                .iter()
                .all(|o| matches!(o, Renewal::Renewed { .. })));
            batched += outcomes.len() as u64;
        }
        let many = batched as f64 / started.elapsed().as_secs_f64();
        println!(
            "renew: {single:.0}/s ({TASKS} tasks, pool of {}); \
             renew_many: {many:.0} renewals/s (batches of {LEASES})",
            support::POOL_SIZE
        );
    })
    .await;
}

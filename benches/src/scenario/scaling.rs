//! scaling: renewals by N = 1, 2, 4 … concurrent workers, each on its own
//! keys, against the raw compare-and-set at the same N (alternating slices
//! of one cell, so both see the same load).
//!
//! Renewal is what a busy system does most (every held lease, every beat),
//! and distinct keys leave only the store's own serialisation in the way:
//! SQLite's single writer, PostgreSQL's pool and row locks, Redis's single
//! thread, the memory store's mutex.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tenure_lease_core::{Admission, AdmitRequest, Claim, Renewal};

use super::{drive_alternating, Step};
use crate::backend::Backend;
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{ratio, Throughput};
use crate::BenchResult;

const TTL: Duration = Duration::from_secs(120);
const OWNER: &str = "bench-owner";

/// Figures at one worker count.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingPoint {
    /// Concurrent workers.
    pub workers: usize,
    /// tenure's renew.
    pub tenure: Throughput,
    /// The raw compare-and-set.
    pub raw: Throughput,
    /// tenure ops/s ÷ raw ops/s at this N.
    pub throughput_ratio: Option<f64>,
    /// tenure p99 ÷ raw p99 at this N.
    pub p99_ratio: Option<f64>,
}

/// The scaling report.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingReport {
    /// The operation measured.
    pub op: &'static str,
    /// Keys per worker.
    pub keys_per_worker: usize,
    /// One point per worker count.
    pub points: Vec<ScalingPoint>,
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<ScalingReport> {
    let store = backend.store.clone();
    let raw = backend.raw.clone();
    let per_worker = sizes.keys_per_worker.max(1);
    let most_workers = sizes.workers.iter().copied().max().unwrap_or(1);
    let total = most_workers * per_worker;

    progress.cell(format!("scaling: admitting {total} leases"));
    let mut claims = Vec::with_capacity(total);
    for n in 0..total {
        let request = AdmitRequest::new(format!("scale-{n}"), OWNER)
            .scope(format!("scale-scope-{n}"))
            .ttl(TTL);
        match store.admit(&request).await? {
            Admission::Admitted { record, .. } => {
                claims.push(record.claim().ok_or("admitted record has no owner")?);
            }
            other => return Err(format!("fresh admission answered {}", other.label()).into()),
        }
        if !raw.insert(&format!("scale-{n}"), OWNER, TTL).await? {
            return Err("raw insert of a fresh key did nothing".into());
        }
    }
    let claims: Arc<Vec<Claim>> = Arc::new(claims);

    let mut points = Vec::with_capacity(sizes.workers.len());
    for &workers in &sizes.workers {
        progress.cell(format!("scaling: {workers} workers"));
        let key_of = move |worker: usize, n: u64| worker * per_worker + n as usize % per_worker;
        let (tenure, raw_figures) = {
            let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
            let raw = Arc::clone(&raw);
            drive_alternating(
                workers,
                sizes.cell,
                move |worker, n| {
                    let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
                    async move {
                        match store.renew(&claims[key_of(worker, n)], TTL).await? {
                            Renewal::Renewed { .. } => Ok(Step::Done),
                            other => {
                                Err(format!("renewal of a held lease answered {other:?}").into())
                            }
                        }
                    }
                },
                move |worker, n| {
                    let raw = Arc::clone(&raw);
                    async move {
                        let key = format!("scale-{}", key_of(worker, n));
                        if raw.cas(&key, OWNER, 1, TTL).await? {
                            Ok(Step::Done)
                        } else {
                            Err(format!("raw compare-and-set of {key} did nothing").into())
                        }
                    }
                },
            )
            .await?
        };
        points.push(ScalingPoint {
            workers,
            throughput_ratio: ratio(tenure.ops_per_sec, raw_figures.ops_per_sec),
            p99_ratio: ratio(
                tenure.latency.p99_us as f64,
                raw_figures.latency.p99_us as f64,
            ),
            tenure,
            raw: raw_figures,
        });
    }
    Ok(ScalingReport {
        op: "renew",
        keys_per_worker: per_worker,
        points,
    })
}

//! single-op: admit, renew, transition and takeover, one worker, many keys,
//! each against the bare statement of the same store.
//!
//! The phases feed each other, so every operation does real work: admit
//! creates the records (short leases), renew extends them, transition moves
//! them Pending → Running, and once their leases have lapsed takeover adopts
//! them. The raw baseline inserts its keys, then compare-and-sets them; its
//! compare-and-set is the baseline of all three fenced writes (Redis's
//! script floors have one for each). Each tenure
//! operation and its baseline run in alternating slices of the same cell
//! ([`drive_alternating`]), so the ratio compares them under the same load.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, LeaseStore, NotTakenReason, Renewal, StatusChange, Takeover,
    TakeoverRequest, Transition,
};

use super::{drive_alternating, Step};
use crate::backend::{Backend, RawBaseline};
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{ratio, Throughput};
use crate::BenchResult;

/// Most records one phase creates: keeps the memory backend's run bounded.
const MAX_RECORDS: usize = 50_000;
/// Lease of the admitted records: short, so takeover can follow.
const SHORT_TTL: Duration = Duration::from_millis(200);
/// Lease of the raw keys: long, because Redis drops a lapsed key, and the
/// baseline's compare-and-set must find its key as renew finds its record
/// (a lapsed lease is still renewable until someone takes it over).
const RAW_TTL: Duration = Duration::from_secs(120);
const OWNER: &str = "bench-owner";
/// The id, scope and raw key of the untimed first calls ([`warm_up`]).
const WARM_UP: &str = "warm-up";

/// One call of a timed operation, boxed so one closure can serve three cells.
type StepFuture = Pin<Box<dyn Future<Output = BenchResult<Step>> + Send>>;

/// Figures of one operation.
#[derive(Debug, Clone, Serialize)]
pub struct OpFigure {
    /// The tenure operation.
    pub op: &'static str,
    /// Its throughput and latency.
    pub tenure: Throughput,
    /// The raw statement it is compared with.
    pub raw_op: &'static str,
    /// The raw statement's throughput and latency.
    pub raw: Throughput,
    /// tenure ops/s ÷ raw ops/s (1 = as fast as the bare statement).
    pub throughput_ratio: Option<f64>,
    /// tenure p50 ÷ raw p50 (1 = no added latency).
    pub p50_ratio: Option<f64>,
}

/// One untimed call of each side before the first cell: a server
/// connection's first statement after the migrations rebuilds its catalog
/// caches (91 ms on PostgreSQL, logged by the server, once per connection),
/// which would otherwise count as one admission.
async fn warm_up(store: &dyn LeaseStore, raw: &dyn RawBaseline) -> BenchResult<()> {
    let request = AdmitRequest::new(WARM_UP, OWNER)
        .scope(WARM_UP)
        .ttl(SHORT_TTL);
    if store.admit(&request).await?.admitted().is_none() {
        return Err("single-op: the warm-up admission was refused".into());
    }
    if !raw.insert(WARM_UP, OWNER, RAW_TTL).await? {
        return Err("single-op: the warm-up raw insert did nothing".into());
    }
    Ok(())
}

/// The single-op report.
#[derive(Debug, Clone, Serialize)]
pub struct SingleOpReport {
    /// What the raw baseline runs.
    pub raw_baseline: &'static str,
    /// One figure per operation.
    pub ops: Vec<OpFigure>,
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<SingleOpReport> {
    let store = backend.store.clone();
    let raw = backend.raw.clone();
    let claims: Arc<Mutex<Vec<Claim>>> = Arc::default();
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();

    warm_up(store.as_ref(), raw.as_ref()).await?;
    progress.cell("single-op: admit | raw insert");
    let (admit, raw_insert) = {
        let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
        let (raw, keys) = (Arc::clone(&raw), Arc::clone(&keys));
        drive_alternating(
            1,
            sizes.cell,
            move |_, n| {
                let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
                async move {
                    if n as usize >= MAX_RECORDS {
                        return Ok(Step::Exhausted);
                    }
                    let request = AdmitRequest::new(format!("op-{n}"), OWNER)
                        .scope(format!("scope-{n}"))
                        .ttl(SHORT_TTL);
                    match store.admit(&request).await? {
                        Admission::Admitted { record, .. } => {
                            let claim = record.claim().ok_or("admitted record has no owner")?;
                            lock(&claims).push(claim);
                            Ok(Step::Done)
                        }
                        other => Err(format!("fresh admission answered {}", other.label()).into()),
                    }
                }
            },
            move |_, n| {
                let (raw, keys) = (Arc::clone(&raw), Arc::clone(&keys));
                async move {
                    if n as usize >= MAX_RECORDS {
                        return Ok(Step::Exhausted);
                    }
                    let key = format!("op-{n}");
                    if !raw.insert(&key, OWNER, RAW_TTL).await? {
                        return Err(format!("raw insert of fresh key {key} did nothing").into());
                    }
                    lock(&keys).push(key);
                    Ok(Step::Done)
                }
            },
        )
        .await?
    };
    let claims: Arc<Vec<Claim>> = Arc::new(std::mem::take(&mut *lock(&claims)));
    let keys: Arc<Vec<String>> = Arc::new(std::mem::take(&mut *lock(&keys)));
    if claims.is_empty() || keys.is_empty() {
        return Err("single-op: no record (or no raw key) was admitted in the cell's time".into());
    }

    progress.cell("single-op: renew | raw compare-and-set");
    let (renew, raw_cas_renew) = {
        let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
        drive_alternating(
            1,
            sizes.cell,
            move |_, n| {
                let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
                async move {
                    let claim = &claims[n as usize % claims.len()];
                    match store.renew(claim, SHORT_TTL).await? {
                        Renewal::Renewed { .. } => Ok(Step::Done),
                        other => Err(format!("renewal of a held lease answered {other:?}").into()),
                    }
                }
            },
            raw_fenced_write(&raw, &keys, FencedWrite::Renew),
        )
        .await?
    };

    progress.cell("single-op: transition | raw compare-and-set");
    let (transition, raw_cas_transition) = {
        let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
        drive_alternating(
            1,
            sizes.cell,
            move |_, n| {
                let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
                async move {
                    let Some(claim) = claims.get(n as usize) else {
                        return Ok(Step::Exhausted);
                    };
                    match store.transition(claim, &StatusChange::running()).await? {
                        Transition::Applied(_) => Ok(Step::Done),
                        other => Err(format!("pending → running answered {other:?}").into()),
                    }
                }
            },
            raw_fenced_write(&raw, &keys, FencedWrite::Transition),
        )
        .await?
    };

    progress.cell("single-op: takeover | raw compare-and-set");
    wait_until_lapsed(&*store).await?;
    let (takeover, raw_cas_takeover) = {
        let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
        drive_alternating(
            1,
            sizes.cell,
            move |_, n| {
                let (store, claims) = (Arc::clone(&store), Arc::clone(&claims));
                async move {
                    let Some(claim) = claims.get(n as usize) else {
                        return Ok(Step::Exhausted);
                    };
                    let request = TakeoverRequest::adopt(
                        &claim.id,
                        "bench-rival",
                        Some(Duration::from_secs(60)),
                    );
                    match store.claim_for_takeover(&request).await? {
                        Takeover::Taken(_) => Ok(Step::Done),
                        other => {
                            Err(format!("takeover of a lapsed lease answered {other:?}").into())
                        }
                    }
                }
            },
            raw_fenced_write(&raw, &keys, FencedWrite::Takeover),
        )
        .await?
    };

    let figure = |op, tenure: Throughput, raw_op, raw: Throughput| OpFigure {
        op,
        tenure,
        raw_op,
        raw,
        throughput_ratio: ratio(tenure.ops_per_sec, raw.ops_per_sec),
        p50_ratio: ratio(tenure.latency.p50_us as f64, raw.latency.p50_us as f64),
    };
    Ok(SingleOpReport {
        raw_baseline: raw.describe(),
        ops: vec![
            figure("admit", admit, "insert", raw_insert),
            figure("renew", renew, "cas", raw_cas_renew),
            figure("transition", transition, "cas", raw_cas_transition),
            figure("takeover", takeover, "cas", raw_cas_takeover),
        ],
    })
}

/// Waits until every lease written so far has lapsed by the store's own
/// judgement: a sentinel admitted after them, with the same short lease, is
/// taken over as soon as it can be. A fixed wait of the ttl cannot tell on a
/// store whose leases end on a timer of its own (etcd: a 2 s minimum, ended
/// by the leader a little after the ttl), which answers `LeaseValid` until
/// then.
async fn wait_until_lapsed(store: &dyn LeaseStore) -> BenchResult<()> {
    const SENTINEL: &str = "single-op-lapse-sentinel";
    const PATIENCE: Duration = Duration::from_secs(60);
    let admission = store
        .admit(&AdmitRequest::new(SENTINEL, OWNER).ttl(SHORT_TTL))
        .await?;
    if !matches!(admission, Admission::Admitted { .. }) {
        return Err(format!("the lapse sentinel's admission answered {admission:?}").into());
    }
    let request = TakeoverRequest::adopt(SENTINEL, "bench-rival", None);
    let given_up = Instant::now() + PATIENCE;
    loop {
        match store.claim_for_takeover(&request).await? {
            Takeover::Taken(_) => return Ok(()),
            Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after })
                if Instant::now() < given_up =>
            {
                tokio::time::sleep(retry_after.clamp(Duration::from_millis(1), SHORT_TTL)).await;
            }
            other => return Err(format!("the lapse sentinel's takeover answered {other:?}").into()),
        }
    }
}

/// Which of the baseline's fenced writes a cell measures.
#[derive(Clone, Copy)]
enum FencedWrite {
    Renew,
    Transition,
    Takeover,
}

/// The baseline's fenced write over `keys`, round robin, measured beside
/// tenure's renewals, transitions or takeovers (the bare baseline runs its
/// compare-and-set for all three).
fn raw_fenced_write(
    raw: &Arc<dyn RawBaseline>,
    keys: &Arc<Vec<String>>,
    write: FencedWrite,
) -> impl Fn(usize, u64) -> StepFuture + Send + Sync + 'static {
    let (raw, keys) = (Arc::clone(raw), Arc::clone(keys));
    move |_, n| {
        let (raw, keys) = (Arc::clone(&raw), Arc::clone(&keys));
        Box::pin(async move {
            let key = &keys[n as usize % keys.len()];
            let done = match write {
                FencedWrite::Renew => raw.cas(key, OWNER, 1, RAW_TTL).await?,
                FencedWrite::Transition => raw.transition(key, OWNER, 1, RAW_TTL).await?,
                FencedWrite::Takeover => raw.take_over(key, OWNER, 1, RAW_TTL).await?,
            };
            if !done {
                return Err(format!("the baseline's fenced write of {key} did nothing").into());
            }
            Ok(Step::Done)
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

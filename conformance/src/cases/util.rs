//! Helpers shared by the cases: standard durations, admitting with an
//! expectation, snapshots for "nothing changed" checks, placing the clock at
//! an exact instant, and racing two calls.

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tenure_lease_core::{Admission, AdmitRequest, Claim, LeaseRecord, LeaseStore};

use crate::harness::{Ctx, Failure, Footprint};

/// A lease that stays valid for the whole case.
pub const LONG_TTL: Duration = Duration::from_secs(600);
/// A lease the case lets expire (then moves the clock past it).
pub const SHORT_TTL: Duration = Duration::from_millis(50);
/// A grace long enough to cover the whole case.
pub const LONG_GRACE: Duration = Duration::from_secs(600);

/// Why a case that checks a rule at its exact instant is skipped on a clock
/// the kit cannot place.
pub const NEEDS_MANUAL_CLOCK: &str = "needs a clock the kit can place to the microsecond \
     (ClockControl::Manual); on a server's clock the before/after cases cover this rule \
     with margins";

/// How many times each race between two unlike operations is run: enough
/// that a check-then-write gap of a few milliseconds loses at least once.
pub const UNLIKE_RACE_ROUNDS: usize = 16;

/// One microsecond, the precision every store keeps.
pub const MICROSECOND: Duration = Duration::from_micros(1);

/// `instant` less one microsecond.
pub fn micro_before(instant: tenure_lease_core::Timestamp) -> tenure_lease_core::Timestamp {
    instant - chrono::Duration::microseconds(1)
}

/// Fails the case unless what the store keeps (`actual`) is what it kept
/// after the smaller round of work (`expected`), naming each structure
/// (table, key family, map) whose count differs, expected against actual.
/// Both `None`: the factory cannot count, and there is nothing to compare.
pub fn ensure_footprint_kept(
    expected: Option<&Footprint>,
    actual: Option<&Footprint>,
    what: &str,
) -> Result<(), Failure> {
    let (Some(expected), Some(actual)) = (expected, actual) else {
        return Ok(());
    };
    let names: std::collections::BTreeSet<&String> = expected.keys().chain(actual.keys()).collect();
    let grown: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            let (before, after) = (
                expected.get(name).copied().unwrap_or(0),
                actual.get(name).copied().unwrap_or(0),
            );
            (before != after).then(|| format!("`{name}`: expected {before}, actual {after}"))
        })
        .collect();
    if grown.is_empty() {
        return Ok(());
    }
    Err(Failure(format!(
        "{what}: counted after twice the work against after the first round, {}",
        grown.join("; ")
    )))
}

/// Runs `call` against the store and fails the case unless it answers
/// `expected` and every record of `ids` (or its absence) reads the same
/// before and after: the one check of every refusal.
pub async fn refused<S, T, Fut>(
    ctx: &Ctx<S>,
    ids: &[&str],
    expected: T,
    what: &str,
    call: Fut,
) -> Result<(), Failure>
where
    S: LeaseStore,
    T: PartialEq + Debug,
    Fut: Future<Output = tenure_lease_core::Result<T>>,
{
    let before = snapshot(ctx, ids).await?;
    let answer = call.await?;
    crate::ensure_eq!(answer, expected, "{what}");
    crate::ensure_eq!(
        snapshot(ctx, ids).await?,
        before,
        "{what}: a refusal changes nothing"
    );
    Ok(())
}

/// Starts `first` and `second` on two tasks released together from a [`StartLine`]
/// and answers both outputs, in that order. Round `round` of a race holds
/// one side back (none in rounds 0 and 1, then 0.5 to 3.5 ms in steps of
/// half a millisecond, the first side in even rounds and the second in odd
/// ones): a store's gap between check and write may lie anywhere in its
/// operation, and over [`UNLIKE_RACE_ROUNDS`] rounds some lag lines the two
/// gaps up. Steps finer than a gap of a round trip or two are what make a
/// gap of a couple of milliseconds show every time.
pub async fn race_two<A, B>(
    round: usize,
    first: A,
    second: B,
) -> Result<(A::Output, B::Output), Failure>
where
    A: Future + Send + 'static,
    B: Future + Send + 'static,
    A::Output: Send + 'static,
    B::Output: Send + 'static,
{
    let lag = LAG_STEP * (round / 2 % 8) as u32;
    let (first_lag, second_lag) = if round % 2 == 0 {
        (lag, Duration::ZERO)
    } else {
        (Duration::ZERO, lag)
    };
    let start = StartLine::new(2);
    let first = tokio::spawn({
        let start = Arc::clone(&start);
        async move {
            start.after(first_lag).await;
            first.await
        }
    });
    let second = tokio::spawn(async move {
        start.after(second_lag).await;
        second.await
    });
    let panicked =
        |error: tokio::task::JoinError| Failure(format!("a racing call panicked: {error}"));
    Ok((
        first.await.map_err(panicked)?,
        second.await.map_err(panicked)?,
    ))
}

/// How much further each pair of rounds of [`race_two`] holds one side back.
const LAG_STEP: Duration = Duration::from_micros(500);

/// How far ahead of the last racer's arrival a [`StartLine`] sets the start:
/// long enough for every racer, already spinning, to see it in time.
const START_AHEAD: Duration = Duration::from_micros(300);

/// Releases racing tasks together, to the microsecond: each waits (yielding)
/// until all have arrived, and the last to arrive sets one start instant a
/// little ahead, to which every racer spins. A barrier's wake-ups reach the
/// tasks it releases a scheduler's latency apart (tens of microseconds, far
/// more on a loaded machine), enough to hide a store's gap between check and
/// write; spinning to a shared instant does not depend on who wakes whom.
pub struct StartLine {
    racers: usize,
    arrived: AtomicUsize,
    start: OnceLock<Instant>,
}

impl StartLine {
    /// A start line for `racers` tasks.
    pub fn new(racers: usize) -> Arc<Self> {
        Arc::new(StartLine {
            racers,
            arrived: AtomicUsize::new(0),
            start: OnceLock::new(),
        })
    }

    /// Waits for every racer, then until the shared start.
    pub async fn wait(&self) {
        self.after(Duration::ZERO).await;
    }

    /// Waits for every racer, then until `lag` after the shared start.
    pub async fn after(&self, lag: Duration) {
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.racers {
            let _ = self.start.set(Instant::now() + START_AHEAD);
        }
        let start = loop {
            if let Some(start) = self.start.get() {
                break *start;
            }
            tokio::task::yield_now().await;
        };
        let until = start + lag;
        while Instant::now() < until {
            tokio::task::yield_now().await;
        }
    }
}

/// Admits `request`, failing the case unless it is `Admitted`.
pub async fn admit<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: AdmitRequest,
) -> Result<LeaseRecord, Failure> {
    match ctx.store.admit(&request).await? {
        Admission::Admitted { record, .. } => Ok(record),
        other => Err(Failure(format!(
            "expected {:?} to be admitted, got {other:?}",
            request.id
        ))),
    }
}

/// The claim of an admitted or taken record.
pub fn claim_of(record: &LeaseRecord) -> Result<Claim, Failure> {
    record
        .claim()
        .ok_or_else(|| Failure(format!("record {:?} has no owner", record.id)))
}

/// Reads `id`, failing the case when it is missing.
pub async fn get<S: LeaseStore>(ctx: &Ctx<S>, id: &str) -> Result<LeaseRecord, Failure> {
    ctx.store
        .get(id)
        .await?
        .ok_or_else(|| Failure(format!("record {id:?} is missing")))
}

/// Every record the store can see for `ids`, for before/after comparisons.
pub async fn snapshot<S: LeaseStore>(
    ctx: &Ctx<S>,
    ids: &[&str],
) -> Result<Vec<Option<LeaseRecord>>, Failure> {
    let mut records = Vec::with_capacity(ids.len());
    for id in ids {
        records.push(ctx.store.get(id).await?);
    }
    Ok(records)
}

/// Lets `record`'s lease run out beyond `grace` on the store's clock.
pub async fn expire<S: LeaseStore>(
    ctx: &Ctx<S>,
    record: &LeaseRecord,
    grace: Duration,
) -> Result<(), Failure> {
    let expires = record
        .lease_expires_at
        .ok_or_else(|| Failure(format!("record {:?} has no lease to expire", record.id)))?;
    ctx.advance_past(tenure_lease_core::clock::add(expires, grace))
        .await
}

/// Renews `claim` for `ttl`, failing the case unless it is `Renewed` with an
/// expiry of store `now + ttl` (between the clock reads just before and just
/// after) that `get` then reads back; answers that expiry.
pub async fn renew_confirmed<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &Claim,
    ttl: Duration,
) -> Result<tenure_lease_core::Timestamp, Failure> {
    let before = ctx.store.now().await?;
    let outcome = ctx.store.renew(claim, ttl).await?;
    let after = ctx.store.now().await?;
    let tenure_lease_core::Renewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!(
            "expected {claim:?} to be renewed, got {outcome:?}"
        )));
    };
    crate::ensure!(
        tenure_lease_core::clock::add(before, ttl) <= expires_at
            && expires_at <= tenure_lease_core::clock::add(after, ttl),
        "renewed expiry {expires_at} is not store now + {ttl:?} (now was {before} .. {after})"
    );
    crate::ensure_eq!(
        get(ctx, &claim.id).await?.lease_expires_at,
        Some(expires_at),
        "get reads the expiry renew answered"
    );
    Ok(expires_at)
}

/// Renews `claim`, plainly and with progress, failing the case unless each
/// is `Lost(reason)` and the record (or its absence) reads the same before
/// and after: a lost renewal records no progress either.
pub async fn expect_lost<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &Claim,
    reason: tenure_lease_core::LossReason,
) -> Result<(), Failure> {
    let before = snapshot(ctx, &[&claim.id]).await?;
    let outcome = ctx.store.renew(claim, LONG_TTL).await?;
    crate::ensure_eq!(
        outcome,
        tenure_lease_core::Renewal::Lost(reason),
        "renewing {claim:?}"
    );
    crate::ensure_eq!(
        snapshot(ctx, &[&claim.id]).await?,
        before,
        "a lost renewal changes nothing"
    );
    let outcome = ctx
        .store
        .renew_with_progress(claim, LONG_TTL, &stale_progress())
        .await?;
    crate::ensure_eq!(
        outcome,
        tenure_lease_core::Renewal::Lost(reason),
        "renewing {claim:?} with progress"
    );
    crate::ensure_eq!(
        snapshot(ctx, &[&claim.id]).await?,
        before,
        "a lost renewal with progress changes nothing, progress included"
    );
    Ok(())
}

/// The progress a stale claim tries to report: no live holder reports it,
/// so seeing it stored means a lost renewal wrote.
pub fn stale_progress() -> serde_json::Value {
    serde_json::json!({ "reported by": "a claim that no longer holds" })
}

/// Writes `change` with `claim`, failing the case unless it is `Applied`
/// with the record `get` then reads; answers that record.
pub async fn apply_transition<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &Claim,
    change: &tenure_lease_core::StatusChange,
) -> Result<LeaseRecord, Failure> {
    match ctx.store.transition(claim, change).await? {
        tenure_lease_core::Transition::Applied(record) => {
            crate::ensure_eq!(
                get(ctx, &claim.id).await?,
                record,
                "get reads the record transition answered"
            );
            Ok(record)
        }
        other => Err(Failure(format!(
            "expected {change:?} with {claim:?} to be applied, got {other:?}"
        ))),
    }
}

/// Claims a record for takeover, failing the case unless it is `Taken` with
/// the record `get` then reads; answers that record.
pub async fn take_over<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: &tenure_lease_core::TakeoverRequest,
) -> Result<LeaseRecord, Failure> {
    match ctx.store.claim_for_takeover(request).await? {
        tenure_lease_core::Takeover::Taken(record) => {
            crate::ensure_eq!(
                get(ctx, &request.id).await?,
                record,
                "get reads the record the takeover answered"
            );
            Ok(record)
        }
        other => Err(Failure(format!(
            "expected {request:?} to be taken, got {other:?}"
        ))),
    }
}

/// Fails the case unless a `Reject` admission of a new record `probe_id` on
/// `scopes` is admitted, i.e. no active record holds any of them.
pub async fn ensure_scopes_free<S: LeaseStore>(
    ctx: &Ctx<S>,
    probe_id: &str,
    scopes: &[&str],
) -> Result<(), Failure> {
    admit(
        ctx,
        AdmitRequest::new(probe_id, "probe-worker")
            .scopes(scopes.iter().copied())
            .ttl(LONG_TTL),
    )
    .await
    .map(drop)
}

/// Fails the case unless a `Reject` admission on `scope` conflicts with the
/// record `holder_id`, i.e. that record still holds the scope.
pub async fn ensure_scope_held_by<S: LeaseStore>(
    ctx: &Ctx<S>,
    scope: &str,
    holder_id: &str,
) -> Result<(), Failure> {
    let probe = AdmitRequest::new(format!("probe-of-{holder_id}"), "probe-worker").scope(scope);
    match ctx.store.admit(&probe).await? {
        Admission::Conflict { holder, .. } if holder.id == holder_id => Ok(()),
        other => Err(Failure(format!(
            "expected scope {scope:?} to be held by {holder_id:?}, admission answered {other:?}"
        ))),
    }
}

/// Fails the case unless `result` is an `InvalidInput` error naming `field`;
/// `what` says which bad input it was.
pub fn expect_invalid<T: std::fmt::Debug>(
    result: tenure_lease_core::Result<T>,
    field: &str,
    what: &str,
) -> Result<(), Failure> {
    match result {
        Err(error)
            if error.kind() == tenure_lease_core::ErrorKind::InvalidInput
                && error.field() == Some(field) =>
        {
            Ok(())
        }
        other => Err(Failure(format!(
            "{what}: expected an InvalidInput error naming `{field}`, got {other:?}"
        ))),
    }
}

/// Whether a JSON document a store gave back is the one it was given. A
/// number keeps its value, not necessarily its notation: PostgreSQL's
/// `jsonb` gives `1.5e18` back as `1500000000000000000`, which reads as an
/// integer (contract §11).
pub fn same_json(stored: &serde_json::Value, given: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (stored, given) {
        (Value::Number(stored), Value::Number(given)) => {
            stored == given
                || ((stored.is_f64() || given.is_f64())
                    && stored.as_f64().is_some()
                    && stored.as_f64() == given.as_f64())
        }
        (Value::Array(stored), Value::Array(given)) => {
            stored.len() == given.len() && stored.iter().zip(given).all(|(s, g)| same_json(s, g))
        }
        (Value::Object(stored), Value::Object(given)) => {
            stored.len() == given.len()
                && stored
                    .iter()
                    .all(|(key, s)| given.get(key).is_some_and(|g| same_json(s, g)))
        }
        _ => stored == given,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ensure_footprint_kept, same_json, Failure, Footprint};

    #[test]
    fn numbers_compare_by_value_not_notation() {
        let given = json!({ "n": [1.920929927478905e18, 0.5, 3] });
        let from_jsonb: serde_json::Value =
            serde_json::from_str(r#"{ "n": [1920929927478905000, 0.5, 3] }"#).unwrap();
        assert!(same_json(&from_jsonb, &given));
        assert!(!same_json(&json!({ "n": [2e18, 0.5, 3] }), &given));
        assert!(!same_json(
            &json!({ "n": [1.920929927478905e18, 0.5, 4] }),
            &given
        ));
        assert!(!same_json(
            &json!({ "n": [1.920929927478905e18, 0.5] }),
            &given
        ));
        assert!(!same_json(&json!({ "m": 1 }), &json!({ "n": 1 })));
        assert!(!same_json(&json!(u64::MAX), &json!(i64::MIN)));
    }

    #[test]
    fn a_grown_footprint_names_each_structure_expected_against_actual() {
        let first = Footprint::from([("jobs".to_owned(), 0), ("scope_locks".to_owned(), 3)]);
        let second = Footprint::from([("jobs".to_owned(), 0), ("scope_locks".to_owned(), 6)]);
        assert!(ensure_footprint_kept(Some(&first), Some(&first), "kept").is_ok());
        assert!(ensure_footprint_kept(None, None, "no probe").is_ok());
        let Failure(message) =
            ensure_footprint_kept(Some(&first), Some(&second), "grew").expect_err("grown");
        assert!(
            message.contains("`scope_locks`: expected 3, actual 6"),
            "{message}"
        );
        assert!(!message.contains("`jobs`"), "{message}");
    }
}

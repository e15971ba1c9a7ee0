//! Admissions within a rate limit ([contract §16](tenure_lease_core::contract)):
//! at most `permits` admissions per key within any `period`, judged after
//! the id and the scopes, atomic with the admission.
//!
//! A store that judges and writes in two steps passes every case run one
//! call at a time, so one case races admissions on one limit and counts
//! the winners; the window's end is reached to the microsecond on a clock
//! the kit places, and crossed on the store's own clock elsewhere.

use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::limits::{
    MAX_NAME_BYTES, MAX_RATE_PERIOD, MAX_RATE_PERMITS, MIN_RATE_PERIOD,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Admission, AdmitRequest, AdmitStrategy, LeaseStore};

use crate::cases::util::{
    admit, expect_invalid, get, micro_before, StartLine, LONG_TTL, NEEDS_MANUAL_CLOCK,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// A period no case waits out.
const LONG_PERIOD: Duration = Duration::from_secs(3600);

/// How many admissions race on one limit.
const RACERS: usize = 12;

/// How many permits the raced limit has.
const RACED_PERMITS: u32 = 5;

/// A request for `id`, no scopes, within `limit`.
fn limited(id: &str, limit: &RateLimit) -> AdmitRequest {
    AdmitRequest::new(id, "worker-a")
        .ttl(LONG_TTL)
        .rate_limit(limit.clone())
}

/// Admits `request`, failing the case unless it is refused for its rate
/// limit, naming the key, with a `retry_after` of at most the period, and
/// nothing was stored under its id; answers the `retry_after`.
async fn rate_limited<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: &AdmitRequest,
) -> Result<Duration, Failure> {
    let limit = request
        .rate_limit
        .as_ref()
        .ok_or_else(|| Failure("the request has no rate limit".into()))?;
    match ctx.store.admit(request).await? {
        Admission::RateLimited { key, retry_after } => {
            ensure_eq!(key, limit.key, "RateLimited names the limit's key");
            ensure!(
                retry_after > Duration::ZERO && retry_after <= limit.period,
                "retry_after {retry_after:?} lies within (0, {:?}]",
                limit.period
            );
            ensure_eq!(
                ctx.store.get(&request.id).await?,
                None,
                "a rate-limited admission stores nothing"
            );
            Ok(retry_after)
        }
        other => Err(Failure(format!(
            "expected {:?} to be rate limited by {limit:?}, got {other:?}",
            request.id
        ))),
    }
}

/// A limit admits exactly its permits, then answers `RateLimited` naming
/// its key; a limit on the same key with other permits or another period,
/// and a limit on another key, are logs of their own.
pub async fn rate_limit_admits_up_to_its_permits<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let limit = RateLimit::new("api", 3, LONG_PERIOD);
    for index in 0..3 {
        admit(&ctx, limited(&format!("r-{index}"), &limit)).await?;
    }
    rate_limited(&ctx, &limited("r-3", &limit)).await?;
    rate_limited(&ctx, &limited("r-4", &limit)).await?;
    for (id, other) in [
        ("more-permits", RateLimit::new("api", 4, LONG_PERIOD)),
        ("longer", RateLimit::new("api", 3, LONG_PERIOD * 2)),
        ("other-key", RateLimit::new("api-2", 3, LONG_PERIOD)),
    ] {
        admit(&ctx, limited(id, &other)).await?;
    }
    rate_limited(&ctx, &limited("r-5", &limit)).await?;
    // A purge keeps the logs whose uses still count.
    ctx.store.purge(Duration::ZERO).await?;
    rate_limited(&ctx, &limited("r-6", &limit)).await?;
    Ok(())
}

/// On any clock: `retry_after` counts from the oldest use still counting,
/// not the newest: a use, at least 300 ms of store time, a second use, and
/// the permit frees at most `period − 300 ms` later.
pub async fn rate_limit_retry_after_counts_from_the_oldest_use<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let gap = Duration::from_millis(300);
    let period = Duration::from_secs(60);
    let limit = RateLimit::new("oldest", 2, period);
    admit(&ctx, limited("o-1", &limit)).await?;
    ctx.advance(gap).await?;
    admit(&ctx, limited("o-2", &limit)).await?;
    let retry_after = rate_limited(&ctx, &limited("o-3", &limit)).await?;
    ensure!(
        retry_after <= period - gap,
        "retry_after {retry_after:?} counts from the newest use, not the oldest ({:?} at most)",
        period - gap
    );
    Ok(())
}

/// The id and the scopes are judged first: a taken id is `AlreadyExists`
/// and a blocking holder `Conflict`, and neither uses a permit. A request
/// the scopes admit but the limit refuses changes nothing: the holders an
/// `Interrupt` admission would have interrupted stay as they were.
pub async fn rate_limit_is_judged_after_the_id_and_the_scopes<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("holder", "worker-b")
            .scope("held")
            .ttl(LONG_TTL),
    )
    .await?;
    let limit = RateLimit::new("one", 1, LONG_PERIOD);
    for round in 0..2 {
        let blocked = limited(&format!("blocked-{round}"), &limit).scope("held");
        match ctx.store.admit(&blocked).await? {
            Admission::Conflict { holder: named, .. } => {
                ensure_eq!(named.id, holder.id, "the conflict names the holder");
            }
            other => {
                return Err(Failure(format!(
                    "a held scope blocks before the rate limit is judged: got {other:?}"
                )))
            }
        }
    }
    let taken = limited("holder", &limit);
    let answer = ctx.store.admit(&taken).await;
    ensure!(
        answer
            .as_ref()
            .is_err_and(|error| error.kind() == tenure_lease_core::ErrorKind::AlreadyExists),
        "a taken id is AlreadyExists before the rate limit is judged, got {answer:?}"
    );
    admit(&ctx, limited("first-use", &limit)).await?;
    rate_limited(&ctx, &limited("second-use", &limit)).await?;
    // With no permit left, the id and the scopes still answer first.
    match ctx
        .store
        .admit(&limited("blocked-late", &limit).scope("held"))
        .await?
    {
        Admission::Conflict { .. } => {}
        other => {
            return Err(Failure(format!(
                "a held scope blocks before an exhausted limit is judged: got {other:?}"
            )))
        }
    }
    let answer = ctx.store.admit(&limited("holder", &limit)).await;
    ensure!(
        answer
            .as_ref()
            .is_err_and(|error| error.kind() == tenure_lease_core::ErrorKind::AlreadyExists),
        "a taken id is AlreadyExists before an exhausted limit is judged, got {answer:?}"
    );

    // The requester's own holder would be interrupted (same owner); the
    // limit refuses first, so it stays as it is.
    let own = admit(
        &ctx,
        AdmitRequest::new("own", "worker-a")
            .scope("own-scope")
            .ttl(LONG_TTL),
    )
    .await?;
    let interrupting = limited("interrupting", &limit)
        .scope("own-scope")
        .strategy(AdmitStrategy::Interrupt);
    rate_limited(&ctx, &interrupting).await?;
    ensure_eq!(
        get(&ctx, "own").await?,
        own,
        "a rate-limited Interrupt admission interrupts nothing"
    );
    ensure_eq!(
        get(&ctx, "holder").await?,
        holder,
        "the holder is unchanged"
    );
    Ok(())
}

/// On a clock the kit places: a use counts for exactly its period, the
/// `retry_after` is exact, and the permit freed is the oldest use's.
pub async fn rate_limit_window_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let period = Duration::from_millis(40);
    let limit = RateLimit::new("window", 2, period);
    let first = admit(&ctx, limited("w-1", &limit)).await?;
    let start = first.created_at;
    manual.advance_to(clock::add(start, Duration::from_millis(10)));
    admit(&ctx, limited("w-2", &limit)).await?;
    ensure_eq!(
        rate_limited(&ctx, &limited("w-3", &limit)).await?,
        Duration::from_millis(30),
        "retry_after is when the oldest use stops counting"
    );
    let first_ends = clock::add(start, period);
    manual.advance_to(micro_before(first_ends));
    ensure_eq!(
        rate_limited(&ctx, &limited("w-4", &limit)).await?,
        Duration::from_micros(1),
        "the microsecond before the oldest use stops counting"
    );
    manual.advance_to(first_ends);
    admit(&ctx, limited("w-5", &limit)).await?;
    ensure_eq!(
        rate_limited(&ctx, &limited("w-6", &limit)).await?,
        Duration::from_millis(10),
        "the next permit frees when the second use stops counting"
    );
    Ok(())
}

/// On any clock: a one-permit limit refuses while the store's clock is
/// within the period of its use (a refusal counts only when the clock
/// still reads before the end afterwards) and admits once past it.
pub async fn rate_limit_holds_then_frees<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let mut period = Duration::from_millis(200);
    for round in 0..5 {
        let limit = RateLimit::new(format!("frees-{round}"), 1, period);
        let used = admit(&ctx, limited(&format!("f-{round}-1"), &limit)).await?;
        let ends = clock::add(used.created_at, period);
        let refused = rate_limited(&ctx, &limited(&format!("f-{round}-2"), &limit)).await;
        if ctx.store.now().await? < ends {
            refused?;
            ctx.advance_past(ends).await?;
            admit(&ctx, limited(&format!("f-{round}-3"), &limit)).await?;
            return Ok(());
        }
        period *= 2;
    }
    Err(Failure(
        "no refusal landed within its period in 5 tries: the store clock ran ahead of the case"
            .into(),
    ))
}

/// Admissions racing on one limit: exactly its permits are admitted, every
/// other answer is `RateLimited`, and only the admitted are stored.
pub async fn race_rate_limited_admissions_admit_exactly_the_permits<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let limit = RateLimit::new("raced", RACED_PERMITS, LONG_PERIOD);
    let start = StartLine::new(RACERS);
    let racers: Vec<_> = (0..RACERS)
        .map(|racer| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request = limited(&format!("racer-{racer}"), &limit);
            tokio::spawn(async move {
                start.wait().await;
                store.admit(&request).await
            })
        })
        .collect();
    let mut admitted = Vec::new();
    for (racer, task) in racers.into_iter().enumerate() {
        let answer = task
            .await
            .map_err(|error| Failure(format!("a racer panicked: {error}")))??;
        match answer {
            Admission::Admitted { record, .. } => admitted.push(record.id),
            Admission::RateLimited { .. } => {}
            other => {
                return Err(Failure(format!(
                    "racer {racer} answered {other:?}; only Admitted or RateLimited"
                )))
            }
        }
    }
    ensure_eq!(
        admitted.len(),
        RACED_PERMITS as usize,
        "racing admissions admitted exactly the permits ({admitted:?})"
    );
    for racer in 0..RACERS {
        let id = format!("racer-{racer}");
        ensure_eq!(
            ctx.store.get(&id).await?.is_some(),
            admitted.contains(&id),
            "exactly the admitted racers are stored"
        );
    }
    rate_limited(&ctx, &limited("late", &limit)).await?;
    Ok(())
}

/// Every tricky name is a key of its own: each admits once and then
/// refuses, and keys differing in case, normalisation or a separator never
/// share a log.
pub async fn rate_limit_tricky_keys_never_collide<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut keys = crate::cases::queue::names::names();
    for separated in ["1:1000:a", "a", "1000:a", "a:1"] {
        if !keys.iter().any(|key| key == separated) {
            keys.push(separated.to_owned());
        }
    }
    let limits: Vec<RateLimit> = keys
        .iter()
        .map(|key| RateLimit::new(key.as_str(), 1, Duration::from_secs(1000)))
        .collect();
    for (index, limit) in limits.iter().enumerate() {
        admit(&ctx, limited(&format!("first-{index}"), limit)).await?;
    }
    for (index, limit) in limits.iter().enumerate() {
        rate_limited(&ctx, &limited(&format!("again-{index}"), limit)).await?;
    }
    Ok(())
}

/// The bounds of a limit, each reached exactly from both sides: the key a
/// name, permits 1 to `MAX_RATE_PERMITS`, a period whole milliseconds from
/// `MIN_RATE_PERIOD` to `MAX_RATE_PERIOD`. A refused request stores nothing.
pub async fn rate_limit_bounds_are_exact<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let accepted = [
        RateLimit::new("k".repeat(MAX_NAME_BYTES), 1, LONG_PERIOD),
        RateLimit::new("most-permits", MAX_RATE_PERMITS, LONG_PERIOD),
        RateLimit::new("shortest", 1, MIN_RATE_PERIOD),
        RateLimit::new("longest", 1, MAX_RATE_PERIOD),
    ];
    for (index, limit) in accepted.iter().enumerate() {
        admit(&ctx, limited(&format!("ok-{index}"), limit)).await?;
    }
    let refused = [
        (RateLimit::new("", 1, LONG_PERIOD), "an empty key"),
        (
            RateLimit::new("k".repeat(MAX_NAME_BYTES + 1), 1, LONG_PERIOD),
            "a key one byte too long",
        ),
        (
            RateLimit::new("a\nb", 1, LONG_PERIOD),
            "a key with a control character",
        ),
        (RateLimit::new("none", 0, LONG_PERIOD), "no permits"),
        (
            RateLimit::new("too-many", MAX_RATE_PERMITS + 1, LONG_PERIOD),
            "one permit too many",
        ),
        (RateLimit::new("zero", 1, Duration::ZERO), "no period"),
        (
            RateLimit::new("sub-ms", 1, Duration::from_micros(1500)),
            "a period of no whole milliseconds",
        ),
        (
            RateLimit::new("too-long", 1, MAX_RATE_PERIOD + MIN_RATE_PERIOD),
            "a period one millisecond too long",
        ),
    ];
    for (index, (limit, what)) in refused.iter().enumerate() {
        let id = format!("refused-{index}");
        expect_invalid(
            ctx.store.admit(&limited(&id, limit)).await,
            "rate_limit",
            what,
        )?;
        ensure_eq!(
            ctx.store.get(&id).await?,
            None,
            "a refused request stores nothing"
        );
    }
    Ok(())
}

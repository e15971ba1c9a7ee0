//! Conformance cases: the read side (`list_expired`, `get`, `list_by_scope`,
//! `list_active`), `purge`, and what must survive a trip through any store
//! unchanged: timestamps, metadata, ids and scopes
//! ([contract §2, §6 and §8](tenure_lease_core::contract); §13 invariant 7).
//!
//! Every case must also hold on a store whose clock only moves in real time,
//! so leases are crossed with [`SHORT_TTL`] and waits stay within a few
//! seconds; records meant to have distinct creation times are admitted a
//! few milliseconds of store time apart. Where a case needs something to be
//! *not yet* old enough (a grace, a retention), the margin is
//! `SLOW_MACHINE_MARGIN`, which a starved machine does not eat up between
//! two calls.

use std::time::Duration;

use chrono::{FixedOffset, TimeZone, Timelike, Utc};
use serde_json::json;
use tenure_lease_core::backend::rules;
use tenure_lease_core::{
    clock, AdmitRequest, AdmitStrategy, ExpiredQuery, LeaseRecord, LeaseStore, ManualClock,
    Renewal, Status, StatusChange, TakeoverRequest, Timestamp, Transition, TransitionRejection,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, ensure_footprint_kept, ensure_scope_held_by,
    ensure_scopes_free, expire, get, micro_before, snapshot, take_over, LONG_GRACE, LONG_TTL,
    NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Store time between admissions that must have distinct creation times.
const TICK: Duration = Duration::from_millis(3);

/// How long something stays "too young" (within a grace, under a retention)
/// while a case makes the call that must see it so: far longer than a
/// starved machine stalls between two calls.
const SLOW_MACHINE_MARGIN: Duration = Duration::from_secs(2);

/// The ids `list_expired` answers for `query`, in order; fails the case when
/// the scan skipped anything (every record here is well-formed).
async fn expired_ids<S: LeaseStore>(
    ctx: &Ctx<S>,
    query: ExpiredQuery,
) -> Result<Vec<String>, Failure> {
    let scan = ctx.store.list_expired(&query).await?;
    ensure!(
        scan.skipped.is_empty(),
        "no record is undecodable, yet {:?} were skipped",
        scan.skipped
    );
    Ok(scan.records.into_iter().map(|record| record.id).collect())
}

/// The ids of `records`, in order.
fn ids_of(records: &[LeaseRecord]) -> Vec<&str> {
    records.iter().map(|record| record.id.as_str()).collect()
}

/// Fails the case unless every record in `records` reads back equal by `get`.
async fn ensure_read_back<S: LeaseStore>(
    ctx: &Ctx<S>,
    records: &[LeaseRecord],
    source: &str,
) -> CaseResult {
    for record in records {
        ensure_eq!(
            get(ctx, &record.id).await?,
            *record,
            "{source} answers the record as get reads it"
        );
    }
    Ok(())
}

/// A lease is listed once it ended at least `grace` ago: expired beyond the
/// grace is listed, expired within it is not, a valid lease never is.
pub async fn list_expired_respects_grace<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    // Waits past an expiry also outlast the store's timers: the grace must
    // cover that overshoot for the lease that ended "just now".
    let grace = SLOW_MACHINE_MARGIN + ctx.timer_overrun();
    let long_ago = admit(
        &ctx,
        AdmitRequest::new("expired-long-ago", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    // Past expiry + grace with room to spare, so a real clock cannot make the
    // second lease's grace run out too before the scan.
    expire(&ctx, &long_ago, grace + grace / 2).await?;
    let just_now = admit(
        &ctx,
        AdmitRequest::new("expired-just-now", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    admit(&ctx, AdmitRequest::new("valid", "worker-a").ttl(LONG_TTL)).await?;
    expire(&ctx, &just_now, Duration::ZERO).await?;

    ensure_eq!(
        expired_ids(&ctx, ExpiredQuery::new(grace)).await?,
        vec!["expired-long-ago"],
        "only the lease that ended more than the grace ago is listed"
    );
    ensure_eq!(
        expired_ids(&ctx, ExpiredQuery::new(Duration::ZERO)).await?,
        vec!["expired-long-ago", "expired-just-now"],
        "with no grace both ended leases are listed, earliest expiry first"
    );
    ensure_eq!(
        expired_ids(&ctx, ExpiredQuery::new(LONG_GRACE)).await?,
        Vec::<&str>::new(),
        "within a long grace no lease counts as expired"
    );
    Ok(())
}

/// A record with no lease is always reclaimable: listed whatever the grace,
/// pending or running, while a valid lease is not.
pub async fn list_expired_includes_no_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit(&ctx, AdmitRequest::new("no-lease-pending", "worker-a")).await?;
    let running = admit(&ctx, AdmitRequest::new("no-lease-running", "worker-b")).await?;
    apply_transition(&ctx, &claim_of(&running)?, &StatusChange::running()).await?;
    admit(&ctx, AdmitRequest::new("valid", "worker-a").ttl(LONG_TTL)).await?;

    for grace in [
        Duration::ZERO,
        LONG_GRACE,
        tenure_lease_core::backend::validate::MAX_GRACE,
    ] {
        let scan = ctx.store.list_expired(&ExpiredQuery::new(grace)).await?;
        ensure_eq!(
            ids_of(&scan.records),
            vec!["no-lease-pending", "no-lease-running"],
            "records without a lease are listed with a grace of {grace:?}"
        );
        ensure_read_back(&ctx, &scan.records, "list_expired").await?;
    }
    Ok(())
}

/// `created_before` is an inclusive cut-off compared as instants at
/// microsecond precision, whatever its text form would be (whole seconds,
/// another offset, a five-digit year).
pub async fn list_expired_created_before_is_a_timestamp<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut records = Vec::new();
    for id in ["created-1", "created-2", "created-3"] {
        if !records.is_empty() {
            ctx.advance(TICK).await?;
        }
        // No lease: listed at any grace, so only the cut-off decides.
        records.push(admit(&ctx, AdmitRequest::new(id, "worker-a")).await?);
    }
    let [first, second, third] = [&records[0], &records[1], &records[2]];
    ensure!(
        first.created_at < second.created_at && second.created_at < third.created_at,
        "records admitted apart in store time have increasing created_at"
    );
    let micro = chrono::Duration::microseconds(1);
    let listed_until = |cutoff: Timestamp| {
        let ctx = ctx.clone();
        async move {
            expired_ids(
                &ctx,
                ExpiredQuery::new(Duration::ZERO).created_before(cutoff),
            )
            .await
        }
    };

    ensure_eq!(
        listed_until(second.created_at).await?,
        vec!["created-1", "created-2"],
        "the cut-off is inclusive"
    );
    ensure_eq!(
        listed_until(second.created_at - micro).await?,
        vec!["created-1"],
        "one microsecond before a creation excludes it"
    );
    ensure_eq!(
        listed_until(second.created_at + micro).await?,
        vec!["created-1", "created-2"],
        "one microsecond after a creation includes it"
    );
    ensure_eq!(
        listed_until(first.created_at - micro).await?,
        Vec::<&str>::new(),
        "a cut-off before every creation lists nothing"
    );
    ensure_eq!(
        listed_until(third.created_at).await?,
        vec!["created-1", "created-2", "created-3"],
        "a cut-off at the last creation lists all"
    );

    // The same instants written at other offsets: as text they sort after
    // (+05:30) or before (-09:00) the UTC creation times.
    let east = FixedOffset::east_opt(5 * 3600 + 30 * 60)
        .ok_or_else(|| Failure("+05:30 is a valid offset".into()))?;
    let west = FixedOffset::west_opt(9 * 3600)
        .ok_or_else(|| Failure("-09:00 is a valid offset".into()))?;
    let in_east = second.created_at.with_timezone(&east);
    let in_west = (second.created_at - micro).with_timezone(&west);
    ensure_eq!(
        listed_until(in_east.with_timezone(&Utc)).await?,
        vec!["created-1", "created-2"],
        "the cut-off {in_east} is the instant of created-2"
    );
    ensure_eq!(
        listed_until(in_west.with_timezone(&Utc)).await?,
        vec!["created-1"],
        "the cut-off {in_west} is just before created-2"
    );

    // A whole second prints without a fraction ("…:56Z"), which sorts after
    // "…:56.123456Z" as text though it is earlier in time.
    let whole_second = second
        .created_at
        .with_nanosecond(0)
        .ok_or_else(|| Failure("zero nanoseconds is valid".into()))?;
    let expected: Vec<&str> = records
        .iter()
        .filter(|record| record.created_at <= whole_second)
        .map(|record| record.id.as_str())
        .collect();
    ensure!(
        whole_second == second.created_at || !expected.contains(&"created-2"),
        "created-2 is after its whole second"
    );
    ensure_eq!(
        listed_until(whole_second).await?,
        expected,
        "a cut-off on the whole second {whole_second} compares as an instant"
    );

    // Year 10000 prints as "+10000-…", which sorts before "2…" as text.
    let far_future = Utc
        .with_ymd_and_hms(10_000, 1, 1, 0, 0, 0)
        .single()
        .ok_or_else(|| Failure("year 10000 is a valid instant".into()))?;
    ensure_eq!(
        listed_until(far_future).await?,
        vec!["created-1", "created-2", "created-3"],
        "a cut-off in year 10000 is after every creation"
    );
    Ok(())
}

/// `limit` is honoured after ordering: records with no lease first, then by
/// expiry, then by id, whatever the order of creation or of ids.
pub async fn list_expired_limit_and_order<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    // Ids, creation order and expiry order all disagree.
    let requests = [
        AdmitRequest::new("z-no-lease", "worker-a"),
        AdmitRequest::new("a-slowest", "worker-a").ttl(SHORT_TTL * 3),
        AdmitRequest::new("b-fastest", "worker-a").ttl(SHORT_TTL),
        AdmitRequest::new("c-middle", "worker-a").ttl(SHORT_TTL * 2),
        AdmitRequest::new("y-no-lease", "worker-a"),
    ];
    let mut expected = Vec::new();
    for request in requests {
        expected.push(admit(&ctx, request).await?);
    }
    admit(&ctx, AdmitRequest::new("valid", "worker-a").ttl(LONG_TTL)).await?;
    let last_expiry = expected
        .iter()
        .filter_map(|record| record.lease_expires_at)
        .max()
        .ok_or_else(|| Failure("some records have a lease".into()))?;
    ctx.advance_past(last_expiry).await?;

    expected.sort_by(|a, b| (a.lease_expires_at, &a.id).cmp(&(b.lease_expires_at, &b.id)));
    let expected = ids_of(&expected);
    ensure_eq!(
        expected[..2],
        ["y-no-lease", "z-no-lease"],
        "records without a lease sort first, by id"
    );
    for limit in [
        1,
        2,
        3,
        expected.len(),
        tenure_lease_core::backend::validate::MAX_LIST_LIMIT,
    ] {
        let listed = expired_ids(&ctx, ExpiredQuery::new(Duration::ZERO).limit(limit)).await?;
        ensure_eq!(
            listed,
            expected[..limit.min(expected.len())],
            "the first {limit} in (no lease, expiry, id) order"
        );
    }
    Ok(())
}

/// Only active records are listed: terminal and interrupted ones never are,
/// however long ago their lease ended or if they never had one.
pub async fn list_expired_excludes_inactive<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let succeeded = admit(&ctx, AdmitRequest::new("succeeded", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&succeeded)?, &StatusChange::succeeded()).await?;
    let failed = admit(&ctx, AdmitRequest::new("failed", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&failed)?, &StatusChange::failed("boom")).await?;
    let stopped = admit(&ctx, AdmitRequest::new("interrupted-by-owner", "worker-a")).await?;
    let claim = claim_of(&stopped)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    apply_transition(&ctx, &claim, &StatusChange::interrupted("stop")).await?;
    admit(
        &ctx,
        AdmitRequest::new("interrupted-by-admission", "worker-a").scope("thread:1"),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("interrupter", "worker-b")
            .scope("thread:1")
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    let finished_early = admit(
        &ctx,
        AdmitRequest::new("finished-then-expired", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    apply_transition(
        &ctx,
        &claim_of(&finished_early)?,
        &StatusChange::succeeded(),
    )
    .await?;
    let orphan = admit(
        &ctx,
        AdmitRequest::new("taken-and-failed", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    admit(&ctx, AdmitRequest::new("still-active", "worker-a")).await?;
    expire(&ctx, &orphan, Duration::ZERO).await?;
    take_over(
        &ctx,
        &TakeoverRequest::fail("taken-and-failed", "reaper", "lease expired"),
    )
    .await?;
    ensure_eq!(
        get(&ctx, "interrupted-by-admission").await?.status,
        Status::Interrupted
    );

    for grace in [Duration::ZERO, LONG_GRACE] {
        ensure_eq!(
            expired_ids(&ctx, ExpiredQuery::new(grace)).await?,
            vec!["still-active"],
            "only the active record is listed with a grace of {grace:?}"
        );
    }
    Ok(())
}

/// `list_by_scope` answers every record naming the scope, finished and
/// interrupted ones included, newest first (ties: greater fence first).
pub async fn list_by_scope_newest_first_with_finished<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let first = admit(&ctx, AdmitRequest::new("first", "worker-a").scope("shared")).await?;
    apply_transition(&ctx, &claim_of(&first)?, &StatusChange::succeeded()).await?;
    ctx.advance(TICK).await?;
    let second = admit(
        &ctx,
        AdmitRequest::new("second", "worker-a").scopes(["shared", "other"]),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&second)?, &StatusChange::failed("boom")).await?;
    ctx.advance(TICK).await?;
    let third = admit(
        &ctx,
        AdmitRequest::new("third", "worker-a")
            .scope("shared")
            .ttl(LONG_TTL),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&third)?, &StatusChange::running()).await?;
    ctx.advance(TICK).await?;
    // Two admissions with no pause: on a clock that did not move they share
    // a creation time, and the greater fence (the later one) comes first.
    for id in ["fourth", "fifth"] {
        admit(
            &ctx,
            AdmitRequest::new(id, "worker-a")
                .scope("shared")
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await?;
    }
    admit(
        &ctx,
        AdmitRequest::new("unrelated", "worker-a").scope("elsewhere"),
    )
    .await?;

    let shared = ctx.store.list_by_scope("shared").await?;
    ensure_eq!(
        ids_of(&shared),
        vec!["fifth", "fourth", "third", "second", "first"],
        "newest first, finished and interrupted records included"
    );
    ensure_read_back(&ctx, &shared, "list_by_scope").await?;
    ensure_eq!(
        ids_of(&ctx.store.list_by_scope("other").await?),
        vec!["second"],
        "a finished record is still found by each scope it named"
    );
    ensure_eq!(
        ctx.store.list_by_scope("nobody-named-this").await?,
        Vec::<LeaseRecord>::new(),
        "a scope nobody named lists nothing"
    );
    Ok(())
}

/// `list_active` answers exactly the pending and running records (an expired
/// lease is still active until taken), ordered by id.
pub async fn list_active_only_active<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("m-pending", "worker-a").ttl(LONG_TTL),
    )
    .await?;
    let running = admit(
        &ctx,
        AdmitRequest::new("c-running", "worker-a").ttl(LONG_TTL),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&running)?, &StatusChange::running()).await?;
    let succeeded = admit(&ctx, AdmitRequest::new("x-succeeded", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&succeeded)?, &StatusChange::succeeded()).await?;
    let failed = admit(&ctx, AdmitRequest::new("a-failed", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&failed)?, &StatusChange::failed("boom")).await?;
    let stopped = admit(&ctx, AdmitRequest::new("k-interrupted", "worker-a")).await?;
    let claim = claim_of(&stopped)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    apply_transition(&ctx, &claim, &StatusChange::interrupted("stop")).await?;
    let expired = admit(
        &ctx,
        AdmitRequest::new("b-pending-expired", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    admit(&ctx, AdmitRequest::new("z-no-lease", "worker-b")).await?;
    expire(&ctx, &expired, Duration::ZERO).await?;

    let active = ctx.store.list_active().await?;
    ensure_eq!(
        ids_of(&active),
        vec!["b-pending-expired", "c-running", "m-pending", "z-no-lease"],
        "pending and running records only, by id"
    );
    ensure_read_back(&ctx, &active, "list_active").await?;
    Ok(())
}

/// `purge` deletes the terminal and interrupted records last updated at
/// least the retention ago and counts them; younger ones and active records
/// stay.
pub async fn purge_removes_old_finished_only<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    const RETENTION: Duration = SLOW_MACHINE_MARGIN;
    let old_succeeded = admit(
        &ctx,
        AdmitRequest::new("old-succeeded", "worker-a").scope("purged-scope"),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&old_succeeded)?, &StatusChange::succeeded()).await?;
    let old_failed = admit(&ctx, AdmitRequest::new("old-failed", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&old_failed)?, &StatusChange::failed("boom")).await?;
    admit(
        &ctx,
        AdmitRequest::new("old-active", "worker-a").scope("kept-scope"),
    )
    .await?;
    let stopped = admit(&ctx, AdmitRequest::new("old-interrupted", "worker-a")).await?;
    let claim = claim_of(&stopped)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    let old_interrupted =
        apply_transition(&ctx, &claim, &StatusChange::interrupted("stop")).await?;
    ctx.advance_past(clock::add(old_interrupted.updated_at, RETENTION))
        .await?;
    let young = admit(&ctx, AdmitRequest::new("young-succeeded", "worker-a")).await?;
    apply_transition(&ctx, &claim_of(&young)?, &StatusChange::succeeded()).await?;
    admit(
        &ctx,
        AdmitRequest::new("young-interrupted", "worker-a").scope("young-scope"),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("young-interrupter", "worker-a")
            .scope("young-scope")
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    let kept = [
        "young-succeeded",
        "young-interrupted",
        "young-interrupter",
        "old-active",
    ];
    let before = snapshot(&ctx, &kept).await?;

    ensure_eq!(
        ctx.store.purge(RETENTION).await?,
        3,
        "the old terminal and interrupted records are purged"
    );
    for id in ["old-succeeded", "old-failed", "old-interrupted"] {
        ensure_eq!(ctx.store.get(id).await?, None, "{id} was purged");
    }
    ensure_eq!(
        ctx.store.list_by_scope("purged-scope").await?,
        Vec::<LeaseRecord>::new(),
        "a purged record is gone from its scope"
    );
    ensure_eq!(
        snapshot(&ctx, &kept).await?,
        before,
        "young terminal and interrupted records and active ones are untouched"
    );
    ensure_eq!(
        ctx.store.purge(RETENTION).await?,
        0,
        "a second purge finds nothing more"
    );
    ensure_eq!(
        ctx.store.purge(Duration::ZERO).await?,
        2,
        "with no retention every terminal and interrupted record goes"
    );
    for id in ["young-succeeded", "young-interrupted"] {
        ensure_eq!(ctx.store.get(id).await?, None, "{id} was purged");
    }
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        vec!["old-active", "young-interrupter"],
        "purge never touches active records"
    );
    Ok(())
}

/// Fails the case unless every timestamp of `record` is a whole microsecond.
fn ensure_whole_micros(record: &LeaseRecord, source: &str) -> CaseResult {
    let stamps = [
        ("created_at", Some(record.created_at)),
        ("updated_at", Some(record.updated_at)),
        ("lease_expires_at", record.lease_expires_at),
    ];
    for (field, stamp) in stamps {
        if let Some(stamp) = stamp {
            ensure_eq!(
                stamp.nanosecond() % 1_000,
                0,
                "{field} {stamp} of {:?} from {source} has sub-microsecond digits",
                record.id
            );
        }
    }
    Ok(())
}

/// Timestamps in every answer (admit, renew, transition, takeover) are whole
/// microseconds and equal what `get` reads back, even for a ttl with
/// sub-microsecond digits.
pub async fn timestamps_round_trip_at_microseconds<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let ttl = LONG_TTL + Duration::from_nanos(1_999);
    let now = ctx.store.now().await?;
    ensure_eq!(
        now.nanosecond() % 1_000,
        0,
        "now() {now} is whole microseconds"
    );

    let admitted = admit(
        &ctx,
        AdmitRequest::new("stamped", "worker-a")
            .scope("stamp")
            .ttl(ttl),
    )
    .await?;
    ensure_whole_micros(&admitted, "admit")?;
    ensure_eq!(
        get(&ctx, "stamped").await?,
        admitted,
        "get reads the admitted record"
    );
    let claim = claim_of(&admitted)?;

    ctx.advance(TICK).await?;
    let outcome = ctx.store.renew(&claim, ttl).await?;
    let Renewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!("a fresh claim renews, got {outcome:?}")));
    };
    ensure_eq!(
        expires_at.nanosecond() % 1_000,
        0,
        "renewed expiry {expires_at} is whole microseconds"
    );
    let renewed = get(&ctx, "stamped").await?;
    ensure_whole_micros(&renewed, "get after renew")?;
    ensure_eq!(
        renewed.lease_expires_at,
        Some(expires_at),
        "get reads the renewed expiry"
    );

    ctx.advance(TICK).await?;
    let running = apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    ensure_whole_micros(&running, "transition")?;

    admit(
        &ctx,
        AdmitRequest::new("unleased", "worker-a").scope("stamp-2"),
    )
    .await?;
    ctx.advance(TICK).await?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("unleased", "worker-b", Some(ttl)),
    )
    .await?;
    ensure_whole_micros(&adopted, "claim_for_takeover")?;

    for record in ctx.store.list_active().await? {
        ensure_whole_micros(&record, "list_active")?;
        ensure_eq!(
            get(&ctx, &record.id).await?,
            record,
            "list_active reads as get"
        );
    }
    for record in ctx.store.list_by_scope("stamp").await? {
        ensure_eq!(
            get(&ctx, &record.id).await?,
            record,
            "list_by_scope reads as get"
        );
    }
    Ok(())
}

/// Metadata is opaque: nested objects, arrays, unicode, extreme integers,
/// floats, booleans, null and empty containers read back equal everywhere.
pub async fn metadata_round_trips<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let metadata = json!({
        "nested": { "deeper": { "deepest": [1, { "x": "y" }, []] } },
        "array": [1, "two", 3.5, null, true, { "k": "v" }, [[]]],
        "unicode": "héllo wörld, Привет, 你好, 🦀🚀",
        "ключ 🔑": "unicode key",
        "": "empty key",
        "escapes": "quote \" backslash \\ slash / tab \t newline \n bell \u{7}",
        "max_u64": u64::MAX,
        "min_i64": i64::MIN,
        "negative": -42,
        "zero": 0,
        "float": 0.1,
        "negative_float": -2.5e-8,
        "huge_float": 1.5e300,
        "true": true,
        "false": false,
        "null": null,
        "empty_object": {},
        "empty_array": [],
        "empty_string": "",
    });
    let serde_json::Value::Object(expected) = metadata.clone() else {
        return Err(Failure("the metadata literal is an object".into()));
    };
    let admitted = admit(
        &ctx,
        AdmitRequest::new("rich", "worker-a")
            .scope("meta")
            .ttl(LONG_TTL)
            .metadata(metadata),
    )
    .await?;
    ensure_eq!(
        admitted.metadata,
        expected,
        "admit answers the metadata as given"
    );
    ensure_eq!(
        get(&ctx, "rich").await?.metadata,
        expected,
        "get reads it back"
    );
    let by_scope = ctx.store.list_by_scope("meta").await?;
    ensure_eq!(
        by_scope.first().map(|record| &record.metadata),
        Some(&expected),
        "list_by_scope reads it back"
    );
    let running = apply_transition(&ctx, &claim_of(&admitted)?, &StatusChange::running()).await?;
    ensure_eq!(
        running.metadata,
        expected,
        "a status write leaves metadata alone"
    );

    let empty = admit(
        &ctx,
        AdmitRequest::new("bare", "worker-a").metadata(json!({})),
    )
    .await?;
    ensure!(
        empty.metadata.is_empty(),
        "empty metadata is an empty object"
    );
    ensure_eq!(get(&ctx, "bare").await?, empty, "empty metadata reads back");
    Ok(())
}

/// Ids and scopes that break naive key, pattern or query schemes, with pairs
/// built to collide (`"a:b"+"c"` vs `"a"+"b:c"`), each `(id, scopes)`.
const TRICKY_RECORDS: &[(&str, &[&str])] = &[
    ("a:b", &["c"]),
    ("a", &["b:c"]),
    ("x{y}", &["x"]),
    ("x", &["x{y}", "{x}"]),
    ("%", &["%"]),
    ("anything", &["anything", "any"]),
    ("_", &["a_c"]),
    ("abc", &["abc"]),
    ("s*", &["s*"]),
    ("start", &["start"]),
    ("q?", &["q?"]),
    ("qq", &["qq"]),
    ("[ab]", &["[ab]"]),
    ("plain", &["a", "b"]),
    ("it's", &["it's"]),
    ("say \"hi\"", &["say \"hi\""]),
    ("x'; DROP TABLE leases; --", &["x'; DROP TABLE leases; --"]),
    ("back\\slash", &["back\\slash", "back\\\\slash"]),
    ("ключ ünïcödé 🦀", &["ключ 🦀"]),
    ("with space", &["with space"]),
    ("trailing ", &["trailing "]),
    ("trailing", &["trailing"]),
    ("Case", &["Case"]),
    ("case", &["case"]),
    ("caf\u{e9}", &["caf\u{e9}"]),
    ("cafe\u{301}", &["cafe\u{301}"]),
];

/// Tricky ids and scopes are kept verbatim and never collide: each reads back
/// as given, each scope lists exactly its record, and holding one never
/// blocks another.
pub async fn verbatim_ids_and_scopes_never_collide<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let longest_id = "i".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES);
    let longest_scope = "s".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES);
    let records: Vec<(&str, Vec<&str>)> = TRICKY_RECORDS
        .iter()
        .map(|(id, scopes)| (*id, scopes.to_vec()))
        .chain([(longest_id.as_str(), vec![longest_scope.as_str()])])
        .collect();

    // Every scope is distinct, so a Reject admission of each succeeds only if
    // no other record's scope is mistaken for its own.
    let mut admitted = Vec::new();
    for (id, scopes) in &records {
        let record = admit(
            &ctx,
            AdmitRequest::new(*id, "worker-a")
                .scopes(scopes.iter().copied())
                .ttl(LONG_TTL),
        )
        .await?;
        ensure_eq!(record.id, *id, "admit answers the id verbatim");
        ensure_eq!(
            record.scopes.iter().map(String::as_str).collect::<Vec<_>>(),
            {
                let mut sorted = scopes.clone();
                sorted.sort_unstable();
                sorted
            },
            "admit answers the scopes of {id:?} verbatim"
        );
        admitted.push(record);
    }
    for record in &admitted {
        ensure_eq!(
            get(&ctx, &record.id).await?,
            *record,
            "get reads {:?} verbatim",
            record.id
        );
        for scope in &record.scopes {
            ensure_eq!(
                ids_of(&ctx.store.list_by_scope(scope).await?),
                vec![record.id.as_str()],
                "scope {scope:?} lists exactly its own record"
            );
        }
    }
    let mut all_ids: Vec<&str> = records.iter().map(|(id, _)| *id).collect();
    all_ids.sort_unstable();
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        all_ids,
        "list_active finds every record once"
    );

    // Contention lands on exactly the right holder.
    for (scope, holder) in [("%", "%"), ("b:c", "a"), ("x{y}", "x"), ("a_c", "_")] {
        ensure_scope_held_by(&ctx, scope, holder).await?;
    }
    // Finishing one record frees its scope and nothing that looks like it.
    apply_transition(&ctx, &claim_of(&admitted[0])?, &StatusChange::succeeded()).await?;
    admit(
        &ctx,
        AdmitRequest::new("a:b-again", "worker-b")
            .scope("c")
            .ttl(LONG_TTL),
    )
    .await?;
    ensure_scope_held_by(&ctx, "b:c", "a").await?;
    ensure_eq!(
        get(&ctx, "a").await?.status,
        Status::Pending,
        "finishing \"a:b\" leaves \"a\" alone"
    );
    match ctx
        .store
        .admit(&AdmitRequest::new("a:b", "worker-b").scope("fresh"))
        .await
    {
        Err(error) if error.kind() == tenure_lease_core::ErrorKind::AlreadyExists => {}
        other => {
            return Err(Failure(format!(
                "re-admitting the id \"a:b\" is AlreadyExists, got {other:?}"
            )))
        }
    }
    Ok(())
}

/// `list_expired` at its exact instant: with expiry `E` and grace `g`, a
/// record is not listed 1 µs before `E + g` and is at `E + g`. Needs a
/// clock the kit can place; skipped on a server's clock.
pub async fn list_expired_boundary_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let grace = Duration::from_millis(5);
    let record = admit(
        &ctx,
        AdmitRequest::new("scan-edge", "worker-a").ttl(SHORT_TTL),
    )
    .await?;
    let expires = record
        .lease_expires_at
        .ok_or_else(|| Failure("admitted with a ttl but no expiry".into()))?;
    let limit = clock::add(expires, grace);
    manual.advance_to(micro_before(limit));
    ensure_eq!(
        expired_ids(&ctx, ExpiredQuery::new(grace)).await?,
        Vec::<String>::new(),
        "1 µs before expiry + grace, the lease is not listed"
    );
    manual.advance_to(limit);
    ensure_eq!(
        expired_ids(&ctx, ExpiredQuery::new(grace)).await?,
        vec!["scan-edge".to_owned()],
        "at exactly expiry + grace, the lease is listed"
    );
    Ok(())
}

/// `purge` at its exact instant ([`rules::purgeable`]): a record that
/// finished at `F` stays 1 µs before `F + retention` and is purged at
/// `F + retention`. Needs a clock the kit can place; skipped on a server's
/// clock.
///
/// [`rules::purgeable`]: tenure_lease_core::backend::rules::purgeable
pub async fn purge_boundary_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let retention = Duration::from_millis(40);
    let record = admit(&ctx, AdmitRequest::new("purge-edge", "worker-a")).await?;
    let finished = apply_transition(&ctx, &claim_of(&record)?, &StatusChange::succeeded()).await?;
    purged_exactly_at_retention(&ctx, manual, &finished, retention).await
}

/// Places the clock 1 µs before `record` (as last written) is `retention`
/// old and checks `purge` keeps it as it was, then at exactly that age and
/// checks `purge` removes it.
async fn purged_exactly_at_retention<S: LeaseStore>(
    ctx: &Ctx<S>,
    manual: &ManualClock,
    record: &LeaseRecord,
    retention: Duration,
) -> CaseResult {
    let due = clock::add(record.updated_at, retention);
    manual.advance_to(micro_before(due));
    ensure_eq!(
        ctx.store.purge(retention).await?,
        0,
        "1 µs before {:?} ({}) is as old as the retention, nothing is purged",
        record.id,
        record.status.as_str()
    );
    ensure_eq!(
        get(ctx, &record.id).await?,
        *record,
        "the record stays as it was"
    );
    manual.advance_to(due);
    ensure_eq!(
        ctx.store.purge(retention).await?,
        1,
        "at exactly the retention, {:?} ({}) is purged",
        record.id,
        record.status.as_str()
    );
    ensure_eq!(
        ctx.store.get(&record.id).await?,
        None,
        "a purged record is gone"
    );
    Ok(())
}

/// Purge measures a record's age from when it finished, not from when it
/// was created: a record admitted longer than the retention ago that has
/// just finished stays.
pub async fn purge_counts_age_from_the_finish<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    const RETENTION: Duration = SLOW_MACHINE_MARGIN;
    let record = admit(&ctx, AdmitRequest::new("long-runner", "worker-a")).await?;
    let claim = claim_of(&record)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    ctx.advance_past(clock::add(record.created_at, RETENTION))
        .await?;
    let finished = apply_transition(&ctx, &claim, &StatusChange::succeeded()).await?;
    let purged = ctx.store.purge(RETENTION).await?;
    let after = ctx.store.now().await?;
    if clock::is_before_end(finished.updated_at, RETENTION, after) {
        ensure_eq!(
            purged,
            0,
            "a record created {RETENTION:?} ago that just finished is not old enough to purge"
        );
        ensure_eq!(
            get(&ctx, "long-runner").await?,
            finished,
            "it stays as it was"
        );
    }
    Ok(())
}

/// `purge` judges an interrupted record at its exact instant too
/// ([`rules::purgeable`]): interrupted at `I`, it stays 1 µs before
/// `I + retention`, where the claim its interruption handed out could still
/// finalise it, and is purged at `I + retention`, after which that claim
/// finds nothing. Needs a clock the kit can place; skipped on a server's
/// clock.
///
/// [`rules::purgeable`]: tenure_lease_core::backend::rules::purgeable
pub async fn purge_interrupted_boundary_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let retention = Duration::from_millis(40);
    admit(
        &ctx,
        AdmitRequest::new("interrupted-edge", "worker-a").scope("edge-scope"),
    )
    .await?;
    let interrupter = admit(
        &ctx,
        AdmitRequest::new("edge-interrupter", "worker-b")
            .scope("edge-scope")
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    let interrupted = get(&ctx, "interrupted-edge").await?;
    ensure_eq!(interrupted.status, Status::Interrupted);
    purged_exactly_at_retention(&ctx, manual, &interrupted, retention).await?;
    ensure_eq!(
        ctx.store
            .transition(&claim_of(&interrupted)?, &StatusChange::failed("too late"))
            .await?,
        Transition::Rejected(TransitionRejection::Missing),
        "the interruption's claim finds nothing to finalise"
    );
    ensure_eq!(
        ctx.store.list_by_scope("edge-scope").await?,
        vec![interrupter],
        "only the active interrupter is left on the scope"
    );
    Ok(())
}

/// Purge measures an interrupted record's age from its interruption, not
/// from its creation: a record admitted longer than the retention ago and
/// interrupted just now stays, and can still be finalised as `Failed`,
/// which restarts its age.
pub async fn purge_counts_an_interrupted_records_age_from_the_interruption<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    const RETENTION: Duration = SLOW_MACHINE_MARGIN;
    let record = admit(&ctx, AdmitRequest::new("long-stopped", "worker-a")).await?;
    let claim = claim_of(&record)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    ctx.advance_past(clock::add(record.created_at, RETENTION))
        .await?;
    let interrupted = apply_transition(&ctx, &claim, &StatusChange::interrupted("stop")).await?;
    let purged = ctx.store.purge(RETENTION).await?;
    if clock::is_before_end(interrupted.updated_at, RETENTION, ctx.store.now().await?) {
        ensure_eq!(
            purged,
            0,
            "a record created {RETENTION:?} ago that was just interrupted is not old enough to purge"
        );
        ensure_eq!(
            get(&ctx, "long-stopped").await?,
            interrupted,
            "it stays as it was"
        );
        let failed = apply_transition(&ctx, &claim, &StatusChange::failed("stopped")).await?;
        let purged = ctx.store.purge(RETENTION).await?;
        if clock::is_before_end(failed.updated_at, RETENTION, ctx.store.now().await?) {
            ensure_eq!(
                purged,
                0,
                "finalised just now, it is not old enough to purge"
            );
            ensure_eq!(get(&ctx, "long-stopped").await?, failed);
        }
    }
    Ok(())
}

/// After rounds of admissions whose holders are interrupted (by a newcomer
/// and by their owner) and never finalised, a purge of everything leaves
/// nothing: no record, no scope entry, every scope free, and (when the
/// factory can count it) no more kept than after the first round.
pub async fn purge_leaves_nothing_behind_of_interrupted_records<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut footprints = Vec::new();
    for round in 0..2 {
        let scopes: Vec<String> = (0..3)
            .map(|index| format!("stop-{round}-{index}"))
            .collect();
        let holder = admit(
            &ctx,
            AdmitRequest::new(format!("stop-{round}-holder"), "worker-a")
                .scopes(scopes[..2].iter().cloned())
                .ttl(LONG_TTL),
        )
        .await?;
        let newcomer = admit(
            &ctx,
            AdmitRequest::new(format!("stop-{round}-newcomer"), "worker-a")
                .scopes(scopes[..2].iter().cloned())
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await?;
        let stopped = admit(
            &ctx,
            AdmitRequest::new(format!("stop-{round}-stopped"), "worker-b")
                .scope(scopes[2].clone())
                .ttl(LONG_TTL),
        )
        .await?;
        let claim = claim_of(&stopped)?;
        apply_transition(&ctx, &claim, &StatusChange::running()).await?;
        apply_transition(&ctx, &claim, &StatusChange::interrupted("stop")).await?;
        apply_transition(&ctx, &claim_of(&newcomer)?, &StatusChange::succeeded()).await?;
        ensure_eq!(
            get(&ctx, &holder.id).await?.status,
            Status::Interrupted,
            "the newcomer interrupted the holder"
        );
        ensure_eq!(
            ctx.store.purge(Duration::ZERO).await?,
            3,
            "every record of round {round} is interrupted or terminal, and purged"
        );
        for id in [&holder.id, &newcomer.id, &stopped.id] {
            ensure_eq!(ctx.store.get(id).await?, None, "{id} is purged");
        }
        for scope in &scopes {
            ensure_eq!(
                ctx.store.list_by_scope(scope).await?,
                Vec::<LeaseRecord>::new(),
                "nothing is left on {scope:?}"
            );
        }
        ensure_eq!(
            ctx.store.list_active().await?,
            Vec::<LeaseRecord>::new(),
            "nothing is active"
        );
        footprints.push(ctx.footprint().await?);
        let scope_names: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let probe = format!("stop-{round}-probe");
        ensure_scopes_free(&ctx, &probe, &scope_names).await?;
        let probe = get(&ctx, &probe).await?;
        apply_transition(&ctx, &claim_of(&probe)?, &StatusChange::succeeded()).await?;
        ensure_eq!(
            ctx.store.purge(Duration::ZERO).await?,
            1,
            "the probe of round {round} is purged"
        );
    }
    ensure_footprint_kept(
        footprints[0].as_ref(),
        footprints[1].as_ref(),
        "what the store keeps after a purge grew with the interruptions",
    )
}

/// `list_expired` with `created_before` and `limit` together, where the
/// records the cutoff excludes sort ahead of those it includes (no lease,
/// or an earlier expiry): the answer is the first `limit` of the included
/// records in expiry order, so a store that cuts at `limit` before it
/// filters answers too few.
pub async fn list_expired_applies_every_filter_before_the_limit<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut included = Vec::new();
    for id in ["early-a", "early-b", "early-c"] {
        included.push(admit(&ctx, AdmitRequest::new(id, "worker-a").ttl(SHORT_TTL * 4)).await?);
    }
    ctx.advance(TICK).await?;
    let cutoff = ctx.store.now().await?;
    ctx.advance(TICK).await?;
    let mut excluded = Vec::new();
    for (id, ttl) in [
        ("late-a", None),
        ("late-b", None),
        ("late-c", Some(SHORT_TTL)),
    ] {
        let mut request = AdmitRequest::new(id, "worker-a");
        request.ttl = ttl;
        excluded.push(admit(&ctx, request).await?);
    }
    for late in &excluded {
        ensure!(
            late.created_at > cutoff,
            "{} was created after the cutoff",
            late.id
        );
    }
    for record in included.iter().chain(&excluded) {
        if record.lease_expires_at.is_some() {
            expire(&ctx, record, Duration::ZERO).await?;
        }
    }
    included.sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
    for limit in [1, 2, 10] {
        let expected: Vec<String> = included
            .iter()
            .take(limit)
            .map(|record| record.id.clone())
            .collect();
        ensure_eq!(
            expired_ids(
                &ctx,
                ExpiredQuery::new(Duration::ZERO)
                    .created_before(cutoff)
                    .limit(limit)
            )
            .await?,
            expected,
            "created_before and limit {limit} together"
        );
    }
    Ok(())
}

/// `list_by_scope` orders records created at the same instant by fence,
/// greatest first (on a clock the kit can hold still, every record here
/// shares one creation time; on a server's clock the order is checked
/// against the same rule, [`rules::newest_first`]).
///
/// [`rules::newest_first`]: tenure_lease_core::backend::rules::newest_first
pub async fn list_by_scope_orders_ties_by_fence<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let mut records = Vec::new();
    for id in ["tie-a", "tie-b", "tie-c"] {
        let record = admit(
            &ctx,
            AdmitRequest::new(id, "worker-a")
                .scope("tied")
                .ttl(LONG_TTL),
        )
        .await?;
        records
            .push(apply_transition(&ctx, &claim_of(&record)?, &StatusChange::succeeded()).await?);
    }
    records.push(
        admit(
            &ctx,
            AdmitRequest::new("tie-d", "worker-a")
                .scope("tied")
                .ttl(LONG_TTL),
        )
        .await?,
    );
    records.sort_by_key(rules::newest_first);
    ensure_eq!(
        ids_of(&ctx.store.list_by_scope("tied").await?),
        ids_of(&records),
        "newest first, ties by fence, greatest first"
    );
    Ok(())
}

/// After rounds of admissions on shared scopes, interruptions, takeovers and
/// finishes, and a purge of everything terminal, nothing is left: no record,
/// no scope entry, and (when the factory can count it) no more kept than
/// after the first round, so per-scope side structures do not grow with the
/// work done.
pub async fn purge_leaves_nothing_behind<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let mut footprints = Vec::new();
    for round in 0..2 {
        let scopes: Vec<String> = (0..3)
            .map(|index| format!("grow-{round}-{index}"))
            .collect();
        let holder = admit(
            &ctx,
            AdmitRequest::new(format!("grow-{round}-holder"), "worker-a")
                .scopes(scopes[..2].iter().cloned())
                .ttl(SHORT_TTL),
        )
        .await?;
        let orphan = admit(
            &ctx,
            AdmitRequest::new(format!("grow-{round}-orphan"), "worker-a")
                .scope(scopes[2].clone())
                .ttl(SHORT_TTL),
        )
        .await?;
        expire(&ctx, &orphan, Duration::ZERO).await?;
        let newcomer = admit(
            &ctx,
            AdmitRequest::new(format!("grow-{round}-newcomer"), "worker-b")
                .scopes(scopes[..2].iter().cloned())
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await?;
        let interrupted = get(&ctx, &holder.id).await?;
        apply_transition(
            &ctx,
            &claim_of(&interrupted)?,
            &StatusChange::failed("interrupted"),
        )
        .await?;
        take_over(
            &ctx,
            &TakeoverRequest::fail(orphan.id.clone(), "worker-c", "orphaned"),
        )
        .await?;
        apply_transition(&ctx, &claim_of(&newcomer)?, &StatusChange::succeeded()).await?;
        ensure_eq!(
            ctx.store.purge(Duration::ZERO).await?,
            3,
            "every record of round {round} is terminal, and purged"
        );
        for id in [&holder.id, &orphan.id, &newcomer.id] {
            ensure_eq!(ctx.store.get(id).await?, None, "{id} is purged");
        }
        for scope in &scopes {
            ensure_eq!(
                ctx.store.list_by_scope(scope).await?,
                Vec::<LeaseRecord>::new(),
                "nothing is left on {scope:?}"
            );
        }
        ensure_eq!(
            ctx.store.list_active().await?,
            Vec::<LeaseRecord>::new(),
            "nothing is active"
        );
        footprints.push(ctx.footprint().await?);
    }
    ensure_footprint_kept(
        footprints[0].as_ref(),
        footprints[1].as_ref(),
        "what the store keeps after a purge grew with the work done",
    )
}

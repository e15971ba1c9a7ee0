//! `list_expired`, the orphan scan: grace, records without a lease, the
//! creation cutoff, order and limit, inactive records left out, every
//! filter before the limit, and the boundary to the microsecond.

use super::*;

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

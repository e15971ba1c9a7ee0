//! `purge`: only finished records old enough go, age counted from the
//! finish (or the interruption), the boundary to the microsecond, and
//! nothing left behind.

use super::*;
use tenure_lease_core::rate::RateLimit;

/// `purge` deletes the terminal and interrupted records last updated at
/// least the retention ago and counts them; younger ones and active records
/// stay. `count_purgeable` counts what `purge` is about to delete, deleting
/// nothing, and refuses what `purge` refuses.
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
        ctx.store.count_purgeable(RETENTION).await?,
        3,
        "count_purgeable counts the old terminal and interrupted records"
    );
    ensure!(
        ctx.store.get("old-succeeded").await?.is_some(),
        "count_purgeable deletes nothing"
    );
    expect_invalid(
        ctx.store
            .count_purgeable(MAX_RETENTION + Duration::from_secs(1))
            .await,
        "terminal_older_than",
        "count_purgeable: a retention over the maximum",
    )?;
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
        ctx.store.count_purgeable(Duration::ZERO).await?,
        2,
        "with no retention every terminal and interrupted record counts"
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
        ctx.store.count_purgeable(retention).await?,
        0,
        "1 µs before {:?} ({}) is as old as the retention, nothing counts",
        record.id,
        record.status.as_str()
    );
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
        ctx.store.count_purgeable(retention).await?,
        1,
        "at exactly the retention, {:?} ({}) counts",
        record.id,
        record.status.as_str()
    );
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

/// After rounds of admissions on shared scopes, interruptions, takeovers and
/// finishes, and a purge of everything terminal, nothing is left: no record,
/// no scope entry, no rate log whose uses all stopped counting, and (when
/// the factory can count it) no more kept than after the first round, so
/// per-scope side structures do not grow with the work done.
pub async fn purge_leaves_nothing_behind<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let mut footprints = Vec::new();
    for round in 0..2 {
        let scopes: Vec<String> = (0..3)
            .map(|index| format!("grow-{round}-{index}"))
            .collect();
        // Its rate log ends long before the purge, which drops it.
        let holder = admit(
            &ctx,
            AdmitRequest::new(format!("grow-{round}-holder"), "worker-a")
                .scopes(scopes[..2].iter().cloned())
                .ttl(SHORT_TTL)
                .rate_limit(RateLimit::new(
                    format!("grow-{round}"),
                    1,
                    Duration::from_millis(1),
                )),
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

//! `list_by_scope` and `list_active`: what they list and in which order.

use super::*;

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

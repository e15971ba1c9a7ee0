//! `Reject` admissions: a conflict with any active holder, finished holders
//! ignored, and several scopes admitted all together or not at all.

use super::*;

/// Under `Reject` every active holder blocks: another worker's or the
/// requester's valid lease, an expired lease, no lease, `Pending` or `Running`.
/// The answer names that holder (retry_after only for a valid lease) and
/// nothing changes.
pub async fn admit_reject_conflicts_with_any_active_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let expired = admit(
        &ctx,
        AdmitRequest::new("h-expired", "worker-b")
            .scope("s:expired")
            .ttl(SHORT_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("h-other-valid", "worker-b")
            .scope("s:other-valid")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("h-own-valid", REQUESTER)
            .scope("s:own-valid")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("h-no-lease", "worker-b").scope("s:no-lease"),
    )
    .await?;
    let running = admit(
        &ctx,
        AdmitRequest::new("h-running", "worker-b")
            .scope("s:running")
            .ttl(LONG_TTL),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&running)?, &StatusChange::running()).await?;
    expire(&ctx, &expired, Duration::ZERO).await?;

    // (holder, its scope, whether its lease is valid)
    let holders = [
        ("h-expired", "s:expired", false),
        ("h-other-valid", "s:other-valid", true),
        ("h-own-valid", "s:own-valid", true),
        ("h-no-lease", "s:no-lease", false),
        ("h-running", "s:running", true),
    ];
    let new_ids: Vec<String> = (0..holders.len()).map(|i| format!("op-new-{i}")).collect();
    let ids: Vec<&str> = holders
        .iter()
        .map(|(id, _, _)| *id)
        .chain(new_ids.iter().map(String::as_str))
        .collect();
    let scopes: Vec<&str> = holders.iter().map(|(_, scope, _)| *scope).collect();
    for ((holder_id, scope, lease_valid), new_id) in holders.into_iter().zip(&new_ids) {
        let before = view(&ctx, &ids, &scopes).await?;
        let request = AdmitRequest::new(new_id.as_str(), REQUESTER)
            .scope(scope)
            .ttl(LONG_TTL);
        let (holder, retry_after) = conflict(ctx.store.admit(&request).await?, new_id)?;
        ensure_eq!(
            holder,
            get(&ctx, holder_id).await?,
            "Reject on {scope:?} conflicts with its holder, as stored"
        );
        if lease_valid {
            ensure_retry_after_up_to(retry_after, LONG_TTL)?;
        } else {
            ensure_eq!(
                retry_after,
                None,
                "no retry_after for {holder_id:?}, whose lease is not valid"
            );
        }
        ensure_eq!(
            view(&ctx, &ids, &scopes).await?,
            before,
            "a conflicting admission on {scope:?} changed the store"
        );
    }
    Ok(())
}

/// Finished records (`Succeeded`, `Failed`, `Interrupted`) hold no scope:
/// `Reject` admissions on their scopes are admitted and leave them unchanged.
pub async fn admit_reject_ignores_finished_holders<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let finishes = [
        (
            "h-succeeded",
            "f:succeeded",
            vec![StatusChange::succeeded()],
        ),
        ("h-failed", "f:failed", vec![StatusChange::failed("boom")]),
        (
            "h-interrupted",
            "f:interrupted",
            vec![
                StatusChange::running(),
                StatusChange::interrupted("operator_stop"),
            ],
        ),
    ];
    for (id, scope, changes) in &finishes {
        let record = admit(
            &ctx,
            AdmitRequest::new(*id, "worker-b")
                .scope(*scope)
                .ttl(LONG_TTL),
        )
        .await?;
        let claim = claim_of(&record)?;
        for change in changes {
            apply_transition(&ctx, &claim, change).await?;
        }
    }
    let finished_ids: Vec<&str> = finishes.iter().map(|(id, _, _)| *id).collect();
    let before = snapshot(&ctx, &finished_ids).await?;
    for (index, (holder_id, scope, _)) in finishes.iter().enumerate() {
        let new_id = format!("op-new-{index}");
        let answer = ctx
            .store
            .admit(
                &AdmitRequest::new(new_id.as_str(), REQUESTER)
                    .scope(*scope)
                    .ttl(LONG_TTL),
            )
            .await?;
        let (record, interrupted) = admitted(answer, &new_id)?;
        ensure!(
            interrupted.is_empty(),
            "a finished holder is never interrupted, got {interrupted:?}"
        );
        let newest = ctx.store.list_by_scope(scope).await?;
        ensure_eq!(
            newest.first(),
            Some(&record),
            "the new record is the newest on {scope:?}, after the finished {holder_id:?}"
        );
    }
    ensure_eq!(
        snapshot(&ctx, &finished_ids).await?,
        before,
        "admissions changed finished records"
    );
    Ok(())
}

/// Admission is all-or-nothing across its scopes: one held scope blocks the
/// whole `Reject` admission and none is taken; when all are free, all are held.
pub async fn admit_multi_scope_all_or_nothing<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("m:c")
            .ttl(LONG_TTL),
    )
    .await?;
    let requested = ["m:a", "m:b", "m:c", "m:d"];
    let answer = ctx
        .store
        .admit(
            &AdmitRequest::new("op-blocked", REQUESTER)
                .scopes(requested)
                .ttl(LONG_TTL),
        )
        .await?;
    let (blocking, _) = conflict(answer, "op-blocked")?;
    ensure_eq!(blocking, holder, "the held scope blocks the admission");
    ensure_eq!(ctx.store.get("op-blocked").await?, None);
    for scope in requested {
        let records = ctx.store.list_by_scope(scope).await?;
        ensure!(
            records.iter().all(|record| record.id == "h-1"),
            "a blocked admission left records on {scope:?}: {records:?}"
        );
    }
    ensure_eq!(ids_of(&ctx.store.list_active().await?), vec!["h-1"]);

    let free = ["m:a", "m:b", "m:d", "m:e"];
    let record = admit(
        &ctx,
        AdmitRequest::new("op-free", REQUESTER)
            .scopes(free)
            .ttl(LONG_TTL),
    )
    .await?;
    for scope in free {
        let records = ctx.store.list_by_scope(scope).await?;
        ensure_eq!(
            records.first(),
            Some(&record),
            "the admitted record holds {scope:?}"
        );
        ensure!(record.is_active(), "the admitted record is active");
    }
    for scope in free {
        let answer = ctx
            .store
            .admit(&AdmitRequest::new("op-probe", "worker-c").scope(scope))
            .await?;
        let (blocking, _) = conflict(answer, "op-probe")?;
        ensure_eq!(
            blocking.id,
            "op-free",
            "{scope:?} is held by the new record"
        );
    }
    ensure_one_holder_per_scope(&ctx).await?;
    Ok(())
}

//! `Interrupt` admissions: which holders they may take (expired, without a
//! lease, their own) and which block them (a valid lease, one within its
//! grace), all-or-nothing rollback wherever the blocker sits, every scope
//! of an interrupted holder released, fences in the order answered, and
//! the boundary to the microsecond.

use super::*;

/// The scopes of the rollback cases, in sorted order.
const ROLLBACK_SCOPES: [&str; 4] = ["roll:0", "roll:1", "roll:2", "roll:3"];

/// Under `Interrupt`, another worker's valid lease blocks: `Conflict` naming
/// it, with retry_after up to its expiry, and nothing changes.
pub async fn admit_interrupt_blocked_by_valid_lease_of_other<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("i:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let ids = ["h-1", "op-new"];
    let before = view(&ctx, &ids, &["i:1"]).await?;
    let request = AdmitRequest::new("op-new", REQUESTER)
        .scope("i:1")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let (blocking, retry_after) = conflict(ctx.store.admit(&request).await?, "op-new")?;
    ensure_eq!(blocking, holder, "the conflict names the valid holder");
    ensure_retry_after_up_to(retry_after, LONG_TTL)?;
    ensure_eq!(
        view(&ctx, &ids, &["i:1"]).await?,
        before,
        "a blocked Interrupt admission changed the store"
    );
    Ok(())
}

/// An expired lease still blocks `Interrupt` while expiry + grace is ahead
/// (`Conflict`, retry_after up to the grace, nothing changed); asked again
/// without grace, the same holder is interrupted.
pub async fn admit_interrupt_blocked_within_grace<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("g:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &holder, Duration::ZERO).await?;
    let ids = ["h-1", "op-new"];
    let before = view(&ctx, &ids, &["g:1"]).await?;
    let request = AdmitRequest::new("op-new", REQUESTER)
        .scope("g:1")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt)
        .grace(LONG_GRACE);
    let (blocking, retry_after) = conflict(ctx.store.admit(&request).await?, "op-new")?;
    ensure_eq!(
        blocking,
        holder,
        "the conflict names the holder within grace"
    );
    ensure_retry_after_up_to(retry_after, LONG_GRACE)?;
    ensure_eq!(
        view(&ctx, &ids, &["g:1"]).await?,
        before,
        "an Interrupt admission blocked within grace changed the store"
    );
    let answer = ctx.store.admit(&request.grace(Duration::ZERO)).await?;
    let (_, interrupted) = admitted(answer, "op-new")?;
    ensure_eq!(
        ids_of(&interrupted),
        vec!["h-1"],
        "without grace the expired holder is interrupted"
    );
    Ok(())
}

/// `Interrupt` takes a holder whose lease expired: it becomes `Interrupted`,
/// owner := requester, with a greater fence; the new record's fence is greater still.
pub async fn admit_interrupt_takes_expired_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("t:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &holder, Duration::ZERO).await?;
    interrupt_and_check(&ctx, &holder).await
}

/// `Interrupt` takes a holder with no lease, the same way as an expired one.
pub async fn admit_interrupt_takes_no_lease_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holder = admit(&ctx, AdmitRequest::new("h-1", "worker-b").scope("t:1")).await?;
    interrupt_and_check(&ctx, &holder).await
}

/// `Interrupt` takes the requester's own holder even while its lease is valid
/// (here a `Running` one), the same way as an expired one.
pub async fn admit_interrupt_takes_own_holder<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let pending = admit(
        &ctx,
        AdmitRequest::new("h-1", REQUESTER)
            .scope("t:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let holder = apply_transition(&ctx, &claim_of(&pending)?, &StatusChange::running()).await?;
    interrupt_and_check(&ctx, &holder).await
}

/// Rollback on partial interrupt, blocker on the first scope in order: an
/// `Interrupt` admission over interruptible holders and one valid foreign
/// lease conflicts with that lease and changes no record.
pub async fn admit_interrupt_rollback_blocker_first<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    interrupt_rolls_back_with_blocker_at(&ctx, 0).await
}

/// Rollback on partial interrupt, blocker on a middle scope (two interruptible
/// holders come before it in scope order): conflict, no record changed.
pub async fn admit_interrupt_rollback_blocker_middle<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    interrupt_rolls_back_with_blocker_at(&ctx, 2).await
}

/// Rollback on partial interrupt, blocker on the last scope (every other
/// holder already examined): conflict, no record changed.
pub async fn admit_interrupt_rollback_blocker_last<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    interrupt_rolls_back_with_blocker_at(&ctx, ROLLBACK_SCOPES.len() - 1).await
}

/// Interrupting a holder through one of its scopes releases all of them: its
/// other scopes are free for `Reject` admissions at once.
pub async fn admit_interrupt_releases_every_scope_of_holder<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b").scopes(["rel:a", "rel:b", "rel:c"]),
    )
    .await?;
    let answer = ctx
        .store
        .admit(
            &AdmitRequest::new("op-new", REQUESTER)
                .scope("rel:a")
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await?;
    let (_, interrupted) = admitted(answer, "op-new")?;
    ensure_eq!(ids_of(&interrupted), vec!["h-1"]);
    for (id, scope) in [("op-b", "rel:b"), ("op-c", "rel:c")] {
        admit(
            &ctx,
            AdmitRequest::new(id, "worker-c").scope(scope).ttl(LONG_TTL),
        )
        .await?;
    }
    ensure_eq!(get(&ctx, "h-1").await?.status, Status::Interrupted);
    ensure_one_holder_per_scope(&ctx).await?;
    Ok(())
}

/// The holders an `Interrupt` admission takes get their new fences in the
/// order the answer lists them (scope order), each stored with the fence the
/// answer reports, and the new record's fence is greater still. The holders
/// are admitted in the opposite order to their scopes', so a backend that
/// draws the fences in insertion (or id, or physical row) order shows it.
pub async fn admit_interrupt_fences_follow_answer_order<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    interrupt_holders_admitted_in_order(&ctx, &["fo:3", "fo:1"]).await
}

/// Like [`admit_interrupt_fences_follow_answer_order`] with three holders,
/// admitted in an order that is neither the scopes' order nor its reverse.
pub async fn admit_interrupt_fences_follow_answer_order_of_three<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    interrupt_holders_admitted_in_order(&ctx, &["fo:2", "fo:3", "fo:1"]).await
}

/// Admits one holder per scope of `admission_order`, in that order, with
/// ids `h-0`, `h-1`, ... (so ids too sort in admission order), lets their
/// leases lapse, then interrupts them all with one admission and checks the
/// fences of the answer against its order and against the store.
async fn interrupt_holders_admitted_in_order<S: LeaseStore>(
    ctx: &Ctx<S>,
    admission_order: &[&str],
) -> CaseResult {
    let mut holders = Vec::with_capacity(admission_order.len());
    for (index, scope) in admission_order.iter().enumerate() {
        let request = AdmitRequest::new(format!("h-{index}"), format!("worker-{index}"))
            .scope(*scope)
            .ttl(SHORT_TTL);
        holders.push(admit(ctx, request).await?);
    }
    for holder in &holders {
        expire(ctx, holder, Duration::ZERO).await?;
    }
    let request = AdmitRequest::new("op-new", REQUESTER)
        .scopes(admission_order.iter().copied())
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let (record, interrupted) = admitted(ctx.store.admit(&request).await?, "op-new")?;

    let mut in_scope_order: Vec<&LeaseRecord> = holders.iter().collect();
    in_scope_order.sort_by(|a, b| a.scopes.cmp(&b.scopes));
    ensure_eq!(
        ids_of(&interrupted),
        ids_of(in_scope_order.iter().copied()),
        "the answer lists the interrupted holders in scope order"
    );
    let fences: Vec<u64> = interrupted.iter().map(|holder| holder.fence).collect();
    ensure!(
        fences
            .windows(2)
            .all(|pair| matches!(pair, [earlier, later] if earlier < later)),
        "the interrupted holders' fences {fences:?} do not strictly increase in the answer's \
         order {:?}",
        ids_of(&interrupted)
    );
    let newest_before = holders.iter().map(|holder| holder.fence).max().unwrap_or(0);
    ensure!(
        fences.iter().all(|fence| *fence > newest_before),
        "the interrupted holders' fences {fences:?} are not all greater than every fence \
         handed out before ({newest_before})"
    );
    for after in &interrupted {
        let stored = get(ctx, &after.id).await?;
        ensure_eq!(
            stored.fence,
            after.fence,
            "{:?} is stored with the fence the answer reports",
            after.id
        );
        ensure_eq!(
            stored,
            *after,
            "`interrupted` in the answer is {:?} as stored",
            after.id
        );
        ensure_eq!(stored.status, Status::Interrupted);
        ensure_eq!(stored.owner.as_deref(), Some(REQUESTER));
    }
    ensure!(
        fences.last().is_some_and(|last| record.fence > *last),
        "the new record's fence {} is not greater than the interrupted ones {fences:?}",
        record.fence
    );
    ensure_eq!(get(ctx, "op-new").await?, record);
    for holder in &holders {
        expect_lost(ctx, &claim_of(holder)?, LossReason::Interrupted).await?;
    }
    Ok(())
}

/// Admits `op-new` for the requester with `Interrupt` over the scopes of
/// `holder` (interruptible, as stored now) and checks what became of it.
async fn interrupt_and_check<S: LeaseStore>(ctx: &Ctx<S>, holder: &LeaseRecord) -> CaseResult {
    let request = AdmitRequest::new("op-new", REQUESTER)
        .scopes(holder.scopes.iter().cloned())
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let (record, interrupted) = admitted(ctx.store.admit(&request).await?, "op-new")?;
    let [after] = interrupted.as_slice() else {
        return Err(Failure(format!(
            "expected exactly {:?} to be interrupted, got {interrupted:?}",
            holder.id
        )));
    };
    ensure!(
        after.fence > holder.fence,
        "the interrupted holder's fence {} is not greater than its old {}",
        after.fence,
        holder.fence
    );
    ensure!(
        after.updated_at >= holder.updated_at,
        "updated_at went back"
    );
    let expected = LeaseRecord {
        status: Status::Interrupted,
        owner: Some(REQUESTER.to_owned()),
        fence: after.fence,
        stop_reason: Some(rules::INTERRUPTED_BY_ADMISSION.to_owned()),
        updated_at: after.updated_at,
        ..holder.clone()
    };
    ensure_eq!(
        *after,
        expected,
        "interrupted: owner := requester, new fence, stop reason, lease unchanged"
    );
    ensure!(
        record.fence > after.fence,
        "the new record's fence {} is not greater than the interrupted {}",
        record.fence,
        after.fence
    );
    ensure_eq!(
        get(ctx, &holder.id).await?,
        *after,
        "`interrupted` in the answer is the record as stored"
    );
    ensure_eq!(get(ctx, "op-new").await?, record);
    expect_lost(ctx, &claim_of(holder)?, LossReason::Interrupted).await?;
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        vec!["op-new"],
        "the new record is the only active one"
    );
    Ok(())
}

/// Puts one interruptible holder of each kind (expired, no lease, the
/// requester's own) and a valid foreign lease at `blocker_at` on
/// [`ROLLBACK_SCOPES`], each also holding a side scope, then checks that an
/// `Interrupt` admission over all four changes nothing, and that without the
/// blocker's scope it interrupts the other three in scope order.
async fn interrupt_rolls_back_with_blocker_at<S: LeaseStore>(
    ctx: &Ctx<S>,
    blocker_at: usize,
) -> CaseResult {
    let mut holders = vec![
        AdmitRequest::new("h-expired", "worker-b").ttl(SHORT_TTL),
        AdmitRequest::new("h-no-lease", "worker-c"),
        AdmitRequest::new("h-own", REQUESTER).ttl(LONG_TTL),
    ];
    holders.insert(
        blocker_at,
        AdmitRequest::new("h-blocker", "worker-z").ttl(LONG_TTL),
    );
    let mut holder_ids = Vec::new();
    let mut side_scopes = Vec::new();
    for (position, (scope, request)) in ROLLBACK_SCOPES.iter().zip(holders).enumerate() {
        let side = format!("side:{position}");
        let record = admit(ctx, request.scope(*scope).scope(side.as_str())).await?;
        holder_ids.push(record.id);
        side_scopes.push(side);
    }
    expire(ctx, &get(ctx, "h-expired").await?, Duration::ZERO).await?;

    let ids: Vec<&str> = holder_ids
        .iter()
        .map(String::as_str)
        .chain(["op-new", "op-check"])
        .collect();
    let scopes: Vec<&str> = ROLLBACK_SCOPES
        .into_iter()
        .chain(side_scopes.iter().map(String::as_str))
        .collect();
    let before = view(ctx, &ids, &scopes).await?;
    let request = AdmitRequest::new("op-new", REQUESTER)
        .scopes(ROLLBACK_SCOPES)
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let (holder, retry_after) = conflict(ctx.store.admit(&request).await?, "op-new")?;
    ensure_eq!(
        holder,
        get(ctx, "h-blocker").await?,
        "the conflict names the valid foreign lease"
    );
    ensure_retry_after_up_to(retry_after, LONG_TTL)?;
    ensure_eq!(
        view(ctx, &ids, &scopes).await?,
        before,
        "a blocked Interrupt admission (blocker on scope {blocker_at}) changed records"
    );

    // The others really were interruptible: without the blocker's scope the
    // same admission goes through, interrupting them in scope order.
    let mut open_scopes = ROLLBACK_SCOPES.to_vec();
    open_scopes.remove(blocker_at);
    let answer = ctx
        .store
        .admit(
            &AdmitRequest::new("op-check", REQUESTER)
                .scopes(open_scopes)
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt),
        )
        .await?;
    let (_, interrupted) = admitted(answer, "op-check")?;
    let expected: Vec<&str> = holder_ids
        .iter()
        .map(String::as_str)
        .filter(|id| *id != "h-blocker")
        .collect();
    ensure_eq!(ids_of(&interrupted), expected, "interrupted in scope order");
    Ok(())
}

/// Admission's time rule at its exact instant: with a holder's expiry `E`
/// and grace `g`, 1 µs before `E + g` an `Interrupt` admission meets a valid
/// holder (`Conflict`, `retry_after` of exactly 1 µs, nothing changed), as
/// does a `Reject` one; at `E + g` the `Interrupt` admission takes the
/// holder and a `Reject` one still conflicts, with no retry-after. Needs a
/// clock the kit can place; skipped on a server's clock.
pub async fn admit_interrupt_boundary_is_exact_to_the_microsecond<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(manual) = ctx.manual_clock() else {
        return ctx.skip(NEEDS_MANUAL_CLOCK);
    };
    let grace = Duration::from_millis(3);
    let holder = admit(
        &ctx,
        AdmitRequest::new("edge-holder", "owner-a")
            .scope("edge")
            .ttl(SHORT_TTL),
    )
    .await?;
    let expires = holder
        .lease_expires_at
        .ok_or_else(|| Failure("admitted with a ttl but no expiry".into()))?;
    let limit = clock::add(expires, grace);
    let request = |strategy| {
        AdmitRequest::new("edge-newcomer", "owner-b")
            .scope("edge")
            .ttl(LONG_TTL)
            .grace(grace)
            .strategy(strategy)
    };
    manual.advance_to(micro_before(limit));
    for strategy in [AdmitStrategy::Interrupt, AdmitStrategy::Reject] {
        refused(
            &ctx,
            &["edge-holder", "edge-newcomer"],
            Admission::Conflict {
                holder: holder.clone(),
                retry_after: Some(MICROSECOND),
            },
            &format!("{strategy:?} 1 µs before expiry + grace meets a valid holder"),
            ctx.store.admit(&request(strategy)),
        )
        .await?;
    }
    manual.advance_to(limit);
    refused(
        &ctx,
        &["edge-holder", "edge-newcomer"],
        Admission::Conflict {
            holder: holder.clone(),
            retry_after: None,
        },
        "Reject at expiry + grace meets a lapsed holder, with no time to wait",
        ctx.store.admit(&request(AdmitStrategy::Reject)),
    )
    .await?;
    match ctx.store.admit(&request(AdmitStrategy::Interrupt)).await? {
        Admission::Admitted { interrupted, .. } => {
            let ids: Vec<&str> = interrupted
                .iter()
                .map(|record| record.id.as_str())
                .collect();
            ensure_eq!(
                ids,
                vec!["edge-holder"],
                "at expiry + grace the holder is interrupted"
            );
        }
        other => {
            return Err(Failure(format!(
                "Interrupt at exactly expiry + grace is admitted, got {other:?}"
            )))
        }
    }
    Ok(())
}

/// One `Interrupt` admission naming two (then all three) scopes of one
/// lapsed holder interrupts it once: one entry in `interrupted`, whose fence
/// `get` then reads, and every scope of the holder released, including the
/// one the admission did not name.
pub async fn admit_interrupt_of_a_multi_scope_holder_interrupts_it_once<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for (round, named) in [&["a", "b"][..], &["a", "b", "c"][..]]
        .into_iter()
        .enumerate()
    {
        let scope = |name: &str| format!("multi-{round}-{name}");
        let holder_id = format!("multi-holder-{round}");
        let holder = admit(
            &ctx,
            AdmitRequest::new(holder_id.as_str(), "owner-a")
                .scopes(["a", "b", "c"].map(scope))
                .ttl(SHORT_TTL),
        )
        .await?;
        expire(&ctx, &holder, Duration::ZERO).await?;
        let request = AdmitRequest::new(format!("multi-newcomer-{round}"), "owner-b")
            .scopes(named.iter().map(|name| scope(name)))
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt);
        let Admission::Admitted {
            record,
            interrupted,
        } = ctx.store.admit(&request).await?
        else {
            return Err(Failure(format!("{request:?} interrupts a lapsed holder")));
        };
        ensure_eq!(
            interrupted
                .iter()
                .map(|record| record.id.as_str())
                .collect::<Vec<_>>(),
            vec![holder_id.as_str()],
            "a holder of {} named scopes is interrupted once",
            named.len()
        );
        let stored = get(&ctx, &holder_id).await?;
        ensure_eq!(
            &stored,
            &interrupted[0],
            "get reads the interruption answered"
        );
        ensure!(
            stored.fence > holder.fence && record.fence != stored.fence,
            "the interruption drew one new fence of its own"
        );
        let unnamed = admit(
            &ctx,
            AdmitRequest::new(format!("multi-after-{round}"), "owner-c").scope(scope("c")),
        );
        if named.len() < 3 {
            unnamed.await?;
        }
    }
    Ok(())
}

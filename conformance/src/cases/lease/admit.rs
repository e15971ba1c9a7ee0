//! Conformance cases: admit ([contract §3](tenure_lease_core::contract); §13
//! invariants 1, 3, 5, 7).
//!
//! Admission is where mutual exclusion is won or lost, so each case builds
//! holders of a known kind, asks for an admission, and checks both the answer
//! and that nothing else moved. The race cases release many admissions at
//! once from a start line and check the invariants afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::rules;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseRecord, LeaseStore, LossReason,
    Status, StatusChange, DEFAULT_KIND,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_lost, expire, get, micro_before, refused, snapshot,
    StartLine, LONG_GRACE, LONG_TTL, MICROSECOND, NEEDS_MANUAL_CLOCK, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The owner of the admissions the single-requester cases make.
const REQUESTER: &str = "worker-a";

/// How far below its upper bound a `retry_after` may fall: more than the time
/// a case takes between admitting a holder and being answered about it.
const RETRY_AFTER_SLACK: Duration = Duration::from_secs(60);

/// How many admissions each race releases at once.
const RACERS: usize = 16;

/// How long a race may take before it counts as hung (deadlocked): far
/// beyond what a starved machine needs for a few dozen admissions.
const RACE_TIMEOUT: Duration = Duration::from_secs(60);

/// The scopes of the rollback cases, in sorted order.
const ROLLBACK_SCOPES: [&str; 4] = ["roll:0", "roll:1", "roll:2", "roll:3"];

/// A new record is `Pending`, owned by the requester, holds its scopes, has a
/// fence and a lease of `now + ttl` in store time, and reads back unchanged.
pub async fn admit_creates_pending_record<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let before = ctx.store.now().await?;
    let record = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["thread:1", "account:7"])
            .kind("checkpoint_write")
            .ttl(LONG_TTL)
            .metadata(json!({ "step": 3 })),
    )
    .await?;
    let after = ctx.store.now().await?;
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(record.owner.as_deref(), Some("worker-a"));
    ensure_eq!(record.kind, "checkpoint_write");
    ensure_eq!(
        record.scopes.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["account:7", "thread:1"]
    );
    ensure!(record.fence > 0, "fences start above zero");
    ensure!(
        before <= record.created_at && record.created_at <= after,
        "created_at is store time"
    );
    ensure_eq!(
        record.lease_expires_at,
        Some(clock::add(record.created_at, LONG_TTL))
    );
    ensure_eq!(record.metadata.get("step"), Some(&json!(3)));
    ensure_eq!(
        get(&ctx, "op-1").await?,
        record,
        "get returns the record as admitted"
    );
    Ok(())
}

/// A record admitted without a ttl has no lease (`lease_expires_at` is none),
/// yet is active and holds its scope like any other, with no retry_after.
pub async fn admit_without_ttl_has_no_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let record = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a").scope("thread:1"),
    )
    .await?;
    ensure_eq!(record.lease_expires_at, None, "no ttl, no lease");
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(
        get(&ctx, "op-1").await?,
        record,
        "get returns the record as admitted"
    );
    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-2", "worker-b").scope("thread:1"))
        .await?;
    let (holder, retry_after) = conflict(answer, "op-2")?;
    ensure_eq!(holder, record, "the lease-less record holds its scope");
    ensure_eq!(
        retry_after,
        None,
        "a holder without a lease has no retry_after"
    );
    Ok(())
}

/// Admitting an existing id is an `AlreadyExists` error whatever else the
/// request says, and changes nothing: the record keeps its scopes.
pub async fn admit_duplicate_id_is_already_exists<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let original = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("dup:1")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("op-side", "worker-c").scope("dup:3"),
    )
    .await?;
    let ids = ["op-1", "op-side"];
    let scopes = ["dup:1", "dup:2", "dup:3"];
    let before = view(&ctx, &ids, &scopes).await?;
    let duplicates = [
        AdmitRequest::new("op-1", "worker-a")
            .scope("dup:1")
            .ttl(LONG_TTL),
        AdmitRequest::new("op-1", "worker-b")
            .scope("dup:2")
            .ttl(LONG_TTL),
        // Both holders named here are interruptible (the record itself is the
        // requester's own, the other has no lease): a backend that interrupts
        // before checking the id shows it.
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["dup:1", "dup:3"])
            .strategy(AdmitStrategy::Interrupt),
    ];
    for request in duplicates {
        match ctx.store.admit(&request).await {
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
            other => {
                return Err(Failure(format!(
                    "expected AlreadyExists for {request:?}, got {other:?}"
                )))
            }
        }
        ensure_eq!(
            view(&ctx, &ids, &scopes).await?,
            before,
            "a duplicate admission changed the store: {request:?}"
        );
    }
    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-2", "worker-b").scope("dup:1"))
        .await?;
    let (holder, _) = conflict(answer, "op-2")?;
    ensure_eq!(
        holder,
        original,
        "the original record still holds its scope"
    );
    Ok(())
}

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

/// A record naming no scope never conflicts and interrupts nothing, whatever
/// the strategy, the owner or the records already active.
pub async fn admit_empty_scopes_never_conflict<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("e:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let strategies = [
        AdmitStrategy::Reject,
        AdmitStrategy::Interrupt,
        AdmitStrategy::Reject,
        AdmitStrategy::Interrupt,
    ];
    let mut expected_active = BTreeSet::from(["h-1".to_owned()]);
    for (index, strategy) in strategies.into_iter().enumerate() {
        let id = format!("op-{index}");
        let mut request =
            AdmitRequest::new(id.as_str(), format!("worker-{}", index % 2)).strategy(strategy);
        if index < 2 {
            request = request.ttl(LONG_TTL);
        }
        let (record, interrupted) = admitted(ctx.store.admit(&request).await?, &id)?;
        ensure!(
            interrupted.is_empty(),
            "an admission without scopes interrupted {interrupted:?}"
        );
        ensure!(record.scopes.is_empty(), "no scope was asked for");
        ensure_eq!(record.status, Status::Pending);
        expected_active.insert(id);
    }
    let active: BTreeSet<String> = ctx
        .store
        .list_active()
        .await?
        .into_iter()
        .map(|record| record.id)
        .collect();
    ensure_eq!(active, expected_active, "every admission is active");
    Ok(())
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

/// The kind label travels through every answer: the admitted record, a
/// conflict's holder, the interrupted records, and the default `"run"`.
pub async fn admit_kind_is_carried_through_answers<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("h-checkpoint", "worker-b")
            .scope("k:1")
            .kind("checkpoint_write")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("h-sweep", "worker-c")
            .scope("k:2")
            .kind("sweep"),
    )
    .await?;
    let default = admit(
        &ctx,
        AdmitRequest::new("h-default", "worker-d").scope("k:3"),
    )
    .await?;
    ensure_eq!(
        default.kind,
        DEFAULT_KIND,
        "no kind given means the default"
    );

    let report = AdmitRequest::new("op-report", REQUESTER)
        .kind("report")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let answer = ctx
        .store
        .admit(&report.clone().scopes(["k:1", "k:2"]))
        .await?;
    let (holder, _) = conflict(answer, "op-report")?;
    ensure_eq!(
        holder.kind,
        "checkpoint_write",
        "the conflict's holder keeps its kind"
    );

    let answer = ctx.store.admit(&report.scope("k:2")).await?;
    let (record, interrupted) = admitted(answer, "op-report")?;
    ensure_eq!(
        record.kind,
        "report",
        "the admitted record carries its kind"
    );
    ensure_eq!(
        interrupted
            .iter()
            .map(|r| r.kind.as_str())
            .collect::<Vec<_>>(),
        vec!["sweep"],
        "the interrupted record keeps its kind"
    );
    ensure_eq!(get(&ctx, "op-report").await?.kind, "report");
    ensure_eq!(get(&ctx, "h-sweep").await?.kind, "sweep");

    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-probe", REQUESTER).scope("k:3"))
        .await?;
    let (holder, _) = conflict(answer, "op-probe")?;
    ensure_eq!(holder.kind, DEFAULT_KIND, "the default kind is carried too");
    Ok(())
}

/// Sixteen admissions of different ids released together on one free scope:
/// exactly one is admitted and the others conflict with it. Racing `Interrupt`
/// admissions over an expired holder never leave two active holders.
pub async fn race_admissions_one_scope_exactly_one_admitted<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let requests = (0..RACERS)
        .map(|i| {
            AdmitRequest::new(format!("race-{i}"), format!("worker-{i}"))
                .scope("hot")
                .ttl(LONG_TTL)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let winners: Vec<&LeaseRecord> = answers
        .iter()
        .filter_map(|(_, answer)| answer.admitted())
        .collect();
    let [winner] = winners.as_slice() else {
        return Err(Failure(format!(
            "expected exactly one admission on a free scope, got {:?}",
            ids_of(winners.iter().copied())
        )));
    };
    for (request, answer) in &answers {
        if request.id == winner.id {
            continue;
        }
        let (holder, _) = conflict(answer.clone(), &request.id)?;
        ensure_eq!(holder.id, winner.id, "losers conflict with the winner");
        ensure_eq!(
            ctx.store.get(&request.id).await?,
            None,
            "a losing admission left a record"
        );
    }
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        vec![winner.id.as_str()],
        "one active holder"
    );

    let stale = admit(
        &ctx,
        AdmitRequest::new("stale", "worker-old")
            .scope("hot-2")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &stale, Duration::ZERO).await?;
    let requests = (0..RACERS)
        .map(|i| {
            AdmitRequest::new(format!("irace-{i}"), format!("worker-{i}"))
                .scope("hot-2")
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let mut winners = Vec::new();
    for (request, answer) in answers {
        match answer {
            Admission::Admitted {
                record,
                interrupted,
            } => winners.push((record, interrupted)),
            Admission::Conflict { holder, .. } => ensure!(
                holder.scopes.contains("hot-2") && holder.id != request.id,
                "{:?} conflicts with {holder:?}, which does not hold the scope",
                request.id
            ),
            other => return Err(Failure(format!("unexpected answer {other:?}"))),
        }
    }
    ensure!(
        winners.len() <= 1,
        "{} Interrupt admissions won the same scope",
        winners.len()
    );
    let holders = active_holders_of(&ctx, "hot-2").await?;
    ensure!(
        holders.len() <= 1,
        "two active holders of one scope: {holders:?}"
    );
    if let [(record, interrupted)] = winners.as_slice() {
        ensure_eq!(ids_of(&holders), vec![record.id.as_str()]);
        ensure_eq!(ids_of(interrupted), vec!["stale"]);
        ensure_eq!(get(&ctx, "stale").await?, interrupted[0]);
    }
    Ok(())
}

/// Racing admissions of one id on disjoint scopes: exactly one is
/// admitted, every other answers `AlreadyExists` (no scope lock serialises
/// them, only the id), and no loser leaves a record or holds its scope.
pub async fn race_admissions_one_id_exactly_one_admitted<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let start = StartLine::new(RACERS);
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request = AdmitRequest::new("twin", format!("worker-{i}"))
                .scope(format!("twin-scope-{i}"))
                .ttl(LONG_TTL);
            tokio::spawn(async move {
                start.wait().await;
                (request.scopes.clone(), store.admit(&request).await)
            })
        })
        .collect();
    let mut admitted = Vec::new();
    let mut losing_scopes = Vec::new();
    for task in tasks {
        let (scopes, answer) = tokio::time::timeout(RACE_TIMEOUT, task)
            .await
            .map_err(|_| {
                Failure(format!(
                    "an admission did not finish within {RACE_TIMEOUT:?}"
                ))
            })?
            .map_err(|error| Failure(format!("an admission task failed: {error}")))?;
        match answer {
            Ok(Admission::Admitted { record, .. }) => admitted.push(record),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => losing_scopes.extend(scopes),
            other => {
                return Err(Failure(format!(
                    "a racing admission of an existing id answered {other:?}, \
                     expected Admitted or AlreadyExists"
                )))
            }
        }
    }
    let [winner] = admitted.as_slice() else {
        return Err(Failure(format!(
            "expected exactly one admission of the id, got {}",
            admitted.len()
        )));
    };
    ensure_eq!(
        ctx.store.get("twin").await?.as_ref(),
        Some(winner),
        "the stored record is the winner's"
    );
    // A loser that kept its scope would make these conflict.
    for (i, scope) in losing_scopes.iter().enumerate() {
        let probe = AdmitRequest::new(format!("after-{i}"), "worker-probe")
            .scope(scope)
            .ttl(LONG_TTL);
        admit(&ctx, probe).await?;
    }
    Ok(())
}

/// Rounds of concurrent admissions over overlapping scope sets (`Reject` with
/// leases, `Interrupt` over lease-less holders): no `Err`, no hang, at least
/// one winner, and never two active records holding one scope.
pub async fn race_admissions_opposite_scope_orders_never_deadlock<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const SCOPE_SETS: [&[&str]; 8] = [
        &["a", "b"],
        &["b", "a"],
        &["b", "c"],
        &["c", "a"],
        &["c", "d"],
        &["d", "a"],
        &["a", "b", "c", "d"],
        &["d", "c", "b"],
    ];
    const ROUNDS: usize = 6;
    for round in 0..ROUNDS {
        let interrupting = round % 2 == 1;
        let requests = SCOPE_SETS
            .iter()
            .enumerate()
            .map(|(i, scopes)| {
                let request = AdmitRequest::new(format!("r{round}-{i}"), format!("worker-{i}"))
                    .scopes(scopes.iter().map(|scope| format!("r{round}:{scope}")));
                if interrupting {
                    // No lease: every holder is interruptible by any owner.
                    request.strategy(AdmitStrategy::Interrupt)
                } else {
                    request.ttl(LONG_TTL)
                }
            })
            .collect();
        let answers = race(&ctx, requests).await?;
        let winners: Vec<&LeaseRecord> = answers
            .iter()
            .filter_map(|(_, answer)| answer.admitted())
            .collect();
        ensure!(!winners.is_empty(), "round {round}: no admission won");
        ensure_one_holder_per_scope(&ctx).await?;
        for winner in winners {
            let stored = get(&ctx, &winner.id).await?;
            let expected = if interrupting {
                stored.is_active() || stored.status == Status::Interrupted
            } else {
                stored.is_active()
            };
            ensure!(
                expected,
                "round {round}: admitted {:?} is now {:?}",
                winner.id,
                stored.status
            );
        }
    }
    Ok(())
}

/// Concurrent `Interrupt` admissions by different owners over the same expired
/// holders: every answer is Admitted or Conflict, each holder is interrupted
/// at most once (as `get` reads it), and no scope ends with two active holders.
pub async fn race_interrupt_admissions_answer_admitted_or_conflict<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const SCOPE_SETS: [&[&str]; 6] = [
        &["x:a"],
        &["x:b"],
        &["x:c"],
        &["x:a", "x:c"],
        &["x:b", "x:c"],
        &["x:a", "x:b", "x:c"],
    ];
    let stale_ab = admit(
        &ctx,
        AdmitRequest::new("stale-ab", "worker-old")
            .scopes(["x:a", "x:b"])
            .ttl(SHORT_TTL),
    )
    .await?;
    let stale_c = admit(
        &ctx,
        AdmitRequest::new("stale-c", "worker-old")
            .scope("x:c")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &stale_ab, Duration::ZERO).await?;
    expire(&ctx, &stale_c, Duration::ZERO).await?;

    let requests = (0..2 * SCOPE_SETS.len())
        .map(|i| {
            AdmitRequest::new(format!("op-{i}"), format!("worker-{i}"))
                .scopes(SCOPE_SETS[i % SCOPE_SETS.len()].iter().copied())
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let mut interrupted_by: BTreeMap<String, LeaseRecord> = BTreeMap::new();
    let mut admitted_count = 0;
    for (request, answer) in answers {
        match answer {
            Admission::Admitted { interrupted, .. } => {
                admitted_count += 1;
                for record in interrupted {
                    ensure!(
                        record.id == "stale-ab" || record.id == "stale-c",
                        "{:?} interrupted {:?}, which had a valid foreign lease",
                        request.id,
                        record.id
                    );
                    ensure_eq!(record.owner.as_deref(), Some(request.owner.as_str()));
                    if let Some(earlier) = interrupted_by.insert(record.id.clone(), record) {
                        return Err(Failure(format!(
                            "{:?} was interrupted twice (first by {:?}, then by {:?})",
                            earlier.id, earlier.owner, request.owner
                        )));
                    }
                }
            }
            Admission::Conflict { holder, .. } => ensure!(
                holder.id != request.id
                    && holder
                        .scopes
                        .iter()
                        .any(|scope| request.scopes.contains(scope)),
                "{:?} conflicts with {holder:?}, which holds none of its scopes",
                request.id
            ),
            other => return Err(Failure(format!("unexpected answer {other:?}"))),
        }
    }
    ensure!(admitted_count > 0, "no Interrupt admission won");
    ensure_one_holder_per_scope(&ctx).await?;
    for (id, record) in &interrupted_by {
        ensure_eq!(
            get(&ctx, id).await?,
            *record,
            "the interrupted record as answered is the record as stored"
        );
    }
    Ok(())
}

/// Everything a case can observe about some ids and scopes, for "nothing
/// changed" comparisons.
#[derive(Debug, PartialEq)]
struct View {
    records: Vec<Option<LeaseRecord>>,
    by_scope: Vec<Vec<LeaseRecord>>,
    active: Vec<LeaseRecord>,
}

async fn view<S: LeaseStore>(ctx: &Ctx<S>, ids: &[&str], scopes: &[&str]) -> Result<View, Failure> {
    let mut by_scope = Vec::with_capacity(scopes.len());
    for scope in scopes {
        by_scope.push(ctx.store.list_by_scope(scope).await?);
    }
    Ok(View {
        records: snapshot(ctx, ids).await?,
        by_scope,
        active: ctx.store.list_active().await?,
    })
}

fn admitted(admission: Admission, id: &str) -> Result<(LeaseRecord, Vec<LeaseRecord>), Failure> {
    match admission {
        Admission::Admitted {
            record,
            interrupted,
        } => Ok((record, interrupted)),
        other => Err(Failure(format!(
            "expected {id:?} to be admitted, got {other:?}"
        ))),
    }
}

fn conflict(admission: Admission, id: &str) -> Result<(LeaseRecord, Option<Duration>), Failure> {
    match admission {
        Admission::Conflict {
            holder,
            retry_after,
        } => Ok((holder, retry_after)),
        other => Err(Failure(format!(
            "expected {id:?} to conflict, got {other:?}"
        ))),
    }
}

fn ids_of<'a>(records: impl IntoIterator<Item = &'a LeaseRecord>) -> Vec<&'a str> {
    records
        .into_iter()
        .map(|record| record.id.as_str())
        .collect()
}

/// Fails unless `retry_after` is `Some` and within `RETRY_AFTER_SLACK` below
/// `bound` (the holder's remaining lease plus grace when it was admitted).
fn ensure_retry_after_up_to(retry_after: Option<Duration>, bound: Duration) -> CaseResult {
    let lowest = bound.saturating_sub(RETRY_AFTER_SLACK);
    ensure!(
        retry_after.is_some_and(|retry_after| lowest < retry_after && retry_after <= bound),
        "retry_after {retry_after:?} should lie in ({lowest:?}, {bound:?}]"
    );
    Ok(())
}

async fn active_holders_of<S: LeaseStore>(
    ctx: &Ctx<S>,
    scope: &str,
) -> Result<Vec<LeaseRecord>, Failure> {
    let mut active = ctx.store.list_active().await?;
    active.retain(|record| record.scopes.contains(scope));
    Ok(active)
}

/// Fails unless every scope has at most one active holder (invariant 1).
async fn ensure_one_holder_per_scope<S: LeaseStore>(ctx: &Ctx<S>) -> CaseResult {
    let active = ctx.store.list_active().await?;
    let mut holders: BTreeMap<&str, &str> = BTreeMap::new();
    for record in &active {
        for scope in &record.scopes {
            if let Some(other) = holders.insert(scope, &record.id) {
                return Err(Failure(format!(
                    "scope {scope:?} has two active holders: {other:?} and {:?}",
                    record.id
                )));
            }
        }
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

/// Admits every request concurrently, released together from a start line, and
/// answers each with its outcome; any `Err`, panic or hang fails the case.
async fn race<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    requests: Vec<AdmitRequest>,
) -> Result<Vec<(AdmitRequest, Admission)>, Failure> {
    let start = StartLine::new(requests.len());
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let answer = store.admit(&request).await;
                (request, answer)
            })
        })
        .collect();
    let collect = async {
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            let (request, answer) = task
                .await
                .map_err(|error| Failure(format!("an admission task failed: {error}")))?;
            let answer = answer.map_err(|error| {
                Failure(format!(
                    "racing admission {:?} answered Err (races must surface as Conflict): {error}",
                    request.id
                ))
            })?;
            answers.push((request, answer));
        }
        Ok(answers)
    };
    tokio::time::timeout(RACE_TIMEOUT, collect)
        .await
        .map_err(|_| {
            Failure(format!(
                "racing admissions did not finish within {RACE_TIMEOUT:?}"
            ))
        })?
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

/// Overlapping multi-scope admissions (a ring of scope pairs and a chord)
/// issued one after another in a fixed order, its reverse and two seeded
/// shuffles, then all at once: each answer is what the scopes' holders at
/// that moment dictate (admitted exactly when every scope is free), and at
/// the end every scope has at most one active holder, which holds all its
/// scopes.
pub async fn admit_overlapping_multi_scope_admissions_keep_one_holder_per_scope<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    const PAIRS: [[usize; 2]; 5] = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]];
    let orders: [Vec<usize>; 4] = [
        vec![0, 1, 2, 3, 4],
        vec![4, 3, 2, 1, 0],
        vec![2, 0, 4, 1, 3],
        vec![3, 4, 0, 2, 1],
    ];
    for (round, order) in orders.iter().enumerate() {
        let scope = |index: usize| format!("ring-{round}-{index}");
        let mut held = BTreeSet::new();
        for &pair in order {
            let scopes = PAIRS[pair].map(scope);
            let request = AdmitRequest::new(format!("ring-{round}-{pair}"), REQUESTER)
                .scopes(scopes.clone())
                .ttl(LONG_TTL);
            let free = scopes.iter().all(|scope| !held.contains(scope));
            match (ctx.store.admit(&request).await?, free) {
                (Admission::Admitted { .. }, true) => held.extend(scopes),
                (Admission::Conflict { holder, .. }, false) => ensure!(
                    holder.scopes.iter().any(|scope| scopes.contains(scope)),
                    "{request:?} is blocked by a holder of one of its scopes, not {holder:?}"
                ),
                (answer, free) => {
                    return Err(Failure(format!(
                    "order {order:?}: {request:?} with its scopes free={free} answered {answer:?}"
                )))
                }
            }
        }
        ensure_one_holder_per_scope(&ctx).await?;
    }
    let start = StartLine::new(PAIRS.len());
    let mut racers = Vec::with_capacity(PAIRS.len());
    for (pair, scopes) in PAIRS.iter().enumerate() {
        let store = Arc::clone(&ctx.store);
        let start = Arc::clone(&start);
        let request = AdmitRequest::new(format!("ring-race-{pair}"), REQUESTER)
            .scopes(scopes.map(|index| format!("ring-race-{index}")))
            .ttl(LONG_TTL);
        racers.push(tokio::spawn(async move {
            start.wait().await;
            store.admit(&request).await
        }));
    }
    for racer in racers {
        racer
            .await
            .map_err(|error| Failure(format!("an admission panicked: {error}")))??;
    }
    ensure_one_holder_per_scope(&ctx).await
}

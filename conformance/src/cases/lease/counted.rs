//! Counted scopes, semaphores ([contract §17](tenure_lease_core::contract)):
//! a scope that admits up to a capacity of holders at once, each in a
//! numbered slot of its own, with its own fence.
//!
//! A store that counts holders and then writes in two steps passes every
//! case run one call at a time, so racing admissions count the winners; a
//! store that frees the wrong slot, lets a takeover move a holder, or
//! indexes slots under colliding keys fails the cases that fill, free and
//! reuse slots one by one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::limits::MAX_SCOPE_CAPACITY;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, LeaseRecord, LeaseStore, StatusChange, TakeoverRequest,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_invalid, expire, get, renew_confirmed, snapshot,
    take_over, StartLine, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// A request for `id` by `owner` on the counted `scope` of `capacity`.
fn counted(id: &str, owner: &str, scope: &str, capacity: u32) -> AdmitRequest {
    AdmitRequest::new(id, owner)
        .counted_scope(scope, capacity)
        .ttl(LONG_TTL)
}

/// Admits `request`, failing the case unless it is admitted into `slot`
/// of its counted `scope`, recorded in the answer and read back alike.
async fn admitted_into<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: AdmitRequest,
    scope: &str,
    slot: u32,
) -> Result<LeaseRecord, Failure> {
    let id = request.id.clone();
    let record = admit(ctx, request).await?;
    ensure_eq!(
        record.slots,
        BTreeMap::from([(scope.to_owned(), slot)]),
        "{id:?} is admitted into slot {slot} of {scope:?}"
    );
    ensure_eq!(
        get(ctx, &id).await?,
        record,
        "{id:?} reads back as admitted"
    );
    Ok(record)
}

/// Admits `request`, failing the case unless it conflicts with the record
/// `holder_id` and nothing changes (the request's id stays unknown, the
/// records in `unchanged` as they were).
async fn conflicts_with<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: &AdmitRequest,
    holder_id: &str,
    unchanged: &[&str],
) -> Result<Option<Duration>, Failure> {
    let before = snapshot(ctx, unchanged).await?;
    let answer = ctx.store.admit(request).await?;
    let Admission::Conflict {
        holder,
        retry_after,
    } = answer
    else {
        return Err(Failure(format!(
            "expected {:?} to conflict with {holder_id:?}, got {answer:?}",
            request.id
        )));
    };
    ensure_eq!(
        holder.id,
        holder_id,
        "the conflict names the holder that frees first"
    );
    ensure_eq!(
        ctx.store.get(&request.id).await?,
        None,
        "a refused admission stores nothing"
    );
    ensure_eq!(
        snapshot(ctx, unchanged).await?,
        before,
        "a refused admission changes no holder"
    );
    Ok(retry_after)
}

/// Admits `request` under `Interrupt`, failing the case unless it is
/// admitted; answers the record and the holders it interrupted.
async fn interrupting<S: LeaseStore>(
    ctx: &Ctx<S>,
    request: AdmitRequest,
) -> Result<(LeaseRecord, Vec<LeaseRecord>), Failure> {
    let request = request.strategy(AdmitStrategy::Interrupt);
    match ctx.store.admit(&request).await? {
        Admission::Admitted {
            record,
            interrupted,
        } => Ok((record, interrupted)),
        other => Err(Failure(format!(
            "expected {:?} to be admitted, interrupting, got {other:?}",
            request.id
        ))),
    }
}

/// Ends the record `id` (its claim writes `Succeeded`), freeing its slot.
async fn finish<S: LeaseStore>(ctx: &Ctx<S>, record: &LeaseRecord) -> Result<(), Failure> {
    apply_transition(ctx, &claim_of(record)?, &StatusChange::succeeded())
        .await
        .map(drop)
}

/// A scope of capacity 3 admits three holders into slots 0, 1 and 2, each
/// with its own greater fence; the fourth conflicts with the holder whose
/// lease ends first, and changes nothing. Capacity is the request's: two
/// counts only slots 0 and 1, four admits into slot 3.
pub async fn counted_scope_admits_up_to_its_capacity<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "exports";
    let first = admitted_into(&ctx, counted("a", "worker-a", scope, 3), scope, 0).await?;
    let second = admitted_into(
        &ctx,
        counted("b", "worker-b", scope, 3).ttl(LONG_TTL / 2),
        scope,
        1,
    )
    .await?;
    let third = admitted_into(&ctx, counted("c", "worker-a", scope, 3), scope, 2).await?;
    ensure!(
        first.fence < second.fence && second.fence < third.fence,
        "each holder has its own, greater fence: {}, {}, {}",
        first.fence,
        second.fence,
        third.fence
    );
    let held = ["a", "b", "c"];
    let retry_after = conflicts_with(&ctx, &counted("d", "worker-c", scope, 3), "b", &held).await?;
    ensure!(
        retry_after.is_some_and(|after| after <= LONG_TTL / 2),
        "the conflict waits for the holder that frees first, got {retry_after:?}"
    );
    let interrupt = counted("d", "worker-c", scope, 3).strategy(AdmitStrategy::Interrupt);
    conflicts_with(&ctx, &interrupt, "b", &held).await?;
    conflicts_with(&ctx, &counted("d", "worker-c", scope, 2), "b", &held).await?;
    // Capacity 1 is the exclusive scope: slot 0 alone.
    conflicts_with(&ctx, &counted("d", "worker-c", scope, 1), "a", &held).await?;
    conflicts_with(
        &ctx,
        &AdmitRequest::new("d", "worker-c").scope(scope),
        "a",
        &held,
    )
    .await?;
    let fourth = admitted_into(&ctx, counted("d", "worker-c", scope, 4), scope, 3).await?;
    ensure!(
        fourth.fence > third.fence,
        "the fourth holder's fence is greatest"
    );
    let mut listed: Vec<_> = ctx
        .store
        .list_by_scope(scope)
        .await?
        .into_iter()
        .map(|record| record.id)
        .collect();
    listed.sort();
    ensure_eq!(
        listed,
        ["a", "b", "c", "d"],
        "list_by_scope lists the holders of every slot"
    );
    Ok(())
}

/// An exclusive scope is slot 0 of the counted scope of that name: an
/// exclusive holder occupies slot 0 of every counted admission, and a
/// counted holder of slot 0 blocks an exclusive admission.
pub async fn counted_scope_exclusive_scope_is_slot_zero<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "reports";
    let exclusive = admit(
        &ctx,
        AdmitRequest::new("x", "worker-a")
            .scope(scope)
            .ttl(LONG_TTL),
    )
    .await?;
    ensure_eq!(
        exclusive.slot(scope),
        Some(0),
        "an exclusive holder holds slot 0"
    );
    ensure!(
        exclusive.slots.is_empty(),
        "an exclusive scope records no slot"
    );
    admitted_into(&ctx, counted("y", "worker-b", scope, 2), scope, 1).await?;
    conflicts_with(&ctx, &counted("z", "worker-c", scope, 2), "x", &["x", "y"]).await?;
    finish(&ctx, &exclusive).await?;
    let free_slot_zero = admit(
        &ctx,
        AdmitRequest::new("v", "worker-d")
            .scope(scope)
            .ttl(LONG_TTL),
    )
    .await?;
    ensure_eq!(
        free_slot_zero.slot(scope),
        Some(0),
        "an exclusive admission takes a free slot 0 beside held upper slots"
    );
    finish(&ctx, &free_slot_zero).await?;
    admitted_into(&ctx, counted("z", "worker-c", scope, 2), scope, 0).await?;
    conflicts_with(
        &ctx,
        &AdmitRequest::new("w", "worker-d")
            .scope(scope)
            .ttl(LONG_TTL),
        "z",
        &["y", "z"],
    )
    .await?;
    ensure_eq!(
        get(&ctx, "y").await?.slot(scope),
        Some(1),
        "the counted holder kept its slot"
    );
    Ok(())
}

/// A holder's end frees its own slot, which the next admission takes
/// (the lowest free), and leaves the other holders as they were.
pub async fn counted_scope_end_frees_only_the_holders_slot<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "mailers";
    let mut holders = Vec::new();
    for (slot, id) in ["a", "b", "c"].into_iter().enumerate() {
        let slot = u32::try_from(slot).map_err(|error| Failure(error.to_string()))?;
        holders.push(admitted_into(&ctx, counted(id, "worker-a", scope, 3), scope, slot).await?);
    }
    finish(&ctx, &holders[1]).await?;
    let others = snapshot(&ctx, &["a", "c"]).await?;
    admitted_into(&ctx, counted("d", "worker-b", scope, 3), scope, 1).await?;
    ensure_eq!(
        snapshot(&ctx, &["a", "c"]).await?,
        others,
        "taking a freed slot touches no other holder"
    );
    conflicts_with(
        &ctx,
        &counted("e", "worker-b", scope, 3),
        "a",
        &["a", "c", "d"],
    )
    .await?;
    finish(&ctx, &holders[2]).await?;
    finish(&ctx, &holders[0]).await?;
    admitted_into(&ctx, counted("e", "worker-b", scope, 3), scope, 0).await?;
    admitted_into(&ctx, counted("f", "worker-b", scope, 3), scope, 2).await?;
    ensure_eq!(
        get(&ctx, "b").await?.slot(scope),
        Some(1),
        "a finished record still names the slot it held"
    );
    Ok(())
}

/// A holder whose lease lapsed keeps its slot: a `Reject` admission
/// conflicts with it (no retry-after), a takeover keeps the slot under a
/// new fence, and an `Interrupt` admission interrupts it and takes its
/// slot with a greater fence, leaving the other slot's holder alone.
pub async fn counted_scope_lapsed_holders_slot_is_taken_over_with_a_new_fence<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "crawlers";
    let lapsing = admitted_into(
        &ctx,
        counted("a", "worker-a", scope, 2).ttl(SHORT_TTL),
        scope,
        0,
    )
    .await?;
    let staying = admitted_into(&ctx, counted("b", "worker-b", scope, 2), scope, 1).await?;
    expire(&ctx, &lapsing, Duration::ZERO).await?;
    let retry_after =
        conflicts_with(&ctx, &counted("c", "worker-c", scope, 2), "a", &["a", "b"]).await?;
    ensure_eq!(
        retry_after,
        None,
        "a lapsed holder has no lease to wait out"
    );

    let taken = take_over(
        &ctx,
        &TakeoverRequest::adopt("a", "worker-c", Some(SHORT_TTL)),
    )
    .await?;
    ensure_eq!(taken.slot(scope), Some(0), "a takeover keeps the slot");
    ensure!(
        taken.fence > staying.fence,
        "the taker's fence {} is above every earlier one",
        taken.fence
    );
    renew_confirmed(&ctx, &claim_of(&staying)?, LONG_TTL).await?;
    conflicts_with(&ctx, &counted("c", "worker-d", scope, 2), "a", &["a", "b"]).await?;

    expire(&ctx, &taken, Duration::ZERO).await?;
    let staying = get(&ctx, "b").await?;
    let (record, interrupted) = interrupting(&ctx, counted("c", "worker-d", scope, 2)).await?;
    ensure_eq!(
        record.slot(scope),
        Some(0),
        "the interrupting admission takes slot 0"
    );
    ensure_eq!(
        interrupted
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["a"],
        "only the lapsed slot's holder is interrupted"
    );
    ensure!(
        interrupted[0].fence > taken.fence && record.fence > interrupted[0].fence,
        "fences grow through the interruption and the admission"
    );
    ensure_eq!(
        get(&ctx, "b").await?,
        staying,
        "the other slot's holder is untouched"
    );
    Ok(())
}

/// An `Interrupt` admission takes a free slot before it interrupts anyone,
/// its own lapsed holders included.
pub async fn counted_scope_interrupt_prefers_a_free_slot<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "builders";
    let lapsing = admitted_into(
        &ctx,
        counted("a", "worker-a", scope, 3).ttl(SHORT_TTL),
        scope,
        0,
    )
    .await?;
    let freed = admitted_into(&ctx, counted("b", "worker-a", scope, 3), scope, 1).await?;
    admitted_into(&ctx, counted("c", "worker-b", scope, 3), scope, 2).await?;
    finish(&ctx, &freed).await?;
    expire(&ctx, &lapsing, Duration::ZERO).await?;
    let before = snapshot(&ctx, &["a", "c"]).await?;
    let (record, interrupted) = interrupting(&ctx, counted("d", "worker-a", scope, 3)).await?;
    ensure_eq!(record.slot(scope), Some(1), "the free slot is taken");
    ensure!(
        interrupted.is_empty(),
        "nobody is interrupted: {interrupted:?}"
    );
    ensure_eq!(
        snapshot(&ctx, &["a", "c"]).await?,
        before,
        "the holders stay as they were"
    );
    // Full now: the lowest interruptible holder goes (a, lapsed), not the
    // requester's own valid one in a higher slot.
    let (record, interrupted) = interrupting(&ctx, counted("e", "worker-a", scope, 3)).await?;
    ensure_eq!(
        record.slot(scope),
        Some(0),
        "the lapsed holder's slot is taken"
    );
    ensure_eq!(
        interrupted
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["a"],
        "the lowest interruptible holder is interrupted"
    );
    Ok(())
}

/// A full scope's `Interrupt` admission takes the lowest slot whose holder
/// it may interrupt (here its own, in slot 1), not the slot whose holder
/// frees first (another worker's shorter valid lease, in slot 0); a
/// `Reject` one conflicts with the holder that frees first, holders
/// without a lease last.
pub async fn counted_scope_full_interrupts_the_lowest_interruptible_slot<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "printers";
    admitted_into(
        &ctx,
        counted("a", "worker-b", scope, 2).ttl(LONG_TTL / 2),
        scope,
        0,
    )
    .await?;
    admitted_into(&ctx, counted("b", "worker-a", scope, 2), scope, 1).await?;
    conflicts_with(&ctx, &counted("c", "worker-a", scope, 2), "a", &["a", "b"]).await?;
    let (record, interrupted) = interrupting(&ctx, counted("c", "worker-a", scope, 2)).await?;
    ensure_eq!(
        record.slot(scope),
        Some(1),
        "the own holder's slot is taken"
    );
    ensure_eq!(
        interrupted
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["b"],
        "only the requester's own holder is interrupted"
    );

    // A holder without a lease frees only when someone ends it: it is
    // named last, after every holder whose lease ends.
    let other = "scanners";
    let mut no_lease = AdmitRequest::new("d", "worker-b").counted_scope(other, 2);
    no_lease.ttl = None;
    admitted_into(&ctx, no_lease, other, 0).await?;
    admitted_into(&ctx, counted("e", "worker-b", other, 2), other, 1).await?;
    let retry_after =
        conflicts_with(&ctx, &counted("f", "worker-c", other, 2), "e", &["d", "e"]).await?;
    ensure!(
        retry_after.is_some(),
        "the holder with a lease is waited for"
    );
    Ok(())
}

/// Counted and exclusive scopes of one request are taken together or not
/// at all: a held exclusive scope blocks, and no slot is taken.
pub async fn counted_scope_is_taken_with_the_other_scopes_or_not_at_all<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("x", "worker-a")
            .scope("tenant:7")
            .ttl(LONG_TTL),
    )
    .await?;
    let both = counted("y", "worker-b", "uploads", 2).scope("tenant:7");
    conflicts_with(&ctx, &both, "x", &["x"]).await?;
    admitted_into(&ctx, counted("z", "worker-b", "uploads", 2), "uploads", 0).await?;
    let record = admit(
        &ctx,
        counted("w", "worker-b", "uploads", 2).scope("tenant:8"),
    )
    .await?;
    ensure_eq!(record.slot("uploads"), Some(1), "the counted scope's slot");
    ensure_eq!(
        record.slot("tenant:8"),
        Some(0),
        "the exclusive scope is slot 0"
    );
    ensure_eq!(
        record.slots,
        BTreeMap::from([("uploads".to_owned(), 1)]),
        "only the counted scope records a slot"
    );
    Ok(())
}

/// `racers` admissions race for the free slots of a fresh counted scope
/// of `capacity`: exactly `capacity` are admitted, into distinct slots.
async fn race_for_slots<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    scope: &str,
    capacity: u32,
    racers: usize,
) -> Result<(), Failure> {
    let start = StartLine::new(racers);
    let tasks: Vec<_> = (0..racers)
        .map(|racer| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request = counted(
                &format!("{scope}-racer-{racer}"),
                &format!("worker-{racer}"),
                scope,
                capacity,
            );
            tokio::spawn(async move {
                start.wait().await;
                store.admit(&request).await
            })
        })
        .collect();
    let mut slots = Vec::new();
    for (racer, task) in tasks.into_iter().enumerate() {
        let answer = task
            .await
            .map_err(|error| Failure(format!("a racer panicked: {error}")))??;
        match answer {
            Admission::Admitted { record, .. } => slots.push(record.slot(scope)),
            Admission::Conflict { .. } => {}
            other => {
                return Err(Failure(format!(
                    "racer {racer} answered {other:?}; only Admitted or Conflict"
                )))
            }
        }
    }
    slots.sort_unstable();
    ensure_eq!(
        slots,
        (0..capacity).map(Some).collect::<Vec<_>>(),
        "{racers} racers for {capacity} slots of {scope:?}: exactly one per slot"
    );
    let mut holders = ctx.store.list_active().await?;
    holders.retain(|record| record.scopes.contains(scope));
    ensure_eq!(
        holders.len(),
        capacity as usize,
        "the store holds as many active records as the capacity"
    );
    Ok(())
}

/// N + 1 admissions racing for N free slots admit exactly N, and twelve
/// racing for three admit three, each in a slot of its own.
pub async fn race_counted_admissions_admit_exactly_the_capacity<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    race_for_slots(&ctx, "pool", 5, 6).await?;
    race_for_slots(&ctx, "narrow", 3, 12).await
}

/// Renewals, writes and takeovers are per holder: renewing or ending one
/// holder of a counted scope changes no other.
pub async fn counted_scope_holders_renew_and_end_on_their_own<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let scope = "indexers";
    let first = admitted_into(&ctx, counted("a", "worker-a", scope, 2), scope, 0).await?;
    let second = admitted_into(&ctx, counted("b", "worker-b", scope, 2), scope, 1).await?;
    renew_confirmed(&ctx, &claim_of(&first)?, LONG_TTL * 2).await?;
    ensure_eq!(
        get(&ctx, "b").await?,
        second,
        "a renewal touches only its holder"
    );
    let running = apply_transition(&ctx, &claim_of(&second)?, &StatusChange::running()).await?;
    ensure_eq!(
        running.slot(scope),
        Some(1),
        "a running holder keeps its slot"
    );
    let first = get(&ctx, "a").await?;
    finish(&ctx, &running).await?;
    ensure_eq!(
        get(&ctx, "a").await?,
        first,
        "an end touches only its holder"
    );
    renew_confirmed(&ctx, &claim_of(&first)?, LONG_TTL).await?;
    Ok(())
}

/// Scopes whose names look alike never share a slot: filling every slot
/// of one leaves the others free, an exclusive scope named like a slot's
/// gate resource included.
pub async fn counted_scope_tricky_names_never_collide<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let names = ["a", "a1", "a 1", "a#1", "a:1", "A", "ünï ✓", "a\\1"];
    for (index, name) in names.iter().enumerate() {
        for slot in 0..2 {
            admitted_into(
                &ctx,
                counted(&format!("n{index}-{slot}"), "worker-a", name, 2),
                name,
                slot,
            )
            .await?;
        }
        conflicts_with(
            &ctx,
            &counted(&format!("n{index}-full"), "worker-b", name, 2),
            &format!("n{index}-0"),
            &[],
        )
        .await?;
    }
    for name in ["a#0", "a#2", "a1#1"] {
        admit(
            &ctx,
            AdmitRequest::new(format!("exclusive-{name}"), "worker-c")
                .scope(name)
                .ttl(LONG_TTL),
        )
        .await?;
    }
    Ok(())
}

/// Capacities from 1 to the largest are accepted; 0, one more than the
/// largest, and a capacity for a scope the request does not name are
/// `InvalidInput` (field `capacities`) and store nothing.
pub async fn counted_scope_capacity_bounds_are_exact<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admitted_into(&ctx, counted("one", "worker-a", "s1", 1), "s1", 0).await?;
    admitted_into(
        &ctx,
        counted("largest", "worker-a", "s2", MAX_SCOPE_CAPACITY),
        "s2",
        0,
    )
    .await?;
    admitted_into(
        &ctx,
        counted("next", "worker-a", "s2", MAX_SCOPE_CAPACITY),
        "s2",
        1,
    )
    .await?;
    let mut unnamed = AdmitRequest::new("bad", "worker-a").scope("s3");
    unnamed.capacities.insert("s4".to_owned(), 2);
    for (request, what) in [
        (counted("bad", "worker-a", "s3", 0), "capacity 0"),
        (
            counted("bad", "worker-a", "s3", MAX_SCOPE_CAPACITY + 1),
            "one above the largest capacity",
        ),
        (unnamed, "a capacity for a scope not requested"),
    ] {
        expect_invalid(ctx.store.admit(&request).await, "capacities", what)?;
        ensure_eq!(
            ctx.store.get("bad").await?,
            None,
            "{what}: nothing is stored"
        );
    }
    Ok(())
}

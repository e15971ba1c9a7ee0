//! Conformance cases: renew_with_progress, a renewal that records the
//! holder's progress in the same fenced write
//! ([contract §4](tenure_lease_core::contract)).
//!
//! A `Renewed` answer means the lease was extended and the progress
//! recorded; every `Lost` answer (checked through `expect_lost` by every
//! renewal case) means neither happened. Progress stays until the next
//! report, whoever holds the record then.
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::limits::MAX_PROGRESS_BYTES;
use tenure_lease_core::{
    AdmitRequest, AdmitStrategy, LeaseRecord, LeaseStore, LossReason, Renewal, Status,
    StatusChange, TakeoverRequest,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_invalid, expect_lost, expire, get, same_json,
    snapshot, take_over, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Reports `progress` with `claim` for `ttl`, failing the case unless it is
/// `Renewed` and `get` then reads the progress (by value) and the answered
/// expiry; answers the record read.
async fn report<S: LeaseStore>(
    ctx: &Ctx<S>,
    claim: &tenure_lease_core::Claim,
    progress: &serde_json::Value,
    ttl: Duration,
) -> Result<LeaseRecord, Failure> {
    let outcome = ctx.store.renew_with_progress(claim, ttl, progress).await?;
    let Renewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!(
            "expected progress {progress} of {claim:?} to be recorded, got {outcome:?}"
        )));
    };
    let record = get(ctx, &claim.id).await?;
    ensure_eq!(
        record.lease_expires_at,
        Some(expires_at),
        "get reads the expiry renew_with_progress answered"
    );
    let stored = record.progress.clone().unwrap_or_default();
    ensure!(
        record.progress.is_some() && same_json(&stored, progress),
        "get reads the progress reported: {progress}, read {:?}",
        record.progress
    );
    Ok(record)
}

/// A holder's report renews its lease and records its progress, changing
/// nothing else; a plain renewal keeps the progress; the next report
/// replaces it; a terminal write, a takeover and an interrupting admission
/// keep it, and a new holder reports its own. A record never reported on
/// has none.
pub async fn progress_is_recorded_with_a_renewal<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(SHORT_TTL),
    )
    .await?;
    ensure_eq!(
        admitted.progress,
        None,
        "an admitted record has no progress"
    );
    let claim = claim_of(&admitted)?;
    let first = json!({ "done": 3, "of": 10 });
    let reported = report(&ctx, &claim, &first, SHORT_TTL).await?;
    ensure_eq!(
        LeaseRecord {
            lease_expires_at: admitted.lease_expires_at,
            updated_at: admitted.updated_at,
            ..reported.clone()
        },
        LeaseRecord {
            progress: reported.progress.clone(),
            ..admitted.clone()
        },
        "a report changes nothing but the lease and the progress"
    );
    let renewed = ctx.store.renew(&claim, SHORT_TTL).await?;
    ensure!(
        matches!(renewed, Renewal::Renewed { .. }),
        "a plain renewal: {renewed:?}"
    );
    ensure_eq!(
        get(&ctx, "op-1").await?.progress,
        reported.progress,
        "a plain renewal keeps the progress"
    );
    let last = report(&ctx, &claim, &json!(0.5), SHORT_TTL).await?;
    expire(&ctx, &last, Duration::ZERO).await?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("op-1", "worker-b", Some(LONG_TTL)),
    )
    .await?;
    ensure!(
        adopted
            .progress
            .as_ref()
            .is_some_and(|p| same_json(p, &json!(0.5))),
        "a takeover keeps the last progress: {:?}",
        adopted.progress
    );
    expect_lost(&ctx, &claim, LossReason::OwnerChanged).await?;
    let successor = claim_of(&adopted)?;
    report(&ctx, &successor, &json!("resumed at 6"), LONG_TTL).await?;
    let finished = apply_transition(&ctx, &successor, &StatusChange::succeeded()).await?;
    ensure!(
        finished
            .progress
            .as_ref()
            .is_some_and(|p| same_json(p, &json!("resumed at 6"))),
        "a finished record keeps its last progress: {:?}",
        finished.progress
    );

    // A worker admitted again (as after a restart) interrupts its own
    // holder, which keeps its progress.
    let restarted = admit(
        &ctx,
        AdmitRequest::new("op-2", "worker-c")
            .scope("thread:2")
            .ttl(LONG_TTL),
    )
    .await?;
    report(&ctx, &claim_of(&restarted)?, &json!([2, 3]), LONG_TTL).await?;
    admit(
        &ctx,
        AdmitRequest::new("op-3", "worker-c")
            .scope("thread:2")
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    let interrupted = get(&ctx, "op-2").await?;
    ensure!(
        interrupted.status == Status::Interrupted
            && interrupted
                .progress
                .as_ref()
                .is_some_and(|p| same_json(p, &json!([2, 3]))),
        "an interrupted record keeps its last progress: {interrupted:?}"
    );
    Ok(())
}

/// Progress of every JSON kind reads back as reported (numbers by value),
/// up to exactly [`MAX_PROGRESS_BYTES`]; one byte more, and `null`, are
/// refused as `InvalidInput` and change nothing, as are reports with a bad
/// claim or ttl.
pub async fn progress_bounds_are_exact<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let admitted = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("thread:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let claim = claim_of(&admitted)?;
    let largest = json!("p".repeat(MAX_PROGRESS_BYTES - 2));
    let values = [
        json!(0),
        json!(-17.25),
        json!(true),
        json!("ünïcödé \"quoted\" \\ \n line"),
        json!([1, "two", { "three": [3] }]),
        json!({ "phase": "copy", "done": 1_234_567_890_123_u64, "of": null }),
        largest,
    ];
    for value in &values {
        report(&ctx, &claim, value, LONG_TTL).await?;
    }
    let before = snapshot(&ctx, &["op-1"]).await?;
    let too_large = json!("p".repeat(MAX_PROGRESS_BYTES - 1));
    expect_invalid(
        ctx.store
            .renew_with_progress(&claim, LONG_TTL, &too_large)
            .await,
        "progress",
        "progress one byte over the limit",
    )?;
    expect_invalid(
        ctx.store
            .renew_with_progress(&claim, LONG_TTL, &serde_json::Value::Null)
            .await,
        "progress",
        "null progress",
    )?;
    let stale_fence = tenure_lease_core::Claim {
        fence: 0,
        ..claim.clone()
    };
    expect_invalid(
        ctx.store
            .renew_with_progress(&stale_fence, LONG_TTL, &json!(1))
            .await,
        "fence",
        "a claim with fence 0",
    )?;
    expect_invalid(
        ctx.store
            .renew_with_progress(&claim, Duration::ZERO, &json!(1))
            .await,
        "ttl",
        "a zero ttl",
    )?;
    ensure_eq!(
        snapshot(&ctx, &["op-1"]).await?,
        before,
        "refused reports change nothing"
    );
    Ok(())
}

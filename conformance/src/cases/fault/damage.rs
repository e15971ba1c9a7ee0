//! Damage cases: records and jobs the store cannot decode
//! ([contract §6, §8, §9, §10](tenure_lease_core::contract)), made by the
//! factory's [`Damager`](crate::damage::Damager) one field at a time.
//!
//! For each damage the store can hold, on a fresh victim next to a healthy
//! bystander: point reads answer `Corrupt` (never a wrong value, never a
//! panic); `list_expired` leaves the victim out and reports it skipped;
//! `list_by_scope` and `list_active`, which have nowhere to report a skip,
//! answer `Corrupt`; `claim` and `reap` pass the job over; writes on the
//! victim answer `Corrupt` (and then wrote nothing over it) or a typed
//! outcome; and the bystander reads and works as before. Reads and scans
//! come first, writes last, since a write that answers an outcome may have
//! repaired the field it rewrote. On a factory without a damager the cases
//! are skipped.

use std::time::Duration;

use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, NewJob};
use tenure_lease_core::{AdmitRequest, ErrorKind, ExpiredQuery, LeaseStore, TakeoverRequest};

use super::expect_kind;
use crate::cases::util::{admit, claim_of, get, LONG_TTL, SHORT_TTL};
use crate::damage::{Damage, DamageOutcome, Target, TimeField};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Fails the case unless a write on a damaged victim answered `Corrupt` or
/// an outcome; answers whether it was `Corrupt` (so it wrote nothing).
fn corrupt_or_outcome<T: std::fmt::Debug>(
    answer: tenure_lease_core::Result<T>,
    what: &str,
) -> Result<bool, Failure> {
    match answer {
        Ok(_) => Ok(false),
        Err(error) if error.kind() == ErrorKind::Corrupt => Ok(true),
        Err(error) => Err(Failure(format!(
            "{what}: expected Corrupt or an outcome, got {error}"
        ))),
    }
}

/// Fails the case unless a listing answered `Corrupt`, or, when the damage
/// may keep the store from finding the record at all (`unseen`), a list
/// without it.
fn corrupt_or_left_out(
    answer: tenure_lease_core::Result<Vec<tenure_lease_core::LeaseRecord>>,
    id: &str,
    unseen: bool,
    what: &str,
) -> CaseResult {
    match answer {
        Ok(listed) if unseen => {
            ensure!(
                listed.iter().all(|record| record.id != id),
                "{what}: a damaged record is never listed: {listed:?}"
            );
            Ok(())
        }
        answer => expect_kind(answer, ErrorKind::Corrupt, what),
    }
}

/// Skips the case when the factory cannot damage, or could hold none of
/// the damages.
fn ensure_damaged<S>(ctx: &Ctx<S>, applied: usize) -> CaseResult {
    if applied == 0 {
        return ctx.skip("the store can hold none of the kit's damages");
    }
    Ok(())
}

/// Each field of a lease record damaged in turn: reads answer `Corrupt`,
/// the orphan scan skips and reports it, writes on it answer `Corrupt` or
/// an outcome, and a healthy record beside it is untouched.
pub async fn fault_damaged_lease_is_corrupt_skipped_and_contained<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    if !ctx.can_damage() {
        return ctx.skip("the factory cannot damage what its stores keep");
    }
    let metadata = serde_json::json!({ "k": 1 });
    // No ttl: always due for `list_expired`.
    let bystander = admit(
        &ctx,
        AdmitRequest::new("damage-bystander", "worker-a")
            .scope("damage-bystander-scope")
            .metadata(metadata.clone()),
    )
    .await?;
    let mut applied = 0;
    for (index, damage) in Damage::to_leases().into_iter().enumerate() {
        let id = format!("damage-victim-{index}");
        let scope = format!("damage-scope-{index}");
        let victim = admit(
            &ctx,
            AdmitRequest::new(&id, "worker-a")
                .scope(&scope)
                .metadata(metadata.clone()),
        )
        .await?;
        if ctx.damage(Target::Lease(id.clone()), damage).await? == DamageOutcome::CannotHold {
            continue;
        }
        applied += 1;
        let what = |call: &str| format!("{call} of {id} with {damage}");

        expect_kind(ctx.store.get(&id).await, ErrorKind::Corrupt, &what("get"))?;
        let scan = ctx
            .store
            .list_expired(&ExpiredQuery::new(Duration::ZERO).limit(1000))
            .await
            .map_err(|error| Failure(format!("{}: {error}", what("list_expired"))))?;
        ensure!(
            scan.records.contains(&bystander) && scan.records.iter().all(|record| record.id != id),
            "{}: the scan serves the healthy record, not the damaged one: {scan:?}",
            what("list_expired")
        );
        // A scan reports what it read: a damaged status or expiry may keep
        // the record from being a candidate at all (an expiry in the year
        // 270000 is not due), so only damage to other fields must show.
        let candidate = !matches!(
            damage,
            Damage::UnknownStatus | Damage::Timestamp(TimeField::LeaseExpiresAt, _)
        );
        ensure!(
            !candidate || scan.skipped.iter().any(|skipped| skipped.id == id),
            "{}: the scan reports the damaged record skipped: {:?}",
            what("list_expired"),
            scan.skipped
        );
        // Damaged scopes may no longer name the scope they were, and an
        // unknown status is not active: then the record is not found at all
        // by the listing that filters on it, which is no wrong value.
        corrupt_or_left_out(
            ctx.store.list_by_scope(&scope).await,
            &id,
            damage == Damage::MalformedScopes,
            &what("list_by_scope"),
        )?;
        corrupt_or_left_out(
            ctx.store.list_active().await,
            &id,
            damage == Damage::UnknownStatus,
            &what("list_active"),
        )?;
        ensure_eq!(
            ctx.store.list_by_scope("damage-bystander-scope").await?,
            vec![bystander.clone()],
            "{}: another scope lists as before",
            what("list_by_scope")
        );
        expect_kind(
            ctx.store
                .admit(&AdmitRequest::new(&id, "worker-b").scope("damage-elsewhere"))
                .await,
            ErrorKind::AlreadyExists,
            &what("admit of the same id"),
        )?;

        let claim = claim_of(&victim)?;
        let untouched = [
            corrupt_or_outcome(ctx.store.renew(&claim, LONG_TTL).await, &what("renew"))?,
            corrupt_or_outcome(
                ctx.store
                    .transition(&claim, &tenure_lease_core::StatusChange::succeeded())
                    .await,
                &what("transition"),
            )?,
            corrupt_or_outcome(
                ctx.store
                    .claim_for_takeover(&TakeoverRequest::adopt(&id, "worker-b", Some(LONG_TTL)))
                    .await,
                &what("claim_for_takeover"),
            )?,
        ];
        if untouched.iter().all(|corrupt| *corrupt) {
            expect_kind(
                ctx.store.get(&id).await,
                ErrorKind::Corrupt,
                &what("get after writes that answered Corrupt"),
            )?;
        }
        ensure_eq!(
            get(&ctx, &bystander.id).await?,
            bystander,
            "{}: the healthy record is untouched",
            what("writes")
        );
    }
    ensure_damaged(&ctx, applied)?;
    ensure!(
        matches!(
            ctx.store.renew(&claim_of(&bystander)?, LONG_TTL).await?,
            tenure_lease_core::Renewal::Renewed { .. }
        ),
        "the healthy record still renews"
    );
    Ok(())
}

/// One damaged job and its healthy bystander, claimed together in a queue
/// of their own.
struct Victim {
    damage: Damage,
    queue: String,
    id: String,
    claim: tenure_lease_core::queue::JobClaim,
    bystander: tenure_lease_core::queue::Job,
}

/// Each field of a claimed job damaged in turn: `get_job` answers
/// `Corrupt`, `reap` and `claim` pass it over while serving its healthy
/// neighbour, dead-letter listings leave it out or answer `Corrupt`, and
/// settle writes on it answer `Corrupt` or an outcome.
pub async fn fault_damaged_job_is_corrupt_passed_over_and_contained<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    if !ctx.can_damage() {
        return ctx.skip("the factory cannot damage what its stores keep");
    }
    let mut victims = Vec::new();
    for (index, damage) in Damage::to_jobs().into_iter().enumerate() {
        let queue = format!("damage-queue-{index}");
        let id = format!("damage-job-{index}");
        let bystander_id = format!("damage-bystander-{index}");
        for (job, priority) in [(&id, 1), (&bystander_id, 0)] {
            ctx.store
                .enqueue(
                    &NewJob::new(&queue, serde_json::json!({ "job": job }))
                        .id(job)
                        .priority(priority),
                )
                .await?;
        }
        let claimed = ctx
            .store
            .claim(&ClaimRequest::new(&queue, "worker-a", SHORT_TTL).limit(2))
            .await?;
        let [victim, bystander] = claimed.as_slice() else {
            return Err(Failure(format!(
                "expected two jobs claimed, got {claimed:?}"
            )));
        };
        if ctx.damage(Target::Job(id.clone()), damage).await? == DamageOutcome::CannotHold {
            continue;
        }
        victims.push(Victim {
            damage,
            queue,
            id,
            claim: victim.claim.clone(),
            bystander: bystander.job.clone(),
        });
    }
    ensure_damaged(&ctx, victims.len())?;
    let what =
        |victim: &Victim, call: &str| format!("{call} of {} with {}", victim.id, victim.damage);

    for victim in &victims {
        expect_kind(
            ctx.store.get_job(&victim.id).await,
            ErrorKind::Corrupt,
            &what(victim, "get_job"),
        )?;
        ensure_eq!(
            ctx.store.get_job(&victim.bystander.id).await?.as_ref(),
            Some(&victim.bystander),
            "{}: the healthy job reads as claimed",
            what(victim, "get_job")
        );
    }
    let latest = victims
        .iter()
        .filter_map(|victim| victim.bystander.lease_expires_at)
        .max()
        .ok_or_else(|| Failure("the claimed jobs have leases".to_owned()))?;
    ctx.advance_past(latest).await?;
    let report = ctx.store.reap(Duration::ZERO).await?;
    let reaped: Vec<&str> = report
        .requeued
        .iter()
        .chain(&report.dead_lettered)
        .map(|job| job.id.as_str())
        .collect();
    for victim in &victims {
        ensure!(
            reaped.contains(&victim.bystander.id.as_str()) && !reaped.contains(&victim.id.as_str()),
            "{}: the reaper requeued the healthy job and passed the damaged one over: {reaped:?}",
            what(victim, "reap")
        );
        let claimed = ctx
            .store
            .claim(&ClaimRequest::new(&victim.queue, "worker-b", LONG_TTL).limit(10))
            .await
            .map_err(|error| Failure(format!("{}: {error}", what(victim, "claim"))))?;
        let claimed: Vec<&str> = claimed.iter().map(|each| each.job.id.as_str()).collect();
        ensure_eq!(
            claimed,
            vec![victim.bystander.id.as_str()],
            "{}: a claim serves the healthy job only",
            what(victim, "claim")
        );
        match ctx.store.list_dead_letters(&victim.queue, 10).await {
            Ok(dead) => ensure!(
                dead.iter().all(|job| job.id != victim.id),
                "{}: a damaged job is never listed: {dead:?}",
                what(victim, "list_dead_letters")
            ),
            Err(error) => ensure_eq!(
                error.kind(),
                ErrorKind::Corrupt,
                "{}: {error}",
                what(victim, "list_dead_letters")
            ),
        }
        expect_kind(
            ctx.store.get_job(&victim.id).await,
            ErrorKind::Corrupt,
            &what(victim, "get_job after the scans"),
        )?;
    }

    for victim in &victims {
        let claim = &victim.claim;
        let untouched = [
            corrupt_or_outcome(
                ctx.store.renew_job(claim, LONG_TTL).await,
                &what(victim, "renew_job"),
            )?,
            corrupt_or_outcome(ctx.store.complete(claim).await, &what(victim, "complete"))?,
            corrupt_or_outcome(
                ctx.store.fail(claim, "boom", FailAction::DeadLetter).await,
                &what(victim, "fail"),
            )?,
        ];
        if untouched.iter().all(|corrupt| *corrupt) {
            expect_kind(
                ctx.store.get_job(&victim.id).await,
                ErrorKind::Corrupt,
                &what(victim, "get_job after writes that answered Corrupt"),
            )?;
        }
        let bystander = ctx.store.get_job(&victim.bystander.id).await?;
        ensure!(
            bystander
                .as_ref()
                .is_some_and(|job| job.owner.as_deref() == Some("worker-b")),
            "{}: the healthy job is still the second worker's: {bystander:?}",
            what(victim, "writes")
        );
    }
    Ok(())
}

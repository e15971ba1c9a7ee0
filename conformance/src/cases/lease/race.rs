//! Races between *unlike* operations on one lease
//! ([contract §5 to §7](tenure_lease_core::contract), §13 invariants 1 and 2).
//!
//! The race cases beside each operation pit like against like (admission
//! against admission, takeover against takeover). These pit a renewal, a
//! status write or an admission against a takeover or an interruption of the
//! same lapsed lease, released together, many times over: a store that
//! checks and then writes in two steps lets both sides win once the gap
//! between them is hit, which a few milliseconds of gap makes certain over
//! [`UNLIKE_RACE_ROUNDS`] rounds. Exactly one side may win, and the loser
//! must answer the winner's truth, which `get` then reads. The last cases
//! race many claimers for one record: the fence stored at the end must be
//! the greatest handed out, and one id on overlapping scopes must answer
//! `AlreadyExists`, never `Conflict`.

use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, LeaseRecord, LeaseStore, LossReason,
    NotTakenReason, Renewal, Status, StatusChange, Takeover, TakeoverRequest, Transition,
    TransitionRejection,
};

use crate::cases::util::{
    admit, claim_of, expire, get, race_two, StartLine, LONG_TTL, SHORT_TTL, UNLIKE_RACE_ROUNDS,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Admits `count` records named `prefix-N`, each on its own scope, with a
/// short lease, and lets every lease lapse.
async fn lapsed_records<S: LeaseStore>(
    ctx: &Ctx<S>,
    prefix: &str,
    count: usize,
) -> Result<Vec<LeaseRecord>, Failure> {
    let mut records = Vec::with_capacity(count);
    for round in 0..count {
        let id = format!("{prefix}-{round}");
        let scope = format!("{id}-scope");
        records.push(
            admit(
                ctx,
                AdmitRequest::new(id, "owner-a").scope(scope).ttl(SHORT_TTL),
            )
            .await?,
        );
    }
    if let Some(last) = records.last() {
        expire(ctx, last, Duration::ZERO).await?;
    }
    Ok(records)
}

fn takeover_by<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    request: TakeoverRequest,
) -> impl std::future::Future<Output = tenure_lease_core::Result<Takeover>> + Send + 'static {
    let store = Arc::clone(&ctx.store);
    async move { store.claim_for_takeover(&request).await }
}

/// A renewal and a takeover of one lapsed lease, released together: either
/// the renewal wins (`Renewed`, and the takeover finds the lease valid
/// again) or the takeover does (`Taken`, and the renewal answers
/// `OwnerChanged`); never both, never neither.
pub async fn race_renew_vs_takeover_exactly_one_wins<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let records = lapsed_records(&ctx, "renew-vs-takeover", UNLIKE_RACE_ROUNDS).await?;
    for (round, record) in records.into_iter().enumerate() {
        let claim = claim_of(&record)?;
        let store = Arc::clone(&ctx.store);
        let renewal = async move { store.renew(&claim, LONG_TTL).await };
        let takeover = TakeoverRequest::fail(record.id.clone(), "claimer-b", "orphaned");
        let (renewal, takeover) = race_two(round, renewal, takeover_by(&ctx, takeover)).await?;
        let (renewal, takeover) = (renewal?, takeover?);
        let stored = get(&ctx, &record.id).await?;
        match (&renewal, &takeover) {
            (
                Renewal::Renewed { expires_at },
                Takeover::NotTaken(NotTakenReason::LeaseValid { .. }),
            ) => {
                ensure_eq!(
                    (&stored.owner, stored.fence, stored.lease_expires_at),
                    (&record.owner, record.fence, Some(*expires_at)),
                    "the renewal won {}: it still holds the lease it renewed",
                    record.id
                );
            }
            (Renewal::Lost(LossReason::OwnerChanged), Takeover::Taken(taken)) => {
                ensure_eq!(
                    &stored,
                    taken,
                    "the takeover won {}: get reads it",
                    record.id
                );
            }
            _ => {
                return Err(Failure(format!(
                    "exactly one of a renewal and a takeover of {} wins, and the other answers \
                     its truth; got renew {renewal:?} and takeover {takeover:?}",
                    record.id
                )))
            }
        }
    }
    Ok(())
}

/// A terminal status write and a takeover of one lapsed lease, released
/// together (alternately `Succeeded` and `Failed`): either the write wins
/// (`Applied`, and the takeover finds the record `Terminal`) or the
/// takeover does (`Taken`, and the write is `Stale`).
pub async fn race_terminal_write_vs_takeover_exactly_one_wins<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let records = lapsed_records(&ctx, "finish-vs-takeover", UNLIKE_RACE_ROUNDS).await?;
    for (round, record) in records.into_iter().enumerate() {
        let claim = claim_of(&record)?;
        let change = if round % 2 == 0 {
            StatusChange::succeeded()
        } else {
            StatusChange::failed("gave up")
        };
        let status = change.status;
        let store = Arc::clone(&ctx.store);
        let write = async move { store.transition(&claim, &change).await };
        let takeover = TakeoverRequest::adopt(record.id.clone(), "claimer-b", Some(LONG_TTL));
        let (write, takeover) = race_two(round, write, takeover_by(&ctx, takeover)).await?;
        let (write, takeover) = (write?, takeover?);
        let stored = get(&ctx, &record.id).await?;
        match (&write, &takeover) {
            (Transition::Applied(written), Takeover::NotTaken(NotTakenReason::Terminal(seen))) => {
                ensure_eq!(*seen, status, "the takeover saw the status written");
                ensure_eq!(
                    &stored,
                    written,
                    "the write won {}: get reads it",
                    record.id
                );
            }
            (Transition::Rejected(TransitionRejection::Stale), Takeover::Taken(taken)) => {
                ensure_eq!(
                    &stored,
                    taken,
                    "the takeover won {}: get reads it",
                    record.id
                );
            }
            _ => {
                return Err(Failure(format!(
                    "exactly one of a {status:?} write and a takeover of {} wins, and the other \
                     answers its truth; got write {write:?} and takeover {takeover:?}",
                    record.id
                )))
            }
        }
    }
    Ok(())
}

/// A renewal of a lapsed holder and an `Interrupt` admission on its scope,
/// released together: either the renewal wins (`Renewed`, and the admission
/// meets a valid holder: `Conflict`, nothing admitted) or the admission
/// does (`Admitted`, the holder interrupted once, and the renewal answers
/// `Interrupted`).
pub async fn race_renew_vs_interrupt_admission_exactly_one_wins<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let holders = lapsed_records(&ctx, "renew-vs-interrupt", UNLIKE_RACE_ROUNDS).await?;
    for (round, holder) in holders.into_iter().enumerate() {
        let claim = claim_of(&holder)?;
        let newcomer = format!("newcomer-{round}");
        let admission = AdmitRequest::new(newcomer.as_str(), "owner-b")
            .scopes(holder.scopes.iter().cloned())
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt);
        let store = Arc::clone(&ctx.store);
        let renewal = async move { store.renew(&claim, LONG_TTL).await };
        let store = Arc::clone(&ctx.store);
        let admission = async move { store.admit(&admission).await };
        let (renewal, admission) = race_two(round, renewal, admission).await?;
        let (renewal, admission) = (renewal?, admission?);
        let stored = get(&ctx, &holder.id).await?;
        match (&renewal, &admission) {
            (
                Renewal::Renewed { .. },
                Admission::Conflict {
                    holder: blocker, ..
                },
            ) => {
                ensure_eq!(&blocker.id, &holder.id, "the renewed holder blocks");
                ensure_eq!(
                    (&stored.owner, stored.fence, stored.status),
                    (&holder.owner, holder.fence, holder.status),
                    "the renewal won {}: the holder is untouched",
                    holder.id
                );
                ensure!(
                    ctx.store.get(&newcomer).await?.is_none(),
                    "a refused admission stores nothing"
                );
            }
            (Renewal::Lost(LossReason::Interrupted), Admission::Admitted { interrupted, .. }) => {
                let ids: Vec<&str> = interrupted
                    .iter()
                    .map(|record| record.id.as_str())
                    .collect();
                ensure_eq!(
                    ids,
                    vec![holder.id.as_str()],
                    "the holder is interrupted once"
                );
                ensure_eq!(
                    stored.status,
                    Status::Interrupted,
                    "get reads the interruption"
                );
            }
            _ => {
                return Err(Failure(format!(
                    "exactly one of a renewal of {} and an Interrupt admission on its scope wins, \
                     and the other answers its truth; got renew {renewal:?} and admission \
                     {admission:?}",
                    holder.id
                )))
            }
        }
    }
    Ok(())
}

/// How many claimers race for one record in each round of
/// [`race_adopters_leave_the_greatest_fence_stored`].
const ADOPTERS: usize = 4;

/// Claimers adopting one record (left lease-less, so every adoption is
/// taken), released together, round after round: each `Taken` answer
/// carries a fence greater than any handed out in an earlier round, and
/// after each round the fence stored is the greatest that round handed out,
/// with its adopter as the owner. A store that draws the fence before it
/// locks the record stores a smaller one last whenever the adopter that drew
/// first writes last, and a fence gate downstream then refuses the rightful
/// owner. Played on a record that never had a lease and on one whose lease
/// lapsed.
pub async fn race_adopters_leave_the_greatest_fence_stored<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let never_leased = admit(&ctx, AdmitRequest::new("adopted-leaseless", "owner-a")).await?;
    let lapsed = admit(
        &ctx,
        AdmitRequest::new("adopted-lapsed", "owner-a").ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &lapsed, Duration::ZERO).await?;
    for record in [never_leased, lapsed] {
        let mut previous = record.fence;
        for round in 0..UNLIKE_RACE_ROUNDS {
            let start = StartLine::new(ADOPTERS);
            let adopters: Vec<_> = (0..ADOPTERS)
                .map(|adopter| {
                    let store = Arc::clone(&ctx.store);
                    let start = Arc::clone(&start);
                    let request = TakeoverRequest::adopt(
                        record.id.clone(),
                        format!("adopter-{adopter}"),
                        None,
                    );
                    tokio::spawn(async move {
                        start.wait().await;
                        let answer = store.claim_for_takeover(&request).await;
                        (request.claimer, answer)
                    })
                })
                .collect();
            let mut handed = Vec::with_capacity(ADOPTERS);
            for adopter in adopters {
                let (claimer, answer) = adopter
                    .await
                    .map_err(|error| Failure(format!("an adopter panicked: {error}")))?;
                match answer? {
                    Takeover::Taken(taken) => handed.push((taken.fence, claimer)),
                    other => {
                        return Err(Failure(format!(
                            "a lease-less record is always taken, got {other:?}"
                        )))
                    }
                }
            }
            handed.sort();
            ensure!(
                handed.windows(2).all(|pair| pair[0].0 < pair[1].0)
                    && handed.first().is_some_and(|(fence, _)| *fence > previous),
                "round {round}'s adoptions of {} were handed fences that repeat or do not \
                 exceed {previous}, the greatest of the round before: {handed:?}",
                record.id
            );
            let (fence, claimer) = handed
                .pop()
                .ok_or_else(|| Failure("no adoption was answered".to_owned()))?;
            let stored = get(&ctx, &record.id).await?;
            ensure_eq!(
                (stored.fence, stored.owner.as_deref()),
                (fence, Some(claimer.as_str())),
                "after round {round} the fence stored on {} is the greatest handed out, with \
                 its adopter",
                record.id
            );
            previous = fence;
        }
    }
    Ok(())
}

/// How many admissions of one id race in
/// [`race_admissions_one_id_overlapping_scopes_answer_already_exists`].
const SAME_ID_RACERS: usize = 6;

/// Admissions of one id whose scopes overlap (each names a shared scope and
/// one of its own), released together: one is admitted and every other
/// answers `AlreadyExists`, never `Conflict`; the id is judged before the
/// scopes, whoever wins the scope.
pub async fn race_admissions_one_id_overlapping_scopes_answer_already_exists<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    for round in 0..UNLIKE_RACE_ROUNDS / 2 {
        let id = format!("same-id-{round}");
        let start = StartLine::new(SAME_ID_RACERS);
        let mut racers = Vec::with_capacity(SAME_ID_RACERS);
        for racer in 0..SAME_ID_RACERS {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request = AdmitRequest::new(id.as_str(), format!("owner-{racer}"))
                .scope(format!("shared-{round}"))
                .scope(format!("own-{round}-{racer}"))
                .ttl(LONG_TTL);
            racers.push(tokio::spawn(async move {
                start.wait().await;
                store.admit(&request).await
            }));
        }
        let mut admitted = 0;
        for racer in racers {
            match racer
                .await
                .map_err(|error| Failure(format!("an admission panicked: {error}")))?
            {
                Ok(Admission::Admitted { .. }) => admitted += 1,
                Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
                other => {
                    return Err(Failure(format!(
                        "racing admissions of {id:?} on overlapping scopes answer Admitted once \
                         and AlreadyExists otherwise, got {other:?}"
                    )))
                }
            }
        }
        ensure_eq!(admitted, 1, "exactly one admission of {id:?} wins");
    }
    Ok(())
}

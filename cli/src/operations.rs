//! The repairs an operator makes, shared by the commands and by `tenure
//! serve`'s actions, so that a button in the web view and a command in a
//! terminal make the same library call and refuse for the same reasons,
//! in the same words.
//!
//! Each answers what the store did, or [`Failure::Refused`] saying what
//! was refused and that nothing changed; the caller prints or renders it.

use std::collections::HashSet;
use std::time::Duration;

use tenure::queue::{Job, JobState, OperatorRetry};
use tenure::{
    Claim, LeaseRecord, NotTakenReason, Status, StatusChange, Store, Takeover, TakeoverAction,
    TakeoverRequest, Timestamp, Transition, TransitionRejection,
};

use crate::Failure;

/// Takes over an orphan whose owner's lease has ended (`request` says
/// whether to fail or adopt it): the record under its new fence.
pub(crate) async fn take_over(
    store: &dyn Store,
    request: &TakeoverRequest,
) -> Result<LeaseRecord, Failure> {
    match store.claim_for_takeover(request).await? {
        Takeover::Taken(record) => Ok(record),
        Takeover::NotTaken(reason) => Err(Failure::Refused(format!(
            "{:?} was not taken over, nothing changed: {}",
            request.id,
            not_taken(reason)
        ))),
        other => Err(unknown_answer(&request.id, other.label())),
    }
}

/// Fails a run whose owner's lease has ended, stop reason `cancelled`,
/// under a new fence; a live holder is refused.
pub(crate) async fn cancel(
    store: &dyn Store,
    id: &str,
    claimer: &str,
    reason: &str,
    grace: Duration,
) -> Result<LeaseRecord, Failure> {
    let request = TakeoverRequest {
        id: id.to_owned(),
        claimer: claimer.to_owned(),
        grace,
        action: TakeoverAction::Fail {
            error: reason.to_owned(),
            stop_reason: Some(tenure::keeper::CANCELLED.to_owned()),
        },
    };
    match store.claim_for_takeover(&request).await? {
        Takeover::Taken(record) => Ok(record),
        Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }) => {
            Err(Failure::Refused(format!(
                "{id:?} was not cancelled, nothing changed: its owner's lease is still valid for \
                 {}; a live holder cannot be cancelled from outside its worker (stop it where \
                 it runs, e.g. Keeper::cancel, or release it with its claim), or cancel again \
                 once its lease has ended",
                whole_seconds(retry_after)
            )))
        }
        Takeover::NotTaken(reason) => Err(Failure::Refused(format!(
            "{id:?} was not cancelled, nothing changed: {}",
            not_taken(reason)
        ))),
        other => Err(unknown_answer(id, other.label())),
    }
}

/// Gives a lease up under `claim`: written `interrupted` (`failed` while
/// still pending, contract §5), its scopes free at once.
pub(crate) async fn release(
    store: &dyn Store,
    claim: &Claim,
    reason: &str,
) -> Result<LeaseRecord, Failure> {
    if claim.fence == 0 {
        return Err(Failure::Usage(
            "fence 0 is no claim's fence (fences start at 1); give the fence the record shows"
                .to_owned(),
        ));
    }
    let mut answer = store
        .transition(claim, &StatusChange::interrupted(reason))
        .await?;
    // A pending record cannot be interrupted (contract §5): it is failed,
    // as the keeper cancels a pending run. Still fenced by the same claim.
    if let Transition::Rejected(TransitionRejection::NotAllowed {
        from: Status::Pending,
        ..
    }) = answer
    {
        let change = StatusChange::failed(reason).stop_reason(reason);
        answer = store.transition(claim, &change).await?;
    }
    let refused = |why: String| {
        Err(Failure::Refused(format!(
            "{:?} was not released, nothing changed: {why}",
            claim.id
        )))
    };
    match answer {
        Transition::Applied(record) => Ok(record),
        Transition::Rejected(TransitionRejection::Missing) => {
            refused("there is no lease record with that id".to_owned())
        }
        Transition::Rejected(TransitionRejection::Stale) => refused(format!(
            "the claim (owner {:?}, fence {}) no longer holds it: it was taken over or the \
             fence is wrong (`tenure show {}` prints the current owner and fence)",
            claim.owner, claim.fence, claim.id
        )),
        Transition::Rejected(TransitionRejection::Terminal(status)) => {
            refused(format!("it already finished ({})", status.as_str()))
        }
        Transition::Rejected(TransitionRejection::NotAllowed { from, .. }) => refused(format!(
            "it is {}: nobody holds it, its scopes are already free",
            from.as_str()
        )),
        other => refused(format!(
            "the store answered {other:?}, which this version of tenure-cli does not know"
        )),
    }
}

/// Sends a dead letter back to its queue, attempts reset.
pub(crate) async fn retry(store: &dyn Store, id: &str) -> Result<Job, Failure> {
    match store.retry_dead_letter(id).await? {
        OperatorRetry::Requeued(job) => Ok(job),
        OperatorRetry::NotDeadLettered(state) => Err(Failure::Refused(format!(
            "job {id:?} is {}, not dead-lettered; nothing changed",
            state.as_str()
        ))),
        OperatorRetry::Missing => Err(Failure::Refused(format!(
            "no job has the id {id:?}; nothing changed"
        ))),
        other => Err(Failure::Refused(format!(
            "job {id:?}: the store answered {other:?}, which this version of tenure-cli \
             does not know"
        ))),
    }
}

/// What [`retry_all`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetriedAll {
    /// Dead letters sent back to the queue.
    pub(crate) requeued: u64,
    /// Dead letters no longer dead-lettered when retried (retried, purged
    /// or taken back by someone else meanwhile), left as they were.
    pub(crate) skipped: u64,
}

/// Every dead letter of `queue`, read `page_size` at a time, each retried
/// at most once (one dead-lettered again meanwhile is left for the next
/// run). On a store error, the counts so far come with it.
pub(crate) async fn retry_all(
    store: &dyn Store,
    queue: &str,
    page_size: usize,
) -> Result<RetriedAll, (RetriedAll, tenure::Error)> {
    let mut seen = HashSet::new();
    let mut done = RetriedAll::default();
    loop {
        let page = match store.list_dead_letters(queue, page_size).await {
            Ok(page) => page,
            Err(error) => return Err((done, error)),
        };
        let fresh: Vec<Job> = page
            .into_iter()
            .filter(|job| seen.insert(job.id.clone()))
            .collect();
        if fresh.is_empty() {
            return Ok(done);
        }
        for job in fresh {
            match store.retry_dead_letter(&job.id).await {
                Ok(OperatorRetry::Requeued(_)) => done.requeued += 1,
                Ok(_) => done.skipped += 1,
                Err(error) => return Err((done, error)),
            }
        }
    }
}

/// Deletes finished and interrupted lease records and completed and
/// dead-lettered jobs at least `older_than` old: how many of each.
pub(crate) async fn purge(store: &dyn Store, older_than: Duration) -> Result<(u64, u64), Failure> {
    let leases = store.purge(older_than).await?;
    let jobs = store.purge_jobs(older_than).await?;
    Ok((leases, jobs))
}

/// The last update a record or job may have to be purged with retention
/// `older_than`, by the store's clock (`None`: before the beginning of
/// time); refuses the retentions `purge` refuses, by the stores' own
/// checks.
pub(crate) async fn purge_cutoff(
    store: &dyn Store,
    older_than: Duration,
) -> Result<Option<Timestamp>, Failure> {
    tenure_lease_core::backend::validate::retention(older_than)?;
    tenure_lease_core::backend::validate::job_retention(older_than)?;
    let now = store.now().await?;
    Ok(chrono::TimeDelta::from_std(older_than)
        .ok()
        .and_then(|age| now.checked_sub_signed(age)))
}

/// Whether something last updated at `updated_at` is old enough for the
/// purge `cutoff` names (the stores' rule: at or before it).
pub(crate) fn old_enough(cutoff: Option<Timestamp>, updated_at: Timestamp) -> bool {
    cutoff.is_some_and(|cutoff| updated_at <= cutoff)
}

/// A queue's jobs a purge would delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PurgeableJobs {
    pub(crate) queue: String,
    pub(crate) count: usize,
    /// The queue has more finished jobs than one listing returns: the
    /// count is a lower bound.
    pub(crate) at_least: bool,
}

/// The completed and dead-lettered jobs a purge with `cutoff` would
/// delete, per queue: of each of `queues`, or of every queue holding a
/// finished job when `queues` is empty.
pub(crate) async fn count_purgeable_jobs(
    store: &dyn Store,
    queues: &[String],
    cutoff: Option<Timestamp>,
) -> Result<Vec<PurgeableJobs>, Failure> {
    let named = if queues.is_empty() {
        store
            .count_jobs()
            .await?
            .into_iter()
            .filter(|counts| counts.completed + counts.dead_lettered > 0)
            .map(|counts| counts.queue)
            .collect()
    } else {
        queues.to_vec()
    };
    let mut counted = Vec::with_capacity(named.len());
    for queue in named {
        let (mut count, mut at_least) = (0, false);
        for state in [JobState::Completed, JobState::DeadLettered] {
            let listed = store
                .list_jobs(&queue, Some(state), tenure::limits::MAX_LIST_LIMIT)
                .await?;
            at_least |= listed.len() >= tenure::limits::MAX_LIST_LIMIT;
            count += listed
                .iter()
                .filter(|job| old_enough(cutoff, job.updated_at))
                .count();
        }
        counted.push(PurgeableJobs {
            queue,
            count,
            at_least,
        });
    }
    Ok(counted)
}

/// The active records, soonest lease end first (records without a lease
/// last), and the store's time: what `watch` shows.
pub(crate) async fn active_by_expiry(
    store: &dyn Store,
) -> Result<(Vec<LeaseRecord>, Timestamp), tenure::Error> {
    let mut records = store.list_active().await?;
    let now = store.now().await?;
    records.sort_by(|a, b| match (a.lease_expires_at, b.lease_expires_at) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.id.cmp(&b.id),
    });
    Ok((records, now))
}

/// Why a takeover was refused, for a person.
pub(crate) fn not_taken(reason: NotTakenReason) -> String {
    match reason {
        NotTakenReason::LeaseValid { retry_after } => format!(
            "its owner's lease is still valid for {} (see --grace)",
            whole_seconds(retry_after)
        ),
        NotTakenReason::Terminal(status) => format!("it already finished ({})", status.as_str()),
        NotTakenReason::Interrupted => "it is interrupted: nobody owns it".to_owned(),
        NotTakenReason::Missing => "there is no lease record with that id".to_owned(),
        other => format!("{other:?}"),
    }
}

/// A wait in whole seconds, at least one: `4s`, `1m 5s`.
fn whole_seconds(wait: Duration) -> String {
    humantime::format_duration(Duration::from_secs(wait.as_secs().max(1))).to_string()
}

fn unknown_answer(id: &str, label: &str) -> Failure {
    Failure::Refused(format!(
        "{id:?}: the store answered {label}, which this version of tenure-cli does not know"
    ))
}

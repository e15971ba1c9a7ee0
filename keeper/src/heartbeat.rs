//! The heartbeat: renews every held run lease and job claim each beat and
//! fail-stops those whose confirmed deadline passes without a confirmation.
//!
//! The loop itself never awaits the store. Each beat spawns its renewal
//! calls as separate tasks, runs and jobs alike ([`Renewable`]): one per
//! lease or claim for small beats, one per chunk of `renew_batch_size` for
//! large ones (`renew_many` for runs, `renew_jobs` to the queue the jobs
//! were claimed from), each bounded by the earliest confirmed deadline
//! among what it carries, so a slow or hung call delays nobody outside its
//! own call and cannot outlive its leases. Something whose renewal is still
//! in flight is skipped by the next beat. Dropping the loop (shutdown)
//! aborts every call in flight. Both kinds' answers are judged by one
//! function, [`on_answer`] / [`on_unknown`].
//!
//! Panics (see the `health` module): a store call that panics is judged like
//! one that failed (unknown: nothing is extended); a renewal task or the loop
//! that panics anyway is logged and counted, the loop is restarted, and the
//! in-flight marks are cleared by [`InFlight`] however a call ends.

use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::health::{self, Task};
use super::held::{Confirmation, Entry, HeldCore, HeldJob, HeldRun, Phase};
use super::loss::LossCause;
use super::{telemetry, Shared};
use crate::held::{timeout_error, unknown_answer};
use tenure_lease_core::backend::validate;
use tenure_lease_core::queue::{JobClaim, JobRenewal};
use tenure_lease_core::Claim;
use tenure_lease_core::Renewal;
use tenure_lease_core::{Error, ErrorKind};

/// How many times in a row the heartbeat loop may panic before finishing a
/// round before it is given up (see [`run`]).
pub(crate) const PANIC_LIMIT: u32 = 3;

/// The heartbeat task: runs the loop, restarting it after a panic (with its
/// first beat at once, so no lease misses a renewal because of it).
///
/// A loop that panics [`PANIC_LIMIT`] times in a row without finishing a
/// round cannot be trusted to renew or to fail-stop anything: the heartbeat
/// gives up. Everything held is stopped ([`LossCause::HeartbeatFailed`]),
/// the keeper takes no new leases, and the task ends, so
/// [`Keeper::health`](super::Keeper::health) answers `Failed { heartbeat }`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    ttl: Duration,
    beat: Duration,
    stop: CancellationToken,
) {
    let mut first_beat = Instant::now() + beat;
    let mut in_a_row = 0_u32;
    // Kept here rather than in the loop, so that after a panic every call
    // in flight is aborted and has released its in-flight mark before the
    // restarted loop's first beat looks for work.
    let mut renewals = JoinSet::new();
    loop {
        let mut rounds = 0_u64;
        let looped = health::catch(beat_loop(
            &shared,
            (ttl, beat, first_beat),
            &stop,
            &mut renewals,
            &mut rounds,
        ));
        let Err(payload) = looped.await else {
            return;
        };
        renewals.shutdown().await;
        shared.panics.record(
            Task::Heartbeat,
            &*payload,
            "the heartbeat loop panicked; restarting it (renewals in flight are dropped and extend nothing)",
        );
        in_a_row = if rounds == 0 { in_a_row + 1 } else { 1 };
        if in_a_row >= PANIC_LIMIT {
            shared.heartbeat_failed();
            health::log_surviving_hooks(|| {
                tracing::error!(
                    panics = in_a_row,
                    "the heartbeat loop kept panicking before finishing a round and gave up: \
                     everything held was stopped and the keeper takes no new leases (replace this keeper)"
                );
            });
            return;
        }
        if rounds == 0 {
            // It panicked again before finishing one round: pause, so a
            // panic that repeats cannot spin a core. Overdue work is still
            // fail-stopped by its own `check()` meanwhile.
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(beat / 10) => {}
            }
        }
        first_beat = Instant::now();
    }
}

/// Beats until `stop`: `timing` is the lease ttl, the beat, and when the
/// first beat is due. Renewal calls are spawned into `renewals`.
async fn beat_loop(
    shared: &Arc<Shared>,
    (ttl, beat, first_beat): (Duration, Duration, Instant),
    stop: &CancellationToken,
    renewals: &mut JoinSet<()>,
    rounds: &mut u64,
) {
    let mut next_beat = first_beat;
    loop {
        let wake = shared
            .earliest_deadline()
            .map_or(next_beat, |deadline| deadline.min(next_beat));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shared.heartbeat_wake.notified() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
        while let Some(joined) = renewals.try_join_next() {
            if let Err(error) = joined {
                if error.is_panic() {
                    shared.panics.record(
                        Task::Heartbeat,
                        &*error.into_panic(),
                        "a renewal task panicked; its leases keep only their confirmed deadline",
                    );
                }
            }
        }
        let now = Instant::now();
        shared.fail_stop_overdue(now);
        if now >= next_beat {
            start_beat(shared, ttl, now, renewals);
            next_beat = now + beat;
        }
        *rounds += 1;
    }
}

/// The in-flight mark of everything one renewal call carries, cleared when
/// the call ends however it ends: answered, panicked, or aborted (even
/// before it first ran, as it is made before the call is spawned).
struct InFlight(Vec<Entry>);

impl Drop for InFlight {
    fn drop(&mut self) {
        for entry in &self.0 {
            entry.core().renewing.store(false, Ordering::Release);
        }
    }
}

/// Starts one beat: takes everything due for renewal and spawns its
/// renewal calls into `renewals`, runs and jobs each by their own count
/// (see [`KeeperConfig::solo_renewal_limit`](super::KeeperConfig::solo_renewal_limit)).
fn start_beat(shared: &Arc<Shared>, ttl: Duration, now: Instant, renewals: &mut JoinSet<()>) {
    let mut runs: Vec<(Instant, Arc<HeldRun>)> = Vec::new();
    let mut jobs: Vec<(Instant, Arc<HeldJob>)> = Vec::new();
    for entry in shared.snapshot() {
        let Some(deadline) = take_for_renewal(entry.core(), now) else {
            continue;
        };
        match entry {
            Entry::Run(run) => runs.push((deadline, run)),
            Entry::Job(job) => jobs.push((deadline, job)),
        }
    }
    let solo_runs = runs.len() <= shared.config.solo_renewal_limit;
    spawn_renewals(shared, ttl, runs, solo_runs, renewals);
    let solo_jobs = jobs.len() <= shared.config.solo_renewal_limit;
    for same_queue in by_queue(jobs) {
        spawn_renewals(shared, ttl, same_queue, solo_jobs, renewals);
    }
}

/// Spawns the renewal calls of `due`, all renewed through the same store or
/// queue: one call each when `solo`, otherwise one per chunk of
/// `renew_batch_size`, earliest deadlines first.
fn spawn_renewals<R: Renewable>(
    shared: &Arc<Shared>,
    ttl: Duration,
    mut due: Vec<(Instant, Arc<R>)>,
    solo: bool,
    renewals: &mut JoinSet<()>,
) {
    due.sort_by_key(|(deadline, _)| *deadline);
    let chunk_size = if solo {
        1
    } else {
        shared.config.renew_batch_size
    };
    let mut due = due.into_iter().peekable();
    while due.peek().is_some() {
        let chunk: Vec<(Instant, Arc<R>)> = due.by_ref().take(chunk_size).collect();
        let in_flight = InFlight(chunk.iter().map(|(_, held)| R::entry(held)).collect());
        renewals.spawn(renew_chunk(Arc::clone(shared), chunk, ttl, solo, in_flight));
    }
}

/// `jobs` grouped by the queue they were claimed from (the same queue
/// object, not merely an equal one), as one batch call goes to one queue.
fn by_queue(jobs: Vec<(Instant, Arc<HeldJob>)>) -> Vec<Vec<(Instant, Arc<HeldJob>)>> {
    let mut groups: Vec<Vec<(Instant, Arc<HeldJob>)>> = Vec::new();
    for (deadline, job) in jobs {
        let queue = &job.item.queue;
        match groups
            .iter_mut()
            .find(|group| Arc::ptr_eq(&group[0].1.item.queue, queue))
        {
            Some(group) => group.push((deadline, job)),
            None => groups.push(vec![(deadline, job)]),
        }
    }
    groups
}

/// The confirmed deadline of `held` when it is due for renewal (held or
/// settling, has a lease still ahead of `now`, no renewal in flight),
/// marking it in flight. Nothing is sent once the deadline has passed: its
/// success would not count, and it would only extend an orphan's lease.
fn take_for_renewal(held: &HeldCore, now: Instant) -> Option<Instant> {
    let state = held.state();
    let renewable = matches!(state.phase, Phase::Held | Phase::Settling);
    let deadline = state
        .deadline
        .filter(|deadline| renewable && *deadline > now)?;
    drop(state);
    (!held.renewing.swap(true, Ordering::AcqRel)).then_some(deadline)
}

/// A renewal's answer, whatever the kind.
pub(crate) enum Answer {
    Renewed,
    Lost(LossCause),
}

/// What a renewal call carries, by kind: a held run or a held job claim,
/// each renewed through its own store calls, both judged by [`renew_chunk`].
pub(crate) trait Renewable:
    Deref<Target = HeldCore> + Send + Sync + Sized + 'static
{
    /// The store call renewing one alone, as telemetry and panic reports
    /// name it.
    const SOLO_CALL: &'static str;
    /// The store call renewing a chunk in one round trip.
    const BATCH_CALL: &'static str;

    /// Its row in the keeper's table.
    fn entry(held: &Arc<Self>) -> Entry;

    /// Renews it alone.
    fn renew_solo(
        &self,
        shared: &Shared,
        ttl: Duration,
    ) -> impl Future<Output = Result<Answer, Error>> + Send;

    /// Renews `chunk` (all renewed through the same store or queue) in one
    /// call: one answer per member, in order, from a store that keeps its
    /// contract.
    fn renew_batch(
        shared: &Shared,
        chunk: &[(Instant, Arc<Self>)],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<Answer>, Error>> + Send;
}

impl Renewable for HeldRun {
    const SOLO_CALL: &'static str = "renew";
    const BATCH_CALL: &'static str = "renew_many";

    fn entry(run: &Arc<Self>) -> Entry {
        Entry::Run(Arc::clone(run))
    }

    async fn renew_solo(&self, shared: &Shared, ttl: Duration) -> Result<Answer, Error> {
        let outcome = shared.store.renew(&self.item.claim, ttl).await?;
        run_answer(outcome)
    }

    async fn renew_batch(
        shared: &Shared,
        chunk: &[(Instant, Arc<Self>)],
        ttl: Duration,
    ) -> Result<Vec<Answer>, Error> {
        let claims: Vec<Claim> = chunk
            .iter()
            .map(|(_, run)| run.item.claim.clone())
            .collect();
        let outcomes = shared.store.renew_many(&claims, ttl).await?;
        outcomes.into_iter().map(run_answer).collect()
    }
}

impl Renewable for HeldJob {
    const SOLO_CALL: &'static str = "renew_job";
    const BATCH_CALL: &'static str = "renew_jobs";

    fn entry(job: &Arc<Self>) -> Entry {
        Entry::Job(Arc::clone(job))
    }

    async fn renew_solo(&self, _shared: &Shared, ttl: Duration) -> Result<Answer, Error> {
        let outcome = self.item.queue.renew_job(&self.item.claim, ttl).await?;
        job_answer(outcome)
    }

    async fn renew_batch(
        _shared: &Shared,
        chunk: &[(Instant, Arc<Self>)],
        ttl: Duration,
    ) -> Result<Vec<Answer>, Error> {
        let Some((_, first)) = chunk.first() else {
            return Ok(Vec::new());
        };
        // The table holds a job once, so no chunk names a job twice (which
        // `renew_jobs` refuses).
        let claims: Vec<JobClaim> = chunk
            .iter()
            .map(|(_, job)| job.item.claim.clone())
            .collect();
        let outcomes = first.item.queue.renew_jobs(&claims, ttl).await?;
        outcomes.into_iter().map(job_answer).collect()
    }
}

/// A renewal the work sent itself, carrying its progress
/// ([`RunGuard::report_progress`](crate::RunGuard::report_progress),
/// [`JobGuard::report_progress`](crate::JobGuard::report_progress)),
/// sent and judged as the heartbeat sends and judges its own: only while
/// held with the confirmed deadline ahead (a deadline already passed stops
/// the work, with nothing sent), bounded by that deadline, and `Renewed`
/// extends the deadline, `Lost` (or a renewal landing after the deadline)
/// ends ownership, no answer keeps it only until the deadline. Answers the
/// loss the work has once the answer is judged.
///
/// `call` names the store call for telemetry.
///
/// # Errors
///
/// `InvalidInput`, with nothing sent, for a `null` or oversized progress,
/// a keeper whose leases have no ttl (the progress rides on a renewal) and
/// work whose terminal write has begun; the store's error (or a timeout)
/// when it could not say.
pub(crate) async fn report_progress<R, Fut>(
    shared: &Shared,
    held: &R,
    progress: &serde_json::Value,
    call: &'static str,
    renew: impl FnOnce(Duration) -> Fut,
) -> Result<Option<LossCause>, Error>
where
    R: Renewable,
    Fut: Future<Output = Result<Answer, Error>>,
{
    validate::progress(progress)?;
    let Some(ttl) = shared.config.ttl else {
        return Err(Error::invalid_input(
            "progress",
            "progress rides on a renewal, and this keeper's leases have no ttl",
        ));
    };
    let now = Instant::now();
    let (phase, deadline) = {
        let state = held.state();
        (state.phase, state.deadline)
    };
    match (phase, deadline) {
        (Phase::Held, Some(deadline)) if deadline > now => {
            telemetry::renew_call(call);
            let sent = Instant::now();
            let answer = tokio::time::timeout_at(deadline, shared.bounded(call, renew(ttl))).await;
            let now = Instant::now();
            match answer {
                Ok(Ok(answer)) => {
                    on_answer(shared, held, deadline, answer, sent + ttl, now);
                    Ok(held.loss())
                }
                Ok(Err(error)) => {
                    on_unknown(shared, held, deadline, "error", now);
                    Err(error)
                }
                Err(_) => {
                    on_unknown(shared, held, deadline, "timeout", now);
                    Err(timeout_error(call))
                }
            }
        }
        (Phase::Held, Some(_)) => {
            shared.lose(held, LossCause::DeadlinePassed, false);
            Ok(held.loss())
        }
        (Phase::Settling | Phase::Finished, _) => Err(Error::invalid_input(
            "progress",
            "the terminal write has begun: report progress before completing",
        )),
        _ => Ok(held.loss()),
    }
}

/// A run renewal's outcome as an [`Answer`].
pub(crate) fn run_answer(outcome: Renewal) -> Result<Answer, Error> {
    match outcome {
        Renewal::Renewed { .. } => Ok(Answer::Renewed),
        Renewal::Lost(reason) => Ok(Answer::Lost(LossCause::Lost(reason))),
        other => Err(unknown_answer("renew", &other)),
    }
}

/// A job renewal's outcome as an [`Answer`].
pub(crate) fn job_answer(outcome: JobRenewal) -> Result<Answer, Error> {
    match outcome {
        JobRenewal::Renewed { .. } => Ok(Answer::Renewed),
        JobRenewal::Lost(loss) => Ok(Answer::Lost(LossCause::JobLost(loss))),
        other => Err(unknown_answer("renew_job", &other)),
    }
}

/// Renews one chunk (sorted by deadline) in one store call, bounded by its
/// earliest deadline, and judges each member by its own answer.
async fn renew_chunk<R: Renewable>(
    shared: Arc<Shared>,
    chunk: Vec<(Instant, Arc<R>)>,
    ttl: Duration,
    solo: bool,
    _in_flight: InFlight,
) {
    let Some((bound, earliest)) = chunk.first() else {
        return;
    };
    let bound = *bound;
    let sent = Instant::now();
    let panics = &shared.panics;
    let answer = if solo {
        telemetry::renew_call(R::SOLO_CALL);
        let call = earliest.renew_solo(&shared, ttl);
        let call = health::store_call(panics, Task::Heartbeat, R::SOLO_CALL, call);
        tokio::time::timeout_at(bound, call)
            .await
            .map(|result| result.map(|answer| vec![answer]))
    } else {
        let call = async {
            // Closed never: without a turn the call goes anyway.
            let _turn = shared.renew_batches.acquire().await.ok();
            telemetry::renew_call(R::BATCH_CALL);
            let call = R::renew_batch(&shared, &chunk, ttl);
            health::store_call(panics, Task::Heartbeat, R::BATCH_CALL, call).await
        };
        tokio::time::timeout_at(bound, call).await
    };
    let now = Instant::now();
    match answer {
        Ok(Ok(answers)) if answers.len() == chunk.len() => {
            for ((deadline, held), answer) in chunk.iter().zip(answers) {
                on_answer(&shared, held, *deadline, answer, sent + ttl, now);
            }
        }
        Ok(Ok(answers)) => {
            tracing::error!(
                claims = chunk.len(),
                outcomes = answers.len(),
                "{} answered the wrong number of outcomes; treating the batch as unknown",
                R::BATCH_CALL
            );
            for (deadline, held) in &chunk {
                on_unknown(&shared, held, *deadline, "error", now);
            }
        }
        Ok(Err(error)) if !solo && error.kind() == ErrorKind::Corrupt => {
            // One undecodable record must not cost its healthy neighbours
            // their renewal.
            tracing::warn!(%error, claims = chunk.len(), "{} met an undecodable record; renewing the chunk one by one", R::BATCH_CALL);
            renew_one_by_one(&shared, &chunk, ttl).await;
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, claims = chunk.len(), earliest = %earliest.key, "renewal failed; kept until the confirmed deadline");
            for (deadline, held) in &chunk {
                on_unknown(&shared, held, *deadline, "error", now);
            }
        }
        Err(_) => {
            tracing::warn!(
                claims = chunk.len(),
                earliest = %earliest.key,
                "renewal got no answer before the earliest confirmed deadline"
            );
            for (deadline, held) in &chunk {
                on_unknown(&shared, held, *deadline, "timeout", now);
            }
        }
    }
}

/// Renews each member of `chunk` with its own call, all at once, each
/// bounded by its own deadline: a batch's fallback.
async fn renew_one_by_one<R: Renewable>(
    shared: &Arc<Shared>,
    chunk: &[(Instant, Arc<R>)],
    ttl: Duration,
) {
    let mut singles = JoinSet::new();
    for (index, (deadline, held)) in chunk.iter().enumerate() {
        let shared = Arc::clone(shared);
        let held = Arc::clone(held);
        let deadline = *deadline;
        telemetry::renew_call(R::SOLO_CALL);
        singles.spawn(async move {
            let sent = Instant::now();
            let call = held.renew_solo(&shared, ttl);
            let call = health::store_call(&shared.panics, Task::Heartbeat, R::SOLO_CALL, call);
            let answer = tokio::time::timeout_at(deadline, call).await;
            (index, sent, answer)
        });
    }
    while let Some(joined) = singles.join_next().await {
        let (index, sent, answer) = match joined {
            Ok(answered) => answered,
            Err(error) => {
                if error.is_panic() {
                    shared.panics.record(
                        Task::Heartbeat,
                        &*error.into_panic(),
                        "a renewal task panicked; its lease keeps only its confirmed deadline",
                    );
                }
                continue;
            }
        };
        let (deadline, held) = &chunk[index];
        let now = Instant::now();
        match answer {
            Ok(Ok(answer)) => on_answer(shared, held, *deadline, answer, sent + ttl, now),
            Ok(Err(error)) => {
                tracing::warn!(held = %held.key, %error, "renewal failed; kept until its confirmed deadline");
                on_unknown(shared, held, *deadline, "error", now);
            }
            Err(_) => on_unknown(shared, held, *deadline, "timeout", now),
        }
    }
}

/// Judges a renewal the store answered: `Renewed` extends the confirmed
/// deadline (unless it landed after it), `Lost` ends ownership at once
/// unless the terminal write is settling.
fn on_answer(
    shared: &Shared,
    held: &HeldCore,
    deadline: Instant,
    answer: Answer,
    new_deadline: Instant,
    now: Instant,
) {
    let time_left = deadline.saturating_duration_since(now);
    match answer {
        Answer::Renewed => match held.confirm(new_deadline, now) {
            Confirmation::Extended { time_left } => telemetry::renewal("renewed", time_left),
            Confirmation::Late => {
                telemetry::renewal("late", Duration::ZERO);
                tracing::warn!(held = %held.key, "renewal succeeded after the confirmed deadline; the lease is not revived");
                shared.lose(held, LossCause::DeadlinePassed, false);
            }
            Confirmation::Ignored => {}
        },
        Answer::Lost(cause) => {
            telemetry::renewal("lost", time_left);
            if !shared.lose(held, cause, false) && held.phase() == Phase::Settling {
                tracing::debug!(held = %held.key, cause = cause.label(), "renewal answered lost while settling: not a loss");
            }
        }
    }
}

/// Judges a renewal the store could not answer: ownership is kept only
/// while the confirmed deadline is ahead.
fn on_unknown(
    shared: &Shared,
    held: &HeldCore,
    deadline: Instant,
    outcome: &'static str,
    now: Instant,
) {
    telemetry::renewal(outcome, deadline.saturating_duration_since(now));
    if held.deadline().is_some_and(|confirmed| confirmed <= now) {
        shared.lose(held, LossCause::DeadlinePassed, false);
    }
}

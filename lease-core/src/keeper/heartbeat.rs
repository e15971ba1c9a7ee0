//! The heartbeat: renews every held run lease and job claim each beat and
//! fail-stops those whose confirmed deadline passes without a confirmation.
//!
//! The loop itself never awaits the store. Each beat spawns its renewal
//! calls as separate tasks (runs: one per lease for small beats, one per
//! chunk of `renew_batch_size` for large ones; jobs: always one per job,
//! queues having no batch renewal), each bounded by the earliest confirmed
//! deadline among what it carries, so a slow or hung call delays nobody
//! outside its own call and cannot outlive its leases. Something whose
//! renewal is still in flight is skipped by the next beat. Dropping the loop
//! (shutdown) aborts every call in flight. Both kinds' answers are judged by
//! one function, [`on_answer`] / [`on_unknown`].
//!
//! Panics (see the `health` module): a store call that panics is judged like
//! one that failed (unknown: nothing is extended); a renewal task or the loop
//! that panics anyway is logged and counted, the loop is restarted, and the
//! in-flight marks are cleared by [`InFlight`] however a call ends.

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
use crate::error::ErrorKind;
use crate::outcome::Renewal;
use crate::queue::JobRenewal;
use crate::record::Claim;

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

fn start_beat(shared: &Arc<Shared>, ttl: Duration, now: Instant, renewals: &mut JoinSet<()>) {
    let mut runs: Vec<(Instant, Arc<HeldRun>)> = Vec::new();
    for entry in shared.snapshot() {
        let Some(deadline) = take_for_renewal(entry.core(), now) else {
            continue;
        };
        match entry {
            Entry::Run(run) => runs.push((deadline, run)),
            Entry::Job(job) => {
                let in_flight = InFlight(vec![Entry::Job(Arc::clone(&job))]);
                renewals.spawn(renew_job(Arc::clone(shared), deadline, job, ttl, in_flight));
            }
        }
    }
    if runs.is_empty() {
        return;
    }
    runs.sort_by_key(|(deadline, _)| *deadline);
    let solo = runs.len() <= shared.config.solo_renewal_limit;
    let chunk_size = if solo {
        1
    } else {
        shared.config.renew_batch_size
    };
    let mut runs = runs.into_iter().peekable();
    while runs.peek().is_some() {
        let chunk: Vec<(Instant, Arc<HeldRun>)> = runs.by_ref().take(chunk_size).collect();
        let in_flight = InFlight(
            chunk
                .iter()
                .map(|(_, run)| Entry::Run(Arc::clone(run)))
                .collect(),
        );
        renewals.spawn(renew_chunk(Arc::clone(shared), chunk, ttl, solo, in_flight));
    }
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
enum Answer {
    Renewed,
    Lost(LossCause),
}

/// A run renewal's outcome as an [`Answer`].
fn renewal_answer(outcome: Renewal) -> Answer {
    match outcome {
        Renewal::Renewed { .. } => Answer::Renewed,
        Renewal::Lost(reason) => Answer::Lost(LossCause::Lost(reason)),
    }
}

/// Renews one job claim, bounded by its own confirmed deadline.
async fn renew_job(
    shared: Arc<Shared>,
    deadline: Instant,
    job: Arc<HeldJob>,
    ttl: Duration,
    _in_flight: InFlight,
) {
    telemetry::renew_call("renew_job");
    let sent = Instant::now();
    let call = job.item.queue.renew_job(&job.item.claim, ttl);
    let call = health::store_call(&shared.panics, Task::Heartbeat, "renew_job", call);
    let answer = tokio::time::timeout_at(deadline, call).await;
    let now = Instant::now();
    match answer {
        Ok(Ok(outcome)) => {
            let answer = match outcome {
                JobRenewal::Renewed { .. } => Answer::Renewed,
                JobRenewal::Lost(loss) => Answer::Lost(LossCause::JobLost(loss)),
            };
            on_answer(&shared, &job, deadline, answer, sent + ttl, now);
        }
        Ok(Err(error)) => {
            tracing::warn!(job.id = %job.item.claim.id, %error, "job renewal failed; claim kept until its confirmed deadline");
            on_unknown(&shared, &job, deadline, "error", now);
        }
        Err(_) => {
            tracing::warn!(job.id = %job.item.claim.id, "job renewal got no answer before the confirmed deadline");
            on_unknown(&shared, &job, deadline, "timeout", now);
        }
    }
}

/// Renews one chunk of runs (sorted by deadline) in one store call and
/// judges each lease by its own outcome.
async fn renew_chunk(
    shared: Arc<Shared>,
    chunk: Vec<(Instant, Arc<HeldRun>)>,
    ttl: Duration,
    solo: bool,
    _in_flight: InFlight,
) {
    let Some(&(bound, _)) = chunk.first() else {
        return;
    };
    let claims: Vec<Claim> = chunk
        .iter()
        .map(|(_, run)| run.item.claim.clone())
        .collect();
    let sent = Instant::now();
    let panics = &shared.panics;
    let answer = if solo {
        telemetry::renew_call("renew");
        let call = shared.store.renew(&claims[0], ttl);
        let call = health::store_call(panics, Task::Heartbeat, "renew", call);
        tokio::time::timeout_at(bound, call)
            .await
            .map(|result| result.map(|outcome| vec![outcome]))
    } else {
        let call = async {
            // Closed never: without a turn the call goes anyway.
            let _turn = shared.renew_batches.acquire().await.ok();
            telemetry::renew_call("renew_many");
            let call = shared.store.renew_many(&claims, ttl);
            health::store_call(panics, Task::Heartbeat, "renew_many", call).await
        };
        tokio::time::timeout_at(bound, call).await
    };
    let now = Instant::now();
    match answer {
        Ok(Ok(outcomes)) if outcomes.len() == chunk.len() => {
            for ((deadline, run), outcome) in chunk.iter().zip(outcomes) {
                on_answer(
                    &shared,
                    run,
                    *deadline,
                    renewal_answer(outcome),
                    sent + ttl,
                    now,
                );
            }
        }
        Ok(Ok(outcomes)) => {
            tracing::error!(
                claims = chunk.len(),
                outcomes = outcomes.len(),
                "renew_many answered the wrong number of outcomes; treating the batch as unknown"
            );
            for (deadline, run) in &chunk {
                on_unknown(&shared, run, *deadline, "error", now);
            }
        }
        Ok(Err(error)) if !solo && error.kind() == ErrorKind::Corrupt => {
            // One undecodable record must not cost its healthy neighbours
            // their renewal: renew this chunk lease by lease instead.
            tracing::warn!(%error, claims = chunk.len(), "renew_many met an undecodable record; renewing the chunk lease by lease");
            let mut singles = JoinSet::new();
            for (index, (deadline, run)) in chunk.iter().enumerate() {
                let shared = Arc::clone(&shared);
                let claim = run.item.claim.clone();
                let deadline = *deadline;
                telemetry::renew_call("renew");
                singles.spawn(async move {
                    let sent = Instant::now();
                    let call = shared.store.renew(&claim, ttl);
                    let call = health::store_call(&shared.panics, Task::Heartbeat, "renew", call);
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
                let (deadline, run) = &chunk[index];
                let now = Instant::now();
                match answer {
                    Ok(Ok(outcome)) => {
                        on_answer(
                            &shared,
                            run,
                            *deadline,
                            renewal_answer(outcome),
                            sent + ttl,
                            now,
                        );
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(lease.id = %run.item.claim.id, %error, "renewal failed; lease kept until its confirmed deadline");
                        on_unknown(&shared, run, *deadline, "error", now);
                    }
                    Err(_) => on_unknown(&shared, run, *deadline, "timeout", now),
                }
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, claims = chunk.len(), "renewal failed; leases kept until their confirmed deadline");
            for (deadline, run) in &chunk {
                on_unknown(&shared, run, *deadline, "error", now);
            }
        }
        Err(_) => {
            tracing::warn!(
                claims = chunk.len(),
                "renewal got no answer before the earliest confirmed deadline"
            );
            for (deadline, run) in &chunk {
                on_unknown(&shared, run, *deadline, "timeout", now);
            }
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

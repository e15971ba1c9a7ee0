//! The heartbeat: renews every held lease each beat and fail-stops leases
//! whose confirmed deadline passes without a confirmation.
//!
//! The loop itself never awaits the store. Each beat spawns its renewal
//! calls as separate tasks (one per lease for small beats, one per chunk of
//! `renew_batch_size` for large ones), each bounded by the earliest
//! confirmed deadline among its leases, so a slow or hung call delays nobody
//! outside its own call and cannot outlive the leases it carries. A lease
//! whose renewal is still in flight is skipped by the next beat. Dropping
//! the loop (shutdown) aborts every call in flight.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::guard::{Confirmation, HeldLease, LossCause, Phase};
use super::{telemetry, Shared};
use crate::outcome::Renewal;
use crate::record::Claim;

pub(crate) async fn run(
    shared: Arc<Shared>,
    ttl: Duration,
    beat: Duration,
    stop: CancellationToken,
) {
    let mut renewals = JoinSet::new();
    let mut next_beat = Instant::now() + beat;
    loop {
        let wake = shared
            .earliest_deadline()
            .map_or(next_beat, |deadline| deadline.min(next_beat));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shared.heartbeat_wake.notified() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
        while renewals.try_join_next().is_some() {}
        let now = Instant::now();
        shared.fail_stop_overdue(now);
        if now >= next_beat {
            start_beat(&shared, ttl, &mut renewals);
            next_beat = now + beat;
        }
    }
}

fn start_beat(shared: &Arc<Shared>, ttl: Duration, renewals: &mut JoinSet<()>) {
    let mut due: Vec<(Instant, Arc<HeldLease>)> = shared
        .snapshot()
        .into_iter()
        .filter_map(|lease| {
            let state = lease.state();
            let renewable = matches!(state.phase, Phase::Held | Phase::Settling);
            let deadline = state.deadline.filter(|_| renewable)?;
            drop(state);
            (!lease.renewing.swap(true, Ordering::AcqRel)).then_some((deadline, lease))
        })
        .collect();
    if due.is_empty() {
        return;
    }
    due.sort_by_key(|(deadline, _)| *deadline);
    let solo = due.len() <= shared.config.solo_renewal_limit;
    let chunk_size = if solo {
        1
    } else {
        shared.config.renew_batch_size
    };
    let mut due = due.into_iter().peekable();
    while due.peek().is_some() {
        let chunk: Vec<(Instant, Arc<HeldLease>)> = due.by_ref().take(chunk_size).collect();
        renewals.spawn(renew_chunk(Arc::clone(shared), chunk, ttl, solo));
    }
}

/// Renews one chunk (sorted by deadline) in one store call and judges each
/// lease by its own outcome.
async fn renew_chunk(
    shared: Arc<Shared>,
    chunk: Vec<(Instant, Arc<HeldLease>)>,
    ttl: Duration,
    solo: bool,
) {
    let bound = chunk[0].0;
    let claims: Vec<Claim> = chunk.iter().map(|(_, lease)| lease.claim.clone()).collect();
    let sent = Instant::now();
    let answer = if solo {
        telemetry::renew_call("renew");
        tokio::time::timeout_at(bound, shared.store.renew(&claims[0], ttl))
            .await
            .map(|result| result.map(|outcome| vec![outcome]))
    } else {
        telemetry::renew_call("renew_many");
        tokio::time::timeout_at(bound, shared.store.renew_many(&claims, ttl)).await
    };
    let now = Instant::now();
    match answer {
        Ok(Ok(outcomes)) if outcomes.len() == chunk.len() => {
            for ((deadline, lease), outcome) in chunk.iter().zip(outcomes) {
                on_answer(&shared, lease, *deadline, outcome, sent + ttl, now);
            }
        }
        Ok(Ok(outcomes)) => {
            tracing::error!(
                claims = chunk.len(),
                outcomes = outcomes.len(),
                "renew_many answered the wrong number of outcomes; treating the batch as unknown"
            );
            for (deadline, lease) in &chunk {
                on_unknown(&shared, lease, *deadline, "error", now);
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, claims = chunk.len(), "renewal failed; leases kept until their confirmed deadline");
            for (deadline, lease) in &chunk {
                on_unknown(&shared, lease, *deadline, "error", now);
            }
        }
        Err(_) => {
            tracing::warn!(
                claims = chunk.len(),
                "renewal got no answer before the earliest confirmed deadline"
            );
            for (deadline, lease) in &chunk {
                on_unknown(&shared, lease, *deadline, "timeout", now);
            }
        }
    }
    for (_, lease) in &chunk {
        lease.renewing.store(false, Ordering::Release);
    }
}

fn on_answer(
    shared: &Shared,
    lease: &HeldLease,
    deadline: Instant,
    outcome: Renewal,
    new_deadline: Instant,
    now: Instant,
) {
    let time_left = deadline.saturating_duration_since(now);
    match outcome {
        Renewal::Renewed { .. } => match lease.confirm(new_deadline, now) {
            Confirmation::Extended { time_left } => telemetry::renewal("renewed", time_left),
            Confirmation::Late => {
                telemetry::renewal("late", Duration::ZERO);
                tracing::warn!(lease.id = %lease.claim.id, "renewal succeeded after the confirmed deadline; the lease is not revived");
                shared.lose(lease, LossCause::DeadlinePassed, false);
            }
            Confirmation::Ignored => {}
        },
        Renewal::Lost(reason) => {
            telemetry::renewal("lost", time_left);
            if !shared.lose(lease, LossCause::Lost(reason), false)
                && lease.phase() == Phase::Settling
            {
                tracing::debug!(lease.id = %lease.claim.id, reason = reason.label(), "renewal answered lost while settling: not a loss");
            }
        }
    }
}

fn on_unknown(
    shared: &Shared,
    lease: &HeldLease,
    deadline: Instant,
    outcome: &'static str,
    now: Instant,
) {
    telemetry::renewal(outcome, deadline.saturating_duration_since(now));
    if lease.deadline().is_some_and(|confirmed| confirmed <= now) {
        shared.lose(lease, LossCause::DeadlinePassed, false);
    }
}

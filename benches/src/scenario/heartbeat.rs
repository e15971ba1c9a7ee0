//! heartbeat-scale: one [`Keeper`] holding L leases. Each beat (ttl / 3) it
//! renews them all; the round time (first renewal call sent to last one
//! answered) must stay well inside the ttl, and no lease may miss its
//! deadline. Run twice per L: with `renew_many` batches (the keeper's
//! default past `solo_renewal_limit`) and with one `renew` call per lease,
//! to show what batching buys.
//!
//! The round is timed by a layer around the store that logs every renewal
//! call; the keeper itself is used as shipped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tenure_keeper::{AdmitOutcome, KeeperConfig};
use tenure_keeper::{Keeper, RunGuard};
use tenure_lease_core::layer::{Answer, Hook, LayerExt, Operation, Pending};
use tenure_lease_core::LeaseStore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::options::{HeartbeatSize, Sizes};
use crate::progress::Progress;
use crate::stats::micros;
use crate::BenchResult;

/// Admissions in flight while the keeper fills up.
const ADMIT_CONCURRENCY: usize = 64;
/// Bound on one admission while the keeper fills up.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// How the keeper renews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RenewMode {
    /// `renew_many` in chunks of 1000.
    RenewMany,
    /// One `renew` call per lease.
    Solo,
}

/// Figures of one (L, mode) run.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatPoint {
    /// Leases held.
    pub leases: usize,
    /// Their lease length, in µs.
    pub ttl_us: f64,
    /// The beat (ttl / 3), in µs.
    pub beat_us: f64,
    /// How they were renewed.
    pub mode: RenewMode,
    /// Time to admit them all through the keeper, in µs.
    pub admit_us: f64,
    /// Beats measured.
    pub rounds: usize,
    /// Median round time, in µs.
    pub round_p50_us: f64,
    /// Slowest round, in µs.
    pub round_max_us: f64,
    /// The slowest round as a share of the beat (over 1: the beat cannot keep up).
    pub round_to_beat: f64,
    /// Store calls per round.
    pub calls_per_round: f64,
    /// Leases renewed per round (should be L).
    pub renewals_per_round: f64,
    /// Leases the keeper had lost by the time the last admission was
    /// answered: renewals starved by the admissions queued beside them
    /// (deadline passed or otherwise).
    pub missed_while_admitting: u64,
    /// Leases lost after every lease was held, while the keeper only renews:
    /// whether it can hold L, as against whether it can admit while holding
    /// (must be 0).
    pub missed_steady_state: u64,
    /// The process's resident memory grown while admitting, per lease held
    /// (the keeper's state and the caller's guard): `None` where the
    /// platform does not say.
    pub bytes_per_lease: Option<f64>,
}

/// The heartbeat-scale report.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatReport {
    /// One point per (L, ttl, mode).
    pub points: Vec<HeartbeatPoint>,
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<HeartbeatReport> {
    let mut points = Vec::new();
    for (index, size) in sizes.heartbeat.iter().enumerate() {
        let modes: &[RenewMode] = if size.compare_solo {
            &[RenewMode::RenewMany, RenewMode::Solo]
        } else {
            &[RenewMode::RenewMany]
        };
        for &mode in modes {
            progress.cell(format!(
                "heartbeat-scale: {} leases, ttl {:?}, {mode:?}",
                size.leases, size.ttl
            ));
            let prefix = format!("hb{index}-{mode:?}");
            points.push(
                hold_and_measure(
                    backend.store.clone(),
                    size,
                    mode,
                    sizes.heartbeat_beats,
                    &prefix,
                )
                .await?,
            );
        }
    }
    Ok(HeartbeatReport { points })
}

async fn hold_and_measure(
    store: Arc<dyn LeaseStore>,
    size: &HeartbeatSize,
    mode: RenewMode,
    beats: u32,
    prefix: &str,
) -> BenchResult<HeartbeatPoint> {
    let HeartbeatSize { leases, ttl, .. } = *size;
    let beat = ttl / 3;
    let timed = Arc::new(store.layer(RenewalLog::default()));
    let solo_limit = match mode {
        RenewMode::RenewMany => KeeperConfig::with_ttl(ttl).solo_renewal_limit,
        RenewMode::Solo => leases,
    };
    let config = KeeperConfig::with_ttl(ttl)
        .auto_reconcile(false)
        .solo_renewal_limit(solo_limit)
        .renew_batch_size(1000)
        // Filling the keeper queues thousands of admissions behind the
        // renewals: the default bound (the ttl) is for live traffic.
        .store_timeout(ADMIT_TIMEOUT)
        .worker_id(format!("{prefix}-keeper"));
    let keeper = Arc::new(Keeper::builder(timed.clone(), config).start()?);

    let resident_before = resident_bytes();
    let admitting = Instant::now();
    let mut guards: Vec<RunGuard> = Vec::with_capacity(leases);
    let mut admissions = JoinSet::new();
    for n in 0..leases {
        if admissions.len() >= ADMIT_CONCURRENCY {
            if let Some(answer) = admissions.join_next().await {
                guards.push(answer??);
            }
        }
        let keeper = Arc::clone(&keeper);
        let request = keeper
            .request(format!("{prefix}-{n}"))
            .scope(format!("{prefix}-scope-{n}"));
        admissions.spawn(async move {
            match keeper.admit(request).await? {
                AdmitOutcome::Admitted { guard, .. } => Ok::<_, crate::BenchError>(guard),
                _ => Err("fresh admission through the keeper did not admit".into()),
            }
        });
    }
    while let Some(answer) = admissions.join_next().await {
        guards.push(answer??);
    }
    let admit_us = micros(admitting.elapsed());
    let lost = |guards: &[RunGuard]| guards.iter().filter(|guard| guard.loss().is_some()).count();
    let missed_while_admitting = lost(&guards);
    let bytes_per_lease = resident_before
        .zip(resident_bytes())
        .map(|(before, after)| after.saturating_sub(before) as f64 / leases.max(1) as f64);

    let measuring = Instant::now();
    tokio::time::sleep(beat * beats + beat / 2).await;
    let missed_steady_state = lost(&guards) - missed_while_admitting;
    keeper.shutdown(Instant::now()).await;
    drop(guards);

    let calls: Vec<CallSpan> = timed
        .hook()
        .calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|call| call.sent >= measuring)
        .cloned()
        .collect();
    let rounds = group_rounds(calls, beat / 2);
    let mut times: Vec<f64> = rounds.iter().map(|round| micros(round.span)).collect();
    times.sort_by(f64::total_cmp);
    let count = rounds.len().max(1) as f64;
    let round_max_us = times.last().copied().unwrap_or(0.0);
    Ok(HeartbeatPoint {
        leases,
        ttl_us: micros(ttl),
        beat_us: micros(beat),
        mode,
        admit_us,
        rounds: rounds.len(),
        round_p50_us: times.get(times.len() / 2).copied().unwrap_or(0.0),
        round_max_us,
        round_to_beat: round_max_us / micros(beat),
        calls_per_round: rounds.iter().map(|round| round.calls).sum::<usize>() as f64 / count,
        renewals_per_round: rounds.iter().map(|round| round.renewals).sum::<usize>() as f64 / count,
        missed_while_admitting: missed_while_admitting as u64,
        missed_steady_state: missed_steady_state as u64,
        bytes_per_lease,
    })
}

/// This process's resident memory, from `/proc/self/status` (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[derive(Debug, Clone)]
struct CallSpan {
    sent: Instant,
    answered: Instant,
    claims: usize,
}

struct Round {
    span: Duration,
    calls: usize,
    renewals: usize,
}

/// Groups renewal calls into beats: a call sent more than `split` after the
/// first call of the current round starts a new one.
fn group_rounds(mut calls: Vec<CallSpan>, split: Duration) -> Vec<Round> {
    calls.sort_by_key(|call| call.sent);
    let mut rounds: Vec<(Instant, Instant, usize, usize)> = Vec::new();
    for call in calls {
        match rounds.last_mut() {
            Some((first, last, calls, renewals)) if call.sent - *first <= split => {
                *last = (*last).max(call.answered);
                *calls += 1;
                *renewals += call.claims;
            }
            _ => rounds.push((call.sent, call.answered, 1, call.claims)),
        }
    }
    rounds
        .into_iter()
        .map(|(first, last, calls, renewals)| Round {
            span: last - first,
            calls,
            renewals,
        })
        .collect()
}

/// A layer that logs the time of every renewal call.
#[derive(Default)]
struct RenewalLog {
    calls: Mutex<Vec<CallSpan>>,
}

impl Hook for RenewalLog {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        let claims = match operation.name {
            "renew" => 1,
            "renew_many" => operation.batch.len(),
            _ => return call,
        };
        Box::pin(async move {
            let sent = Instant::now();
            let outcome = call.await;
            let span = CallSpan {
                sent,
                answered: Instant::now(),
                claims,
            };
            self.calls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(span);
            outcome
        })
    }
}

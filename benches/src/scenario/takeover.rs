//! takeover: an owner renews its lease and writes through a fence gate
//! until it is killed at a random point; a rival [`Keeper`]'s reconciler
//! (`list_expired` + `claim_for_takeover` every reconcile interval, as
//! shipped) adopts the orphan, and its recovery callback makes the first
//! fenced write.
//!
//! Nobody can take over before the owner's last renewal plus ttl plus grace
//! (the floor): the figures are the time from death to the rival's first
//! fenced write, and how far past the floor (counted from the owner's last
//! renewal sent) it came, which should stay within one reconcile interval
//! plus the calls' own time. Then the dead owner's copy comes back as a zombie
//! and tries to write: the store and the gate must refuse everything.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tenure_keeper::Keeper;
use tenure_keeper::{KeeperConfig, LossCause, ReconcileAction, Recovered, WriteError};
use tenure_lease_core::{
    Admission, AdmitRequest, ErrorKind, FenceGate, LeaseStore, Renewal, StatusChange, Transition,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::options::Sizes;
use crate::progress::Progress;
use crate::stats::{micros, Latencies, LatencySummary};
use crate::BenchResult;

/// Tolerance for "taken over before the floor" (clock truncation, timers).
const EARLY_TOLERANCE: Duration = Duration::from_millis(1);

/// The takeover report.
#[derive(Debug, Clone, Serialize)]
pub struct TakeoverReport {
    /// Owners killed.
    pub trials: usize,
    /// Lease length, in µs.
    pub ttl_us: f64,
    /// Grace, in µs.
    pub grace_us: f64,
    /// ttl + grace, in µs: no takeover can come sooner after a renewal.
    pub floor_us: f64,
    /// The rival keeper's reconcile interval, in µs.
    pub reconcile_interval_us: f64,
    /// From the owner's death to the rival's first fenced write.
    pub death_to_first_write: LatencySummary,
    /// First fenced write minus (the owner's last renewal sent + floor):
    /// what the reconciler's interval and calls add to the floor.
    pub beyond_floor: LatencySummary,
    /// Takeovers sooner than the floor after a confirmed renewal (must be 0).
    pub early_takeovers: u64,
    /// Zombie writes the store or the gate accepted (must be 0).
    pub stale_writes_accepted: u64,
    /// Rival completions refused because the rival's own confirmed deadline
    /// passed, or its write timed out, before it was made: the rival keeper
    /// fail-stopped as it must on a machine too slow for the ttl (0 on an
    /// unloaded one).
    pub late_rival_completions: u64,
}

/// Runs the scenario.
pub async fn run(
    backend: &Backend,
    sizes: &Sizes,
    progress: &Progress,
) -> BenchResult<TakeoverReport> {
    let store = backend.store.clone();
    let (mut death_to_write, mut beyond_floor) = (Latencies::new(), Latencies::new());
    let (mut early, mut stale, mut late) = (0_u64, 0_u64, 0_u64);
    for trial in 0..sizes.takeover_trials {
        progress.cell(format!(
            "takeover: trial {}/{}",
            trial + 1,
            sizes.takeover_trials
        ));
        let outcome = one_trial(Arc::clone(&store), sizes, trial).await?;
        death_to_write.record(outcome.death_to_write);
        beyond_floor.record(outcome.beyond_floor);
        early += u64::from(outcome.early);
        stale += outcome.stale_accepted;
        late += u64::from(outcome.late_completion);
    }
    let floor = sizes.takeover_ttl + sizes.takeover_grace;
    Ok(TakeoverReport {
        trials: sizes.takeover_trials,
        ttl_us: micros(sizes.takeover_ttl),
        grace_us: micros(sizes.takeover_grace),
        floor_us: micros(floor),
        reconcile_interval_us: micros(sizes.takeover_reconcile_interval),
        death_to_first_write: death_to_write.summary(),
        beyond_floor: beyond_floor.summary(),
        early_takeovers: early,
        stale_writes_accepted: stale,
        late_rival_completions: late,
    })
}

struct TrialOutcome {
    death_to_write: Duration,
    beyond_floor: Duration,
    early: bool,
    stale_accepted: u64,
    late_completion: bool,
}

/// When the owner last sent a renewal, and the last one confirmed.
#[derive(Clone, Copy)]
struct Renewals {
    last_sent: Instant,
    last_confirmed_sent: Instant,
}

async fn one_trial(
    store: Arc<dyn LeaseStore>,
    sizes: &Sizes,
    trial: usize,
) -> BenchResult<TrialOutcome> {
    let (ttl, grace) = (sizes.takeover_ttl, sizes.takeover_grace);
    let id = crate::backend::unique_name(&format!("takeover-{trial}"));
    let resource = format!("{id}-resource");
    let gate = Arc::new(FenceGate::new());

    let sent = Instant::now();
    let request = AdmitRequest::new(&id, "owner")
        .scope(&id)
        .ttl(ttl)
        .grace(grace);
    let claim = match store.admit(&request).await? {
        Admission::Admitted { record, .. } => {
            record.claim().ok_or("admitted record has no owner")?
        }
        other => return Err(format!("fresh admission answered {}", other.label()).into()),
    };
    let renewals = Arc::new(Mutex::new(Renewals {
        last_sent: sent,
        last_confirmed_sent: sent,
    }));

    let owner = {
        let (store, claim, gate, resource, renewals) = (
            Arc::clone(&store),
            claim.clone(),
            Arc::clone(&gate),
            resource.clone(),
            Arc::clone(&renewals),
        );
        tokio::spawn(async move {
            loop {
                if gate.admit(&resource, claim.fence).is_err() {
                    return;
                }
                tokio::time::sleep(ttl / 3).await;
                let sent = Instant::now();
                lock(&renewals).last_sent = sent;
                match store.renew(&claim, ttl).await {
                    Ok(Renewal::Renewed { .. }) => lock(&renewals).last_confirmed_sent = sent,
                    _ => return,
                }
            }
        })
    };

    let (recovered_tx, mut recovered_rx) = mpsc::unbounded_channel();
    let rival_config = KeeperConfig::with_ttl(ttl)
        .grace(grace)
        .reconcile_interval(sizes.takeover_reconcile_interval)
        .reconcile_action(ReconcileAction::Adopt)
        .worker_id(format!("rival-{trial}"));
    let rival = Keeper::builder(Arc::clone(&store), rival_config)
        .on_recovered(move |recovered: Recovered| {
            let sent = recovered_tx.send((recovered, Instant::now()));
            async move { sent.map_err(|_| "the trial stopped listening") }
        })
        .start()?;

    let lifetime =
        ttl / 2 + Duration::from_micros(fastrand::u64(..=(ttl * 3 / 2).as_micros() as u64));
    tokio::time::sleep(lifetime).await;
    owner.abort();
    let death = Instant::now();
    let _ = owner.await;
    let seen = *lock(&renewals);

    let (recovered, taken_at) = recovered_rx
        .recv()
        .await
        .ok_or("the rival keeper stopped without recovering the orphan")?;
    let guard = recovered
        .guard
        .ok_or("an adopted orphan came without its guard")?;
    if gate.admit(&resource, guard.fence()).is_err() {
        return Err("the gate refused the new owner's fence".into());
    }
    let late_completion = match guard.complete(StatusChange::succeeded()).await {
        Ok(_) => false,
        Err(WriteError::OwnershipLost(LossCause::DeadlinePassed)) => true,
        Err(WriteError::Unconfirmed(error)) if error.kind() == ErrorKind::Timeout => true,
        Err(error) => return Err(error.into()),
    };
    let first_write = Instant::now();
    rival.shutdown(Instant::now()).await;

    let mut stale_accepted = 0;
    if let Transition::Applied(_) = store.transition(&claim, &StatusChange::succeeded()).await? {
        stale_accepted += 1;
    }
    if let Renewal::Renewed { .. } = store.renew(&claim, ttl).await? {
        stale_accepted += 1;
    }
    if gate.admit(&resource, claim.fence).is_ok() {
        stale_accepted += 1;
    }

    let floor = ttl + grace;
    Ok(TrialOutcome {
        death_to_write: first_write.saturating_duration_since(death),
        beyond_floor: first_write.saturating_duration_since(seen.last_sent + floor),
        early: taken_at + EARLY_TOLERANCE < seen.last_confirmed_sent + floor,
        stale_accepted,
        late_completion,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

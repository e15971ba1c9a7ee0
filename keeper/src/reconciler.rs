//! The reconciler: finds other workers' orphans (`list_expired`), wins them
//! (`claim_for_takeover`) and hands them to the recovery callback, or, for
//! kinds configured to be released silently ([`ReconcileKinds`]), fails
//! them without a word to the callback: a host's internal reservations
//! never reach its recovery path.
//!
//! [`ReconcileKinds`]: super::ReconcileKinds
//!
//! It runs in its own task, single-flight: a pass is never started while
//! another runs, whether triggered by its timer or by
//! [`Keeper::reconcile_now`](super::Keeper::reconcile_now). Neither a slow
//! scan nor a slow callback can delay the heartbeat, which lives in another
//! task and shares no lock with this one beyond short table lookups.
//!
//! Panics (see the `health` module): a scan or takeover call that panics is
//! an error of its pass, a callback that panics is a failed callback, a pass
//! that panics anyway answers [`ReconcileError::Panicked`], and the loop
//! restarts after a panic of its own. The single-flight flag is released by
//! a drop guard ([`Flight`]) however a pass ends.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{OrphanHandling, ReconcileAction};
use super::health::{self, Task};
use super::run_guard::RunGuard;
use super::{telemetry, Shared, ORPHANED, RELEASED, RELEASED_ERROR};
use crate::held::unknown_answer;
use tenure_lease_core::LeaseRecord;
use tenure_lease_core::{Error, ErrorKind};
use tenure_lease_core::{ExpiredQuery, TakeoverAction, TakeoverRequest};
use tenure_lease_core::{SkippedRecord, Takeover};

/// An orphan the reconciler won.
#[derive(Debug)]
pub struct Recovered {
    /// The record as it now is (owner: this keeper, new fence).
    pub record: LeaseRecord,
    /// With [`ReconcileAction::Adopt`]: the lease, now held and renewed by
    /// this keeper. Drop it without `complete()` to let it expire again.
    pub guard: Option<RunGuard>,
}

/// What the recovery callback may fail with.
pub type RecoveryError = Box<dyn std::error::Error + Send + Sync>;

/// The future a recovery callback returns.
pub type RecoveryFuture = Pin<Box<dyn Future<Output = Result<(), RecoveryError>> + Send>>;

/// The recovery callback, called once per recovered orphan.
pub type RecoveryCallback = Arc<dyn Fn(Recovered) -> RecoveryFuture + Send + Sync>;

/// What one reconciler pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Expired records the scan returned.
    pub scanned: usize,
    /// Ids this keeper won and recovered (handed to the callback), in scan
    /// order.
    pub recovered: Vec<String>,
    /// Ids this keeper won and released silently (failed with stop reason
    /// [`RELEASED`](super::RELEASED), no callback), in scan order.
    pub released: Vec<String>,
    /// Ids skipped because this keeper holds them.
    pub skipped_own: Vec<String>,
    /// Records the scan matched but could not decode (also logged and
    /// counted): they need an operator's attention.
    pub undecodable: Vec<SkippedRecord>,
    /// Takeovers answered `NotTaken` (a peer won, or the owner renewed).
    pub not_taken: usize,
    /// Takeovers the store could not answer.
    pub claim_errors: usize,
    /// Recovered ids whose callback failed.
    pub callback_failed: Vec<String>,
}

/// Why [`Keeper::reconcile_now`](super::Keeper::reconcile_now) ran no pass.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// Another pass is running; this trigger did nothing.
    #[error("a reconciler pass is already running")]
    AlreadyRunning,
    /// The keeper is shutting down.
    #[error("the keeper is shutting down")]
    Stopped,
    /// The scan failed (a scan that panicked inside the store answers this
    /// too, as an `Unavailable` error naming the panic).
    #[error("the orphan scan failed: {0}")]
    Scan(#[source] Error),
    /// The pass panicked (outside a store call or callback, which are caught
    /// on their own); it was logged and counted, and the next pass runs as
    /// usual.
    #[error("the reconciler pass panicked: {0}")]
    Panicked(String),
}

/// `?` from [`Keeper::reconcile_now`](super::Keeper::reconcile_now) into a
/// function answering [`tenure_lease_core::Result`]: a failed scan keeps its kind, a
/// stopping keeper is [`ErrorKind::Stopped`], a pass already running or one
/// that panicked is [`ErrorKind::Unavailable`] (the next pass may do it).
impl From<ReconcileError> for Error {
    fn from(error: ReconcileError) -> Self {
        let kind = match &error {
            ReconcileError::Scan(store) => store.kind(),
            ReconcileError::Stopped => ErrorKind::Stopped,
            ReconcileError::AlreadyRunning | ReconcileError::Panicked(_) => ErrorKind::Unavailable,
        };
        Error::converted(kind, error)
    }
}

pub(crate) type PassReply = oneshot::Sender<Result<ReconcileReport, ReconcileError>>;

/// The claimed single-flight flag, released when the pass ends however it
/// ends: answered, panicked, or cancelled by shutdown.
struct Flight<'a>(&'a AtomicBool);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The reconciler task: serves passes, restarting the loop after a panic.
pub(crate) async fn run(
    shared: Arc<Shared>,
    callback: Option<RecoveryCallback>,
    mut requests: mpsc::Receiver<PassReply>,
    stop: CancellationToken,
) {
    let mut next_pass = Instant::now();
    loop {
        let served = serve(
            &shared,
            callback.as_ref(),
            &mut requests,
            &stop,
            &mut next_pass,
        );
        let Err(payload) = health::catch(served).await else {
            return;
        };
        shared.panics.record(
            Task::Reconciler,
            &*payload,
            "the reconciler loop panicked; restarting it",
        );
    }
}

async fn serve(
    shared: &Arc<Shared>,
    callback: Option<&RecoveryCallback>,
    requests: &mut mpsc::Receiver<PassReply>,
    stop: &CancellationToken,
    next_pass: &mut Instant,
) {
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            Some(reply) = requests.recv() => {
                // The caller claimed the flight before sending.
                let flight = Flight(&shared.reconciling);
                let report = caught_pass(shared, callback, stop).await;
                drop(flight);
                let _ = reply.send(report);
            }
            _ = tokio::time::sleep_until(*next_pass), if shared.config.auto_reconcile => {
                *next_pass = Instant::now() + shared.config.reconcile_interval;
                if shared.claim_reconcile_flight() {
                    let _flight = Flight(&shared.reconciling);
                    if let Err(error) = caught_pass(shared, callback, stop).await {
                        tracing::warn!(%error, "reconciler pass failed");
                    }
                }
            }
        }
    }
}

/// One pass, a panic in it answered as [`ReconcileError::Panicked`].
async fn caught_pass(
    shared: &Arc<Shared>,
    callback: Option<&RecoveryCallback>,
    stop: &CancellationToken,
) -> Result<ReconcileReport, ReconcileError> {
    match health::catch(pass(shared, callback, stop)).await {
        Ok(answer) => answer,
        Err(payload) => Err(ReconcileError::Panicked(shared.panics.record(
            Task::Reconciler,
            &*payload,
            "a reconciler pass panicked; it ended there, the next pass runs as usual",
        ))),
    }
}

async fn pass(
    shared: &Arc<Shared>,
    callback: Option<&RecoveryCallback>,
    stop: &CancellationToken,
) -> Result<ReconcileReport, ReconcileError> {
    let config = &shared.config;
    let query = ExpiredQuery::new(config.grace).limit(config.reconcile_limit);
    let scan_call = shared.store.list_expired(&query);
    let scan_call = health::store_call(&shared.panics, Task::Reconciler, "list_expired", scan_call);
    let scan = shared
        .bounded("list_expired", scan_call)
        .await
        .map_err(ReconcileError::Scan)?;
    for skipped in &scan.skipped {
        tracing::warn!(lease.id = %skipped.id, reason = %skipped.reason, "the orphan scan met an undecodable record");
    }
    telemetry::undecodable(scan.skipped.len());
    let mut report = ReconcileReport {
        scanned: scan.records.len(),
        undecodable: scan.skipped,
        ..ReconcileReport::default()
    };
    let recover = match &config.reconcile_action {
        ReconcileAction::Fail { error } => TakeoverAction::Fail {
            error: error.clone(),
            stop_reason: Some(ORPHANED.to_owned()),
        },
        ReconcileAction::Adopt => TakeoverAction::Adopt { ttl: config.ttl },
    };
    let release = TakeoverAction::Fail {
        error: RELEASED_ERROR.to_owned(),
        stop_reason: Some(RELEASED.to_owned()),
    };
    let mut recovered = Vec::new();
    for record in scan.records {
        if stop.is_cancelled() || !shared.is_accepting() {
            break;
        }
        if shared.holds(&record.id) {
            report.skipped_own.push(record.id);
            continue;
        }
        let handling = config.reconcile_kinds.handling(&record.kind);
        let action = match handling {
            OrphanHandling::Recover => &recover,
            OrphanHandling::ReleaseSilently => &release,
        };
        let request = TakeoverRequest {
            id: record.id.clone(),
            claimer: shared.worker_id.clone(),
            grace: config.grace,
            action: action.clone(),
        };
        let sent = Instant::now();
        let claim_call = shared.store.claim_for_takeover(&request);
        let claim_call = health::store_call(
            &shared.panics,
            Task::Reconciler,
            "claim_for_takeover",
            claim_call,
        );
        match tokio::time::timeout(config.store_timeout, claim_call).await {
            Ok(Ok(Takeover::Taken(record))) if handling == OrphanHandling::ReleaseSilently => {
                telemetry::takeover("release");
                tracing::info!(lease.id = %record.id, lease.kind = %record.kind, fence = record.fence, action = "release", "released orphan silently");
                report.released.push(record.id);
            }
            Ok(Ok(Takeover::Taken(record))) => {
                let adopted = matches!(action, TakeoverAction::Adopt { .. });
                telemetry::takeover(if adopted { "adopt" } else { "fail" });
                tracing::info!(lease.id = %record.id, fence = record.fence, adopted, "recovered orphan");
                let guard = if adopted {
                    match shared.hold(&record, sent) {
                        Ok(guard) => Some(guard),
                        Err(error) => {
                            tracing::error!(lease.id = %record.id, %error, "adopted record cannot be held");
                            None
                        }
                    }
                } else {
                    None
                };
                report.recovered.push(record.id.clone());
                recovered.push(Recovered { record, guard });
            }
            Ok(Ok(Takeover::NotTaken(reason))) => {
                tracing::debug!(lease.id = %record.id, ?reason, "orphan not taken");
                report.not_taken += 1;
            }
            Ok(Ok(other)) => {
                let error = unknown_answer("claim_for_takeover", &other);
                tracing::warn!(lease.id = %record.id, %error, "takeover could not be confirmed");
                report.claim_errors += 1;
            }
            Ok(Err(error)) => {
                tracing::warn!(lease.id = %record.id, %error, "takeover could not be confirmed");
                report.claim_errors += 1;
            }
            Err(_) => {
                tracing::warn!(lease.id = %record.id, "takeover got no answer within the store timeout");
                report.claim_errors += 1;
            }
        }
    }
    if let Some(callback) = callback {
        for item in recovered {
            let id = item.record.id.clone();
            // Called inside the catch, so a panic while building the future
            // is caught too; an adopted guard the callback held is dropped
            // with it, leaving the lease to expire.
            match health::catch(async { callback(item).await }).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    telemetry::recovery_failure();
                    tracing::error!(lease.id = %id, error = %DisplayError(&*error), "recovery callback failed");
                    report.callback_failed.push(id);
                }
                Err(payload) => {
                    telemetry::recovery_failure();
                    shared.panics.record(
                        Task::RecoveryCallback,
                        &*payload,
                        &format!("recovery callback panicked for {id}; counted as failed"),
                    );
                    report.callback_failed.push(id);
                }
            }
        }
    }
    if !report.callback_failed.is_empty() {
        tracing::error!(
            recovered = ?report.recovered,
            failed = ?report.callback_failed,
            "recovery callback failed; these leases were taken over by this keeper and need attention"
        );
    }
    Ok(report)
}

struct DisplayError<'a>(&'a (dyn std::error::Error + Send + Sync));

impl fmt::Display for DisplayError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

//! The reconciler: finds other workers' orphans (`list_expired`), wins them
//! (`claim_for_takeover`) and hands them to the recovery callback.
//!
//! It runs in its own task, single-flight: a pass is never started while
//! another runs, whether triggered by its timer or by
//! [`Keeper::reconcile_now`](super::Keeper::reconcile_now). Neither a slow
//! scan nor a slow callback can delay the heartbeat, which lives in another
//! task and shares no lock with this one beyond short table lookups.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::ReconcileAction;
use super::guard::RunGuard;
use super::{telemetry, Shared, ORPHANED};
use crate::error::Error;
use crate::outcome::{SkippedRecord, Takeover};
use crate::record::LeaseRecord;
use crate::request::{ExpiredQuery, TakeoverAction, TakeoverRequest};

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
    /// Ids this keeper won, in scan order.
    pub recovered: Vec<String>,
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
    /// The scan failed.
    #[error("the orphan scan failed: {0}")]
    Scan(#[source] Error),
}

pub(crate) type PassReply = oneshot::Sender<Result<ReconcileReport, ReconcileError>>;

pub(crate) async fn run(
    shared: Arc<Shared>,
    callback: Option<RecoveryCallback>,
    mut requests: mpsc::Receiver<PassReply>,
    stop: CancellationToken,
) {
    let mut next_pass = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            Some(reply) = requests.recv() => {
                // The caller claimed the flight before sending.
                let report = pass(&shared, callback.as_ref(), &stop).await;
                shared.reconciling.store(false, Ordering::Release);
                let _ = reply.send(report);
            }
            _ = tokio::time::sleep_until(next_pass), if shared.config.auto_reconcile => {
                next_pass = Instant::now() + shared.config.reconcile_interval;
                if shared.claim_reconcile_flight() {
                    if let Err(error) = pass(&shared, callback.as_ref(), &stop).await {
                        tracing::warn!(%error, "reconciler pass failed");
                    }
                    shared.reconciling.store(false, Ordering::Release);
                }
            }
        }
    }
}

async fn pass(
    shared: &Arc<Shared>,
    callback: Option<&RecoveryCallback>,
    stop: &CancellationToken,
) -> Result<ReconcileReport, ReconcileError> {
    let config = &shared.config;
    let query = ExpiredQuery::new(config.grace).limit(config.reconcile_limit);
    let scan =
        match tokio::time::timeout(config.store_timeout, shared.store.list_expired(&query)).await {
            Ok(Ok(scan)) => scan,
            Ok(Err(error)) => return Err(ReconcileError::Scan(error)),
            Err(_) => {
                return Err(ReconcileError::Scan(Error::new(
                    crate::error::ErrorKind::Timeout,
                    "list_expired got no answer within the keeper's store timeout",
                )))
            }
        };
    for skipped in &scan.skipped {
        tracing::warn!(lease.id = %skipped.id, reason = %skipped.reason, "the orphan scan met an undecodable record");
    }
    telemetry::undecodable(scan.skipped.len());
    let mut report = ReconcileReport {
        scanned: scan.records.len(),
        undecodable: scan.skipped,
        ..ReconcileReport::default()
    };
    let action = match &config.reconcile_action {
        ReconcileAction::Fail { error } => TakeoverAction::Fail {
            error: error.clone(),
            stop_reason: Some(ORPHANED.to_owned()),
        },
        ReconcileAction::Adopt => TakeoverAction::Adopt { ttl: config.ttl },
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
        let request = TakeoverRequest {
            id: record.id.clone(),
            claimer: shared.worker_id.clone(),
            grace: config.grace,
            action: action.clone(),
        };
        let sent = Instant::now();
        match tokio::time::timeout(
            config.store_timeout,
            shared.store.claim_for_takeover(&request),
        )
        .await
        {
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
            if let Err(error) = callback(item).await {
                telemetry::recovery_failure();
                tracing::error!(lease.id = %id, error = %DisplayError(&*error), "recovery callback failed");
                report.callback_failed.push(id);
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

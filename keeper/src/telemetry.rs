//! The keeper's metrics: their catalogue ([`METRICS`]) and the calls that
//! record them, in one place so the names cannot drift from the list.
//!
//! Named as [`tenure_lease_core::telemetry`] explains (dotted, under
//! `tenure.keeper.`; `db.operation.name` where a store call is counted).
//! Call [`describe`](tenure_lease_core::telemetry::describe) with
//! [`METRICS`] after installing a recorder to give an exporter their units
//! and descriptions.

use std::time::Duration;

use tenure_lease_core::telemetry::{attribute, Metric};

use super::loss::LossCause;

/// What the keeper's labels are named.
pub mod label {
    /// Why work stopped: a [`LossCause::label`](crate::LossCause::label).
    pub const LOSS_REASON: &str = "tenure.loss.reason";
    /// What a won takeover did: `fail`, `adopt`, `release` or `cancel`.
    pub const TAKEOVER_ACTION: &str = "tenure.takeover.action";
    /// The background task a caught panic came from: `heartbeat`,
    /// `reconciler`, `recovery_callback`.
    pub const TASK: &str = "tenure.task";
}

/// One renewal answer for one lease, by how it went.
pub const RENEWALS: Metric = Metric::counter(
    "tenure.keeper.renewals",
    "Renewal answers for held leases: renewed, lost, error, timeout, or late (a success that landed after the confirmed deadline).",
)
.attributes(&[attribute::OUTCOME]);
/// One store round trip of the heartbeat.
pub const RENEW_CALLS: Metric = Metric::counter(
    "tenure.keeper.renew_calls",
    "Store round trips of the heartbeat (renew, renew_many, renew_job, renew_jobs) and of progress reports (renew_with_progress, renew_job_with_progress).",
)
.attributes(&[attribute::DB_OPERATION_NAME]);
/// A run or job stopped because its ownership ended or became unknown.
pub const LOSSES: Metric = Metric::counter(
    "tenure.keeper.losses",
    "Runs and jobs stopped because their ownership ended or became unknown, by cause.",
)
.attributes(&[label::LOSS_REASON]);
/// Losses by a passed deadline.
pub const FAIL_STOPS: Metric = Metric::counter(
    "tenure.keeper.fail_stops",
    "Runs and jobs stopped because their confirmed deadline passed without a renewal (fail-stop).",
);
/// Takeovers the keeper won.
pub const TAKEOVERS: Metric = Metric::counter(
    "tenure.keeper.takeovers",
    "Takeovers the keeper won: orphans recovered (fail, adopt) or released silently (release), runs cancelled anywhere (cancel).",
)
.attributes(&[label::TAKEOVER_ACTION]);
/// Recovery callbacks that failed.
pub const RECOVERY_FAILURES: Metric = Metric::counter(
    "tenure.keeper.recovery_failures",
    "Recovery callbacks that failed for a recovered lease.",
);
/// Records the reconciler's scan could not decode.
pub const UNDECODABLE_RECORDS: Metric = Metric::counter(
    "tenure.keeper.undecodable_records",
    "Records the reconciler's scan of expired leases could not decode.",
);
/// Time left before the confirmed deadline when a renewal answered.
pub const LEASE_TIME_LEFT: Metric = Metric::histogram(
    "tenure.keeper.lease.time_left",
    "Time left before a lease's confirmed deadline when its renewal answered.",
);
/// Runs and jobs held.
pub const HELD_LEASES: Metric = Metric::gauge(
    "tenure.keeper.held_leases",
    "Runs and jobs the keeper holds.",
);
/// Panics caught in background tasks.
pub const TASK_PANICS: Metric = Metric::counter(
    "tenure.keeper.task_panics",
    "Panics caught in the keeper's background tasks, by task.",
)
.attributes(&[label::TASK]);

/// Every metric the keeper records.
pub const METRICS: &[Metric] = &[
    RENEWALS,
    RENEW_CALLS,
    LOSSES,
    FAIL_STOPS,
    TAKEOVERS,
    RECOVERY_FAILURES,
    UNDECODABLE_RECORDS,
    LEASE_TIME_LEFT,
    HELD_LEASES,
    TASK_PANICS,
];

/// One renewal answer for one lease: `renewed`, `lost`, `error`, `timeout`
/// or `late` (a success that landed after the confirmed deadline).
pub(crate) fn renewal(outcome: &'static str, time_left: Duration) {
    metrics::counter!(RENEWALS.name, attribute::OUTCOME => outcome).increment(1);
    metrics::histogram!(LEASE_TIME_LEFT.name).record(time_left.as_secs_f64());
}

/// One store round trip of the heartbeat (`renew`, `renew_many`,
/// `renew_job`, `renew_jobs`) or of a progress report
/// (`renew_with_progress`, `renew_job_with_progress`).
pub(crate) fn renew_call(call: &'static str) {
    metrics::counter!(RENEW_CALLS.name, attribute::DB_OPERATION_NAME => call).increment(1);
}

/// A run or job stopped because its ownership ended or became unknown.
pub(crate) fn loss(cause: &LossCause) {
    metrics::counter!(LOSSES.name, label::LOSS_REASON => cause.label()).increment(1);
    if matches!(cause, LossCause::DeadlinePassed) {
        metrics::counter!(FAIL_STOPS.name).increment(1);
    }
}

/// The keeper won a takeover: the reconciler recovered an orphan (`fail` or
/// `adopt`) or released it silently (`release`), or `cancel_anywhere` took a
/// run over to cancel it (`cancel`).
pub(crate) fn takeover(action: &'static str) {
    metrics::counter!(TAKEOVERS.name, label::TAKEOVER_ACTION => action).increment(1);
}

/// The recovery callback failed for one recovered lease.
pub(crate) fn recovery_failure() {
    metrics::counter!(RECOVERY_FAILURES.name).increment(1);
}

/// The number of runs and jobs held changed by `delta`.
pub(crate) fn held(delta: f64) {
    metrics::gauge!(HELD_LEASES.name).increment(delta);
}

/// Records a scan could not decode.
pub(crate) fn undecodable(count: usize) {
    if count > 0 {
        metrics::counter!(UNDECODABLE_RECORDS.name).increment(count as u64);
    }
}

/// A panic was caught in background `task` (`heartbeat`, `reconciler` or
/// `recovery_callback`).
pub(crate) fn task_panic(task: &'static str) {
    metrics::counter!(TASK_PANICS.name, label::TASK => task).increment(1);
}

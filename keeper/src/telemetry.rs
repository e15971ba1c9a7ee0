//! The keeper's metric names and the calls that record them, in one place
//! so the names listed in the [module docs](super) cannot drift.

use std::time::Duration;

use super::loss::LossCause;

pub(crate) const RENEWALS: &str = "tenure_keeper_renewals_total";
pub(crate) const RENEW_CALLS: &str = "tenure_keeper_renew_calls_total";
pub(crate) const LOSSES: &str = "tenure_keeper_losses_total";
pub(crate) const FAIL_STOPS: &str = "tenure_keeper_fail_stops_total";
pub(crate) const TAKEOVERS: &str = "tenure_keeper_takeovers_total";
pub(crate) const RECOVERY_FAILURES: &str = "tenure_keeper_recovery_failures_total";
pub(crate) const UNDECODABLE: &str = "tenure_keeper_undecodable_records_total";
pub(crate) const TIME_LEFT: &str = "tenure_keeper_lease_time_left_seconds";
pub(crate) const HELD: &str = "tenure_keeper_held_leases";
pub(crate) const TASK_PANICS: &str = "tenure_keeper_task_panics_total";

/// One renewal answer for one lease: `renewed`, `lost`, `error`, `timeout`
/// or `late` (a success that landed after the confirmed deadline).
pub(crate) fn renewal(outcome: &'static str, time_left: Duration) {
    metrics::counter!(RENEWALS, "outcome" => outcome).increment(1);
    metrics::histogram!(TIME_LEFT).record(time_left.as_secs_f64());
}

/// One store round trip of the heartbeat: `renew`, `renew_many`,
/// `renew_job` or `renew_jobs`.
pub(crate) fn renew_call(call: &'static str) {
    metrics::counter!(RENEW_CALLS, "call" => call).increment(1);
}

/// A run or job stopped because its ownership ended or became unknown.
pub(crate) fn loss(cause: &LossCause) {
    metrics::counter!(LOSSES, "reason" => cause.label()).increment(1);
    if matches!(cause, LossCause::DeadlinePassed) {
        metrics::counter!(FAIL_STOPS).increment(1);
    }
}

/// The keeper won a takeover: the reconciler recovered an orphan (`fail` or
/// `adopt`) or released it silently (`release`), or `cancel_anywhere` took a
/// run over to cancel it (`cancel`).
pub(crate) fn takeover(action: &'static str) {
    metrics::counter!(TAKEOVERS, "action" => action).increment(1);
}

/// The recovery callback failed for one recovered lease.
pub(crate) fn recovery_failure() {
    metrics::counter!(RECOVERY_FAILURES).increment(1);
}

/// The number of runs and jobs held changed by `delta`.
pub(crate) fn held(delta: f64) {
    metrics::gauge!(HELD).increment(delta);
}

/// Records a scan could not decode.
pub(crate) fn undecodable(count: usize) {
    if count > 0 {
        metrics::counter!(UNDECODABLE).increment(count as u64);
    }
}

/// A panic was caught in background `task` (`heartbeat`, `reconciler` or
/// `recovery_callback`).
pub(crate) fn task_panic(task: &'static str) {
    metrics::counter!(TASK_PANICS, "task" => task).increment(1);
}

//! Rate limits: at most so many admissions or claims per period, per key
//! ([contract §16](crate::contract)).
//!
//! A [`RateLimit`] names a **log**: its key, its number of permits and its
//! period together. The store keeps, per log, the instants (by its own
//! clock) of the last uses, never more than `permits` of them, and an
//! admission or a claim that carries the limit is judged against the log
//! and writes its use in the same atomic step: exactly, with no window
//! rounding and no check-then-write race. Two limits on one key with other
//! permits or another period are two logs.

use std::time::Duration;

/// At most [`permits`](Self::permits) uses of [`key`](Self::key) within any
/// [`period`](Self::period), judged by the store's clock.
///
/// A use at instant `t` counts until `t + period` (excluded). Admissions
/// ([`AdmitRequest::rate_limit`](crate::AdmitRequest::rate_limit)) use one
/// permit each when admitted; claims
/// ([`ClaimRequest::rate_limit`](crate::queue::ClaimRequest::rate_limit))
/// one per job claimed. A refused call uses none.
///
/// ```
/// use std::time::Duration;
/// use tenure_lease_core::rate::RateLimit;
///
/// // At most 10 calls to the payment provider per second, across workers.
/// let limit = RateLimit::new("payments-api", 10, Duration::from_secs(1));
/// assert_eq!(limit.permits, 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// What is limited: a name, shared by every caller naming it (leases and
    /// jobs alike) with the same permits and period.
    pub key: String,
    /// Uses allowed within any period, 1 to
    /// [`MAX_RATE_PERMITS`](crate::limits::MAX_RATE_PERMITS).
    pub permits: u32,
    /// The sliding window, whole milliseconds from
    /// [`MIN_RATE_PERIOD`](crate::limits::MIN_RATE_PERIOD) to
    /// [`MAX_RATE_PERIOD`](crate::limits::MAX_RATE_PERIOD).
    pub period: Duration,
}

impl RateLimit {
    /// At most `permits` uses of `key` within any `period`.
    pub fn new(key: impl Into<String>, permits: u32, period: Duration) -> Self {
        RateLimit {
            key: key.into(),
            permits,
            period,
        }
    }
}

//! Conformance cases: every decision follows the store's clock, not the
//! process's ([contract §2](tenure_lease_core::contract)).
//!
//! On one host the process clock and a server's agree, so a store that
//! reads the process clock for one decision (an expiry, a `run_at` default,
//! a reap, a retention cut-off) passes every other case. These run the
//! case's store on a clock an hour ahead of the process's and an hour
//! behind it ([`Ctx::offset_store`](crate::Ctx::offset_store)): every instant the store answers must
//! be near its own clock, and every decision must be the one its own clock
//! makes, which in each direction is the opposite of the one the process
//! clock would make. Skipped on a factory without
//! [`Factory::clock_offset`](crate::Factory::clock_offset).

pub mod lease;
pub mod queue;

use std::time::Duration;

use chrono::TimeDelta;
use tenure_lease_core::{clock, Clock, SystemClock, Timestamp};

use crate::ensure;
use crate::harness::Failure;

/// How far an instant the store answers may lie from its clock's reading
/// around the call: calls take far less, however loaded the machine, and
/// the offset is far more.
pub(super) const MARGIN: TimeDelta = TimeDelta::minutes(5);
/// Leases and claims of these cases: ten minutes, well inside the offset.
pub(super) const TTL: Duration = Duration::from_secs(600);

/// How far the store's clock runs from the process's, each way, with a
/// word for ids and messages.
pub(super) const OFFSETS: [(&str, TimeDelta); 2] = [
    ("ahead", TimeDelta::hours(1)),
    ("behind", TimeDelta::hours(-1)),
];

/// The store's clock as this process expects it: the process clock moved by
/// `offset`.
pub(super) fn expected_now(offset: TimeDelta) -> Timestamp {
    let now = SystemClock.now();
    now.checked_add_signed(offset).unwrap_or(now)
}

/// Fails unless `actual` lies within [`MARGIN`] of `expected`.
pub(super) fn ensure_near(
    actual: Timestamp,
    expected: Timestamp,
    what: &str,
) -> Result<(), Failure> {
    let apart = actual.signed_duration_since(expected).abs();
    ensure!(
        apart <= MARGIN,
        "{what}: the store answered {actual}, {apart} from its own clock's {expected}; it \
         read another clock (the process's?)"
    );
    Ok(())
}

/// `instant` plus a standard duration.
pub(super) fn plus(instant: Timestamp, duration: Duration) -> Timestamp {
    clock::add(instant, duration)
}

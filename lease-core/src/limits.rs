//! The bounds on what a store accepts, the same on every backend: input
//! beyond one is refused as
//! [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), naming the
//! field, and changes nothing ([contract §11](crate::contract)). The
//! conformance kit reaches each bound exactly, from both sides.

use std::time::Duration;

/// Longest id, owner, scope or kind, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most scopes one record may hold.
pub const MAX_SCOPES: usize = 64;
/// Shortest lease: stores keep microseconds, leases are counted in milliseconds.
pub const MIN_TTL: Duration = Duration::from_millis(1);
/// Longest lease (30 days); longer is almost certainly a unit mistake.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest grace, the same bound as [`MAX_TTL`].
pub const MAX_GRACE: Duration = MAX_TTL;
/// Shortest [`UniquePolicy::ForPeriod`](crate::queue::UniquePolicy::ForPeriod);
/// periods are whole milliseconds.
pub const MIN_UNIQUE_PERIOD: Duration = Duration::from_millis(1);
/// Longest [`UniquePolicy::ForPeriod`](crate::queue::UniquePolicy::ForPeriod)
/// (366 days: a yearly job's key, with a leap day to spare).
pub const MAX_UNIQUE_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// Most permits of one [`RateLimit`](crate::rate::RateLimit): the store
/// keeps one instant per permit in use.
pub const MAX_RATE_PERMITS: u32 = 1000;
/// Shortest [`RateLimit`](crate::rate::RateLimit) period; periods are whole
/// milliseconds.
pub const MIN_RATE_PERIOD: Duration = Duration::from_millis(1);
/// Longest [`RateLimit`](crate::rate::RateLimit) period (366 days).
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// Largest capacity of a counted scope
/// ([`AdmitRequest::counted_scope`](crate::AdmitRequest::counted_scope)):
/// holders of its slots at most.
pub const MAX_SCOPE_CAPACITY: u32 = 1000;
/// Longest retention accepted by `purge` and `purge_jobs` (100 years).
pub const MAX_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Largest metadata object, serialised as JSON.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;
/// Largest progress report of a run or job, serialised as JSON: progress
/// rides on renewals, so it stays small.
pub const MAX_PROGRESS_BYTES: usize = 4 * 1024;
/// Deepest nesting of arrays and objects in metadata or a job payload (the
/// outermost value counts as one level): stores that keep JSON as text decode
/// it with `serde_json`, which refuses more than 128 levels, so a deeper value
/// would be stored and then never read back.
pub const MAX_JSON_DEPTH: usize = 64;
/// Longest error or stop-reason text, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Largest `limit` of a listing.
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Most claims in one `renew_many`, `renew_jobs` or `complete_many` call.
pub const MAX_BATCH: usize = 100_000;
/// Largest fence a gate ([`FenceStore`](crate::FenceStore)) accepts,
/// 2^53 − 1: above every fence a store hands out (Redis's stop below
/// 2^53 − 2^32), and the largest integer every store compares exactly
/// (Redis's Lua numbers are doubles).
pub const MAX_GATE_FENCE: u64 = (1 << 53) - 1;
/// Most jobs one `claim` hands out.
pub const MAX_CLAIM: usize = 1000;
/// Most jobs one `reap` handles.
pub const MAX_REAP: usize = 1000;
/// Largest `max_attempts`.
pub const MAX_ATTEMPTS: u32 = 1000;
/// Largest payload, serialised as JSON.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

//! # backend-sqlite
//!
//! A [`LeaseStore`](tenure_lease_core::LeaseStore) and [`JobQueue`](tenure_lease_core::JobQueue) in one SQLite
//! file: the backend that needs no server. Through the facade it is
//! `tenure::sqlite::SqliteStore` (feature `sqlite`), also opened by
//! `tenure::connect("sqlite:///path")`.
//! Several stores, in one process or in several processes on one host, may
//! share a file; SQLite's locking keeps every operation atomic across all of
//! them. It honours the whole [contract](tenure_lease_core::contract) and passes
//! the conformance kit, like the server backends.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_sqlite::SqliteStore;
//! use tenure_lease_core::{AdmitRequest, LeaseStore, Renewal};
//!
//! let store = SqliteStore::connect("sqlite:///var/lib/app/leases.db").await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("job-1", "worker-a").scope("thread:42").ttl(Duration::from_secs(30)))
//!     .await?;
//! let claim = admission.admitted().and_then(|record| record.claim()).expect("admitted");
//! assert!(matches!(store.renew(&claim, Duration::from_secs(30)).await?, Renewal::Renewed { .. }));
//! # Ok(()) }
//! ```
//!
//! ## The file
//!
//! Opening creates the file (and the directories above it that are missing)
//! and its schema, or migrates an older schema
//! forward. The version is kept in `PRAGMA user_version`; a file written by a
//! newer version of this crate is refused with
//! [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible), never
//! downgraded. Tables:
//!
//! * `leases`: one row per record. Timestamps are INTEGER microseconds since
//!   the Unix epoch, `metadata` is JSON text, `status` the status's
//!   lower-case name.
//! * `lease_scopes`: every (lease, scope) pair, until the record is purged.
//! * `held_scopes`: one row per scope held by an active record, keyed by
//!   the scope's slot key
//!   ([`slot_key`](tenure_lease_core::backend::rules::slot_key): the scope
//!   itself for an exclusive scope or slot 0 of a counted one, else the
//!   scope, U+001F and the slot number) as primary key: "at most one active
//!   record per scope, or per slot of a counted scope" is enforced by SQLite
//!   itself, not only by this code.
//! * `fence_counter`: the store-wide fence sequence, one row. It survives
//!   purges and restarts, so fences never repeat in a file. Job claims draw
//!   from it too, so a job's fence and a lease's are never the same number.
//! * `jobs` (schema version 2): one row per job, timestamps as above,
//!   `payload` JSON text, `required_capabilities` a JSON array of strings,
//!   `state` and `dead_reason` their lower-case names. Partial indexes keep
//!   the queued jobs of each queue in claim order, claimed jobs by lease
//!   expiry (for `reap`) and dead letters by last update; since schema
//!   version 3, one more keeps finished jobs by finish time, for
//!   `purge_jobs`.
//! * `fence_gates` (schema version 4): one row per fence gate
//!   ([`FenceStore`](tenure_lease_core::FenceStore)): the resource, the
//!   highest fence accepted and when it last was (microseconds), indexed by
//!   that time for `purge_fences`. [`FenceTable`] checks a gate inside a
//!   transaction of the caller's on the same file, so a write to the
//!   caller's own tables and the gate commit together.
//! * Schema version 5 adds the take-back trace to `jobs` (`taken_back`, a
//!   count, 0 for jobs stored before; `taken_back_at`, microseconds or
//!   `NULL`) and indexes interrupted records with the terminal ones by last
//!   update (`leases_finished_by_update`), for `purge`.
//! * Schema version 6 adds `progress` (JSON text) to `leases` and `jobs`,
//!   version 7 the uniqueness keys of `jobs`, version 8 the table
//!   `rate_logs` (one row per rate limit: its uses, a JSON array of
//!   microseconds).
//! * Schema version 9 adds counted scopes
//!   ([contract §17](tenure_lease_core::contract)): `leases.slots`, the
//!   slot a record holds in each counted scope as a JSON object
//!   (`{"exports": 2}`), `NULL` for a record with exclusive scopes only,
//!   every record stored before included. `held_scopes` is by slot key from
//!   then on; the rows stored before are slot 0's keys already, so the
//!   upgrade rewrites nothing.
//!
//! Besides the file, SQLite keeps `<file>-wal` and `<file>-shm` next to it
//! while it is open: back up with SQLite's backup API or `VACUUM INTO`, not
//! by copying the file alone.
//!
//! ## Write-ahead logging and durability
//!
//! The file runs in WAL mode: readers never wait for the writer, and a
//! commit appends to the log instead of rewriting pages. How safe a commit
//! is is [`Durability`]: `synchronous = FULL` by default (every answered
//! write survives a power loss, at the cost of one `fsync` per operation),
//! or `NORMAL` (several times faster; survives a process crash, but a power
//! loss may roll back the last writes, fence increments included). WAL needs
//! shared memory between the processes: keep the file on a local file
//! system, not on a network share.
//!
//! ## Concurrency, the busy timeout and several processes
//!
//! Each store owns one connection on a dedicated OS thread; an operation is
//! one round trip into that thread, so SQLite's blocking calls never block
//! the async runtime. Every write runs in one `BEGIN IMMEDIATE` transaction:
//! it takes the file's write lock before reading, decides with
//! [`tenure_lease_core::backend::rules`] (or [`tenure_lease_core::backend::queue_rules`] for jobs), writes,
//! commits. Transactions of all stores and processes on the file are
//! thereby serialised, which is what makes racing admissions and takeovers
//! have exactly one winner, racing admissions of a counted scope never
//! take more slots than its capacity (the slots' holders are read and the
//! slot chosen inside the admission's transaction), and racing job claimers
//! never share a job. A
//! writer waits for the lock up to the
//! [busy timeout](SqliteConfig::busy_timeout) (5 s by default); past it the
//! operation fails with the retryable
//! [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable), having
//! changed nothing; it is never reported as lost or as a conflict.
//!
//! ## The clock: keep the host's wall clock from stepping
//!
//! Expiry is judged by the store's [`Clock`]: `admit` and `renew` store
//! `now + ttl`, and `claim_for_takeover`, `list_expired`, admission over an
//! expired holder and the queue's `claim` (`run_at`) and `reap` compare
//! what is stored with `now`. The default is
//! [`SystemClock`](tenure_lease_core::SystemClock), the host's wall clock
//! (`CLOCK_REALTIME`), so every process sharing the file agrees (it must be
//! on one host anyway, see WAL above). Tests inject a
//! [`ManualClock`](tenure_lease_core::ManualClock) with [`SqliteConfig::clock`].
//!
//! A keeper (`tenure-keeper`), though, trusts its own lease by a
//! monotonic clock: until the send instant of its last confirmed renewal
//! plus the ttl (the keeper's `RunGuard::confirmed_deadline`).
//! A *step* of the wall clock moves the store's judgement and not the
//! keeper's:
//!
//! * **Forward by `S`**: every lease and job claim looks `S` older to the
//!   store. With `S` larger than the grace a taker allows, a lease can be
//!   taken over (a job reaped and claimed again) up to `S − grace` before
//!   its holder stops trusting it: for that long two workers each believe
//!   they hold it, and both may work.
//! * **Backward by `S`**: everything looks `S` younger. A live holder loses
//!   nothing, but an orphan is taken over, a dead worker's job reaped, a
//!   `run_at` or retry backoff reached and a purge retention over `S` later
//!   than they should be.
//!
//! Fences still protect what the lease guards: a takeover draws a new,
//! larger fence, so a resource that checks fences (a
//! [`FenceGate`](tenure_lease_core::FenceGate), a conditional write) refuses the
//! displaced holder's writes once it has seen the taker's, and the
//! displaced holder's next renewal answers `Lost`, which fail-stops its
//! keeper. A step costs duplicated work, not a corrupted resource, provided
//! the resource checks fences.
//!
//! So run hosts whose clock is **slewed, never stepped**, once booted:
//!
//! * chrony: allow steps only during boot (`makestep 1 3`: step if off by
//!   more than 1 s, in the first three updates only) or not at all (no
//!   `makestep`); never `makestep` with a limit of `-1`, and no
//!   `chronyc makestep` by hand. While chrony slews, the clock runs fast or
//!   slow by up to `maxslewrate` (83,333 ppm by default, 1/12): a 30 s lease
//!   may end 2.5 s early, so keep the grace above `ttl × maxslewrate` or
//!   lower `maxslewrate` (e.g. `maxslewrate 500`).
//! * ntpd: start it with `-x`, which slews offsets up to 600 s instead of
//!   stepping those above 128 ms (ntpd slews at most 500 ppm).
//! * Never `date -s`, `ntpdate` or `hwclock --hctosys` on a running host,
//!   and expect a step when a virtual machine resumes from suspension or
//!   migrates: drain its workers first.
//!
//! A file used by one process only may instead take a
//! [`TokioClock`](tenure_lease_core::TokioClock) (`SqliteConfig::new(path).clock(Arc::new(TokioClock::new()))`,
//! created inside the runtime): it follows the keeper's monotonic clock
//! from the wall-clock time at its creation, so no step moves expiry while
//! the process runs. Processes sharing a file must all keep the default:
//! each `TokioClock` is anchored at its own start, and two anchored on
//! either side of a step disagree by the step.
//!
//! ## Damaged rows
//!
//! SQLite keeps any value in any column, so a row edited by hand (or by
//! another program) may hold text, a float or a blob where an integer
//! belongs, an instant no [`Timestamp`](tenure_lease_core::Timestamp) can represent, an unknown status,
//! malformed JSON, text that is not UTF-8. Such a row is skipped by
//! `list_expired` and reported in
//! [`ExpiredScan::skipped`](tenure_lease_core::ExpiredScan) and as a `tracing`
//! warning; a job row likewise by `claim` and `reap` (as a warning); any
//! other operation that needs it answers
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt), naming the row
//! and the column, and changes nothing (a `slots` value that is not a JSON
//! object of slot numbers, or names a scope the record does not, is such
//! damage). A damaged `held_scopes` row or fence
//! counter is `Corrupt` too: the fence sequence is never restarted from a
//! value that is not a fence. Nothing panics.
//!
//! A job whose `queue` or `state` is damaged is invisible to `claim`,
//! `reap` and `list_dead_letters` (they find jobs by those columns) and
//! `Corrupt` for `get_job`. Damage that still decodes cannot be told from
//! data: a deleted `held_scopes` row frees its scope (or slot), a changed
//! `lease_scopes.lease_id` detaches the scope from its record.

mod config;
mod connection;
mod error;
mod gate;
mod jobs;
mod lease;
mod lease_ops;
mod queue;
mod queue_ops;
mod rate_logs;
mod records;
mod schema;

use std::path::Path;
use std::sync::Arc;

use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::{Clock, Result};

pub use config::{Durability, SqliteConfig, DEFAULT_BUSY_TIMEOUT, URL_SCHEMES};
pub use gate::FenceTable;
/// The rusqlite this crate runs on, for the connections [`FenceTable`]
/// checks on.
pub use rusqlite;
pub use schema::SCHEMA_VERSION;

use connection::ConnectionThread;

/// A lease store in a SQLite file. See the [crate docs](crate).
///
/// Cloning is cheap and shares the connection thread, which stops when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    connection: ConnectionThread,
    clock: Arc<dyn Clock>,
    path: Arc<Path>,
    releases: ReleaseBoard,
}

impl tenure_lease_core::backend::stores::Backend for SqliteStore {
    const NAME: &'static str = "SQLite";
    const SYSTEM: &'static str = "sqlite";

    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        Some(&self.releases)
    }
}

tenure_lease_core::serve_backend!(SqliteStore);

impl SqliteStore {
    /// Opens the store in the file `config` names, creating or migrating its
    /// schema. `config` is a [`SqliteConfig`], or what converts into one: a
    /// path, or a location as [`SqliteConfig::from_url`] reads it
    /// (`SqliteStore::connect("sqlite:///var/lib/app/leases.db")`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible)
    /// when the file's schema is newer than this crate's, and
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) when the
    /// location is not one [`SqliteConfig::from_url`] accepts, or the file
    /// cannot be opened or cannot use WAL.
    pub async fn connect(config: impl Into<SqliteConfig>) -> Result<Self> {
        let config = config.into();
        config.check()?;
        let clock = Arc::clone(&config.clock);
        let path = Arc::from(config.path.as_path());
        let connection = ConnectionThread::start(config).await?;
        Ok(SqliteStore {
            connection,
            clock,
            path,
            releases: ReleaseBoard::in_process(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

//! # tenure
//!
//! Distributed **leases**, **fencing tokens** and **claim-for-takeover** for
//! workers (pods, processes, cron hosts) that must agree who owns a run, a job
//! or a thread, and recover safely when an owner dies, stalls or is cut off.
//!
//! The rules every backend honours, in numbered sections the code cites as
//! "contract §n", are in [`contract`].
//!
//! This facade re-exports the core contract ([`LeaseStore`], the typed
//! outcomes, [`FenceGate`] and [`FenceStore`], ...) and each backend behind
//! a Cargo feature:
//!
//! | feature    | module       | store |
//! |------------|--------------|-------|
//! | `memory` (default) | [`memory`] | in-process, for tests and single-process use |
//! | `sqlite`   | `sqlite`     | embedded file, several processes on one host |
//! | `postgres` | `postgres`   | PostgreSQL via sqlx |
//! | `redis`    | `redis`      | Redis via Lua scripts |
//! | `etcd`     | `etcd`       | an etcd cluster: leases that survive the loss of a member |
//! | `mysql`    | `mysql`      | MySQL 8 or MariaDB 10.6+ via sqlx |
//! | `full`     | all of them  | |
//! | `conformance` | `conformance` | the conformance kit, to test a backend of your own |
//!
//! [`connect`] opens whichever backend a URL names (`memory:`,
//! `sqlite:PATH`, `postgres://...`, `redis://...`, `etcd://...`,
//! `mysql://...`) as one
//! [`Arc<dyn Store>`](Store); each backend's own `connect` takes its config,
//! or a URL.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::memory::MemoryStore;
//! use tenure::{Admission, AdmitRequest, LeaseStore, StatusChange, Transition};
//!
//! let store = MemoryStore::new();
//! let request = AdmitRequest::new("invoice-run-42", "worker-a")
//!     .scope("account:42")
//!     .ttl(Duration::from_secs(30));
//! let Admission::Admitted { record, .. } = store.admit(&request).await? else {
//!     return Ok(()); // someone else holds account:42
//! };
//! let claim = record.claim().expect("an admitted record has an owner");
//! store.renew(&claim, Duration::from_secs(30)).await?;
//! let done = store.transition(&claim, &StatusChange::succeeded()).await?;
//! assert!(matches!(done, Transition::Applied(_)));
//! # Ok(()) }
//! ```

mod connect;
mod deployment;
pub mod telemetry;
pub use connect::{connect, Connect, Store};
pub use deployment::{Finding, Verdict, CLOCK_SKEW_WARNING};
/// URLs without their passwords, for messages and logs (what every
/// backend's `Debug` and errors print).
pub use tenure_lease_core::redact::redact_url;

// What users need; `tenure_lease_core::backend` (rules, validation) is for
// backend authors and stays in the core crate.
pub use tenure_keeper as keeper;
pub use tenure_lease_core::{clock, contract, layer, limits, queue, rate, release, tls, wait};
pub use tenure_lease_core::{
    generate_id, Admission, AdmitRequest, AdmitStrategy, Claim, Clock, Error, ErrorKind,
    ExpiredQuery, ExpiredScan, FenceCheck, FenceGate, FenceStore, GateRecord, Instrumented,
    JobQueue, LayerExt, LeaseRecord, LeaseStore, LossReason, ManualClock, NotTakenReason, Renewal,
    Result, SkippedRecord, StaleFence, Status, StatusChange, SystemClock, Takeover, TakeoverAction,
    TakeoverRequest, Timestamp, TokioClock, Transition, TransitionRejection, DEFAULT_KIND,
};
// The keeper, its answers and its errors (each error converts into
// [`Error`] with `?`).
pub use tenure_keeper::{
    AdmitOutcome, CancelAnywhereOutcome, CancelOutcome, JobGuard, JobWriteError, Keeper,
    KeeperConfig, KeeperError, KeeperHealth, KeeperState, LossCause, OwnershipLost, ReconcileError,
    ReconcileReport, RunGuard, ShutdownReport, WriteError,
};
pub use tenure_keeper::{Election, Leadership, Schedule, Term, TermEnd, Tick, TickOutcome, Ticker};

// The Rust snippets of the README, of the guide it links to and of the
// deployment notes (those not marked `ignore`), compiled and run as
// doctests; they use every backend, so they build with `full`. (The backend
// author's guide is `tenure-backend-file`'s docs, tested there.)
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../GUIDE.md")]
struct GuideSnippets;

#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../DEPLOYING.md")]
struct DeployingSnippets;

/// The in-memory backend.
#[cfg(feature = "memory")]
pub use tenure_backend_memory as memory;

/// The SQLite backend.
#[cfg(feature = "sqlite")]
pub use tenure_backend_sqlite as sqlite;

#[cfg(feature = "mysql")]
pub use tenure_backend_mysql as mysql;
/// The PostgreSQL backend.
#[cfg(feature = "postgres")]
pub use tenure_backend_postgres as postgres;

/// The Redis backend.
#[cfg(feature = "redis")]
pub use tenure_backend_redis as redis;

/// The etcd backend.
#[cfg(feature = "etcd")]
pub use tenure_backend_etcd as etcd;

/// The conformance kit: the suite every backend passes, to run against a
/// backend of your own.
#[cfg(feature = "conformance")]
pub use tenure_conformance as conformance;

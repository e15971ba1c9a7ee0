//! # backend-file
//!
//! A tenure store in **one JSON file guarded by an OS file lock**: a
//! [`LeaseStore`](tenure_lease_core::LeaseStore), a
//! [`FenceStore`](tenure_lease_core::FenceStore) and a
//! [`JobQueue`](tenure_lease_core::JobQueue) that several processes on one
//! host share by opening the same path.
//!
//! ## Why it exists
//!
//! It is the worked example of [Writing a backend](writing_a_backend), the
//! guide for backend authors (`WRITING_A_BACKEND.md`, kept in this crate's
//! docs so that its examples run as this crate's doctests): a real backend,
//! held to the whole conformance kit in CI, written as a third
//! party writes theirs. It depends on nothing but the published backend API
//! of `tenure-lease-core` ([`tenure_lease_core::backend`]) and uses no
//! private code of another backend, so every line here is one you could
//! write outside this repository. Read it in this order:
//!
//! * `file.rs`: what makes each operation atomic (the lock, the temporary
//!   file, fsync, rename);
//! * `document.rs`: what the file holds, and how an entry that cannot be
//!   decoded becomes a typed `Corrupt` answer instead of a panic;
//! * `lease.rs`: the lease operations, each one call into the shared
//!   [`engine`](tenure_lease_core::backend::engine) over the document as a
//!   [`RecordTransaction`](tenure_lease_core::backend::engine::RecordTransaction),
//!   and the scans judged by the shared
//!   [`rules`](tenure_lease_core::backend::rules);
//! * `gate.rs` and `queue.rs`: the gates and the queue, decided by
//!   [`gate_rules`](tenure_lease_core::backend::gate_rules) and
//!   [`queue_rules`](tenure_lease_core::backend::queue_rules).
//!
//! Every operation is reached through the shared validating front
//! ([`stores`](tenure_lease_core::backend::stores)), so bad input is
//! refused before the file is touched.
//!
//! It suits a few processes on one host that want leases, fences and a
//! queue that survive restarts without a server. Each operation reads and
//! rewrites the whole file, and waits for the disk twice (fsync of the file
//! and of its directory): it is made for stores of thousands of entries and
//! tens of operations a second, not more. For more, use the SQLite backend,
//! which gives the same sharing with a real database underneath.
//!
//! ## Atomicity
//!
//! An operation takes the lock (exclusive to write, shared to read) on a
//! lock file beside the store's file (`<file>.lock`), reads and decodes the
//! document, decides, and, when it changed something, writes the new
//! document to `<file>.tmp`, fsyncs it, renames it over the file and fsyncs
//! the directory, then releases the lock. Readers and crashed writers see
//! the old document or the new one, never a part of one. An admission of a
//! counted scope reads the holders of its slots, chooses one and takes it
//! under that one lock, so racing admissions never hold more slots than
//! the capacity. A tool that edits
//! the file by hand must hold the same lock ([`FileStore::lock_path`]).
//!
//! The fence sequence is a number in the document, written in the same
//! rename as the records it fenced, so it never goes back, even when
//! records are purged or a process crashes.
//!
//! ## The clock
//!
//! Expiry is judged by the **host's wall clock** ([`SystemClock`]): every
//! process sharing the file reads the same clock, so they agree on expiry.
//! A step of that clock moves every lease's expiry with it (see the memory
//! backend's notes on clock steps, which apply here as they are); run the
//! host with a clock that is slewed, never stepped. Tests pass their own
//! [`Clock`] to [`FileStore::open_with_clock`].
//!
//! ## Damage
//!
//! Entries are decoded one at a time: a file that is not a store's document
//! answers `Corrupt` (another format `Incompatible`) for every operation,
//! and a damaged entry answers `Corrupt` for itself, is skipped by scans
//! (listed in [`ExpiredScan::skipped`](tenure_lease_core::ExpiredScan)) and
//! never written over, while the rest of the store goes on working.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_file::FileStore;
//! use tenure_lease_core::{generate_id, AdmitRequest, FenceStore, LeaseStore, Renewal};
//!
//! # let directory = tempfile::tempdir().expect("a temporary directory");
//! # let path = directory.path().join("leases.json");
//! let store = FileStore::open(&path).await?;
//! let admission = store
//!     .admit(&AdmitRequest::new(generate_id(), "worker-a").scope("report").ttl(Duration::from_secs(30)))
//!     .await?;
//! let claim = admission.admitted().and_then(|record| record.claim()).expect("admitted");
//! assert!(matches!(store.renew(&claim, Duration::from_secs(30)).await?, Renewal::Renewed { .. }));
//! assert!(store.check_fence("report.csv", claim.fence).await?.is_accepted());
//!
//! // Another process (here, another handle) opening the file sees the same store.
//! let again = FileStore::open(&path).await?;
//! assert_eq!(again.highest_fence("report.csv").await?, Some(claim.fence));
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::{Clock, Error, Result, SystemClock, Timestamp};

// The backend author's guide, rendered here and compiled as doctests.
#[doc = include_str!("../WRITING_A_BACKEND.md")]
pub mod writing_a_backend {}

mod document;
mod file;
mod gate;
mod lease;
mod queue;

use document::Document;
use file::Files;

/// A store in one JSON file, shared by every handle and every process that
/// opens the same path. Cloning shares the handle.
#[derive(Debug, Clone)]
pub struct FileStore {
    files: Arc<Files>,
    clock: Arc<dyn Clock>,
    releases: ReleaseBoard,
}

impl tenure_lease_core::backend::stores::Backend for FileStore {
    const NAME: &'static str = "file";
    const SYSTEM: &'static str = "file";

    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        Some(&self.releases)
    }
}

tenure_lease_core::serve_backend!(FileStore);

impl FileStore {
    /// Opens the store in the file at `path` on the host's clock, creating
    /// an empty store when there is no file yet (the directory must exist).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) when
    ///   `path` names no file;
    /// * [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)
    ///   when the file or its lock file cannot be created, read or locked;
    /// * [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) when the
    ///   file is not a store's document,
    ///   [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible)
    ///   when it is one of another format. Nothing is written over it.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock)).await
    }

    /// [`open`](Self::open), judging expiry by `clock` instead of the
    /// host's: for tests, which move a
    /// [`ManualClock`](tenure_lease_core::ManualClock). Every handle on one
    /// file must read the same clock.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self> {
        let store = FileStore {
            files: Arc::new(Files::new(path.as_ref().to_owned())?),
            clock,
            releases: ReleaseBoard::in_process(),
        };
        // Creates the file when missing, and checks an existing one.
        store.write(|_, _| Ok(())).await?;
        Ok(store)
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.files.path
    }

    /// The lock file beside it: whoever edits the store's file by hand
    /// (a repair, a test that damages it) holds an exclusive OS lock on this
    /// file meanwhile, as every operation of the store does.
    pub fn lock_path(&self) -> &Path {
        &self.files.lock
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs `operation` as one atomic write of the file, off the async
    /// runtime (locking and fsync block). Dropping the future does not stop
    /// it: once started, it lands whole or not at all.
    async fn write<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&mut Document, Timestamp) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let files = Arc::clone(&self.files);
        let clock = Arc::clone(&self.clock);
        blocking(move || files.write(&*clock, operation)).await
    }

    /// Runs `operation` on one consistent reading of the file.
    async fn read<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&Document, Timestamp) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let files = Arc::clone(&self.files);
        let clock = Arc::clone(&self.clock);
        blocking(move || files.read(&*clock, operation)).await
    }
}

async fn blocking<T: Send + 'static>(
    operation: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(operation).await.map_err(|_| {
        Error::unavailable(
            "a file store operation panicked or was cancelled; its outcome is unknown",
        )
    })?
}

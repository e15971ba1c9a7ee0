//! The connection thread: SQLite's blocking calls, off the async runtime.
//!
//! Each store owns one OS thread that owns its `rusqlite::Connection`. An
//! operation is one job sent over a channel and answered on a tokio oneshot:
//! one round trip into the thread, during which the job runs its whole
//! transaction. The thread ends when the last handle to the store is dropped.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{mpsc, Arc};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tenure_lease_core::{Clock, Error, Result, Timestamp};
use tokio::sync::oneshot;

use crate::config::SqliteConfig;
use crate::error::map_sqlite_error;
use crate::schema;

/// What a job gets: the connection and the store's clock.
pub(crate) struct Session {
    connection: Connection,
    clock: Arc<dyn Clock>,
}

impl Session {
    /// Runs `operation` in one `BEGIN IMMEDIATE` transaction, committed when
    /// it answers `Ok` and rolled back otherwise.
    ///
    /// The write lock is taken at `BEGIN`, so a transaction never starts as
    /// a reader and fails when it upgrades to a writer; contention waits up
    /// to the busy timeout. `now` is read once the lock is held, so every
    /// writer stamps records in the order it commits them.
    pub(crate) fn write<T>(
        &mut self,
        operation: impl FnOnce(&Transaction<'_>, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_sqlite_error)?;
        let now = self.clock.now();
        let answer = operation(&transaction, now)?;
        transaction.commit().map_err(map_sqlite_error)?;
        Ok(answer)
    }

    /// Runs a read-only `operation`. Each read is a single `SELECT`, so it
    /// sees one consistent snapshot without taking the write lock (in WAL
    /// mode readers never wait for writers).
    pub(crate) fn read<T>(
        &mut self,
        operation: impl FnOnce(&Connection, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let now = self.clock.now();
        operation(&self.connection, now)
    }
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A handle on the connection thread; clones share the thread.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionThread {
    jobs: mpsc::Sender<Job>,
}

impl ConnectionThread {
    /// Starts the thread, opens and migrates the file on it, and answers once
    /// the store is ready.
    pub(crate) async fn start(config: SqliteConfig) -> Result<Self> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready, opened) = oneshot::channel();
        std::thread::Builder::new()
            .name("tenure-sqlite".to_owned())
            .spawn(move || match schema::open(&config) {
                Ok(connection) => {
                    if ready.send(Ok(())).is_ok() {
                        serve(
                            Session {
                                connection,
                                clock: config.clock,
                            },
                            &inbox,
                        );
                    }
                }
                Err(error) => {
                    let _ = ready.send(Err(error));
                }
            })
            .map_err(|error| {
                Error::unavailable("cannot start the SQLite connection thread").with_source(error)
            })?;
        opened.await.map_err(|_| {
            Error::unavailable("the SQLite connection thread stopped while opening")
        })??;
        Ok(ConnectionThread { jobs })
    }

    /// Runs `job` on the connection thread and answers what it answers.
    ///
    /// Dropping the returned future does not cancel the job: once sent, it
    /// runs to its commit or rollback, and the caller treats the outcome as
    /// unknown.
    pub(crate) async fn run<T, F>(&self, job: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        self.jobs
            .send(Box::new(move |session: &mut Session| {
                let _ = answer.send(job(session));
            }))
            .map_err(|_| Error::unavailable("the SQLite connection thread has stopped"))?;
        answered.await.map_err(|_| {
            Error::unavailable(
                "the SQLite connection thread dropped the operation (it panicked); \
                 its outcome is unknown",
            )
        })?
    }
}

fn serve(mut session: Session, inbox: &mpsc::Receiver<Job>) {
    while let Ok(job) = inbox.recv() {
        // A panicking job drops its answer channel (the caller sees an
        // error) and its transaction (rolled back); the thread lives on.
        if panic::catch_unwind(AssertUnwindSafe(|| job(&mut session))).is_err() {
            tracing::error!("a SQLite store operation panicked; its transaction was rolled back");
        }
    }
}

//! The connections a SQL store of tenure keeps between its own statements,
//! so that an operation of one statement costs one network round trip.
//! Used by `tenure-backend-postgres` and `tenure-backend-mysql`; not meant
//! for direct use.
//!
//! sqlx's pool pings a connection whenever it comes back to it (PostgreSQL
//! `Sync`, MySQL `COM_PING`, each a round trip): the only way it has to
//! flush what a cancelled statement left on the wire. There is no option to
//! turn that off. So a store keeps the connections its statements finished
//! with in good order (answered in full, by rows or by an error of the
//! server's) and takes them again without going through the pool. A
//! connection whose statement was cut short (an operation timeout, a
//! dropped future, a broken socket) is not kept: it goes back to the pool,
//! whose ping drains it or closes it.
//!
//! A kept connection is checked out of the pool, out of reach of anyone
//! else using it (an application's own statements on the store's pool, the
//! pool's idle reaper). One kept for [`LINGER`] without use goes back, so a
//! store that has gone quiet leaves its pool to the others within that
//! time.
//!
//! The ping on the way *out* of the pool is the pool's option
//! (`test_before_acquire`); the stores' own pools turn it off and ping only
//! a connection that sat idle in the pool for a while ([`ping_if_idle`]).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::pool::{PoolConnection, PoolConnectionMetadata};
use sqlx::{Connection as _, Database, Pool};
use tokio::time::Instant;

/// How long a kept connection may wait for the store's next statement
/// before it goes back to the pool.
pub const LINGER: Duration = Duration::from_millis(250);

/// A connection idle in the pool for longer than this is pinged before
/// use; a busy store's connections never are.
pub const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The pool's `before_acquire` hook for the pools the stores open (with
/// `test_before_acquire(false)`): pings only a connection that sat idle
/// for [`PING_AFTER_IDLE`] or more.
///
/// # Errors
///
/// The ping's: the pool then closes the connection and opens another.
pub fn ping_if_idle<DB: Database>(
    connection: &mut DB::Connection,
    metadata: PoolConnectionMetadata,
) -> BoxFuture<'_, sqlx::Result<bool>> {
    Box::pin(async move {
        if metadata.idle_for >= PING_AFTER_IDLE {
            connection.ping().await?;
        }
        Ok(true)
    })
}

/// A connection kept since `since`.
struct Kept<DB: Database> {
    connection: PoolConnection<DB>,
    since: Instant,
}

type KeptList<DB> = Mutex<Vec<Kept<DB>>>;

fn lock<DB: Database>(kept: &KeptList<DB>) -> MutexGuard<'_, Vec<Kept<DB>>> {
    kept.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A pool and the connections a store keeps from it. Clones share both.
pub struct Sessions<DB: Database> {
    pool: Pool<DB>,
    kept: Arc<KeptList<DB>>,
}

impl<DB: Database> Clone for Sessions<DB> {
    fn clone(&self) -> Self {
        Sessions {
            pool: self.pool.clone(),
            kept: Arc::clone(&self.kept),
        }
    }
}

impl<DB: Database> fmt::Debug for Sessions<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("pool_size", &self.pool.size())
            .field("kept", &lock(&self.kept).len())
            .finish()
    }
}

impl<DB: Database> Sessions<DB> {
    /// Keeps connections of `pool`, returning each one unused for
    /// [`LINGER`] to it from a task that ends with the last clone. Must be
    /// called within a tokio runtime.
    pub fn new(pool: Pool<DB>) -> Self {
        let kept = Arc::new(KeptList::default());
        tokio::spawn(return_lingering(Arc::downgrade(&kept)));
        Sessions { pool, kept }
    }

    /// The pool the connections come from.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// A connection: the one kept last, or else one from the pool.
    ///
    /// # Errors
    ///
    /// The pool's, when none is kept: a closed pool, a connection that
    /// could not be opened or checked within the pool's acquire timeout.
    pub async fn take(&self) -> sqlx::Result<Session<DB>> {
        let kept = lock(&self.kept).pop();
        let connection = match kept {
            Some(kept) if !self.pool.is_closed() => kept.connection,
            _ => self.pool.acquire().await?,
        };
        Ok(Session {
            connection,
            kept: Arc::downgrade(&self.kept),
        })
    }

    /// Gives every kept connection back to the pool, as before closing it
    /// (which waits for every connection out of it).
    pub fn return_all(&self) {
        let returned = std::mem::take(&mut *lock(&self.kept));
        drop(returned);
    }
}

/// Every [`LINGER`], gives the connections kept for longer back to the
/// pool; ends when the store is gone.
async fn return_lingering<DB: Database>(kept: Weak<KeptList<DB>>) {
    loop {
        tokio::time::sleep(LINGER).await;
        let Some(kept) = kept.upgrade() else { return };
        let lingering: Vec<Kept<DB>> = {
            let mut list = lock(&kept);
            let (fresh, lingering) = std::mem::take(&mut *list)
                .into_iter()
                .partition(|entry| entry.since.elapsed() < LINGER);
            *list = fresh;
            lingering
        };
        // Dropped outside the lock: each goes back through the pool's ping.
        drop(lingering);
    }
}

/// Whether `error` is the server's answer (a database error), after which
/// the connection is in good order, rather than a failure of the connection
/// or of reading what came back.
pub fn server_answered(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(_))
}

/// A connection taken by [`Sessions::take`]. Dropped, it goes back to the
/// pool (which pings it); [`keep_after`](Self::keep_after) keeps it for the
/// store's next statement instead, when what ran on it ended in good order.
pub struct Session<DB: Database> {
    connection: PoolConnection<DB>,
    kept: Weak<KeptList<DB>>,
}

impl<DB: Database> Session<DB> {
    /// Keeps the connection for the store's next statement if the
    /// statements on it ended as `outcome` says in good order: answered,
    /// by rows or by an error of the server's. One that failed or was cut
    /// mid-statement goes back to the pool, to be checked.
    pub fn keep_after<T>(self, outcome: &sqlx::Result<T>) {
        self.keep_if(outcome.as_ref().err().is_none_or(server_answered));
    }

    /// Keeps the connection for the store's next statement when
    /// `in_good_order` (every statement on it answered, by rows or by an
    /// error of the server's); else gives it back to the pool, to be
    /// checked.
    pub fn keep_if(self, in_good_order: bool) {
        let Session { connection, kept } = self;
        if in_good_order {
            if let Some(kept) = kept.upgrade() {
                lock(&kept).push(Kept {
                    connection,
                    since: Instant::now(),
                });
            }
        }
    }
}

impl<DB: Database> fmt::Debug for Session<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl<DB: Database> Deref for Session<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.connection
    }
}

impl<DB: Database> DerefMut for Session<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.connection
    }
}

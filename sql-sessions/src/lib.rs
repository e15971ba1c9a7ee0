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
//! pool's idle reaper), and the pool's own queue never hears of it: so the
//! store's statements wait for their turn in a queue of their own (as many
//! turns as the pool may open connections), where a connection kept
//! reaches the next in line. One kept for [`LINGER`] without use goes back
//! to the pool, so a store that has gone quiet leaves its pool to the
//! others within that time; so does one out of the pool for [`CYCLE`],
//! so that under constant load the others still get their turn, and one
//! finished with while a statement of the store waits in the pool itself
//! (the pool's connections out with its other users).
//!
//! The ping on the way *out* of the pool is the pool's option
//! (`test_before_acquire`); the stores' own pools turn it off and ping only
//! a connection that sat idle in the pool for a while ([`ping_if_idle`]).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::pool::{PoolConnection, PoolConnectionMetadata};
use sqlx::postgres::{PgDatabaseError, PgSeverity};
use sqlx::{Connection as _, Database, Pool};
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How long a kept connection may wait for the store's next statement
/// before it goes back to the pool.
pub const LINGER: Duration = Duration::from_millis(250);

/// The longest a connection stays out of the pool, kept from statement to
/// statement, before it goes back (with the pool's ping): under constant
/// load, the pool's other users (an application's transactions on it)
/// still get a connection within about this time.
pub const CYCLE: Duration = Duration::from_secs(1);

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

/// A connection kept since `since`, out of the pool since `checked_out`.
struct Kept<DB: Database> {
    connection: PoolConnection<DB>,
    checked_out: Instant,
    since: Instant,
}

/// What the clones of a [`Sessions`] share.
struct Shared<DB: Database> {
    pool: Pool<DB>,
    kept: Mutex<Vec<Kept<DB>>>,
    /// One per connection the pool may open. A store's statement waits for
    /// its turn here, in arrival order, rather than in the pool, which
    /// never sees a connection the store keeps and would leave it waiting.
    turns: Arc<Semaphore>,
    /// Statements that found nothing kept and wait in the pool itself (its
    /// connections out with other users): a connection finished with then
    /// goes back to the pool, where they get it.
    waiting_in_pool: AtomicUsize,
    /// The runtime the store was made in: a connection going back to the
    /// pool starts a task there, wherever the store is dropped.
    runtime: Handle,
}

impl<DB: Database> Shared<DB> {
    fn kept(&self) -> MutexGuard<'_, Vec<Kept<DB>>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives the kept connections `which` selects back to the pool.
    fn return_kept(&self, which: impl Fn(&Kept<DB>) -> bool) {
        let returned: Vec<Kept<DB>> = {
            let mut list = self.kept();
            if !list.iter().any(&which) {
                return;
            }
            let (returned, kept) = std::mem::take(&mut *list).into_iter().partition(which);
            *list = kept;
            returned
        };
        // Outside the lock: each goes back through the pool's ping.
        let _entered = self.runtime.enter();
        drop(returned);
    }
}

impl<DB: Database> Drop for Shared<DB> {
    fn drop(&mut self) {
        self.return_kept(|_| true);
    }
}

/// Counts a statement waiting in the pool while it lives.
struct WaitingInPool<'a>(&'a AtomicUsize);

impl<'a> WaitingInPool<'a> {
    fn start(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        WaitingInPool(count)
    }
}

impl Drop for WaitingInPool<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A pool and the connections a store keeps from it. Clones share both.
pub struct Sessions<DB: Database> {
    shared: Arc<Shared<DB>>,
}

impl<DB: Database> Clone for Sessions<DB> {
    fn clone(&self) -> Self {
        Sessions {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<DB: Database> fmt::Debug for Sessions<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("pool_size", &self.shared.pool.size())
            .field("kept", &self.shared.kept().len())
            .finish()
    }
}

impl<DB: Database> Sessions<DB> {
    /// Keeps connections of `pool`, returning each one unused for
    /// [`LINGER`] to it from a task that ends with the last clone.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new(pool: Pool<DB>) -> Self {
        let turns = pool.options().get_max_connections().max(1);
        let shared = Arc::new(Shared {
            pool,
            kept: Mutex::default(),
            turns: Arc::new(Semaphore::new(turns as usize)),
            waiting_in_pool: AtomicUsize::new(0),
            runtime: Handle::current(),
        });
        tokio::spawn(return_lingering(Arc::downgrade(&shared)));
        Sessions { shared }
    }

    /// The pool the connections come from.
    pub fn pool(&self) -> &Pool<DB> {
        &self.shared.pool
    }

    /// A connection: the one kept last, or else one from the pool. Waits,
    /// in arrival order, while as many connections as the pool may open
    /// are taken, at most the pool's acquire timeout in all.
    ///
    /// # Errors
    ///
    /// The pool's, when none is kept: a closed pool, or no connection
    /// (turn, kept or opened) within the pool's acquire timeout
    /// ([`sqlx::Error::PoolTimedOut`]).
    pub async fn take(&self) -> sqlx::Result<Session<DB>> {
        let shared = &self.shared;
        let deadline = Instant::now() + shared.pool.options().get_acquire_timeout();
        let turn = Arc::clone(&shared.turns).acquire_owned();
        let Ok(Ok(turn)) = tokio::time::timeout_at(deadline, turn).await else {
            return Err(sqlx::Error::PoolTimedOut);
        };
        shared.return_kept(|kept| kept.since.elapsed() >= LINGER);
        let kept = shared.kept().pop();
        let (connection, checked_out) = match kept {
            Some(kept) if !shared.pool.is_closed() => (kept.connection, kept.checked_out),
            _ => {
                let _waiting = WaitingInPool::start(&shared.waiting_in_pool);
                match tokio::time::timeout_at(deadline, shared.pool.acquire()).await {
                    Ok(acquired) => (acquired?, Instant::now()),
                    Err(_) => return Err(sqlx::Error::PoolTimedOut),
                }
            }
        };
        Ok(Session {
            connection,
            checked_out,
            turn,
            shared: Arc::downgrade(shared),
        })
    }

    /// Gives every kept connection back to the pool, as before closing it
    /// (which waits for every connection out of it).
    pub fn return_all(&self) {
        self.shared.return_kept(|_| true);
    }
}

/// Every [`LINGER`], gives the connections kept that long back to the pool;
/// ends when the store is gone.
async fn return_lingering<DB: Database>(shared: Weak<Shared<DB>>) {
    loop {
        tokio::time::sleep(LINGER).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.return_kept(|kept| kept.since.elapsed() >= LINGER);
    }
}

/// Whether the connection is in good order after `error`: the server
/// answered it (a database error) and goes on serving the session, rather
/// than the connection failing, a reply that could not be read, or the
/// server ending the session (PostgreSQL: a `FATAL` or `PANIC`, classes
/// `08` and `57P`; MySQL: a killed or timed-out session, a server shutting
/// down).
pub fn server_answered(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    if let Some(postgres) = error.try_downcast_ref::<PgDatabaseError>() {
        let ends = matches!(postgres.severity(), PgSeverity::Fatal | PgSeverity::Panic)
            || postgres.code().starts_with("08")
            || postgres.code().starts_with("57P");
        return !ends;
    }
    if let Some(mysql) = error.try_downcast_ref::<MySqlDatabaseError>() {
        // Server shutdown, connection killed, session killed, disconnected
        // for inactivity.
        let ends = matches!(mysql.number(), 1053 | 1927 | 3169 | 4031)
            || mysql.code().is_some_and(|state| state.starts_with("08"));
        return !ends;
    }
    true
}

/// A connection taken by [`Sessions::take`]. Dropped, it goes back to the
/// pool (which pings it); [`keep_after`](Self::keep_after) keeps it for the
/// store's next statement instead, when what ran on it ended in good order.
pub struct Session<DB: Database> {
    connection: PoolConnection<DB>,
    checked_out: Instant,
    /// The statement's turn, given up with the connection.
    turn: OwnedSemaphorePermit,
    shared: Weak<Shared<DB>>,
}

impl<DB: Database> Session<DB> {
    /// Keeps the connection for the store's next statement if the
    /// statement on it ended as `outcome` says in good order (see
    /// [`server_answered`]). Only for a statement outside a transaction:
    /// one that failed inside a transaction leaves it open until its
    /// `ROLLBACK` is sent.
    pub fn keep_after<T>(self, outcome: &sqlx::Result<T>) {
        self.keep_if(outcome.as_ref().err().is_none_or(server_answered));
    }

    /// Keeps the connection for the store's next statement when
    /// `in_good_order`: every statement on it answered, no transaction
    /// left open (a transaction dropped without its `COMMIT` or `ROLLBACK`
    /// answered is not); else gives it back to the pool, which flushes and
    /// checks it. It goes back to the pool as well when a statement of the
    /// store waits there, when the pool is closed, and once it has been out
    /// of the pool for [`CYCLE`], so that the pool's other users get their
    /// turn.
    pub fn keep_if(self, in_good_order: bool) {
        let Session {
            connection,
            checked_out,
            turn,
            shared,
        } = self;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if in_good_order
            && !shared.pool.is_closed()
            && shared.waiting_in_pool.load(Ordering::SeqCst) == 0
            && checked_out.elapsed() < CYCLE
        {
            shared.kept().push(Kept {
                connection,
                checked_out,
                since: Instant::now(),
            });
        }
        // The turn ends after the connection is kept, so the next statement
        // in line finds it.
        drop(turn);
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

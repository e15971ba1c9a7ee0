//! The connections the store keeps between its own statements, so that an
//! operation costs one network round trip.
//!
//! sqlx's pool writes a `Sync` and waits for the server's answer whenever a
//! connection comes back to it: the only way it has to flush what a
//! cancelled statement left on the wire. That is a second round trip per
//! operation (the first being the statement), and there is no option to
//! turn it off. So the store keeps the connections its statements finished
//! with in good order (answered in full, by rows or by an error from the
//! server) and takes them again without going through the pool. A
//! connection whose statement was cut short (an operation timeout, a
//! dropped future, a broken socket) is not kept: it goes back to the pool,
//! whose ping drains it or closes it.
//!
//! A kept connection is checked out of the pool, out of reach of anyone
//! else using it (an application's own transactions on
//! [`PgStore::pool`](crate::PgStore::pool), the pool's idle reaper). One kept
//! for [`LINGER`] without use goes back, so a store that has gone quiet
//! leaves its pool to the others within that time.
//!
//! The ping on the way *out* of the pool is the pool's option
//! (`test_before_acquire`); [`crate::PgStore::connect`] pings only a
//! connection that sat idle in the pool for a while
//! ([`ping_if_idle`]).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::pool::{PoolConnection, PoolConnectionMetadata};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Connection as _, Postgres};
use tokio::time::Instant;

/// How long a kept connection may wait for the store's next statement
/// before it goes back to the pool.
pub(crate) const LINGER: Duration = Duration::from_millis(250);

/// A connection idle in the pool for longer than this is pinged before
/// use: a busy store's connections never are.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The pool's `before_acquire` hook for the pools the store opens: ping
/// only a connection that sat idle for [`PING_AFTER_IDLE`] or more.
pub(crate) fn ping_if_idle(
    connection: &mut PgConnection,
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
struct Kept {
    connection: PoolConnection<Postgres>,
    since: Instant,
}

type KeptList = Mutex<Vec<Kept>>;

fn lock(kept: &KeptList) -> MutexGuard<'_, Vec<Kept>> {
    kept.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The pool and the connections the store keeps from it. Clones share both.
#[derive(Clone)]
pub(crate) struct Sessions {
    pool: PgPool,
    kept: Arc<KeptList>,
}

impl Sessions {
    /// Keeps connections of `pool`, returning each one unused for
    /// [`LINGER`] to it from a task that ends with the last clone.
    pub(crate) fn new(pool: PgPool) -> Self {
        let kept = Arc::new(KeptList::default());
        tokio::spawn(return_lingering(Arc::downgrade(&kept)));
        Sessions { pool, kept }
    }

    /// The pool the connections come from.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A connection: the one kept last, or else one from the pool.
    pub(crate) async fn take(&self) -> sqlx::Result<Session> {
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
    pub(crate) fn return_all(&self) {
        let returned = std::mem::take(&mut *lock(&self.kept));
        drop(returned);
    }
}

/// Every [`LINGER`], gives the connections kept for longer back to the
/// pool; ends when the store is gone.
async fn return_lingering(kept: Weak<KeptList>) {
    loop {
        tokio::time::sleep(LINGER).await;
        let Some(kept) = kept.upgrade() else { return };
        let lingering: Vec<Kept> = {
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

/// A connection taken by [`Sessions::take`]. Dropped, it goes back to the
/// pool (which pings it); [`keep_after`](Self::keep_after) keeps it for the
/// store's next statement instead, when what ran on it ended in good order.
pub(crate) struct Session {
    connection: PoolConnection<Postgres>,
    kept: Weak<KeptList>,
}

impl Session {
    /// Keeps the connection for the store's next statement if the
    /// statements on it ended as `outcome` says in good order: answered,
    /// by rows or by an error of the server's. One that failed or was cut
    /// mid-statement goes back to the pool, to be checked.
    pub(crate) fn keep_after<T>(self, outcome: &sqlx::Result<T>) {
        let Session { connection, kept } = self;
        if matches!(outcome, Ok(_) | Err(sqlx::Error::Database(_))) {
            if let Some(kept) = kept.upgrade() {
                lock(&kept).push(Kept {
                    connection,
                    since: Instant::now(),
                });
            }
        }
    }
}

impl Deref for Session {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

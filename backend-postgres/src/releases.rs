//! Release notices ([`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases)).
//!
//! Migration 0009's trigger notifies channel [`CHANNEL`] with `[schema,
//! scope]` whenever a `held_scopes` row is deleted, at commit. The first
//! call to `releases` opens one connection of the store's own, outside its
//! pool (a waiter must not cost the store's statements a connection),
//! `LISTEN`s on it, and forwards the notices for this store's schema to a
//! [`ReleaseBoard`] every later call subscribes to. When the connection is
//! lost, sqlx reconnects and listens again at the next receive; what was
//! notified meanwhile is lost, so the board announces
//! [`Missed`](tenure_lease_core::release::ReleaseNotice::Missed) and
//! waiters ask the store again.

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tenure_lease_core::release::{ListenBackoff, ReleaseBoard};
use tenure_lease_core::Result;
use tokio::task::AbortHandle;

use crate::error::store_error;

/// The channel migration 0009's trigger notifies.
pub(crate) const CHANNEL: &str = "tenure_released";

/// Listens on a connection with `pool`'s settings and forwards `schema`'s
/// notices to `board`; answers the forwarding task.
pub(crate) async fn listen(
    pool: &PgPool,
    schema: &str,
    board: ReleaseBoard,
) -> Result<AbortHandle> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with((*pool.connect_options()).clone());
    let mut listener = PgListener::connect_with(&own).await.map_err(store_error)?;
    listener.listen(CHANNEL).await.map_err(store_error)?;
    Ok(tokio::spawn(forward(listener, schema.to_owned(), board)).abort_handle())
}

/// Forwards `schema`'s notices to `board` until aborted.
async fn forward(mut listener: PgListener, schema: String, board: ReleaseBoard) {
    let mut backoff = ListenBackoff::new();
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                backoff.heard();
                match serde_json::from_str::<(String, String)>(notification.payload()) {
                    Ok((of, scope)) if of == schema => board.freed(&scope),
                    Ok(_) => {}
                    Err(error) => tracing::debug!(
                        payload = notification.payload(),
                        %error,
                        "a notice on {CHANNEL} that is not a tenure release; ignored"
                    ),
                }
            }
            // The connection was lost; the next receive reconnects.
            Ok(None) => board.missed(),
            Err(error) => {
                let pause = backoff.next_pause();
                tracing::warn!(%error, "listening for release notices failed; trying again in {pause:?}");
                board.missed();
                backoff.pause().await;
            }
        }
    }
}

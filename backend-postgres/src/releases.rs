//! Release notices ([`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases)).
//!
//! Migration 0009's trigger notifies the schema's channel
//! (`tenure_released_` and the md5 of the schema's name) with the scope
//! whenever a `held_scopes` row is deleted, at commit. The first call to
//! `releases` opens one connection of the store's own, outside its pool (a
//! waiter must not cost the store's statements a connection), `LISTEN`s on
//! it, and forwards the notices to a [`ReleaseBoard`] every later call
//! subscribes to. A connection that is lost, or that stays silent for
//! [`LISTEN_CHECK`] and then fails a `SELECT 1`, is replaced and listens
//! again; what was notified meanwhile is lost, so the board announces
//! [`Missed`](tenure_lease_core::release::ReleaseNotice::Missed) and
//! waiters ask the store again.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tenure_lease_core::release::{ListenBackoff, ReleaseBoard, LISTEN_CHECK};
use tenure_lease_core::Result;
use tokio::task::AbortHandle;

use crate::error::store_error;

/// The channel of `schema`'s notices, as migration 0009's trigger names it.
const CHANNEL_OF_SCHEMA: &str = "SELECT 'tenure_released_' || md5($1)";

/// Listens on a connection with `pool`'s settings to `schema`'s channel
/// and forwards its notices to `board`; answers the forwarding task.
pub(crate) async fn listen(
    pool: &PgPool,
    schema: &str,
    board: ReleaseBoard,
) -> Result<AbortHandle> {
    let channel: String = sqlx::query_scalar(CHANNEL_OF_SCHEMA)
        .bind(schema)
        .fetch_one(pool)
        .await
        .map_err(store_error)?;
    let options = Connecting {
        options: (*pool.connect_options()).clone(),
        wait: pool.options().get_acquire_timeout(),
        channel,
    };
    let first = options.listen().await.map_err(store_error)?;
    Ok(tokio::spawn(forward(options, first, board)).abort_handle())
}

/// How to open a listening connection: the store pool's settings.
struct Connecting {
    options: PgConnectOptions,
    wait: Duration,
    channel: String,
}

impl Connecting {
    /// A listener on a connection of its own (a pool of one, so that a
    /// connection left hanging with an old listener never blocks a new
    /// one), listening to the channel.
    async fn listen(&self) -> std::result::Result<PgListener, sqlx::Error> {
        let own = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(self.wait)
            .connect_lazy_with(self.options.clone());
        let mut listener = PgListener::connect_with(&own).await?;
        listener.listen(&self.channel).await?;
        Ok(listener)
    }
}

/// Forwards what the listener hears to `board` until aborted, listening
/// again on a new connection when it fails or stops answering.
async fn forward(connecting: Connecting, first: PgListener, board: ReleaseBoard) {
    let mut listener = Some(first);
    let mut backoff = ListenBackoff::new();
    loop {
        let Some(active) = listener.as_mut() else {
            match connecting.listen().await {
                Ok(fresh) => {
                    listener = Some(fresh);
                    board.missed();
                }
                Err(error) => {
                    tracing::warn!(
                        %error,
                        "listening for release notices failed; trying again in {:?}",
                        backoff.next_pause()
                    );
                    backoff.pause().await;
                }
            }
            continue;
        };
        match tokio::time::timeout(LISTEN_CHECK, active.try_recv()).await {
            Ok(Ok(Some(notification))) => {
                backoff.heard();
                board.freed(notification.payload());
            }
            // The connection was lost; sqlx opened another and listens
            // again before answering so.
            Ok(Ok(None)) => board.missed(),
            Ok(Err(error)) => {
                tracing::warn!(%error, "the release listener failed; listening again");
                board.missed();
                listener = None;
                backoff.pause().await;
            }
            Err(_) => {
                let check = sqlx::query("SELECT 1").execute(&mut *active);
                if !matches!(tokio::time::timeout(LISTEN_CHECK, check).await, Ok(Ok(_))) {
                    tracing::warn!(
                        "the release listener's connection stopped answering; listening again"
                    );
                    board.missed();
                    listener = None;
                }
            }
        }
    }
}

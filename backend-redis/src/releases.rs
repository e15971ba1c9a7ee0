//! Release notices ([`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases)).
//!
//! The scripts that free a scope (`release` in `lua/common.lua`: transition,
//! takeover, interrupting admission) `PUBLISH` it on `<prefix>released`.
//! The first call to `releases` opens a subscription of the store's own to
//! the primary (not the shared multiplexed connection, which a
//! subscription would take over), and forwards what it hears to a
//! [`ReleaseBoard`] every later call subscribes to. When the subscription
//! is lost it subscribes again, to the primary as last known (after a
//! Sentinel failover, the new one); what was published meanwhile is lost,
//! so the board announces
//! [`Missed`](tenure_lease_core::release::ReleaseNotice::Missed) and
//! waiters ask the store again. A cluster store announces nothing (its
//! waiters poll).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;
use tenure_lease_core::release::{ListenBackoff, ReleaseBoard};
use tenure_lease_core::{Error, Result};
use tokio::task::AbortHandle;

use crate::primary::Primary;

/// Subscribes to `channel` on `primary` within `connect_timeout` and
/// forwards what it hears to `board`; answers the forwarding task.
pub(crate) async fn listen(
    primary: Arc<Primary>,
    channel: String,
    connect_timeout: Duration,
    board: ReleaseBoard,
) -> Result<AbortHandle> {
    let first = subscribe(&primary, &channel, connect_timeout).await?;
    let forwarding = async move {
        let mut subscription = Some(first);
        let mut backoff = ListenBackoff::new();
        loop {
            if let Some(subscription) = subscription.take() {
                let mut messages = subscription.into_on_message();
                while let Some(message) = messages.next().await {
                    backoff.heard();
                    match message.get_payload::<String>() {
                        Ok(scope) => board.freed(&scope),
                        Err(_) => board.missed(),
                    }
                }
            }
            board.missed();
            backoff.pause().await;
            match subscribe(&primary, &channel, connect_timeout).await {
                Ok(again) => subscription = Some(again),
                Err(error) => tracing::warn!(
                    %error,
                    "subscribing to release notices failed; trying again in {:?}",
                    backoff.next_pause()
                ),
            }
        }
    };
    Ok(tokio::spawn(forwarding).abort_handle())
}

/// A subscription to `channel` on the primary as last known.
async fn subscribe(primary: &Primary, channel: &str, connect_timeout: Duration) -> Result<PubSub> {
    // A cluster store never listens (`releases` answers None there).
    let Some(client) = primary.client() else {
        return Err(Error::unavailable(
            "a cluster store has no single server to subscribe to release notices on",
        ));
    };
    let subscribed = tokio::time::timeout(connect_timeout, async {
        let mut subscription = client.get_async_pubsub().await?;
        subscription.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(subscription)
    })
    .await;
    match subscribed {
        Ok(Ok(subscription)) => Ok(subscription),
        Ok(Err(error)) => Err(crate::error::from_redis(error)),
        Err(_) => Err(Error::unavailable(format!(
            "subscribing to release notices took over {connect_timeout:?}"
        ))),
    }
}

//! Release notices ([`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases)).
//!
//! The scripts that free a scope (`release` in `lua/common.lua`: transition,
//! takeover, interrupting admission) `PUBLISH` it on `<prefix>released`.
//! The first call to `releases` opens a subscription of the store's own to
//! the primary (not the shared multiplexed connection, which a
//! subscription would take over), and forwards what it hears to a
//! [`ReleaseBoard`] every later call subscribes to. When the subscription
//! is lost, or stays silent for [`LISTEN_CHECK`] and then fails a `PING`,
//! it subscribes again, to the primary as last known (the store learns of
//! a Sentinel failover from its own calls); what was published meanwhile
//! is lost, so the board announces
//! [`Missed`](tenure_lease_core::release::ReleaseNotice::Missed) and
//! waiters ask the store again. A cluster store subscribes to nothing (it
//! announces the releases made through it, as SQLite does).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;
use tenure_lease_core::release::{ListenBackoff, ReleaseBoard, LISTEN_CHECK};
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
                hear(subscription, &board, &mut backoff).await;
                board.missed();
            }
            backoff.pause().await;
            match subscribe(&primary, &channel, connect_timeout).await {
                Ok(again) => {
                    subscription = Some(again);
                    // What was published while it was away is lost.
                    board.missed();
                }
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

/// Forwards what `subscription` hears to `board` until it is lost or, after
/// [`LISTEN_CHECK`] of silence, fails to answer a `PING`.
async fn hear(subscription: PubSub, board: &ReleaseBoard, backoff: &mut ListenBackoff) {
    let (mut sink, mut messages) = subscription.split();
    loop {
        match tokio::time::timeout(LISTEN_CHECK, messages.next()).await {
            Ok(Some(message)) => {
                backoff.heard();
                match message.get_payload::<String>() {
                    Ok(scope) => board.freed(&scope),
                    Err(_) => board.missed(),
                }
            }
            Ok(None) => return,
            Err(_) => {
                let ping = sink.ping::<redis::Value>();
                if !matches!(tokio::time::timeout(LISTEN_CHECK, ping).await, Ok(Ok(_))) {
                    tracing::warn!("the release subscription stopped answering; subscribing again");
                    return;
                }
            }
        }
    }
}

/// A subscription to `channel` on the primary as last known.
async fn subscribe(primary: &Primary, channel: &str, connect_timeout: Duration) -> Result<PubSub> {
    // A cluster store never subscribes (`releases` answers its in-process
    // board).
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

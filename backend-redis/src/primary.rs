//! The store's connection to its primary, and, behind Sentinel, how it
//! moves to the next primary after a failover (see [`crate::sentinel`]; a
//! cluster connection follows its cluster by itself).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::RedisConfig;
use crate::connection::Connection;
use crate::sentinel::ASK_INTERVAL;

/// The connection every call of a store (and its clones) shares.
pub(crate) struct Primary {
    current: RwLock<Current>,
    /// Present when the primary is found through Sentinel.
    sentinels: Option<Mutex<Asking>>,
}

struct Current {
    connection: Connection,
    /// `host:port` of the server it connects to.
    address: String,
    /// The client of that server, for connections of other kinds (the
    /// release notices' subscription); none in a cluster.
    client: Option<redis::Client>,
}

struct Asking {
    client: SentinelClient,
    last_asked: Option<Instant>,
}

impl Primary {
    /// The connection to `address`, followed through `sentinels` when
    /// given.
    pub(crate) fn new(
        connection: Connection,
        address: String,
        client: Option<redis::Client>,
        sentinels: Option<SentinelClient>,
    ) -> Self {
        Primary {
            current: RwLock::new(Current {
                connection,
                address,
                client,
            }),
            sentinels: sentinels.map(|client| {
                Mutex::new(Asking {
                    client,
                    last_asked: None,
                })
            }),
        }
    }

    /// A watch over one call: unless the call is
    /// [`answered`](FollowUnlessAnswered::answered), the primary is
    /// [followed](Self::follow) in the background once the watch is
    /// dropped, also when the call was cancelled by a caller's time limit
    /// (a call to a server that went away may hang in the connection
    /// manager's reconnection until then). `renamed` is set when the
    /// connection is replaced.
    pub(crate) fn watch(
        self: &Arc<Self>,
        config: &Arc<RedisConfig>,
        renamed: &Arc<AtomicBool>,
    ) -> FollowUnlessAnswered {
        FollowUnlessAnswered {
            follow: self
                .sentinels
                .is_some()
                .then(|| (Arc::clone(self), Arc::clone(config), Arc::clone(renamed))),
        }
    }

    /// The connection to the primary as last known.
    pub(crate) fn connection(&self) -> Connection {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .connection
            .clone()
    }

    /// Asks the Sentinels where the primary is now (at most once per
    /// [`ASK_INTERVAL`], and not while a question is under way) and, when they
    /// name another server that answers as a primary, connects to it for
    /// every later call. Answers whether the connection was replaced. Never
    /// fails: when the Sentinels cannot say, the calls go on failing as
    /// retryable and the next one asks again.
    pub(crate) async fn follow(&self, config: &RedisConfig) -> bool {
        let Some(sentinels) = &self.sentinels else {
            return false;
        };
        // One question at a time: a call that fails meanwhile adds none.
        let Ok(mut asking) = sentinels.try_lock() else {
            return false;
        };
        let now = Instant::now();
        if asking
            .last_asked
            .is_some_and(|asked| now.duration_since(asked) < ASK_INTERVAL)
        {
            return false;
        }
        asking.last_asked = Some(now);
        let found =
            tokio::time::timeout(config.connect_timeout, asking.client.async_get_client()).await;
        let client = match found {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                tracing::debug!(url = %config.redacted_url(), %error, "the Sentinels named no primary yet");
                return false;
            }
            Err(_) => {
                tracing::debug!(url = %config.redacted_url(), "the Sentinels did not answer in time");
                return false;
            }
        };
        let address = client.get_connection_info().addr().to_string();
        if address == self.address() {
            return false;
        }
        let connected = tokio::time::timeout(
            config.connect_timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config(config)),
        )
        .await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::debug!(url = %config.redacted_url(), %address, %error, "could not connect to the new primary yet");
                return false;
            }
            Err(_) => return false,
        };
        let previous = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            Current {
                connection: Connection::Server(connection),
                address: address.clone(),
                client: Some(client),
            },
        );
        tracing::warn!(
            url = %config.redacted_url(),
            from = %previous.address,
            to = %address,
            "the Sentinels name a new primary; following it"
        );
        true
    }

    /// The client of the primary as last known; none in a cluster.
    pub(crate) fn client(&self) -> Option<redis::Client> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .client
            .clone()
    }

    /// `host:port` of the primary as last known.
    pub(crate) fn address(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .address
            .clone()
    }
}

/// See [`Primary::watch`].
pub(crate) struct FollowUnlessAnswered {
    follow: Option<(Arc<Primary>, Arc<RedisConfig>, Arc<AtomicBool>)>,
}

impl FollowUnlessAnswered {
    /// The call was answered (or failed in a way no failover explains):
    /// nothing to follow.
    pub(crate) fn answered(mut self) {
        self.follow = None;
    }
}

impl Drop for FollowUnlessAnswered {
    fn drop(&mut self) {
        let Some((primary, config, renamed)) = self.follow.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if primary.follow(&config).await {
                    renamed.store(true, Ordering::Release);
                }
            });
        }
    }
}

/// How the connection manager reconnects and bounds each call.
pub(crate) fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.operation_timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_max_delay(std::time::Duration::from_secs(1))
}

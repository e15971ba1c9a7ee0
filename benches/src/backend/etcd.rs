//! The etcd backend under a fresh key prefix, deleted at cleanup. The
//! baseline runs through a client of its own on the same cluster, its keys
//! under the store's prefix (so the cleanup removes them too): a
//! transaction `version == 0 → put` for admit, `value == owner:fence → put`
//! for the fenced writes, and for the bare claim the first queued key
//! moved to a claimed key by a transaction comparing its revision. The peer
//! lock is the same compare-and-put with a compare-and-delete. Waiters queue
//! as keys under a prefix per scope, in key order, and each watches a
//! wake-up key of its own that the waker puts in the transaction that
//! removes the waiter from the queue.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, WatchOptions};
use tenure_backend_etcd::{EtcdConfig, EtcdStore};

use super::{Backend, PeerLock, PeerSession, RawBaseline, Teardown, WakeSession, WakeUps};
use crate::options::BackendKind;
use crate::BenchResult;

/// A store under a fresh prefix and a bare client beside it.
pub(super) async fn open(url: &str) -> BenchResult<Backend> {
    let base = EtcdConfig::from(url);
    let prefix = format!("{}/{}", base.key_prefix(), super::unique_name("bench"));
    let config = base.prefix(prefix.as_str());
    let store = Arc::new(EtcdStore::connect(config.clone()).await?);
    let client = Client::connect(config.endpoints(), None).await?;
    let raw = Arc::new(RawEtcd {
        client,
        prefix: format!("{prefix}/raw/"),
    });
    Ok(Backend {
        kind: BackendKind::Etcd,
        store: store.clone(),
        queue: store.clone(),
        raw: raw.clone(),
        peer: raw.clone(),
        wake_ups: raw,
        tables: None,
        server_time: None,
        teardown: Box::new(DeletePrefix(store)),
    })
}

/// Deletes the run's prefix (the raw keys live under it too).
struct DeletePrefix(Arc<EtcdStore>);

#[async_trait]
impl Teardown for DeletePrefix {
    async fn teardown(&self) -> BenchResult<()> {
        self.0.delete_prefix().await?;
        Ok(())
    }
}

#[derive(Clone)]
struct RawEtcd {
    client: Client,
    prefix: String,
}

impl RawEtcd {
    fn key(&self, family: &str, name: &str) -> String {
        format!("{}{family}/{name}", self.prefix)
    }

    /// Applies `then` if `when` holds; true when it did.
    async fn txn(&self, when: Vec<Compare>, then: Vec<TxnOp>) -> BenchResult<bool> {
        let response = self
            .client
            .clone()
            .txn(Txn::new().when(when).and_then(then))
            .await?;
        Ok(response.succeeded())
    }

    /// The first key under `prefix` and its revision, if any.
    async fn first_under(&self, prefix: &str) -> BenchResult<Option<(String, String, i64)>> {
        let options = GetOptions::new().with_prefix().with_limit(1);
        let response = self.client.clone().get(prefix, Some(options)).await?;
        Ok(response.kvs().first().map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
                kv.mod_revision(),
            )
        }))
    }

    /// Moves the first key under `prefix` to what `then` writes, in a
    /// transaction comparing its revision; the key and value moved, if any.
    async fn pop_first(
        &self,
        prefix: &str,
        then: impl Fn(&str, &str) -> Vec<TxnOp> + Send + Sync,
    ) -> BenchResult<Option<(String, String)>> {
        loop {
            let Some((key, value, revision)) = self.first_under(prefix).await? else {
                return Ok(None);
            };
            let mut operations = vec![TxnOp::delete(key.as_str(), None)];
            operations.extend(then(&key, &value));
            let when = vec![Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                revision,
            )];
            if self.txn(when, operations).await? {
                return Ok(Some((key, value)));
            }
        }
    }
}

#[async_trait]
impl RawBaseline for RawEtcd {
    fn describe(&self) -> &'static str {
        "txn version==0 → put / txn value==owner:fence → put / txn mod_revision==r → move claim"
    }

    async fn insert(&self, key: &str, owner: &str, _ttl: Duration) -> BenchResult<bool> {
        let key = self.key("lease", key);
        let when = vec![Compare::version(key.as_str(), CompareOp::Equal, 0)];
        self.txn(
            when,
            vec![TxnOp::put(key.as_str(), format!("{owner}:1"), None)],
        )
        .await
    }

    async fn cas(&self, key: &str, owner: &str, fence: u64, _ttl: Duration) -> BenchResult<bool> {
        let key = self.key("lease", key);
        let value = format!("{owner}:{fence}");
        let when = vec![Compare::value(
            key.as_str(),
            CompareOp::Equal,
            value.as_str(),
        )];
        self.txn(when, vec![TxnOp::put(key.as_str(), value, None)])
            .await
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        let ids: Vec<String> = (0..count).map(|n| format!("{n:010}")).collect();
        for chunk in ids.chunks(100) {
            let puts = chunk
                .iter()
                .map(|id| TxnOp::put(self.key("queued", &format!("{queue}/{id}")), "", None))
                .collect();
            self.txn(Vec::new(), puts).await?;
        }
        Ok(())
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        let prefix = self.key("queued", &format!("{queue}/"));
        let claimed = self
            .pop_first(&prefix, |key, _| {
                let id = &key[prefix.len()..];
                vec![TxnOp::put(
                    self.key("claimed", &format!("{queue}/{id}")),
                    worker,
                    None,
                )]
            })
            .await?;
        Ok(claimed.map(|(key, _)| key[prefix.len()..].to_owned()))
    }

    async fn complete_job(&self, queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let key = self.key("claimed", &format!("{queue}/{id}"));
        let when = vec![Compare::value(key.as_str(), CompareOp::Equal, worker)];
        self.txn(when, vec![TxnOp::delete(key.as_str(), None)])
            .await
    }
}

#[async_trait]
impl PeerLock for RawEtcd {
    fn describe(&self) -> &'static str {
        "txn version==0 → put / txn value==token → delete"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(EtcdPeer {
            raw: self.clone(),
            token: super::unique_name("peer"),
        }))
    }
}

struct EtcdPeer {
    raw: RawEtcd,
    token: String,
}

#[async_trait]
impl PeerSession for EtcdPeer {
    async fn try_acquire(&mut self, scope: &str, _ttl: Duration) -> BenchResult<bool> {
        let key = self.raw.key("lock", scope);
        let when = vec![Compare::version(key.as_str(), CompareOp::Equal, 0)];
        self.raw
            .txn(
                when,
                vec![TxnOp::put(key.as_str(), self.token.as_str(), None)],
            )
            .await
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        let key = self.raw.key("lock", scope);
        let when = vec![Compare::value(
            key.as_str(),
            CompareOp::Equal,
            self.token.as_str(),
        )];
        self.raw
            .txn(when, vec![TxnOp::delete(key.as_str(), None)])
            .await?;
        Ok(())
    }
}

#[async_trait]
impl WakeUps for RawEtcd {
    fn describe(&self) -> &'static str {
        "a key per waiter under a prefix per scope; the waker moves the first to the waiter's wake-up key, which it watches"
    }

    async fn session(&self) -> BenchResult<Box<dyn WakeSession>> {
        Ok(Box::new(EtcdWaiter {
            raw: self.clone(),
            wake_up: self.key("wake", &super::unique_name("waiter")),
            queued: None,
        }))
    }
}

struct EtcdWaiter {
    raw: RawEtcd,
    /// This session's wake-up key, the value it queues under.
    wake_up: String,
    /// The queue key this session is in, and the revision it joined at.
    queued: Option<(String, i64)>,
}

impl EtcdWaiter {
    /// Takes the wake-up if it is there.
    async fn take_wake_up(&mut self) -> BenchResult<bool> {
        let when = vec![Compare::version(
            self.wake_up.as_str(),
            CompareOp::Greater,
            0,
        )];
        self.raw
            .txn(when, vec![TxnOp::delete(self.wake_up.as_str(), None)])
            .await
    }
}

#[async_trait]
impl WakeSession for EtcdWaiter {
    async fn enqueue(&mut self, scope: &str) -> BenchResult<()> {
        // uuid v7 ids sort by time: key order is arrival order.
        let key = self.raw.key(
            "waiters",
            &format!("{scope}/{}", tenure_lease_core::generate_id()),
        );
        let response = self
            .raw
            .client
            .clone()
            .put(key.as_str(), self.wake_up.as_str(), None)
            .await?;
        let revision = response
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        self.queued = Some((key, revision));
        Ok(())
    }

    async fn wait(&mut self, timeout: Duration) -> BenchResult<bool> {
        let (queue_key, joined_at) = self.queued.take().ok_or("wait without enqueue")?;
        // From the revision it joined at: a wake-up put before the watch
        // starts is replayed, never missed.
        let options = WatchOptions::new().with_start_revision(joined_at + 1);
        let mut watch = self
            .raw
            .client
            .clone()
            .watch(self.wake_up.as_str(), Some(options))
            .await?;
        let woken = tokio::time::timeout(timeout, async {
            while let Some(response) = watch.message().await? {
                if response
                    .events()
                    .iter()
                    .any(|event| event.event_type() == EventType::Put)
                {
                    return BenchResult::Ok(true);
                }
            }
            BenchResult::Ok(false)
        })
        .await;
        if let Ok(woken) = woken {
            if woken? {
                self.take_wake_up().await?;
                return Ok(true);
            }
        }
        // Timed out: leave the queue, unless a waker already took this
        // session out of it, in which case its wake-up is there to take.
        let when = vec![Compare::version(queue_key.as_str(), CompareOp::Greater, 0)];
        if self
            .raw
            .txn(when, vec![TxnOp::delete(queue_key.as_str(), None)])
            .await?
        {
            return Ok(false);
        }
        self.take_wake_up().await
    }

    async fn wake_next(&mut self, scope: &str) -> BenchResult<bool> {
        let prefix = self.raw.key("waiters", &format!("{scope}/"));
        let popped = self
            .raw
            .pop_first(&prefix, |_, wake_up| vec![TxnOp::put(wake_up, "1", None)])
            .await?;
        Ok(popped.is_some())
    }
}

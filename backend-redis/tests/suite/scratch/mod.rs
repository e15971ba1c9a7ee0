//! The shared-server harness of the Redis tests that look at raw keys: a
//! store in a fresh namespace of `TENURE_REDIS_URL`, a plain connection
//! beside it, the raw writes that damage what the store keeps (also the
//! conformance factory's), and the clean-up. Without the variable a test
//! prints one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

use std::future::Future;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands as _;
use tenure_backend_redis::{RedisConfig, RedisStore};
use tenure_lease_core::{Admission, AdmitRequest, LeaseRecord, LeaseStore};

/// A store in a fresh namespace of the shared server, and a plain connection
/// to the same server for looking at (and tampering with) the raw keys.
#[derive(Clone)]
pub struct Scratch {
    pub store: RedisStore,
    pub raw: MultiplexedConnection,
    pub prefix: String,
}

impl Scratch {
    pub fn record_key(&self, id: &str) -> String {
        format!("{}rec:{id}", self.prefix)
    }
}

/// Runs `body` on a [`Scratch`] (its store built from `config`), then
/// deletes the namespace, whether `body` passed or panicked, and checks that
/// nothing of it is left.
pub async fn with_namespace<F, Fut>(
    test: &str,
    config: impl FnOnce(RedisConfig) -> RedisConfig,
    body: F,
) where
    F: FnOnce(Scratch) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let url = match tenure_test_support::shared::redis_url() {
        Ok(url) => url,
        Err(why) => return tenure_conformance::skip_unless_required(test, &why),
    };
    let namespace = format!("test:{test}:{}", tenure_lease_core::generate_id());
    let store = RedisStore::connect(config(RedisConfig::new(url.clone(), namespace.clone())))
        .await
        .expect("connect to the test server");
    let raw = redis::Client::open(url)
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a raw connection");
    let scratch = Scratch {
        store: store.clone(),
        raw: raw.clone(),
        prefix: key_prefix(&namespace),
    };
    let outcome = tokio::spawn(body(scratch)).await;
    store
        .delete_namespace()
        .await
        .expect("delete the namespace");
    let left: Vec<String> = namespace_keys(&mut raw.clone(), &key_prefix(&namespace)).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
    assert!(left.is_empty(), "delete_namespace left {left:?}");
}

/// What every key of `namespace` starts with.
pub fn key_prefix(namespace: &str) -> String {
    format!("tenure:{{{namespace}}}:")
}

/// A plain connection to the one of `servers` that holds `namespace`'s
/// keys: the only one, or, among a cluster's nodes, the one that serves
/// their slot (the others answer `MOVED`).
pub async fn raw_connection(
    servers: &[String],
    namespace: &str,
) -> redis::RedisResult<MultiplexedConnection> {
    let mut last_error = None;
    for server in servers {
        let mut connection = redis::Client::open(server.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        if servers.len() == 1 {
            return Ok(connection);
        }
        let serves: redis::RedisResult<String> = redis::cmd("TYPE")
            .arg(key_prefix(namespace))
            .query_async(&mut connection)
            .await;
        match serves {
            Ok(_) => return Ok(connection),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Client, "no server to connect to"))
    }))
}

/// Sets `field` of the hash at `key` to `value`, or deletes it (`None`),
/// behind the store's back.
pub async fn set_field(
    raw: &mut MultiplexedConnection,
    key: &str,
    field: &str,
    value: Option<&[u8]>,
) -> redis::RedisResult<()> {
    match value {
        Some(bytes) => raw.hset(key, field, bytes).await,
        None => raw.hdel(key, field).await,
    }
}

/// Every key starting with `prefix` (which holds no glob characters).
pub async fn namespace_keys(raw: &mut MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = 0_u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(raw)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

pub async fn admitted(store: &RedisStore, request: AdmitRequest) -> LeaseRecord {
    match store.admit(&request).await.expect("admit") {
        Admission::Admitted { record, .. } => record,
        other => panic!("{} was not admitted: {other:?}", request.id),
    }
}

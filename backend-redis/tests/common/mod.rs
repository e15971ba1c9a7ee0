//! The Redis factory both conformance files run the kit with: a fresh
//! random namespace per case on the server `TENURE_REDIS_URL` names, deleted
//! afterwards. Without the variable every case prints one skip line (and
//! fails under `TENURE_REQUIRE_SERVICES=1`).

use async_trait::async_trait;
use tenure_backend_redis::{RedisConfig, RedisStore};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};

/// The environment variable naming the server the kit runs against.
const URL_VAR: &str = "TENURE_REDIS_URL";

/// A fresh random namespace per case on the server `TENURE_REDIS_URL` names.
pub struct RedisFactory {
    url: Option<String>,
}

impl RedisFactory {
    /// The factory for the server the environment names, if any.
    pub fn from_env() -> Self {
        RedisFactory {
            url: tenure_conformance::service_url(URL_VAR),
        }
    }
}

#[async_trait]
impl Factory for RedisFactory {
    type Store = RedisStore;

    fn unavailable_reason(&self) -> Option<String> {
        match self.url {
            Some(_) => None,
            None => Some(format!("{URL_VAR} is not set")),
        }
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<RedisStore>> {
        let url = self.url.clone().unwrap_or_default();
        let namespace = format!("conformance:{}", tenure_lease_core::generate_id());
        Ok(Subject {
            store: RedisStore::connect(RedisConfig::new(url, namespace)).await?,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &RedisStore) -> tenure_lease_core::Result<()> {
        store.delete_namespace().await.map(drop)
    }

    /// Entries per key of the case's namespace.
    fn footprint_probe(&self) -> Option<FootprintProbe<RedisStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<RedisStore>| {
                let url = url.clone();
                Box::pin(async move { count_entries(&url, store.config().namespace()).await })
            },
        ))
    }
}

/// Entries per key (members, fields, or 1 for a string) of the keys of
/// `namespace`, by name after the namespace's prefix. The case namespaces
/// hold no glob characters.
async fn count_entries(url: &str, namespace: &str) -> tenure_lease_core::Result<Footprint> {
    let failed = |error: redis::RedisError| {
        tenure_lease_core::Error::unavailable("cannot count the keys of the case's namespace")
            .with_source(error)
    };
    let client = redis::Client::open(url).map_err(failed)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(failed)?;
    let prefix = format!("tenure:{{{namespace}}}:");
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0_u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        keys.extend(found);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut footprint = Footprint::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        let size_command = match kind.as_str() {
            "zset" => "ZCARD",
            "hash" => "HLEN",
            "set" => "SCARD",
            "list" => "LLEN",
            _ => "EXISTS",
        };
        let entries: u64 = redis::cmd(size_command)
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        let name = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
        footprint.insert(format!("{kind} {name}"), entries);
    }
    Ok(footprint)
}

//! The Redis factory both conformance files run the kit with: a fresh
//! random namespace per case on the server `TENURE_REDIS_URL` names, deleted
//! afterwards. Without the variable every case prints one skip line (and
//! fails under `TENURE_REQUIRE_SERVICES=1`).

use async_trait::async_trait;
use backend_redis::{RedisConfig, RedisStore};
use conformance::{ClockControl, Factory, Subject};

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
            url: conformance::service_url(URL_VAR),
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

    async fn create(&self) -> lease_core::Result<Subject<RedisStore>> {
        let url = self.url.clone().unwrap_or_default();
        let namespace = format!("conformance:{}", lease_core::generate_id());
        Ok(Subject {
            store: RedisStore::connect(RedisConfig::new(url, namespace)).await?,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &RedisStore) -> lease_core::Result<()> {
        store.delete_namespace().await.map(drop)
    }
}

//! The whole conformance kit against Redis, one test per case, each in its
//! own namespace. Needs `TENURE_REDIS_URL`; without it every case prints one
//! skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

use async_trait::async_trait;
use backend_redis::{RedisConfig, RedisStore};
use conformance::{ClockControl, Factory, Subject};

/// The environment variable naming the server the kit runs against.
const URL_VAR: &str = "TENURE_REDIS_URL";

/// A fresh random namespace per case on the server `TENURE_REDIS_URL` names.
struct RedisFactory {
    url: Option<String>,
}

impl RedisFactory {
    fn from_env() -> Self {
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

conformance::tenure_conformance!(RedisFactory::from_env());

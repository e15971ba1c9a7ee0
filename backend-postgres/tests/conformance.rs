//! The whole conformance kit against PostgreSQL, one test per case, each in
//! its own schema. Skipped (one line each) when `TENURE_PG_URL` is unset.

mod support;

use async_trait::async_trait;
use backend_postgres::PgStore;
use conformance::{ClockControl, Factory, Subject};

/// A fresh schema per case on the server at `TENURE_PG_URL`, dropped at
/// teardown. The server's clock cannot be moved: cases wait on it.
struct PgFactory {
    url: Option<String>,
}

impl PgFactory {
    fn from_env() -> Self {
        PgFactory {
            url: conformance::service_url(support::URL_VAR),
        }
    }
}

#[async_trait]
impl Factory for PgFactory {
    type Store = PgStore;

    fn unavailable_reason(&self) -> Option<String> {
        match self.url {
            Some(_) => None,
            None => Some(format!("{} is not set", support::URL_VAR)),
        }
    }

    async fn create(&self) -> lease_core::Result<Subject<PgStore>> {
        let url = self.url.as_deref().ok_or_else(|| {
            lease_core::Error::new(lease_core::ErrorKind::Config, "no server URL")
        })?;
        Ok(Subject {
            store: support::connect(url, &support::fresh_schema()).await?,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &PgStore) -> lease_core::Result<()> {
        support::drop_schema(store).await
    }
}

conformance::tenure_conformance!(PgFactory::from_env());

//! The store as an application account holding only `SELECT, INSERT,
//! UPDATE, DELETE` on its database (the grants the crate docs list), with
//! the tables migrated beforehand by an account that may create them: the
//! kit's variant cases run as that account, and the account cannot
//! migrate.

use async_trait::async_trait;
use tenure_backend_mysql::{MigrationMode, MySqlConfig, MySqlStore};
use tenure_conformance::{ClockControl, Factory, Subject};
use tenure_lease_core::{Error, ErrorKind};

use crate::support;

/// The grants of the application account, on its database.
const GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE";

/// `url` (of an account that may create users) as `account`, on
/// `database`.
fn url_as(url: &str, account: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    let query = url.split_once('?').map(|(_, query)| format!("?{query}"));
    format!(
        "{scheme}://{account}:{account}@{host}/{database}{}",
        query.unwrap_or_default()
    )
}

/// A fresh database migrated by the admin account, and an account holding
/// only [`GRANTS`] on it (named after the database, its password its
/// name).
async fn restricted_database(url: &str) -> tenure_lease_core::Result<(String, String)> {
    let database = support::fresh_database();
    support::create_database(url, &database).await?;
    MySqlStore::apply_migrations(&MySqlConfig::new(support::on_database(url, &database))).await?;
    // The account's name is at most 80 characters (32 on MySQL 5.7).
    let account = format!("app_{}", &database[database.len() - 24..]);
    support::execute(
        url,
        &format!(
            "CREATE USER '{account}'@'%' IDENTIFIED BY '{account}'; \
             GRANT {GRANTS} ON `{database}`.* TO '{account}'@'%';"
        ),
    )
    .await
    .map_err(|error| Error::unavailable("cannot create the account").with_source(error))?;
    Ok((database, account))
}

/// Drops the database and the account of [`restricted_database`].
async fn drop_restricted(
    url: &str,
    database: &str,
    account: &str,
) -> tenure_lease_core::Result<()> {
    support::execute(url, &format!("DROP USER IF EXISTS '{account}'@'%'"))
        .await
        .map_err(|error| Error::unavailable("cannot drop the account").with_source(error))?;
    support::drop_database(url, database).await
}

/// A fresh restricted database and account per case, the store connected
/// as that account with [`MigrationMode::VerifyOnly`].
pub struct RestrictedFactory {
    url: Result<String, String>,
}

impl RestrictedFactory {
    fn from_env() -> Self {
        RestrictedFactory {
            url: tenure_test_support::shared::mysql_url(),
        }
    }
}

#[async_trait]
impl Factory for RestrictedFactory {
    type Store = MySqlStore;

    fn unavailable_reason(&self) -> Option<String> {
        self.url.as_ref().err().cloned()
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<MySqlStore>> {
        let url = self
            .url
            .as_deref()
            .map_err(|why| Error::unavailable(why.clone()))?;
        let (database, account) = restricted_database(url).await?;
        let store = MySqlStore::connect(
            MySqlConfig::new(url_as(url, &account, &database))
                .max_connections(support::POOL_SIZE)
                .migrations(MigrationMode::VerifyOnly),
        )
        .await?;
        Ok(Subject {
            store,
            clock: ClockControl::Real,
        })
    }

    async fn teardown(&self, store: &MySqlStore) -> tenure_lease_core::Result<()> {
        store.close().await;
        let url = self
            .url
            .as_deref()
            .map_err(|why| Error::unavailable(why.clone()))?;
        let database = support::database_of(store);
        drop_restricted(
            url,
            &database,
            &format!("app_{}", &database[database.len() - 24..]),
        )
        .await
    }
}

/// The kit's variant cases as the application account: the model-based
/// sequences run every operation (every statement), the races and hostile
/// input every path besides.
mod variant {
    tenure_conformance::tenure_variant_conformance!(super::RestrictedFactory::from_env());
}

/// The application account cannot create or alter the tables: connecting
/// with [`MigrationMode::Apply`] to an empty database it may use answers
/// `Config` naming the missing privilege, and verifying an empty database
/// answers `Incompatible` saying to apply the migrations first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_account_cannot_migrate() {
    let Some(url) =
        tenure_test_support::shared::mysql_url_for("the_application_account_cannot_migrate")
    else {
        return;
    };
    let (database, account) = restricted_database(&url)
        .await
        .expect("restricted database");
    let empty = support::fresh_database();
    support::create_database(&url, &empty)
        .await
        .expect("create");
    support::execute(
        &url,
        &format!("GRANT {GRANTS} ON `{empty}`.* TO '{account}'@'%'"),
    )
    .await
    .expect("grant");
    let applying = MySqlStore::connect(MySqlConfig::new(url_as(&url, &account, &empty))).await;
    let verifying = MySqlStore::connect(
        MySqlConfig::new(url_as(&url, &account, &empty)).migrations(MigrationMode::VerifyOnly),
    )
    .await;
    let migrated = MySqlStore::connect(
        MySqlConfig::new(url_as(&url, &account, &database)).migrations(MigrationMode::VerifyOnly),
    )
    .await
    .map(drop);
    support::drop_database(&url, &empty).await.expect("drop");
    drop_restricted(&url, &database, &account)
        .await
        .expect("drop");
    let error = applying.expect_err("the account may not create tables");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains("denied"), "{error}");
    let error = verifying.expect_err("no tables to verify");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(error.message().contains("apply the migrations"), "{error}");
    assert!(migrated.is_ok(), "{:?}", migrated.err());
}

//! The test factory shared by the conformance tests: each case gets its own
//! file in its own temporary directory, on a manual clock, and the raw
//! connection that damages a file behind the store's back (the kit's
//! damage cases and `damaged_rows.rs`); the kit's process suites get a
//! file on the system clock that the child processes open too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tempfile::TempDir;
use tenure_backend_sqlite::{SqliteConfig, SqliteStore};
use tenure_conformance::damage::{BadTime, Damage, DamageOutcome, Damager, Target, TimeField};
use tenure_conformance::offset_clock::{ClockOffsetter, OffsetClock};
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::nemesis::NemesisSupport;
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error, ManualClock};

/// How long a process sharing the file waits for another's write lock:
/// generous, as three processes commit one fsync after another.
const SHARED_BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates each case's store in a fresh temporary directory, kept alive
/// until the case's teardown removes it.
#[derive(Debug, Default)]
pub struct SqliteFactory {
    directories: Mutex<HashMap<PathBuf, TempDir>>,
    /// The manual clock of each case's file, for the store reopened on it.
    clocks: Arc<Mutex<HashMap<PathBuf, Arc<ManualClock>>>>,
}

#[async_trait]
impl Factory for SqliteFactory {
    type Store = SqliteStore;

    async fn create(&self) -> tenure_lease_core::Result<Subject<SqliteStore>> {
        let clock = Arc::new(ManualClock::starting_now());
        let store = self
            .in_fresh_directory(|path| SqliteConfig::new(path).clock(clock.clone()))
            .await?;
        self.clocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(store.path().to_owned(), Arc::clone(&clock));
        Ok(Subject {
            store,
            clock: ClockControl::Manual(clock),
        })
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<SqliteStore>> {
        Some(self)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<SqliteStore>> {
        Some(self)
    }

    /// Rows per table of the file, read on a connection of its own.
    fn footprint_probe(&self) -> Option<FootprintProbe<SqliteStore>> {
        Some(Arc::new(|store: Arc<SqliteStore>| {
            Box::pin(async move { count_rows(store.path()) })
        }))
    }

    /// Damage by SQL on a connection of its own: SQLite keeps any value in
    /// any column, so every damage of the kit can be held.
    fn damager(&self) -> Option<Damager<SqliteStore>> {
        Some(Arc::new(
            |store: Arc<SqliteStore>, target: Target, damage: Damage| {
                Box::pin(async move { apply_damage(store.path(), &target, damage) })
            },
        ))
    }

    /// A second store on the case's file, on the case's clock.
    fn reopen(&self) -> Option<Reopener<SqliteStore>> {
        let clocks = Arc::clone(&self.clocks);
        Some(Arc::new(move |store: Arc<SqliteStore>| {
            let clock = clocks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(store.path())
                .cloned();
            Box::pin(async move {
                let config = SqliteConfig::new(store.path());
                let config = match clock {
                    Some(clock) => config.clock(clock),
                    None => config,
                };
                SqliteStore::connect(config).await
            })
        }))
    }

    /// The case's file, opened on an [`OffsetClock`].
    fn clock_offset(&self) -> Option<ClockOffsetter<SqliteStore>> {
        Some(Arc::new(|store: Arc<SqliteStore>, offset| {
            Box::pin(async move {
                let config = SqliteConfig::new(store.path()).clock(Arc::new(OffsetClock(offset)));
                SqliteStore::connect(config).await.map(Into::into)
            })
        }))
    }

    async fn teardown(&self, store: &SqliteStore) -> tenure_lease_core::Result<()> {
        self.clocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(store.path());
        let directory = self
            .directories
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(store.path());
        match directory {
            Some(directory) => directory.close().map_err(|error| {
                Error::unavailable("cannot remove the case's temporary directory")
                    .with_source(error)
            }),
            None => Ok(()),
        }
    }
}

impl SqliteFactory {
    /// Opens the store `config` describes for a file in a fresh temporary
    /// directory, kept until the store's teardown.
    async fn in_fresh_directory(
        &self,
        config: impl FnOnce(&Path) -> SqliteConfig,
    ) -> tenure_lease_core::Result<SqliteStore> {
        let directory = TempDir::with_prefix("tenure-sqlite-conformance-").map_err(|error| {
            Error::unavailable("cannot create a temporary directory").with_source(error)
        })?;
        let path = directory.path().join("leases.db");
        let store = SqliteStore::connect(config(&path)).await?;
        self.directories
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path, directory);
        Ok(store)
    }
}

/// A file on the clock the nemesis gives, waiting patiently for locks (four
/// clients write at once).
#[async_trait]
impl NemesisSupport<SqliteStore> for SqliteFactory {
    async fn create_on_clock(
        &self,
        clock: Arc<dyn Clock>,
    ) -> tenure_lease_core::Result<SqliteStore> {
        self.in_fresh_directory(|path| shared_config(path).clock(clock))
            .await
    }

    fn reads_given_clock(&self) -> bool {
        true
    }
}

/// The file on the system clock, waiting patiently for locks; its path is
/// the address.
fn shared_config(path: &Path) -> SqliteConfig {
    SqliteConfig::new(path).busy_timeout(SHARED_BUSY_TIMEOUT)
}

#[async_trait]
impl ProcessSupport<SqliteStore> for SqliteFactory {
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<SqliteStore>> {
        let store = self.in_fresh_directory(shared_config).await?;
        Ok(SharedStore {
            address: store.path().display().to_string(),
            store,
        })
    }

    async fn open_shared(&self, path: &str) -> tenure_lease_core::Result<SqliteStore> {
        SqliteStore::connect(shared_config(Path::new(path))).await
    }
}

/// Rows per table of the file at `path`.
fn count_rows(path: &Path) -> tenure_lease_core::Result<Footprint> {
    let failed = |error: rusqlite::Error| {
        Error::unavailable("cannot count the rows of the case's file").with_source(error)
    };
    let connection = rusqlite::Connection::open(path).map_err(failed)?;
    let tables: Vec<String> = connection
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .map_err(failed)?
        .query_map([], |row| row.get(0))
        .map_err(failed)?
        .collect::<rusqlite::Result<_>>()
        .map_err(failed)?;
    let mut footprint = Footprint::new();
    for table in tables {
        let rows: u64 = connection
            .query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |row| {
                row.get(0)
            })
            .map_err(failed)?;
        footprint.insert(table, rows);
    }
    Ok(footprint)
}

/// A connection that writes what it is told: foreign keys are not checked,
/// as by a hand edit with another tool.
pub fn raw_connection(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let connection = rusqlite::Connection::open(path)?;
    connection.pragma_update(None, "foreign_keys", "OFF")?;
    Ok(connection)
}

/// SQL for a REAL no integer column of the store may hold: infinity.
const INFINITY: &str = "9e999";

/// Applies the kit's `damage` to `target` in the file at `path`.
fn apply_damage(
    path: &Path,
    target: &Target,
    damage: Damage,
) -> tenure_lease_core::Result<DamageOutcome> {
    let (table, key, id) = match target {
        Target::Lease(id) => ("leases", "id", id),
        Target::Job(id) => ("jobs", "id", id),
        _ => return Ok(DamageOutcome::CannotHold),
    };
    let is_job = table == "jobs";
    let (table, key, column, value) = match damage {
        Damage::Timestamp(field, bad) => {
            let column = match field {
                TimeField::CreatedAt => "created_at",
                TimeField::UpdatedAt => "updated_at",
                TimeField::LeaseExpiresAt => "lease_expires_at",
                TimeField::RunAt if is_job => "run_at",
                TimeField::TakenBackAt if is_job => "taken_back_at",
                _ => return Ok(DamageOutcome::CannotHold),
            };
            let value = match bad {
                BadTime::OutOfRange => "9223372036854775807",
                BadTime::NotFinite => INFINITY,
                _ => "'garbage'",
            };
            (table, key, column, value)
        }
        Damage::UnknownStatus => (
            table,
            key,
            if is_job { "state" } else { "status" },
            "'bogus'",
        ),
        Damage::NegativeFence => (table, key, "fence", "-1"),
        Damage::HugeFence => (table, key, "fence", "1e19"),
        Damage::NegativeAttempt if is_job => (table, key, "attempt", "-1"),
        Damage::HugeAttempt if is_job => (table, key, "attempt", "1001"),
        Damage::MalformedScopes if !is_job => ("lease_scopes", "lease_id", "scope", "X'00FF'"),
        Damage::MalformedMetadata if !is_job => (table, key, "metadata", "'not json'"),
        Damage::MalformedPayload if is_job => (table, key, "payload", "'not json'"),
        Damage::MalformedCapabilities if is_job => {
            (table, key, "required_capabilities", "'not json'")
        }
        Damage::NegativeTakeBacks if is_job => (table, key, "taken_back", "-1"),
        _ => return Ok(DamageOutcome::CannotHold),
    };
    let failed = |error: rusqlite::Error| {
        Error::unavailable(format!("cannot damage {table}.{column} of {id:?}")).with_source(error)
    };
    let changed = raw_connection(path)
        .map_err(failed)?
        .execute(
            &format!("UPDATE {table} SET {column} = {value} WHERE {key} = ?1"),
            [id],
        )
        .map_err(failed)?;
    if changed == 0 {
        return Err(Error::unavailable(format!(
            "nothing to damage: no row of {table} for {id:?}"
        )));
    }
    Ok(DamageOutcome::Applied)
}

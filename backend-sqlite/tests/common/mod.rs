//! The test factory shared by the lease and queue conformance tests: each
//! case gets its own file in its own temporary directory, on a manual clock.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tempfile::TempDir;
use tenure_backend_sqlite::{SqliteConfig, SqliteStore};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Error, ManualClock};

/// Creates each case's store in a fresh temporary directory, kept alive
/// until the case's teardown removes it.
#[derive(Debug, Default)]
pub struct SqliteFactory {
    directories: Mutex<HashMap<PathBuf, TempDir>>,
}

#[async_trait]
impl Factory for SqliteFactory {
    type Store = SqliteStore;

    async fn create(&self) -> tenure_lease_core::Result<Subject<SqliteStore>> {
        let directory = TempDir::with_prefix("tenure-sqlite-conformance-").map_err(|error| {
            Error::unavailable("cannot create a temporary directory").with_source(error)
        })?;
        let path = directory.path().join("leases.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = SqliteStore::open(SqliteConfig::new(&path).clock(clock.clone())).await?;
        self.directories
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path, directory);
        Ok(Subject {
            store,
            clock: ClockControl::Manual(clock),
        })
    }

    /// Rows per table of the file, read on a connection of its own.
    fn footprint_probe(&self) -> Option<FootprintProbe<SqliteStore>> {
        Some(Arc::new(|store: Arc<SqliteStore>| {
            Box::pin(async move { count_rows(store.path()) })
        }))
    }

    async fn teardown(&self, store: &SqliteStore) -> tenure_lease_core::Result<()> {
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

/// Rows per table of the file at `path`.
fn count_rows(path: &std::path::Path) -> tenure_lease_core::Result<Footprint> {
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

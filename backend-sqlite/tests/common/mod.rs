//! The test factory shared by the lease and queue conformance tests: each
//! case gets its own file in its own temporary directory, on a manual clock.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use backend_sqlite::{SqliteConfig, SqliteStore};
use conformance::{ClockControl, Factory, Subject};
use lease_core::{Error, ManualClock};
use tempfile::TempDir;

/// Creates each case's store in a fresh temporary directory, kept alive
/// until the case's teardown removes it.
#[derive(Debug, Default)]
pub struct SqliteFactory {
    directories: Mutex<HashMap<PathBuf, TempDir>>,
}

#[async_trait]
impl Factory for SqliteFactory {
    type Store = SqliteStore;

    async fn create(&self) -> lease_core::Result<Subject<SqliteStore>> {
        let directory = TempDir::with_prefix("tenure-sqlite-conformance-").map_err(|error| {
            Error::unavailable("cannot create a temporary directory").with_source(error)
        })?;
        let path = directory.path().join("leases.db");
        let clock = Arc::new(ManualClock::starting_now());
        let store = SqliteStore::open(SqliteConfig::new(&path).clock(clock.clone())).await?;
        self.directories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path, directory);
        Ok(Subject {
            store,
            clock: ClockControl::Manual(clock),
        })
    }

    async fn teardown(&self, store: &SqliteStore) -> lease_core::Result<()> {
        let directory = self
            .directories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
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

//! The conformance factory of the file backend: what a third party writes
//! to run the kit on their store. Each case gets its own file in its own
//! temporary directory, on a manual clock the kit moves; the factory can
//! also reopen a case's file (as a restarted worker would), count what the
//! file keeps, damage it behind the store's back (holding the store's own
//! lock), and hand child processes a file on the host clock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use tempfile::TempDir;
use tenure_backend_file::FileStore;
use tenure_conformance::damage::{Damage, DamageOutcome, Damager, Target};
use tenure_conformance::offset_clock::{ClockOffsetter, OffsetClock};
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::nemesis::NemesisSupport;
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error, ManualClock, SystemClock};

/// Creates each case's store in a fresh temporary directory, removed by the
/// case's teardown.
#[derive(Debug, Default)]
pub struct FileFactory {
    directories: Mutex<HashMap<PathBuf, TempDir>>,
    /// The clock of each case's file, for the store reopened on it.
    clocks: Arc<Mutex<HashMap<PathBuf, Arc<dyn Clock>>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait]
impl Factory for FileFactory {
    type Store = FileStore;

    async fn create(&self) -> tenure_lease_core::Result<Subject<FileStore>> {
        let clock = Arc::new(ManualClock::starting_now());
        let store = self.in_fresh_directory(clock.clone()).await?;
        Ok(Subject {
            store,
            clock: ClockControl::Manual(clock),
        })
    }

    /// Entries per map of the file.
    fn footprint_probe(&self) -> Option<FootprintProbe<FileStore>> {
        Some(Arc::new(|store: Arc<FileStore>| {
            Box::pin(async move {
                let document = read_document(store.path())?;
                let mut footprint = Footprint::new();
                for map in ["records", "holders", "jobs", "gates", "rate_logs"] {
                    let entries = document
                        .get(map)
                        .and_then(Value::as_object)
                        .map_or(0, serde_json::Map::len);
                    footprint.insert(map.to_owned(), entries as u64);
                }
                Ok(footprint)
            })
        }))
    }

    /// Damage by editing the JSON under the store's own lock, as an operator's
    /// tool would.
    fn damager(&self) -> Option<Damager<FileStore>> {
        Some(Arc::new(
            |store: Arc<FileStore>, target: Target, damage: Damage| {
                Box::pin(async move { apply_damage(&store, &target, damage) })
            },
        ))
    }

    /// A second store on the case's file, on the case's clock.
    fn reopen(&self) -> Option<Reopener<FileStore>> {
        let clocks = Arc::clone(&self.clocks);
        Some(Arc::new(move |store: Arc<FileStore>| {
            let clock = lock(&clocks).get(store.path()).cloned();
            Box::pin(async move {
                let clock =
                    clock.ok_or_else(|| Error::unavailable("no clock for the case's file"))?;
                FileStore::open_with_clock(store.path(), clock).await
            })
        }))
    }

    /// The case's file, opened on an [`OffsetClock`].
    fn clock_offset(&self) -> Option<ClockOffsetter<FileStore>> {
        Some(Arc::new(|store: Arc<FileStore>, offset| {
            Box::pin(async move {
                FileStore::open_with_clock(store.path(), Arc::new(OffsetClock(offset)))
                    .await
                    .map(Into::into)
            })
        }))
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<FileStore>> {
        Some(self)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<FileStore>> {
        Some(self)
    }

    async fn teardown(&self, store: &FileStore) -> tenure_lease_core::Result<()> {
        lock(&self.clocks).remove(store.path());
        let directory = lock(&self.directories).remove(store.path());
        match directory {
            Some(directory) => directory.close().map_err(|error| {
                Error::unavailable("cannot remove the case's temporary directory")
                    .with_source(error)
            }),
            None => Ok(()),
        }
    }
}

impl FileFactory {
    /// A store on `clock` in a fresh temporary directory, kept until the
    /// store's teardown.
    async fn in_fresh_directory(
        &self,
        clock: Arc<dyn Clock>,
    ) -> tenure_lease_core::Result<FileStore> {
        let directory = TempDir::with_prefix("tenure-file-conformance-").map_err(|error| {
            Error::unavailable("cannot create a temporary directory").with_source(error)
        })?;
        let path = directory.path().join("store.json");
        let store = FileStore::open_with_clock(&path, Arc::clone(&clock)).await?;
        lock(&self.directories).insert(path.clone(), directory);
        lock(&self.clocks).insert(path, clock);
        Ok(store)
    }
}

/// A file on the clock the nemesis gives.
#[async_trait]
impl NemesisSupport<FileStore> for FileFactory {
    async fn create_on_clock(&self, clock: Arc<dyn Clock>) -> tenure_lease_core::Result<FileStore> {
        self.in_fresh_directory(clock).await
    }

    fn reads_given_clock(&self) -> bool {
        true
    }
}

#[async_trait]
impl ProcessSupport<FileStore> for FileFactory {
    /// A file on the host clock; its path is the address.
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<FileStore>> {
        let store = self.in_fresh_directory(Arc::new(SystemClock)).await?;
        Ok(SharedStore {
            address: store.path().display().to_string(),
            store,
        })
    }

    async fn open_shared(&self, path: &str) -> tenure_lease_core::Result<FileStore> {
        FileStore::open(Path::new(path)).await
    }
}

fn failed(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |error| Error::unavailable(format!("cannot {what} the case's file")).with_source(error)
}

fn read_document(path: &Path) -> tenure_lease_core::Result<Value> {
    let bytes = std::fs::read(path).map_err(failed("read"))?;
    serde_json::from_slice(&bytes)
        .map_err(|error| Error::corrupt(format!("the case's file: {error}")))
}

/// Applies the kit's `damage` to `target` in the store's file, holding the
/// store's lock meanwhile.
fn apply_damage(
    store: &FileStore,
    target: &Target,
    damage: Damage,
) -> tenure_lease_core::Result<DamageOutcome> {
    let lock_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store.lock_path())
        .map_err(failed("open the lock of"))?;
    fs4::FileExt::lock(&lock_file).map_err(failed("lock"))?;
    let mut document = read_document(store.path())?;
    let (map, id, state) = match target {
        Target::Lease(id) => ("records", id, "status"),
        Target::Job(id) => ("jobs", id, "state"),
        other => {
            return Err(Error::unavailable(format!(
                "unknown damage target {other:?}"
            )))
        }
    };
    let Some(entry) = document
        .get_mut(map)
        .and_then(|map| map.get_mut(id.as_str()))
    else {
        return Err(Error::unavailable(format!(
            "no {map} entry {id:?} to damage"
        )));
    };
    let Some((field, bad)) = damage.in_json_document(state == "state") else {
        return Ok(DamageOutcome::CannotHold);
    };
    entry[field] = bad;
    let bytes = serde_json::to_vec_pretty(&document)
        .map_err(|error| Error::corrupt(format!("cannot encode the damaged file: {error}")))?;
    std::fs::write(store.path(), bytes).map_err(failed("write"))?;
    Ok(DamageOutcome::Applied)
}

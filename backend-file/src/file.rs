//! One operation on the file: lock, read, decide, write a temporary file,
//! fsync, rename, fsync the directory, unlock.
//!
//! The lock is an OS advisory lock (`flock` on Unix, `LockFileEx` on
//! Windows) on a lock file beside the store's file, taken through `fs4`.
//! It lives on a file of its own because the store's file is replaced by
//! every write: a lock on it would be a lock on an inode the next writer
//! unlinks. Every operation opens the lock file afresh, so two operations
//! of one process exclude each other exactly as two processes do, and the
//! lock is released when the operation's handle closes, even when the
//! process dies.
//!
//! Writers take the lock exclusively, readers shared. The rename is atomic,
//! so a reader (or a process that crashed mid-write and the one after it)
//! sees the old document or the new one, never a part; the fsyncs make the
//! new one durable before the operation answers.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};

use tenure_lease_core::{Clock, Error, ErrorKind, Result, Timestamp};

use crate::document::Document;

/// The paths of one store: its file, the lock file, the temporary file.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    pub(crate) path: PathBuf,
    pub(crate) lock: PathBuf,
    temp: PathBuf,
}

impl Files {
    pub(crate) fn new(path: PathBuf) -> Result<Self> {
        let Some(name) = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
        else {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "{} names no file: give the path of the store's file",
                    path.display()
                ),
            ));
        };
        let beside = |suffix: &str| path.with_file_name(format!("{name}.{suffix}"));
        Ok(Files {
            lock: beside("lock"),
            temp: beside("tmp"),
            path,
        })
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// Runs `operation` under the exclusive lock on the document as the file
    /// holds it, and writes the document back when `operation` answers `Ok`
    /// having changed it. An `Err` writes nothing.
    pub(crate) fn write<T>(
        &self,
        clock: &dyn Clock,
        operation: impl FnOnce(&mut Document, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let _lock = self.lock(Lock::Exclusive)?;
        // Read once the lock is held, so every writer stamps what it writes
        // in the order the writes land.
        let now = clock.now();
        let before = self.read_bytes()?;
        let mut document = self.decode(before.as_deref())?;
        let answer = operation(&mut document, now)?;
        let after = document.encode()?;
        if before.as_deref() != Some(after.as_slice()) {
            self.replace(&after)?;
        }
        Ok(answer)
    }

    /// Runs `operation` under the shared lock on the document as the file
    /// holds it.
    pub(crate) fn read<T>(
        &self,
        clock: &dyn Clock,
        operation: impl FnOnce(&Document, Timestamp) -> Result<T>,
    ) -> Result<T> {
        let _lock = self.lock(Lock::Shared)?;
        let now = clock.now();
        let document = self.decode(self.read_bytes()?.as_deref())?;
        operation(&document, now)
    }

    fn decode(&self, bytes: Option<&[u8]>) -> Result<Document> {
        match bytes {
            Some(bytes) => Document::decode(bytes, &self.shown()),
            None => Ok(Document::empty()),
        }
    }

    fn lock(&self, kind: Lock) -> Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.lock)
            .map_err(|error| self.io_error("open the lock file of", error))?;
        match kind {
            Lock::Exclusive => fs4::FileExt::lock(&file),
            Lock::Shared => fs4::FileExt::lock_shared(&file),
        }
        .map_err(|error| self.io_error("lock", error))?;
        Ok(file)
    }

    /// The file's bytes; `None` when there is no file yet.
    fn read_bytes(&self) -> Result<Option<Vec<u8>>> {
        match fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == IoKind::NotFound => Ok(None),
            Err(error) => Err(self.io_error("read", error)),
        }
    }

    /// Replaces the file with `bytes`, durably: the temporary file is
    /// written and synced, renamed over the file, and the directory synced
    /// so the rename survives a power cut.
    fn replace(&self, bytes: &[u8]) -> Result<()> {
        let mut temp = File::create(&self.temp)
            .map_err(|error| self.io_error("create the temporary file of", error))?;
        temp.write_all(bytes)
            .and_then(|()| temp.sync_all())
            .map_err(|error| self.io_error("write the temporary file of", error))?;
        drop(temp);
        fs::rename(&self.temp, &self.path).map_err(|error| self.io_error("replace", error))?;
        sync_directory(&self.path).map_err(|error| self.io_error("sync the directory of", error))
    }

    fn io_error(&self, what: &str, error: std::io::Error) -> Error {
        Error::unavailable(format!(
            "cannot {what} the file store {}: {error}; check the file system (space, \
             permissions) and retry: a write's outcome is unknown, applied whole or not at all",
            self.shown()
        ))
        .with_source(error)
    }
}

#[derive(Debug, Clone, Copy)]
enum Lock {
    Exclusive,
    Shared,
}

#[cfg(unix)]
fn sync_directory(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(directory) if !directory.as_os_str().is_empty() => File::open(directory)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

/// Windows cannot open a directory as a file; `MoveFileEx`, behind the
/// rename, is durable once it returns.
#[cfg(not(unix))]
fn sync_directory(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

//! Where the store lives and how it trades durability for speed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::{Clock, Error, ErrorKind, Result, SystemClock};

/// How long a write waits for another connection's lock by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// When a commit counts as done (SQLite's `PRAGMA synchronous`, in WAL mode).
///
/// * [`Durability::Full`] (the default) syncs the write-ahead log to disk at
///   every commit. Once an operation answered, its effect survives a process
///   crash **and** a power loss or OS crash. Each commit costs one `fsync`.
/// * [`Durability::Normal`] syncs only at checkpoints. Every answered
///   operation still survives a crash of the process, and the file is never
///   corrupted, but a power loss or OS crash may roll back the last
///   transactions before the failure. For leases that rollback matters: an
///   admission answered `Admitted` may vanish, and the fence sequence may go
///   back and hand out numbers already given to workers still running, so a
///   downstream [`FenceGate`](tenure_lease_core::FenceGate) may accept a stale
///   writer. Choose it when throughput matters more than surviving a power
///   loss (e.g. files on a tmpfs, or hosts whose workers die with the OS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = FULL`: every commit survives a power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: commits survive a process crash; the last
    /// ones may be lost on a power loss or OS crash.
    Normal,
}

impl Durability {
    /// The value of `PRAGMA synchronous` this durability sets.
    pub(crate) fn synchronous_pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// How to open a [`SqliteStore`](crate::SqliteStore): the file, the
/// durability, the busy timeout and the clock.
///
/// [`SqliteStore::connect`](crate::SqliteStore::connect) takes anything that
/// converts into one: a `&str` or `String` is read as
/// [`from_url`](Self::from_url) reads it (a location it refuses is reported
/// when connecting), a [`PathBuf`] or [`&Path`](Path) is the file verbatim.
///
/// ```
/// use std::time::Duration;
/// use tenure_backend_sqlite::{Durability, SqliteConfig};
///
/// let config = SqliteConfig::from_url("sqlite:///var/lib/app/leases.db")?
///     .durability(Durability::Normal)
///     .busy_timeout(Duration::from_secs(2));
/// assert_eq!(config.path(), std::path::Path::new("/var/lib/app/leases.db"));
/// # Ok::<(), tenure_lease_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SqliteConfig {
    pub(crate) path: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) busy_timeout: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    /// Why the location given as text names no usable file, reported by
    /// [`check`](Self::check) when connecting.
    invalid: Option<String>,
}

/// The URL scheme of a SQLite file (`sqlite:PATH`, `sqlite:///ABSOLUTE/PATH`).
pub const URL_SCHEMES: &[&str] = &["sqlite"];

impl SqliteConfig {
    /// The file at `path` (created if missing), with [`Durability::Full`], a
    /// busy timeout of [`DEFAULT_BUSY_TIMEOUT`] and the [`SystemClock`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            durability: Durability::default(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            clock: Arc::new(SystemClock),
            invalid: None,
        }
    }

    /// Like [`new`](Self::new), from a location written as a plain path or
    /// as a URL: `sqlite:///absolute/path`, `sqlite://relative/path` or
    /// `sqlite:relative/path`.
    ///
    /// Query parameters (`?mode=...`) are not supported: use the setters.
    /// Another scheme (`postgres://...`) is a [`ErrorKind::Config`] error,
    /// and so is an in-memory database (`sqlite::memory:`): it cannot use
    /// write-ahead logging, and no other store or process could share it;
    /// the memory backend is the in-process store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`], saying which forms are accepted.
    pub fn from_url(location: &str) -> Result<Self> {
        let path = match location
            .strip_prefix("sqlite://")
            .or_else(|| location.strip_prefix("sqlite:"))
        {
            Some(path) => {
                if path.contains('?') {
                    return Err(config_error(format!(
                        "{location:?}: query parameters are not supported; use the SqliteConfig setters"
                    )));
                }
                path
            }
            None if location.contains("://") => {
                return Err(config_error(format!(
                    "{location:?} is not a SQLite location; expected a file path or sqlite:///path"
                )));
            }
            None => location,
        };
        if path.is_empty() {
            return Err(config_error(format!("{location:?} names no file")));
        }
        if path == ":memory:" {
            return Err(config_error(format!(
                "{location:?}: an in-memory SQLite database is not supported (it cannot use \
                 write-ahead logging and no other store could share it); name a file, or use \
                 the memory backend (`memory:`) for an in-process store"
            )));
        }
        Ok(Self::new(path))
    }

    /// Fails with the reason the location given as text was refused, if it
    /// was (see [`From<&str>`](#impl-From%3C%26str%3E-for-SqliteConfig)).
    pub(crate) fn check(&self) -> Result<()> {
        match &self.invalid {
            Some(reason) => Err(config_error(reason.clone())),
            None => Ok(()),
        }
    }

    /// Sets the durability of commits (see [`Durability`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets how long a write waits for another connection (another store,
    /// another process) to release the database's write lock. Past it, the
    /// operation fails with the retryable [`ErrorKind::Unavailable`].
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets the clock that judges expiry and stamps records. Every process
    /// sharing a file must read the same time: the default [`SystemClock`]
    /// does; tests inject a [`ManualClock`](tenure_lease_core::ManualClock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl From<&str> for SqliteConfig {
    /// Reads `location` as [`from_url`](SqliteConfig::from_url) does; a
    /// location it refuses makes connecting fail with that
    /// [`ErrorKind::Config`] error.
    fn from(location: &str) -> Self {
        SqliteConfig::from_url(location).unwrap_or_else(|error| SqliteConfig {
            invalid: Some(error.message().to_owned()),
            ..SqliteConfig::new(location)
        })
    }
}

impl From<String> for SqliteConfig {
    /// As [`From<&str>`](#impl-From%3C%26str%3E-for-SqliteConfig).
    fn from(location: String) -> Self {
        SqliteConfig::from(location.as_str())
    }
}

impl From<PathBuf> for SqliteConfig {
    /// The file at `path`, verbatim, as [`SqliteConfig::new`].
    fn from(path: PathBuf) -> Self {
        SqliteConfig::new(path)
    }
}

impl From<&Path> for SqliteConfig {
    /// The file at `path`, verbatim, as [`SqliteConfig::new`].
    fn from(path: &Path) -> Self {
        SqliteConfig::new(path)
    }
}

fn config_error(message: String) -> Error {
    Error::new(ErrorKind::Config, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_name_the_same_files() {
        let cases = [
            ("sqlite:///tmp/leases.db", "/tmp/leases.db"),
            ("sqlite://data/leases.db", "data/leases.db"),
            ("sqlite:leases.db", "leases.db"),
            ("/tmp/leases.db", "/tmp/leases.db"),
            ("leases.db", "leases.db"),
        ];
        for (location, path) in cases {
            let config = SqliteConfig::from_url(location).expect(location);
            assert_eq!(config.path(), Path::new(path), "{location}");
        }
    }

    #[test]
    fn foreign_schemes_query_parameters_and_empty_paths_are_config_errors() {
        for location in [
            "postgres://localhost/db",
            "sqlite:///tmp/leases.db?mode=ro",
            "sqlite://",
            "sqlite::memory:",
            "",
        ] {
            let error = SqliteConfig::from_url(location).expect_err(location);
            assert_eq!(error.kind(), ErrorKind::Config, "{location}");
            let deferred = SqliteConfig::from(location).check().expect_err(location);
            assert_eq!(deferred.message(), error.message(), "{location}");
        }
        assert!(SqliteConfig::from("sqlite:leases.db").check().is_ok());
    }
}

//! The one place where SQLite's errors become tenure's.
//!
//! The mapping keeps the contract's promise that `Err` never means "lost" or
//! "conflict": a busy or locked database is [`ErrorKind::Unavailable`]
//! (retryable), undecodable data is [`ErrorKind::Corrupt`], and everything
//! else the store could not do is [`ErrorKind::Unavailable`].
//!
//! [`ErrorKind::Unavailable`]: tenure_lease_core::ErrorKind::Unavailable
//! [`ErrorKind::Corrupt`]: tenure_lease_core::ErrorKind::Corrupt

use rusqlite::ErrorCode;
use tenure_lease_core::Error;

/// Maps every error rusqlite raises to a tenure [`Error`], keeping it as the
/// source.
pub(crate) fn map_sqlite_error(error: rusqlite::Error) -> Error {
    let mapped = match &error {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Error::unavailable(
                "the SQLite database stayed locked by another connection beyond the busy timeout; \
                 the operation did not run, retry it (or raise the busy timeout)",
            ),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => Error::corrupt(
                "the SQLite file is corrupt or not a database; restore it from a backup",
            ),
            ErrorCode::ConstraintViolation => Error::corrupt(
                "a SQLite constraint failed: the stored leases break an invariant tenure keeps \
                 (edited by hand?); the record needs an operator's attention",
            ),
            _ => Error::unavailable("the SQLite operation failed"),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::Utf8Error(..) => Error::corrupt("a stored value could not be decoded"),
        _ => Error::unavailable("the SQLite operation failed"),
    };
    mapped.with_source(error)
}

#[cfg(test)]
mod tests {
    use tenure_lease_core::ErrorKind;

    use super::*;

    fn failure(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn busy_and_locked_are_retryable_unavailable() {
        for code in [
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_LOCKED,
            rusqlite::ffi::SQLITE_BUSY_SNAPSHOT,
        ] {
            let error = map_sqlite_error(failure(code));
            assert_eq!(error.kind(), ErrorKind::Unavailable);
            assert!(error.is_retryable());
        }
    }

    #[test]
    fn corruption_and_decoding_failures_are_corrupt() {
        assert_eq!(
            map_sqlite_error(failure(rusqlite::ffi::SQLITE_CORRUPT)).kind(),
            ErrorKind::Corrupt
        );
        assert_eq!(
            map_sqlite_error(rusqlite::Error::IntegralValueOutOfRange(0, -1)).kind(),
            ErrorKind::Corrupt
        );
    }

    #[test]
    fn io_failures_are_unavailable() {
        assert_eq!(
            map_sqlite_error(failure(rusqlite::ffi::SQLITE_IOERR)).kind(),
            ErrorKind::Unavailable
        );
    }
}

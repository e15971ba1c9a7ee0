//! Every sqlx error becomes a [`tenure_lease_core::Error`] here, in one
//! place, so each operation answers the same class for the same failure.
//!
//! The rule: anything that says "the server could not be reached or gave
//! up" is retryable ([`ErrorKind::Unavailable`] / [`ErrorKind::Timeout`]);
//! data that cannot be read back is [`ErrorKind::Corrupt`]; tables this
//! code does not know are [`ErrorKind::Incompatible`]; a bad URL, login or
//! permission is [`ErrorKind::Config`]. A lost race inside the server (a
//! deadlock, a duplicate key a concurrent writer inserted first) is
//! [`Conflict::Lost`]: the runner decides again, and the caller never sees it.

use tenure_lease_core::tls::find_cause;
use tenure_lease_core::{Error, ErrorKind};

/// `ER_DUP_ENTRY`: a concurrent writer inserted the same key first.
const DUPLICATE_KEY: u16 = 1062;
/// `ER_LOCK_DEADLOCK`: the server rolled the transaction back.
const DEADLOCK: u16 = 1213;
/// `ER_CHECKREAD`: MariaDB's `innodb_snapshot_isolation` found a row
/// changed since the transaction's snapshot; the transaction was rolled back.
const SNAPSHOT_CONFLICT: u16 = 1020;
/// `ER_BINLOG_STMT_MODE_AND_ROW_ENGINE` and its kin: a statement-based binary
/// log cannot log a READ COMMITTED transaction.
const STATEMENT_BINLOG: u16 = 1665;
/// `ER_LOCK_WAIT_TIMEOUT`: a row stayed locked past `innodb_lock_wait_timeout`.
const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_OPTION_PREVENTS_STATEMENT` (`--read-only`) and
/// `ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION`: a write sent to a replica.
const READ_ONLY: [u16; 2] = [1290, 1792];

/// Why one attempt at a transaction failed.
#[derive(Debug)]
pub(crate) enum Conflict {
    /// Lost a race the server settled (a deadlock, a snapshot conflict):
    /// nothing was written, and deciding again on fresh reads may succeed.
    Lost(Error),
    /// A key another writer inserted first, a race lost as
    /// [`Lost`](Self::Lost) is, unless the statement wrote only keys no
    /// other writer can (then it is damage).
    Duplicate(Error),
    /// The operation's answer: the store could not say.
    Failed(Error),
}

impl From<Error> for Conflict {
    fn from(error: Error) -> Self {
        Conflict::Failed(error)
    }
}

impl From<sqlx::Error> for Conflict {
    fn from(error: sqlx::Error) -> Self {
        match server_number(&error) {
            Some(DUPLICATE_KEY) => Conflict::Duplicate(store_error(error)),
            Some(DEADLOCK | SNAPSHOT_CONFLICT) => Conflict::Lost(store_error(error)),
            _ => Conflict::Failed(store_error(error)),
        }
    }
}

/// The server's error number, when the server answered one.
pub(crate) fn server_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(database) => database
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(sqlx::mysql::MySqlDatabaseError::number),
        _ => None,
    }
}

/// The class of a server error, from its number.
fn number_kind(number: u16) -> ErrorKind {
    match number {
        // Lock wait timeout, statement time limits (MariaDB, MySQL).
        LOCK_WAIT_TIMEOUT | 1969 | 3024 => ErrorKind::Timeout,
        // No such table or column: the tables are missing or older than
        // this code.
        1146 | 1054 => ErrorKind::Incompatible,
        // Access denied, unknown database, missing privileges, a lock name
        // too long, a binary log that cannot log the store's transactions,
        // A session variable unknown or out of range.
        1044 | 1045 | 1049 | 1142 | 1143 | 1193 | 1227 | 1231 | 1232 | 1370 | 3057
        | STATEMENT_BINLOG => ErrorKind::Config,
        // Data too long, out of range (the fence counter's among them),
        // wrong value, invalid JSON, a failed check: what the store read or
        // wrote is not what it should be.
        1264 | 1265 | 1292 | 1366 | 1406 | 1690 | 3140 | 3144 | 3819 | 4025 => ErrorKind::Corrupt,
        // Deadlocks, read-only servers, shutdowns, connections killed, and
        // anything else the server reports mid-operation.
        _ => ErrorKind::Unavailable,
    }
}

/// Maps any sqlx error to the store's error, keeping it as the source.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    let (kind, message) = match &error {
        sqlx::Error::PoolTimedOut => (
            ErrorKind::Timeout,
            "timed out waiting for a MySQL connection from the pool".to_owned(),
        ),
        sqlx::Error::PoolClosed => (
            ErrorKind::Unavailable,
            "the MySQL connection pool is closed".to_owned(),
        ),
        sqlx::Error::Tls(_) | sqlx::Error::Io(_)
            if matches!(error, sqlx::Error::Tls(_))
                || find_cause::<rustls::Error>(&error).is_some() =>
        {
            (
                ErrorKind::Config,
                format!(
                    "the TLS handshake with MySQL failed: {error}; check that the server has \
                     TLS enabled (have_ssl = YES) and that its certificate is signed by an \
                     authority the store trusts (ssl-ca= or tls_ca= in the URL, or \
                     MySqlConfig::tls) and names the host in the URL"
                ),
            )
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => (
            ErrorKind::Unavailable,
            format!("lost or could not reach the MySQL server: {error}"),
        ),
        sqlx::Error::Database(database) => {
            let number = server_number(&error).unwrap_or_default();
            if READ_ONLY.contains(&number) {
                (
                    ErrorKind::Unavailable,
                    format!(
                        "MySQL refused a write as read-only (error {number}: {}): the server \
                         is a replica, or was demoted by a failover; nothing was written. \
                         Point the store at the primary, or at an address that follows it \
                         through failovers",
                        database.message()
                    ),
                )
            } else {
                (
                    number_kind(number),
                    format!("MySQL answered error {number}: {}", database.message()),
                )
            }
        }
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => (
            ErrorKind::Corrupt,
            format!("MySQL answered a value this store cannot read: {error}"),
        ),
        sqlx::Error::Configuration(_) => (
            ErrorKind::Config,
            format!("the MySQL connection settings are not usable: {error}"),
        ),
        _ => (ErrorKind::Unavailable, format!("MySQL failed: {error}")),
    };
    Error::new(kind, message).with_source(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_are_classified_by_number() {
        assert_eq!(number_kind(LOCK_WAIT_TIMEOUT), ErrorKind::Timeout);
        assert_eq!(number_kind(1146), ErrorKind::Incompatible);
        assert_eq!(number_kind(1045), ErrorKind::Config);
        assert_eq!(number_kind(1406), ErrorKind::Corrupt);
        assert_eq!(number_kind(DEADLOCK), ErrorKind::Unavailable);
        assert_eq!(number_kind(1927), ErrorKind::Unavailable);
    }
}

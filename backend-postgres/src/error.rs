//! Every sqlx error becomes a [`tenure_lease_core::Error`] here, in one place, so
//! each operation answers the same class for the same failure.
//!
//! The rule: anything that says "the server could not be reached or gave up"
//! is retryable ([`ErrorKind::Unavailable`] / [`ErrorKind::Timeout`]); data
//! that cannot be read back is [`ErrorKind::Corrupt`]; a schema this code
//! does not know is [`ErrorKind::Incompatible`]; a bad URL, login or
//! permission is [`ErrorKind::Config`].

use sqlx::migrate::MigrateError;
use tenure_lease_core::tls::find_cause;
use tenure_lease_core::{Error, ErrorKind};

/// SQLSTATE of a unique violation.
pub(crate) const UNIQUE_VIOLATION: &str = "23505";
/// SQLSTATE of a serialization failure.
pub(crate) const SERIALIZATION_FAILURE: &str = "40001";
/// SQLSTATE of a detected deadlock.
pub(crate) const DEADLOCK_DETECTED: &str = "40P01";

/// The class of a server error, from its SQLSTATE.
/// `read_only_sql_transaction`: a write sent to a standby.
const READ_ONLY: &str = "25006";

pub(crate) fn sqlstate_kind(code: &str) -> ErrorKind {
    match code {
        // statement_timeout / lock_timeout / idle-in-transaction timeout.
        "57014" | "55P03" | "25P03" => ErrorKind::Timeout,
        // Undefined table, column or function: the schema is missing or
        // older than this code.
        "42P01" | "42703" | "42883" | "3F000" => ErrorKind::Incompatible,
        // Database missing, insufficient privilege.
        "3D000" | "42501" => ErrorKind::Config,
        // Data exceptions, integrity violations the code does not expect,
        // and the server's own corruption reports.
        "XX001" | "XX002" => ErrorKind::Corrupt,
        _ => match code.get(..2) {
            // Invalid authorization.
            Some("28") => ErrorKind::Config,
            Some("22" | "23") => ErrorKind::Corrupt,
            // Connection exceptions (08), transaction rollbacks (40),
            // insufficient resources (53), operator intervention such as
            // admin shutdown 57P01 (57), system errors (58), and anything
            // else the server reports mid-operation.
            _ => ErrorKind::Unavailable,
        },
    }
}

/// The SQLSTATE of `error`, when the server sent one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(database) => database.code().map(std::borrow::Cow::into_owned),
        _ => None,
    }
}

/// The constraint a server error names, if any.
pub(crate) fn constraint(error: &sqlx::Error) -> Option<&str> {
    match error {
        sqlx::Error::Database(database) => database.constraint(),
        _ => None,
    }
}

/// Maps any sqlx error to the store's error, keeping it as the source.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    let (kind, message) = match &error {
        sqlx::Error::PoolTimedOut => (
            ErrorKind::Timeout,
            "timed out waiting for a PostgreSQL connection from the pool".to_owned(),
        ),
        sqlx::Error::PoolClosed => (
            ErrorKind::Unavailable,
            "the PostgreSQL connection pool is closed".to_owned(),
        ),
        sqlx::Error::Tls(_) | sqlx::Error::Io(_)
            if matches!(error, sqlx::Error::Tls(_))
                || find_cause::<rustls::Error>(&error).is_some() =>
        {
            (
                ErrorKind::Config,
                format!(
                    "the TLS handshake with PostgreSQL failed: {error}; check sslmode, that the \
                 server has ssl = on, and that its certificate is signed by an authority the \
                 store trusts (sslrootcert= or tls_ca= in the URL, or PgStoreConfig::tls) and \
                 names the host in the URL"
                ),
            )
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => (
            ErrorKind::Unavailable,
            format!("lost or could not reach the PostgreSQL server: {error}"),
        ),
        sqlx::Error::Database(database) if database.code().as_deref() == Some(READ_ONLY) => (
            ErrorKind::Unavailable,
            format!(
                "PostgreSQL refused a write as read-only (SQLSTATE {READ_ONLY}: {}): the server \
                 is a standby, or was demoted by a failover; nothing was written. Point the \
                 store at the primary, or at an address that follows it through failovers",
                database.message()
            ),
        ),
        sqlx::Error::Database(database) => {
            let code = database.code().unwrap_or_default();
            (
                sqlstate_kind(&code),
                format!(
                    "PostgreSQL answered SQLSTATE {code}: {}",
                    database.message()
                ),
            )
        }
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::RowNotFound => (
            ErrorKind::Corrupt,
            format!("could not decode what PostgreSQL returned: {error}"),
        ),
        sqlx::Error::Configuration(_) | sqlx::Error::InvalidArgument(_) => (
            ErrorKind::Config,
            format!("invalid PostgreSQL connection settings: {error}"),
        ),
        _ => (
            ErrorKind::Unavailable,
            format!("PostgreSQL operation failed: {error}"),
        ),
    };
    Error::new(kind, message).with_source(error)
}

/// Maps a migration failure: a schema applied by other code (missing,
/// modified or half-applied versions) is [`ErrorKind::Incompatible`].
pub(crate) fn migrate_error(error: MigrateError) -> Error {
    match error {
        MigrateError::Execute(inner) | MigrateError::ExecuteMigration(inner, _) => {
            store_error(inner)
        }
        other => Error::new(
            ErrorKind::Incompatible,
            format!(
                "the tenure schema cannot be migrated by this version: {other}; \
                 upgrade the library or point it at another schema"
            ),
        )
        .with_source(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_losses_are_retryable() {
        for code in [
            "57P01", "57P02", "57P03", "08006", "08003", "53300", "40001", "40P01",
        ] {
            assert_eq!(sqlstate_kind(code), ErrorKind::Unavailable, "{code}");
        }
        for code in ["57014", "55P03"] {
            assert_eq!(sqlstate_kind(code), ErrorKind::Timeout, "{code}");
        }
        let io = store_error(sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()));
        assert!(io.is_retryable());
        assert_eq!(
            store_error(sqlx::Error::PoolTimedOut).kind(),
            ErrorKind::Timeout
        );
        assert_eq!(
            store_error(sqlx::Error::PoolClosed).kind(),
            ErrorKind::Unavailable
        );
    }

    #[test]
    fn decode_failures_are_corrupt() {
        let error = store_error(sqlx::Error::Decode("bad".into()));
        assert_eq!(error.kind(), ErrorKind::Corrupt);
        assert!(!error.is_retryable());
        assert_eq!(sqlstate_kind("22P02"), ErrorKind::Corrupt);
    }

    #[test]
    fn schema_and_login_problems_are_not_retryable() {
        assert_eq!(sqlstate_kind("42P01"), ErrorKind::Incompatible);
        assert_eq!(sqlstate_kind("28P01"), ErrorKind::Config);
        assert_eq!(sqlstate_kind("3D000"), ErrorKind::Config);
        let dirty = migrate_error(MigrateError::Dirty(1));
        assert_eq!(dirty.kind(), ErrorKind::Incompatible);
    }
}

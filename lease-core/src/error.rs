//! One error type for every store operation.
//!
//! An `Err` from a [`LeaseStore`](crate::LeaseStore) never means "lost" or
//! "conflict": those are typed outcomes. It means one of two things, and
//! [`ErrorKind`] says which:
//!
//! * the request itself is wrong ([`ErrorKind::InvalidInput`],
//!   [`ErrorKind::AlreadyExists`]): nothing was changed, retrying the same
//!   request will fail the same way;
//! * the store could not say ([`ErrorKind::Unavailable`],
//!   [`ErrorKind::Timeout`], [`ErrorKind::Corrupt`], ...): the outcome is
//!   **unknown**. The caller must not assume the write happened, nor that it
//!   did not. [`Error::is_retryable`] tells whether trying again may help.

use std::fmt;

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in classes a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A request field is invalid (empty id, ttl of zero, metadata too big...).
    /// Nothing was changed. Fix the request.
    InvalidInput,
    /// `admit` was given an id that already exists. Nothing was changed.
    AlreadyExists,
    /// The store could not be reached or failed mid-operation (I/O, dropped
    /// connection, busy database, server error). The outcome is unknown;
    /// retrying may help.
    Unavailable,
    /// The operation did not answer in time. The outcome is unknown;
    /// retrying may help.
    Timeout,
    /// Data read from the store could not be decoded. The outcome is unknown
    /// for writes; the record needs an operator's attention.
    Corrupt,
    /// The store's schema is newer than this code, or otherwise incompatible.
    /// Upgrade the library, or point it at another schema or namespace.
    Incompatible,
    /// The store was configured wrongly (bad URL, bad schema name...).
    Config,
}

impl ErrorKind {
    /// Stable lower-case name, used in messages and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Incompatible => "incompatible",
            ErrorKind::Config => "config",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type BoxedSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error of every store operation: a [`kind`](Error::kind), a message that
/// says what to do, and the underlying cause when there is one.
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    field: Option<&'static str>,
    #[source]
    source: Option<BoxedSource>,
}

impl Error {
    /// A new error of `kind` with a human-readable `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            field: None,
            source: None,
        }
    }

    /// An [`ErrorKind::InvalidInput`] error naming the offending request field.
    pub fn invalid_input(field: &'static str, message: impl fmt::Display) -> Self {
        Error {
            kind: ErrorKind::InvalidInput,
            message: format!("invalid `{field}`: {message}"),
            field: Some(field),
            source: None,
        }
    }

    /// An [`ErrorKind::AlreadyExists`] error for lease `id`.
    pub fn already_exists(id: &str) -> Self {
        Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "a lease with id {id:?} already exists; choose another id or read it with `get`"
            ),
        )
    }

    /// An [`ErrorKind::AlreadyExists`] error for job `id`.
    pub fn job_already_exists(id: &str) -> Self {
        Error::new(
            ErrorKind::AlreadyExists,
            format!(
                "a job with id {id:?} already exists; choose another id or read it with `get_job`"
            ),
        )
    }

    /// An [`ErrorKind::Unavailable`] error: the store could not say.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    /// An [`ErrorKind::Corrupt`] error: stored data could not be decoded.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, message)
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxedSource>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For [`ErrorKind::InvalidInput`]: the request field that was rejected.
    pub fn field(&self) -> Option<&'static str> {
        self.field
    }

    /// True when trying the same operation again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Timeout)
    }

    /// True when the store may or may not have applied the operation: the
    /// caller must treat its ownership as unknown (never as held, never as
    /// lost).
    pub fn is_outcome_unknown(&self) -> bool {
        !matches!(
            self.kind,
            ErrorKind::InvalidInput | ErrorKind::AlreadyExists | ErrorKind::Config
        )
    }
}

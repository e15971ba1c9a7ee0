//! One error type for every store operation, and the one every other error
//! of the crate converts into.
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
//!
//! The keeper's errors (`KeeperError`, `WriteError`, `OwnershipLost`,
//! `JobWriteError`, `ReconcileError`, in `tenure-keeper`) and a
//! [`StaleFence`](crate::StaleFence) say more, for the callers that must
//! match on them; each converts into an `Error` with `?`, so a function that
//! answers [`Result`] can call all of them. The conversion keeps the class:
//! a store error stays what it was, an error that means "this work is no
//! longer yours" becomes [`ErrorKind::OwnershipLost`], one that means "this
//! keeper takes no more work" [`ErrorKind::Stopped`]. The specific error is
//! kept as the [`source`](std::error::Error::source), so it can be
//! recovered with [`Error::downcast_source`]:
//!
//! ```
//! use tenure_lease_core::{Error, ErrorKind, StaleFence};
//!
//! fn check(stale: StaleFence) -> tenure_lease_core::Result<()> {
//!     Err(stale)?
//! }
//!
//! let stale = StaleFence { presented: 3, highest_seen: 5 };
//! let error = check(stale).unwrap_err();
//! assert_eq!(error.kind(), ErrorKind::OwnershipLost);
//! assert_eq!(error.downcast_source::<StaleFence>(), Some(&stale));
//! ```

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
    /// The lease (or job claim) is no longer this owner's: a peer took it
    /// over, its lease expired unrenewed, a fence newer than the caller's
    /// was seen, or the keeper could not confirm it before its deadline.
    /// Stop the work; retrying the same write cannot succeed.
    OwnershipLost,
    /// The keeper is shutting down, or its heartbeat failed: it takes no
    /// new work. Start another keeper (or finish shutting down).
    Stopped,
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
            ErrorKind::OwnershipLost => "ownership_lost",
            ErrorKind::Stopped => "stopped",
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
///
/// `Debug` prints what `Display` does, then the chain of causes, so that
/// `fn main() -> tenure::Result<()>` reports a failure readably; `{:#?}`
/// prints the fields.
#[derive(thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    field: Option<&'static str>,
    #[source]
    source: Option<BoxedSource>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("Error")
                .field("kind", &self.kind)
                .field("message", &self.message)
                .field("field", &self.field)
                .field("source", &self.source)
                .finish();
        }
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        if cause.is_some() {
            f.write_str("\n\nCaused by:")?;
        }
        while let Some(error) = cause {
            write!(f, "\n    {error}")?;
            cause = error.source();
        }
        Ok(())
    }
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

    /// An [`ErrorKind::OwnershipLost`] error: stop the work.
    pub fn ownership_lost(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::OwnershipLost, message)
    }

    /// `specific` as an error of `kind`: its text as the message, itself as
    /// the source (see [`downcast_source`](Error::downcast_source)). How an
    /// error type of its own (a keeper's, a gate's) converts into `Error`.
    pub fn converted(
        kind: ErrorKind,
        specific: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::new(kind, specific.to_string()).with_source(specific)
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
            ErrorKind::InvalidInput
                | ErrorKind::AlreadyExists
                | ErrorKind::Config
                | ErrorKind::OwnershipLost
                | ErrorKind::Stopped
        )
    }

    /// The underlying cause, if it is an `E`: how a caller gets back the
    /// specific error an `Error` was converted from (e.g. a
    /// [`StaleFence`](crate::StaleFence) or a keeper's `WriteError` turned
    /// into an `Error` by `?`).
    pub fn downcast_source<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.source.as_deref()?.downcast_ref::<E>()
    }
}

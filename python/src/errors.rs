//! Rust errors as the Python exceptions of `tenure._errors`.
//!
//! The classes are defined in Python (so that `tenure.TimeoutError` can also
//! be a builtin `TimeoutError`, and the hierarchy reads as Python); this
//! module only picks the class for an [`ErrorKind`] and fills in the
//! message, the field and the store's redacted URL.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use tenure::keeper::OwnershipLost;
use tenure::{Error, ErrorKind};

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The `tenure._errors` class named `name`.
pub(crate) fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module =
        ERRORS.get_or_try_init(py, || Ok::<_, PyErr>(py.import("tenure._errors")?.unbind()))?;
    module.bind(py).getattr(name)
}

fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidInput => "InvalidInputError",
        ErrorKind::AlreadyExists => "AlreadyExistsError",
        ErrorKind::Unavailable => "UnavailableError",
        ErrorKind::Timeout => "TimeoutError",
        ErrorKind::Corrupt => "CorruptError",
        ErrorKind::Incompatible => "IncompatibleError",
        ErrorKind::Config => "ConfigError",
        ErrorKind::OwnershipLost => "OwnershipLostError",
        ErrorKind::Stopped => "StoppedError",
        _ => "TenureError",
    }
}

/// A Rust error as its Python exception; `url` is the store's redacted URL.
pub(crate) fn to_py(error: &Error, url: Option<&str>) -> PyErr {
    Python::attach(|py| {
        let class = class_name(error.kind());
        build(py, class, &error.to_string(), |kwargs| {
            kwargs.set_item("field", error.field())?;
            kwargs.set_item("url", url)?;
            kwargs.set_item("retryable", error.is_retryable())?;
            kwargs.set_item("outcome_unknown", error.is_outcome_unknown())?;
            if let Some(lost) = error.downcast_source::<OwnershipLost>() {
                if error.kind() == ErrorKind::OwnershipLost {
                    kwargs.set_item("id", &lost.id)?;
                    kwargs.set_item("cause", lost.cause.label())?;
                }
            }
            Ok(())
        })
        .unwrap_or_else(|failed| failed)
    })
}

/// An `OwnershipLostError` for held work `id`, lost for `cause`.
pub(crate) fn ownership_lost(id: &str, cause: &str) -> PyErr {
    Python::attach(|py| {
        let message =
            format!("ownership_lost: {id} is no longer owned here ({cause}): stop the work");
        build(py, "OwnershipLostError", &message, |kwargs| {
            kwargs.set_item("id", id)?;
            kwargs.set_item("cause", cause)
        })
        .unwrap_or_else(|failed| failed)
    })
}

/// A `tenure._errors` exception of class `kind` (`InvalidInputError`, ...).
pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> PyErr {
    to_py(&Error::new(kind, message), None)
}

fn build(
    py: Python<'_>,
    class_name: &str,
    message: &str,
    fill: impl FnOnce(&Bound<'_, PyDict>) -> PyResult<()>,
) -> PyResult<PyErr> {
    let kwargs = PyDict::new(py);
    fill(&kwargs)?;
    let exception = class(py, class_name)?.call((message,), Some(&kwargs))?;
    Ok(PyErr::from_value(exception))
}

/// `?` on a Rust result inside a store call: the error with the store's URL.
pub(crate) trait IntoPyResult<T> {
    /// The result, its error raised as the matching Python exception.
    fn or_raise(self, url: &str) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn or_raise(self, url: &str) -> PyResult<T> {
        self.map_err(|error| to_py(&error, Some(url)))
    }
}

//! Input that passed its operation's checks, as a type.
//!
//! A backend implements the [backend traits](super::stores), whose
//! arguments are [`Checked`]. Only this crate builds a `Checked` value, and
//! only from input that passed a check of contract §11 (or, for an element
//! of a checked batch, the batch's), so the user traits reach a backend's
//! code only with checked input, and a backend has no check left to make
//! or forget in its trait methods. Its own entry points outside the traits
//! (a gate check inside the caller's transaction) check with
//! [`fence_check`].
//!
//! The type records that a check passed, not which one: the checks of a
//! resource, an id, a scope and a queue name are the same name check, and
//! a `Checked<&str>` serves any of them. The backend traits are public, so
//! code may also call a backend's method directly (with a value from
//! [`fence_check`], or one of the methods that take no input); such a call
//! skips the front, and with it the backend's time limit.

use std::ops::Deref;

use crate::error::Result;

use super::validate;

/// A value that passed an input check of contract §11. Built only by this
/// crate: by the validating front of the [backend traits](super::stores),
/// by [`fence_check`], and from a checked batch (its elements, or a batch
/// of one checked value).
///
/// It reads as the value it wraps (`claim.id`, `*ttl`); [`get`](Self::get)
/// unwraps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked<T>(T);

impl<T> Checked<T> {
    /// Marks `value` as checked: for this crate's validating code only.
    pub(super) fn new(value: T) -> Self {
        Checked(value)
    }

    /// The value itself.
    pub fn get(self) -> T {
        self.0
    }
}

impl<'a, T> Checked<&'a [T]> {
    /// Each element of a checked batch, checked (a batch's check covers
    /// every element).
    pub fn each(self) -> impl ExactSizeIterator<Item = Checked<&'a T>> {
        self.0.iter().map(Checked)
    }
}

impl<T> Deref for Checked<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Checks a fence presented at a gate, as
/// [`FenceStore::check_fence`](crate::FenceStore::check_fence) does: for a
/// backend's own gate entry points outside the trait (a check inside the
/// caller's transaction, a fenced write).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
/// invalid resource name or a fence of 0 or above
/// [`MAX_GATE_FENCE`](crate::limits::MAX_GATE_FENCE).
pub fn fence_check(resource: &str, fence: u64) -> Result<(Checked<&str>, Checked<u64>)> {
    validate::resource(resource)?;
    validate::gate_fence(fence)?;
    Ok((Checked(resource), Checked(fence)))
}

//! Offset clocks: the case's store opened again with a clock that runs a
//! chosen amount away from this process's clock.
//!
//! A store must judge every expiry, grace, `run_at`, retention and stamp
//! by its own clock (the server's, or the [`Clock`] it was given;
//! [contract §2](tenure_lease_core::contract)). On one host the process
//! clock and the server's agree, so a store that reads the process clock
//! for some decision passes every case. Only the factory can open a store
//! on a clock that disagrees: [`Factory::clock_offset`](crate::Factory::clock_offset)
//! answers a [`ClockOffsetter`], and the clock cases
//! ([`Ctx::offset_store`](crate::Ctx::offset_store)) are reported skipped on a factory without one.
//!
//! How factories do it: a store on an injected [`Clock`] (memory, SQLite,
//! file, etcd) is given an [`OffsetClock`]; PostgreSQL's factory shadows
//! `now()` and `clock_timestamp()` with functions of the case's schema,
//! first on the store's `search_path`; Redis's starts a private server
//! whose wall clock is moved, and keeps it running as long as the store
//! ([`OffsetStore::keeping`]).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;

use chrono::TimeDelta;
use tenure_lease_core::{clock, Clock, SystemClock, Timestamp};

/// Opens a store whose clock runs `offset` from the process clock (ahead
/// when positive), on the case's backing data or on fresh data that needs
/// no cleanup of its own: see [`Factory::clock_offset`](crate::Factory::clock_offset).
/// The kit drops it before the case's teardown.
pub type ClockOffsetter<S> = Arc<
    dyn Fn(
            Arc<S>,
            TimeDelta,
        )
            -> Pin<Box<dyn Future<Output = tenure_lease_core::Result<OffsetStore<S>>> + Send>>
        + Send
        + Sync,
>;

/// A store on an offset clock, with what must outlive it (a private server
/// the factory started for it, say); the case uses it as the store itself.
pub struct OffsetStore<S> {
    // Declared first: dropped before what it needs.
    store: S,
    _keep_alive: Option<Box<dyn Any + Send + Sync>>,
}

impl<S> OffsetStore<S> {
    /// `store`, which needs nothing kept beside it.
    pub fn new(store: S) -> Self {
        OffsetStore {
            store,
            _keep_alive: None,
        }
    }

    /// `store`, with `keep_alive` dropped only after it.
    pub fn keeping(store: S, keep_alive: impl Any + Send + Sync) -> Self {
        OffsetStore {
            store,
            _keep_alive: Some(Box::new(keep_alive)),
        }
    }
}

impl<S> From<S> for OffsetStore<S> {
    fn from(store: S) -> Self {
        OffsetStore::new(store)
    }
}

impl<S> Deref for OffsetStore<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.store
    }
}

impl<S: fmt::Debug> fmt::Debug for OffsetStore<S> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.store.fmt(formatter)
    }
}

/// The process clock moved by a fixed offset, for factories whose stores
/// take a [`Clock`].
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock(pub TimeDelta);

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        let now = SystemClock.now();
        clock::truncate_to_micros(now.checked_add_signed(self.0).unwrap_or(now))
    }
}

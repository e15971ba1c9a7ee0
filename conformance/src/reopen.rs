//! Reopening: a second store on the same backing data as a case's store.
//!
//! What a store keeps must outlive the handle that wrote it: a worker that
//! restarts, or another process, opens a fresh store on the same file,
//! schema or namespace and must see the same gates (contract §7). Only the
//! factory knows how to open its store again, so it is the factory that
//! reopens: [`Factory::reopen`](crate::Factory::reopen) answers a
//! [`Reopener`], and cases that need one ([`Ctx::reopen`](crate::Ctx::reopen)) are reported
//! skipped on a factory without one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Opens a fresh store, with a connection (or state) of its own, on what the
/// given store keeps: see [`Factory::reopen`](crate::Factory::reopen). The
/// kit drops the fresh store before the case's teardown.
pub type Reopener<S> = Arc<
    dyn Fn(Arc<S>) -> Pin<Box<dyn Future<Output = tenure_lease_core::Result<S>> + Send>>
        + Send
        + Sync,
>;

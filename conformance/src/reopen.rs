//! Reopening: a second store on the same backing data as a case's store.
//!
//! What a store keeps must outlive the handle that wrote it: a worker that
//! restarts, or another process, opens a fresh store on the same file,
//! schema or namespace and must see the same gates (contract §7). Only the
//! factory knows how to open its store again, so it is the factory that
//! reopens: [`Factory::reopen`](crate::Factory::reopen) answers a
//! [`Reopener`], and cases that need one ([`Ctx::reopen`]) are reported
//! skipped on a factory without one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::harness::{Ctx, Failure};

/// Opens a fresh store, with a connection (or state) of its own, on what the
/// given store keeps: see [`Factory::reopen`](crate::Factory::reopen). The
/// kit drops the fresh store before the case's teardown.
pub type Reopener<S> = Arc<
    dyn Fn(Arc<S>) -> Pin<Box<dyn Future<Output = tenure_lease_core::Result<S>> + Send>>
        + Send
        + Sync,
>;

impl<S> Ctx<S> {
    /// The context, able to reopen its store with `reopener`.
    pub fn with_reopener(mut self, reopener: Option<Reopener<S>>) -> Self {
        self.reopener = reopener;
        self
    }

    /// A fresh store on the case's backing data, or `None` (the case marked
    /// skipped) when the factory cannot open one.
    ///
    /// # Errors
    ///
    /// A failure when the factory could not open a store it should have.
    pub async fn reopen(&self) -> Result<Option<S>, Failure> {
        let Some(reopener) = &self.reopener else {
            self.skip("the factory cannot open a second store on a case's data")?;
            return Ok(None);
        };
        reopener(Arc::clone(&self.store))
            .await
            .map(Some)
            .map_err(|error| Failure(format!("the factory could not reopen the store: {error}")))
    }
}

//! Keepers' renewals held back on demand, for the keeper cases on a store
//! whose own timers outlast a beat.

use std::sync::Arc;

use tenure_lease_core::layer::{Answer, Hook, Operation, Pending};

/// Holds the keepers' renewals back while set: on a store whose own timers
/// outlast a beat (etcd), a lease can end behind a keeper's back only while
/// its heartbeat cannot reach the store, as for a stalled or partitioned
/// worker. Every keeper a case starts sees the store through it.
#[derive(Clone, Default)]
pub(crate) struct RenewalHold(Arc<tokio::sync::watch::Sender<bool>>);

impl RenewalHold {
    /// Holds renewals back until the answer is dropped.
    pub(crate) fn hold(&self) -> impl Drop + '_ {
        struct Release<'h>(&'h tokio::sync::watch::Sender<bool>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.send_replace(false);
            }
        }
        self.0.send_replace(true);
        Release(&self.0)
    }
}

impl Hook for RenewalHold {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        if !matches!(operation.name, "renew" | "renew_many") {
            return call;
        }
        let mut held = self.0.subscribe();
        Box::pin(async move {
            // The sender lives as long as the case's context.
            let _ = held.wait_for(|held| !held).await;
            call.await
        })
    }
}

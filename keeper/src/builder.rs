//! Building a keeper: the recovery callback, checks of the configuration,
//! and the start of the heartbeat and reconciler tasks.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::{self, KeeperConfig, ReconcileAction};
use super::reconciler::{self, Recovered, RecoveryCallback, RecoveryError};
use super::{heartbeat, Keeper, Shared};
use tenure_lease_core::LeaseStore;
use tenure_lease_core::{Error, ErrorKind};

/// Builds a [`Keeper`]; see [`Keeper::builder`].
pub struct KeeperBuilder {
    store: Arc<dyn LeaseStore>,
    config: KeeperConfig,
    on_recovered: Option<RecoveryCallback>,
}

impl KeeperBuilder {
    pub(crate) fn new(store: Arc<dyn LeaseStore>, config: KeeperConfig) -> Self {
        KeeperBuilder {
            store,
            config,
            on_recovered: None,
        }
    }

    /// Sets the recovery callback, called once per orphan the reconciler
    /// recovers (never for kinds it releases silently,
    /// [`ReconcileKinds`](super::ReconcileKinds)). Required with
    /// [`ReconcileAction::Adopt`] unless no kind is recovered.
    pub fn on_recovered<F, Fut, E>(mut self, callback: F) -> Self
    where
        F: Fn(Recovered) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<RecoveryError> + 'static,
    {
        self.on_recovered = Some(Arc::new(move |recovered| {
            let work = callback(recovered);
            Box::pin(async move { work.await.map_err(Into::into) })
        }));
        self
    }

    /// Validates the configuration and starts the heartbeat and the
    /// reconciler. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// An `InvalidInput` error naming the bad setting
    /// ([`Error::field`]), e.g. `reconcile_kinds` for a kind both recovered
    /// and released silently, or `on_recovered` for adoption without a
    /// callback; a `Config` error outside a tokio runtime.
    pub fn start(self) -> Result<Keeper, Error> {
        self.config.validate()?;
        if self.config.reconcile_action == ReconcileAction::Adopt
            && self.config.reconcile_kinds.recovers_any()
            && self.on_recovered.is_none()
        {
            return Err(Error::invalid_input(
                "on_recovered",
                "ReconcileAction::Adopt needs a recovery callback to resume the adopted runs",
            ));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::new(
                ErrorKind::Config,
                "a Keeper must be started inside a tokio runtime",
            ));
        }
        let worker_id = self
            .config
            .worker_id
            .clone()
            .unwrap_or_else(config::generate_worker_id);
        let check_interval = self
            .config
            .effective_renew_interval()
            .unwrap_or(self.config.reconcile_interval)
            / 10;
        let shared = Arc::new(Shared::new(
            self.store,
            self.config,
            worker_id,
            check_interval,
        ));
        let stop_heartbeat = CancellationToken::new();
        let stop_reconciler = CancellationToken::new();
        let heartbeat = match (shared.config.ttl, shared.config.effective_renew_interval()) {
            (Some(ttl), Some(beat)) => Some(tokio::spawn(heartbeat::run(
                Arc::clone(&shared),
                ttl,
                beat,
                stop_heartbeat.clone(),
            ))),
            _ => None,
        };
        let (reconcile_requests, requests) = mpsc::channel(1);
        let reconciler = tokio::spawn(reconciler::run(
            Arc::clone(&shared),
            self.on_recovered,
            requests,
            stop_reconciler.clone(),
        ));
        tracing::info!(worker_id = %shared.worker_id, ttl = ?shared.config.ttl, "keeper started");
        Ok(Keeper {
            shared,
            stop_heartbeat,
            stop_reconciler,
            heartbeat: Mutex::new(heartbeat),
            reconciler: Mutex::new(Some(reconciler)),
            reconcile_requests,
        })
    }
}

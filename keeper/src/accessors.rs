//! The accessors [`RunGuard`](super::RunGuard) and
//! [`JobGuard`](super::JobGuard) share, written once: both are a handle on a
//! [`Held`](super::held::Held) entry of the keeper's table and answer the
//! same questions about it.

/// Implements the shared accessors on `$guard`, whose `held()` answers its
/// `Held` entry and whose claim type is `$claim`; `$what` ("run", "job")
/// names the work in the docs.
macro_rules! guard_accessors {
    ($guard:ident, $claim:ty, $what:literal) => {
        impl $guard {
            #[doc = concat!("The ", $what, "'s id.")]
            pub fn id(&self) -> &str {
                &self.claim().id
            }

            #[doc = concat!("The claim every fenced write of the ", $what, " presents.")]
            pub fn claim(&self) -> &$claim {
                &self.held().item.claim
            }

            /// The fencing token, for downstream resources that check it.
            pub fn fence(&self) -> u64 {
                self.claim().fence
            }

            #[doc = concat!(
                                        "A token cancelled the moment the ", $what,
                                        " loses its lease (never when it is settled normally)."
                                    )]
            pub fn token(&self) -> CancellationToken {
                self.held().token.clone()
            }

            #[doc = concat!("Why the ", $what, " lost its lease, if it did.")]
            pub fn loss(&self) -> Option<LossCause> {
                self.held().loss()
            }

            /// The local instant until which the lease is confirmed (`None`
            /// without a lease). Conservative: the send instant of the last
            /// confirmed renewal (or of the admission or claim) plus the ttl.
            pub fn confirmed_deadline(&self) -> Option<Instant> {
                self.held().deadline()
            }

            /// Registers the task doing the work: it is aborted the moment
            /// the lease is lost. A task registered after the loss is
            /// aborted at once.
            pub fn register_task(&self, task: AbortHandle) {
                self.held().register_task(task);
            }

            /// Spawns the work with a clone of this guard and registers it,
            /// so a loss aborts it at once.
            pub fn spawn<F, Fut>(&self, work: F) -> JoinHandle<Fut::Output>
            where
                F: FnOnce($guard) -> Fut,
                Fut: Future + Send + 'static,
                Fut::Output: Send + 'static,
            {
                let handle = tokio::spawn(work(self.clone()));
                self.register_task(handle.abort_handle());
                handle
            }
        }
    };
}

pub(crate) use guard_accessors;

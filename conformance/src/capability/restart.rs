//! What a factory offers the [restart suite](crate::suites::restart): a
//! private server the kit may restart, and a store on it.

use std::time::Duration;

use async_trait::async_trait;

/// A server of the test's own that the kit may restart.
#[async_trait]
pub trait RestartableServer: Send + Sync {
    /// Stops the server (committed work kept, as its persistence settings
    /// promise), keeps it down for `down_for`, and starts it again on the
    /// same data and address; answers once it accepts connections again.
    ///
    /// # Errors
    ///
    /// When the server cannot be stopped or started; the scenario then
    /// fails.
    async fn restart(&mut self, down_for: Duration) -> std::io::Result<()>;

    /// Like [`restart`](RestartableServer::restart), but the server is
    /// killed rather than stopped (SIGKILL or its equivalent: no shutdown
    /// work, committed work kept only as far as its durability settings
    /// promise); the nemesis suite's killed server. By default, a restart.
    ///
    /// # Errors
    ///
    /// As for [`restart`](RestartableServer::restart).
    async fn kill_and_restart(&mut self, down_for: Duration) -> std::io::Result<()> {
        self.restart(down_for).await
    }
}

/// A private server and a store on it: what [`RestartSupport::start_private`]
/// answers.
pub struct PrivateServer<S> {
    /// A store reaching the server directly, with operation (and
    /// connection-wait) timeouts of about a second or less, so calls during
    /// the outage fail rather than hang.
    pub store: S,
    /// The server, stopped and removed when dropped.
    pub server: Box<dyn RestartableServer>,
}

/// What a factory offers the restart suite; see the [module docs](crate::suites::restart).
#[async_trait]
pub trait RestartSupport<S>: Send + Sync {
    /// Why a private server cannot be started here (its programs are not
    /// installed), or `None` when it can. The scenario is then skipped, or
    /// fails under `TENURE_REQUIRE_SERVICES=1`.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// Starts a private server and connects a store to it.
    ///
    /// # Errors
    ///
    /// When the server cannot be started or the store cannot connect; the
    /// scenario then fails.
    async fn start_private(&self) -> tenure_lease_core::Result<PrivateServer<S>>;
}

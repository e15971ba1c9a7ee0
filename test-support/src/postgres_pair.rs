//! A private PostgreSQL primary with a streaming standby behind a proxy
//! that always forwards to the primary, which a test may fail over as often
//! as it likes ([`PrivatePostgresPair::fail_over`]: the primary stopped at
//! once, the standby promoted, the proxy moved to it, a new standby made
//! from it with `pg_basebackup`).

use std::io;

use async_trait::async_trait;
use tenure_conformance::suites::nemesis::FailoverControl;

use crate::servers::PrivatePostgres;
use crate::FaultProxy;

/// A primary, its standby and the proxy in front of the primary, each
/// stopped (and its directory removed) when dropped.
pub struct PrivatePostgresPair {
    primary: PrivatePostgres,
    standby: PrivatePostgres,
    proxy: FaultProxy,
}

impl PrivatePostgresPair {
    /// Starts a primary with `settings` (`name=value`, as `postgres -c`
    /// takes them, also given to every standby), a standby of it, and the
    /// proxy; answers once both servers accept connections.
    ///
    /// With `synchronous_standby_names=*` a commit waits for the standby.
    pub async fn start(settings: &[&str]) -> io::Result<Self> {
        let primary = PrivatePostgres::start_with_settings(settings).await?;
        let standby = PrivatePostgres::start_standby_of(&primary).await?;
        let proxy = FaultProxy::start(primary.address()).await?;
        Ok(PrivatePostgresPair {
            primary,
            standby,
            proxy,
        })
    }

    /// The URL of the `postgres` database through the proxy, which always
    /// reaches the current primary.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}/postgres", self.proxy.address())
    }

    /// Stops the primary at once (as a kill would), promotes the standby,
    /// moves the proxy to it (dropping every connection through it), and
    /// makes a new standby of it; answers once the new primary takes
    /// writes and its standby streams, so the pair can fail over again.
    ///
    /// # Errors
    ///
    /// When a step fails.
    pub async fn fail_over(&mut self) -> io::Result<()> {
        self.primary.crash().await?;
        self.standby.promote().await?;
        self.proxy.retarget(self.standby.address())?;
        let standby = PrivatePostgres::start_standby_of(&self.standby).await?;
        let promoted = std::mem::replace(&mut self.standby, standby);
        // The old primary's directory goes with it.
        drop(std::mem::replace(&mut self.primary, promoted));
        Ok(())
    }
}

#[async_trait]
impl FailoverControl for PrivatePostgresPair {
    async fn fail_over(&mut self) -> io::Result<()> {
        PrivatePostgresPair::fail_over(self).await
    }
}

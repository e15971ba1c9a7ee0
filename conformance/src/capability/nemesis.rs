//! What a factory offers the [nemesis suite](crate::suites::nemesis): a
//! store on a clock the kit chooses, and a topology it may fail over.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::Clock;

/// What a factory offers the nemesis suite.
#[async_trait]
pub trait NemesisSupport<S>: Send + Sync {
    /// A new store, sharing nothing with any other test (torn down with
    /// [`Factory::teardown`](crate::Factory::teardown)), whose expiry real time judges: its server's
    /// clock, or `clock` for a store that reads a clock in its own process
    /// (memory, SQLite, file, etcd's `now`).
    ///
    /// # Errors
    ///
    /// When the store cannot be created; the scenario then fails.
    async fn create_on_clock(&self, clock: Arc<dyn Clock>) -> tenure_lease_core::Result<S>;

    /// Whether the stores [`create_on_clock`](NemesisSupport::create_on_clock)
    /// makes read the clock they are given: only then can the kit step it
    /// ([`nemesis_clock_steps`](crate::suites::nemesis::nemesis_clock_steps)).
    fn reads_given_clock(&self) -> bool {
        false
    }
}

/// A topology the kit may fail over; see [`FailoverSupport`].
#[async_trait]
pub trait FailoverControl: Send + Sync {
    /// Kills the primary, promotes a replica, and repoints what the
    /// topology's store follows (a Sentinel, a DNS name, a proxy); answers
    /// once the new primary accepts writes.
    ///
    /// # Errors
    ///
    /// When the failover cannot be carried out; the scenario then fails.
    async fn fail_over(&mut self) -> std::io::Result<()>;
}

/// A private primary with replicas and a store that follows its failovers:
/// what [`FailoverSupport::start_topology`] answers.
pub struct Topology<S> {
    /// A store on the topology, following its primary, whose gates refuse
    /// fences from before a failover.
    pub store: S,
    /// How the kit fails it over; stops everything when dropped.
    pub control: Box<dyn FailoverControl>,
    /// Replicas confirm writes after they are acknowledged, so a failover
    /// may lose acknowledged writes (and with them ownerships): the
    /// scenario counts those losses instead of failing on them.
    pub asynchronous: bool,
    /// How far apart the failovers start: a little longer than one
    /// [`fail_over`](FailoverControl::fail_over) takes, so the workload
    /// also runs on a healthy topology between two. The workload runs that
    /// much longer for each failover after the first, so that all of them
    /// fall inside it.
    pub failover_every: Duration,
}

/// What a factory offers [`nemesis_failover`](crate::suites::nemesis::nemesis_failover).
#[async_trait]
pub trait FailoverSupport<S>: Send + Sync {
    /// Why the topology cannot be started here, or `None` when it can.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// Starts a private topology and connects a store to it.
    ///
    /// # Errors
    ///
    /// When it cannot be started; the scenario then fails.
    async fn start_topology(&self) -> tenure_lease_core::Result<Topology<S>>;
}

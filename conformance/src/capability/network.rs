//! What a factory offers the [network suite](crate::suites::network): a
//! second store on the case's records behind faults on command.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::AdmitRequest;

/// Faults on command between a store and its server; see the [module
/// docs](crate::suites::network). Each acts at once on current and future connections.
#[async_trait]
pub trait NetworkFaults: Send + Sync {
    /// Starts an outage: nothing is forwarded either way and nothing is
    /// answered, yet connections stay open (a silent server).
    fn blackhole(&self);

    /// Ends the outage and any reply drop; connections that lost bytes
    /// meanwhile are dropped (a stream with a gap cannot carry on), so
    /// their clients reconnect.
    fn heal(&self);

    /// Drops every current connection, and disarms a pending reply drop.
    fn reset(&self);

    /// Arms a one-shot reply drop: the next request containing `marker`
    /// reaches the server, and every reply on its connection is lost from
    /// then on, until [`heal`](Self::heal) or [`reset`](Self::reset).
    fn drop_reply_after(&self, marker: &[u8]);

    /// Waits at most `within` until the request carrying the armed marker
    /// reached the server; false if it did not in time.
    async fn request_reached_server(&self, within: Duration) -> bool;

    /// How many request/reply exchanges have crossed so far, over every
    /// connection: the network round trips the store behind these faults
    /// has paid. A batch of pipelined requests with its replies counts once.
    fn round_trips(&self) -> u64;

    /// Ends the faults for good: drops every connection and stops whatever
    /// runs them. The kit calls it once the scenario is over.
    async fn stop(&self);
}

/// Which request of an admission's traffic is the one whose reply is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CutAfter {
    /// The first request carrying the new record's id.
    NewId,
    /// The first request carrying the new record's owner.
    NewOwner,
    /// The first request carrying these bytes (a protocol keyword).
    Bytes(&'static [u8]),
}

impl CutAfter {
    /// The bytes that mark the request, for an admission of `request`.
    pub fn marker(self, request: &AdmitRequest) -> Vec<u8> {
        self.marker_for(&request.id, &request.owner)
    }

    /// The bytes that mark the request, for a write of the record `id`
    /// owned by `owner`.
    pub fn marker_for(self, id: &str, owner: &str) -> Vec<u8> {
        match self {
            CutAfter::NewId => id.as_bytes().to_vec(),
            CutAfter::NewOwner => owner.as_bytes().to_vec(),
            CutAfter::Bytes(bytes) => bytes.to_vec(),
        }
    }
}

/// How a scope looks after a cut admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeAfterCut {
    /// Exactly as before: no new record, the holder untouched.
    AsBefore,
    /// The admission applied whole: new record holding the scope, the holder
    /// interrupted by it.
    FullyAdmitted,
}

/// Where a backend's protocol may be cut, and what each cut must leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkProfile {
    /// For an `Interrupt` admission over a holder: each request whose reply
    /// is lost in turn, and how the scope must look afterwards (a backend
    /// that admits in one request has one cut, landing whole; one that
    /// reads, then writes in a transaction has a cut per step).
    pub admission_cuts: Vec<(CutAfter, ScopeAfterCut)>,
    /// For a write of one record (an admission into a free scope, a
    /// terminal transition): the request after whose commit the reply is
    /// lost (the one carrying the record's id, for a backend that writes it
    /// in one request; its `COMMIT`, for one that writes in a transaction).
    pub commit: CutAfter,
    /// What each operation of a lease's life costs in network round trips,
    /// or `None` for a backend whose least count is not steady from one run
    /// to the next (a protocol with exchanges of its own beside the
    /// requests): the round-trip scenario then runs the operations without
    /// holding them to a count.
    pub round_trips: Option<RoundTrips>,
}

/// The network round trips each operation of a lease's life costs a store
/// on a warm connection, uncontended: what the network suite's
/// `each_operation_costs_the_round_trips_its_backend_declares` holds the
/// backend to (the least count over several calls of each, exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTrips {
    /// An admission into a free scope.
    pub admit: u64,
    /// A renewal by the holder.
    pub renew: u64,
    /// A transition to `Running`.
    pub mark_running: u64,
    /// A read of one record.
    pub get: u64,
    /// A terminal transition.
    pub finish: u64,
    /// A takeover of an expired record.
    pub takeover: u64,
}

impl RoundTrips {
    /// One each: every operation is one statement, one script or one
    /// request, and nothing else crosses (no pool ping, no read before a
    /// write).
    pub const ONE_EACH: RoundTrips = RoundTrips {
        admit: 1,
        renew: 1,
        mark_running: 1,
        get: 1,
        finish: 1,
        takeover: 1,
    };
}

/// A store behind [`NetworkFaults`]: what [`NetworkSupport`] hands out.
pub struct BehindFaults<S> {
    /// A store on the same records (schema, namespace...) as the case's
    /// store, connected through `faults`, with operation (or
    /// connection-wait) timeouts of well under a second, so a silent server
    /// answers an error soon.
    pub store: S,
    /// The faults between `store` and its server.
    pub faults: Arc<dyn NetworkFaults>,
}

/// What a factory offers the network suite; see the [module docs](crate::suites::network).
#[async_trait]
pub trait NetworkSupport<S>: Send + Sync {
    /// Where this backend's protocol may be cut.
    fn profile(&self) -> NetworkProfile;

    /// A second store on the records of `direct` (a store this factory
    /// created), connected through faults of its own.
    ///
    /// # Errors
    ///
    /// When the faults cannot be set up or the store cannot connect through
    /// them; the scenario then fails.
    async fn connect_behind_faults(&self, direct: &S)
        -> tenure_lease_core::Result<BehindFaults<S>>;
}

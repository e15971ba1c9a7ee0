//! The etcd factory the kit runs with: one private single-member cluster per
//! test binary (started by the first case, stopped when the binary exits),
//! a fresh key prefix per case, deleted afterwards. Leases end on etcd's
//! own timers (contract §2), which the kit cannot move: it waits for them,
//! up to [`OVERRUN`] past each deadline.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::Client;
use tenure_backend_etcd::{EtcdConfig, EtcdStore};
use tenure_conformance::offset_clock::{ClockOffsetter, OffsetClock};
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::nemesis::NemesisSupport;
use tenure_conformance::suites::network::{
    BehindFaults, CutAfter, NetworkProfile, NetworkSupport, ScopeAfterCut,
};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error};
use tenure_test_support::etcd::{PrivateEtcd, MAX_TXN_OPS};
use tenure_test_support::per_binary::PerBinary;
use tenure_test_support::FaultProxy;

/// The cluster of this test binary.
static CLUSTER: PerBinary<PrivateEtcd> = PerBinary::new();

/// This binary's cluster, started on first use.
fn cluster() -> tenure_lease_core::Result<&'static PrivateEtcd> {
    CLUSTER
        .get_or_start("a private etcd cluster", || PrivateEtcd::start(1))
        .map_err(Error::unavailable)
}

/// The longest etcd's timers keep a lease of the kit's ttls (at most a few
/// seconds) alive past its expiry: below 2.5 s (the ttl rounded up to whole
/// seconds and at least etcd's minimum of 2 s, a second of slack, half a
/// second until etcd notices), with room for a loaded machine.
pub const OVERRUN: Duration = Duration::from_millis(3500);

/// A fresh key prefix per case on this binary's cluster.
pub struct EtcdFactory;

#[async_trait]
impl Factory for EtcdFactory {
    type Store = EtcdStore;

    fn unavailable_reason(&self) -> Option<String> {
        PrivateEtcd::unavailable_reason()
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<EtcdStore>> {
        let prefix = format!("conformance/{}", tenure_lease_core::generate_id());
        let config = EtcdConfig::from(cluster()?.url(&prefix)).max_txn_ops(MAX_TXN_OPS);
        Ok(Subject {
            store: EtcdStore::connect(config).await?,
            clock: ClockControl::Timers { overrun: OVERRUN },
        })
    }

    async fn teardown(&self, store: &EtcdStore) -> tenure_lease_core::Result<()> {
        store.delete_prefix().await.map(drop)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<EtcdStore>> {
        Some(self)
    }

    fn network(&self) -> Option<&dyn NetworkSupport<EtcdStore>> {
        Some(self)
    }

    /// A second store, with connections of its own, on the case's prefix.
    fn reopen(&self) -> Option<Reopener<EtcdStore>> {
        Some(Arc::new(|store: Arc<EtcdStore>| {
            Box::pin(async move { EtcdStore::connect(store.config().clone()).await })
        }))
    }

    /// The case's prefix, its store on an [`OffsetClock`].
    fn clock_offset(&self) -> Option<ClockOffsetter<EtcdStore>> {
        Some(Arc::new(|store: Arc<EtcdStore>, offset| {
            Box::pin(async move {
                let config = store.config().clone().clock(Arc::new(OffsetClock(offset)));
                EtcdStore::connect(config).await.map(Into::into)
            })
        }))
    }

    /// Keys per kind under the case's prefix.
    fn footprint_probe(&self) -> Option<FootprintProbe<EtcdStore>> {
        Some(Arc::new(|store: Arc<EtcdStore>| {
            Box::pin(async move {
                store
                    .footprint()
                    .await
                    .map(|counts| counts.into_iter().collect::<Footprint>())
            })
        }))
    }
}

/// Bound on one call, and on connecting, of a store behind faults.
const PROXIED_OPERATION_TIMEOUT: Duration = Duration::from_millis(500);

/// The case's prefix through a [`FaultProxy`] in front of the member.
#[async_trait]
impl NetworkSupport<EtcdStore> for EtcdFactory {
    fn profile(&self) -> NetworkProfile {
        // Each write reads its keys first (a range request carrying the id),
        // then commits in one transaction, the first request that carries
        // the record's owner. A connection reset right after that
        // transaction was written may still lose it unread (HTTP/2 frames
        // the server had not taken in), so the admission's one cut is the
        // read, which leaves the scope as it was.
        NetworkProfile {
            admission_cuts: vec![(CutAfter::NewId, ScopeAfterCut::AsBefore)],
            commit: CutAfter::NewOwner,
            // Not held to a count: each write reads first, then commits in
            // a transaction comparing what it read; an admission and a
            // takeover grant an etcd lease before, a terminal write revokes
            // it after (3, 2, 2, 1, 3, 3 in the case's order), but a
            // takeover also revokes the lapsed holder's etcd lease when
            // etcd's timer has not ended it yet (4), and HTTP/2 frames of
            // its own cross now and then beside a call.
            round_trips: None,
        }
    }

    async fn connect_behind_faults(
        &self,
        direct: &EtcdStore,
    ) -> tenure_lease_core::Result<BehindFaults<EtcdStore>> {
        let member = cluster()?
            .endpoints()
            .into_iter()
            .next()
            .ok_or_else(|| Error::unavailable("the private etcd cluster has no member"))?;
        let address = member
            .parse()
            .map_err(|error| Error::unavailable(format!("member {member:?}")).with_source(error))?;
        let proxy = FaultProxy::start(address)
            .await
            .map_err(|error| Error::unavailable("cannot start the proxy").with_source(error))?;
        let config = EtcdConfig::new([proxy.address().to_string()], direct.config().key_prefix())
            .max_txn_ops(MAX_TXN_OPS)
            .operation_timeout(PROXIED_OPERATION_TIMEOUT)
            .connect_timeout(PROXIED_OPERATION_TIMEOUT);
        Ok(BehindFaults {
            store: EtcdStore::connect(config).await?,
            faults: Arc::new(proxy),
        })
    }
}

/// A fresh prefix whose `now()` and expiry judgement read the given clock,
/// as well as etcd's own lease timers.
#[async_trait]
impl NemesisSupport<EtcdStore> for EtcdFactory {
    async fn create_on_clock(&self, clock: Arc<dyn Clock>) -> tenure_lease_core::Result<EtcdStore> {
        let prefix = format!("nemesis/{}", tenure_lease_core::generate_id());
        let config = EtcdConfig::from(cluster()?.url(&prefix))
            .max_txn_ops(MAX_TXN_OPS)
            .clock(clock);
        EtcdStore::connect(config).await
    }

    fn reads_given_clock(&self) -> bool {
        true
    }
}

/// A store on a fresh prefix of this binary's cluster, and a client of its
/// own to reach under the store; `None` (the test skipped) without etcd.
pub async fn store_and_client(test: &str) -> Option<(EtcdStore, Client)> {
    if let Some(reason) = PrivateEtcd::unavailable_reason() {
        tenure_conformance::skip_unless_required(test, &reason);
        return None;
    }
    let store = EtcdFactory.create().await.expect("a store").store;
    let client = Client::connect(store.config().endpoints(), None)
        .await
        .expect("a client");
    Some((store, client))
}

/// The value of `key`, if any.
pub async fn value(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let got = client.get(key, None).await.expect("get");
    got.kvs().first().map(|kv| kv.value().to_vec())
}

//! The Redis factory the kit runs with: a fresh random namespace per case on
//! the server `TENURE_REDIS_URL` names (or on a private Redis Cluster),
//! deleted afterwards, damaged on
//! request by raw writes to its hashes, and every
//! capability of the kit's suites: a second store through a `FaultProxy`,
//! namespaces other processes open, private servers to restart and to
//! misconfigure. Without the variable every case but those on private
//! servers prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_backend_redis::{RedisConfig, RedisStore};
use tenure_conformance::damage::{BadTime, Damage, DamageOutcome, Damager, Target, TimeField};
use tenure_conformance::offset_clock::{ClockOffsetter, OffsetStore};
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::deployment::{DeploymentSupport, Misdeployment};
use tenure_conformance::suites::nemesis::{
    FailoverControl, FailoverSupport, NemesisSupport, Topology,
};
use tenure_conformance::suites::network::{
    BehindFaults, CutAfter, NetworkProfile, NetworkSupport, RoundTrips, ScopeAfterCut,
};
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::suites::restart::{PrivateServer, RestartSupport};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error, ErrorKind};
use tenure_test_support::per_binary::PerBinary;
use tenure_test_support::redis_cluster::{PrivateRedisCluster, SlotFailover};
use tenure_test_support::sentinel::PrivateSentinels;
use tenure_test_support::servers::PrivateRedis;
use tenure_test_support::FaultProxy;

use crate::scratch::{key_prefix, raw_connection, set_field};

/// This binary's private Redis Cluster, when it uses one.
static CLUSTER: PerBinary<PrivateRedisCluster> = PerBinary::new();
/// This binary's private Sentinel deployment and its primary's URL, when
/// it uses one.
static SENTINELS: PerBinary<(PrivateSentinels, String)> = PerBinary::new();

/// Bound on one call of a store behind faults, reconnecting included.
const PROXIED_OPERATION_TIMEOUT: Duration = Duration::from_millis(500);
/// Bound on each call and on (re)connecting to the restart suite's private
/// server, so calls during the outage fail quickly instead of hanging.
const RESTART_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Connecting to a misconfigured server: long enough that a refusal
/// answered within it was not a time-out, whatever the load of the machine.
const PATIENT: Duration = Duration::from_secs(60);
/// The eviction policies that may drop any key, tenure's included.
const EVICTING_POLICIES: [&str; 3] = ["allkeys-lru", "allkeys-lfu", "allkeys-random"];
/// How a misdeployment's name starts; the policy follows.
const POLICY_PREFIX: &str = "maxmemory-policy ";

/// A fresh random namespace per case on the server `TENURE_REDIS_URL` names,
/// or on this binary's private Sentinel deployment or Redis Cluster.
pub struct RedisFactory {
    url: Option<String>,
    /// Plain URLs of the servers namespaces live on (the server itself, or
    /// each node of the cluster), for raw reads and writes.
    servers: Vec<String>,
    /// Why the factory has no server, when it has none.
    unavailable: Option<String>,
    /// What the store's URL names: behind Sentinel or in a cluster, the
    /// suites that start single servers of their own (network faults,
    /// restarts, misdeployments) run on the single server only; in a
    /// cluster, the failover topology is a cluster too.
    topology: Deployment,
    /// The failover topology's store has every write confirmed by the
    /// replica (`WAIT`).
    waits_for_replicas: bool,
}

/// How long a write of the failover topology's store waiting for its
/// replica waits (below [`RESTART_CALL_TIMEOUT`]).
const REPLICA_WAIT: Duration = Duration::from_millis(500);

/// What a factory's stores connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deployment {
    /// One server (`TENURE_REDIS_URL`).
    Server,
    /// A primary the binary's Sentinels name.
    Sentinels,
    /// The binary's cluster.
    Cluster,
}

impl RedisFactory {
    /// The factory for the server the environment names, else the
    /// binary's private server.
    pub fn from_env() -> Self {
        let found = tenure_test_support::shared::redis_url();
        let url = found.as_ref().ok().cloned();
        RedisFactory {
            servers: url.iter().cloned().collect(),
            unavailable: found.err(),
            url,
            waits_for_replicas: false,
            topology: Deployment::Server,
        }
    }

    /// A fresh namespace per case on this binary's private three-primary
    /// Redis Cluster (started by the first case): namespaces spread over
    /// its primaries.
    pub fn on_private_cluster() -> Self {
        let started = match PrivateRedisCluster::unavailable_reason() {
            Some(reason) => Err(reason),
            None => CLUSTER
                .get_or_start("a private Redis Cluster", || PrivateRedisCluster::start(3))
                .map(|cluster| (cluster.url(), cluster.node_urls())),
        };
        Self::on(Deployment::Cluster, started)
    }

    /// A fresh namespace per case on the primary this binary's private
    /// Sentinels (three, with a primary and a replica, started by the first
    /// case) name; the deployment does not fail over.
    pub fn behind_private_sentinels() -> Self {
        let started = match PrivateRedis::unavailable_reason() {
            Some(reason) => Err(reason),
            None => SENTINELS
                .get_or_start("a private Sentinel deployment", || async {
                    let sentinels = PrivateSentinels::start(1).await?;
                    let primary = sentinels.primary_url().await?;
                    Ok((sentinels, primary))
                })
                .map(|(sentinels, primary)| (sentinels.url(), vec![primary.clone()])),
        };
        Self::on(Deployment::Sentinels, started)
    }

    /// A factory on `topology`, given its URL and its servers' plain URLs,
    /// or why it could not be started.
    fn on(topology: Deployment, started: Result<(String, Vec<String>), String>) -> Self {
        let (url, servers, unavailable) = match started {
            Ok((url, servers)) => (Some(url), servers, None),
            Err(reason) => (None, Vec::new(), Some(reason)),
        };
        RedisFactory {
            url,
            servers,
            unavailable,
            topology,
            waits_for_replicas: false,
        }
    }

    /// [`from_env`](Self::from_env), but the failover topology's store
    /// waits for its replica to confirm every write.
    pub fn waiting_for_replicas() -> Self {
        RedisFactory {
            waits_for_replicas: true,
            ..Self::from_env()
        }
    }
}

#[async_trait]
impl Factory for RedisFactory {
    type Store = RedisStore;

    fn unavailable_reason(&self) -> Option<String> {
        self.unavailable.clone()
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<RedisStore>> {
        let namespace = format!("conformance:{}", tenure_lease_core::generate_id());
        Ok(Subject {
            store: RedisStore::connect(RedisConfig::new(self.url()?, namespace)).await?,
            clock: ClockControl::Real,
        })
    }

    fn network(&self) -> Option<&dyn NetworkSupport<RedisStore>> {
        (self.topology == Deployment::Server).then_some(self as _)
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<RedisStore>> {
        (self.topology == Deployment::Server).then_some(self as _)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<RedisStore>> {
        Some(self)
    }

    fn restart(&self) -> Option<&dyn RestartSupport<RedisStore>> {
        (self.topology == Deployment::Server).then_some(self as _)
    }

    fn failover(&self) -> Option<&dyn FailoverSupport<RedisStore>> {
        Some(self)
    }

    fn deployment(&self) -> Option<&dyn DeploymentSupport> {
        (self.topology == Deployment::Server).then_some(self as _)
    }

    async fn teardown(&self, store: &RedisStore) -> tenure_lease_core::Result<()> {
        store.delete_namespace().await.map(drop)
    }

    /// A second store, with a connection of its own, on the case's
    /// namespace.
    fn reopen(&self) -> Option<Reopener<RedisStore>> {
        Some(Arc::new(|store: Arc<RedisStore>| {
            Box::pin(async move { RedisStore::connect(store.config().clone()).await })
        }))
    }

    /// A private server of the case's own whose wall clock (`TIME`, key
    /// expiry) is moved by the offset, kept running as long as the store;
    /// for the single-server topology, where a server of its own stands for
    /// the one the URL names.
    fn clock_offset(&self) -> Option<ClockOffsetter<RedisStore>> {
        if self.topology != Deployment::Server || PrivateRedis::unavailable_reason().is_some() {
            return None;
        }
        Some(Arc::new(
            |store: Arc<RedisStore>, offset: chrono::TimeDelta| {
                Box::pin(async move {
                    let micros = offset.num_microseconds().ok_or_else(|| {
                        Error::new(
                            ErrorKind::Config,
                            format!("a clock offset of {offset} is too large"),
                        )
                    })?;
                    let server = PrivateRedis::start_with_clock_offset(micros)
                        .await
                        .map_err(|error| {
                            Error::unavailable(
                                "cannot start a private redis-server on an offset clock",
                            )
                            .with_source(error)
                        })?;
                    let namespace = store.config().namespace().to_owned();
                    let offset_store =
                        RedisStore::connect(RedisConfig::new(server.url(), namespace)).await?;
                    Ok(OffsetStore::keeping(offset_store, server))
                })
            },
        ))
    }

    /// Damage by raw writes to the record's or job's hash: every field is
    /// bytes, so every damage of the kit can be held.
    fn damager(&self) -> Option<Damager<RedisStore>> {
        let servers = self.servers.clone();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<RedisStore>, target: Target, damage: Damage| {
                let servers = servers.clone();
                Box::pin(async move {
                    let Some((key, field, value)) = damage_field(&target, damage) else {
                        return Ok(DamageOutcome::CannotHold);
                    };
                    let namespace = store.config().namespace();
                    let key = format!("{}{key}", key_prefix(namespace));
                    apply(&servers, namespace, &key, field, value)
                        .await
                        .map_err(|error| {
                            tenure_lease_core::Error::unavailable(format!(
                                "cannot damage {target:?} with {damage}"
                            ))
                            .with_source(error)
                        })
                })
            },
        ))
    }

    /// Entries per key of the case's namespace.
    fn footprint_probe(&self) -> Option<FootprintProbe<RedisStore>> {
        let servers = self.servers.clone();
        Some(Arc::new(move |store: Arc<RedisStore>| {
            let servers = servers.clone();
            Box::pin(async move { count_entries(&servers, store.config().namespace()).await })
        }))
    }
}

impl RedisFactory {
    /// The cluster's URL and each node's plain URL.
    pub fn cluster_urls(&self) -> (String, Vec<String>) {
        (self.url.clone().unwrap_or_default(), self.servers.clone())
    }

    fn url(&self) -> tenure_lease_core::Result<&str> {
        self.url.as_deref().ok_or_else(|| {
            Error::new(
                ErrorKind::Config,
                self.unavailable.clone().unwrap_or_default(),
            )
        })
    }
}

/// One script is one admission: once it reached the server, the admission
/// lands whole, and its reply is the one sent after the commit.
#[async_trait]
impl NetworkSupport<RedisStore> for RedisFactory {
    fn profile(&self) -> NetworkProfile {
        NetworkProfile {
            admission_cuts: vec![(CutAfter::NewId, ScopeAfterCut::FullyAdmitted)],
            commit: CutAfter::NewId,
            round_trips: Some(RoundTrips::ONE_EACH),
        }
    }

    async fn connect_behind_faults(
        &self,
        direct: &RedisStore,
    ) -> tenure_lease_core::Result<BehindFaults<RedisStore>> {
        let (proxy, proxied_url) = FaultProxy::in_front_of(self.url()?)
            .await
            .map_err(|error| Error::unavailable("cannot start the proxy").with_source(error))?;
        let config = RedisConfig::new(proxied_url, direct.config().namespace())
            .operation_timeout(PROXIED_OPERATION_TIMEOUT)
            .connect_timeout(PROXIED_OPERATION_TIMEOUT);
        Ok(BehindFaults {
            store: RedisStore::connect(config).await?,
            faults: Arc::new(proxy),
        })
    }
}

/// A fresh namespace, named to the children.
#[async_trait]
impl ProcessSupport<RedisStore> for RedisFactory {
    async fn create_shared(&self) -> tenure_lease_core::Result<SharedStore<RedisStore>> {
        let namespace = format!("multi-process:{}", tenure_lease_core::generate_id());
        Ok(SharedStore {
            store: self.open_shared(&namespace).await?,
            address: namespace,
        })
    }

    async fn open_shared(&self, namespace: &str) -> tenure_lease_core::Result<RedisStore> {
        RedisStore::connect(RedisConfig::new(self.url()?, namespace)).await
    }
}

/// A `redis-server` of its own (SIGKILL, then a fresh process on the same
/// fsync-always append-only file); the shared server is never stopped.
#[async_trait]
impl RestartSupport<RedisStore> for RedisFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivateRedis::unavailable_reason()
    }

    async fn start_private(&self) -> tenure_lease_core::Result<PrivateServer<RedisStore>> {
        let server = PrivateRedis::start().await.map_err(|error| {
            Error::unavailable("cannot start a private redis-server").with_source(error)
        })?;
        let store = RedisStore::connect(
            RedisConfig::new(server.url(), "restart")
                .operation_timeout(RESTART_CALL_TIMEOUT)
                .connect_timeout(RESTART_CALL_TIMEOUT),
        )
        .await?;
        Ok(PrivateServer {
            store,
            server: Box::new(server),
        })
    }
}

/// A private primary with a replica and three Sentinels; the store follows
/// the primary through them and its gates refuse fences from before a
/// failover. Replication is asynchronous unless the factory waits for
/// replicas.
#[async_trait]
impl FailoverSupport<RedisStore> for RedisFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivateRedis::unavailable_reason()
    }

    async fn start_topology(&self) -> tenure_lease_core::Result<Topology<RedisStore>> {
        let turn = REPLICATED_TURN.lock().await;
        let topology = if self.topology == Deployment::Cluster {
            cluster_topology().await?
        } else {
            sentinel_topology(self.waits_for_replicas).await?
        };
        Ok(Topology {
            control: Box::new(OnItsTurn {
                control: topology.control,
                _turn: turn,
            }),
            ..topology
        })
    }
}

/// Private deployments with replicas, one at a time in this test binary:
/// each runs several servers through repeated failovers, and two at once
/// on a two-core machine starve each other's replication and Sentinels
/// past the bounds the tests allow.
pub(crate) static REPLICATED_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A failover control that holds [`REPLICATED_TURN`] until it is dropped
/// (the topology stopped).
struct OnItsTurn {
    control: Box<dyn FailoverControl>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

#[async_trait]
impl FailoverControl for OnItsTurn {
    async fn fail_over(&mut self) -> std::io::Result<()> {
        self.control.fail_over().await
    }
}

/// A private primary with a replica behind three Sentinels; the store
/// follows its failovers, and its gates refuse fences from before one.
async fn sentinel_topology(
    waits_for_replicas: bool,
) -> tenure_lease_core::Result<Topology<RedisStore>> {
    let sentinels = PrivateSentinels::start(1).await.map_err(|error| {
        Error::unavailable("cannot start a private Sentinel deployment").with_source(error)
    })?;
    let mut config = RedisConfig::new(sentinels.url(), "failover")
        .refuse_fences_from_before_failover(true)
        .operation_timeout(RESTART_CALL_TIMEOUT)
        .connect_timeout(RESTART_CALL_TIMEOUT);
    if waits_for_replicas {
        config = config.wait_for_replicas(1, REPLICA_WAIT);
    }
    Ok(Topology {
        store: RedisStore::connect(config).await?,
        control: Box::new(sentinels),
        asynchronous: !waits_for_replicas,
        failover_every: Duration::from_millis(2500),
    })
}

/// A private three-primary cluster, each primary with a replica; the
/// store's namespace fails over (its primary killed, the replica taking
/// the slot over), and its gates refuse fences from before a failover.
async fn cluster_topology() -> tenure_lease_core::Result<Topology<RedisStore>> {
    let cluster = PrivateRedisCluster::start_with_replicas(3, true)
        .await
        .map_err(|error| {
            Error::unavailable("cannot start a private Redis Cluster with replicas")
                .with_source(error)
        })?;
    let config = RedisConfig::new(cluster.url(), "failover")
        .refuse_fences_from_before_failover(true)
        .operation_timeout(RESTART_CALL_TIMEOUT)
        .connect_timeout(RESTART_CALL_TIMEOUT);
    Ok(Topology {
        store: RedisStore::connect(config).await?,
        control: Box::new(SlotFailover {
            cluster,
            key: key_prefix("failover"),
        }),
        asynchronous: true,
        failover_every: Duration::from_millis(2500),
    })
}

/// A private `redis-server` per misdeployment, with an eviction policy that
/// may drop any key; the shared server is never reconfigured.
#[async_trait]
impl DeploymentSupport for RedisFactory {
    fn unavailable_reason(&self) -> Option<String> {
        PrivateRedis::unavailable_reason()
    }

    fn misdeployments(&self) -> Vec<Misdeployment> {
        EVICTING_POLICIES
            .iter()
            .map(|policy| {
                Misdeployment::new(
                    format!("{POLICY_PREFIX}{policy}"),
                    ErrorKind::Incompatible,
                    ["maxmemory-policy", policy, "noeviction"],
                )
            })
            .collect()
    }

    async fn connect_misdeployed(&self, which: &Misdeployment) -> tenure_lease_core::Result<()> {
        let policy = which
            .name
            .strip_prefix(POLICY_PREFIX)
            .unwrap_or_else(|| panic!("not a misdeployment of this factory: {which:?}"));
        let server = PrivateRedis::start_with(&["--maxmemory-policy", policy])
            .await
            .unwrap_or_else(|error| panic!("start redis-server with {policy}: {error}"));
        RedisStore::connect(RedisConfig::new(server.url(), "deployment").connect_timeout(PATIENT))
            .await
            .map(drop)
    }
}

/// Entries per key (members, fields, or 1 for a string) of the keys of
/// `namespace`, by name after the namespace's prefix. The case namespaces
/// hold no glob characters.
async fn count_entries(
    servers: &[String],
    namespace: &str,
) -> tenure_lease_core::Result<Footprint> {
    let failed = |error: redis::RedisError| {
        tenure_lease_core::Error::unavailable("cannot count the keys of the case's namespace")
            .with_source(error)
    };
    let mut connection = raw_connection(servers, namespace).await.map_err(failed)?;
    let prefix = key_prefix(namespace);
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0_u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        keys.extend(found);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut footprint = Footprint::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        let size_command = match kind.as_str() {
            "zset" => "ZCARD",
            "hash" => "HLEN",
            "set" => "SCARD",
            "list" => "LLEN",
            _ => "EXISTS",
        };
        let entries: u64 = redis::cmd(size_command)
            .arg(&key)
            .query_async(&mut connection)
            .await
            .map_err(failed)?;
        let name = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
        footprint.insert(format!("{kind} {name}"), entries);
    }
    Ok(footprint)
}

/// The key (after the namespace's prefix), field and bytes of the kit's
/// `damage` to `target`, or `None` for a damage that names a field the
/// target does not have.
fn damage_field(target: &Target, damage: Damage) -> Option<(String, &'static str, &'static [u8])> {
    let (key, is_job) = match target {
        Target::Lease(id) => (format!("rec:{id}"), false),
        Target::Job(id) => (format!("job:{id}"), true),
        _ => return None,
    };
    let (field, value): (&'static str, &'static [u8]) = match damage {
        Damage::Timestamp(field, bad) => {
            let field = match field {
                TimeField::CreatedAt => "created",
                TimeField::UpdatedAt => "updated",
                TimeField::LeaseExpiresAt => "expires",
                TimeField::RunAt if is_job => "run_at",
                TimeField::TakenBackAt if is_job => "taken_back_at",
                _ => return None,
            };
            let value: &'static [u8] = match bad {
                BadTime::OutOfRange => b"9223372036854775807",
                BadTime::NotFinite => b"inf",
                _ => b"yesterday",
            };
            (field, value)
        }
        Damage::UnknownStatus => (if is_job { "state" } else { "status" }, b"bogus"),
        Damage::NegativeFence => ("fence", b"-1"),
        Damage::HugeFence => ("fence", b"99999999999999999999999"),
        Damage::NegativeAttempt if is_job => ("attempt", b"-1"),
        Damage::HugeAttempt if is_job => ("attempt", b"1001"),
        Damage::MalformedScopes if !is_job => ("scopes", b"not json"),
        Damage::MalformedMetadata if !is_job => ("meta", b"[1]"),
        Damage::MalformedPayload if is_job => ("payload", b"{not json"),
        Damage::MalformedCapabilities if is_job => ("caps", b"[1]"),
        Damage::NegativeTakeBacks if is_job => ("taken_back", b"-1"),
        _ => return None,
    };
    Some((key, field, value))
}

/// Writes `value` into `field` of the existing hash at `key`, on a
/// connection of its own.
async fn apply(
    servers: &[String],
    namespace: &str,
    key: &str,
    field: &str,
    value: &[u8],
) -> redis::RedisResult<DamageOutcome> {
    let mut raw = raw_connection(servers, namespace).await?;
    let exists: bool = redis::cmd("EXISTS").arg(key).query_async(&mut raw).await?;
    if !exists {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "nothing to damage",
            key.to_owned(),
        )));
    }
    set_field(&mut raw, key, field, Some(value)).await?;
    Ok(DamageOutcome::Applied)
}

/// A fresh namespace; the server's `TIME` judges expiry, so the given clock
/// is not read.
#[async_trait]
impl NemesisSupport<RedisStore> for RedisFactory {
    async fn create_on_clock(
        &self,
        _clock: Arc<dyn Clock>,
    ) -> tenure_lease_core::Result<RedisStore> {
        Ok(self.create().await?.store)
    }
}

//! The Redis factory the kit runs with: a fresh random namespace per case on
//! the server `TENURE_REDIS_URL` names, deleted afterwards, damaged on
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
use tenure_conformance::reopen::Reopener;
use tenure_conformance::suites::deployment::{DeploymentSupport, Misdeployment};
use tenure_conformance::suites::nemesis::NemesisSupport;
use tenure_conformance::suites::network::{
    BehindFaults, CutAfter, NetworkProfile, NetworkSupport, ScopeAfterCut,
};
use tenure_conformance::suites::process::{ProcessSupport, SharedStore};
use tenure_conformance::suites::restart::{PrivateServer, RestartSupport};
use tenure_conformance::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use tenure_lease_core::{Clock, Error, ErrorKind};
use tenure_test_support::servers::PrivateRedis;
use tenure_test_support::FaultProxy;

use crate::scratch::{key_prefix, set_field};

/// The environment variable naming the server the kit runs against.
const URL_VAR: &str = "TENURE_REDIS_URL";
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

/// A fresh random namespace per case on the server `TENURE_REDIS_URL` names.
pub struct RedisFactory {
    url: Option<String>,
}

impl RedisFactory {
    /// The factory for the server the environment names, if any.
    pub fn from_env() -> Self {
        RedisFactory {
            url: tenure_conformance::service_url(URL_VAR),
        }
    }
}

#[async_trait]
impl Factory for RedisFactory {
    type Store = RedisStore;

    fn unavailable_reason(&self) -> Option<String> {
        match self.url {
            Some(_) => None,
            None => Some(format!("{URL_VAR} is not set")),
        }
    }

    async fn create(&self) -> tenure_lease_core::Result<Subject<RedisStore>> {
        let namespace = format!("conformance:{}", tenure_lease_core::generate_id());
        Ok(Subject {
            store: RedisStore::connect(RedisConfig::new(self.url()?, namespace)).await?,
            clock: ClockControl::Real,
        })
    }

    fn network(&self) -> Option<&dyn NetworkSupport<RedisStore>> {
        Some(self)
    }

    fn processes(&self) -> Option<&dyn ProcessSupport<RedisStore>> {
        Some(self)
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<RedisStore>> {
        Some(self)
    }

    fn restart(&self) -> Option<&dyn RestartSupport<RedisStore>> {
        Some(self)
    }

    fn deployment(&self) -> Option<&dyn DeploymentSupport> {
        Some(self)
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

    /// Damage by raw writes to the record's or job's hash: every field is
    /// bytes, so every damage of the kit can be held.
    fn damager(&self) -> Option<Damager<RedisStore>> {
        let url = self.url.clone().unwrap_or_default();
        Some(std::sync::Arc::new(
            move |store: std::sync::Arc<RedisStore>, target: Target, damage: Damage| {
                let url = url.clone();
                Box::pin(async move {
                    let Some((key, field, value)) = damage_field(&target, damage) else {
                        return Ok(DamageOutcome::CannotHold);
                    };
                    let key = format!("{}{key}", key_prefix(store.config().namespace()));
                    apply(&url, &key, field, value).await.map_err(|error| {
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
        let url = self.url.clone().unwrap_or_default();
        Some(Arc::new(move |store: Arc<RedisStore>| {
            let url = url.clone();
            Box::pin(async move { count_entries(&url, store.config().namespace()).await })
        }))
    }
}

impl RedisFactory {
    fn url(&self) -> tenure_lease_core::Result<&str> {
        self.url
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::Config, format!("{URL_VAR} is not set")))
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
async fn count_entries(url: &str, namespace: &str) -> tenure_lease_core::Result<Footprint> {
    let failed = |error: redis::RedisError| {
        tenure_lease_core::Error::unavailable("cannot count the keys of the case's namespace")
            .with_source(error)
    };
    let client = redis::Client::open(url).map_err(failed)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(failed)?;
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
    url: &str,
    key: &str,
    field: &str,
    value: &[u8],
) -> redis::RedisResult<DamageOutcome> {
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
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

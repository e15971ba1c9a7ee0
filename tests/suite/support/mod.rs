//! What the facade's tests of the keeper's helpers (election, once per
//! tick) share: one store per test on each backend, cleaned up afterwards
//! even when the test panics, and the keepers they run.
//!
//! * memory and SQLite (a file in a fresh temporary directory) run on a
//!   [`ManualClock`]: the test moves store time, nobody waits for it;
//! * PostgreSQL (a fresh schema) and Redis (a fresh key namespace) run on
//!   the servers `TENURE_PG_URL` and `TENURE_REDIS_URL` name, on the
//!   server's clock: moving store time means waiting for it, kept short
//!   (leases are first shortened to 1 ms, ticks last 200 ms).
//!
//! Keepers beat in real tokio time (the stores' clocks are not tokio's), so
//! waits for their effects are signals under generous bounds: a loaded
//! machine slows a test down, never fails it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt as _;
use tenure::keeper::{Keeper, KeeperConfig};
use tenure::layer::{Faults, LayerExt, Layered};
use tenure::{clock, Claim, FenceStore, LeaseStore, ManualClock, Renewal, Timestamp};

/// The keepers' lease: long against [`BEAT`], so only a heartbeat starved
/// for more than ten beats misses a confirmed deadline.
pub const TTL: Duration = Duration::from_secs(3);
/// The keepers' beat.
pub const BEAT: Duration = Duration::from_millis(250);
/// The longest a test waits for one effect of a background task.
pub const SIGNAL: Duration = Duration::from_secs(20);
/// The bound on a whole test.
const TEST_BOUND: Duration = Duration::from_secs(180);
/// The most removing a test's store (a schema, a namespace) may take.
const CLEAN_UP_BOUND: Duration = Duration::from_secs(60);

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
    Redis,
}

/// A store behind the fault-injection layer, for one keeper of a test.
pub type FaultyStore = Layered<Arc<dyn LeaseStore>, Faults>;

/// A test's store, and how its clock moves.
pub struct Subject {
    pub store: Arc<dyn LeaseStore>,
    /// The same store's fence gates: what a leader's writes are checked by.
    pub gates: Arc<dyn FenceStore>,
    /// `None`: the server's clock, which only time moves.
    pub clock: Option<Arc<ManualClock>>,
    cleanup: Cleanup,
}

/// What to remove after the test.
enum Cleanup {
    Nothing,
    /// Removed when dropped, with the last handle on the subject.
    #[cfg(feature = "sqlite")]
    Directory {
        _removed_on_drop: tempfile::TempDir,
    },
    #[cfg(feature = "postgres")]
    Schema(tenure::postgres::PgStore),
    #[cfg(feature = "redis")]
    Namespace(tenure::redis::RedisStore),
}

impl Subject {
    /// Whether store time moves only when the test moves it.
    pub fn manual_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// The store's time now.
    pub async fn now(&self) -> Timestamp {
        self.store.now().await.expect("the store's clock")
    }

    /// Moves store time past `instant`: a manual clock is set there, a
    /// server's clock is waited for (`instant` must be near).
    pub async fn advance_past(&self, instant: Timestamp) {
        if let Some(clock) = &self.clock {
            clock.advance_to(clock::add(instant, Duration::from_micros(1)));
            return;
        }
        loop {
            let now = self.now().await;
            if now > instant {
                return;
            }
            tokio::time::sleep(clock::until(now, instant) + Duration::from_millis(1)).await;
        }
    }

    /// Makes the store see `claim`'s lease as lapsed while its keeper still
    /// trusts its confirmed deadline (a paused or partitioned holder): a
    /// raw renewal of 1 ms with the claim, then store time moved past it.
    /// False when the claim no longer holds.
    pub async fn lapse(&self, claim: &Claim) -> bool {
        match self.store.renew(claim, Duration::from_millis(1)).await {
            Ok(Renewal::Renewed { expires_at }) => {
                self.advance_past(expires_at).await;
                true
            }
            Ok(_) => false,
            Err(error) => panic!("shortening the lease of {claim:?}: {error}"),
        }
    }

    /// A store behind its own fault layer, over this test's records.
    pub fn faulty(&self) -> Arc<FaultyStore> {
        Arc::new(Arc::clone(&self.store).layer(Faults::new()))
    }
}

/// A keeper for `worker` over `store`: the tests' ttl and beat, no
/// self-running reconciler.
pub fn keeper(store: Arc<dyn LeaseStore>, worker: &str) -> Arc<Keeper> {
    let config = KeeperConfig::with_ttl(TTL)
        .renew_interval(BEAT)
        .auto_reconcile(false)
        .worker_id(worker);
    Arc::new(
        Keeper::builder(store, config)
            .start()
            .expect("the keeper starts"),
    )
}

/// Runs `test` on a fresh store of `backend`, bounded, then removes the
/// store (also when the test panics; the panic is raised again). A server
/// backend whose URL is not set is skipped (a failure under
/// `TENURE_REQUIRE_SERVICES=1`).
pub async fn run<F>(backend: Backend, name: &str, test: F)
where
    F: FnOnce(Arc<Subject>) -> LocalBoxFuture<'static, ()>,
{
    let Some(subject) = create(backend, name).await else {
        return;
    };
    let subject = Arc::new(subject);
    let outcome = AssertUnwindSafe(tokio::time::timeout(TEST_BOUND, test(Arc::clone(&subject))))
        .catch_unwind()
        .await;
    // A clean-up that hangs (a pool waiting for a connection some leaked
    // task holds) fails the test by name instead of stalling the run.
    if tokio::time::timeout(CLEAN_UP_BOUND, clean_up(subject))
        .await
        .is_err()
    {
        panic!("{name}: removing its store did not finish within {CLEAN_UP_BOUND:?}");
    }
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_)) => panic!("{name} did not finish within {TEST_BOUND:?}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

async fn create(backend: Backend, name: &str) -> Option<Subject> {
    let manual = || Arc::new(ManualClock::starting_now());
    match backend {
        #[cfg(feature = "memory")]
        Backend::Memory => {
            let clock = manual();
            let store = tenure::memory::MemoryStore::with_clock(clock.clone());
            Some(Subject {
                store: Arc::new(store.clone()),
                gates: Arc::new(store),
                clock: Some(clock),
                cleanup: Cleanup::Nothing,
            })
        }
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            use tenure::sqlite::{SqliteConfig, SqliteStore};
            let clock = manual();
            let directory = tempfile::TempDir::with_prefix("tenure-helpers-").expect("a temp dir");
            let config = SqliteConfig::new(directory.path().join("leases.db")).clock(clock.clone());
            let store = SqliteStore::connect(config)
                .await
                .expect("the SQLite store opens");
            Some(Subject {
                store: Arc::new(store.clone()),
                gates: Arc::new(store),
                clock: Some(clock),
                cleanup: Cleanup::Directory {
                    _removed_on_drop: directory,
                },
            })
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            use tenure::postgres::{PgStore, PgStoreConfig};
            let url = tenure_test_support::shared::postgres_url_for(name)?;
            let schema = format!("tenure_test_{}", tenure::generate_id().replace('-', ""));
            let store = PgStore::connect(PgStoreConfig::new(url).schema(schema).max_connections(8))
                .await
                .expect("the PostgreSQL store connects");
            Some(Subject {
                store: Arc::new(store.clone()),
                gates: Arc::new(store.clone()),
                clock: None,
                cleanup: Cleanup::Schema(store),
            })
        }
        #[cfg(feature = "redis")]
        Backend::Redis => {
            use tenure::redis::{RedisConfig, RedisStore};
            let url = tenure_test_support::shared::redis_url_for(name)?;
            let namespace = format!("helpers:{}", tenure::generate_id());
            let store = RedisStore::connect(RedisConfig::new(url, namespace))
                .await
                .expect("the Redis store connects");
            Some(Subject {
                store: Arc::new(store.clone()),
                gates: Arc::new(store.clone()),
                clock: None,
                cleanup: Cleanup::Namespace(store),
            })
        }
        #[allow(unreachable_patterns)]
        _ => {
            tenure_conformance::report_skip(name, "the backend's feature is off");
            None
        }
    }
}

async fn clean_up(subject: Arc<Subject>) {
    match &subject.cleanup {
        Cleanup::Nothing => {}
        #[cfg(feature = "sqlite")]
        Cleanup::Directory { .. } => {}
        #[cfg(feature = "postgres")]
        Cleanup::Schema(store) => store.drop_schema().await.expect("the schema is dropped"),
        #[cfg(feature = "redis")]
        Cleanup::Namespace(store) => {
            store
                .delete_namespace()
                .await
                .expect("the namespace is deleted");
        }
    }
}

/// Waits until `ready` answers `Some`, re-checking it every time `changed`
/// signals; panics after [`SIGNAL`] with `what`.
pub async fn until<T, C, Fut>(what: &str, mut ready: impl FnMut() -> Option<T>, mut changed: C) -> T
where
    C: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let waiting = async {
        loop {
            if let Some(value) = ready() {
                return value;
            }
            changed().await;
        }
    };
    tokio::time::timeout(SIGNAL, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {SIGNAL:?}"))
}

/// Instantiates each scenario (an `async fn(Arc<Subject>)` of the calling
/// module) once per backend, as `<backend>::<scenario>` in that module.
macro_rules! on_every_backend {
    ($($scenario:ident),+ $(,)?) => {
        on_every_backend!(@backend memory, Memory, "memory", $($scenario),+);
        on_every_backend!(@backend sqlite, Sqlite, "sqlite", $($scenario),+);
        on_every_backend!(@backend postgres, Postgres, "postgres", $($scenario),+);
        on_every_backend!(@backend redis, Redis, "redis", $($scenario),+);
    };
    (@backend $module:ident, $backend:ident, $feature:literal, $($scenario:ident),+) => {
        #[cfg(feature = $feature)]
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    crate::support::run(
                        crate::support::Backend::$backend,
                        concat!(stringify!($module), "::", stringify!($scenario)),
                        |subject| Box::pin(super::$scenario(subject)),
                    )
                    .await;
                }
            )+
        }
    };
}
pub(crate) use on_every_backend;

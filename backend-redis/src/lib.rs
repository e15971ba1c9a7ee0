//! # backend-redis
//!
//! A [`LeaseStore`](tenure_lease_core::LeaseStore) and [`JobQueue`](tenure_lease_core::JobQueue) on Redis: every
//! operation is one Lua script, so it is atomic on the server: on Redis 7
//! and newer a function of one library that [`RedisStore::connect`] loads
//! (`FUNCTION LOAD`, called with `FCALL` / `FCALL_RO`, loaded again when the
//! server lost it), elsewhere a script run with `EVALSHA` (loaded again on
//! `NOSCRIPT`); both forms are made from the same files (see
//! `src/scripts.rs`). The
//! scripts read the time from the server (`TIME`, microseconds), never from
//! the client, and mirror [`tenure_lease_core::backend::rules`] (and
//! [`rate_rules`] for rate limits) exactly: the same reasons in the same
//! precedence, the same retry-after. Each script judges everything
//! before its first write, because Lua does not roll back: an `Interrupt`
//! admission interrupts every holder or none.
//!
//! Through the facade it is `tenure::redis::RedisStore` (feature `redis`),
//! also opened by `tenure::connect("redis://127.0.0.1:6379?namespace=billing")`.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_redis::{RedisConfig, RedisStore};
//! use tenure_lease_core::{AdmitRequest, LeaseStore};
//!
//! let store = RedisStore::connect(RedisConfig::new("redis://127.0.0.1:6379", "billing")).await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("invoice-run-7", "worker-a").scope("account:7").ttl(Duration::from_secs(30)))
//!     .await?;
//! # let _ = admission; Ok(()) }
//! ```
//!
//! ## Keys
//!
//! A store owns the keys of one namespace, all starting with
//! `tenure:{<namespace>}:`, so they share one hash slot. Per namespace: a
//! hash per record, the active holder of each scope (of each slot of a
//! counted scope, below), a sorted set of active
//! records by expiry (`list_expired`), a sorted set per scope of its records
//! by creation (`list_by_scope`), a sorted set of active ids
//! (`list_active`), one of terminal records by last update (`purge`), and
//! one counter, the last fence handed out. Ids and scopes are kept verbatim
//! in separate key families, so none can collide with another or leave the
//! namespace. The full layout is described in `src/lua/common.lua`.
//!
//! Counted scopes ([`AdmitRequest::counted_scope`](tenure_lease_core::AdmitRequest::counted_scope),
//! contract §17) hold each slot under a key of its own:
//! `holder:<scope>` for slot 0 (the key an exclusive holder of the scope
//! holds), `holder:<scope>\u{1f}<slot>` for the others
//! ([`slot_key`](tenure_lease_core::backend::rules::slot_key)); a record
//! names its slots in a `slots` field of its hash, a JSON object of scope
//! to slot, absent without a counted scope (as in every record written
//! before this version, which reads back without slots). `admit.lua`
//! reads the slots' holders, chooses the slot
//! ([`choose_slot`](tenure_lease_core::backend::rules::choose_slot)) and
//! takes it in one script, so racing admissions never hold more slots than
//! their capacity; an admission without a counted scope reads and writes
//! what it did before. The per-scope sorted set still names the scope, so
//! `list_by_scope` lists the holders of every slot. A `slots` field that
//! cannot be decoded is [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt),
//! found by the scripts before any write. No older script reads the field
//! or the keys of slots above 0, so admit into counted scopes once every
//! process of the namespace runs this version: an older one reads a
//! counted record without its slots, and ending one leaves the key of its
//! slot behind, naming the ended record (a slot this version then takes
//! for free).
//!
//! Jobs live in their own key families of the same namespace (so a job may
//! share an id with a lease) and draw fences from the same counter: a hash
//! per job, per queue a ready sorted set whose members sort in claim order
//! and a delayed one by `run_at` (due jobs move into ready when a claim
//! runs, so no background process is needed), a sorted set of claimed jobs
//! by lease expiry (`reap`), per queue one of dead letters by last update,
//! one of finished (completed and dead-lettered) jobs by finish time
//! (`purge_jobs`), and per queue and uniqueness key one of the jobs
//! enqueued with that key by creation, which `enqueue_unique` walks, oldest
//! first, for the key's holder, until `purge_jobs` deletes them; see
//! `src/lua/queue_common.lua`. Empty sorted sets vanish, so after `purge`
//! and `purge_jobs` no key is left for a finished record, job, scope,
//! queue or uniqueness key (`purge_jobs` keeps a finished job while it
//! holds a `ForPeriod` key). How far one `claim` looks is bounded
//! ([`CLAIM_SCAN_PER_JOB`], [`PROMOTE_BATCH`]) so it never blocks the server
//! for long. [`RedisStore::delete_namespace`] removes a namespace, jobs
//! included.
//!
//! Rate limits ([`RateLimit`], contract §16) keep one string per log,
//! `rate:<permits>:<period in ms>:<key>`
//! ([`log_name`](rate_rules::log_name)), holding
//! the instants of its last uses as a JSON array of microseconds, and one
//! sorted set of the logs by when their uses all stop counting. `admit` and
//! `claim` read, judge and write a limit's log in their own script, by the
//! server's `TIME`, so concurrent callers never use more than its permits;
//! a log the script cannot decode fails the call with
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) before
//! any write. A call without a limit touches neither key. Logs are deleted
//! by [`purge`](tenure_lease_core::LeaseStore::purge) once they ended,
//! never by an expiry (so `volatile-*` policies still evict nothing of
//! tenure's, below). These keys are new in this version and no older
//! script reads or writes them, so processes of older versions run beside
//! it unchanged; an older version's `purge` leaves ended logs to a newer
//! one's (or to [`RedisStore::delete_namespace`]).
//!
//! Fence gates ([`FenceStore`](tenure_lease_core::FenceStore)) are a key
//! family of the same namespace: per resource a string holding the highest
//! fence accepted, and a sorted set of resources by the time of their last
//! accepted check, for `purge_fences` (`src/lua/gate_common.lua`). That
//! index holds no order of names, so `list_fences` reads every gate's name
//! and orders them in the client: each page costs O(number of gates), not
//! O(page) (`src/gate.rs`).
//! [`RedisStore::write_fenced`] checks a gate and sets a key of the
//! caller's in one script, so a stale owner's value is never written.
//!
//! ## Deployment requirements
//!
//! **No eviction of tenure's keys.** Under memory pressure a server with
//! `maxmemory-policy allkeys-lru`, `allkeys-lfu` or `allkeys-random` evicts
//! any key: a lease record, a scope's holder or the fence counter, and two
//! owners then hold one scope. [`RedisStore::connect`] reads the policy
//! (`CONFIG GET`, or `INFO memory` where `CONFIG` is renamed or forbidden, as
//! on managed services) and refuses such a server with
//! [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible); set `noeviction`. A `volatile-*` policy is
//! accepted: it evicts only keys with an expiry, and no script of this crate
//! sets one (none calls `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `SETEX` or `SET` with
//! `EX`/`PX`; leases expire by the times stored in them). A server out of
//! memory then refuses writes (`OOM`, [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)): a
//! script is refused at its first write, never half-way through.
//!
//! **Fences survive a wipe.** Fences are a hybrid logical clock: each is the
//! greater of the last fence + 1 and the server's time in microseconds (see
//! `src/lua/common.lua`). When the counter is lost, by a restart without
//! persistence, a crash with `appendfsync everysec` or a failover to a
//! replica that had not received the latest writes, the sequence goes on from
//! the clock, so a fence drawn afterwards still exceeds every fence drawn
//! before, and a stale owner cannot pass a
//! [`FenceGate`](tenure_lease_core::FenceGate), provided that
//! * the counter never ran ahead of the clock by more than the time the loss
//!   went back: it runs ahead only while the namespace draws more than one
//!   fence per microsecond (a million per second, far above what one Redis
//!   runs), and falls back to the clock when the rate drops;
//! * the server's clock does not go back across the loss (a restarted or
//!   promoted server whose clock is behind the old one's by more than the
//!   loss went back could hand out a fence again): run NTP with slewing.
//!
//! Fences are then about 1.7 × 10^15 (microseconds since 1970) rather than
//! small integers; the sequence has gaps, as it may. Lua numbers are doubles,
//! exact only up to 2^53: a counter or clock beyond 2^53 − 2^32 (the year
//! 2255) is refused with [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt), never rounded.
//!
//! **Records are only as durable as the server.** A restart without
//! persistence loses every record and job, a crash with `appendfsync
//! everysec` up to a second of writes (renewals, takeovers, transitions),
//! and so may a failover. `connect` reads `appendonly`, `appendfsync` and
//! `save` into [`RedisStore::durability`], and logs a warning when the server
//! keeps nothing on disk. For records that survive a crash run a single
//! Redis with `appendonly yes` and `appendfsync always` (or a failover that
//! never promotes a lagging replica), or use a persistent backend such as
//! PostgreSQL. What `connect` cannot check: settings changed after it ran
//! (`CONFIG SET`), the server a reconnection or failover reaches, and the
//! server's clock.
//!
//! **Gates roll back in a failover; a store can refuse what came before.**
//! A promoted replica holds the fence gates as it last received them, so a
//! successor's gate write the old primary never shipped is lost, and a
//! deposed owner would pass. With
//! [`RedisConfig::refuse_fences_from_before_failover`], the store's gates
//! refuse every fence drawn before the server's replication id last
//! changed (a promotion, a restart): every fence-drawing script (and, with
//! the option, every gate check) reads the id (`INFO replication`, so the
//! user must be allowed `INFO`) and, under a new one, records a floor, the
//! first fence drawn under it. No deposed owner is accepted; owners from
//! before the failover take their leases again.
//!
//! **Sentinel.** With a `redis+sentinel://host:port,host:port/SERVICE`
//! URL the store asks the Sentinels for the primary of `SERVICE` (a server
//! they name is checked with `ROLE`, so a replica is never taken for it),
//! and asks again, in the background and at most ten times a second,
//! whenever a call fails in a way a failover explains (a dropped or
//! refused connection, a time-out, `READONLY`) or is cancelled: the calls
//! during a failover fail as retryable, and those after it reach the new
//! primary. Replication stays asynchronous: what the promoted replica had
//! not received is lost (fences stay monotonic, and
//! [`RedisConfig::refuse_fences_from_before_failover`] keeps deposed owners
//! out of the store's gates; see RELIABILITY.md for the measured losses).
//!
//! **Redis Cluster.** With a `redis+cluster://host:port,host:port` URL
//! (`rediss+cluster://` for TLS) the store learns the cluster from the
//! nodes named, and sends every call of its namespace, keyless ones too
//! (`SCAN`, `INFO`, `WAIT`, `FUNCTION LOAD`), to the primary serving the
//! namespace's hash slot: every key of a namespace carries it as its hash
//! tag, so each script stays atomic on one node, and each namespace is a
//! single-server store on the node that holds it. Load spreads across the
//! cluster by namespace: one namespace is served by one primary however
//! large the cluster, so split independent workloads into namespaces
//! (one per tenant, per queue family) to use every primary. The cluster
//! client learns a moved slot (`MOVED`) and a promoted replica by itself,
//! but never sends a call twice: the call that meets the move answers
//! [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)
//! (retryable; it did not run) and the next one reaches the slot's new
//! primary; the function library is loaded again on a node that lacks it.
//! What survives a failover is as behind Sentinel: replication is
//! asynchronous. A cluster node named with a plain `redis://` URL, a
//! single server named with `redis+cluster://` and refused credentials are
//! refused at connect
//! ([`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config)), naming
//! the fix.
//!
//! **Writes confirmed by replicas.** With
//! [`RedisConfig::wait_for_replicas`] (or `?wait_replicas=N` in the URL)
//! every lease, job and gate operation that may write is sent with
//! `WAIT N` in one pipeline, so on one connection and in one round trip,
//! and acknowledged only once N replicas confirmed it; otherwise it
//! answers [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable),
//! outcome unknown. A failover to a replica that confirmed then keeps
//! every acknowledged write. The server reads nothing more from a client
//! blocked in `WAIT`, and the store's calls share one connection: while a
//! write waits, every other call of the store (reads too) waits behind it,
//! so a lagging replica slows them all, up to the wait's timeout per
//! write.
//!
//! **Replicas are refused.** `connect` reads `ROLE` (or `INFO replication`)
//! and refuses a read-only replica with
//! [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config), naming its
//! primary; a server demoted after connect answers each write `READONLY`,
//! a retryable error saying so. [`Durability::replicas`] counts the
//! replicas following the primary.
//!
//! **TLS and ACL users.** `rediss://user:password@host:port` encrypts the
//! connection and logs in as an ACL user; the server's certificate and name
//! are verified against the system's trust store, or the authorities of
//! [`RedisConfig::tls`] or of the URL's `tls_ca=` file (`tls_cert=` and
//! `tls_key=` for a client certificate). A refused handshake is
//! [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config).
//!
//! ## Release notices
//!
//! Every script that frees a scope (a transition or takeover to an
//! inactive status, an interrupting admission) publishes it on channel
//! `<prefix>released`. [`LeaseStore::releases`](tenure_lease_core::LeaseStore::releases),
//! which a [`Waiter`](tenure_lease_core::wait::Waiter) subscribes through,
//! opens one subscription per store to the primary at its first call; a
//! subscription lost, or silent for ten seconds and then deaf to a `PING`,
//! is opened again (to the primary as last known: the store learns of a
//! Sentinel failover from its own calls) and announced as missed notices.
//! An ACL user needs the channel's permission (`&<prefix>released`; Redis
//! 7 gives new users none) to send and hear notices: without it releases
//! still apply, unannounced, and waiters poll. A cluster store subscribes
//! to nothing: it announces the releases made through it in this process
//! (other processes' are polled every 50 ms), though its scripts still
//! publish, and a message published in a cluster reaches every node.
//!
//! ## Errors
//!
//! A dropped connection or a server that is loading, read-only or out of
//! memory answers [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable), and no answer within
//! [`RedisConfig::operation_timeout`] answers [`ErrorKind::Timeout`](tenure_lease_core::ErrorKind::Timeout): both
//! retryable, the outcome unknown; the connection reconnects by itself
//! meanwhile. Refused credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`) answer
//! [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config), not retryable, at once at connect.
//!
//! A stored value this crate cannot represent (a timestamp out of range or
//! not an integer, an unknown status, malformed scopes, metadata or
//! capabilities, text that is not UTF-8, a missing field, a key of the wrong
//! type) never panics: point reads and writes on it answer
//! [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt) and change nothing; `list_expired` skips it and
//! reports it in [`ExpiredScan::skipped`](tenure_lease_core::ExpiredScan::skipped), `claim` and `reap` skip it, leave
//! it as it is and log it; `list_by_scope`, `list_active`,
//! `list_dead_letters` and `list_fences`, which have nowhere to report a
//! skip, answer `Corrupt`. The scripts check every field they read before
//! their first write, so a damaged value never leaves an operation
//! half-applied.
//!
//! Requires Redis 5 or newer (scripts replicate their effects); tested on
//! Redis 7. On Redis 7 and newer the operations run as functions, which
//! saves each call the shared prelude's run (see benchmarks/archive/, "Redis:
//! where the microseconds go"): the user needs `FUNCTION LOAD` (once per
//! server and version of this crate; it leaves one library
//! `tenure_<version>` behind, `FUNCTION DELETE` removes an old one),
//! `FCALL` and `FCALL_RO` (all in `@scripting`). A server older than 7, or
//! an ACL that denies them, gets the same operations as `EVALSHA` scripts,
//! a few microseconds slower per call.

mod cluster;
mod config;
mod connection;
mod decode;
mod error;
mod gate;
mod hosts;
mod keys;
mod lease;
mod primary;
mod queue;
mod releases;
mod scripts;
mod sentinel;
mod server;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError, RedisResult, Value};
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::redact::redact_url;
use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Claim, Error, LeaseRecord, Renewal, Result};

pub use config::{RedisConfig, WaitForReplicas, URL_PARAMETERS, URL_SCHEMES};
pub use queue::{CLAIM_SCAN_PER_JOB, PROMOTE_BATCH};
pub use sentinel::DEFAULT_SENTINEL_PORT;
pub use server::{AppendFsync, Durability, SettingsSource};

use crate::cluster::ClusterUrl;
use crate::config::config_error;
use crate::connection::Connection;
use crate::keys::Keys;
use crate::primary::{manager_config, Primary};
use crate::scripts::{Invocation, SCRIPTS};
use crate::sentinel::SentinelUrl;

/// Most claims renewed by one script call; `renew_many` splits larger
/// batches so one call never blocks the server for long.
pub const RENEW_BATCH: usize = 1000;

/// Most records (jobs, gates) deleted by one script call of `purge`
/// (`purge_jobs`, `purge_fences`).
const PURGE_BATCH: usize = 1000;

/// Most keys asked for by one `SCAN` step (of [`RedisStore::delete_namespace`]
/// and of `count_jobs`).
pub(crate) const SCAN_COUNT: usize = 1000;

/// The Redis store. Cloning shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    primary: Arc<Primary>,
    keys: Keys,
    config: Arc<RedisConfig>,
    /// How many replicas confirm each write, read from the config once.
    wait_for_replicas: Option<WaitForReplicas>,
    durability: Arc<Durability>,
    /// Set when the connection may have been replaced, so the next call
    /// names the new one first.
    needs_name: Arc<AtomicBool>,
    /// Operations run as functions of the library (`FCALL`) rather than as
    /// scripts (`EVALSHA`): set at connect when the server took the
    /// library, cleared for good when it later refuses functions.
    functions: Arc<AtomicBool>,
    releases: tenure_lease_core::release::ReleaseListener,
    /// A cluster store's notices, of the releases made through it in this
    /// process (it subscribes to none); `None` on one server, which
    /// announces every client's.
    in_process: Option<ReleaseBoard>,
}

impl tenure_lease_core::backend::stores::Backend for RedisStore {
    const NAME: &'static str = "Redis";
    const SYSTEM: &'static str = "redis";

    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        self.in_process.as_ref()
    }
}

tenure_lease_core::serve_backend!(RedisStore);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the server `config` names (a [`RedisConfig`], or a URL
    /// keeping its keys under [`RedisConfig::DEFAULT_NAMESPACE`]), checks that it cannot evict
    /// tenure's keys, reads its persistence settings
    /// ([`durability`](Self::durability)), names the connection and, on
    /// Redis 7 and newer, loads the function library the operations run
    /// from (a server or user that refuses it gets the same scripts by
    /// `EVALSHA`).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config), at once and not retryable: a bad URL,
    ///   namespace or client name, or credentials the server refuses
    ///   (`WRONGPASS`, `NOAUTH`: a password is required and none was given,
    ///   `NOPERM`);
    /// * [`ErrorKind::Incompatible`](tenure_lease_core::ErrorKind::Incompatible): the server's `maxmemory-policy` may
    ///   evict any key (`allkeys-lru`, `allkeys-lfu`, `allkeys-random`, or a
    ///   policy this version does not know; set `noeviction`), or neither
    ///   `CONFIG GET` nor `INFO` may be run to read it;
    /// * [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable): the server could not be reached within
    ///   [`RedisConfig::connect_timeout`] (the message names the last cause),
    ///   or every attempt for a second was refused (nothing listens at the
    ///   address: a wrong port, or a server that is down, is not waited out).
    pub async fn connect(config: impl Into<RedisConfig>) -> Result<Self> {
        // Boxed: inline, the whole connect's future nests deep enough in a
        // caller's own future (the benchmark's, an application's) to
        // overflow the compiler's query depth there.
        Box::pin(Self::open_store(config.into(), true)).await
    }

    /// Connects as [`connect`](Self::connect) does, but opens a server
    /// whose `maxmemory-policy` may evict tenure's keys instead of refusing
    /// it, and answers that refusal beside the store: for a tool that only
    /// reads, such as the operator CLI's listings, to show what such a
    /// server holds while the policy is being fixed.
    ///
    /// Never write through a store opened this way while the refusal
    /// stands: an evicted record, scope holder or fence counter breaks
    /// exclusion and fence order (contract §7). Every other refusal of
    /// [`connect`](Self::connect) (a replica, unreadable settings, bad
    /// credentials) still fails it.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), but for the eviction policy.
    pub async fn connect_for_reading(
        config: impl Into<RedisConfig>,
    ) -> Result<(Self, Option<tenure_lease_core::Error>)> {
        let store = Box::pin(Self::open_store(config.into(), false)).await?;
        let refusal = server::check_eviction_policy(&store.durability.eviction_policy).err();
        Ok((store, refusal))
    }

    /// [`connect`](Self::connect), refusing an evicting server or not.
    async fn open_store(config: RedisConfig, refuse_evicting: bool) -> Result<Self> {
        config.validate()?;
        let deadline = deadline_after(config.connect_timeout);
        let keys = Keys::new(config.namespace());
        let Opened {
            connection,
            address,
            client,
            sentinels,
            durability,
        } = open(&config, &keys, deadline, refuse_evicting).await?;
        if durability.keeps_nothing_on_disk() {
            tracing::warn!(
                url = %config.redacted_url(),
                %durability,
                "the Redis server keeps nothing on disk: a restart loses every lease record \
                 and job (fences stay monotonic); enable appendonly with appendfsync always \
                 for records that survive a restart"
            );
        } else if !durability.survives_a_crash() {
            tracing::info!(
                url = %config.redacted_url(),
                %durability,
                "the Redis server may lose acknowledged writes in a crash"
            );
        }
        let wait_for_replicas = config.waits_for_replicas()?;
        if let (Some(wait), Some(replicas)) = (wait_for_replicas, durability.replicas) {
            if replicas < wait.replicas as usize {
                tracing::warn!(
                    url = %config.redacted_url(),
                    replicas,
                    waits_for = wait.replicas,
                    "every write waits for more replicas than follow the primary: writes \
                     answer Unavailable until enough replicas connect"
                );
            }
        }
        let store = RedisStore {
            in_process: client.is_none().then(ReleaseBoard::in_process),
            primary: Arc::new(Primary::new(connection, address, client, sentinels)),
            keys,
            wait_for_replicas,
            config: Arc::new(config),
            durability: Arc::new(durability),
            needs_name: Arc::new(AtomicBool::new(false)),
            functions: Arc::new(AtomicBool::new(false)),
            releases: tenure_lease_core::release::ReleaseListener::new(),
        };
        store
            .name_connection(&mut store.primary.connection())
            .await?;
        let loaded =
            tokio::time::timeout_at(deadline, load_library(&mut store.primary.connection()))
                .await
                .map_err(|_| connect_timed_out(&store.config, "loading its function library"))?;
        match loaded {
            Ok(()) => store.functions.store(true, Ordering::Release),
            Err(error) if !answered(&error) => return Err(error::from_redis(error)),
            // Loaded again by the first call that finds it missing.
            Err(error) if is_transient(&error) => store.functions.store(true, Ordering::Release),
            Err(error) => tracing::debug!(
                url = %store.config.redacted_url(),
                %error,
                "the Redis server does not take tenure's function library; running scripts \
                 with EVALSHA instead"
            ),
        }
        Ok(store)
    }

    /// The server's eviction and persistence settings, as read at connect.
    /// The server may be reconfigured, restarted or failed over later: this
    /// is what it said then.
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    /// How many replicas confirm each write before it is acknowledged
    /// ([`RedisConfig::wait_for_replicas`]), if any must.
    pub fn waits_for_replicas(&self) -> Option<WaitForReplicas> {
        self.wait_for_replicas
    }

    /// The settings this store was connected with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Deletes every key of this store's namespace (`SCAN` + `UNLINK`) and
    /// answers how many. Not atomic: operations running meanwhile may leave
    /// keys behind.
    pub async fn delete_namespace(&self) -> Result<u64> {
        let pattern = self.keys.pattern();
        let mut cursor = 0_u64;
        let mut deleted = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<Vec<u8>>) = self.command(&scan).await?;
            if !keys.is_empty() {
                let unlinked: u64 = self.command(redis::cmd("UNLINK").arg(&keys)).await?;
                deleted = deleted.saturating_add(unlinked);
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    async fn name_connection(&self, connection: &mut Connection) -> Result<()> {
        let mut rename = redis::cmd("CLIENT");
        rename.arg("SETNAME").arg(self.config.connection_name());
        let named: RedisResult<()> = rename.query_async(connection).await;
        named.map_err(error::from_redis)
    }

    /// The shared connection, named again first when it may have been
    /// replaced since the last call.
    async fn connection(&self) -> Connection {
        let mut connection = self.primary.connection();
        if self.needs_name.swap(false, Ordering::AcqRel)
            && self.name_connection(&mut connection).await.is_err()
        {
            self.needs_name.store(true, Ordering::Release);
        }
        connection
    }

    /// Awaits one call to the server within the operation timeout and maps
    /// its errors. Behind Sentinel, a call that fails in a way a failover
    /// explains (retryable), or is cancelled, has the store ask where the
    /// primary is, so later calls go there.
    async fn bounded<T>(&self, call: impl Future<Output = RedisResult<T>>) -> Result<T> {
        let watch = self.primary.watch(&self.config, &self.needs_name);
        let answered = async {
            call.await.map_err(|error| {
                if error.is_unrecoverable_error() {
                    self.needs_name.store(true, Ordering::Release);
                }
                error::from_redis(error)
            })
        };
        let outcome = tenure_lease_core::layer::bounded(
            self.config.operation_timeout,
            "a Redis call",
            answered,
        )
        .await;
        if outcome
            .as_ref()
            .map_or_else(|error| !error.is_retryable(), |_| true)
        {
            watch.answered();
        }
        outcome
    }

    async fn command<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T> {
        let mut connection = self.connection().await;
        self.bounded(command.query_async(&mut connection)).await
    }

    /// Runs one operation: as a function of the library when the server
    /// took it (loading it again, once, when the server lost it), else as a
    /// script by `EVALSHA` (loaded again on `NOSCRIPT`). A write is
    /// followed by `WAIT` when the config asks for replicas to confirm it.
    async fn script(&self, invocation: &Invocation<'_>) -> Result<Value> {
        let mut connection = self.connection().await;
        let wait = self.wait_for_replicas.filter(|_| invocation.writes());
        let (answer, confirmed) = self
            .bounded(async {
                if self.functions.load(Ordering::Acquire) {
                    let called = confirmed_call(invocation.fcall(), wait, &mut connection).await;
                    match called {
                        Err(error) if is_missing_function(&error) => {
                            match load_library(&mut connection).await {
                                Ok(()) => {
                                    return confirmed_call(
                                        invocation.fcall(),
                                        wait,
                                        &mut connection,
                                    )
                                    .await
                                }
                                Err(error) if !answered(&error) => return Err(error),
                                // This call as a script; the next loads again.
                                Err(error) if is_transient(&error) => {}
                                Err(error) => self.stop_functions(&error),
                            }
                        }
                        Err(error) if is_unknown_command(&error) => self.stop_functions(&error),
                        answered => return answered,
                    }
                }
                match confirmed_call(invocation.evalsha(), wait, &mut connection).await {
                    Err(error) if error.code() == Some("NOSCRIPT") => {
                        invocation.load_script(&mut connection).await?;
                        confirmed_call(invocation.evalsha(), wait, &mut connection).await
                    }
                    answered => answered,
                }
            })
            .await?;
        match (wait, confirmed) {
            (Some(wait), Some(confirmed)) if confirmed < i64::from(wait.replicas) => {
                Err(Error::unavailable(format!(
                    "the write was confirmed by {confirmed} of the {} replicas it waits for \
                     within {:?}: it is on the primary of {}, but a failover may lose it, so \
                     its outcome is unknown (retry it; check that the replicas are connected \
                     and keeping up, or wait for fewer)",
                    wait.replicas,
                    wait.timeout,
                    self.config.redacted_url()
                )))
            }
            _ => Ok(answer),
        }
    }

    /// Runs every later operation as a script: the server (perhaps another
    /// one, after a failover) refuses functions.
    fn stop_functions(&self, error: &RedisError) {
        if self.functions.swap(false, Ordering::AcqRel) {
            tracing::info!(
                url = %self.config.redacted_url(),
                %error,
                "the Redis server no longer runs tenure's functions; running scripts with \
                 EVALSHA from now on"
            );
        }
    }

    /// One script call renewing `claims` (at most [`RENEW_BATCH`]),
    /// recording `progress` on each renewed one when given.
    async fn renew_batch(
        &self,
        claims: &[Claim],
        ttl: Duration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Vec<Renewal>> {
        let mut invocation = SCRIPTS.renew.prepare_invoke();
        invocation
            .key(self.keys.expiry())
            .arg(micros(ttl))
            .arg(progress.map_or_else(String::new, serde_json::Value::to_string));
        for claim in claims {
            invocation
                .key(self.keys.record(&claim.id))
                .arg(&claim.id)
                .arg(&claim.owner)
                .arg(claim.fence);
        }
        decode::renewals(self.script(&invocation).await?, claims.len())
    }

    /// `renew` of one claim, recording `progress` when given.
    async fn renew_one(
        &self,
        claim: &Claim,
        ttl: Duration,
        progress: Option<&serde_json::Value>,
    ) -> Result<Renewal> {
        let mut outcomes = self
            .renew_batch(std::slice::from_ref(claim), ttl, progress)
            .await?;
        outcomes
            .pop()
            .ok_or_else(|| Error::corrupt("renew.lua answered no outcome"))
    }

    /// Adds the rate limit of an admission or a claim, if it has one, to
    /// the call of `admit.lua` or `claim.lua`: its log and the index of
    /// logs as keys (none without a limit), and its log name, permits and
    /// period in microseconds as three arguments (empty without a limit).
    fn add_rate_limit(&self, invocation: &mut Invocation<'_>, limit: Option<&RateLimit>) {
        match limit {
            Some(limit) => {
                let name = rate_rules::log_name(limit);
                invocation
                    .key(self.keys.rate(&name))
                    .key(self.keys.rates())
                    .arg(name)
                    .arg(limit.permits)
                    .arg(micros(limit.period));
            }
            None => {
                invocation.arg("").arg("").arg("");
            }
        }
    }

    async fn list_index(&self, index: String) -> Result<Vec<LeaseRecord>> {
        let mut invocation = SCRIPTS.list_ids.prepare_invoke();
        invocation.key(index).arg(self.keys.prefix());
        decode::records(self.script(&invocation).await?)
    }
}

/// Sends `command` and, when `wait` says so, `WAIT` in the same pipeline
/// (so on the same connection, which is what `WAIT` counts the writes
/// of): the answer, and how many replicas confirmed it.
async fn confirmed_call(
    command: redis::Cmd,
    wait: Option<WaitForReplicas>,
    connection: &mut Connection,
) -> RedisResult<(Value, Option<i64>)> {
    let Some(wait) = wait else {
        return command
            .query_async(connection)
            .await
            .map(|answer| (answer, None));
    };
    let mut pipeline = redis::pipe();
    // Each reply on its own: a pipeline's error would lose the server's
    // code and text, which classify it (`TENURE_CORRUPT`, a lost function).
    pipeline
        .ignore_errors()
        .add_command(command)
        .cmd("WAIT")
        .arg(wait.replicas)
        .arg(u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX));
    let mut replies: Vec<Value> = pipeline.query_async(connection).await?;
    let confirmed = replies.pop();
    let answer = match replies.pop() {
        Some(Value::ServerError(error)) => return Err(error.into()),
        Some(answer) => answer,
        None => Value::Nil,
    };
    let confirmed = match confirmed {
        Some(Value::ServerError(error)) => return Err(error.into()),
        Some(confirmed) => i64::from_redis_value(confirmed)?,
        None => 0,
    };
    Ok((answer, Some(confirmed)))
}

/// Loads the function library (a library of this version already loaded,
/// by this process or another, is fine: its name is its version).
async fn load_library(connection: &mut Connection) -> RedisResult<()> {
    let loaded: RedisResult<String> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&SCRIPTS.library)
        .query_async(connection)
        .await;
    match loaded {
        Err(error) if !error.detail().is_some_and(|d| d.contains("already exists")) => Err(error),
        _ => Ok(()),
    }
}

/// The server answered (with an error): the call reached it.
fn answered(error: &RedisError) -> bool {
    !(error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal())
        && error.code().is_some()
}

/// A refusal that passes (loading, busy, out of memory, read-only
/// mid-failover, a cluster slot moving): unlike an unknown command or an ACL denial, no sign that
/// the server will never run functions.
fn is_transient(error: &RedisError) -> bool {
    matches!(
        error.code(),
        Some(
            "LOADING"
                | "BUSY"
                | "TRYAGAIN"
                | "OOM"
                | "READONLY"
                | "MASTERDOWN"
                | "CLUSTERDOWN"
                | "MOVED"
                | "ASK"
        )
    )
}

/// `FCALL` of a function the server does not have (the library was lost).
fn is_missing_function(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|d| d.contains("Function not found"))
}

/// `FCALL` on a server without functions (older than 7).
fn is_unknown_command(error: &RedisError) -> bool {
    error
        .detail()
        .is_some_and(|d| d.to_ascii_lowercase().contains("unknown command"))
}

/// What [`open`] connected: the store's connection, the address it leads
/// to, the Sentinels to ask after a failover, and what the server said of
/// itself.
struct Opened {
    connection: Connection,
    address: String,
    /// The server's client; none in a cluster.
    client: Option<redis::Client>,
    sentinels: Option<SentinelClient>,
    durability: Durability,
}

/// Connects to what `config` names, tried until `deadline`: the server the
/// URL names, the primary its Sentinels name, or, in a cluster, the
/// primary serving the slot of `keys`; and reads the server's settings.
async fn open(
    config: &RedisConfig,
    keys: &Keys,
    deadline: tokio::time::Instant,
    refuse_evicting: bool,
) -> Result<Opened> {
    let (url, certificates) = config.client_url()?;
    if let Some(cluster) = ClusterUrl::parse(&url)? {
        let client = cluster.client(config, certificates.as_ref())?;
        let connection = until_connected(config, deadline, cluster::connect_error, || {
            client.get_async_connection()
        })
        .await?;
        let mut connection = Connection::into_cluster(connection, keys.prefix());
        let durability = inspect_within(config, deadline, &mut connection, refuse_evicting).await?;
        return Ok(Opened {
            connection,
            address: redact_url(&url),
            client: None,
            sentinels: None,
            durability,
        });
    }
    let (client, sentinels) = primary_client(config, url, certificates, deadline).await?;
    let address = client.get_connection_info().addr().to_string();
    let connection_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.operation_timeout));
    let mut first = until_connected(config, deadline, error::from_redis, || {
        client.get_multiplexed_async_connection_with_config(&connection_config)
    })
    .await?;
    let durability = inspect_within(config, deadline, &mut first, refuse_evicting).await?;
    refuse_cluster_node(config, &mut first).await?;
    drop(first);
    let manager = tokio::time::timeout_at(
        deadline,
        ConnectionManager::new_with_config(client.clone(), manager_config(config)),
    )
    .await
    .map_err(|_| connect_timed_out(config, "connecting"))?
    .map_err(error::from_redis)?;
    Ok(Opened {
        connection: Connection::Server(manager),
        address,
        client: Some(client),
        sentinels,
        durability,
    })
}

/// Refuses a node of a Redis Cluster named as one server: it would answer
/// `MOVED` for every namespace whose slot another node serves. Says
/// nothing when the server does not let the user run `INFO cluster`.
async fn refuse_cluster_node(
    config: &RedisConfig,
    connection: &mut (impl ConnectionLike + Send),
) -> Result<()> {
    let info: RedisResult<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(connection)
        .await;
    match info {
        Ok(info) if info.lines().any(|line| line.trim() == "cluster_enabled:1") => {
            Err(config_error(format!(
                "{} is a node of a Redis Cluster: name the cluster with \
                 redis+cluster://host:port[,host:port...] (rediss+cluster:// for TLS), so each \
                 namespace reaches the node that serves its hash slot",
                config.redacted_url()
            )))
        }
        _ => Ok(()),
    }
}

/// The server's settings, read through `connection` before `deadline`.
async fn inspect_within(
    config: &RedisConfig,
    deadline: tokio::time::Instant,
    connection: &mut (impl ConnectionLike + Send),
    refuse_evicting: bool,
) -> Result<Durability> {
    tokio::time::timeout_at(deadline, server::inspect(connection, refuse_evicting))
        .await
        .map_err(|_| connect_timed_out(config, "reading its settings"))?
}

/// The client for `config`'s primary: the server `url` names, or the one
/// its Sentinels name (asked until `deadline`), with the client that asks
/// them again after a failover.
async fn primary_client(
    config: &RedisConfig,
    url: String,
    certificates: Option<TlsCertificates>,
    deadline: tokio::time::Instant,
) -> Result<(redis::Client, Option<SentinelClient>)> {
    let Some(sentinels) = SentinelUrl::parse(&url)? else {
        return Ok((open_client(config, url, certificates.as_ref())?, None));
    };
    let mut asking = sentinels.client(certificates.as_ref())?;
    let mut last_error = None;
    // The Sentinels name no primary of an unknown service, and none of a
    // known one mid-failover either: asked again until the deadline.
    let mut named_none = false;
    loop {
        match tokio::time::timeout_at(deadline, asking.async_get_client()).await {
            Ok(Ok(client)) => return Ok((client, Some(asking))),
            Ok(Err(error)) => {
                named_none = error.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel;
                let error = error::from_redis(error);
                if !named_none && !error.is_retryable() {
                    return Err(error);
                }
                last_error = Some(error);
            }
            Err(_) => break,
        }
        if tokio::time::Instant::now() + CONNECT_RETRY_DELAY >= deadline {
            break;
        }
        tokio::time::sleep(CONNECT_RETRY_DELAY).await;
    }
    if let (true, Some(error)) = (named_none, last_error.as_ref()) {
        return Err(config_error(format!(
            "the Sentinels of {} named no primary of service {:?} within {:?}: {error}; check \
             the service name and that they monitor it (SENTINEL MASTERS)",
            config.redacted_url(),
            sentinels.service(),
            config.connect_timeout
        )));
    }
    let doing = match last_error {
        Some(cause) => format!("asking the Sentinels for the primary; last attempt: {cause}"),
        None => "asking the Sentinels for the primary".to_owned(),
    };
    Err(connect_timed_out(config, &doing))
}

/// The client for the server at `url`, encrypted with `certificates` when
/// given.
fn open_client(
    config: &RedisConfig,
    url: String,
    certificates: Option<&TlsCertificates>,
) -> Result<redis::Client> {
    let client = match certificates {
        None => redis::Client::open(url),
        Some(certificates) => redis::Client::build_with_tls(url, redis_certificates(certificates)),
    };
    client.map_err(|error| {
        config_error(format!(
            "invalid Redis URL or certificates for {}: {}",
            config.redacted_url(),
            error
        ))
        .with_source(error)
    })
}

/// tenure's certificates as the `redis` crate takes them.
fn redis_certificates(certificates: &TlsCertificates) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: certificates
            .identity()
            .map(|(certificate, key)| redis::ClientTlsConfig {
                client_cert: certificate.to_vec(),
                client_key: key.to_vec(),
            }),
        root_cert: certificates.roots().map(<[u8]>::to_vec),
    }
}

/// The instant `timeout` from now, or a century from now when that is
/// beyond what an instant holds (a timeout of `Duration::MAX` waits "for
/// ever", never panics).
fn deadline_after(timeout: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Pause between two attempts at a first connection.
const CONNECT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// How long a first connection keeps trying while every attempt is refused
/// (nothing listens at the address): long enough for a server that is just
/// starting, short enough that a wrong port answers at once.
const REFUSED_FOR_AT_MOST: Duration = Duration::from_secs(1);

/// A first connection, `attempt`ed until `deadline`, its failures
/// classified by `classify`: refused credentials answer at once (retrying
/// cannot fix them), an address where nothing listens after
/// [`REFUSED_FOR_AT_MOST`], a server that cannot be reached otherwise is
/// tried again until the deadline.
async fn until_connected<C, Attempt>(
    config: &RedisConfig,
    deadline: tokio::time::Instant,
    classify: fn(RedisError) -> Error,
    mut attempt: impl FnMut() -> Attempt,
) -> Result<C>
where
    Attempt: Future<Output = RedisResult<C>>,
{
    let refused_until = tokio::time::Instant::now() + REFUSED_FOR_AT_MOST;
    let mut last_error = None;
    loop {
        let (error, refused) = match tokio::time::timeout_at(deadline, attempt()).await {
            Ok(Ok(connection)) => return Ok(connection),
            Ok(Err(error)) => {
                let refused = error.is_connection_refusal();
                (classify(error), refused)
            }
            Err(_) => break,
        };
        if !error.is_retryable() {
            return Err(error);
        }
        if refused && tokio::time::Instant::now() >= refused_until {
            return Err(Error::unavailable(format!(
                "nothing accepts connections at {} (refused for {REFUSED_FOR_AT_MOST:?}): check \
                 the URL's host and port, and that the server is running",
                config.redacted_url()
            ))
            .with_source(error));
        }
        last_error = Some(error);
        if tokio::time::Instant::now() + CONNECT_RETRY_DELAY >= deadline {
            break;
        }
        tokio::time::sleep(CONNECT_RETRY_DELAY).await;
    }
    Err(match last_error {
        Some(cause) => {
            connect_timed_out(config, &format!("last attempt: {cause}")).with_source(cause)
        }
        None => connect_timed_out(config, "no answer"),
    })
}

/// The error of a connect that ran out of time while `doing`.
fn connect_timed_out(config: &RedisConfig, doing: &str) -> Error {
    Error::unavailable(format!(
        "could not connect to {} within {:?} ({doing})",
        config.redacted_url(),
        config.connect_timeout
    ))
}

/// A duration in whole microseconds, rounded down: leases end on the
/// microsecond grid every stored time is on.
fn micros(duration: Duration) -> u128 {
    duration.as_micros()
}

/// `"1"` and the text when given, `"0"` and nothing otherwise.
fn optional(text: Option<&str>) -> (&'static str, &str) {
    match text {
        Some(text) => ("1", text),
        None => ("0", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endless_connect_timeout_is_a_far_deadline_not_a_panic() {
        assert!(deadline_after(Duration::MAX) > tokio::time::Instant::now());
        assert!(deadline_after(Duration::ZERO) <= tokio::time::Instant::now());
    }
}

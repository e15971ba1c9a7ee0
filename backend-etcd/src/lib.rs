//! # backend-etcd
//!
//! A [`LeaseStore`](tenure_lease_core::LeaseStore), [`JobQueue`](tenure_lease_core::JobQueue)
//! and [`FenceStore`](tenure_lease_core::FenceStore) on an etcd cluster:
//! leases whose safety survives the loss of a server. etcd replicates every
//! write through Raft before it answers, so an acknowledged admission,
//! renewal, takeover or settlement survives the loss of any minority of the
//! members, and the fence sequence never repeats across a leader change.
//! Through the facade it is `tenure::etcd::EtcdStore` (feature `etcd`), also
//! opened by `tenure::connect("etcd://host:2379,host:2379,host:2379/prefix")`.
//!
//! ## How an operation runs
//!
//! Every operation is **one etcd transaction**. The store reads the keys it
//! starts from (the record, the scopes' holders) at one revision, decides in Rust with the same rules as every other backend
//! ([`tenure_lease_core::backend`]), and commits its writes in a transaction
//! that first compares every key it read or writes with the revision it was
//! read at (`mod_revision`, or `version == 0` for a key that was absent).
//! When another writer changed one of them in between, nothing is applied
//! and the operation decides again on fresh reads: contention costs a
//! retry, never a wrong answer. An operation that loses 100 races in a row
//! answers a retryable `Unavailable`, having changed nothing. Between two
//! attempts it waits a random pause (below 1 ms, doubling per lost race, at
//! most 64 ms), so writers contending for one key spread out.
//!
//! Keys live under the configured prefix (see [`EtcdConfig`]): one per
//! record, one per held scope or slot, one per job, one per fence gate, one per
//! rate limit's log, and the fence key. Fences come from etcd's
//! cluster-wide revision: an operation that hands out fences first decides
//! to count them, then draws them with one blind put of the fence key (its
//! revision × 1024, plus 0 to 1023), drawn after everything it read, and
//! decides again with them. So leases and jobs share one sequence, every
//! claim holds a fence above any stored in what it read and below any
//! drawn after it committed, no operation contends for a counter, and a
//! leader change or a restart never hands a fence out twice. Fences are
//! large numbers (the revision times 1024) with gaps.
//!
//! ## Rate limits
//!
//! A rate limit's log ([contract §16](tenure_lease_core::contract)) is one
//! key, `<prefix>/rate/<permits>:<period ms>:<key>`, holding the instants
//! of its last uses as a JSON array of microseconds. An admission or a
//! claim with a limit reads it with its other keys (no extra round trip)
//! and writes it in its commit, which compares the log's revision like any
//! key it read: of two calls judged on the same log, the second to commit
//! is decided again on the log the first wrote, so together they never
//! use more than its permits. Calls without a limit never read a log.
//! Uses are stamped and judged by the calling process's clock, the store's
//! clock here (see below): callers on several hosts need synchronised
//! clocks for a period to last the same for all of them. A log that cannot
//! be decoded answers `Corrupt` and the call writes nothing. `purge` also
//! deletes the logs no use counts in any more (compared like every delete,
//! so a log used meanwhile stays), not counted in its answer; a log it
//! cannot decode stays.
//!
//! Rate logs need no migration: they are new keys beside the others, which
//! keep their format. A process of a version before them never reads,
//! writes or purges a log (`delete_prefix` still deletes them).
//!
//! ## Counted scopes
//!
//! A record holding slots of counted scopes
//! ([contract §17](tenure_lease_core::contract)) keeps them in its JSON, as
//! the field `slots` ([`LeaseRecord::slots`](tenure_lease_core::LeaseRecord::slots)),
//! left out when empty; a record without it (every record written before
//! counted scopes) reads back with none, and a `slots` value that is not a
//! map of scopes to numbers from 0 to `u32::MAX` makes the record
//! `Corrupt`, like any undecodable record. The scope index holds one key
//! per held slot key
//! ([`slot_key`](tenure_lease_core::backend::rules::slot_key)):
//! `<prefix>/s/<scope>` for an exclusive scope and for slot 0,
//! `<prefix>/s/<scope>` U+001F `<slot>` for the slots above. So exclusive
//! records keep exactly the keys they kept before: no migration. A process
//! of a version before counted scopes ignores `slots`, and would drop them
//! when it rewrites a record (a renewal, a transition): upgrade every
//! process sharing a prefix before any admits with a counted scope.
//!
//! An admission with a counted scope of capacity above 1 also reads, with
//! its first reads, the range of that scope's slots above 0 (one range per
//! counted scope, no extra round trip; a plain admission reads none). The
//! shared engine then reads the slots' holders from 0 up to the first free
//! slot, or all of them when none is free, and
//! [chooses](tenure_lease_core::backend::rules::choose_slot) a slot. Every
//! slot key it read (present or absent) and every holder it judged is
//! compared at commit like any key read, and the chosen slot's key is
//! written: two admissions choosing one slot cannot both commit, and one
//! whose choice a freed or newly taken slot changed is decided again on
//! fresh reads. Holders of slots it never read are never compared, so they
//! do not contend with it.
//!
//! ## Expiry: etcd's own timers
//!
//! etcd has no clock to read, so the store takes the timestamps it writes,
//! and `now()`, from the **clock of the process making the call**
//! ([`EtcdConfig::clock`], the host's [`SystemClock`](tenure_lease_core::SystemClock)
//! unless replaced). What ends a lease is **etcd's own lease timer**
//! ([contract §2](tenure_lease_core::contract)): beside each active lease
//! with an expiry, and each claimed job, the store keeps a liveness key
//! attached to an etcd lease that etcd's leader ends no sooner than the
//! ttl after the write was sent. A takeover, an interrupting admission and
//! a reap commit only once etcd has deleted that key (its absence is
//! compared in their transaction) *and* the stored expiry plus the grace
//! has passed by the caller's clock. So a host whose clock runs ahead
//! cannot end a lease early; a host whose clock runs behind only takes
//! over later. Clocks should still be synchronised (NTP, chrony) for the
//! timestamps to mean something, but safety no longer rests on them.
//!
//! etcd's timers count whole seconds: a lease there lasts up to its ttl
//! rounded up (at least etcd's minimum, about 2 s with default election
//! settings), plus an eighth of the ttl (at least 1 s), plus half a second
//! longer than its `lease_expires_at` says. The store never keeps an etcd
//! lease alive: it grants one per ttl every few seconds and attaches each
//! liveness key written meanwhile to it (a renewal re-attaches its key in
//! its own transaction), so a million leases of one ttl share a handful of
//! etcd leases and no keep-alive stream exists to storm.
//!
//! ## Deployment
//!
//! * Three or five members (a quorum survives one or two losses). Name all
//!   of them in the URL: a request that cannot connect to one member is
//!   sent to the next (it was never sent, so it cannot apply twice); one
//!   that was sent and timed out, or whose reply was lost, answers `Err`
//!   with the outcome unknown, as the contract requires.
//! * Transactions: a claim takes at most `max_txn_ops / 2` jobs at once
//!   (each with its liveness key), a `renew_many` renews in parts of
//!   `max_txn_ops / 2`, 8 in flight, and an admission over `n` scopes
//!   compares about `2n + 3` keys (`2n + 4` with a rate limit: its log),
//!   a claim with a rate limit takes at most `(max_txn_ops - 1) / 2` jobs
//!   (the log is one more write), a job batch of `n` jobs writes `n`
//!   (`n + 1` with uniqueness keys: the store's guard key too); a counted
//!   scope of capacity `c` compares the slot keys up to the first free one
//!   and each of their holders' records, so up to about `2c` keys when all
//!   its slots are taken (`3c` while holders are past their stored expiry:
//!   their liveness keys too): raise the
//!   cluster's `--max-txn-ops` (default 128) and set
//!   [`EtcdConfig::max_txn_ops`] to match for wide admissions and large
//!   batches, and `--max-request-bytes` (default 1.5 MiB) for large
//!   payloads. A transaction over the limit answers `Config` saying so.
//! * Credentials: a user whose role reads and writes the prefix
//!   (`etcd://user:password@...`).
//! * TLS: `etcds://` reaches every member over TLS, verifying its
//!   certificate and name against the system's trust store, or the
//!   authorities of [`EtcdConfig::tls`] or of the URL's `tls_ca=` file
//!   (`tls_cert=` and `tls_key=` for members that ask for client
//!   certificates, `--client-cert-auth`). An untrusted certificate is
//!   [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config); under TLS
//!   1.3 a member refusing a missing client certificate shows only as a
//!   closed connection. [`EtcdStore::member_count`] tells `tenure check`
//!   how many members there are.
//! * Scans (`list_expired`, `list_active`, `list_by_scope`, `purge` of
//!   the records and then of the rate logs, the queue's `claim`, `reap`,
//!   `list_dead_letters`, `enqueue_unique`) read the whole prefix of
//!   their kind: keep a prefix to one application, and retention on. Every
//!   enqueue with a uniqueness key reads one guard key of the store and
//!   every one that creates a keyed job writes it, so keyed enqueues of a
//!   store, whatever their queue and key, are decided one after another (a
//!   loser of the race decides again). Calls with one rate limit (one
//!   log) are likewise decided one after another.
//!
//! ## What a leader change does
//!
//! While the cluster elects a new leader (an election timeout, 1 s by
//! default, plus a round of votes: about 1.5 s on a LAN), writes wait or
//! fail: a call answers `Err` (`Unavailable` or `Timeout`, outcome unknown)
//! or its true outcome once the new leader commits it. Nothing acknowledged
//! is lost. A keeper whose renewals fail keeps trusting its lease only until
//! its confirmed deadline and then fail-stops, exactly as on any store.
//! The new leader restarts every etcd lease's count (etcd extends leases
//! on promotion), so a lease whose holder died shortly before a leader
//! change can be taken over up to one more ttl plus the election time
//! later than without it; a leader change never lets a takeover happen
//! sooner.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_etcd::EtcdStore;
//! use tenure_lease_core::{AdmitRequest, LeaseStore};
//!
//! let store = EtcdStore::connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/billing").await?;
//! let admission = store
//!     .admit(&AdmitRequest::new("job-1", "worker-a").scope("invoice:7").ttl(Duration::from_secs(30)))
//!     .await?;
//! assert!(admission.admitted().is_some());
//! # Ok(()) }
//! ```

use std::fmt;

use tenure_lease_core::release::ReleaseBoard;
use tenure_lease_core::{Result, Timestamp};

mod config;
mod error;
mod gate;
mod keys;
mod kv;
mod lease;
mod queue;
mod records;
mod timers;

pub use config::{EtcdConfig, URL_PARAMETERS, URL_SCHEMES};

use keys::Keys;
use kv::{Cluster, Reads, Runner};

/// A lease store, job queue and fence store on an etcd cluster, under one
/// key prefix. Clones share the connections.
#[derive(Clone)]
pub struct EtcdStore {
    runner: Runner,
    keys: Keys,
    config: EtcdConfig,
    releases: ReleaseBoard,
}

impl tenure_lease_core::backend::stores::Backend for EtcdStore {
    const NAME: &'static str = "etcd";
    const SYSTEM: &'static str = "etcd";

    fn releases_in_process(&self) -> Option<&ReleaseBoard> {
        Some(&self.releases)
    }
}

tenure_lease_core::serve_backend!(EtcdStore);

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the cluster `config` names (a URL
    /// `etcd://host:port[,host:port...][/prefix]` or an [`EtcdConfig`]).
    /// One member is asked for the member list before this answers, so a
    /// URL naming no live member is refused here, not at the first
    /// operation; with credentials, each member is asked for a token, and a
    /// member that cannot be reached is left out.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) for bad
    /// settings (a query parameter not in [`URL_PARAMETERS`] among them) or
    /// refused credentials;
    /// [`ErrorKind::Unavailable`](tenure_lease_core::ErrorKind::Unavailable)
    /// when no member answers (the message names the members tried).
    pub async fn connect(config: impl Into<EtcdConfig>) -> Result<Self> {
        let config = config.into();
        config.validate()?;
        let cluster = Cluster::connect(&config).await?;
        Ok(EtcdStore {
            releases: ReleaseBoard::in_process(),
            runner: Runner {
                cluster,
                clock: config.clock.clone(),
                max_txn_ops: config.max_txn_ops,
                fence_key: Keys::new(config.key_prefix()).fence().to_owned(),
                timers: timers::Timers::new(config.clock.clone()),
            },
            keys: Keys::new(config.key_prefix()),
            config,
        })
    }

    /// How many members the cluster has (`MemberList`): a cluster of one
    /// loses the store with that member, and only three or five survive
    /// the loss of one or two.
    ///
    /// # Errors
    ///
    /// The store errors of [`LeaseStore`](tenure_lease_core::LeaseStore).
    pub async fn member_count(&self) -> Result<usize> {
        self.runner.cluster.member_count().await
    }

    /// The settings this store was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// Deletes every key under this store's prefix (records, jobs, gates,
    /// rate logs, the fence key) and answers how many, in one transaction.
    /// For tests and decommissioning. Fences come from etcd's revision, so a
    /// store reusing the prefix afterwards still hands out greater ones.
    ///
    /// # Errors
    ///
    /// The store errors of [`LeaseStore`](tenure_lease_core::LeaseStore).
    pub async fn delete_prefix(&self) -> Result<u64> {
        let txn = etcd_client::Txn::new().and_then([etcd_client::TxnOp::delete(
            self.keys.all(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )]);
        let response = self.runner.cluster.txn(txn).await?;
        Ok(response
            .op_responses()
            .into_iter()
            .map(|answer| match answer {
                etcd_client::TxnOpResponse::Delete(deleted) => {
                    u64::try_from(deleted.deleted()).unwrap_or(0)
                }
                _ => 0,
            })
            .sum())
    }

    /// How many keys of each kind the store keeps (`records`, `scopes`,
    /// `jobs`, `gates`, `liveness`, `rate_logs`, `unique`, `fence`), for
    /// tests that check nothing is left behind.
    ///
    /// # Errors
    ///
    /// The store errors of [`LeaseStore`](tenure_lease_core::LeaseStore).
    pub async fn footprint(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let all = self.keys.all();
        self.runner
            .run(Reads::default().prefix(all), |tx| {
                let mut counts = std::collections::BTreeMap::new();
                for (key, _) in tx.scan(all) {
                    let kind = match key[all.len()..].split_once('/') {
                        Some(("r", _)) => "records",
                        Some(("s", _)) => "scopes",
                        Some(("j", _)) => "jobs",
                        Some(("g", _)) => "gates",
                        Some(("l", _)) => "liveness",
                        Some(("rate", _)) => "rate_logs",
                        _ if key.ends_with("/unique") => "unique",
                        _ => "fence",
                    };
                    *counts.entry(kind.to_owned()).or_insert(0) += 1;
                }
                Ok(counts)
            })
            .await
    }

    /// Deletes, in parts of one transaction each, the keys under `prefix`
    /// that `purgeable` picks (given the key, its value and the instant of
    /// the attempt); answers how many.
    async fn delete_in_parts(
        &self,
        prefix: &str,
        purgeable: impl Fn(&str, &[u8], Timestamp) -> bool + Send + Sync,
    ) -> Result<u64> {
        let part = self.runner.max_txn_ops;
        let mut total = 0;
        loop {
            let deleted = self
                .runner
                .run(Reads::default().prefix(prefix), |tx| {
                    let now = tx.now();
                    let doomed: Vec<String> = tx
                        .scan(prefix)
                        .filter(|(key, value)| purgeable(key, value, now))
                        .map(|(key, _)| key.to_owned())
                        .take(part)
                        .collect();
                    for key in &doomed {
                        tx.delete(key);
                    }
                    Ok(doomed.len())
                })
                .await?;
            total += deleted as u64;
            if deleted < part {
                return Ok(total);
            }
        }
    }
}

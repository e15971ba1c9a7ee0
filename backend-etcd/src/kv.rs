//! The one way this store talks to etcd: an optimistic transaction.
//!
//! An operation names the keys (and key ranges) it starts from; the
//! [`Cluster`] reads them in one etcd transaction, at one revision, into a
//! [`Snapshot`]. The operation then decides in Rust over a [`Tx`] on that
//! snapshot, the same rules every backend shares, and what it read point by
//! point and what it wrote become one etcd transaction: *if every such key
//! still has the revision it was read at (or is still absent), apply the
//! writes*. When another writer got there first the compare fails, nothing
//! is applied, and the operation reads again and decides again. A decision
//! that needs a key it was not given asks for it ([`Tx::read`] notes it as
//! missing) and is decided again once it is read.
//!
//! ## Fences from etcd's revision
//!
//! A decision that hands out fences ([`Tx::next_fence`]) is decided once to
//! count them; the runner then draws them with one blind put of the fence
//! key (no compare: it never loses a race) and decides again on the same
//! snapshot with them. etcd's revision strictly increases across the whole
//! cluster and is never reused, so `revision × FENCES_PER_DRAW + i` is a
//! fence nobody else is ever handed. Drawn after everything the decision
//! read, it is greater than every fence stored in what it read (each was
//! drawn before its own write committed); whatever comes after the commit
//! draws later, greater ones. Fences drawn before a lost race or a later
//! read are thrown away, never reused: the sequence may skip, never go
//! back. No operation contends for a counter.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ClusterClient, Compare, CompareOp, ConnectOptions, GetOptions, Identity,
    KvClient, LeaseClient, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Clock, Error, Result, Timestamp};

use crate::config::EtcdConfig;
use crate::error::{lease_ended, never_sent, store_error, timed_out};
use crate::records::encode;
use crate::timers::Timers;

/// How often an operation decides again after losing a race before it
/// answers a retryable `Unavailable`.
const MAX_ATTEMPTS: u32 = 100;
/// The longest pause before deciding again: a lost race waits a random
/// time below `min(BACKOFF_CAP, 1 ms × 2^attempts)` first, so writers
/// contending for one key (a hot scope, a job every claimer wants) spread out
/// instead of colliding again at once.
const BACKOFF_CAP: Duration = Duration::from_millis(64);

/// The largest answer read from etcd: a scan of a large prefix answers
/// megabytes, past the gRPC default of 4 MiB.
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// The members of the cluster, one client each, tried in turn.
///
/// etcd-client's own balancing sends a request to a member that is down
/// and fails it; a request that fails to *connect* was never sent, so it
/// goes to the next member instead. Anything else (a timeout, a reply
/// lost after sending) is the caller's unknown outcome.
#[derive(Clone)]
pub(crate) struct Cluster {
    members: Arc<[Member]>,
    next: Arc<AtomicUsize>,
    timeout: Duration,
}

/// One member's clients.
#[derive(Clone)]
struct Member {
    kv: KvClient,
    lease: LeaseClient,
    cluster: ClusterClient,
}

/// An etcd lease granted: its id and the ttl etcd granted, in seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) id: i64,
    pub(crate) ttl: i64,
}

/// Why a request failed: the client's error, or the store's answer already.
enum Failed {
    Client(etcd_client::Error),
    Store(Error),
}

impl From<Failed> for Error {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Client(error) => store_error(error),
            Failed::Store(error) => error,
        }
    }
}

impl Cluster {
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.operation_timeout);
        if let Some((user, password)) = config.user() {
            options = options.with_user(user, password);
        }
        if let Some(certificates) = config.certificates() {
            options = options.with_tls(tls_options(&certificates));
        }
        let mut members = Vec::with_capacity(config.endpoints().len());
        let mut last_error = None;
        for endpoint in config.endpoints() {
            match Client::connect([endpoint.as_str()], Some(options.clone())).await {
                Ok(client) => members.push(Member {
                    kv: client
                        .kv_client()
                        .max_decoding_message_size(MAX_ANSWER_BYTES),
                    lease: client.lease_client(),
                    cluster: client.cluster_client(),
                }),
                Err(error) => last_error = Some(store_error(error)),
            }
        }
        if members.is_empty() {
            return Err(
                last_error.unwrap_or_else(|| Error::unavailable("no etcd member to connect to"))
            );
        }
        let cluster = Cluster {
            members: members.into(),
            next: Arc::new(AtomicUsize::new(0)),
            timeout: config.operation_timeout,
        };
        // The client connects lazily: ask once, so a URL naming no live
        // member is refused here rather than at the first operation.
        if let Err(error) = cluster.member_count().await {
            let message = format!(
                "no etcd member answered at {}: {}",
                config.endpoints().join(", "),
                error.message()
            );
            return Err(Error::new(error.kind(), message).with_source(error));
        }
        Ok(cluster)
    }

    /// How many members the cluster has, as one member reports it.
    pub(crate) async fn member_count(&self) -> Result<usize> {
        let response = self
            .send(|mut member| async move { member.cluster.member_list().await })
            .await?;
        Ok(response.members().len())
    }

    /// Sends `txn` to one member, to the next one while a member cannot be
    /// connected to.
    pub(crate) async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        Ok(self.send_txn(txn).await?)
    }

    /// [`txn`](Self::txn) for a transaction that attaches keys to etcd
    /// leases: `None` when etcd refused it, applying nothing, because one
    /// of those leases has ended.
    async fn commit(&self, txn: Txn) -> Result<Option<etcd_client::TxnResponse>> {
        match self.send_txn(txn).await {
            Ok(response) => Ok(Some(response)),
            Err(Failed::Client(error)) if lease_ended(&error) => Ok(None),
            Err(failed) => Err(failed.into()),
        }
    }

    /// The keys from `from` (included) to `end` (excluded), at most `limit`
    /// of them, with their values: one linearizable etcd range read, answered
    /// in byte order of the keys (etcd's own order, with no sort asked).
    /// Compares and commits nothing: for a read that needs no transaction.
    pub(crate) async fn range(
        &self,
        from: Vec<u8>,
        end: Vec<u8>,
        limit: i64,
    ) -> Result<Vec<etcd_client::KeyValue>> {
        let mut response = self
            .send(|mut member| {
                let (from, end) = (from.clone(), end.clone());
                async move {
                    let options = GetOptions::new().with_range(end).with_limit(limit);
                    member.kv.get(from, Some(options)).await
                }
            })
            .await?;
        Ok(response.take_kvs())
    }

    /// Grants an etcd lease of `ttl` seconds (etcd may raise it to its
    /// minimum).
    pub(crate) async fn grant(&self, ttl: i64) -> Result<Granted> {
        let response = self
            .send(|mut member| async move { member.lease.grant(ttl, None).await })
            .await?;
        Ok(Granted {
            id: response.id(),
            ttl: response.ttl(),
        })
    }

    async fn send_txn(&self, txn: Txn) -> std::result::Result<etcd_client::TxnResponse, Failed> {
        self.send(|mut member| {
            let txn = txn.clone();
            async move { member.kv.txn(txn).await }
        })
        .await
    }

    /// Makes `call` on one member, on the next one while a member cannot be
    /// connected to.
    async fn send<T, F, Fut>(&self, mut call: F) -> std::result::Result<T, Failed>
    where
        F: FnMut(Member) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last_error = None;
        for step in 0..self.members.len() {
            let member = self.members[(first + step) % self.members.len()].clone();
            match tokio::time::timeout(self.timeout, call(member)).await {
                Err(_) => return Err(Failed::Store(timed_out(self.timeout))),
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(error)) if never_sent(&error) => {
                    tracing::debug!(%error, "an etcd member cannot be connected to: sending to the next");
                    last_error = Some(error);
                }
                Ok(Err(error)) => return Err(Failed::Client(error)),
            }
        }
        Err(last_error.map_or_else(
            || Failed::Store(Error::unavailable("no etcd member to send to")),
            Failed::Client,
        ))
    }
}

/// What an operation starts by reading: single keys and key prefixes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Reads {
    keys: BTreeSet<String>,
    prefixes: BTreeSet<String>,
}

impl Reads {
    pub(crate) fn keys<K: Into<String>>(keys: impl IntoIterator<Item = K>) -> Self {
        Reads {
            keys: keys.into_iter().map(Into::into).collect(),
            prefixes: BTreeSet::new(),
        }
    }

    pub(crate) fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefixes.insert(prefix.into());
        self
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.prefixes.is_empty()
    }

    fn merge(&mut self, other: Reads) {
        self.keys.extend(other.keys);
        self.prefixes.extend(other.prefixes);
    }
}

/// A key's value and the revision it was last written at.
#[derive(Debug, Clone)]
struct Entry {
    value: Vec<u8>,
    mod_revision: i64,
}

/// What an operation has read: every key asked for, present or absent, and
/// every key under the prefixes asked for.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    entries: HashMap<String, Option<Entry>>,
    prefixes: Vec<String>,
    /// Everything asked for so far, to read again after a lost race.
    asked: Reads,
    /// How many etcd reads made it (one is a consistent view by itself).
    reads: u32,
}

impl Snapshot {
    fn state(&self, key: &str) -> Option<Option<&Entry>> {
        match self.entries.get(key) {
            Some(entry) => Some(entry.as_ref()),
            None if self
                .prefixes
                .iter()
                .any(|prefix| key.starts_with(prefix.as_str())) =>
            {
                Some(None)
            }
            None => None,
        }
    }

    /// The keys under `prefix` and their values, in key order.
    fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        let mut found: Vec<(&str, &[u8])> = self
            .entries
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .filter_map(|(key, entry)| {
                entry
                    .as_ref()
                    .map(|entry| (key.as_str(), entry.value.as_slice()))
            })
            .collect();
        found.sort_unstable_by_key(|(key, _)| *key);
        found.into_iter()
    }
}

/// One attempt at an operation: reads from the snapshot (and its own
/// writes), collects writes, and notes what it needed and did not have.
pub(crate) struct Tx<'s> {
    snapshot: &'s Snapshot,
    now: Timestamp,
    /// Fences drawn for this decision, and how many it has handed out.
    fences: &'s [u64],
    fences_used: usize,
    missing: BTreeSet<String>,
    compared: BTreeSet<String>,
    writes: BTreeMap<String, Write>,
}

/// What an attempt writes to one key at commit.
#[derive(Debug, Clone)]
enum Write {
    Put(Vec<u8>),
    Delete,
    /// A liveness key, attached to an etcd lease that etcd ends no sooner
    /// than this long after the commit is sent ([`crate::timers`]).
    Attach(Duration),
}

impl<'s> Tx<'s> {
    /// The instant this attempt decides at.
    pub(crate) fn now(&self) -> Timestamp {
        self.now
    }

    /// The value of `key`, as this attempt last wrote it or as read. A key
    /// that was not read is noted as missing and answers an error: the
    /// operation is then decided again with it read.
    ///
    /// # Errors
    ///
    /// When `key` was not read yet.
    pub(crate) fn read(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        if let Some(written) = self.writes.get(key) {
            return Ok(match written {
                Write::Put(value) => Some(value.clone()),
                Write::Delete => None,
                Write::Attach(_) => Some(Vec::new()),
            });
        }
        match self.snapshot.state(key) {
            Some(entry) => {
                self.compared.insert(key.to_owned());
                Ok(entry.map(|entry| entry.value.clone()))
            }
            None => {
                self.missing.insert(key.to_owned());
                Err(Error::unavailable(format!("etcd key {key:?} is read next")))
            }
        }
    }

    /// The next fence for this decision. When the runner has not drawn
    /// enough yet, answers a stand-in (0) and notes the shortfall: the
    /// decision is then made again, with enough fences, and the stand-in
    /// never leaves the attempt.
    pub(crate) fn next_fence(&mut self) -> u64 {
        let fence = self.fences.get(self.fences_used).copied().unwrap_or(0);
        self.fences_used += 1;
        fence
    }

    /// The keys under `prefix` as read (a prefix the operation asked for),
    /// without this attempt's writes. Scanning compares nothing: only what
    /// the attempt then reads or writes must be unchanged at commit.
    pub(crate) fn scan<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        self.snapshot.under(prefix)
    }

    /// Whether `key` was read (present or absent) or written by this
    /// attempt; a key that was not is noted as missing, read with the
    /// operation's next reads, and the attempt decided again. For keys the
    /// attempt will surely need, so their reads go with the first ones.
    pub(crate) fn want(&mut self, key: &str) {
        if self.snapshot.state(key).is_none() && !self.writes.contains_key(key) {
            self.missing.insert(key.to_owned());
        }
    }

    /// Writes `value` under `key` at commit.
    pub(crate) fn put(&mut self, key: &str, value: Vec<u8>) {
        self.touch(key);
        self.writes.insert(key.to_owned(), Write::Put(value));
    }

    /// Deletes `key` at commit.
    pub(crate) fn delete(&mut self, key: &str) {
        self.touch(key);
        self.writes.insert(key.to_owned(), Write::Delete);
    }

    /// Deletes `key` at commit if it is there as read (compared like any
    /// write); a key the attempt never read is taken to be absent. For
    /// liveness keys, which every operation that may end one reads first.
    pub(crate) fn retire(&mut self, key: &str) {
        let present = match self.writes.get(key) {
            Some(Write::Delete) => false,
            Some(_) => true,
            None => self.snapshot.state(key).flatten().is_some(),
        };
        if present {
            self.delete(key);
        }
    }

    /// Writes the liveness key `key` at commit, attached to an etcd lease
    /// that etcd ends no sooner than `ttl` after the commit is sent, and
    /// not much later ([`crate::timers`]).
    pub(crate) fn attach(&mut self, key: &str, ttl: Duration) {
        self.touch(key);
        self.writes.insert(key.to_owned(), Write::Attach(ttl));
    }

    /// A written key is compared too: a blind write must not overwrite what
    /// changed since it was read (or was absent).
    fn touch(&mut self, key: &str) {
        if self.snapshot.state(key).is_some() {
            self.compared.insert(key.to_owned());
        } else if !self.writes.contains_key(key) {
            // Written without being read: compare it as read (absent or not)
            // after reading it.
            self.missing.insert(key.to_owned());
        }
    }

    fn compares(&self) -> Vec<Compare> {
        self.compared
            .iter()
            .map(|key| match self.snapshot.state(key).flatten() {
                Some(entry) => {
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, entry.mod_revision)
                }
                None => Compare::version(key.as_str(), CompareOp::Equal, 0),
            })
            .collect()
    }
}

/// How many fences one draw yields, at most: the most one operation hands
/// out (an admission interrupting 64 holders, a claim of 1000 jobs) is
/// below it.
pub(crate) const FENCES_PER_DRAW: u64 = 1024;

/// The store's connection and clock: runs operations.
#[derive(Clone)]
pub(crate) struct Runner {
    pub(crate) cluster: Cluster,
    pub(crate) clock: Arc<dyn Clock>,
    /// At most this many reads in one etcd read.
    pub(crate) max_txn_ops: usize,
    /// The key whose revision each fence draw takes.
    pub(crate) fence_key: String,
    /// The etcd leases liveness keys are attached to.
    pub(crate) timers: Timers,
}

impl Runner {
    /// Runs one operation: reads `reads`, lets `decide` decide over them and
    /// commits its writes if nothing it relied on changed meanwhile;
    /// otherwise decides again on fresh reads.
    ///
    /// `decide` may run many times and must change nothing outside the
    /// [`Tx`] it is given.
    pub(crate) async fn run<T>(
        &self,
        reads: Reads,
        decide: impl FnMut(&mut Tx<'_>) -> Result<T> + Send,
    ) -> Result<T>
    where
        T: Send,
    {
        self.run_counted(reads, decide)
            .await
            .map(|(answer, _)| answer)
    }

    /// [`run`](Self::run), also answering how many races the operation
    /// lost before it was decided.
    pub(crate) async fn run_counted<T>(
        &self,
        reads: Reads,
        mut decide: impl FnMut(&mut Tx<'_>) -> Result<T> + Send,
    ) -> Result<(T, u32)>
    where
        T: Send,
    {
        let mut snapshot = Snapshot::default();
        let mut wanted = reads;
        let mut fences: Vec<u64> = Vec::new();
        let mut attempts = 0;
        loop {
            if !wanted.is_empty() {
                self.fetch(&mut snapshot, std::mem::take(&mut wanted))
                    .await?;
                // Fences must be drawn after everything read.
                fences.clear();
            }
            let mut tx = Tx {
                snapshot: &snapshot,
                now: self.clock.now(),
                fences: &fences,
                fences_used: 0,
                missing: BTreeSet::new(),
                compared: BTreeSet::new(),
                writes: BTreeMap::new(),
            };
            let answer = decide(&mut tx);
            if !tx.missing.is_empty() {
                wanted = Reads::keys(std::mem::take(&mut tx.missing));
                continue;
            }
            if tx.fences_used > fences.len() {
                let needed = tx.fences_used;
                fences = self.draw_fences(needed).await?;
                continue;
            }
            let writes = if answer.is_ok() {
                std::mem::take(&mut tx.writes)
            } else {
                BTreeMap::new()
            };
            if writes.is_empty() && snapshot.reads <= 1 {
                return answer.map(|answer| (answer, attempts));
            }
            let compares = tx.compares();
            let (operations, attached) = self.operations(writes).await?;
            let committed = self
                .cluster
                .commit(Txn::new().when(compares).and_then(operations))
                .await?;
            match committed {
                Some(response) if response.succeeded() => {
                    return answer.map(|answer| (answer, attempts));
                }
                Some(_) => {}
                None => {
                    tracing::debug!(
                        "an etcd lease ended before the commit reached it: granting another"
                    );
                    for id in attached {
                        self.timers.forget(id);
                    }
                }
            }
            attempts += 1;
            if attempts >= MAX_ATTEMPTS {
                return Err(Error::unavailable(format!(
                    "an etcd operation lost {MAX_ATTEMPTS} races in a row to other writers \
                     and changed nothing; retry"
                )));
            }
            tracing::debug!(attempts, "etcd transaction lost a race, deciding again");
            let ceiling = BACKOFF_CAP.min(Duration::from_millis(1 << attempts.min(6)));
            tokio::time::sleep(ceiling.mul_f64(fastrand::f64())).await;
            wanted = std::mem::take(&mut snapshot.asked);
            snapshot = Snapshot::default();
        }
    }

    /// The etcd operations of `writes`, and the etcd leases they attach
    /// liveness keys to (each key carrying, as a hint, when its lease
    /// should end).
    async fn operations(&self, writes: BTreeMap<String, Write>) -> Result<(Vec<TxnOp>, Vec<i64>)> {
        let mut operations = Vec::with_capacity(writes.len());
        let mut attached = Vec::new();
        for (key, write) in writes {
            operations.push(match write {
                Write::Put(value) => TxnOp::put(key, value, None),
                Write::Delete => TxnOp::delete(key, None),
                Write::Attach(ttl) => {
                    let epoch = self.timers.epoch_for(&self.cluster, ttl).await?;
                    if !attached.contains(&epoch.id) {
                        attached.push(epoch.id);
                    }
                    TxnOp::put(
                        key,
                        encode(&epoch.ends_about),
                        Some(PutOptions::new().with_lease(epoch.id)),
                    )
                }
            });
        }
        Ok((operations, attached))
    }

    /// `count` fresh fences, in increasing order, from one blind put of the
    /// fence key: its revision times [`FENCES_PER_DRAW`], plus 0 to
    /// `count − 1`.
    async fn draw_fences(&self, count: usize) -> Result<Vec<u64>> {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        if count > FENCES_PER_DRAW {
            return Err(Error::new(
                tenure_lease_core::ErrorKind::InvalidInput,
                format!("one operation may hand out at most {FENCES_PER_DRAW} fences, not {count}"),
            ));
        }
        let draw = Txn::new().and_then([TxnOp::put(self.fence_key.as_str(), "", None)]);
        let response = self.cluster.txn(draw).await?;
        let revision = response
            .header()
            .map(etcd_client::ResponseHeader::revision)
            .and_then(|revision| u64::try_from(revision).ok())
            .filter(|revision| *revision > 0)
            .ok_or_else(|| Error::unavailable("etcd answered a fence draw without its revision"))?;
        let base = revision
            .checked_mul(FENCES_PER_DRAW)
            .filter(|base| base + FENCES_PER_DRAW <= tenure_lease_core::limits::MAX_GATE_FENCE)
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "etcd's revision {revision} is past what fences can carry"
                ))
            })?;
        Ok((0..count).map(|offset| base + offset).collect())
    }

    /// Reads `reads` into `snapshot`, as few etcd reads as the transaction
    /// limit allows: keys first, then prefixes, so a key is never read at a
    /// later revision than a prefix (the unique enqueue's guard relies on
    /// it).
    async fn fetch(&self, snapshot: &mut Snapshot, reads: Reads) -> Result<()> {
        let mut asked: Vec<(String, bool)> = reads
            .keys
            .iter()
            .map(|key| (key.clone(), false))
            .chain(reads.prefixes.iter().map(|prefix| (prefix.clone(), true)))
            .collect();
        snapshot.asked.merge(reads);
        while !asked.is_empty() {
            let part: Vec<(String, bool)> =
                asked.drain(..asked.len().min(self.max_txn_ops)).collect();
            let operations: Vec<TxnOp> = part
                .iter()
                .map(|(key, is_prefix)| {
                    TxnOp::get(
                        key.as_str(),
                        is_prefix.then(|| GetOptions::new().with_prefix()),
                    )
                })
                .collect();
            let response = self.cluster.txn(Txn::new().and_then(operations)).await?;
            snapshot.reads += 1;
            for ((key, is_prefix), answer) in part.into_iter().zip(response.op_responses()) {
                let TxnOpResponse::Get(got) = answer else {
                    return Err(Error::unavailable(
                        "etcd answered a read with something else",
                    ));
                };
                if !is_prefix {
                    snapshot.entries.insert(key.clone(), None);
                }
                for kv in got.kvs() {
                    let Ok(found) = kv.key_str() else { continue };
                    snapshot.entries.insert(
                        found.to_owned(),
                        Some(Entry {
                            value: kv.value().to_vec(),
                            mod_revision: kv.mod_revision(),
                        }),
                    );
                }
                if is_prefix {
                    snapshot.prefixes.push(key);
                }
            }
        }
        Ok(())
    }
}

/// tonic's TLS settings for `certificates`: their authorities, or the
/// system's trust store.
fn tls_options(certificates: &TlsCertificates) -> TlsOptions {
    let mut options = TlsOptions::new();
    options = match certificates.roots() {
        Some(roots) => options.ca_certificate(Certificate::from_pem(roots)),
        None => options.with_native_roots(),
    };
    if let Some((certificate, key)) = certificates.identity() {
        options = options.identity(Identity::from_pem(certificate, key));
    }
    options
}

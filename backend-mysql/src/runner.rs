//! The one way this store writes: a transaction that locks what it reads,
//! decides in Rust, and writes the decision back.
//!
//! An operation names the rows it starts from ([`Reads`]: a rate log,
//! records, held scopes with their holders, jobs, the jobs that may hold a
//! uniqueness key, the best claimable or reapable jobs).
//! The [`Runner`] opens a transaction, reads them with locking reads
//! (`SELECT … FOR UPDATE`, `SKIP LOCKED` for the job candidates), reads the
//! server's clock, and lets the operation decide over a [`View`] of them:
//! the same rules every backend shares
//! ([`engine`](tenure_lease_core::backend::engine),
//! [`queue_engine`](tenure_lease_core::backend::queue_engine)). A decision
//! that needs a row it was not given asks for it ([`View`] notes it as
//! missing); the runner reads it, locked, and decides again. What the
//! decision writes becomes `INSERT`s, `UPDATE`s and `DELETE`s in the same
//! transaction, then `COMMIT`.
//!
//! Locking reads see the newest committed row at every isolation level,
//! and the locks hold until the commit, so nothing a decision read can
//! change before its writes land. A row that is absent locks nothing (at
//! READ COMMITTED), so the scopes an admission reads are first upserted
//! (a free scope as a row with an empty holder, which the rollback of a
//! refused admission removes): another admission cannot take and release
//! a scope between this one's read and its write, which would leave this
//! one's timestamps before that other's. An enqueue upserts the slot row
//! of each uniqueness key it judges (`tenure_unique_slots`) the same way,
//! all of them first and in order, before reading the jobs that may hold
//! each key: two enqueues of one key are judged one after the other, and
//! crossed batches cannot deadlock on their slots. An admission with a
//! counted scope reads the scope's own row (slot 0) upserted as any scope,
//! then the rows of its other slots (keys `scope U+001F k`, one range)
//! without upserting them: every admission that may take one of them holds
//! the scope's row first, so a free slot needs no row of its own to stay
//! free until the commit, and no row is left behind for the slots it did
//! not take. An operation with a rate
//! limit locks its log before anything else, upserted the same way
//! ([`crate::rate`]): operations on one log are judged one after the
//! other, and one waiting for a log holds no other row, so the log's lock
//! adds no deadlock to those the server already settles. A record or job
//! id read absent may still be inserted first by another writer: the
//! duplicate key, like a deadlock, rolls the transaction back, and the
//! operation decides again from scratch, at most 100 times in a row, with
//! a random pause between attempts (below 1 ms, doubling per lost race, at
//! most 64 ms).

//! ## Fences
//!
//! The store-wide fence sequence is one row, `tenure_fences`. A decision
//! that hands out fences is decided once to count them; the runner then
//! draws them with one `UPDATE … SET last_fence =
//! LAST_INSERT_ID(GREATEST(last_fence + n, now_µs + n − 1))` (the server
//! answers the new value in the same reply: no `RETURNING` needed) and
//! decides again with them. The row stays locked until the commit, so
//! every fence stored in what the decision read was drawn before these,
//! and every fence drawn after the commit is greater. Drawing last keeps
//! the counter locked only for the writes and the commit.
//!
//! The sequence is a hybrid logical clock: never below the server's clock
//! in microseconds. So a replica promoted after a failover, whose counter
//! row lacks the old primary's last draws, still draws above them (they
//! were drawn at the old primary's clock, which had not reached the new
//! primary's by the time a failover is over), as long as the servers'
//! clocks agree to within the failover's duration. Fences are therefore
//! large numbers (about 1.8 × 10^15 in 2027), with gaps.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::{Arguments, Connection as _, MySql, Row, Transaction};
use tenure_lease_core::backend::rules;
use tenure_lease_core::limits::MAX_GATE_FENCE;
use tenure_lease_core::queue::Job;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Error, LeaseRecord, Result, Timestamp};
use tenure_sql_sessions::{Session, Sessions};

use crate::error::{store_error, Conflict};
use crate::{rate, rows};

/// How often an operation decides again after losing a race before it
/// answers a retryable `Unavailable`.
const MAX_ATTEMPTS: u32 = 100;
/// The longest pause before deciding again after a lost race.
const BACKOFF_CAP: Duration = Duration::from_millis(64);
/// At most this many ids in one `IN (…)` list (a statement takes at most
/// 65,535 parameters).
pub(crate) const IDS_PER_READ: usize = 1000;

/// The server's clock in microseconds since the Unix epoch, whatever the
/// session's time zone.
pub(crate) const NOW_MICROS: &str =
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The best queued jobs of a queue a worker can run, to read locked.
#[derive(Debug, Clone)]
pub(crate) struct ClaimQuery {
    pub(crate) queue: String,
    /// The worker's capabilities, as a JSON array.
    pub(crate) capabilities: String,
    pub(crate) limit: usize,
}

/// The claimed jobs whose lease ended at least `grace` ago, to read locked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReapQuery {
    pub(crate) grace: Duration,
    pub(crate) limit: usize,
}

/// What an operation starts by reading, locked.
#[derive(Debug, Default, Clone)]
pub(crate) struct Reads {
    rate_log: Option<RateLimit>,
    leases: BTreeSet<String>,
    scopes: BTreeSet<String>,
    counted_scopes: BTreeSet<String>,
    jobs: BTreeSet<String>,
    unique_keys: BTreeSet<UniqueKey>,
    claimable: Option<ClaimQuery>,
    reapable: Option<ReapQuery>,
}

/// A uniqueness key in its queue: `(queue, key)`.
pub(crate) type UniqueKey = (String, String);

impl Reads {
    /// The log of this rate limit, if any, locked before any other row.
    pub(crate) fn rate_log(mut self, limit: Option<&RateLimit>) -> Self {
        if let Some(limit) = limit {
            self.rate_log = Some(limit.clone());
        }
        self
    }

    /// The records with these ids.
    pub(crate) fn leases<K: Into<String>>(mut self, ids: impl IntoIterator<Item = K>) -> Self {
        self.leases.extend(ids.into_iter().map(Into::into));
        self
    }

    /// The holders of these scopes, with their records.
    pub(crate) fn scopes<K: Into<String>>(mut self, scopes: impl IntoIterator<Item = K>) -> Self {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// The holders of every slot above 0 of these counted scopes, with
    /// their records (slot 0, the scope itself, is read with
    /// [`scopes`](Self::scopes), and locked first: every admission of a
    /// slot of the scope locks it).
    pub(crate) fn counted_scopes<K: Into<String>>(
        mut self,
        scopes: impl IntoIterator<Item = K>,
    ) -> Self {
        self.counted_scopes
            .extend(scopes.into_iter().map(Into::into));
        self
    }

    /// The jobs with these ids.
    pub(crate) fn jobs<K: Into<String>>(mut self, ids: impl IntoIterator<Item = K>) -> Self {
        self.jobs.extend(ids.into_iter().map(Into::into));
        self
    }

    /// The jobs that may hold these uniqueness keys
    /// ([`View::unique_holders`]).
    pub(crate) fn unique_keys(mut self, keys: impl IntoIterator<Item = UniqueKey>) -> Self {
        self.unique_keys.extend(keys);
        self
    }

    /// The best jobs `query` names that no other transaction holds.
    pub(crate) fn claimable(mut self, query: ClaimQuery) -> Self {
        self.claimable = Some(query);
        self
    }

    /// The oldest expired claims `query` names that no other transaction
    /// holds.
    pub(crate) fn reapable(mut self, query: ReapQuery) -> Self {
        self.reapable = Some(query);
        self
    }

    fn is_empty(&self) -> bool {
        self.rate_log.is_none()
            && self.leases.is_empty()
            && self.scopes.is_empty()
            && self.counted_scopes.is_empty()
            && self.jobs.is_empty()
            && self.unique_keys.is_empty()
            && self.claimable.is_none()
            && self.reapable.is_none()
    }
}

/// What a transaction has read, locked: every row asked for, present or
/// absent (`None`), as stored.
#[derive(Debug, Default)]
struct Snapshot {
    /// The uses of each rate log read, as stored (a log never used yet
    /// reads as an empty one).
    rate_logs: HashMap<RateLimit, Vec<u8>>,
    leases: HashMap<String, Option<Vec<u8>>>,
    /// The holder of each scope or slot key read (`None`: free).
    holders: HashMap<String, Option<String>>,
    /// The counted scopes whose slots above 0 were all read: a slot key of
    /// one of them absent from `holders` is free.
    counted_scopes: HashSet<String>,
    jobs: HashMap<String, Option<Vec<u8>>>,
    /// The ids of the jobs that may hold each uniqueness key read.
    unique_holders: HashMap<UniqueKey, Vec<String>>,
    /// The ids of the claim or reap candidates, in the order read.
    candidates: Vec<String>,
}

/// A write a decision makes, applied in order at commit.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// A new record, holding its scopes.
    InsertLease(LeaseRecord),
    /// A record written back; one no longer active releases its scopes.
    UpdateLease(LeaseRecord),
    /// A new job.
    InsertJob(Job),
    /// A job written back.
    UpdateJob(Job),
    /// A rate log's uses, replacing those read.
    SaveRateLog(RateLimit, Vec<Timestamp>),
}

/// One decision over what the transaction read: reads answer from it (and
/// from the decision's own writes), writes are collected, and rows it
/// needed and did not have are noted.
pub(crate) struct View<'s> {
    snapshot: &'s Snapshot,
    now: Timestamp,
    fences: &'s [u64],
    fences_used: usize,
    missing: Reads,
    writes: Vec<Write>,
}

/// The error a read of a row not read yet answers: the decision is then
/// made again with it read, and this error never leaves the runner.
fn read_next(what: &str) -> Error {
    Error::unavailable(format!("{what} is read next"))
}

impl View<'_> {
    /// The instant this decision is made at: the server's clock, read after
    /// every row the decision rests on was locked.
    pub(crate) fn now(&self) -> Timestamp {
        self.now
    }

    /// The next fence for this decision. When the runner has not drawn
    /// enough yet, answers a stand-in (0) and notes the shortfall: the
    /// decision is then made again, with enough fences, and the stand-in
    /// never leaves it.
    pub(crate) fn next_fence(&mut self) -> u64 {
        let fence = self.fences.get(self.fences_used).copied().unwrap_or(0);
        self.fences_used += 1;
        fence
    }

    /// Notes `write`, applied in order at commit.
    pub(crate) fn write(&mut self, write: Write) {
        self.writes.push(write);
    }

    /// The record `id`, as this decision last wrote it or as read.
    ///
    /// # Errors
    ///
    /// `Corrupt` when it cannot be decoded; when it was not read yet.
    pub(crate) fn lease(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        let written = self.writes.iter().rev().find_map(|write| match write {
            Write::InsertLease(record) | Write::UpdateLease(record) if record.id == id => {
                Some(record)
            }
            _ => None,
        });
        if let Some(record) = written {
            return Ok(Some(record.clone()));
        }
        match self.snapshot.leases.get(id) {
            Some(stored) => stored
                .as_deref()
                .map(|body| rows::decode_lease(id, body))
                .transpose(),
            None => {
                self.missing.leases.insert(id.to_owned());
                Err(read_next("a lease record"))
            }
        }
    }

    /// Whether a record `id` exists, decodable or not.
    ///
    /// # Errors
    ///
    /// When it was not read yet.
    pub(crate) fn lease_exists(&mut self, id: &str) -> Result<bool> {
        if self.writes.iter().any(
            |write| matches!(write, Write::InsertLease(record) | Write::UpdateLease(record) if record.id == id),
        ) {
            return Ok(true);
        }
        match self.snapshot.leases.get(id) {
            Some(stored) => Ok(stored.is_some()),
            None => {
                self.missing.leases.insert(id.to_owned());
                Err(read_next("a lease record"))
            }
        }
    }

    /// The id of the active record holding `key` (a scope, or a slot of a
    /// counted scope: [`rules::slot_key`]), after this decision's writes.
    ///
    /// # Errors
    ///
    /// When it was not read yet.
    pub(crate) fn holder_of(&mut self, key: &str) -> Result<Option<String>> {
        let counted = key
            .split_once(rules::SLOT_SEPARATOR)
            .map(|(scope, _)| scope);
        let mut holder = match (self.snapshot.holders.get(key), counted) {
            (Some(holder), _) => holder.clone(),
            (None, Some(scope)) if self.snapshot.counted_scopes.contains(scope) => None,
            (None, Some(scope)) => {
                self.missing.counted_scopes.insert(scope.to_owned());
                return Err(read_next("the holders of a counted scope's slots"));
            }
            (None, None) => {
                self.missing.scopes.insert(key.to_owned());
                return Err(read_next("a scope's holder"));
            }
        };
        for write in &self.writes {
            match write {
                Write::InsertLease(record) if rules::held_keys(record).any(|held| held == key) => {
                    holder = Some(record.id.clone());
                }
                Write::UpdateLease(record)
                    if !record.is_active() && holder.as_deref() == Some(record.id.as_str()) =>
                {
                    holder = None;
                }
                _ => {}
            }
        }
        Ok(holder)
    }

    /// The uses of `limit`'s log, as this decision last wrote them or as
    /// read.
    ///
    /// # Errors
    ///
    /// `Corrupt` when they cannot be decoded; when it was not read yet.
    pub(crate) fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        let written = self.writes.iter().rev().find_map(|write| match write {
            Write::SaveRateLog(saved, uses) if saved == limit => Some(uses),
            _ => None,
        });
        if let Some(uses) = written {
            return Ok(uses.clone());
        }
        match self.snapshot.rate_logs.get(limit) {
            Some(stored) => rate::decode(limit, stored),
            None => {
                self.missing.rate_log = Some(limit.clone());
                Err(read_next("a rate log"))
            }
        }
    }

    /// Notes `uses` as `limit`'s log, written at commit.
    pub(crate) fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) {
        self.write(Write::SaveRateLog(limit.clone(), uses.to_vec()));
    }

    /// The job `id`, as this decision last wrote it or as read.
    ///
    /// # Errors
    ///
    /// `Corrupt` when it cannot be decoded; when it was not read yet.
    pub(crate) fn job(&mut self, id: &str) -> Result<Option<Job>> {
        let written = self.writes.iter().rev().find_map(|write| match write {
            Write::InsertJob(job) | Write::UpdateJob(job) if job.id == id => Some(job),
            _ => None,
        });
        if let Some(job) = written {
            return Ok(Some(job.clone()));
        }
        match self.snapshot.jobs.get(id) {
            Some(stored) => stored
                .as_deref()
                .map(|body| rows::decode_job(id, body))
                .transpose(),
            None => {
                self.missing.jobs.insert(id.to_owned());
                Err(read_next("a job"))
            }
        }
    }

    /// Whether a job `id` exists, decodable or not.
    ///
    /// # Errors
    ///
    /// When it was not read yet.
    pub(crate) fn job_exists(&mut self, id: &str) -> Result<bool> {
        if self.writes.iter().any(
            |write| matches!(write, Write::InsertJob(job) | Write::UpdateJob(job) if job.id == id),
        ) {
            return Ok(true);
        }
        match self.snapshot.jobs.get(id) {
            Some(stored) => Ok(stored.is_some()),
            None => {
                self.missing.jobs.insert(id.to_owned());
                Err(read_next("a job"))
            }
        }
    }

    /// The claim or reap candidates read (locked), decoded, in the order
    /// read; those that cannot be decoded are logged and passed over.
    pub(crate) fn candidates(&self) -> Vec<Job> {
        self.snapshot
            .candidates
            .iter()
            .filter_map(|id| {
                let body = self.snapshot.jobs.get(id)?.as_deref()?;
                decoded_or_passed_over(id, rows::decode_job(id, body))
            })
            .collect()
    }

    /// The jobs of `queue` with the uniqueness key `key` that may hold it
    /// (queued, claimed, or within their period when read), as this
    /// decision last wrote them or as read; those that cannot be decoded
    /// are logged and passed over, and so are those whose body names
    /// another key than their columns.
    ///
    /// # Errors
    ///
    /// When they were not read yet.
    pub(crate) fn unique_holders(&mut self, queue: &str, key: &str) -> Result<Vec<Job>> {
        let unique_key = (queue.to_owned(), key.to_owned());
        let snapshot = self.snapshot;
        let Some(ids) = snapshot.unique_holders.get(&unique_key) else {
            self.missing.unique_keys.insert(unique_key);
            return Err(read_next("the jobs holding a uniqueness key"));
        };
        Ok(ids
            .iter()
            .filter_map(|id| decoded_or_passed_over(id, self.job(id).transpose()?))
            .filter(|job| {
                job.queue == queue && job.unique.as_ref().is_some_and(|held| held.key == key)
            })
            .collect())
    }
}

/// The job `decoded` answers for `id`, or `None`, logged, when it cannot be
/// decoded.
fn decoded_or_passed_over(id: &str, decoded: Result<Job>) -> Option<Job> {
    decoded
        .inspect_err(|error| {
            tracing::warn!(job.id = %id, %error, "passing over an undecodable job");
        })
        .ok()
}

/// The store's pool, and the connections kept from it between statements
/// (see `tenure_sql_sessions`): runs operations.
#[derive(Clone, Debug)]
pub(crate) struct Runner {
    pub(crate) sessions: Sessions<MySql>,
}

impl Runner {
    /// Runs one operation: reads `reads` locked, lets `decide` decide over
    /// them (again with more rows or fences as it asks) and commits its
    /// writes; decides again from scratch after a lost race.
    ///
    /// `decide` may run many times and must change nothing outside the
    /// [`View`] it is given.
    pub(crate) async fn run<T: Send>(
        &self,
        reads: Reads,
        mut decide: impl FnMut(&mut View<'_>) -> Result<T> + Send,
    ) -> Result<T> {
        let mut attempts = 0;
        loop {
            match self.attempt(&reads, &mut decide).await {
                Ok(answer) => return answer,
                Err(Conflict::Failed(error)) => return Err(error),
                Err(Conflict::Lost(error) | Conflict::Duplicate(error)) => {
                    attempts += 1;
                    if attempts >= MAX_ATTEMPTS {
                        return Err(Error::unavailable(format!(
                            "a MySQL operation lost {MAX_ATTEMPTS} races in a row to other \
                             writers and changed nothing; retry"
                        ))
                        .with_source(error));
                    }
                    tracing::debug!(attempts, %error, "MySQL transaction lost a race, deciding again");
                    let ceiling = BACKOFF_CAP.min(Duration::from_millis(1 << attempts.min(6)));
                    tokio::time::sleep(ceiling.mul_f64(fastrand::f64())).await;
                }
            }
        }
    }

    async fn attempt<T>(
        &self,
        reads: &Reads,
        decide: &mut (impl FnMut(&mut View<'_>) -> Result<T> + Send),
    ) -> std::result::Result<Result<T>, Conflict> {
        let mut session = self.session().await.map_err(Conflict::from)?;
        let (answer, in_good_order) = attempt_on(&mut session, reads, decide).await;
        session.keep_if(in_good_order);
        answer
    }

    /// A connection: one kept from the store's last statement, or the pool's.
    pub(crate) async fn session(&self) -> sqlx::Result<Session<MySql>> {
        self.sessions.take().await
    }

    /// The store's pool.
    pub(crate) fn pool(&self) -> &sqlx::MySqlPool {
        self.sessions.pool()
    }
}

/// One attempt of [`Runner::run`] in a transaction on `session`, and
/// whether the session is in good order after it: every statement answered
/// by the server (rows, or a race it settled), the transaction ended.
async fn attempt_on<T>(
    session: &mut Session<MySql>,
    reads: &Reads,
    decide: &mut (impl FnMut(&mut View<'_>) -> Result<T> + Send),
) -> (std::result::Result<Result<T>, Conflict>, bool) {
    let mut tx = match session.begin().await {
        Ok(tx) => tx,
        Err(error) => return (Err(Conflict::from(error)), false),
    };
    match decide_and_write(&mut tx, reads, decide).await {
        Ok((answer, wrote)) => {
            let ended = match wrote {
                Wrote::Yes => tx.commit().await,
                Wrote::No => tx.rollback().await,
            };
            match ended {
                Ok(()) => (Ok(answer), true),
                Err(error) => (Err(Conflict::from(error)), false),
            }
        }
        Err(conflict) => {
            // At once, not when the connection goes back to the pool: the
            // locks it holds (the fence counter's among them) would hold up
            // the next attempt.
            let rolled_back = tx.rollback().await.is_ok();
            let answered = !matches!(conflict, Conflict::Failed(_));
            (Err(conflict), rolled_back && answered)
        }
    }
}

/// Whether an attempt wrote what it decided (then it commits) or nothing.
enum Wrote {
    Yes,
    No,
}

/// Reads, decides and writes one attempt of an operation inside `tx`: its
/// answer, and whether it wrote (only an answer that is no error writes).
async fn decide_and_write<T>(
    tx: &mut Transaction<'_, MySql>,
    reads: &Reads,
    decide: &mut (impl FnMut(&mut View<'_>) -> Result<T> + Send),
) -> std::result::Result<(Result<T>, Wrote), Conflict> {
    let mut snapshot = Snapshot::default();
    let mut wanted = reads.clone();
    let mut fences: Vec<u64> = Vec::new();
    let mut now = None;
    loop {
        if !wanted.is_empty() || now.is_none() {
            fetch(tx, &mut snapshot, std::mem::take(&mut wanted)).await?;
            now = Some(read_now(&mut **tx).await?);
        }
        let mut view = View {
            snapshot: &snapshot,
            now: now.unwrap_or_default(),
            fences: &fences,
            fences_used: 0,
            missing: Reads::default(),
            writes: Vec::new(),
        };
        let answer = decide(&mut view);
        if !view.missing.is_empty() {
            wanted = std::mem::take(&mut view.missing);
            continue;
        }
        if view.fences_used > fences.len() {
            let more = view.fences_used - fences.len();
            fences.extend(draw_fences(tx, more).await?);
            continue;
        }
        if answer.is_err() || view.writes.is_empty() {
            return Ok((answer, Wrote::No));
        }
        apply(tx, std::mem::take(&mut view.writes)).await?;
        return Ok((answer, Wrote::Yes));
    }
}

/// The server's clock, now.
pub(crate) async fn read_now(
    connection: impl sqlx::Executor<'_, Database = MySql>,
) -> Result<Timestamp> {
    let micros: i64 = sqlx::query_scalar(&format!("SELECT {NOW_MICROS}"))
        .fetch_one(connection)
        .await
        .map_err(store_error)?;
    clock::from_micros(micros).ok_or_else(|| {
        Error::corrupt(format!(
            "the MySQL server's clock reads {micros} µs since 1970, which is no instant"
        ))
    })
}

/// `count` fresh fences, in increasing order, from one update of the
/// counter row.
async fn draw_fences(
    tx: &mut Transaction<'_, MySql>,
    count: usize,
) -> std::result::Result<Vec<u64>, Conflict> {
    let count = u64::try_from(count).unwrap_or(u64::MAX);
    let drawn = sqlx::query(&format!(
        "UPDATE tenure_fences SET last_fence = \
         LAST_INSERT_ID(GREATEST(last_fence + ?, {NOW_MICROS} + ?)) WHERE singleton = 1"
    ))
    .bind(count)
    .bind(count - 1)
    .execute(&mut **tx)
    .await?;
    if drawn.rows_affected() != 1 {
        return Err(Error::corrupt(
            "the fence counter (the one row of tenure_fences) is missing; restore it with a \
             value above every fence handed out before, or no fence can be drawn",
        )
        .into());
    }
    let last = drawn.last_insert_id();
    if last > MAX_GATE_FENCE {
        return Err(Error::corrupt(format!(
            "the fence counter reached {last}, past what fences can carry ({MAX_GATE_FENCE})"
        ))
        .into());
    }
    let first = last
        .checked_sub(count - 1)
        .filter(|first| *first >= 1)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "the server answered a fence draw of {count} with {last}, which leaves no room \
                 for them"
            ))
        })?;
    Ok((first..=last).collect())
}

/// `IN (?, ?, …)` for `count` values.
pub(crate) fn placeholders(count: usize) -> String {
    let mut list = String::with_capacity(count * 3 + 2);
    list.push('(');
    for index in 0..count {
        if index > 0 {
            list.push(',');
        }
        list.push('?');
    }
    list.push(')');
    list
}

/// Arguments binding `values`, in order.
pub(crate) fn bound<'a>(values: impl IntoIterator<Item = &'a String>) -> Result<MySqlArguments> {
    let mut arguments = MySqlArguments::default();
    for value in values {
        arguments
            .add(value.as_bytes())
            .map_err(|error| Error::unavailable(format!("cannot bind an id: {error}")))?;
    }
    Ok(arguments)
}

/// Reads `reads` into `snapshot`, locked.
async fn fetch(
    tx: &mut Transaction<'_, MySql>,
    snapshot: &mut Snapshot,
    reads: Reads,
) -> std::result::Result<(), Conflict> {
    if let Some(limit) = reads.rate_log {
        let uses = rate::lock(tx, &limit).await?;
        snapshot.rate_logs.insert(limit, uses);
    }
    lock_unique_keys(tx, snapshot, reads.unique_keys).await?;
    let ids: Vec<String> = reads.leases.into_iter().collect();
    for part in ids.chunks(IDS_PER_READ) {
        let sql = format!(
            "SELECT id, body FROM tenure_leases WHERE id IN {} FOR UPDATE",
            placeholders(part.len())
        );
        for id in part {
            snapshot.leases.insert(id.clone(), None);
        }
        for row in sqlx::query_with(&sql, bound(part)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let (id, body) = id_and_body(&row)?;
            snapshot.leases.insert(id, Some(body));
        }
    }
    let scopes: Vec<String> = reads.scopes.into_iter().collect();
    for part in scopes.chunks(IDS_PER_READ) {
        // Free scopes as rows with an empty holder, rolled back unless the
        // decision holds the scope.
        upsert_to_lock(
            tx,
            ("tenure_held_scopes", "scope, lease_id", "(?, '')"),
            part.len(),
            bound(part)?,
        )
        .await?;
        for scope in part {
            snapshot.holders.insert(scope.clone(), None);
        }
        read_holders(
            tx,
            snapshot,
            &format!("h.scope IN {}", placeholders(part.len())),
            bound(part)?,
        )
        .await?;
    }
    // After the scopes themselves (slot 0), which every admission of a
    // slot of theirs locks first: nobody else can take a slot of these
    // meanwhile, so a free slot needs no row to lock.
    for scope in reads.counted_scopes {
        let (low, high) = slot_key_range(&scope);
        read_holders(
            tx,
            snapshot,
            "h.scope > ? AND h.scope < ?",
            bound([&low, &high])?,
        )
        .await?;
        snapshot.counted_scopes.insert(scope);
    }
    let ids: Vec<String> = reads.jobs.into_iter().collect();
    for part in ids.chunks(IDS_PER_READ) {
        let sql = format!(
            "SELECT id, body FROM tenure_jobs WHERE id IN {} FOR UPDATE",
            placeholders(part.len())
        );
        for id in part {
            snapshot.jobs.insert(id.clone(), None);
        }
        for row in sqlx::query_with(&sql, bound(part)?)
            .fetch_all(&mut **tx)
            .await?
        {
            let (id, body) = id_and_body(&row)?;
            snapshot.jobs.insert(id, Some(body));
        }
    }
    let candidates = if let Some(query) = reads.claimable {
        sqlx::query(&format!(
            "SELECT id, body FROM tenure_jobs \
             WHERE queue = ? AND state = 'queued' AND run_at <= {NOW_MICROS} \
             AND JSON_CONTAINS(?, capabilities) \
             ORDER BY priority_rank, run_at, created_at, id LIMIT ? \
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(query.queue.as_bytes())
        .bind(query.capabilities)
        .bind(u64::try_from(query.limit).unwrap_or(u64::MAX))
        .fetch_all(&mut **tx)
        .await?
    } else if let Some(query) = reads.reapable {
        sqlx::query(&format!(
            "SELECT id, body FROM tenure_jobs \
             WHERE state = 'claimed' AND expires_at <= {NOW_MICROS} - ? \
             ORDER BY expires_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
        ))
        .bind(clock::micros_rounded_up(query.grace))
        .bind(u64::try_from(query.limit).unwrap_or(u64::MAX))
        .fetch_all(&mut **tx)
        .await?
    } else {
        Vec::new()
    };
    for row in candidates {
        let (id, body) = id_and_body(&row)?;
        snapshot.candidates.push(id.clone());
        snapshot.jobs.insert(id, Some(body));
    }
    Ok(())
}

/// Reads the rows of `tenure_held_scopes` that `filter` (on `h`, bound by
/// `arguments`) selects, with their holders' records, locked, into
/// `snapshot` (a row with an empty holder is a free scope).
async fn read_holders(
    tx: &mut Transaction<'_, MySql>,
    snapshot: &mut Snapshot,
    filter: &str,
    arguments: MySqlArguments,
) -> std::result::Result<(), Conflict> {
    let sql = format!(
        "SELECT h.scope, h.lease_id, l.body FROM tenure_held_scopes h \
         LEFT JOIN tenure_leases l ON l.id = h.lease_id \
         WHERE {filter} FOR UPDATE"
    );
    for row in sqlx::query_with(&sql, arguments)
        .fetch_all(&mut **tx)
        .await?
    {
        let key = rows::text(&row, 0)?;
        let holder = rows::text(&row, 1)?;
        if holder.is_empty() {
            continue;
        }
        let body: Option<Vec<u8>> = row.try_get(2).map_err(store_error)?;
        snapshot.leases.insert(holder.clone(), body);
        snapshot.holders.insert(key, Some(holder));
    }
    Ok(())
}

/// The bounds, both excluded, of the keys of `scope`'s slots above 0:
/// `scope` then [`rules::SLOT_SEPARATOR`] (U+001F) then digits, between
/// `scope U+001F` and `scope U+0020`. No other key is: no name holds a
/// control character.
fn slot_key_range(scope: &str) -> (String, String) {
    let next = char::from_u32(u32::from(rules::SLOT_SEPARATOR) + 1).unwrap_or(' ');
    (
        format!("{scope}{}", rules::SLOT_SEPARATOR),
        format!("{scope}{next}"),
    )
}

/// Upserts a row in `table` (`columns`: the first a column of its primary
/// key) for each of `count` rows of values (`row`, bound by `arguments`),
/// changing none already there, and so locks them all, in the order given:
/// an absent row locks nothing, and another writer could insert and
/// delete it between this transaction's read and its write.
pub(crate) async fn upsert_to_lock(
    tx: &mut Transaction<'_, MySql>,
    (table, columns, row): (&str, &str, &str),
    count: usize,
    arguments: MySqlArguments,
) -> std::result::Result<(), Conflict> {
    let key = columns.split(',').next().unwrap_or(columns);
    sqlx::query_with(
        &format!(
            "INSERT INTO {table} ({columns}) VALUES {} ON DUPLICATE KEY UPDATE {key} = {key}",
            vec![row; count].join(", ")
        ),
        arguments,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Locks the slot of each of `keys` (upserted, in order) and reads the jobs
/// that may hold each into `snapshot`, locked.
async fn lock_unique_keys(
    tx: &mut Transaction<'_, MySql>,
    snapshot: &mut Snapshot,
    keys: BTreeSet<UniqueKey>,
) -> std::result::Result<(), Conflict> {
    let keys: Vec<UniqueKey> = keys.into_iter().collect();
    for part in keys.chunks(IDS_PER_READ) {
        let pairs = || bound(part.iter().flat_map(|(queue, key)| [queue, key]));
        upsert_to_lock(
            tx,
            ("tenure_unique_slots", "queue, unique_key", "(?, ?)"),
            part.len(),
            pairs()?,
        )
        .await?;
        let sql = format!(
            "SELECT s.queue, s.unique_key, j.id, j.body FROM tenure_unique_slots s \
             LEFT JOIN tenure_jobs j ON j.queue = s.queue AND j.unique_key = s.unique_key \
             AND (j.state IN ('queued', 'claimed') OR j.unique_until > {NOW_MICROS}) \
             WHERE {} FOR UPDATE",
            vec!["(s.queue = ? AND s.unique_key = ?)"; part.len()].join(" OR ")
        );
        for unique_key in part {
            snapshot
                .unique_holders
                .insert(unique_key.clone(), Vec::new());
        }
        for row in sqlx::query_with(&sql, pairs()?)
            .fetch_all(&mut **tx)
            .await?
        {
            let unique_key = (rows::text(&row, 0)?, rows::text(&row, 1)?);
            let id: Option<Vec<u8>> = row.try_get(2).map_err(store_error)?;
            if id.is_none() {
                continue;
            }
            let id = rows::text(&row, 2)?;
            let body: Vec<u8> = row.try_get(3).map_err(store_error)?;
            snapshot.jobs.insert(id.clone(), Some(body));
            snapshot
                .unique_holders
                .entry(unique_key)
                .or_default()
                .push(id);
        }
    }
    Ok(())
}

/// The `id` and `body` columns of `row`.
fn id_and_body(row: &MySqlRow) -> Result<(String, Vec<u8>)> {
    Ok((rows::text(row, 0)?, row.try_get(1).map_err(store_error)?))
}

/// At most this many rows in one multi-row statement.
const ROWS_PER_STATEMENT: usize = 200;
/// At most this many bytes of bodies in one multi-row statement (but for
/// a single row larger by itself), half the smallest `max_allowed_packet`
/// servers are still deployed with (4 MiB; 16 MiB on MariaDB and 64 MiB on
/// MySQL 8 by default).
const BYTES_PER_STATEMENT: usize = 2 << 20;

/// The writes of one decision, one final write per row, in the order the
/// statements apply them.
#[derive(Default)]
struct Batches {
    updated_leases: Vec<LeaseRecord>,
    inserted_leases: Vec<LeaseRecord>,
    updated_jobs: Vec<Job>,
    inserted_jobs: Vec<Job>,
    rate_logs: Vec<(RateLimit, Vec<Timestamp>)>,
}

impl Batches {
    /// `writes` with only the last state of each row kept; a row inserted
    /// and then written again is inserted in its last state.
    fn of(writes: Vec<Write>) -> Self {
        let mut leases: Vec<(bool, LeaseRecord)> = Vec::new();
        let mut jobs: Vec<(bool, Job)> = Vec::new();
        let mut lease_at: HashMap<String, usize> = HashMap::new();
        let mut job_at: HashMap<String, usize> = HashMap::new();
        let mut batches = Batches::default();
        for write in writes {
            match write {
                Write::InsertLease(record) | Write::UpdateLease(record)
                    if lease_at.contains_key(&record.id) =>
                {
                    let at = lease_at[&record.id];
                    leases[at].1 = record;
                }
                Write::InsertLease(record) => {
                    lease_at.insert(record.id.clone(), leases.len());
                    leases.push((true, record));
                }
                Write::UpdateLease(record) => {
                    lease_at.insert(record.id.clone(), leases.len());
                    leases.push((false, record));
                }
                Write::InsertJob(job) | Write::UpdateJob(job) if job_at.contains_key(&job.id) => {
                    let at = job_at[&job.id];
                    jobs[at].1 = job;
                }
                Write::InsertJob(job) => {
                    job_at.insert(job.id.clone(), jobs.len());
                    jobs.push((true, job));
                }
                Write::UpdateJob(job) => {
                    job_at.insert(job.id.clone(), jobs.len());
                    jobs.push((false, job));
                }
                Write::SaveRateLog(limit, uses) => {
                    batches.rate_logs.retain(|(saved, _)| *saved != limit);
                    batches.rate_logs.push((limit, uses));
                }
            }
        }
        for (inserted, record) in leases {
            if inserted {
                batches.inserted_leases.push(record);
            } else {
                batches.updated_leases.push(record);
            }
        }
        for (inserted, job) in jobs {
            if inserted {
                batches.inserted_jobs.push(job);
            } else {
                batches.updated_jobs.push(job);
            }
        }
        batches
    }
}

/// The columns of a record's row, in [`LEASE_ROW`]'s order.
const LEASE_ROW: &str = "(?, ?, ?, ?, ?, ?)";
const LEASE_COLUMNS: &str =
    "INSERT INTO tenure_leases (id, active, expires_at, created_at, updated_at, body) VALUES ";
/// The columns of a job's row, in [`JOB_ROW`]'s order.
const JOB_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const JOB_COLUMNS: &str = "INSERT INTO tenure_jobs (id, queue, state, priority_rank, run_at, \
     created_at, updated_at, expires_at, capabilities, unique_key, unique_policy, unique_until, \
     body) VALUES ";

fn bind_lease(arguments: &mut MySqlArguments, record: &LeaseRecord) -> BindResult {
    let columns = rows::LeaseColumns::of(record);
    arguments.add(record.id.as_bytes())?;
    arguments.add(columns.active)?;
    arguments.add(columns.expires_at)?;
    arguments.add(columns.created_at)?;
    arguments.add(columns.updated_at)?;
    arguments.add(columns.body)
}

fn bind_job(arguments: &mut MySqlArguments, job: &Job) -> BindResult {
    let columns = rows::JobColumns::of(job);
    arguments.add(job.id.as_bytes())?;
    arguments.add(job.queue.as_bytes())?;
    arguments.add(columns.state)?;
    arguments.add(columns.priority_rank)?;
    arguments.add(columns.run_at)?;
    arguments.add(columns.created_at)?;
    arguments.add(columns.updated_at)?;
    arguments.add(columns.expires_at)?;
    arguments.add(columns.capabilities)?;
    arguments.add(columns.unique_key)?;
    arguments.add(columns.unique_policy)?;
    arguments.add(columns.unique_until)?;
    arguments.add(columns.body)
}

/// What binding one value answers.
pub(crate) type BindResult = std::result::Result<(), sqlx::error::BoxDynError>;

/// Sends `head`, then one `row` of values per item (bound by `bind`), then
/// `tail`, in statements of at most [`ROWS_PER_STATEMENT`] rows and
/// [`BYTES_PER_STATEMENT`] bytes (`size` estimates an item's).
async fn in_parts<T>(
    tx: &mut Transaction<'_, MySql>,
    (head, row, tail): (&str, &str, &str),
    items: &[T],
    size: impl Fn(&T) -> usize,
    bind: impl Fn(&mut MySqlArguments, &T) -> BindResult,
) -> std::result::Result<(), Conflict> {
    let mut start = 0;
    while start < items.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < items.len() && end - start < ROWS_PER_STATEMENT {
            let row_bytes = size(&items[end]);
            if end > start && bytes + row_bytes > BYTES_PER_STATEMENT {
                break;
            }
            bytes += row_bytes;
            end += 1;
        }
        let mut arguments = MySqlArguments::default();
        for item in &items[start..end] {
            bind(&mut arguments, item)
                .map_err(|error| Error::unavailable(format!("cannot bind a row: {error}")))?;
        }
        let values = vec![row; end - start].join(", ");
        sqlx::query_with(&format!("{head}{values}{tail}"), arguments)
            .execute(&mut **tx)
            .await?;
        start = end;
    }
    Ok(())
}

/// The size of a record's or job's body, the bulk of its row.
fn lease_size(record: &LeaseRecord) -> usize {
    serde_json::to_vec(record).map_or(0, |body| body.len())
}

fn job_size(job: &Job) -> usize {
    serde_json::to_vec(job).map_or(0, |body| body.len())
}

/// Applies the writes of a decision: every row in its last state, a few
/// multi-row statements per kind of write (updates as upserts of rows the
/// transaction holds locked).
async fn apply(
    tx: &mut Transaction<'_, MySql>,
    writes: Vec<Write>,
) -> std::result::Result<(), Conflict> {
    let batches = Batches::of(writes);
    in_parts(
        tx,
        (
            LEASE_COLUMNS,
            LEASE_ROW,
            " ON DUPLICATE KEY UPDATE active = VALUES(active), \
             expires_at = VALUES(expires_at), updated_at = VALUES(updated_at), \
             body = VALUES(body)",
        ),
        &batches.updated_leases,
        lease_size,
        bind_lease,
    )
    .await?;
    let released: Vec<String> = batches
        .updated_leases
        .iter()
        .filter(|record| !record.is_active())
        .map(|record| record.id.clone())
        .collect();
    for part in released.chunks(IDS_PER_READ) {
        sqlx::query_with(
            &format!(
                "DELETE FROM tenure_held_scopes WHERE lease_id IN {}",
                placeholders(part.len())
            ),
            bound(part)?,
        )
        .execute(&mut **tx)
        .await?;
    }
    in_parts(
        tx,
        (LEASE_COLUMNS, LEASE_ROW, ""),
        &batches.inserted_leases,
        lease_size,
        bind_lease,
    )
    .await?;
    for record in &batches.inserted_leases {
        // A new id has no scope rows: one there is left over from a
        // record deleted by hand, not a race to decide again.
        insert_scopes(tx, "tenure_lease_scopes", record, &record.scopes, "")
            .await
            .map_err(|conflict| match conflict {
                Conflict::Duplicate(error) => Conflict::Failed(Error::corrupt(format!(
                    "tenure_lease_scopes already holds rows for the new record {:?}, left \
                     over from a record deleted by hand: delete them ({})",
                    record.id,
                    error.message()
                ))),
                failed => failed,
            })?;
        if record.is_active() {
            // Over the rows the admission locked when it read them.
            // By key: slot k of a counted scope as `rules::slot_key`.
            let keys: Vec<_> = rules::held_keys(record).collect();
            insert_scopes(
                tx,
                "tenure_held_scopes",
                record,
                &keys,
                " ON DUPLICATE KEY UPDATE lease_id = VALUES(lease_id)",
            )
            .await?;
        }
    }
    in_parts(
        tx,
        (JOB_COLUMNS, JOB_ROW, ""),
        &batches.inserted_jobs,
        job_size,
        bind_job,
    )
    .await?;
    in_parts(
        tx,
        (
            JOB_COLUMNS,
            JOB_ROW,
            " ON DUPLICATE KEY UPDATE state = VALUES(state), \
             priority_rank = VALUES(priority_rank), run_at = VALUES(run_at), \
             updated_at = VALUES(updated_at), expires_at = VALUES(expires_at), \
             capabilities = VALUES(capabilities), body = VALUES(body)",
        ),
        &batches.updated_jobs,
        job_size,
        bind_job,
    )
    .await?;
    for (limit, uses) in &batches.rate_logs {
        rate::save(tx, limit, uses).await?;
    }
    Ok(())
}

/// One `(lease_id, scope)` row in `table` per one of `scopes` (`record`'s
/// scopes, or the keys it holds them by), with `on_duplicate` after the
/// values.
async fn insert_scopes<K: AsRef<str>>(
    tx: &mut Transaction<'_, MySql>,
    table: &str,
    record: &LeaseRecord,
    scopes: impl IntoIterator<Item = K>,
    on_duplicate: &str,
) -> std::result::Result<(), Conflict> {
    let scopes: Vec<K> = scopes.into_iter().collect();
    if scopes.is_empty() {
        return Ok(());
    }
    let mut arguments = MySqlArguments::default();
    for scope in &scopes {
        let scope = scope.as_ref();
        arguments
            .add(record.id.as_bytes())
            .and_then(|()| arguments.add(scope.as_bytes()))
            .map_err(|error| Error::unavailable(format!("cannot bind a scope: {error}")))?;
    }
    let values = vec!["(?, ?)"; scopes.len()].join(", ");
    sqlx::query_with(
        &format!("INSERT INTO {table} (lease_id, scope) VALUES {values}{on_duplicate}"),
        arguments,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

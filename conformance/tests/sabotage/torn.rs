//! A lease store whose operations are not atomic: the shared engine's
//! rules, over storage that each step locks on its own. It decides exactly
//! as an honest store does when calls do not overlap, so only the race
//! cases can tell it apart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine::{self, RecordTransaction};
use tenure_lease_core::backend::rate_rules::RateLogs;
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::stores::{Backend, LeaseBackend};
use tenure_lease_core::clock::Clock;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, Error, ExpiredQuery, ExpiredScan, LeaseRecord, ManualClock,
    Renewal, Result, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

/// Where the store lets other calls in.
#[derive(Debug, Clone, Copy)]
pub enum Gap {
    /// Between every read and the write that depends on it (a
    /// check-then-write store): racing writers both act on what they read.
    CheckThenWrite,
    /// Only between drawing a fence and locking the record: a store that
    /// draws its fence first, so a smaller fence can be written last.
    FenceBeforeLock,
    /// Only between the id check and the lock every other step runs under:
    /// a store that checks the id before it locks the scopes, so racing
    /// admissions of one id meet at the scopes and answer `Conflict`.
    IdCheckBeforeLock,
    /// Between a snapshot taken at the start and the commit, as an SQL
    /// store left at REPEATABLE READ or SERIALIZABLE: each operation reads
    /// its snapshot, and its commit fails with a retryable serialization
    /// error when another call wrote a record or scope it writes since the
    /// snapshot (first committer wins). Its answers are right whenever it
    /// answers, but contention comes back as `Err`, not as the outcome the
    /// contract names.
    SnapshotCommit,
}

/// How long a gap lasts: a few milliseconds, as a round trip would.
const GAP: Duration = Duration::from_millis(2);

#[derive(Default, Clone)]
struct Tables {
    records: HashMap<String, LeaseRecord>,
    holders: HashMap<String, String>,
    /// The commit that last wrote each record (`record:ID`) and scope
    /// (`scope:NAME`), for [`Gap::SnapshotCommit`].
    written_by: HashMap<String, u64>,
}

/// The torn store.
pub struct TornStore {
    tables: Mutex<Tables>,
    fence: AtomicU64,
    /// Commits so far, for [`Gap::SnapshotCommit`].
    commits: AtomicU64,
    clock: Arc<ManualClock>,
    gap: Gap,
}

impl TornStore {
    pub fn new(clock: Arc<ManualClock>, gap: Gap) -> Self {
        TornStore {
            tables: Mutex::default(),
            fence: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            clock,
            gap,
        }
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn draw_fence(&self) -> u64 {
        self.fence.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Runs `step` on the engine with this store's kind of transaction.
    fn run<T>(&self, step: impl FnOnce(&mut dyn Steps) -> Result<T>) -> Result<T> {
        match self.gap {
            Gap::CheckThenWrite => step(&mut Unlocked { store: self }),
            Gap::FenceBeforeLock => {
                let early = self.draw_fence();
                std::thread::sleep(GAP);
                let mut tables = self.tables();
                step(&mut Locked {
                    tables: &mut tables,
                    early: Some(early),
                    store: self,
                })
            }
            Gap::IdCheckBeforeLock => step(&mut IdFirst {
                store: self,
                tables: None,
            }),
            Gap::SnapshotCommit => {
                let (snapshot, began) = {
                    let tables = self.tables();
                    (tables.clone(), self.commits.load(Ordering::SeqCst))
                };
                let mut transaction = Snapshot {
                    tables: snapshot,
                    writes: Vec::new(),
                    store: self,
                };
                let answer = step(&mut transaction)?;
                std::thread::sleep(GAP);
                let mut tables = self.tables();
                let keys: Vec<String> = transaction
                    .writes
                    .iter()
                    .flat_map(|(record, _)| written_keys(record))
                    .collect();
                if keys.iter().any(|key| {
                    tables
                        .written_by
                        .get(key)
                        .is_some_and(|&commit| commit > began)
                }) {
                    return Err(Error::unavailable(
                        "could not serialize access due to concurrent update \
                         (the torn store's snapshot commit)",
                    ));
                }
                let commit = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
                for (record, holds) in &transaction.writes {
                    write_into(&mut tables, record, *holds);
                }
                for key in keys {
                    tables.written_by.insert(key, commit);
                }
                Ok(answer)
            }
        }
    }
}

/// The keys a write of `record` takes for [`Gap::SnapshotCommit`].
fn written_keys(record: &LeaseRecord) -> impl Iterator<Item = String> + '_ {
    std::iter::once(format!("record:{}", record.id))
        .chain(record.scopes.iter().map(|scope| format!("scope:{scope}")))
}

/// The engine's steps, object-safe so one `run` serves both gaps.
trait Steps {
    fn exists(&mut self, id: &str) -> bool;
    fn load(&mut self, id: &str) -> Option<LeaseRecord>;
    fn holder_of(&mut self, scope: &str) -> Option<String>;
    fn next_fence(&mut self) -> u64;
    fn write(&mut self, record: &LeaseRecord, holds: bool);
}

/// The torn store's bugs are in scopes and fences; it keeps no rate logs.
impl RateLogs for &mut dyn Steps {
    fn rate_log(&mut self, _: &RateLimit) -> Result<Vec<Timestamp>> {
        Err(Error::unavailable("the torn store keeps no rate logs"))
    }
    fn save_rate_log(&mut self, _: &RateLimit, _: &[Timestamp]) -> Result<()> {
        Err(Error::unavailable("the torn store keeps no rate logs"))
    }
}

impl RecordTransaction for &mut dyn Steps {
    fn exists(&mut self, id: &str) -> Result<bool> {
        Ok(Steps::exists(*self, id))
    }
    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        Ok(Steps::load(*self, id))
    }
    fn holder_of(&mut self, scope: &str) -> Result<Option<String>> {
        Ok(Steps::holder_of(*self, scope))
    }
    fn next_fence(&mut self) -> Result<u64> {
        Ok(Steps::next_fence(*self))
    }
    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        self.write(record, true);
        Ok(())
    }
    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        self.write(record, record.is_active());
        Ok(())
    }
}

fn write_into(tables: &mut Tables, record: &LeaseRecord, holds: bool) {
    for scope in &record.scopes {
        if holds {
            tables.holders.insert(scope.clone(), record.id.clone());
        } else if tables.holders.get(scope) == Some(&record.id) {
            tables.holders.remove(scope);
        }
    }
    tables.records.insert(record.id.clone(), record.clone());
}

/// Each step locks alone, and every read is followed by a gap.
struct Unlocked<'a> {
    store: &'a TornStore,
}

impl Steps for Unlocked<'_> {
    fn exists(&mut self, id: &str) -> bool {
        let found = self.store.tables().records.contains_key(id);
        std::thread::sleep(GAP);
        found
    }
    fn load(&mut self, id: &str) -> Option<LeaseRecord> {
        let found = self.store.tables().records.get(id).cloned();
        std::thread::sleep(GAP);
        found
    }
    fn holder_of(&mut self, scope: &str) -> Option<String> {
        let found = self.store.tables().holders.get(scope).cloned();
        std::thread::sleep(GAP);
        found
    }
    fn next_fence(&mut self) -> u64 {
        self.store.draw_fence()
    }
    fn write(&mut self, record: &LeaseRecord, holds: bool) {
        write_into(&mut self.store.tables(), record, holds);
    }
}

/// One lock for the whole operation, but the first fence drawn before it.
struct Locked<'a, 'b> {
    tables: &'a mut MutexGuard<'b, Tables>,
    early: Option<u64>,
    store: &'a TornStore,
}

impl Steps for Locked<'_, '_> {
    fn exists(&mut self, id: &str) -> bool {
        self.tables.records.contains_key(id)
    }
    fn load(&mut self, id: &str) -> Option<LeaseRecord> {
        self.tables.records.get(id).cloned()
    }
    fn holder_of(&mut self, scope: &str) -> Option<String> {
        self.tables.holders.get(scope).cloned()
    }
    fn next_fence(&mut self) -> u64 {
        self.early.take().unwrap_or_else(|| self.store.draw_fence())
    }
    fn write(&mut self, record: &LeaseRecord, holds: bool) {
        write_into(self.tables, record, holds);
    }
}

/// The id checked before the lock, with a gap; every other step under one
/// lock, taken at the first of them.
struct IdFirst<'a> {
    store: &'a TornStore,
    tables: Option<MutexGuard<'a, Tables>>,
}

impl IdFirst<'_> {
    fn locked(&mut self) -> &mut Tables {
        self.tables.get_or_insert_with(|| self.store.tables())
    }
}

impl Steps for IdFirst<'_> {
    fn exists(&mut self, id: &str) -> bool {
        if let Some(tables) = &self.tables {
            return tables.records.contains_key(id);
        }
        let found = self.store.tables().records.contains_key(id);
        std::thread::sleep(GAP);
        found
    }
    fn load(&mut self, id: &str) -> Option<LeaseRecord> {
        self.locked().records.get(id).cloned()
    }
    fn holder_of(&mut self, scope: &str) -> Option<String> {
        self.locked().holders.get(scope).cloned()
    }
    fn next_fence(&mut self) -> u64 {
        self.store.draw_fence()
    }
    fn write(&mut self, record: &LeaseRecord, holds: bool) {
        write_into(self.locked(), record, holds);
    }
}

/// Reads from a snapshot, writes kept for the commit.
struct Snapshot<'a> {
    tables: Tables,
    writes: Vec<(LeaseRecord, bool)>,
    store: &'a TornStore,
}

impl Steps for Snapshot<'_> {
    fn exists(&mut self, id: &str) -> bool {
        self.tables.records.contains_key(id)
    }
    fn load(&mut self, id: &str) -> Option<LeaseRecord> {
        self.tables.records.get(id).cloned()
    }
    fn holder_of(&mut self, scope: &str) -> Option<String> {
        self.tables.holders.get(scope).cloned()
    }
    fn next_fence(&mut self) -> u64 {
        self.store.draw_fence()
    }
    fn write(&mut self, record: &LeaseRecord, holds: bool) {
        write_into(&mut self.tables, record, holds);
        self.writes.push((record.clone(), holds));
    }
}

impl Backend for TornStore {
    const NAME: &'static str = "torn";
    const SYSTEM: &'static str = "torn";
}

tenure_lease_core::serve_lease_store!(TornStore);

#[async_trait]
impl LeaseBackend for TornStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get(), metadata.get().clone());
        let now = self.clock.now();
        self.run(|mut steps| engine::admit(&mut steps, now, request, metadata))
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let now = self.clock.now();
        self.run(|mut steps| engine::renew(&mut steps, now, claim, ttl))
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let now = self.clock.now();
        self.run(|mut steps| engine::renew_with_progress(&mut steps, now, claim, ttl, progress))
    }

    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let now = self.clock.now();
        self.run(|mut steps| engine::renew_many(&mut steps, now, claims, ttl))
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let now = self.clock.now();
        self.run(|mut steps| engine::transition(&mut steps, now, claim, change))
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        let now = self.clock.now();
        self.run(|mut steps| engine::claim_for_takeover(&mut steps, now, request))
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
        let now = self.clock.now();
        let mut records: Vec<LeaseRecord> = self
            .tables()
            .records
            .values()
            .filter(|record| rules::matches_expired(record, query.grace, query.created_before, now))
            .cloned()
            .collect();
        records.sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
        records.truncate(query.limit);
        Ok(ExpiredScan {
            records,
            skipped: Vec::new(),
        })
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        Ok(self.tables().records.get(id).cloned())
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get();
        let mut records: Vec<LeaseRecord> = self
            .tables()
            .records
            .values()
            .filter(|record| record.scopes.contains(scope))
            .cloned()
            .collect();
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let mut records: Vec<LeaseRecord> = self
            .tables()
            .records
            .values()
            .filter(|record| record.is_active())
            .cloned()
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(self.clock.now())
    }

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let now = self.clock.now();
        let mut tables = self.tables();
        let before = tables.records.len();
        tables
            .records
            .retain(|_, record| !rules::purgeable(record, terminal_older_than, now));
        Ok((before - tables.records.len()) as u64)
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let now = self.clock.now();
        Ok(self
            .tables()
            .records
            .values()
            .filter(|record| rules::purgeable(record, terminal_older_than, now))
            .count() as u64)
    }
}

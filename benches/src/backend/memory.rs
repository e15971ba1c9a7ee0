//! The memory backend; its baseline and peer are a bare `Mutex<HashMap>`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backend_memory::MemoryStore;
use lease_core::{JobQueue, LeaseStore};

use super::{Backend, PeerLock, PeerSession, RawBaseline};
use crate::options::BackendKind;
use crate::BenchResult;

/// A fresh [`MemoryStore`] and a bare map beside it.
pub(super) struct MemoryBackend {
    store: Arc<MemoryStore>,
    raw: Arc<RawMemory>,
}

impl MemoryBackend {
    pub(super) fn open() -> Self {
        MemoryBackend {
            store: Arc::new(MemoryStore::new()),
            raw: Arc::new(RawMemory::default()),
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Memory
    }

    fn store(&self) -> Arc<dyn LeaseStore> {
        self.store.clone()
    }

    fn queue(&self) -> Arc<dyn JobQueue> {
        self.store.clone()
    }

    fn raw(&self) -> Arc<dyn RawBaseline> {
        self.raw.clone()
    }

    fn peer(&self) -> Arc<dyn PeerLock> {
        self.raw.clone()
    }

    async fn cleanup(&self) -> BenchResult<()> {
        Ok(())
    }
}

struct RawLease {
    owner: String,
    fence: u64,
    expires_at: Instant,
}

#[derive(Default)]
struct RawState {
    leases: HashMap<String, RawLease>,
    queued: HashMap<String, VecDeque<String>>,
    claimed: HashMap<String, String>,
    locks: HashSet<String>,
}

/// The bare equivalent of every operation: one map under one mutex.
#[derive(Default)]
struct RawMemory {
    state: Arc<Mutex<RawState>>,
}

fn lock(state: &Mutex<RawState>) -> MutexGuard<'_, RawState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl RawMemory {
    fn lock(&self) -> MutexGuard<'_, RawState> {
        lock(&self.state)
    }
}

#[async_trait]
impl RawBaseline for RawMemory {
    fn describe(&self) -> &'static str {
        "Mutex<HashMap> insert / compare-and-set"
    }

    async fn insert(&self, key: &str, owner: &str, ttl: Duration) -> BenchResult<bool> {
        let mut state = self.lock();
        if state.leases.contains_key(key) {
            return Ok(false);
        }
        let lease = RawLease {
            owner: owner.to_owned(),
            fence: 1,
            expires_at: Instant::now() + ttl,
        };
        state.leases.insert(key.to_owned(), lease);
        Ok(true)
    }

    async fn cas(&self, key: &str, owner: &str, fence: u64, ttl: Duration) -> BenchResult<bool> {
        let mut state = self.lock();
        match state.leases.get_mut(key) {
            Some(lease) if lease.owner == owner && lease.fence == fence => {
                lease.expires_at = Instant::now() + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn seed_jobs(&self, queue: &str, count: usize) -> BenchResult<()> {
        let mut state = self.lock();
        let jobs = state.queued.entry(queue.to_owned()).or_default();
        let start = jobs.len();
        jobs.extend((start..start + count).map(|n| format!("{queue}-{n}")));
        Ok(())
    }

    async fn claim_job(&self, queue: &str, worker: &str) -> BenchResult<Option<String>> {
        let mut state = self.lock();
        let Some(id) = state.queued.get_mut(queue).and_then(VecDeque::pop_front) else {
            return Ok(None);
        };
        state.claimed.insert(id.clone(), worker.to_owned());
        Ok(Some(id))
    }

    async fn complete_job(&self, _queue: &str, id: &str, worker: &str) -> BenchResult<bool> {
        let mut state = self.lock();
        match state.claimed.get(id) {
            Some(owner) if owner == worker => Ok(state.claimed.remove(id).is_some()),
            _ => Ok(false),
        }
    }
}

#[async_trait]
impl PeerLock for RawMemory {
    fn describe(&self) -> &'static str {
        "Mutex<HashSet> try-insert"
    }

    async fn session(&self) -> BenchResult<Box<dyn PeerSession>> {
        Ok(Box::new(MemoryPeer {
            state: Arc::clone(&self.state),
        }))
    }
}

struct MemoryPeer {
    state: Arc<Mutex<RawState>>,
}

#[async_trait]
impl PeerSession for MemoryPeer {
    async fn try_acquire(&mut self, scope: &str, _ttl: Duration) -> BenchResult<bool> {
        Ok(lock(&self.state).locks.insert(scope.to_owned()))
    }

    async fn release(&mut self, scope: &str) -> BenchResult<()> {
        lock(&self.state).locks.remove(scope);
        Ok(())
    }
}

//! The memory backend; its baseline and peer are a bare `Mutex<HashMap>`.
//! Its wake-ups, shared with SQLite (the other store living in one
//! process), are per-scope FIFOs of tokio `oneshot` senders.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_backend_memory::MemoryStore;
use tokio::sync::oneshot;

use super::{Backend, PeerLock, PeerSession, RawBaseline, Teardown, WakeSession, WakeUps};
use crate::options::BackendKind;
use crate::BenchResult;

/// A fresh [`MemoryStore`] and a bare map beside it.
pub(super) fn open() -> Backend {
    let store = Arc::new(MemoryStore::new());
    let raw = Arc::new(RawMemory::default());
    Backend {
        kind: BackendKind::Memory,
        store: store.clone(),
        queue: store,
        raw: raw.clone(),
        peer: raw,
        wake_ups: Arc::new(InProcessWakeUps::default()),
        tables: None,
        server_time: None,
        teardown: Box::new(NothingToRemove),
    }
}

/// The memory store leaves nothing behind.
struct NothingToRemove;

#[async_trait]
impl Teardown for NothingToRemove {
    async fn teardown(&self) -> BenchResult<()> {
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
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    fn describe_batch(&self) -> &'static str {
        "n pops of a VecDeque, n removals from a HashMap, each under one lock"
    }

    async fn claim_jobs(
        &self,
        queue: &str,
        worker: &str,
        limit: usize,
    ) -> BenchResult<Vec<String>> {
        let mut state = self.lock();
        let ids: Vec<String> = match state.queued.get_mut(queue) {
            Some(jobs) => {
                let take = limit.min(jobs.len());
                jobs.drain(..take).collect()
            }
            None => Vec::new(),
        };
        for id in &ids {
            state.claimed.insert(id.clone(), worker.to_owned());
        }
        Ok(ids)
    }

    async fn complete_jobs(
        &self,
        _queue: &str,
        ids: &[String],
        worker: &str,
    ) -> BenchResult<Vec<bool>> {
        let mut state = self.lock();
        Ok(ids
            .iter()
            .map(|id| match state.claimed.get(id) {
                Some(owner) if owner == worker => state.claimed.remove(id).is_some(),
                _ => false,
            })
            .collect())
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

type WaitQueues = HashMap<String, VecDeque<oneshot::Sender<()>>>;

/// Wait queues of a store that lives in one process: per scope, the senders
/// that wake its waiters, oldest first.
#[derive(Default)]
pub(super) struct InProcessWakeUps {
    queues: Arc<Mutex<WaitQueues>>,
}

#[async_trait]
impl WakeUps for InProcessWakeUps {
    fn describe(&self) -> &'static str {
        "per-scope FIFO of tokio oneshot senders (in process)"
    }

    async fn session(&self) -> BenchResult<Box<dyn WakeSession>> {
        Ok(Box::new(InProcessWaiter {
            queues: Arc::clone(&self.queues),
            wake_up: None,
        }))
    }
}

struct InProcessWaiter {
    queues: Arc<Mutex<WaitQueues>>,
    /// Answers when a release pops this waiter's sender.
    wake_up: Option<oneshot::Receiver<()>>,
}

impl InProcessWaiter {
    fn queues(&self) -> MutexGuard<'_, WaitQueues> {
        self.queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl WakeSession for InProcessWaiter {
    async fn enqueue(&mut self, scope: &str) -> BenchResult<()> {
        let (wake, wake_up) = oneshot::channel();
        self.queues()
            .entry(scope.to_owned())
            .or_default()
            .push_back(wake);
        self.wake_up = Some(wake_up);
        Ok(())
    }

    async fn wait(&mut self, timeout: Duration) -> BenchResult<bool> {
        let mut wake_up = self.wake_up.take().ok_or("wait without enqueue")?;
        match tokio::time::timeout(timeout, &mut wake_up).await {
            Ok(woken) => woken.map(|()| true).map_err(Into::into),
            Err(_) => {
                // Closing makes a later pop skip this sender; a wake-up sent
                // just before is still there to take.
                wake_up.close();
                Ok(wake_up.try_recv().is_ok())
            }
        }
    }

    async fn wake_next(&mut self, scope: &str) -> BenchResult<bool> {
        let mut queues = self.queues();
        let Some(queue) = queues.get_mut(scope) else {
            return Ok(false);
        };
        // Senders of waiters that timed out are closed: skip them.
        let woke = std::iter::from_fn(|| queue.pop_front()).any(|wake| wake.send(()).is_ok());
        if queue.is_empty() {
            queues.remove(scope);
        }
        Ok(woke)
    }
}

//! Helpers shared by the keeper test crates: a memory store behind the
//! fault-injection layer (leases and jobs), a store clock that can jump
//! ahead of tokio's, and the keeper settings the tests use.
//!
//! Each test crate uses a part of these, hence the `dead_code` allowance.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_backend_memory::MemoryStore;
use tenure_keeper::{Keeper, KeeperConfig};
pub use tenure_lease_core::layer::Fault;
use tenure_lease_core::layer::{Answer, Faults, Hook, LayerExt, Layered, Operation, Pending};
use tenure_lease_core::{Clock, Timestamp, TokioClock};
use tokio::time::Instant;

pub const TTL: Duration = Duration::from_secs(3);
pub const BEAT: Duration = Duration::from_secs(1);

/// Store time = tokio time + an offset the test can jump forward, to stand
/// for a peer that sees a lease expired while its owner does not know yet.
#[derive(Debug)]
pub struct OffsetClock {
    base: TokioClock,
    offset: Mutex<Duration>,
}

impl OffsetClock {
    pub fn jump(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        tenure_lease_core::clock::add(self.base.now(), *self.offset.lock().unwrap())
    }
}

/// The operations the tests inject faults into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Renew,
    RenewMany,
    Transition,
    Takeover,
    ListExpired,
    Get,
    Claim,
    RenewJob,
    RenewJobs,
    Complete,
    Fail,
}

impl Op {
    /// The operation's name, as a hook sees it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Renew => "renew",
            Op::RenewMany => "renew_many",
            Op::Transition => "transition",
            Op::Takeover => "claim_for_takeover",
            Op::ListExpired => "list_expired",
            Op::Get => "get",
            Op::Claim => "claim",
            Op::RenewJob => "renew_job",
            Op::RenewJobs => "renew_jobs",
            Op::Complete => "complete",
            Op::Fail => "fail",
        }
    }
}

/// The memory store (on an [`OffsetClock`]) behind the fault-injection
/// layer.
pub type FaultyStore = Layered<MemoryStore, TestFaults>;

/// The injected faults, and the store's clock.
pub struct TestFaults {
    pub faults: Faults,
    pub clock: Arc<OffsetClock>,
}

impl Hook for TestFaults {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        self.faults.call(operation, call)
    }
}

/// What the tests do with a [`FaultyStore`].
pub trait FaultControl {
    fn inject(&self, op: Op, id: Option<&str>, fault: Fault);
    fn clear(&self);
    fn release_hangs(&self);
    fn calls(&self, op: Op) -> usize;
    fn hangs_dropped(&self) -> usize;
    fn clock(&self) -> &OffsetClock;
}

/// A fresh memory store on its own clock, with no faults yet.
pub fn faulty_store() -> Arc<FaultyStore> {
    let clock = Arc::new(OffsetClock {
        base: TokioClock::new(),
        offset: Mutex::new(Duration::ZERO),
    });
    let faults = TestFaults {
        faults: Faults::new(),
        clock: clock.clone(),
    };
    Arc::new(MemoryStore::with_clock(clock).layer(faults))
}

impl FaultControl for FaultyStore {
    fn inject(&self, op: Op, id: Option<&str>, fault: Fault) {
        self.hook().faults.inject(op.name(), id, fault);
    }
    fn clear(&self) {
        self.hook().faults.clear();
    }
    fn release_hangs(&self) {
        self.hook().faults.release_hangs();
    }
    fn calls(&self, op: Op) -> usize {
        self.hook().faults.calls(op.name())
    }
    fn hangs_dropped(&self) -> usize {
        self.hook().faults.hangs_dropped()
    }
    fn clock(&self) -> &OffsetClock {
        &self.hook().clock
    }
}

pub struct CountDrop(pub Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// ttl 3 s, beat 1 s, reconciler only on demand, failing orphans.
pub fn config() -> KeeperConfig {
    KeeperConfig::with_ttl(TTL).auto_reconcile(false)
}

pub fn start(store: &Arc<FaultyStore>, config: KeeperConfig) -> Keeper {
    Keeper::builder(store.clone(), config).start().unwrap()
}

pub async fn at(start: Instant, offset: Duration) {
    tokio::time::sleep_until(start + offset).await;
}

pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A minimal `tracing` subscriber that hands every event to `on_event`,
/// its fields rendered as `name=value` text (the message as `message=...`).
pub struct OnEvent<F>(pub F);

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<F: Fn(String) + Send + Sync + 'static> tracing::Subscriber for OnEvent<F> {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = FieldText(String::new());
        event.record(&mut text);
        (self.0)(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

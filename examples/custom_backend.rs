//! Your own backend, proven by the conformance kit in a few lines.
//!
//! Here the "backend" is the memory store with a layer that counts the
//! operations reaching it: any type implementing `LeaseStore` runs the same
//! way. A layer ([`tenure::layer`]) wraps every operation of a store once,
//! so no operation can be forgotten (a hand-written wrapper that forgets
//! `renew_many` silently turns every batch renewal into one round trip per
//! lease). Give the kit a `Factory` that creates a fresh, isolated store per
//! case, then either call `tenure_conformance::run_all` (below) or put
//! `tenure_conformance::tenure_conformance!(CountingFactory);` in a test file
//! to get one named test per case.
//!
//! `cargo run --example custom_backend`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tenure::layer::{Answer, Hook, LayerExt, Layered, Operation, Pending};
use tenure::memory::MemoryStore;
use tenure::ManualClock;
use tenure_conformance::{ClockControl, Factory, Subject};

/// Counts every operation but `now` (which the kit calls to read the
/// clock).
#[derive(Default)]
struct Counting(AtomicU64);

impl Hook for Counting {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        if operation.name != "now" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        call
    }
}

/// A fresh store per case, on a clock the kit may move.
struct CountingFactory;

#[async_trait]
impl Factory for CountingFactory {
    type Store = Layered<MemoryStore, Counting>;

    async fn create(&self) -> tenure::Result<Subject<Self::Store>> {
        let clock = Arc::new(ManualClock::starting_now());
        Ok(Subject {
            store: MemoryStore::with_clock(clock.clone()).layer(Counting::default()),
            clock: ClockControl::Manual(clock),
        })
    }
}

#[tokio::main]
async fn main() {
    let report = tenure_conformance::run_all(&CountingFactory).await;
    println!("{report}");
    if !report.all_passed() {
        std::process::exit(1);
    }
}

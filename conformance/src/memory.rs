//! The reference factory: the kit run against `backend-memory` on a manual
//! clock. It is also the smallest template for a factory of your own.

use std::sync::Arc;

use async_trait::async_trait;
use tenure_backend_memory::MemoryStore;
use tenure_lease_core::{Clock, ManualClock};

use crate::capability::nemesis::NemesisSupport;
use crate::harness::{ClockControl, Factory, Footprint, FootprintProbe, Subject};
use crate::offset_clock::{ClockOffsetter, OffsetClock};
use crate::reopen::Reopener;

/// Creates a fresh [`MemoryStore`] on its own [`ManualClock`] per case.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

#[async_trait]
impl Factory for MemoryFactory {
    type Store = MemoryStore;

    async fn create(&self) -> tenure_lease_core::Result<Subject<MemoryStore>> {
        let clock = Arc::new(ManualClock::starting_now());
        Ok(Subject {
            store: MemoryStore::with_clock(clock.clone()),
            clock: ClockControl::Manual(clock),
        })
    }

    fn footprint_probe(&self) -> Option<FootprintProbe<MemoryStore>> {
        Some(Arc::new(|store: Arc<MemoryStore>| {
            Box::pin(async move {
                Ok(store
                    .footprint()
                    .into_iter()
                    .map(|(name, entries)| (name.to_owned(), entries as u64))
                    .collect::<Footprint>())
            })
        }))
    }

    fn nemeses(&self) -> Option<&dyn NemesisSupport<MemoryStore>> {
        Some(self)
    }

    /// A clone: every clone of a memory store shares its state, which is
    /// all a process can reopen.
    fn reopen(&self) -> Option<Reopener<MemoryStore>> {
        Some(Arc::new(|store: Arc<MemoryStore>| {
            Box::pin(async move { Ok(MemoryStore::clone(&store)) })
        }))
    }

    /// A fresh memory store on an [`OffsetClock`] (a memory store's state
    /// cannot be shared across clocks).
    fn clock_offset(&self) -> Option<ClockOffsetter<MemoryStore>> {
        Some(Arc::new(|_store: Arc<MemoryStore>, offset| {
            Box::pin(
                async move { Ok(MemoryStore::with_clock(Arc::new(OffsetClock(offset))).into()) },
            )
        }))
    }
}

/// A memory store reads the clock it is given.
#[async_trait]
impl NemesisSupport<MemoryStore> for MemoryFactory {
    async fn create_on_clock(
        &self,
        clock: Arc<dyn Clock>,
    ) -> tenure_lease_core::Result<MemoryStore> {
        Ok(MemoryStore::with_clock(clock))
    }

    fn reads_given_clock(&self) -> bool {
        true
    }
}

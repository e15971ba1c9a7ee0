//! [`GateBackend`] for [`MemoryStore`]: the gates live in the locked state,
//! judged by the shared [`gate_rules`].

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{FenceCheck, GateRecord, Result, Timestamp};

use crate::MemoryStore;

/// The gate of one resource: the highest fence accepted, and when the last
/// accepted check was.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gate {
    fence: u64,
    checked_at: Timestamp,
}

/// Every gate, by resource.
pub(crate) type Gates = foldhash::HashMap<String, Gate>;

#[async_trait]
impl GateBackend for MemoryStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let now = self.now();
        let mut state = self.lock();
        let highest = state.gates.get(resource).map(|gate| gate.fence);
        let check = gate_rules::judge_fence(highest, fence);
        if check.is_accepted() {
            let gate = Gate {
                fence,
                checked_at: now,
            };
            state.gates.insert(resource.to_owned(), gate);
        }
        Ok(check)
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get();
        Ok(self.lock().gates.get(resource).map(|gate| gate.fence))
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        let now = self.now();
        let mut state = self.lock();
        let before = state.gates.len();
        state
            .gates
            .retain(|_, gate| !gate_rules::gate_purgeable(gate.checked_at, unused_for, now));
        Ok((before - state.gates.len()) as u64)
    }

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let after = after.map(Checked::get);
        let state = self.lock();
        let mut gates: Vec<GateRecord> = state
            .gates
            .iter()
            .filter(|(resource, _)| after.is_none_or(|after| resource.as_str() > after))
            .map(|(resource, gate)| GateRecord::new(resource.clone(), gate.fence, gate.checked_at))
            .collect();
        gates.sort_unstable_by(|a, b| a.resource.cmp(&b.resource));
        gates.truncate(limit.get());
        Ok(gates)
    }
}

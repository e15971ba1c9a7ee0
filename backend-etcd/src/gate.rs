//! [`GateBackend`] for [`EtcdStore`]: one key per gate, judged by the shared
//! [`gate_rules`].

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{FenceCheck, Result, Timestamp};

use crate::kv::{Reads, Tx};
use crate::records::encode;
use crate::EtcdStore;

/// A gate as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Gate {
    fence: u64,
    checked_at: Timestamp,
}

impl EtcdStore {
    /// The gate of `resource`, checked.
    fn load_gate(&self, tx: &mut Tx<'_>, resource: &str) -> Result<Option<Gate>> {
        let Some(bytes) = tx.read(&self.keys.gate(resource))? else {
            return Ok(None);
        };
        let gate: Gate = serde_json::from_slice(&bytes)
            .map_err(|error| gate_rules::undecodable_gate(resource, &error.to_string()))?;
        let stored = i64::try_from(gate.fence).unwrap_or(i64::MAX);
        gate_rules::stored_gate_fence(resource, stored)?;
        Ok(Some(gate))
    }
}

#[async_trait]
impl GateBackend for EtcdStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        self.runner
            .run(Reads::keys([self.keys.gate(resource)]), |tx| {
                let highest = self.load_gate(tx, resource)?.map(|gate| gate.fence);
                let check = gate_rules::judge_fence(highest, fence);
                if check.is_accepted() {
                    let gate = Gate {
                        fence,
                        checked_at: tx.now(),
                    };
                    tx.put(&self.keys.gate(resource), encode(&gate));
                }
                Ok(check)
            })
            .await
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get();
        self.runner
            .run(Reads::keys([self.keys.gate(resource)]), |tx| {
                Ok(self.load_gate(tx, resource)?.map(|gate| gate.fence))
            })
            .await
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        self.delete_in_parts(self.keys.gates(), |_, bytes, now| {
            serde_json::from_slice::<Gate>(bytes)
                .is_ok_and(|gate| gate_rules::gate_purgeable(gate.checked_at, unused_for, now))
        })
        .await
    }
}

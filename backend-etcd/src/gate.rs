//! [`GateBackend`] for [`EtcdStore`]: one key per gate, judged by the shared
//! [`gate_rules`].
//!
//! A gate's key is its resource name as it is, unescaped
//! (`<prefix>/g/<resource>`), and etcd keeps keys in byte order, so the
//! gates lie in byte order of their names: `list_fences` is one range read,
//! from the first key past `after`'s (that key with a 0 byte appended) to
//! the end of the gates' prefix, at most `limit` keys. It costs the page it
//! answers, not the gates kept, and compares and writes nothing.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{Error, FenceCheck, GateRecord, Result, Timestamp};

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
        decode_gate(resource, &bytes).map(Some)
    }
}

/// `bytes` as the gate of `resource`, checked: `Corrupt` for what no check
/// stores (not a gate's JSON, or a fence out of range).
fn decode_gate(resource: &str, bytes: &[u8]) -> Result<Gate> {
    let gate: Gate = serde_json::from_slice(bytes)
        .map_err(|error| gate_rules::undecodable_gate(resource, &error.to_string()))?;
    let stored = i64::try_from(gate.fence).unwrap_or(i64::MAX);
    gate_rules::stored_gate_fence(resource, stored)?;
    Ok(gate)
}

/// The gate one key of a listing holds, `prefix` being the gates': its
/// name past the prefix and its decoded value, or `Corrupt`, also for a
/// name that is not UTF-8 (which no check writes).
fn listed_gate(prefix: &str, key: &[u8], value: &[u8]) -> Result<GateRecord> {
    let name = key.strip_prefix(prefix.as_bytes()).ok_or_else(|| {
        Error::unavailable(format!(
            "etcd answered the key {:?} outside the gates' range",
            String::from_utf8_lossy(key)
        ))
    })?;
    let resource = std::str::from_utf8(name).map_err(|_| {
        gate_rules::undecodable_gate(&String::from_utf8_lossy(name), "its name is not UTF-8")
    })?;
    let gate = decode_gate(resource, value)?;
    Ok(GateRecord::new(resource, gate.fence, gate.checked_at))
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

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let limit = limit.get();
        let prefix = self.keys.gates();
        let from = match after.map(Checked::get) {
            // Nothing sorts between a key and that key with a 0 byte
            // appended: the range starts strictly after `after`.
            Some(after) => {
                let mut key = self.keys.gate(after).into_bytes();
                key.push(0);
                key
            }
            None => prefix.as_bytes().to_vec(),
        };
        let listed = self
            .runner
            .cluster
            .range(
                from,
                self.keys.gates_end(),
                i64::try_from(limit).unwrap_or(i64::MAX),
            )
            .await?;
        listed
            .iter()
            .take(limit)
            .map(|kv| listed_gate(prefix, kv.key(), kv.value()))
            .collect()
    }
}

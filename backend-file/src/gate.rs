//! [`GateBackend`] for [`FileStore`]: the gates live in the document beside
//! the records, judged by the shared [`gate_rules`]; a check and the raise
//! it answers are one write of the file. The gates are a map ordered by
//! resource, byte by byte, so a listing is one range of it.

use std::ops::Bound;
use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{FenceCheck, GateRecord, Result};

use crate::document::{self, Document, Gate};
use crate::FileStore;

impl Document {
    /// The highest fence accepted for `resource`, if any.
    fn highest(&self, resource: &str) -> Result<Option<u64>> {
        self.gates
            .get(resource)
            .map(|value| document::gate(resource, value).map(|gate| gate.fence))
            .transpose()
    }
}

#[async_trait]
impl GateBackend for FileStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let resource = resource.to_owned();
        self.write(move |document, now| {
            let check = gate_rules::judge_fence(document.highest(&resource)?, fence);
            if check.is_accepted() {
                let gate = Gate {
                    fence,
                    checked_at: now,
                };
                document.gates.insert(resource, document::encode(&gate)?);
            }
            Ok(check)
        })
        .await
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get().to_owned();
        self.read(move |document, _| document.highest(&resource))
            .await
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        self.write(move |document, now| {
            let before = document.gates.len();
            // What cannot be decoded cannot be judged: it stays.
            document.gates.retain(|resource, value| {
                !document::gate(resource, value)
                    .is_ok_and(|gate| gate_rules::gate_purgeable(gate.checked_at, unused_for, now))
            });
            Ok((before - document.gates.len()) as u64)
        })
        .await
    }

    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let after = after.map(|after| after.get().to_owned());
        let limit = limit.get();
        self.read(move |document, _| {
            let start = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            document
                .gates
                .range::<str, _>((start, Bound::Unbounded))
                .take(limit)
                .map(|(resource, value)| {
                    let gate = document::gate(resource, value)?;
                    Ok(GateRecord::new(
                        resource.clone(),
                        gate.fence,
                        gate.checked_at,
                    ))
                })
                .collect()
        })
        .await
    }
}

//! [`FenceStore`] for [`FileStore`]: the gates live in the document beside
//! the records, judged by the shared [`gate_rules`]; a check and the raise
//! it answers are one write of the file.

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::gate_rules;
use tenure_lease_core::backend::validate::operation as validate;
use tenure_lease_core::{FenceCheck, FenceStore, Result};

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
impl FenceStore for FileStore {
    async fn check_fence(&self, resource: &str, fence: u64) -> Result<FenceCheck> {
        validate::check_fence(resource, fence)?;
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

    async fn highest_fence(&self, resource: &str) -> Result<Option<u64>> {
        validate::highest_fence(resource)?;
        let resource = resource.to_owned();
        self.read(move |document, _| document.highest(&resource))
            .await
    }

    async fn purge_fences(&self, unused_for: Duration) -> Result<u64> {
        validate::purge_fences(unused_for)?;
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
}

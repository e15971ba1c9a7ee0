//! The [`LeaseBackend`] side of [`RedisStore`]: one Lua script per operation
//! (`src/lua/`), each judging by the same rules as every other backend
//! ([`tenure_lease_core::backend::rules`]) before it writes.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::FromRedisValue;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::stores::LeaseBackend;
use tenure_lease_core::release::{ReleaseBoard, Releases};
use tenure_lease_core::{
    clock, Admission, AdmitRequest, AdmitStrategy, Claim, Error, ExpiredQuery, ExpiredScan,
    LeaseRecord, Renewal, Result, StatusChange, Takeover, TakeoverAction, TakeoverRequest,
    Timestamp, Transition,
};

use crate::scripts::SCRIPTS;
use crate::{decode, micros, optional, RedisStore, PURGE_BATCH, RENEW_BATCH};

#[async_trait]
impl LeaseBackend for RedisStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        _metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let request = request.get();
        let strategy = match request.strategy {
            AdmitStrategy::Reject => "reject",
            AdmitStrategy::Interrupt => "interrupt",
        };
        let scopes = serde_json::Value::Array(
            request
                .scopes
                .iter()
                .cloned()
                .map(serde_json::Value::String)
                .collect(),
        );
        let mut invocation = SCRIPTS.admit.prepare_invoke();
        invocation
            .key(self.keys.fence())
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.record(&request.id))
            .key(self.keys.terminal());
        for scope in &request.scopes {
            invocation.key(self.keys.holder(scope));
        }
        for scope in &request.scopes {
            invocation.key(self.keys.scope(scope));
        }
        invocation
            .arg(self.keys.prefix())
            .arg(&request.id)
            .arg(&request.owner)
            .arg(&request.kind)
            .arg(
                request
                    .ttl
                    .map(|ttl| micros(ttl).to_string())
                    .unwrap_or_default(),
            )
            .arg(strategy)
            .arg(clock::micros_rounded_up(request.grace))
            .arg(request.metadata.to_string())
            .arg(scopes.to_string())
            .arg(rules::INTERRUPTED_BY_ADMISSION);
        self.add_rate_limit(&mut invocation, request.rate_limit.as_ref());
        invocation.arg(capacities(request));
        decode::admission(self.script(&invocation).await?, request)
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        self.renew_one(claim, ttl, None).await
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        self.renew_one(claim, ttl, Some(progress)).await
    }

    /// One script call per [`RENEW_BATCH`] claims. A batch split over
    /// several calls that fails part way answers `Err`, although earlier
    /// calls may have renewed their claims (the outcome is unknown, as every
    /// `Err` says).
    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        let mut outcomes = Vec::with_capacity(claims.len());
        for batch in claims.chunks(RENEW_BATCH) {
            outcomes.extend(self.renew_batch(batch, ttl, None).await?);
        }
        Ok(outcomes)
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let (has_error, error) = optional(change.error.as_deref());
        let (has_stop, stop) = optional(change.stop_reason.as_deref());
        let mut invocation = SCRIPTS.transition.prepare_invoke();
        invocation
            .key(self.keys.record(&claim.id))
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.terminal())
            .arg(self.keys.prefix())
            .arg(&claim.id)
            .arg(&claim.owner)
            .arg(claim.fence)
            .arg(change.status.as_str())
            .arg(has_error)
            .arg(error)
            .arg(has_stop)
            .arg(stop);
        decode::transition(self.script(&invocation).await?)
    }

    async fn releases(&self) -> Result<Option<Releases>> {
        if self.primary.client().is_none() {
            return Ok(self.in_process.as_ref().map(ReleaseBoard::subscribe));
        }
        let channel = format!("{}released", self.keys.prefix());
        let releases = self
            .releases
            .subscribe(|board| {
                crate::releases::listen(
                    Arc::clone(&self.primary),
                    channel,
                    self.config.connect_timeout,
                    board,
                )
            })
            .await?;
        Ok(Some(releases))
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        let (action, error, stop_reason, ttl) = match &request.action {
            TakeoverAction::Fail { error, stop_reason } => {
                ("fail", error.as_str(), stop_reason.as_deref(), None)
            }
            TakeoverAction::Adopt { ttl } => ("adopt", "", None, *ttl),
        };
        let (has_stop, stop) = optional(stop_reason);
        let mut invocation = SCRIPTS.takeover.prepare_invoke();
        invocation
            .key(self.keys.record(&request.id))
            .key(self.keys.fence())
            .key(self.keys.expiry())
            .key(self.keys.active())
            .key(self.keys.terminal())
            .arg(self.keys.prefix())
            .arg(&request.id)
            .arg(&request.claimer)
            .arg(clock::micros_rounded_up(request.grace))
            .arg(action)
            .arg(error)
            .arg(has_stop)
            .arg(stop)
            .arg(ttl.map(|ttl| micros(ttl).to_string()).unwrap_or_default());
        decode::takeover(self.script(&invocation).await?, request.grace)
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
        let mut invocation = SCRIPTS.list_expired.prepare_invoke();
        invocation
            .key(self.keys.expiry())
            .arg(self.keys.prefix())
            .arg(clock::micros_rounded_up(query.grace))
            .arg(
                query
                    .created_before
                    .map(|cutoff| tenure_lease_core::clock::to_micros(cutoff).to_string())
                    .unwrap_or_default(),
            )
            .arg(query.limit);
        decode::expired(self.script(&invocation).await?, query)
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        let mut invocation = SCRIPTS.get.prepare_invoke();
        invocation.key(self.keys.record(id)).arg(id);
        Ok(decode::records(self.script(&invocation).await?)?.pop())
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get();
        let mut records = self.list_index(self.keys.scope(scope)).await?;
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let mut records = self.list_index(self.keys.active()).await?;
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn now(&self) -> Result<Timestamp> {
        decode::server_time(self.command(&redis::cmd("TIME")).await?)
    }

    /// Deletes in batches of up to 1000 records and 1000 ended rate logs,
    /// one script call each, until a batch finds fewer of both: each batch
    /// is atomic, the whole purge is not (it needs not be: a record due
    /// stays due, since the one write an interrupted record may still take,
    /// `Failed`, moves it in the index; a log written meanwhile is live
    /// again, and its index entry says so). Only records interrupted by this
    /// version or later are in the index this walks: one interrupted under
    /// an older version stays until it is finalised as `Failed` or
    /// [`RedisStore::delete_namespace`] runs. The rate logs deleted are not
    /// counted in the answer.
    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let mut purged = 0_u64;
        loop {
            let mut invocation = SCRIPTS.purge.prepare_invoke();
            invocation
                .key(self.keys.terminal())
                .key(self.keys.rates())
                .arg(self.keys.prefix())
                .arg(clock::micros_rounded_up(terminal_older_than))
                .arg(PURGE_BATCH);
            let (records, logs) =
                <(u64, u64)>::from_redis_value(self.script(&invocation).await?)
                    .map_err(|error| Error::corrupt(format!("purge.lua answered {error}")))?;
            purged = purged.saturating_add(records);
            if records < PURGE_BATCH as u64 && logs < PURGE_BATCH as u64 {
                return Ok(purged);
            }
        }
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let mut invocation = SCRIPTS.count_purgeable.prepare_invoke();
        invocation
            .key(self.keys.terminal())
            .arg(clock::micros_rounded_up(terminal_older_than.get()));
        u64::from_redis_value(self.script(&invocation).await?)
            .map_err(|error| Error::corrupt(format!("count_purgeable.lua answered {error}")))
    }
}

/// The capacities `admit.lua` takes (its ARGV[14]): empty without a counted
/// scope, else one per scope in scope order, 0 for an exclusive one,
/// separated by spaces.
fn capacities(request: &AdmitRequest) -> String {
    if request.capacities.is_empty() {
        return String::new();
    }
    let each: Vec<String> = request
        .scopes
        .iter()
        .map(|scope| {
            request
                .capacities
                .get(scope)
                .copied()
                .unwrap_or(0)
                .to_string()
        })
        .collect();
    each.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_are_empty_without_a_counted_scope_else_one_per_scope_in_order() {
        let plain = AdmitRequest::new("a", "w").scope("x").scope("y");
        assert_eq!(capacities(&plain), "");
        let counted = AdmitRequest::new("a", "w")
            .scope("z")
            .counted_scope("b", 1000)
            .scope("a")
            .counted_scope("y", 1);
        assert_eq!(capacities(&counted), "0 1000 1 0");
    }
}

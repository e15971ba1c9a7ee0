//! The [`GateBackend`] side of [`RedisStore`], and
//! [`RedisStore::write_fenced`]: one Lua script per operation
//! (`src/lua/`, with the gate prelude `gate_common.lua`), judging by
//! [`tenure_lease_core::backend::gate_rules`] before it writes.
//!
//! `list_fences` is the exception, and costs O(number of gates): the gate
//! index is a sorted set scored by the time of each gate's last accepted
//! check (what `purge_fences` walks), so it cannot answer a range of
//! names. The listing reads every name in the index (one `ZRANGE`, the
//! whole index over the wire), keeps those after `after` and orders them
//! by bytes here (a heap: linear in the gates, then logarithmic per gate
//! listed; Lua compares strings by the server's locale, not by bytes),
//! then reads the fences and stamps of the page's gates in one read-only
//! script (`list_fences.lua`). Two round trips, then, and more only when
//! gates of the page were purged between them (the next names fill the
//! page). The page is not read at one instant with the names: a gate
//! raised or purged meanwhile may or may not be listed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use async_trait::async_trait;
use redis::FromRedisValue;
use tenure_lease_core::backend::checked::{self, Checked};
use tenure_lease_core::backend::stores::GateBackend;
use tenure_lease_core::{clock, Error, FenceCheck, GateRecord, Result};

use crate::scripts::SCRIPTS;
use crate::{decode, RedisStore, PURGE_BATCH};

impl RedisStore {
    /// Checks `fence` at `resource`'s gate, as
    /// [`check_fence`](tenure_lease_core::FenceStore::check_fence) does, and when it is
    /// accepted sets `key` to `value` (`SET`, no expiry) in the same script:
    /// a stale owner's value is never written, and no newer owner's check
    /// can come between the check and the write.
    ///
    /// ```no_run
    /// # async fn example(store: &tenure_backend_redis::RedisStore, fence: u64) -> tenure_lease_core::Result<()> {
    /// use tenure_lease_core::FenceCheck;
    ///
    /// match store.write_fenced("report", fence, "app:report:latest", b"{\"rows\": 42}").await? {
    ///     FenceCheck::Accepted => println!("written"),
    ///     refused => println!("not written, this worker must stop: {refused:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// `key` is the caller's, outside the store's namespace; on a Redis
    /// Cluster it must hash to the namespace's slot (put the namespace's
    /// hash tag, `{<namespace>}`, in it).
    ///
    /// # Errors
    ///
    /// * [`ErrorKind::InvalidInput`](tenure_lease_core::ErrorKind::InvalidInput)
    ///   as for `check_fence`, or for an empty `key` or one inside the
    ///   store's namespace (it would overwrite what the store keeps);
    /// * the store's errors, `Corrupt` when the stored gate cannot be
    ///   decoded (nothing is written).
    ///
    /// # Cancellation
    ///
    /// A dropped call may have checked and written, or neither, never one
    /// without the other. Retrying with the same fence is safe: an equal
    /// fence is accepted again and writes the same value.
    pub async fn write_fenced(
        &self,
        resource: &str,
        fence: u64,
        key: &str,
        value: &[u8],
    ) -> Result<FenceCheck> {
        let (resource, fence) = checked::fence_check(resource, fence)?;
        let (resource, fence) = (resource.get(), fence.get());
        if key.is_empty() {
            return Err(Error::invalid_input("key", "must not be empty"));
        }
        if key.starts_with(self.keys.prefix()) {
            return Err(Error::invalid_input(
                "key",
                format_args!(
                    "{key:?} is inside the store's namespace ({}); write to a key of your own",
                    self.keys.prefix()
                ),
            ));
        }
        let mut invocation = SCRIPTS.write_fenced.prepare_invoke();
        invocation
            .key(self.keys.gate(resource))
            .key(self.keys.gates())
            .key(key)
            .key(self.keys.fence())
            .arg(resource)
            .arg(fence)
            .arg(value)
            .arg(self.refusal_flag());
        decode::gates::fence_check(self.script(&invocation).await?, fence)
    }
}

impl RedisStore {
    /// The gate scripts' flag: `"1"` when they refuse fences drawn before
    /// a failover ([`RedisConfig::refuse_fences_from_before_failover`]).
    ///
    /// [`RedisConfig::refuse_fences_from_before_failover`]: crate::RedisConfig::refuse_fences_from_before_failover
    fn refusal_flag(&self) -> &'static str {
        if self.config.refuses_fences_from_before_failover() {
            "1"
        } else {
            "0"
        }
    }
}

#[async_trait]
impl GateBackend for RedisStore {
    async fn check_fence(
        &self,
        resource: Checked<&str>,
        fence: Checked<u64>,
    ) -> Result<FenceCheck> {
        let (resource, fence) = (resource.get(), fence.get());
        let mut invocation = SCRIPTS.check_fence.prepare_invoke();
        invocation
            .key(self.keys.gate(resource))
            .key(self.keys.gates())
            .key(self.keys.fence())
            .arg(resource)
            .arg(fence)
            .arg(self.refusal_flag());
        decode::gates::fence_check(self.script(&invocation).await?, fence)
    }

    async fn highest_fence(&self, resource: Checked<&str>) -> Result<Option<u64>> {
        let resource = resource.get();
        let mut invocation = SCRIPTS.highest_fence.prepare_invoke();
        invocation.key(self.keys.gate(resource));
        decode::gates::highest_fence(self.script(&invocation).await?)
    }

    async fn purge_fences(&self, unused_for: Checked<Duration>) -> Result<u64> {
        let unused_for = unused_for.get();
        let mut purged = 0_u64;
        loop {
            let mut invocation = SCRIPTS.purge_fences.prepare_invoke();
            invocation
                .key(self.keys.gates())
                .arg(self.keys.prefix())
                .arg(clock::micros_rounded_up(unused_for))
                .arg(PURGE_BATCH);
            let deleted = u64::from_redis_value(self.script(&invocation).await?)
                .map_err(|error| Error::corrupt(format!("purge_fences.lua answered {error}")))?;
            purged = purged.saturating_add(deleted);
            if deleted < PURGE_BATCH as u64 {
                return Ok(purged);
            }
        }
    }

    /// Reads every name in the gate index and orders them here: O(number
    /// of gates) per call (see the module docs of `src/gate.rs`).
    async fn list_fences(
        &self,
        after: Option<Checked<&str>>,
        limit: Checked<usize>,
    ) -> Result<Vec<GateRecord>> {
        let (after, limit) = (after.map(Checked::get), limit.get());
        let mut index = redis::cmd("ZRANGE");
        index.arg(self.keys.gates()).arg(0).arg(-1);
        let mut names: Vec<Vec<u8>> = self.command(&index).await?;
        if let Some(after) = after {
            names.retain(|name| name.as_slice() > after.as_bytes());
        }
        // Byte order, as `str` compares; the smallest name first.
        let mut names: BinaryHeap<Reverse<Vec<u8>>> = names.into_iter().map(Reverse).collect();
        let mut gates = Vec::with_capacity(limit.min(names.len()));
        while gates.len() < limit && !names.is_empty() {
            let wanted = limit - gates.len();
            let page: Vec<Vec<u8>> = std::iter::from_fn(|| names.pop().map(|Reverse(name)| name))
                .take(wanted)
                .collect();
            let mut invocation = SCRIPTS.list_fences.prepare_invoke();
            invocation.key(self.keys.gates()).arg(self.keys.prefix());
            for name in &page {
                invocation.arg(name.as_slice());
            }
            gates.extend(decode::gates::listed_gates(
                self.script(&invocation).await?,
                &page,
            )?);
        }
        Ok(gates)
    }
}

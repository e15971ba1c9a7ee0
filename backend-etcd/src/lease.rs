//! [`LeaseBackend`] for [`EtcdStore`]: the writes are the shared [`engine`]'s
//! over one optimistic etcd transaction each; the scans read the records'
//! prefix at one revision.

use std::time::Duration;

use async_trait::async_trait;
use tenure_lease_core::backend::checked::Checked;
use tenure_lease_core::backend::engine;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::backend::rules;
use tenure_lease_core::backend::stores::{Backend, LeaseBackend};
use tenure_lease_core::backend::telemetry;
use tenure_lease_core::{
    Admission, AdmitRequest, Claim, ExpiredQuery, ExpiredScan, LeaseRecord, Renewal, Result,
    SkippedRecord, StatusChange, Takeover, TakeoverRequest, Timestamp, Transition,
};

use crate::keys::{rate_limit_of, Keys};
use crate::kv::{Reads, Tx};
use crate::records::{decode_record, Records};
use crate::EtcdStore;

/// How many parts of one `renew_many` are sent at once.
const RENEWAL_PARTS_IN_FLIGHT: usize = 8;

/// What an operation on the lease `id` reads first: its record and its
/// liveness key.
fn lease_keys<'k>(keys: &'k Keys, id: &'k str) -> impl Iterator<Item = String> + 'k {
    [keys.record(id), keys.live_record(id)].into_iter()
}

impl EtcdStore {
    /// `renew_many` for one part that fits in a transaction.
    async fn renew_part(&self, part: &[Claim], ttl: Duration) -> Result<Vec<Renewal>> {
        let keys = &self.keys;
        let reads = Reads::keys(part.iter().flat_map(|claim| lease_keys(keys, &claim.id)));
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                engine::renew_many(&mut Records { tx, keys }, now, part, ttl)
            })
            .await
    }

    /// Every record under the records' prefix: decoded, or the key and why
    /// not.
    fn scan_records(&self, tx: &Tx<'_>) -> Vec<std::result::Result<LeaseRecord, SkippedRecord>> {
        let prefix = self.keys.records();
        tx.scan(prefix)
            .map(|(key, bytes)| {
                decode_record(key, bytes).map_err(|error| SkippedRecord {
                    id: key[prefix.len()..].to_owned(),
                    reason: error.message().to_owned(),
                })
            })
            .collect()
    }

    /// The records of one scan that `keep` keeps, or `Corrupt` for the
    /// first record that cannot be decoded (there is no partial answer).
    fn decoded(
        &self,
        tx: &Tx<'_>,
        keep: impl Fn(&LeaseRecord) -> bool,
    ) -> Result<Vec<LeaseRecord>> {
        let mut records = Vec::new();
        for scanned in self.scan_records(tx) {
            match scanned {
                Ok(record) if keep(&record) => records.push(record),
                Ok(_) => {}
                Err(skipped) => {
                    return Err(tenure_lease_core::Error::corrupt(format!(
                        "lease record {:?} cannot be decoded: {}",
                        skipped.id, skipped.reason
                    )))
                }
            }
        }
        Ok(records)
    }
}

#[async_trait]
impl LeaseBackend for EtcdStore {
    async fn admit(
        &self,
        request: Checked<&AdmitRequest>,
        metadata: Checked<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Admission> {
        let (request, metadata) = (request.get(), metadata.get());
        let keys = &self.keys;
        let mut reads = Reads::keys(
            lease_keys(keys, &request.id)
                .chain(request.scopes.iter().map(|scope| keys.held(scope)))
                .chain(request.rate_limit.iter().map(|limit| keys.rate_log(limit))),
        );
        // A counted scope's slots above 0, with the first reads: one range
        // each, so the engine finds the first free slot (or judges them
        // all) without reading again. Only the slots it reads are compared
        // at commit. A plain admission reads no range.
        let counted = request
            .capacities
            .iter()
            .filter(|(_, &capacity)| capacity > 1);
        for (scope, _) in counted {
            reads = reads.prefix(keys.upper_slots(scope));
        }
        let (admission, retries) = self
            .runner
            .run_counted(reads, |tx| {
                let now = tx.now();
                engine::admit(&mut Records { tx, keys }, now, request, metadata.clone())
            })
            .await?;
        telemetry::admit_retried(Self::SYSTEM, &request.id, retries);
        Ok(admission)
    }

    async fn renew(&self, claim: Checked<&Claim>, ttl: Checked<Duration>) -> Result<Renewal> {
        let (claim, ttl) = (claim.get(), ttl.get());
        let keys = &self.keys;
        self.runner
            .run(Reads::keys(lease_keys(keys, &claim.id)), |tx| {
                let now = tx.now();
                engine::renew(&mut Records { tx, keys }, now, claim, ttl)
            })
            .await
    }

    async fn renew_with_progress(
        &self,
        claim: Checked<&Claim>,
        ttl: Checked<Duration>,
        progress: Checked<&serde_json::Value>,
    ) -> Result<Renewal> {
        let (claim, ttl, progress) = (claim.get(), ttl.get(), progress.get());
        let keys = &self.keys;
        self.runner
            .run(Reads::keys(lease_keys(keys, &claim.id)), |tx| {
                let now = tx.now();
                engine::renew_with_progress(&mut Records { tx, keys }, now, claim, ttl, progress)
            })
            .await
    }

    async fn renew_many(
        &self,
        claims: Checked<&[Claim]>,
        ttl: Checked<Duration>,
    ) -> Result<Vec<Renewal>> {
        let (claims, ttl) = (claims.get(), ttl.get());
        // One transaction per part (a transaction holds at most
        // `max_txn_ops` compares and as many writes: two per claim, the
        // record and its liveness key), several in flight.
        let parts: Vec<&[Claim]> = claims
            .chunks((self.runner.max_txn_ops / 2).max(1))
            .collect();
        let mut outcomes = Vec::with_capacity(claims.len());
        for group in parts.chunks(RENEWAL_PARTS_IN_FLIGHT) {
            let renewed = futures_util::future::try_join_all(
                group.iter().map(|part| self.renew_part(part, ttl)),
            )
            .await?;
            outcomes.extend(renewed.into_iter().flatten());
        }
        Ok(outcomes)
    }

    async fn transition(
        &self,
        claim: Checked<&Claim>,
        change: Checked<&StatusChange>,
    ) -> Result<Transition> {
        let (claim, change) = (claim.get(), change.get());
        let keys = &self.keys;
        self.runner
            .run(Reads::keys(lease_keys(keys, &claim.id)), |tx| {
                let now = tx.now();
                engine::transition(&mut Records { tx, keys }, now, claim, change)
            })
            .await
    }

    async fn claim_for_takeover(&self, request: Checked<&TakeoverRequest>) -> Result<Takeover> {
        let request = request.get();
        let keys = &self.keys;
        let reads = Reads::keys(lease_keys(keys, &request.id));
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                engine::claim_for_takeover(&mut Records { tx, keys }, now, request)
            })
            .await
    }

    async fn list_expired(&self, query: Checked<&ExpiredQuery>) -> Result<ExpiredScan> {
        let query = query.get();
        let keys = &self.keys;
        let reads = Reads::default()
            .prefix(keys.records())
            .prefix(keys.live_records());
        self.runner
            .run(reads, |tx| {
                let now = tx.now();
                let mut scan = ExpiredScan::default();
                for scanned in self.scan_records(tx) {
                    match scanned {
                        Ok(record) => {
                            let judged =
                                engine::as_judged(&mut Records { tx, keys }, &record, now)?;
                            if rules::matches_expired(&judged, query.grace, query.created_before, now) {
                                scan.records.push(record);
                            }
                        }
                        Err(skipped) => {
                            tracing::warn!(lease.id = %skipped.id, reason = %skipped.reason, "skipping an undecodable lease record");
                            scan.skipped.push(skipped);
                        }
                    }
                }
                scan.records
                    .sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
                scan.records.truncate(query.limit);
                Ok(scan)
            })
            .await
    }

    async fn get(&self, id: Checked<&str>) -> Result<Option<LeaseRecord>> {
        let id = id.get();
        let keys = &self.keys;
        self.runner
            .run(Reads::keys([keys.record(id)]), |tx| {
                tenure_lease_core::backend::engine::RecordTransaction::load(
                    &mut Records { tx, keys },
                    id,
                )
            })
            .await
    }

    async fn list_by_scope(&self, scope: Checked<&str>) -> Result<Vec<LeaseRecord>> {
        let scope = scope.get();
        let reads = Reads::default().prefix(self.keys.records());
        let mut records = self
            .runner
            .run(reads, |tx| {
                self.decoded(tx, |record| record.scopes.contains(scope))
            })
            .await?;
        records.sort_by_key(rules::newest_first);
        Ok(records)
    }

    async fn list_active(&self) -> Result<Vec<LeaseRecord>> {
        let reads = Reads::default().prefix(self.keys.records());
        // Scanned in key order, which is id order.
        self.runner
            .run(reads, |tx| self.decoded(tx, LeaseRecord::is_active))
            .await
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(self.runner.clock.now())
    }

    async fn purge(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let prefix = self.keys.records();
        let purged = self
            .delete_in_parts(prefix, |key, bytes, now| {
                purgeable(key, bytes, terminal_older_than, now)
            })
            .await?;
        let logs = self.keys.rate_logs();
        self.delete_in_parts(logs, |key, bytes, now| {
            rate_log_over(&key[logs.len()..], bytes, now)
        })
        .await?;
        Ok(purged)
    }

    async fn count_purgeable(&self, terminal_older_than: Checked<Duration>) -> Result<u64> {
        let terminal_older_than = terminal_older_than.get();
        let prefix = self.keys.records();
        self.runner
            .run(Reads::default().prefix(prefix), |tx| {
                let now = tx.now();
                Ok(tx
                    .scan(prefix)
                    .filter(|(key, bytes)| purgeable(key, bytes, terminal_older_than, now))
                    .count() as u64)
            })
            .await
    }
}

/// Whether the stored record at `key` is one `purge` deletes at `now`
/// ([`rules::purgeable`]); what cannot be decoded cannot be judged, and
/// stays.
fn purgeable(key: &str, bytes: &[u8], terminal_older_than: Duration, now: Timestamp) -> bool {
    decode_record(key, bytes)
        .is_ok_and(|record| rules::purgeable(&record, terminal_older_than, now))
}

/// Whether the rate log `name` (its key past the logs' prefix), stored as
/// `bytes`, has no use counting at `now` any more
/// ([`rate_rules::ended`]); what cannot be decoded cannot be judged,
/// and stays.
fn rate_log_over(name: &str, bytes: &[u8], now: Timestamp) -> bool {
    let Some(limit) = rate_limit_of(name) else {
        return false;
    };
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| rate_rules::decode_uses(text, &limit).ok())
        .is_some_and(|uses| rate_rules::ended(&uses, &limit, now))
}

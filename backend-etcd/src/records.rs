//! Lease records and their scopes over a [`Tx`]: the shared
//! engine's [`RecordTransaction`] and [`RateLogs`], and decoding what the
//! store keeps.
//!
//! A record is one JSON document, its counted scopes' slots
//! ([`LeaseRecord::slots`]) among its fields (absent when it has none, as
//! in records written before counted scopes, which read back with none);
//! slots that are not numbers from 0 to `u32::MAX` make the record
//! `Corrupt`. The scope index (`<prefix>/s/`) is kept by held key
//! ([`rules::held_keys`]): an active record holds its exclusive scopes under
//! their names and slot `k` of a counted scope under
//! [`rules::slot_key`]`(scope, k)`, and releases the same keys when it
//! stops being active.

use serde::de::DeserializeOwned;
use tenure_lease_core::backend::engine::RecordTransaction;
use tenure_lease_core::backend::rate_rules::{decode_uses, encode_uses, RateLogs};
use tenure_lease_core::backend::rules;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{clock, Error, LeaseRecord, Result, Timestamp};

use crate::keys::Keys;
use crate::kv::Tx;
use crate::timers::EXPIRY_CHECK;

/// A [`Tx`] with the store's keys: what the [engine](tenure_lease_core::backend::engine) runs on.
pub(crate) struct Records<'t, 's> {
    pub(crate) tx: &'t mut Tx<'s>,
    pub(crate) keys: &'t Keys,
}

/// `bytes` as the JSON value of `key`, or `Corrupt`.
pub(crate) fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|error| Error::corrupt(format!("etcd key {key:?} cannot be decoded: {error}")))
}

/// `bytes` as the lease record stored at `key`, or `Corrupt`, also for
/// slots no admission hands out.
pub(crate) fn decode_record(key: &str, bytes: &[u8]) -> Result<LeaseRecord> {
    let record: LeaseRecord = decode(key, bytes)?;
    tenure_lease_core::backend::stored::check_slots(&record.scopes, &record.slots)
        .map_err(|why| Error::corrupt(format!("etcd key {key:?} cannot be decoded: {why}")))?;
    Ok(record)
}

/// `value` as JSON.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Records, jobs and gates are plain data: serialising them cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Keeps the liveness key `key` in step with a lease or claim that
/// `expires_at` (`None`: not held) as of `now`: attached for the time left
/// while there is some; removed once nothing is held; left alone on a
/// lease whose time is up by the clock, which etcd may still keep.
pub(crate) fn keep_live(tx: &mut Tx<'_>, key: &str, expires_at: Option<Timestamp>) {
    let now = tx.now();
    match expires_at {
        Some(expires) if expires > now => tx.attach(key, clock::until(now, expires)),
        Some(_) => {}
        None => tx.retire(key),
    }
}

/// Until when the liveness key `key` keeps what it guards alive, judged at
/// `now`: `None` once etcd has ended it, otherwise the hint it carries but
/// at least etcd's next check for ended leases.
///
/// # Errors
///
/// When `key` was not read yet.
pub(crate) fn live_until(tx: &mut Tx<'_>, key: &str, now: Timestamp) -> Result<Option<Timestamp>> {
    Ok(tx.read(key)?.map(|hint| {
        // The hint only shapes `retry_after`: a damaged one is no answer.
        let hinted = serde_json::from_slice::<Timestamp>(&hint).unwrap_or(now);
        hinted.max(clock::add(now, EXPIRY_CHECK))
    }))
}

impl RecordTransaction for Records<'_, '_> {
    fn exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.tx.read(&self.keys.record(id))?.is_some())
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        let key = self.keys.record(id);
        self.tx
            .read(&key)?
            .map(|bytes| decode_record(&key, &bytes))
            .transpose()
    }

    fn holder_of(&mut self, held: &str) -> Result<Option<String>> {
        let key = self.keys.held(held);
        let holder = self
            .tx
            .read(&key)?
            .map(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| Error::corrupt(format!("scope entry {key:?} is not text")))
            })
            .transpose()?;
        if let Some(holder) = &holder {
            // Judging the holder needs both: read them together.
            self.tx.want(&self.keys.record(holder));
            self.tx.want(&self.keys.live_record(holder));
        }
        Ok(holder)
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(self.tx.next_fence())
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        for held in rules::held_keys(record) {
            let key = self.keys.held(&held);
            self.tx.read(&key)?;
            self.tx.put(&key, record.id.clone().into_bytes());
        }
        let key = self.keys.record(&record.id);
        self.tx.read(&key)?;
        self.tx.put(&key, encode(record));
        keep_live(
            self.tx,
            &self.keys.live_record(&record.id),
            record.lease_expires_at,
        );
        Ok(())
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        if !record.is_active() {
            for held in rules::held_keys(record) {
                if self.holder_of(&held)?.as_deref() == Some(record.id.as_str()) {
                    self.tx.delete(&self.keys.held(&held));
                }
            }
        }
        let key = self.keys.record(&record.id);
        self.tx.put(&key, encode(record));
        keep_live(
            self.tx,
            &self.keys.live_record(&record.id),
            record.lease_expires_at.filter(|_| record.is_active()),
        );
        Ok(())
    }

    fn kept_until(&mut self, record: &LeaseRecord, now: Timestamp) -> Result<Option<Timestamp>> {
        live_until(self.tx, &self.keys.live_record(&record.id), now)
    }
}

/// A log is one key, read like any other: its revision is compared at
/// commit, so of two uses judged on the same log the second to commit is
/// judged again.
impl RateLogs for Records<'_, '_> {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        let key = self.keys.rate_log(limit);
        let Some(bytes) = self.tx.read(&key)? else {
            return Ok(Vec::new());
        };
        std::str::from_utf8(&bytes)
            .map_err(|_| "rate log is not text".to_owned())
            .and_then(|text| decode_uses(text, limit))
            .map_err(|reason| Error::corrupt(format!("etcd key {key:?}: {reason}")))
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        self.tx
            .put(&self.keys.rate_log(limit), encode_uses(uses).into_bytes());
        Ok(())
    }
}

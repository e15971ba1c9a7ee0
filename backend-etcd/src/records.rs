//! Lease records and their scopes over a [`Tx`]: the shared
//! engine's [`RecordTransaction`], and decoding what the store keeps.

use serde::de::DeserializeOwned;
use tenure_lease_core::backend::engine::RecordTransaction;
use tenure_lease_core::{Error, LeaseRecord, Result};

use crate::keys::Keys;
use crate::kv::Tx;

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

/// `value` as JSON.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Records, jobs and gates are plain data: serialising them cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

impl RecordTransaction for Records<'_, '_> {
    fn exists(&mut self, id: &str) -> Result<bool> {
        Ok(self.tx.read(&self.keys.record(id))?.is_some())
    }

    fn load(&mut self, id: &str) -> Result<Option<LeaseRecord>> {
        let key = self.keys.record(id);
        self.tx
            .read(&key)?
            .map(|bytes| decode(&key, &bytes))
            .transpose()
    }

    fn holder_of(&mut self, scope: &str) -> Result<Option<String>> {
        let key = self.keys.scope(scope);
        self.tx
            .read(&key)?
            .map(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| Error::corrupt(format!("scope entry {key:?} is not text")))
            })
            .transpose()
    }

    fn next_fence(&mut self) -> Result<u64> {
        Ok(self.tx.next_fence())
    }

    fn insert(&mut self, record: &LeaseRecord) -> Result<()> {
        for scope in &record.scopes {
            let key = self.keys.scope(scope);
            self.tx.read(&key)?;
            self.tx.put(&key, record.id.clone().into_bytes());
        }
        let key = self.keys.record(&record.id);
        self.tx.read(&key)?;
        self.tx.put(&key, encode(record));
        Ok(())
    }

    fn save(&mut self, record: &LeaseRecord) -> Result<()> {
        if !record.is_active() {
            for scope in &record.scopes {
                if self.holder_of(scope)?.as_deref() == Some(record.id.as_str()) {
                    self.tx.delete(&self.keys.scope(scope));
                }
            }
        }
        let key = self.keys.record(&record.id);
        self.tx.put(&key, encode(record));
        Ok(())
    }
}

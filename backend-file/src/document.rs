//! What the file holds, and how each entry is decoded.
//!
//! The file is one JSON document: a format number, the store-wide fence
//! sequence, and five maps (lease records, the scope index by slot key,
//! jobs, fence gates, rate logs). Records, jobs, gates and rate logs are kept as raw JSON values and decoded
//! one at a time when an operation needs them, so one damaged entry (a hand
//! edit, a tool of another version) answers `Corrupt` for itself while every
//! other entry goes on working (contract §10). A file that is not such a
//! document at all answers `Corrupt` for every operation, and one of another
//! format `Incompatible`; neither is ever written over.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenure_lease_core::backend::rate_rules::{self, RateLogs};
use tenure_lease_core::backend::{gate_rules, stored};
use tenure_lease_core::clock;
use tenure_lease_core::queue::Job;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Error, ErrorKind, LeaseRecord, Result, Status, Timestamp};

/// The layout this version reads and writes.
pub(crate) const FORMAT: u64 = 1;

/// The largest fence the sequence hands out: fences fit a signed 64-bit
/// integer, as in every other backend, so a larger stored fence is damage.
pub(crate) const LAST_FENCE: u64 = stored::LAST_STORED_FENCE;

/// The whole store, as the file holds it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Document {
    /// [`FORMAT`].
    pub(crate) format: u64,
    /// The last fence handed out, to a lease or a job claim: never reused,
    /// whatever is purged.
    pub(crate) last_fence: u64,
    /// Lease records by id.
    #[serde(default)]
    pub(crate) records: BTreeMap<String, Value>,
    /// The active record (its id) holding each held key: a scope's
    /// [`slot_key`](tenure_lease_core::backend::rules::slot_key), the scope
    /// itself for an exclusive scope or slot 0 of a counted one, else the
    /// scope, U+001F and the slot number (contract §17). A record's slots
    /// are in its entry (`"slots": {"exports": 2}`, absent when it holds no
    /// counted scope, as in every record written before counted scopes
    /// existed, whose keys are then its scopes: the format is unchanged).
    #[serde(default)]
    pub(crate) holders: BTreeMap<String, String>,
    /// Jobs by id, a namespace apart from the records.
    #[serde(default)]
    pub(crate) jobs: BTreeMap<String, Value>,
    /// Fence gates by resource.
    #[serde(default)]
    pub(crate) gates: BTreeMap<String, Value>,
    /// Rate logs by [`rate_rules::log_name`]: `{"uses": [microseconds],
    /// "ends_at": microseconds}`, `ends_at` when the newest use stops
    /// counting.
    #[serde(default)]
    pub(crate) rate_logs: BTreeMap<String, Value>,
}

/// The engine's view of the rate logs, for admissions and claims alike.
impl RateLogs for Document {
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        let name = rate_rules::log_name(limit);
        let Some(value) = self.rate_logs.get(&name) else {
            return Ok(Vec::new());
        };
        let uses = value
            .get("uses")
            .cloned()
            .ok_or_else(|| "it has no uses".to_owned())
            .and_then(|uses| {
                serde_json::from_value::<Vec<i64>>(uses).map_err(|error| error.to_string())
            })
            .and_then(|micros| rate_rules::stored_uses(micros, limit));
        uses.map_err(|why| undecodable("rate log", &name, &why))
    }

    fn save_rate_log(&mut self, limit: &RateLimit, uses: &[Timestamp]) -> Result<()> {
        let micros: Vec<i64> = uses.iter().map(|used| clock::to_micros(*used)).collect();
        let ends_at = rate_rules::log_ends_at(uses, limit).map(clock::to_micros);
        self.rate_logs.insert(
            rate_rules::log_name(limit),
            serde_json::json!({ "uses": micros, "ends_at": ends_at }),
        );
        Ok(())
    }
}

impl Document {
    /// Deletes the rate logs whose uses all stopped counting at `now`; one
    /// whose end cannot be read stays, for an operator.
    pub(crate) fn purge_ended_rate_logs(&mut self, now: Timestamp) {
        let now = clock::to_micros(now);
        self.rate_logs.retain(|_, log| {
            log.get("ends_at")
                .and_then(Value::as_i64)
                .is_none_or(|ends_at| ends_at > now)
        });
    }
}

/// The gate of one resource: the highest fence accepted, and when the last
/// accepted check was.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Gate {
    pub(crate) fence: u64,
    pub(crate) checked_at: Timestamp,
}

/// A gate as stored, before its fence is checked.
#[derive(Deserialize)]
struct StoredGate {
    fence: i64,
    checked_at: Timestamp,
}

impl Document {
    /// A store nothing was written to yet.
    pub(crate) fn empty() -> Self {
        Document {
            format: FORMAT,
            last_fence: 0,
            records: BTreeMap::new(),
            holders: BTreeMap::new(),
            jobs: BTreeMap::new(),
            gates: BTreeMap::new(),
            rate_logs: BTreeMap::new(),
        }
    }

    /// Reads the file's bytes.
    ///
    /// # Errors
    ///
    /// `Corrupt` when they are not a store's document, `Incompatible` when
    /// they are one of another format.
    pub(crate) fn decode(bytes: &[u8], file: &str) -> Result<Self> {
        let damaged = |why: String| {
            Error::corrupt(format!(
                "{file} is not a tenure file store ({why}); nothing was written over it: \
                 restore it from a backup, or move it aside to start an empty store"
            ))
        };
        let value: Value =
            serde_json::from_slice(bytes).map_err(|error| damaged(error.to_string()))?;
        match value.get("format").and_then(Value::as_u64) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(Error::new(
                    ErrorKind::Incompatible,
                    format!(
                        "{file} is a tenure file store of format {other}, and this version \
                         reads format {FORMAT} only: open it with the version that wrote it"
                    ),
                ))
            }
            None => return Err(damaged("it has no format number".to_owned())),
        }
        Document::deserialize(&value).map_err(|error| damaged(error.to_string()))
    }

    /// The bytes the file holds for this document.
    ///
    /// # Errors
    ///
    /// `Corrupt` if it cannot be encoded, which no document this crate
    /// builds causes.
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(self)
            .map_err(|error| Error::corrupt(format!("cannot encode the store: {error}")))
    }

    /// Draws the next fence of the store-wide sequence.
    ///
    /// # Errors
    ///
    /// `Corrupt` when the sequence is damaged (above the largest fence) or
    /// exhausted.
    pub(crate) fn next_fence(&mut self) -> Result<u64> {
        if self.last_fence >= LAST_FENCE {
            return Err(Error::corrupt(format!(
                "the fence sequence of the store is at {}, beyond the last fence ({LAST_FENCE}); \
                 it was damaged, and needs an operator's attention",
                self.last_fence
            )));
        }
        self.last_fence += 1;
        Ok(self.last_fence)
    }
}

/// Encodes an entry as the file holds it.
pub(crate) fn encode<T: Serialize>(entry: &T) -> Result<Value> {
    serde_json::to_value(entry)
        .map_err(|error| Error::corrupt(format!("cannot encode a store entry: {error}")))
}

/// `Corrupt`: the stored `what` with `id` cannot be decoded, for `why`.
pub(crate) fn undecodable(what: &str, id: &str, why: &str) -> Error {
    Error::corrupt(format!(
        "the stored {what} {id:?} cannot be decoded ({why}); nothing was written over it, \
         and it needs an operator's attention"
    ))
}

/// The lease record stored under `id`, or why it cannot be read: a slot
/// that is not a number from 0 to 2^32 - 1 does not deserialize, and one of
/// a scope the record does not name, or not below the largest capacity, is
/// no slot an admission wrote ([`stored_slots`]).
pub(crate) fn record(id: &str, value: &Value) -> std::result::Result<LeaseRecord, String> {
    let record = LeaseRecord::deserialize(value).map_err(|error| {
        // serde names no field; name the slots when they are what is wrong.
        let slots = value.get("slots").map(BTreeMap::<String, u32>::deserialize);
        match slots {
            Some(Err(slots)) => format!("slots: not an object of slot numbers: {slots}"),
            _ => error.to_string(),
        }
    })?;
    stored::check_record(id, &record)?;
    Ok(record)
}

/// The job stored under `id`, or why it cannot be read.
pub(crate) fn job(id: &str, value: &Value) -> std::result::Result<Job, String> {
    let job = Job::deserialize(value).map_err(|error| error.to_string())?;
    stored::check_job(id, &job)?;
    Ok(job)
}

/// The gate stored for `resource`.
///
/// # Errors
///
/// `Corrupt` when it cannot be decoded, or its fence is out of range
/// ([`gate_rules::stored_gate_fence`]).
pub(crate) fn gate(resource: &str, value: &Value) -> Result<Gate> {
    let stored = StoredGate::deserialize(value)
        .map_err(|error| gate_rules::undecodable_gate(resource, &error.to_string()))?;
    Ok(Gate {
        fence: gate_rules::stored_gate_fence(resource, stored.fence)?,
        checked_at: stored.checked_at,
    })
}

/// The status of a stored record, as far as it can be read: what a scan
/// uses to tell whether an undecodable record may be active.
pub(crate) fn peek_status(value: &Value) -> Option<Status> {
    value
        .get("status")
        .and_then(|status| Status::deserialize(status).ok())
}

/// The scopes of a stored record, as far as they can be read.
pub(crate) fn peek_scopes(value: &Value) -> Option<BTreeSet<String>> {
    value
        .get("scopes")
        .and_then(|scopes| BTreeSet::<String>::deserialize(scopes).ok())
}

/// The queue of a stored job, as far as it can be read.
pub(crate) fn peek_queue(value: &Value) -> Option<&str> {
    value.get("queue").and_then(Value::as_str)
}

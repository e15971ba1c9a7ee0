//! Script replies as typed outcomes: every reply shape the Lua scripts
//! answer (see each script's header) is decoded here and nowhere else.
//!
//! A reply of the wrong shape is [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt):
//! the store answered something this code does not understand.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use redis::Value;
use tenure_lease_core::backend::{rate_rules, rules};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, Error, ExpiredQuery, ExpiredScan, LeaseRecord, LossReason,
    NotTakenReason, Renewal, Result, SkippedRecord, Status, Takeover, Timestamp, Transition,
    TransitionRejection,
};

pub(crate) mod gates;
pub(crate) mod jobs;

fn malformed(what: impl std::fmt::Display) -> Error {
    Error::corrupt(format!(
        "unexpected reply from a tenure Redis script: {what}"
    ))
}

fn array(value: Value) -> Result<Vec<Value>> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(malformed(format_args!("expected an array, got {other:?}"))),
    }
}

fn bytes(value: Value) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::Int(number) => Ok(number.to_string().into_bytes()),
        other => Err(malformed(format_args!("expected a string, got {other:?}"))),
    }
}

fn text(value: Value) -> Result<String> {
    String::from_utf8(bytes(value)?).map_err(|_| malformed("a string is not UTF-8"))
}

/// The parts of an array reply: its tag, then the rest in order.
struct Parts(std::vec::IntoIter<Value>);

impl Parts {
    fn of(value: Value) -> Result<(String, Parts)> {
        let mut parts = Parts(array(value)?.into_iter());
        let tag = parts.text()?;
        Ok((tag, parts))
    }

    fn next(&mut self) -> Result<Value> {
        self.0
            .next()
            .ok_or_else(|| malformed("a reply is too short"))
    }

    fn text(&mut self) -> Result<String> {
        text(self.next()?)
    }

    fn instant(&mut self) -> Result<Timestamp> {
        let text = self.text()?;
        micros(text.as_bytes()).ok_or_else(|| malformed(format_args!("bad instant {text:?}")))
    }

    fn status(&mut self) -> Result<Status> {
        self.text()?.parse()
    }

    fn record(&mut self) -> Result<LeaseRecord> {
        decode(raw(self.next()?)?)
    }

    /// The uses of `limit`'s log a script answers (see `rate_log` in
    /// `lua/common.lua`), checked as every backend checks a stored log.
    fn rate_log(&mut self, limit: &RateLimit) -> Result<Vec<Timestamp>> {
        let micros = array(self.next()?)?
            .into_iter()
            .map(|value| {
                let text = text(value)?;
                text.parse::<i64>()
                    .map_err(|_| malformed(format_args!("bad rate log use {text:?}")))
            })
            .collect::<Result<Vec<_>>>()?;
        rate_rules::stored_uses(micros, limit).map_err(malformed)
    }
}

fn unknown(tag: &str) -> Error {
    malformed(format_args!("unknown outcome {tag:?}"))
}

fn micros(text: &[u8]) -> Option<Timestamp> {
    std::str::from_utf8(text)
        .ok()?
        .parse()
        .ok()
        .and_then(clock::from_micros)
}

/// Text that may not be UTF-8 (an id read back from an index), shown with
/// replacement characters rather than refused, so a scan can still name
/// what it skips.
fn lossy_text(value: Value) -> Result<String> {
    Ok(String::from_utf8_lossy(&bytes(value)?).into_owned())
}

/// A record as scripts reply it, `{ id, HGETALL pairs }`, not yet decoded.
pub(crate) struct RawRecord {
    /// The id, with replacement characters if it is not UTF-8.
    id: String,
    id_is_utf8: bool,
    fields: HashMap<String, Vec<u8>>,
}

impl RawRecord {
    /// The decoding error of a record whose id is not UTF-8.
    fn check_id(&self) -> std::result::Result<(), String> {
        if self.id_is_utf8 {
            Ok(())
        } else {
            Err("the id is not UTF-8".to_owned())
        }
    }
}

fn raw(value: Value) -> Result<RawRecord> {
    let mut parts = array(value)?.into_iter();
    let (Some(id), Some(flat), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(malformed("a record is not { id, fields }"));
    };
    let mut fields = HashMap::new();
    let mut flat = array(flat)?.into_iter();
    while let Some(name) = flat.next() {
        let value = flat
            .next()
            .ok_or_else(|| malformed("a record has an odd number of fields"))?;
        fields.insert(
            String::from_utf8_lossy(&bytes(name)?).into_owned(),
            bytes(value)?,
        );
    }
    let id = bytes(id)?;
    let id_is_utf8 = std::str::from_utf8(&id).is_ok();
    Ok(RawRecord {
        id: String::from_utf8_lossy(&id).into_owned(),
        id_is_utf8,
        fields,
    })
}

/// The `{ id, reason }` pairs of stored values a script could not judge,
/// the reasons without the script's error code.
fn script_skips(value: Value) -> Result<Vec<(String, String)>> {
    array(value)?
        .into_iter()
        .map(|pair| {
            let mut parts = Parts(array(pair)?.into_iter());
            let id = lossy_text(parts.next()?)?;
            let reason = lossy_text(parts.next()?)?;
            let reason = match reason.strip_prefix(CORRUPT_PREFIX) {
                Some(rest) => rest.to_owned(),
                None => reason,
            };
            Ok((id, reason))
        })
        .collect()
}

/// What scripts put before a TENURE_CORRUPT reason.
const CORRUPT_PREFIX: &str = "TENURE_CORRUPT ";

/// Decodes a stored record; the error says which field is wrong.
fn decode_fields(raw: &RawRecord) -> std::result::Result<LeaseRecord, String> {
    let optional_text = |name: &str| -> std::result::Result<Option<String>, String> {
        raw.fields
            .get(name)
            .map(|value| {
                String::from_utf8(value.clone()).map_err(|_| format!("{name} is not UTF-8"))
            })
            .transpose()
    };
    let required_text = |name: &str| -> std::result::Result<String, String> {
        optional_text(name)?.ok_or_else(|| format!("{name} is missing"))
    };
    let instant = |name: &str| -> std::result::Result<Option<Timestamp>, String> {
        raw.fields
            .get(name)
            .map(|value| micros(value).ok_or_else(|| format!("{name} is not a timestamp")))
            .transpose()
    };
    let required_instant = |name: &str| -> std::result::Result<Timestamp, String> {
        instant(name)?.ok_or_else(|| format!("{name} is missing"))
    };
    raw.check_id()?;
    let status: Status = required_text("status")?
        .parse()
        .map_err(|error: Error| error.message().to_owned())?;
    let fence: u64 = required_text("fence")?
        .parse()
        .map_err(|_| "fence is not a number".to_owned())?;
    let scopes: BTreeSet<String> = serde_json::from_str(&required_text("scopes")?)
        .map_err(|error| format!("scopes are not a JSON array of strings: {error}"))?;
    let metadata = serde_json::from_str(&required_text("meta")?)
        .map_err(|error| format!("metadata is not a JSON object: {error}"))?;
    let record = LeaseRecord {
        id: raw.id.clone(),
        scopes,
        slots: slots(raw)?,
        kind: required_text("kind")?,
        status,
        owner: optional_text("owner")?,
        fence,
        lease_expires_at: instant("expires")?,
        created_at: required_instant("created")?,
        updated_at: required_instant("updated")?,
        error: optional_text("error")?,
        stop_reason: optional_text("stop")?,
        metadata,
        progress: progress(raw)?,
    };
    tenure_lease_core::backend::stored::check_slots(&record.scopes, &record.slots)?;
    Ok(record)
}

/// The `slots` field of a stored record: absent (no counted scope, or a
/// record written before counted scopes), or a JSON object, each counted
/// scope to the slot it holds there, a `u32`.
fn slots(raw: &RawRecord) -> std::result::Result<BTreeMap<String, u32>, String> {
    raw.fields
        .get("slots")
        .map_or(Ok(BTreeMap::new()), |value| {
            serde_json::from_slice(value)
                .map_err(|error| format!("slots are not a JSON object of slot numbers: {error}"))
        })
}

/// The `progress` field of a stored record or job: absent, or JSON text.
pub(crate) fn progress(raw: &RawRecord) -> std::result::Result<Option<serde_json::Value>, String> {
    raw.fields
        .get("progress")
        .map(|value| match serde_json::from_slice(value) {
            Ok(serde_json::Value::Null) => {
                Err("progress is a JSON null, which no write stores".to_owned())
            }
            Ok(progress) => Ok(progress),
            Err(error) => Err(format!("progress is not JSON: {error}")),
        })
        .transpose()
}

/// Decodes a stored record, answering [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt)
/// when it cannot.
fn decode(raw: RawRecord) -> Result<LeaseRecord> {
    decode_fields(&raw).map_err(|reason| {
        Error::corrupt(format!(
            "stored lease record {:?} cannot be decoded: {reason}",
            raw.id
        ))
    })
}

/// The reply of `admit.lua`.
pub(crate) fn admission(reply: Value, request: &AdmitRequest) -> Result<Admission> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "exists" => Err(Error::already_exists(&request.id)),
        "conflict" => {
            let now = parts.instant()?;
            let holder = parts.record()?;
            let retry_after = rules::retry_after(&holder, request.grace, now);
            Ok(Admission::Conflict {
                holder,
                retry_after,
            })
        }
        "rate_limited" => {
            let limit = request
                .rate_limit
                .as_ref()
                .ok_or_else(|| malformed("rate_limited an admission without a rate limit"))?;
            let now = parts.instant()?;
            let uses = parts.rate_log(limit)?;
            let retry_after = rate_rules::next_permit_in(&uses, limit, now)
                .ok_or_else(|| malformed("rate_limited an admission with a permit left"))?;
            Ok(Admission::RateLimited {
                key: limit.key.clone(),
                retry_after,
            })
        }
        "admitted" => {
            let record = parts.record()?;
            let interrupted = array(parts.next()?)?
                .into_iter()
                .map(|value| decode(raw(value)?))
                .collect::<Result<_>>()?;
            Ok(Admission::Admitted {
                record,
                interrupted,
            })
        }
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `renew.lua`: one outcome per claim sent.
pub(crate) fn renewals(reply: Value, expected: usize) -> Result<Vec<Renewal>> {
    let outcomes = array(reply)?;
    if outcomes.len() != expected {
        return Err(malformed(format_args!(
            "{} renewal outcomes for {expected} claims",
            outcomes.len()
        )));
    }
    outcomes.into_iter().map(renewal).collect()
}

fn renewal(value: Value) -> Result<Renewal> {
    let (tag, mut parts) = Parts::of(value)?;
    match tag.as_str() {
        "renewed" => Ok(Renewal::Renewed {
            expires_at: parts.instant()?,
        }),
        "lost" => {
            let reason = parts.text()?;
            Ok(Renewal::Lost(match reason.as_str() {
                "missing" => LossReason::Missing,
                "terminal" => LossReason::Terminal(parts.status()?),
                "interrupted" => LossReason::Interrupted,
                "owner_changed" => LossReason::OwnerChanged,
                "fence_changed" => LossReason::FenceChanged,
                _ => return Err(unknown(&reason)),
            }))
        }
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `transition.lua`.
pub(crate) fn transition(reply: Value) -> Result<Transition> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "applied" => Ok(Transition::Applied(parts.record()?)),
        "rejected" => {
            let reason = parts.text()?;
            Ok(Transition::Rejected(match reason.as_str() {
                "missing" => TransitionRejection::Missing,
                "terminal" => TransitionRejection::Terminal(parts.status()?),
                "stale" => TransitionRejection::Stale,
                "not_allowed" => TransitionRejection::NotAllowed {
                    from: parts.status()?,
                    to: parts.status()?,
                },
                _ => return Err(unknown(&reason)),
            }))
        }
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `takeover.lua`.
pub(crate) fn takeover(reply: Value, grace: Duration) -> Result<Takeover> {
    let (tag, mut parts) = Parts::of(reply)?;
    let reason = match tag.as_str() {
        "taken" => return Ok(Takeover::Taken(parts.record()?)),
        "missing" => NotTakenReason::Missing,
        "terminal" => NotTakenReason::Terminal(parts.status()?),
        "interrupted" => NotTakenReason::Interrupted,
        "lease_valid" => {
            let now = parts.instant()?;
            let record = parts.record()?;
            let retry_after = rules::retry_after(&record, grace, now).ok_or_else(|| {
                malformed(format_args!(
                    "the script judged the lease of {:?} valid, the rules do not",
                    record.id
                ))
            })?;
            NotTakenReason::LeaseValid { retry_after }
        }
        _ => return Err(unknown(&tag)),
    };
    Ok(Takeover::NotTaken(reason))
}

/// The reply of `list_expired.lua`: records the script could not judge or
/// this side cannot decode are skipped, logged and reported; the rest are
/// judged again by [`rules::matches_expired`] at the script's instant.
pub(crate) fn expired(reply: Value, query: &ExpiredQuery) -> Result<ExpiredScan> {
    let mut parts = Parts(array(reply)?.into_iter());
    let now = parts.instant()?;
    let found = array(parts.next()?)?;
    let mut scan = ExpiredScan::default();
    for (id, reason) in script_skips(parts.next()?)? {
        tracing::warn!(
            %id,
            %reason,
            "list_expired skips a lease record that cannot be decoded"
        );
        scan.skipped.push(SkippedRecord { id, reason });
    }
    for value in found {
        let raw = raw(value)?;
        match decode_fields(&raw) {
            Ok(record) => {
                if rules::matches_expired(&record, query.grace, query.created_before, now) {
                    scan.records.push(record);
                }
            }
            Err(reason) => {
                tracing::warn!(
                    id = %raw.id,
                    %reason,
                    "list_expired skips a lease record that cannot be decoded"
                );
                scan.skipped.push(SkippedRecord { id: raw.id, reason });
            }
        }
    }
    scan.records
        .sort_by(|a, b| rules::expired_order(a).cmp(&rules::expired_order(b)));
    scan.records.truncate(query.limit);
    Ok(scan)
}

/// The reply of `get.lua` and `list_ids.lua`: records, all decodable.
pub(crate) fn records(reply: Value) -> Result<Vec<LeaseRecord>> {
    array(reply)?
        .into_iter()
        .map(|value| decode(raw(value)?))
        .collect()
}

/// Store time from a `TIME` reply (seconds, microseconds).
pub(crate) fn server_time((seconds, micros): (i64, i64)) -> Result<Timestamp> {
    seconds
        .checked_mul(1_000_000)
        .and_then(|whole| whole.checked_add(micros))
        .and_then(clock::from_micros)
        .ok_or_else(|| malformed(format_args!("TIME answered {seconds} s {micros} us")))
}

//! Input validation shared by every backend.
//!
//! The validating [`front`](super::stores::front) runs these checks before
//! any backend sees an operation's input, so bad input gets the same typed
//! [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) error, naming
//! the field, on every backend, and changes nothing. What each operation
//! checks is decided there, once; the functions of this module are its
//! parts (and the keeper's, for its own configuration).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::record::{Claim, Status};
use crate::request::{AdmitRequest, ExpiredQuery, StatusChange, TakeoverAction, TakeoverRequest};

pub use crate::limits::{
    MAX_BATCH, MAX_GATE_FENCE, MAX_GRACE, MAX_JSON_DEPTH, MAX_LIST_LIMIT, MAX_METADATA_BYTES,
    MAX_NAME_BYTES, MAX_PROGRESS_BYTES, MAX_RATE_PERIOD, MAX_RATE_PERMITS, MAX_RETENTION,
    MAX_SCOPES, MAX_SCOPE_CAPACITY, MAX_TEXT_BYTES, MAX_TTL, MAX_UNIQUE_PERIOD, MIN_RATE_PERIOD,
    MIN_TTL, MIN_UNIQUE_PERIOD,
};

/// Checks a name-like field: non-empty, at most [`MAX_NAME_BYTES`], no control
/// characters (stores cannot all keep them, logs would mangle them).
fn name(field: &'static str, value: &str) -> Result<()> {
    name_length(field, value)?;
    // Printable ASCII, as nearly every name is, has no control character.
    if !ascii_within(value, b' ', b'~') && value.chars().any(char::is_control) {
        return Err(control_characters(field));
    }
    Ok(())
}

fn name_length(field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid_input(field, "must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid_input(
            field,
            format_args!("is {} bytes, at most {MAX_NAME_BYTES} allowed", value.len()),
        ));
    }
    Ok(())
}

fn control_characters(field: &'static str) -> Error {
    Error::invalid_input(field, "must not contain control characters")
}

/// Whether every byte of `value` lies in `low..=high` (bounds within
/// printable ASCII): the quick acceptance of a plain ASCII name, which needs
/// no decoding into characters. A name it does not accept is checked again
/// character by character, and only that check refuses.
fn ascii_within(value: &str, low: u8, high: u8) -> bool {
    value.bytes().all(|byte| (low..=high).contains(&byte))
}

/// A lease id.
pub fn lease_id(id: &str) -> Result<()> {
    name("id", id)
}

/// A scope.
pub fn scope(scope: &str) -> Result<()> {
    name("scope", scope)
}

/// A record kind, named `field` in the error.
pub fn kind(field: &'static str, kind: &str) -> Result<()> {
    name(field, kind)
}

/// A worker id: a name with no whitespace at all (e.g. `host:pid:random`).
pub fn owner(field: &'static str, owner: &str) -> Result<()> {
    name_length(field, owner)?;
    // ASCII without controls and without space has no whitespace either.
    if ascii_within(owner, b'!', b'~') {
        return Ok(());
    }
    if owner.chars().any(char::is_control) {
        return Err(control_characters(field));
    }
    if owner.chars().any(char::is_whitespace) {
        return Err(Error::invalid_input(
            field,
            "worker ids must not contain whitespace (expected a shape like `host:pid:random`)",
        ));
    }
    Ok(())
}

/// A lease length.
pub fn ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::invalid_input(
            "ttl",
            format_args!("{ttl:?} is shorter than the minimum {MIN_TTL:?}"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid_input(
            "ttl",
            format_args!("{ttl:?} is longer than the maximum {MAX_TTL:?}"),
        ));
    }
    Ok(())
}

/// A grace period.
pub fn grace(grace: Duration) -> Result<()> {
    if grace > MAX_GRACE {
        return Err(Error::invalid_input(
            "grace",
            format_args!("{grace:?} is longer than the maximum {MAX_GRACE:?}"),
        ));
    }
    Ok(())
}

/// Refuses JSON nested deeper than [`MAX_JSON_DEPTH`]; iterative, so that a
/// hostile value cannot exhaust the stack.
fn json_depth(field: &'static str, value: &serde_json::Value) -> Result<()> {
    let mut pending = vec![(value, 1)];
    while let Some((value, depth)) = pending.pop() {
        let container = matches!(
            value,
            serde_json::Value::Array(_) | serde_json::Value::Object(_)
        );
        if container && depth > MAX_JSON_DEPTH {
            return Err(Error::invalid_input(
                field,
                format_args!("nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"),
            ));
        }
        match value {
            serde_json::Value::Array(items) => {
                pending.extend(items.iter().map(|child| (child, depth + 1)));
            }
            serde_json::Value::Object(entries) => {
                pending.extend(entries.values().map(|child| (child, depth + 1)));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A JSON document every store can keep and read back: at most
/// [`MAX_JSON_DEPTH`] levels, at most `max_bytes` serialised, and no NUL
/// character in any key or string (PostgreSQL `jsonb` cannot store one).
fn json_document(field: &'static str, value: &serde_json::Value, max_bytes: usize) -> Result<()> {
    json_depth(field, value)?;
    let encoded = value.to_string();
    if encoded.len() > max_bytes {
        return Err(Error::invalid_input(
            field,
            format_args!(
                "is {} bytes as JSON, at most {max_bytes} allowed",
                encoded.len()
            ),
        ));
    }
    if encoded.contains("\\u0000") {
        return Err(Error::invalid_input(
            field,
            "must not contain NUL characters",
        ));
    }
    Ok(())
}

fn text(field: &'static str, value: Option<&str>) -> Result<()> {
    let Some(value) = value else { return Ok(()) };
    if value.len() > MAX_TEXT_BYTES {
        return Err(Error::invalid_input(
            field,
            format_args!("is {} bytes, at most {MAX_TEXT_BYTES} allowed", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid_input(
            field,
            "must not contain NUL characters",
        ));
    }
    Ok(())
}

/// Metadata: a JSON object of at most [`MAX_METADATA_BYTES`] and
/// [`MAX_JSON_DEPTH`] levels, with no NUL
/// character in any key or string (PostgreSQL `jsonb` cannot store one).
pub fn metadata(
    metadata: &serde_json::Value,
) -> Result<&serde_json::Map<String, serde_json::Value>> {
    let serde_json::Value::Object(object) = metadata else {
        return Err(Error::invalid_input("metadata", "must be a JSON object"));
    };
    json_document("metadata", metadata, MAX_METADATA_BYTES)?;
    Ok(object)
}

/// A progress report: any JSON value but `null`, at most
/// [`MAX_PROGRESS_BYTES`] as JSON.
pub fn progress(progress: &serde_json::Value) -> Result<()> {
    if progress.is_null() {
        return Err(Error::invalid_input(
            "progress",
            "must not be null: report a value such as 0, \"started\" or {}",
        ));
    }
    json_document("progress", progress, MAX_PROGRESS_BYTES)
}

/// Everything in an [`AdmitRequest`]; answers its metadata object.
pub fn admit(request: &AdmitRequest) -> Result<&serde_json::Map<String, serde_json::Value>> {
    lease_id(&request.id)?;
    owner("owner", &request.owner)?;
    kind("kind", &request.kind)?;
    if request.scopes.len() > MAX_SCOPES {
        return Err(Error::invalid_input(
            "scopes",
            format_args!(
                "{} scopes, at most {MAX_SCOPES} allowed",
                request.scopes.len()
            ),
        ));
    }
    for each in &request.scopes {
        scope(each)?;
    }
    capacities(request)?;
    if let Some(lease) = request.ttl {
        ttl(lease)?;
    }
    grace(request.grace)?;
    if let Some(limit) = &request.rate_limit {
        rate_limit(limit)?;
    }
    metadata(&request.metadata)
}

/// The capacities of counted scopes (field `capacities`): each of a
/// requested scope, 1 to [`MAX_SCOPE_CAPACITY`].
fn capacities(request: &AdmitRequest) -> Result<()> {
    for (counted, &capacity) in &request.capacities {
        if !request.scopes.contains(counted) {
            return Err(Error::invalid_input(
                "capacities",
                format_args!(
                    "{counted:?} has a capacity but is not among the scopes \
                     (add it with `counted_scope`)"
                ),
            ));
        }
        if !(1..=MAX_SCOPE_CAPACITY).contains(&capacity) {
            return Err(Error::invalid_input(
                "capacities",
                format_args!(
                    "{counted:?} has capacity {capacity}, from 1 to {MAX_SCOPE_CAPACITY} allowed"
                ),
            ));
        }
    }
    Ok(())
}

/// A claim.
pub fn claim(claim: &Claim) -> Result<()> {
    held_by(&claim.id, &claim.owner, claim.fence)
}

/// The parts every claim has, of a lease or of a job.
fn held_by(id: &str, holder: &str, fence: u64) -> Result<()> {
    lease_id(id)?;
    owner("owner", holder)?;
    if fence == 0 {
        return Err(Error::invalid_input(
            "fence",
            "fences start at 1; 0 is never handed out",
        ));
    }
    Ok(())
}

/// A batch of claims for `renew_many`.
pub fn claims(claims: &[Claim]) -> Result<()> {
    if claims.len() > MAX_BATCH {
        return Err(Error::invalid_input(
            "claims",
            format_args!("{} claims, at most {MAX_BATCH} per call", claims.len()),
        ));
    }
    claims.iter().try_for_each(claim)
}

/// A batch of job claims: at most [`MAX_BATCH`], each valid, each job once.
pub fn job_claims(claims: &[crate::queue::JobClaim]) -> Result<()> {
    if claims.len() > MAX_BATCH {
        return Err(Error::invalid_input(
            "claims",
            format_args!("{} claims, at most {MAX_BATCH} per call", claims.len()),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(claims.len());
    for claim in claims {
        job_claim(claim)?;
        if !seen.insert(claim.id.as_str()) {
            return Err(Error::invalid_input(
                "claims",
                format_args!(
                    "job {:?} is named twice; name each job once per call",
                    claim.id
                ),
            ));
        }
    }
    Ok(())
}

/// A status write.
pub fn status_change(change: &StatusChange) -> Result<()> {
    if change.status == Status::Pending {
        return Err(Error::invalid_input(
            "status",
            "no record can go back to pending",
        ));
    }
    text("error", change.error.as_deref())?;
    text("stop_reason", change.stop_reason.as_deref())
}

/// A takeover.
pub fn takeover(request: &TakeoverRequest) -> Result<()> {
    lease_id(&request.id)?;
    owner("claimer", &request.claimer)?;
    grace(request.grace)?;
    match &request.action {
        TakeoverAction::Fail { error, stop_reason } => {
            text("error", Some(error))?;
            text("stop_reason", stop_reason.as_deref())
        }
        TakeoverAction::Adopt { ttl: Some(lease) } => ttl(*lease),
        TakeoverAction::Adopt { ttl: None } => Ok(()),
    }
}

/// An expired-lease scan.
pub fn expired_query(query: &ExpiredQuery) -> Result<()> {
    grace(query.grace)?;
    limit(query.limit)
}

/// A purge retention.
pub fn retention(older_than: Duration) -> Result<()> {
    retention_of("terminal_older_than", older_than)
}

/// A job retention, for `purge_jobs`: at most [`MAX_RETENTION`], like
/// [`retention`].
pub fn job_retention(finished_older_than: Duration) -> Result<()> {
    retention_of("finished_older_than", finished_older_than)
}

fn retention_of(field: &'static str, older_than: Duration) -> Result<()> {
    if older_than > MAX_RETENTION {
        return Err(Error::invalid_input(
            field,
            format_args!("{older_than:?} is longer than the maximum {MAX_RETENTION:?}"),
        ));
    }
    Ok(())
}

/// A resource guarded by a gate: a name, like a scope.
pub fn resource(resource: &str) -> Result<()> {
    name("resource", resource)
}

/// A fence presented at a gate: 1 to [`MAX_GATE_FENCE`].
pub fn gate_fence(fence: u64) -> Result<()> {
    if fence == 0 {
        return Err(Error::invalid_input(
            "fence",
            "fences start at 1; 0 is never handed out",
        ));
    }
    if fence > MAX_GATE_FENCE {
        return Err(Error::invalid_input(
            "fence",
            format_args!("{fence} is above {MAX_GATE_FENCE}, beyond every fence a store hands out"),
        ));
    }
    Ok(())
}

/// A gate retention, for `purge_fences`: at most [`MAX_RETENTION`].
pub fn gate_retention(unused_for: Duration) -> Result<()> {
    retention_of("unused_for", unused_for)
}

/// A job to enqueue with [`enqueue`](crate::JobQueue::enqueue): without a
/// uniqueness key, which only
/// [`enqueue_unique`](crate::JobQueue::enqueue_unique) judges.
pub fn new_job(job: &crate::queue::NewJob) -> Result<()> {
    if job.unique.is_some() {
        return Err(Error::invalid_input(
            "unique",
            "a job with a uniqueness key must be enqueued with enqueue_unique",
        ));
    }
    job_fields(job)
}

/// A job to enqueue with
/// [`enqueue_unique`](crate::JobQueue::enqueue_unique): its uniqueness key,
/// when it has one, a name, and a period within
/// [`MIN_UNIQUE_PERIOD`] to [`MAX_UNIQUE_PERIOD`] in whole milliseconds.
pub fn new_unique_job(job: &crate::queue::NewJob) -> Result<()> {
    if let Some(unique) = &job.unique {
        job_unique(unique)?;
    }
    job_fields(job)
}

/// A uniqueness key and policy: the key a name, a period within
/// [`MIN_UNIQUE_PERIOD`] to [`MAX_UNIQUE_PERIOD`] in whole milliseconds
/// (field `unique`).
pub fn job_unique(unique: &crate::queue::JobUnique) -> Result<()> {
    name("unique", &unique.key)?;
    if let crate::queue::UniquePolicy::ForPeriod(period) = unique.policy {
        if !(MIN_UNIQUE_PERIOD..=MAX_UNIQUE_PERIOD).contains(&period) {
            return Err(Error::invalid_input(
                "unique",
                format_args!(
                    "period {period:?} is outside {MIN_UNIQUE_PERIOD:?}..={MAX_UNIQUE_PERIOD:?}"
                ),
            ));
        }
        if period.subsec_nanos() % 1_000_000 != 0 {
            return Err(Error::invalid_input(
                "unique",
                format_args!("period {period:?} is not a whole number of milliseconds"),
            ));
        }
    }
    Ok(())
}

fn job_fields(job: &crate::queue::NewJob) -> Result<()> {
    use crate::backend::queue_rules::{MAX_ATTEMPTS, MAX_PAYLOAD_BYTES};
    lease_id(&job.id)?;
    name("queue", &job.queue)?;
    if job.max_attempts == 0 || job.max_attempts > MAX_ATTEMPTS {
        return Err(Error::invalid_input(
            "max_attempts",
            format_args!("{} is outside 1..={MAX_ATTEMPTS}", job.max_attempts),
        ));
    }
    capabilities(&job.required_capabilities)?;
    json_document("payload", &job.payload, MAX_PAYLOAD_BYTES)?;
    if let Some(run_at) = job.run_at {
        use chrono::Datelike;
        if !(1..=9999).contains(&run_at.year()) {
            return Err(Error::invalid_input(
                "run_at",
                format_args!("{run_at} is outside the years 1 to 9999 every store can keep"),
            ));
        }
    }
    Ok(())
}

/// A batch of jobs to enqueue: each valid ([`new_job`]), ids distinct.
pub fn new_jobs(jobs: &[crate::queue::NewJob]) -> Result<()> {
    batch_of(jobs, new_job)
}

/// A batch of jobs to enqueue with
/// [`enqueue_unique_batch`](crate::JobQueue::enqueue_unique_batch): each
/// valid ([`new_unique_job`]), ids distinct.
pub fn new_unique_jobs(jobs: &[crate::queue::NewJob]) -> Result<()> {
    batch_of(jobs, new_unique_job)
}

fn batch_of(
    jobs: &[crate::queue::NewJob],
    valid: fn(&crate::queue::NewJob) -> Result<()>,
) -> Result<()> {
    if jobs.len() > MAX_LIST_LIMIT {
        return Err(Error::invalid_input(
            "jobs",
            format_args!("{} jobs, at most {MAX_LIST_LIMIT} per batch", jobs.len()),
        ));
    }
    let mut ids = std::collections::HashSet::with_capacity(jobs.len());
    for job in jobs {
        valid(job)?;
        if !ids.insert(job.id.as_str()) {
            return Err(Error::invalid_input(
                "id",
                format_args!("{:?} appears twice in the batch", job.id),
            ));
        }
    }
    Ok(())
}

/// A set of capabilities: at most [`MAX_SCOPES`], each a valid name.
pub fn capabilities(capabilities: &std::collections::BTreeSet<String>) -> Result<()> {
    if capabilities.len() > MAX_SCOPES {
        return Err(Error::invalid_input(
            "capabilities",
            format_args!(
                "{} capabilities, at most {MAX_SCOPES} allowed",
                capabilities.len()
            ),
        ));
    }
    capabilities
        .iter()
        .try_for_each(|each| name("capability", each))
}

/// A claim request.
pub fn claim_request(request: &crate::queue::ClaimRequest) -> Result<()> {
    use crate::backend::queue_rules::MAX_CLAIM;
    name("queue", &request.queue)?;
    owner("worker", &request.worker)?;
    capabilities(&request.capabilities)?;
    ttl(request.ttl)?;
    if request.limit == 0 || request.limit > MAX_CLAIM {
        return Err(Error::invalid_input(
            "limit",
            format_args!("{} is outside 1..={MAX_CLAIM}", request.limit),
        ));
    }
    if let Some(limit) = &request.rate_limit {
        rate_limit(limit)?;
    }
    Ok(())
}

/// A claim request for [`JobQueue::claim`](crate::JobQueue::claim), which
/// takes no rate limit: as [`claim_request`], refusing one (field
/// `rate_limit`).
pub fn unlimited_claim_request(request: &crate::queue::ClaimRequest) -> Result<()> {
    if request.rate_limit.is_some() {
        return Err(Error::invalid_input(
            "rate_limit",
            "claim answers jobs only; use claim_limited, which says how long the limit holds jobs back",
        ));
    }
    claim_request(request)
}

/// A rate limit (field `rate_limit`): the key a name, permits from 1 to
/// [`MAX_RATE_PERMITS`], a period within [`MIN_RATE_PERIOD`] to
/// [`MAX_RATE_PERIOD`] in whole milliseconds.
pub fn rate_limit(limit: &crate::rate::RateLimit) -> Result<()> {
    name("rate_limit", &limit.key)?;
    if limit.permits == 0 || limit.permits > MAX_RATE_PERMITS {
        return Err(Error::invalid_input(
            "rate_limit",
            format_args!(
                "{} permits is outside 1..={MAX_RATE_PERMITS}",
                limit.permits
            ),
        ));
    }
    if !(MIN_RATE_PERIOD..=MAX_RATE_PERIOD).contains(&limit.period) {
        return Err(Error::invalid_input(
            "rate_limit",
            format_args!(
                "period {:?} is outside {MIN_RATE_PERIOD:?}..={MAX_RATE_PERIOD:?}",
                limit.period
            ),
        ));
    }
    if limit.period.subsec_nanos() % 1_000_000 != 0 {
        return Err(Error::invalid_input(
            "rate_limit",
            format_args!(
                "period {:?} is not a whole number of milliseconds",
                limit.period
            ),
        ));
    }
    Ok(())
}

/// A job claim.
pub fn job_claim(claim: &crate::queue::JobClaim) -> Result<()> {
    held_by(&claim.id, &claim.owner, claim.fence)
}

/// A failure write.
pub fn job_failure(
    claim: &crate::queue::JobClaim,
    error: &str,
    action: crate::queue::FailAction,
) -> Result<()> {
    job_claim(claim)?;
    text("error", Some(error))?;
    if let crate::queue::FailAction::Retry { backoff } = action {
        if backoff > MAX_TTL {
            return Err(Error::invalid_input(
                "backoff",
                format_args!("{backoff:?} is longer than the maximum {MAX_TTL:?}"),
            ));
        }
    }
    Ok(())
}

/// A queue name.
pub fn queue(queue: &str) -> Result<()> {
    name("queue", queue)
}

/// A listing limit.
pub fn limit(limit: usize) -> Result<()> {
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(Error::invalid_input(
            "limit",
            format_args!("{limit} is outside 1..={MAX_LIST_LIMIT}"),
        ));
    }
    Ok(())
}

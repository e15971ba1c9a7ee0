//! Replies of the job-queue scripts as typed outcomes, decoded here and
//! nowhere else, with the same helpers and the same error policy as the
//! lease replies: a reply of the wrong shape or a job that cannot be decoded
//! is [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt), except where
//! `claim` and `reap` skip an undecodable job and report it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use redis::Value;
use tenure_lease_core::backend::queue_rules as rules;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::queue::{
    Claimed, ClaimedJob, DeadReason, Enqueued, Job, JobLoss, JobRenewal, JobSettle, JobState,
    NewJob, OperatorRetry, ReapReport, TakeBack, TakeBackRefusal,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{Error, Result, Timestamp};

use super::{array, bytes, malformed, micros, raw, script_skips, text, unknown, Parts, RawRecord};

impl Parts {
    fn job(&mut self) -> Result<Job> {
        decode_job(raw(self.next()?)?)
    }

    fn job_state(&mut self) -> Result<JobState> {
        self.text()?.parse()
    }
}

/// Decodes a stored job; the error says which field is wrong.
fn decode_job_fields(raw: &RawRecord) -> std::result::Result<Job, String> {
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
    fn number<T: std::str::FromStr>(name: &str, text: String) -> std::result::Result<T, String> {
        text.parse()
            .map_err(|_| format!("{name} is not a number: {text:?}"))
    }
    let instant = |name: &str| -> std::result::Result<Option<Timestamp>, String> {
        raw.fields
            .get(name)
            .map(|value| micros(value).ok_or_else(|| format!("{name} is not a timestamp")))
            .transpose()
    };
    let required_instant = |name: &str| -> std::result::Result<Timestamp, String> {
        instant(name)?.ok_or_else(|| format!("{name} is missing"))
    };
    let reason = |error: Error| error.message().to_owned();
    raw.check_id()?;
    let required_capabilities: BTreeSet<String> = serde_json::from_str(&required_text("caps")?)
        .map_err(|error| format!("caps are not a JSON array of strings: {error}"))?;
    let (taken_back, taken_back_at) = rules::stored_take_back_trace(
        optional_text("taken_back")?
            .map(|text| number("taken_back", text))
            .transpose()?
            .unwrap_or(0),
        instant("taken_back_at")?,
    )?;
    let created_at = required_instant("created")?;
    let unique = rules::stored_unique(
        optional_text("unique_key")?,
        optional_text("unique_policy")?.as_deref(),
        instant("unique_until")?,
        created_at,
    )?;
    Ok(Job {
        id: raw.id.clone(),
        queue: required_text("queue")?,
        payload: serde_json::from_str(&required_text("payload")?)
            .map_err(|error| format!("payload is not JSON: {error}"))?,
        priority: number("priority", required_text("priority")?)?,
        run_at: required_instant("run_at")?,
        attempt: rules::stored_attempt_count(
            "attempt",
            number("attempt", required_text("attempt")?)?,
        )?,
        max_attempts: rules::stored_attempt_count(
            "max_attempts",
            number("max_attempts", required_text("max_attempts")?)?,
        )?,
        required_capabilities,
        state: required_text("state")?.parse().map_err(reason)?,
        owner: optional_text("owner")?,
        fence: number("fence", required_text("fence")?)?,
        lease_expires_at: instant("expires")?,
        last_error: optional_text("error")?,
        dead_reason: optional_text("dead")?
            .map(|text| text.parse::<DeadReason>())
            .transpose()
            .map_err(reason)?,
        created_at,
        updated_at: required_instant("updated")?,
        taken_back,
        taken_back_at,
        progress: super::progress(raw)?,
        unique,
    })
}

/// Decodes a stored job, answering [`ErrorKind::Corrupt`](tenure_lease_core::ErrorKind::Corrupt)
/// when it cannot.
fn decode_job(raw: RawRecord) -> Result<Job> {
    decode_job_fields(&raw).map_err(|reason| {
        Error::corrupt(format!(
            "stored job {:?} cannot be decoded: {reason}",
            raw.id
        ))
    })
}

/// Logs the `{ id, reason }` pairs of jobs a script could not judge.
fn report_skipped(operation: &str, skipped: Value) -> Result<()> {
    for (id, reason) in script_skips(skipped)? {
        tracing::warn!(%id, %reason, "{operation} skips a job that cannot be decoded");
    }
    Ok(())
}

/// The reply of `enqueue.lua`, one answer per job of `jobs`: the holder of
/// its uniqueness key for each duplicate (as stored), every other job as
/// [`rules::new_job`] makes it at the script's instant (what the script
/// stored). Indexed jobs the script could not judge are logged.
pub(crate) fn enqueued(reply: Value, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "exists" => Err(Error::job_already_exists(&parts.text()?)),
        "enqueued" => {
            let now = parts.instant()?;
            let mut holders = array(parts.next()?)?
                .into_iter()
                .map(|value| {
                    let mut pair = Parts(array(value)?.into_iter());
                    let position = pair.text()?;
                    let position = position.parse::<usize>().map_err(|_| {
                        malformed(format_args!("a duplicate of job number {position:?}"))
                    })?;
                    Ok((position, pair.job()?))
                })
                .collect::<Result<HashMap<usize, Job>>>()?;
            report_skipped("enqueue_unique", parts.next()?)?;
            let answers = (1..)
                .zip(jobs)
                .map(|(position, job)| match holders.remove(&position) {
                    Some(holder) => Enqueued::Duplicate(holder),
                    None => Enqueued::Created(rules::new_job(job, now)),
                })
                .collect();
            match holders.keys().next() {
                Some(position) => Err(malformed(format_args!(
                    "a duplicate of job number {position} of {}",
                    jobs.len()
                ))),
                None => Ok(answers),
            }
        }
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `claim.lua` to a request with `rate_limit`, if it has
/// one. A job the script claimed but this side cannot decode is logged and
/// left out: it stays claimed until its lease expires and the reaper
/// handles it (its permit is used). When the limit held back a claimable
/// job, the script answers the log as it wrote it, and `retry_after` is
/// when its next permit frees, as
/// [`RateWindow::retry_after_spending`](tenure_lease_core::backend::rate_rules::RateWindow::retry_after_spending)
/// computes it.
pub(crate) fn claimed(reply: Value, rate_limit: Option<&RateLimit>) -> Result<Claimed> {
    let mut parts = Parts(array(reply)?.into_iter());
    let claimed = array(parts.next()?)?;
    report_skipped("claim", parts.next()?)?;
    let retry_after = if parts.0.len() == 0 {
        None
    } else {
        let limit =
            rate_limit.ok_or_else(|| malformed("a claim without a rate limit was rate limited"))?;
        let now = parts.instant()?;
        let log = parts.rate_log(limit)?;
        Some(rate_rules::next_permit_in(&log, limit, now).unwrap_or(Duration::ZERO))
    };
    let mut jobs = Vec::with_capacity(claimed.len());
    for value in claimed {
        let raw = raw(value)?;
        let decoded = decode_job_fields(&raw).and_then(|job| match job.claim() {
            Some(claim) => Ok(ClaimedJob { job, claim }),
            None => Err("claim.lua answered it without an owner".to_owned()),
        });
        match decoded {
            Ok(claimed) => jobs.push(claimed),
            Err(reason) => tracing::warn!(
                id = %raw.id,
                %reason,
                "claim took a job it cannot decode; it stays claimed until reaped"
            ),
        }
    }
    Ok(match retry_after {
        Some(retry_after) => Claimed::rate_limited(jobs, retry_after),
        None => Claimed::jobs(jobs),
    })
}

fn loss(parts: &mut Parts) -> Result<JobLoss> {
    let reason = parts.text()?;
    Ok(match reason.as_str() {
        "missing" => JobLoss::Missing,
        "finished" => JobLoss::Finished(parts.job_state()?),
        "requeued" => JobLoss::Requeued,
        "owner_changed" => JobLoss::OwnerChanged,
        "fence_changed" => JobLoss::FenceChanged,
        _ => return Err(unknown(&reason)),
    })
}

/// The reply of `renew_job.lua`.
pub(crate) fn job_renewal(reply: Value) -> Result<JobRenewal> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "renewed" => Ok(JobRenewal::Renewed {
            expires_at: parts.instant()?,
        }),
        "lost" => Ok(JobRenewal::Lost(loss(&mut parts)?)),
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `renew_jobs.lua`: one renewal reply per claim.
pub(crate) fn job_renewals(reply: Value) -> Result<Vec<JobRenewal>> {
    array(reply)?.into_iter().map(job_renewal).collect()
}

/// The reply of `complete.lua`, `fail.lua` and `defer.lua`.
pub(crate) fn settle(reply: Value) -> Result<JobSettle> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "settled" => Ok(JobSettle::Settled(parts.job()?)),
        "rejected" => Ok(JobSettle::Rejected(loss(&mut parts)?)),
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `complete_many.lua`: one settle reply per claim.
pub(crate) fn settles(reply: Value) -> Result<Vec<JobSettle>> {
    array(reply)?.into_iter().map(settle).collect()
}

/// The reply of `reap.lua`. Jobs the script could not judge, or handled but
/// this side cannot decode, are logged and left out.
pub(crate) fn reaped(reply: Value) -> Result<ReapReport> {
    let mut parts = Parts(array(reply)?.into_iter());
    let handled = array(parts.next()?)?;
    report_skipped("reap", parts.next()?)?;
    let mut report = ReapReport::default();
    for value in handled {
        let (outcome, mut job) = Parts::of(value)?;
        let raw = raw(job.next()?)?;
        let list = match outcome.as_str() {
            "requeued" => &mut report.requeued,
            "dead_lettered" => &mut report.dead_lettered,
            _ => return Err(unknown(&outcome)),
        };
        match decode_job_fields(&raw) {
            Ok(job) => list.push(job),
            Err(reason) => tracing::warn!(
                id = %raw.id,
                %reason,
                "reap handled a job it cannot decode"
            ),
        }
    }
    Ok(report)
}

/// The reply of `take_back.lua`.
pub(crate) fn take_back(reply: Value) -> Result<TakeBack> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "taken" => {
            let job = parts.job()?;
            let claim = job.claim().ok_or_else(|| {
                malformed(format_args!(
                    "take_back.lua answered unclaimed job {:?}",
                    job.id
                ))
            })?;
            Ok(TakeBack::Taken(ClaimedJob { job, claim }))
        }
        "refused" => {
            let reason = parts.text()?;
            Ok(TakeBack::NotTaken(match reason.as_str() {
                "missing" => TakeBackRefusal::Missing,
                "not_dead_lettered" => TakeBackRefusal::NotDeadLettered(parts.job_state()?),
                "not_by_reaper" => {
                    TakeBackRefusal::NotByReaper(parts.text()?.parse::<DeadReason>()?)
                }
                "not_the_reaped_claim" => TakeBackRefusal::NotTheReapedClaim,
                _ => return Err(unknown(&reason)),
            }))
        }
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `retry_dead_letter.lua`.
pub(crate) fn operator_retry(reply: Value) -> Result<OperatorRetry> {
    let (tag, mut parts) = Parts::of(reply)?;
    match tag.as_str() {
        "requeued" => Ok(OperatorRetry::Requeued(parts.job()?)),
        "not_dead_lettered" => Ok(OperatorRetry::NotDeadLettered(parts.job_state()?)),
        "missing" => Ok(OperatorRetry::Missing),
        _ => Err(unknown(&tag)),
    }
}

/// The reply of `get.lua` (on a job hash) and `list_dead_letters.lua`:
/// jobs, all decodable.
pub(crate) fn jobs(reply: Value) -> Result<Vec<Job>> {
    array(reply)?
        .into_iter()
        .map(|value| decode_job(raw(value)?))
        .collect()
}

/// A job hash's key, queue and state, as one page of `count_jobs.lua`
/// answers it.
pub(crate) type CountedJob = (Vec<u8>, String, String);

/// The reply of `count_jobs.lua`: the next cursor, then a [`CountedJob`]
/// for each job hash of the page, `queue` and `state` empty where the key
/// does not hold them as UTF-8 strings.
pub(crate) fn count_page(reply: Value) -> Result<(String, Vec<CountedJob>)> {
    let mut parts = array(reply)?.into_iter();
    let (Some(cursor), Some(found), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(malformed("count_jobs answers a cursor and a page"));
    };
    let mut found = array(found)?.into_iter();
    let mut page = Vec::new();
    while let Some(key) = found.next() {
        let (Some(queue), Some(state)) = (found.next(), found.next()) else {
            return Err(malformed(
                "count_jobs answers key, queue and state together",
            ));
        };
        let utf8 = |value| bytes(value).map(|raw| String::from_utf8(raw).unwrap_or_default());
        page.push((bytes(key)?, utf8(queue)?, utf8(state)?));
    }
    Ok((text(cursor)?, page))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_lease_core::queue::{JobUnique, UniquePolicy};

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn stored(pairs: &[(&str, &str)]) -> Value {
        Value::Array(vec![
            bulk("job-1"),
            Value::Array(
                pairs
                    .iter()
                    .flat_map(|(name, value)| [bulk(name), bulk(value)])
                    .collect(),
            ),
        ])
    }

    const QUEUED: &[(&str, &str)] = &[
        ("queue", "q"),
        ("payload", "{\"n\":1}"),
        ("priority", "-3"),
        ("run_at", "1700000000000001"),
        ("attempt", "0"),
        ("max_attempts", "3"),
        ("caps", "[\"gpu\"]"),
        ("state", "queued"),
        ("fence", "0"),
        ("created", "1700000000000000"),
        ("updated", "1700000000000000"),
    ];

    #[test]
    fn a_stored_job_decodes_field_by_field() {
        let jobs = jobs(Value::Array(vec![stored(QUEUED)])).expect("decodable");
        let job = &jobs[0];
        assert_eq!(job.id, "job-1");
        assert_eq!(job.priority, -3);
        assert_eq!(job.payload, serde_json::json!({ "n": 1 }));
        assert_eq!(
            tenure_lease_core::clock::to_micros(job.run_at),
            1_700_000_000_000_001
        );
        assert_eq!(
            job.required_capabilities,
            BTreeSet::from(["gpu".to_owned()])
        );
        assert_eq!(
            (job.state, job.owner.as_deref(), job.fence),
            (JobState::Queued, None, 0)
        );
        assert_eq!((job.lease_expires_at, job.dead_reason), (None, None));
    }

    #[test]
    fn an_undecodable_job_is_corrupt_naming_the_field() {
        let mut fields = QUEUED.to_vec();
        fields.retain(|(name, _)| *name != "state");
        fields.push(("state", "bogus"));
        let error = jobs(Value::Array(vec![stored(&fields)])).expect_err("bad state");
        assert_eq!(error.kind(), tenure_lease_core::ErrorKind::Corrupt);
        assert!(error.message().contains("bogus"), "{error}");
    }

    /// [`QUEUED`] with `unique` (field, value) pairs added.
    fn keyed(unique: &[(&'static str, &'static str)]) -> Value {
        stored(&[QUEUED, unique].concat())
    }

    #[test]
    fn a_uniqueness_key_decodes_with_its_policy() {
        let cases = [
            (
                &[("unique_key", "k"), ("unique_policy", "while_queued")][..],
                UniquePolicy::WhileQueued,
            ),
            (
                &[("unique_key", "k"), ("unique_policy", "while_unfinished")],
                UniquePolicy::WhileUnfinished,
            ),
            (
                &[
                    ("unique_key", "k"),
                    ("unique_policy", "for_period"),
                    ("unique_until", "1700000000250000"),
                ],
                UniquePolicy::ForPeriod(std::time::Duration::from_millis(250)),
            ),
        ];
        for (fields, policy) in cases {
            let job = jobs(Value::Array(vec![keyed(fields)]))
                .expect("decodable")
                .remove(0);
            let unique = JobUnique {
                key: "k".to_owned(),
                policy,
            };
            assert_eq!(job.unique.as_ref(), Some(&unique), "{fields:?}");
        }
        let plain = jobs(Value::Array(vec![stored(QUEUED)])).expect("decodable");
        assert_eq!(plain[0].unique, None);
    }

    #[test]
    fn a_damaged_uniqueness_key_is_corrupt() {
        let damages: [&[(&str, &str)]; 7] = [
            &[("unique_key", "k"), ("unique_policy", "bogus")],
            &[("unique_key", "k")],
            &[("unique_policy", "while_queued")],
            &[("unique_until", "1700000000250000")],
            &[("unique_key", "k"), ("unique_policy", "for_period")],
            &[
                ("unique_key", "k"),
                ("unique_policy", "while_unfinished"),
                ("unique_until", "1700000000250000"),
            ],
            &[
                ("unique_key", "k"),
                ("unique_policy", "for_period"),
                ("unique_until", "1700000000000000"),
            ],
        ];
        for fields in damages {
            let error = jobs(Value::Array(vec![keyed(fields)])).expect_err("damaged");
            assert_eq!(
                error.kind(),
                tenure_lease_core::ErrorKind::Corrupt,
                "{fields:?}"
            );
            assert!(error.message().contains("unique"), "{error}");
        }
    }

    #[test]
    fn a_count_page_keeps_unreadable_fields_empty_and_refuses_a_torn_reply() {
        let page = Value::Array(vec![
            bulk("17"),
            Value::Array(vec![
                bulk("k1"),
                bulk("mail"),
                bulk("queued"),
                bulk("k2"),
                Value::BulkString(vec![0xff]),
                bulk(""),
            ]),
        ]);
        let (cursor, found) = count_page(page).expect("a page");
        assert_eq!(cursor, "17");
        assert_eq!(
            found,
            [
                (b"k1".to_vec(), "mail".to_owned(), "queued".to_owned()),
                (b"k2".to_vec(), String::new(), String::new()),
            ]
        );
        let torn = Value::Array(vec![
            bulk("0"),
            Value::Array(vec![bulk("k1"), bulk("mail")]),
        ]);
        let error = count_page(torn).expect_err("torn");
        assert_eq!(error.kind(), tenure_lease_core::ErrorKind::Corrupt);
    }
}

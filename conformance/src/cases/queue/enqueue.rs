//! `enqueue` and `enqueue_batch`: round trips, duplicates, all-or-nothing batches.

use serde_json::json;
use tenure_lease_core::queue::{ClaimRequest, Job, JobState, NewJob};
use tenure_lease_core::{clock, AdmitRequest, JobQueue};

use super::{
    capabilities, claim, claim_one, enqueue, ensure_within, expect_already_exists, get_job, ids,
    job, jobs, rich_payload, QUEUE,
};
use crate::cases::util::{admit, expect_invalid, get, LONG_TTL};
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx, Failure};

/// `enqueue` stores every field as given (any JSON payload, priority, `run_at`
/// to the microsecond, attempts, requirements) as Queued, attempt 0, fence 0,
/// stamped with store time; `get_job` reads it back, and nothing for an unknown id.
pub async fn queue_enqueue_and_get_round_trip<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let before = ctx.store.now().await?;
    // An hour ahead, with nanoseconds a store must truncate to microseconds.
    let run_at = before
        .checked_add_signed(chrono::Duration::nanoseconds(3_600_000_000_789))
        .ok_or_else(|| Failure(format!("an hour after {before} is out of range")))?;
    let new = NewJob::new(QUEUE, rich_payload())
        .id("job-1")
        .run_at(run_at)
        .max_attempts(7)
        .priority(-7)
        .require("gpu")
        .require("ssd");
    let stored = ctx.store.enqueue(&new).await?;
    let after = ctx.store.now().await?;
    ensure_within(stored.created_at, before, after, "created_at")?;
    let expected = Job {
        id: "job-1".into(),
        queue: QUEUE.into(),
        payload: rich_payload(),
        priority: -7,
        run_at: clock::truncate_to_micros(run_at),
        attempt: 0,
        max_attempts: 7,
        required_capabilities: capabilities(&["gpu", "ssd"]),
        state: JobState::Queued,
        owner: None,
        fence: 0,
        lease_expires_at: None,
        last_error: None,
        dead_reason: None,
        created_at: stored.created_at,
        updated_at: stored.created_at,
        taken_back: 0,
        taken_back_at: None,
        progress: None,
        unique: None,
    };
    ensure_eq!(stored, expected, "enqueue answers the job as given");
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        expected,
        "get_job reads it back"
    );

    let payloads = [
        json!(null),
        json!(true),
        json!(-42),
        json!(u64::MAX),
        json!(0.1),
        json!("text with \"quotes\", \\ and 🦀"),
        json!([1, "two", null, [[]], {}]),
        json!({}),
    ];
    for (n, payload) in payloads.into_iter().enumerate() {
        let new = NewJob::new("other-queue", payload).id(format!("payload-{n}"));
        let stored = enqueue(&ctx, new.clone()).await?;
        ensure_eq!(stored.payload, new.payload, "payload {n} round-trips");
        ensure_eq!(
            stored.run_at,
            stored.created_at,
            "without run_at a job is visible from its enqueue time"
        );
        ensure_eq!(
            (
                stored.queue.as_str(),
                stored.priority,
                stored.max_attempts,
                &stored.required_capabilities
            ),
            (
                "other-queue",
                new.priority,
                new.max_attempts,
                &new.required_capabilities
            ),
            "payload-{n} keeps the defaults it was given"
        );
    }
    ensure_eq!(
        ctx.store.get_job("never-enqueued").await?,
        None,
        "an unknown id reads as no job"
    );
    Ok(())
}

/// Enqueueing an id that exists (queued or claimed, whatever else the job
/// says) is `AlreadyExists` and changes nothing; job ids and lease ids are
/// separate namespaces.
pub async fn queue_enqueue_duplicate_is_already_exists<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let original = enqueue(&ctx, job("job-1").priority(3)).await?;
    let duplicates = [
        job("job-1").priority(3),
        NewJob::new("other-queue", json!({ "v": 2 }))
            .id("job-1")
            .max_attempts(9)
            .priority(100),
    ];
    for duplicate in &duplicates {
        expect_already_exists(
            ctx.store.enqueue(duplicate).await,
            "enqueueing a queued job's id",
        )?;
        ensure_eq!(
            get_job(&ctx, "job-1").await?,
            original,
            "a duplicate changes nothing"
        );
    }
    let claimed = claim_one(&ctx, "worker-a", LONG_TTL, "job-1").await?;
    for duplicate in &duplicates {
        expect_already_exists(
            ctx.store.enqueue(duplicate).await,
            "enqueueing a claimed job's id",
        )?;
        ensure_eq!(
            get_job(&ctx, "job-1").await?,
            claimed.job,
            "a duplicate changes nothing"
        );
    }
    claim(
        &ctx,
        &ClaimRequest::new("other-queue", "worker-b", LONG_TTL).limit(10),
        &[],
    )
    .await?;

    let lease = admit(
        &ctx,
        AdmitRequest::new("shared-id", "worker-a").ttl(LONG_TTL),
    )
    .await?;
    let shared = enqueue(&ctx, job("shared-id")).await?;
    ensure_eq!(
        get(&ctx, "shared-id").await?,
        lease,
        "a job sharing a lease's id leaves the lease alone"
    );
    admit(&ctx, AdmitRequest::new("job-1", "worker-a").ttl(LONG_TTL)).await?;
    ensure_eq!(
        get_job(&ctx, "job-1").await?,
        claimed.job,
        "a lease sharing a job's id leaves the job alone"
    );
    expect_already_exists(
        ctx.store.enqueue(&job("shared-id")).await,
        "enqueueing a job id that is also a lease id",
    )?;
    ensure_eq!(get_job(&ctx, "shared-id").await?, shared);
    Ok(())
}

/// `enqueue_batch` adds all or nothing: a batch naming a stored id
/// (`AlreadyExists`), one id twice or one invalid job (`InvalidInput`) adds
/// none; an empty batch adds none; a good batch adds every job, answered in order.
pub async fn queue_enqueue_batch_all_or_nothing<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let stored = enqueue(&ctx, job("stored")).await?;
    let fresh = ["new-a", "new-b", "new-c"];
    // `None`: refused as AlreadyExists; `Some(field)`: as InvalidInput naming it.
    let refused = [
        (
            "a batch naming a stored id",
            vec![job("new-a"), job("stored"), job("new-b")],
            None,
        ),
        (
            "a batch naming one id twice",
            vec![job("new-a"), job("new-b"), job("new-a")],
            Some("id"),
        ),
        (
            "a batch with one invalid job",
            vec![job("new-a"), job("new-b").max_attempts(0), job("new-c")],
            Some("max_attempts"),
        ),
    ];
    for (what, batch, invalid_field) in refused {
        let result = ctx.store.enqueue_batch(&batch).await;
        match invalid_field {
            None => expect_already_exists(result, what)?,
            Some(field) => expect_invalid(result, field, what)?,
        }
        ensure_eq!(
            jobs(&ctx, &fresh).await?,
            vec![None, None, None],
            "{what} adds no job"
        );
        ensure_eq!(
            get_job(&ctx, "stored").await?,
            stored,
            "{what} leaves the stored job alone"
        );
    }
    ensure_eq!(
        ctx.store.enqueue_batch(&[]).await?,
        Vec::<Job>::new(),
        "an empty batch answers no job"
    );
    ensure_eq!(
        jobs(&ctx, &fresh).await?,
        vec![None, None, None],
        "an empty batch adds no job"
    );

    let good = [job("new-a"), job("new-b").priority(2), job("new-c")];
    let before = ctx.store.now().await?;
    let added = ctx.store.enqueue_batch(&good).await?;
    let after = ctx.store.now().await?;
    ensure_eq!(
        ids(&added),
        fresh,
        "a good batch answers every job in order"
    );
    for (job, new) in added.iter().zip(&good) {
        ensure_eq!(
            (
                job.state,
                job.attempt,
                job.fence,
                job.priority,
                &job.payload
            ),
            (JobState::Queued, 0, 0, new.priority, &new.payload),
            "{} as enqueued",
            job.id
        );
        ensure_within(job.created_at, before, after, "created_at")?;
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "get_job reads the batch's job"
        );
    }
    Ok(())
}

/// A batch's jobs are what `enqueue` makes of each, one by one: the same
/// queue, payload, priority, `run_at` (given, or the store's now),
/// attempts and requirements, Queued at attempt 0 and fence 0; answered
/// (and stored) under the ids given, in the order given (not sorted), each
/// in its own queue only.
pub async fn queue_enqueue_batch_jobs_are_what_enqueue_makes_of_each<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let run_at = clock::add(ctx.store.now().await?, LONG_TTL);
    let variants = |prefix: &str| {
        vec![
            NewJob::new("batch-b", rich_payload())
                .id(format!("{prefix}-zeta"))
                .priority(-3)
                .max_attempts(1),
            NewJob::new(QUEUE, json!(null))
                .id(format!("{prefix}-alpha"))
                .run_at(run_at)
                .require("gpu")
                .require("ssd"),
            NewJob::new(QUEUE, json!([1, "two", { "three": 3.5 }]))
                .id(format!("{prefix}-mid"))
                .priority(i32::MAX),
        ]
    };
    let batch = variants("batch");
    let singles = variants("single");
    let mut one_by_one = Vec::with_capacity(singles.len());
    for new in &singles {
        one_by_one.push(ctx.store.enqueue(new).await?);
    }
    let before = ctx.store.now().await?;
    let added = ctx.store.enqueue_batch(&batch).await?;
    let after = ctx.store.now().await?;
    let given: Vec<&str> = batch.iter().map(|new| new.id.as_str()).collect();
    ensure_eq!(
        ids(&added),
        given,
        "the batch answers its jobs in the order given"
    );
    for ((job, single), new) in added.iter().zip(&one_by_one).zip(&batch) {
        let expected = Job {
            id: job.id.clone(),
            run_at: if new.run_at.is_some() {
                single.run_at
            } else {
                job.run_at
            },
            created_at: job.created_at,
            updated_at: job.updated_at,
            ..single.clone()
        };
        ensure_eq!(
            *job,
            expected,
            "{} as the batch enqueued it, against enqueue",
            job.id
        );
        ensure_within(job.created_at, before, after, "a batch job's created_at")?;
        if new.run_at.is_none() {
            ensure_within(job.run_at, before, after, "a batch job's default run_at")?;
        }
        ensure_eq!(
            get_job(&ctx, &job.id).await?,
            *job,
            "get_job reads the batch's job"
        );
    }
    let claimed = ctx
        .store
        .claim(&ClaimRequest::new("batch-b", "worker", LONG_TTL).limit(10))
        .await?;
    let mut held: Vec<&str> = claimed.iter().map(|each| each.job.id.as_str()).collect();
    held.sort_unstable();
    ensure_eq!(
        held,
        vec!["batch-zeta", "single-zeta"],
        "the queue of the batch's first job holds that job and its twin only"
    );
    Ok(())
}

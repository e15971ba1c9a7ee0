//! Queue input the contract refuses (§11): each refusal typed, nothing changed.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::queue_rules::{MAX_ATTEMPTS, MAX_CLAIM, MAX_PAYLOAD_BYTES};
use tenure_lease_core::backend::validate::{
    MAX_GRACE, MAX_LIST_LIMIT, MAX_SCOPES, MAX_TEXT_BYTES, MAX_TTL,
};
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobClaim, NewJob};
use tenure_lease_core::JobQueue;

use super::{capabilities, claim, enqueue, enqueue_and_claim, expire_job, job, jobs, reap, QUEUE};
use crate::cases::util::{expect_invalid, LONG_TTL, SHORT_TTL};
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx};

/// Bad input to every queue operation (names, worker ids, attempts, payload
/// size or NUL, capabilities, limits, ttls, fence 0, backoff, grace) is
/// `InvalidInput` naming the field, and changes nothing; values at the limits pass.
pub async fn queue_invalid_input_rejected_and_changes_nothing<S: JobQueue + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    // Each valid twin of a bad request below would change one of these.
    let dead = enqueue_and_claim(&ctx, job("dead").max_attempts(1), "worker-a", SHORT_TTL).await?;
    expire_job(&ctx, &dead.job).await?;
    reap(&ctx, Duration::ZERO, &[], &["dead"]).await?;
    let orphan = enqueue_and_claim(&ctx, job("orphan"), "worker-b", SHORT_TTL).await?;
    expire_job(&ctx, &orphan.job).await?;
    let held = enqueue_and_claim(&ctx, job("held"), "worker-a", LONG_TTL).await?;
    enqueue(&ctx, job("waiting")).await?;
    let observed = ["dead", "orphan", "held", "waiting", "bad-job", "good-job"];
    let before = (
        jobs(&ctx, &observed).await?,
        ctx.store.list_dead_letters(QUEUE, 100).await?,
    );

    let too_many: Vec<String> = (0..=MAX_SCOPES).map(|n| format!("cap-{n}")).collect();
    let valid_job = || job("bad-job");
    let bad_jobs = [
        ("id", "empty id", valid_job().id("")),
        (
            "id",
            "id with a control character",
            valid_job().id("bad\njob"),
        ),
        (
            "queue",
            "empty queue name",
            NewJob {
                queue: String::new(),
                ..valid_job()
            },
        ),
        (
            "queue",
            "queue name with a control character",
            NewJob {
                queue: "jo\tbs".into(),
                ..valid_job()
            },
        ),
        (
            "max_attempts",
            "max_attempts 0",
            valid_job().max_attempts(0),
        ),
        (
            "max_attempts",
            "max_attempts over the maximum",
            valid_job().max_attempts(MAX_ATTEMPTS + 1),
        ),
        (
            "payload",
            "payload over 256 KiB",
            NewJob {
                payload: json!("x".repeat(MAX_PAYLOAD_BYTES)),
                ..valid_job()
            },
        ),
        (
            "payload",
            "payload with NUL in a string",
            NewJob {
                payload: json!({ "text": "a\u{0}b" }),
                ..valid_job()
            },
        ),
        (
            "payload",
            "payload with NUL in a key",
            NewJob {
                payload: json!({ "a\u{0}b": 1 }),
                ..valid_job()
            },
        ),
        (
            "capability",
            "empty required capability",
            valid_job().require(""),
        ),
        (
            "capabilities",
            "65 required capabilities",
            NewJob {
                required_capabilities: too_many.iter().cloned().collect(),
                ..valid_job()
            },
        ),
    ];
    for (field, what, bad) in &bad_jobs {
        expect_invalid(ctx.store.enqueue(bad).await, field, what)?;
        let batch = [job("good-job"), bad.clone()];
        expect_invalid(
            ctx.store.enqueue_batch(&batch).await,
            field,
            &format!("a batch with {what}"),
        )?;
    }

    let valid_claim = || ClaimRequest::new(QUEUE, "worker-c", LONG_TTL).limit(10);
    let bad_claims = [
        (
            "queue",
            "empty queue name",
            ClaimRequest {
                queue: String::new(),
                ..valid_claim()
            },
        ),
        (
            "worker",
            "empty worker",
            ClaimRequest {
                worker: String::new(),
                ..valid_claim()
            },
        ),
        (
            "worker",
            "worker with whitespace",
            ClaimRequest {
                worker: "worker c".into(),
                ..valid_claim()
            },
        ),
        (
            "capability",
            "empty capability",
            valid_claim().capabilities([""]),
        ),
        (
            "capabilities",
            "65 capabilities",
            valid_claim().capabilities(too_many.iter().cloned()),
        ),
        (
            "ttl",
            "zero ttl",
            ClaimRequest {
                ttl: Duration::ZERO,
                ..valid_claim()
            },
        ),
        (
            "ttl",
            "ttl over 30 days",
            ClaimRequest {
                ttl: MAX_TTL + Duration::from_millis(1),
                ..valid_claim()
            },
        ),
        ("limit", "limit 0", valid_claim().limit(0)),
        (
            "limit",
            "limit over the maximum",
            valid_claim().limit(MAX_CLAIM + 1),
        ),
    ];
    for (field, what, bad) in &bad_claims {
        expect_invalid(ctx.store.claim(bad).await, field, &format!("claim: {what}"))?;
    }

    let bad_job_claims = [
        (
            "fence",
            "fence 0",
            JobClaim {
                fence: 0,
                ..held.claim.clone()
            },
        ),
        (
            "owner",
            "empty owner",
            JobClaim {
                owner: String::new(),
                ..held.claim.clone()
            },
        ),
        (
            "owner",
            "owner with whitespace",
            JobClaim {
                owner: "worker a".into(),
                ..held.claim.clone()
            },
        ),
        (
            "id",
            "empty id",
            JobClaim {
                id: String::new(),
                ..held.claim.clone()
            },
        ),
    ];
    let missing = capabilities(&["gpu"]);
    for (field, what, bad) in &bad_job_claims {
        expect_invalid(
            ctx.store.renew_job(bad, LONG_TTL).await,
            field,
            &format!("renew_job: {what}"),
        )?;
        expect_invalid(
            ctx.store.complete(bad).await,
            field,
            &format!("complete: {what}"),
        )?;
        expect_invalid(
            ctx.store.complete_many(std::slice::from_ref(bad)).await,
            field,
            &format!("complete_many: {what}"),
        )?;
        expect_invalid(
            ctx.store
                .renew_jobs(std::slice::from_ref(bad), LONG_TTL)
                .await,
            field,
            &format!("renew_jobs: {what}"),
        )?;
        expect_invalid(
            ctx.store.fail(bad, "boom", FailAction::DeadLetter).await,
            field,
            &format!("fail: {what}"),
        )?;
        expect_invalid(
            ctx.store.defer(bad, &missing).await,
            field,
            &format!("defer: {what}"),
        )?;
        expect_invalid(
            ctx.store.take_back(bad, LONG_TTL).await,
            field,
            &format!("take_back: {what}"),
        )?;
    }

    let live = &held.claim;
    let huge_ttl = MAX_TTL + Duration::from_millis(1);
    expect_invalid(
        ctx.store.renew_job(live, Duration::ZERO).await,
        "ttl",
        "renew_job: zero ttl",
    )?;
    expect_invalid(
        ctx.store.renew_job(live, huge_ttl).await,
        "ttl",
        "renew_job: huge ttl",
    )?;
    expect_invalid(
        ctx.store
            .renew_jobs(std::slice::from_ref(live), huge_ttl)
            .await,
        "ttl",
        "renew_jobs: huge ttl",
    )?;
    let retry = FailAction::Retry {
        backoff: Duration::ZERO,
    };
    expect_invalid(
        ctx.store.fail(live, "a\u{0}b", retry).await,
        "error",
        "fail: NUL in the error",
    )?;
    let long_error = "e".repeat(MAX_TEXT_BYTES + 1);
    expect_invalid(
        ctx.store.fail(live, &long_error, retry).await,
        "error",
        "fail: error over 16 KiB",
    )?;
    let huge_backoff = FailAction::Retry {
        backoff: MAX_TTL + Duration::from_secs(1),
    };
    expect_invalid(
        ctx.store.fail(live, "boom", huge_backoff).await,
        "backoff",
        "fail: huge backoff",
    )?;
    expect_invalid(
        ctx.store.defer(live, &capabilities(&[""])).await,
        "capability",
        "defer: empty capability",
    )?;
    let too_many_missing: BTreeSet<String> = too_many.iter().cloned().collect();
    expect_invalid(
        ctx.store.defer(live, &too_many_missing).await,
        "capabilities",
        "defer: 65 capabilities",
    )?;
    expect_invalid(
        ctx.store.take_back(&dead.claim, Duration::ZERO).await,
        "ttl",
        "take_back: zero ttl",
    )?;
    expect_invalid(
        ctx.store.reap(MAX_GRACE + Duration::from_secs(1)).await,
        "grace",
        "reap: huge grace",
    )?;
    expect_invalid(ctx.store.get_job("").await, "id", "get_job: empty id")?;
    expect_invalid(
        ctx.store.list_dead_letters("", 10).await,
        "queue",
        "list_dead_letters: empty queue",
    )?;
    expect_invalid(
        ctx.store.list_dead_letters(QUEUE, 0).await,
        "limit",
        "list_dead_letters: limit 0",
    )?;
    expect_invalid(
        ctx.store.list_dead_letters(QUEUE, MAX_LIST_LIMIT + 1).await,
        "limit",
        "list_dead_letters: limit over the maximum",
    )?;
    expect_invalid(
        ctx.store.retry_dead_letter("").await,
        "id",
        "retry_dead_letter: empty id",
    )?;
    expect_invalid(
        ctx.store.retry_dead_letter("de\nad").await,
        "id",
        "retry_dead_letter: id with a control character",
    )?;

    let after = (
        jobs(&ctx, &observed).await?,
        ctx.store.list_dead_letters(QUEUE, 100).await?,
    );
    ensure_eq!(after, before, "bad input changes nothing");

    // At the limits, accepted.
    let largest_payload = json!("x".repeat(MAX_PAYLOAD_BYTES - 2));
    ensure_eq!(largest_payload.to_string().len(), MAX_PAYLOAD_BYTES);
    let at_limits = NewJob::new("limits", largest_payload)
        .id("i".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES))
        .max_attempts(MAX_ATTEMPTS);
    enqueue(&ctx, at_limits.clone()).await?;
    claim(
        &ctx,
        &ClaimRequest::new("limits", "worker-a", MAX_TTL).limit(MAX_CLAIM),
        &[at_limits.id.as_str()],
    )
    .await?;
    Ok(())
}

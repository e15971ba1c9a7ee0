//! Conformance cases: bad input. Every operation validates before it reads or
//! writes anything, so a bad field is `InvalidInput` naming that field, on
//! every backend, and the store is exactly as it was.
//!
//! Each bad request is built from one that would change the store if it were
//! valid (an interrupting admission, a matching claim, an expired orphan), so
//! a store that checks too late is caught by what it changed.

use std::fmt::Debug;
use std::time::Duration;

use serde_json::json;
use tenure_lease_core::backend::validate::{
    MAX_GRACE, MAX_LIST_LIMIT, MAX_METADATA_BYTES, MAX_NAME_BYTES, MAX_RETENTION, MAX_SCOPES,
    MAX_TEXT_BYTES, MAX_TTL,
};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ExpiredQuery, LeaseRecord, LeaseStore, Renewal,
    Status, StatusChange, Takeover, TakeoverAction, TakeoverRequest,
};

use crate::cases::util::{
    admit, apply_transition, claim_of, expect_invalid, expire, snapshot, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// What "the store is unchanged" compares: every active record, the records
/// `ids` names, and every record naming one of `scopes`.
#[derive(Debug, PartialEq)]
struct Observation {
    active: Vec<LeaseRecord>,
    records: Vec<Option<LeaseRecord>>,
    by_scope: Vec<Vec<LeaseRecord>>,
}

async fn observe<S: LeaseStore>(
    ctx: &Ctx<S>,
    ids: &[&str],
    scopes: &[&str],
) -> Result<Observation, Failure> {
    let mut by_scope = Vec::with_capacity(scopes.len());
    for scope in scopes {
        by_scope.push(ctx.store.list_by_scope(scope).await?);
    }
    Ok(Observation {
        active: ctx.store.list_active().await?,
        records: snapshot(ctx, ids).await?,
        by_scope,
    })
}

/// Every admission field rejected (id, owner, scope, scopes, kind, ttl,
/// grace, metadata), each time with nothing admitted or interrupted.
pub async fn invalid_admit_is_rejected_and_changes_nothing<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("own-holder", "worker-a")
            .scope("held")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("no-lease-holder", "worker-b").scope("orphaned"),
    )
    .await?;
    // Valid, this would interrupt both holders and hold a fresh scope.
    let valid = || {
        AdmitRequest::new("newcomer", "worker-a")
            .scopes(["held", "orphaned", "fresh"])
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt)
            .metadata(json!({ "ok": true }))
    };
    let with_id = |id: String| AdmitRequest { id, ..valid() };
    let with_owner = |owner: &str| AdmitRequest {
        owner: owner.to_owned(),
        ..valid()
    };
    let with_metadata = |metadata: serde_json::Value| valid().metadata(metadata);
    let too_many_scopes =
        valid().scopes((0..).map(|i| format!("fresh-{i}")).take(MAX_SCOPES + 1 - 3));
    ensure_eq!(too_many_scopes.scopes.len(), MAX_SCOPES + 1);

    let bad: Vec<(&str, &str, AdmitRequest)> = vec![
        ("id", "empty id", with_id(String::new())),
        (
            "id",
            "id over 256 bytes",
            with_id("i".repeat(MAX_NAME_BYTES + 1)),
        ),
        (
            "id",
            "id with a control character",
            with_id("new\ncomer".into()),
        ),
        ("owner", "empty owner", with_owner("")),
        ("owner", "owner with whitespace", with_owner("worker a")),
        (
            "owner",
            "owner with a control character",
            with_owner("worker\u{7}a"),
        ),
        ("scope", "empty scope", valid().scope("")),
        (
            "scope",
            "scope with a control character",
            valid().scope("fresh\t2"),
        ),
        ("scopes", "65 scopes", too_many_scopes),
        ("kind", "empty kind", valid().kind("")),
        ("ttl", "zero ttl", valid().ttl(Duration::ZERO)),
        (
            "ttl",
            "ttl over 30 days",
            valid().ttl(MAX_TTL + Duration::from_millis(1)),
        ),
        (
            "grace",
            "grace over the maximum",
            valid().grace(MAX_GRACE + Duration::from_secs(1)),
        ),
        ("metadata", "array metadata", with_metadata(json!([1, 2]))),
        ("metadata", "string metadata", with_metadata(json!("text"))),
        (
            "metadata",
            "null metadata",
            with_metadata(serde_json::Value::Null),
        ),
        (
            "metadata",
            "metadata over 64 KiB",
            with_metadata(json!({ "blob": "x".repeat(MAX_METADATA_BYTES) })),
        ),
        (
            "metadata",
            "metadata with a NUL in a value",
            with_metadata(json!({ "text": "a\u{0}b" })),
        ),
        (
            "metadata",
            "metadata with a NUL in a key",
            with_metadata(json!({ "a\u{0}": 1 })),
        ),
    ];
    let ids = ["own-holder", "no-lease-holder", "newcomer"];
    let scopes = ["held", "orphaned", "fresh", "fresh-0"];
    let before = observe(&ctx, &ids, &scopes).await?;
    ensure_eq!(before.records[2], None, "nothing named newcomer yet");
    for (field, what, request) in bad {
        expect_invalid(ctx.store.admit(&request).await, field, what)?;
        ensure_eq!(
            observe(&ctx, &ids, &scopes).await?,
            before,
            "{what}: a rejected admission changes nothing"
        );
    }

    // The control: the same request with every field valid does change the store.
    match ctx.store.admit(&valid()).await? {
        Admission::Admitted { interrupted, .. } => ensure_eq!(
            interrupted.len(),
            2,
            "the valid request interrupts both holders"
        ),
        other => {
            return Err(Failure(format!(
                "the valid request is admitted, got {other:?}"
            )))
        }
    }
    Ok(())
}

/// Bad claims, ttls, texts and target status are rejected by `renew`,
/// `renew_many` and `transition` without touching any record; one bad claim
/// in a batch renews none of the good ones.
pub async fn invalid_claims_are_rejected_and_change_nothing<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let live = admit(
        &ctx,
        AdmitRequest::new("live", "worker-a")
            .scope("held")
            .ttl(LONG_TTL),
    )
    .await?;
    let claim = claim_of(&live)?;
    apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    let other = admit(
        &ctx,
        AdmitRequest::new("other-live", "worker-b")
            .scope("held-too")
            .ttl(LONG_TTL),
    )
    .await?;
    let other_claim = claim_of(&other)?;
    // Any renewal from here on would visibly move an expiry.
    ctx.advance(Duration::from_millis(5)).await?;

    let ids = ["live", "other-live"];
    let scopes = ["held", "held-too"];
    let before = observe(&ctx, &ids, &scopes).await?;
    let unchanged = |what: String| {
        let ctx = ctx.clone();
        let before = &before;
        async move {
            ensure_eq!(
                observe(&ctx, &ids, &scopes).await?,
                *before,
                "{what}: a rejected call changes nothing"
            );
            Ok::<(), Failure>(())
        }
    };

    let bad_claims = [
        (
            "id",
            "empty id",
            Claim {
                id: String::new(),
                ..claim.clone()
            },
        ),
        (
            "owner",
            "empty owner",
            Claim {
                owner: String::new(),
                ..claim.clone()
            },
        ),
        (
            "owner",
            "owner with whitespace",
            Claim {
                owner: "worker a".into(),
                ..claim.clone()
            },
        ),
        (
            "owner",
            "owner with a control character",
            Claim {
                owner: "worker-a\u{7}".into(),
                ..claim.clone()
            },
        ),
        (
            "fence",
            "fence 0",
            Claim {
                fence: 0,
                ..claim.clone()
            },
        ),
    ];
    for (field, what, bad) in &bad_claims {
        expect_invalid(
            ctx.store.renew(bad, LONG_TTL).await,
            field,
            &format!("renew, {what}"),
        )?;
        unchanged(format!("renew, {what}")).await?;
        let batch = [claim.clone(), bad.clone(), other_claim.clone()];
        expect_invalid(
            ctx.store.renew_many(&batch, LONG_TTL).await,
            field,
            &format!("renew_many, {what}"),
        )?;
        unchanged(format!("renew_many, {what}")).await?;
        expect_invalid(
            ctx.store.transition(bad, &StatusChange::succeeded()).await,
            field,
            &format!("transition, {what}"),
        )?;
        unchanged(format!("transition, {what}")).await?;
    }

    let bad_ttls = [
        ("zero ttl", Duration::ZERO),
        ("ttl over 30 days", MAX_TTL + Duration::from_millis(1)),
    ];
    let good_batch = [claim.clone(), other_claim.clone()];
    for (what, ttl) in bad_ttls {
        expect_invalid(
            ctx.store.renew(&claim, ttl).await,
            "ttl",
            &format!("renew, {what}"),
        )?;
        unchanged(format!("renew, {what}")).await?;
        expect_invalid(
            ctx.store.renew_many(&good_batch, ttl).await,
            "ttl",
            &format!("renew_many, {what}"),
        )?;
        unchanged(format!("renew_many, {what}")).await?;
    }

    let long_text = "x".repeat(MAX_TEXT_BYTES + 1);
    let bad_changes = [
        (
            "error",
            "error over 16 KiB",
            StatusChange::failed(long_text.clone()),
        ),
        ("error", "error with a NUL", StatusChange::failed("a\u{0}b")),
        (
            "stop_reason",
            "stop reason over 16 KiB",
            StatusChange::interrupted(long_text),
        ),
        (
            "stop_reason",
            "stop reason with a NUL",
            StatusChange::interrupted("a\u{0}b"),
        ),
        (
            "status",
            "target Pending",
            StatusChange::to(Status::Pending),
        ),
    ];
    for (field, what, change) in bad_changes {
        expect_invalid(
            ctx.store.transition(&claim, &change).await,
            field,
            &format!("transition, {what}"),
        )?;
        unchanged(format!("transition, {what}")).await?;
    }

    // The control: the good claims alone do renew.
    let outcomes = ctx.store.renew_many(&good_batch, LONG_TTL).await?;
    ensure!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, Renewal::Renewed { .. })),
        "the good claims alone renew, got {outcomes:?}"
    );
    Ok(())
}

/// Bad takeovers (claimer, id, grace, adopt ttl, texts) and bad queries
/// (`list_expired` limit and grace, `get`, `list_by_scope`, `purge`) are
/// rejected and change nothing.
pub async fn invalid_takeover_and_queries_are_rejected<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("live", "worker-a")
            .scope("held")
            .ttl(LONG_TTL),
    )
    .await?;
    let done = admit(
        &ctx,
        AdmitRequest::new("done", "worker-a").scope("finished"),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&done)?, &StatusChange::succeeded()).await?;
    let orphan = admit(
        &ctx,
        AdmitRequest::new("orphan", "worker-b")
            .scope("orphaned")
            .ttl(SHORT_TTL),
    )
    .await?;
    // Reclaimable at grace zero: a store that checked too late would take it.
    expire(&ctx, &orphan, Duration::ZERO).await?;

    let ids = ["live", "done", "orphan"];
    let scopes = ["held", "finished", "orphaned"];
    let before = observe(&ctx, &ids, &scopes).await?;
    let unchanged = |what: &'static str| {
        let ctx = ctx.clone();
        let before = &before;
        async move {
            ensure_eq!(
                observe(&ctx, &ids, &scopes).await?,
                *before,
                "{what}: a rejected call changes nothing"
            );
            Ok::<(), Failure>(())
        }
    };

    let adopt = |claimer: &str| TakeoverRequest::adopt("orphan", claimer, Some(LONG_TTL));
    let fail_with = |error: String, stop_reason: Option<String>| TakeoverRequest {
        action: TakeoverAction::Fail { error, stop_reason },
        ..adopt("worker-c")
    };
    let bad_takeovers = [
        ("claimer", "empty claimer", adopt("")),
        ("claimer", "claimer with whitespace", adopt("worker c")),
        (
            "claimer",
            "claimer with a control character",
            adopt("worker-c\n"),
        ),
        (
            "id",
            "empty id",
            TakeoverRequest::adopt("", "worker-c", Some(LONG_TTL)),
        ),
        (
            "grace",
            "grace over the maximum",
            adopt("worker-c").grace(MAX_GRACE + Duration::from_secs(1)),
        ),
        (
            "ttl",
            "zero adopt ttl",
            TakeoverRequest::adopt("orphan", "worker-c", Some(Duration::ZERO)),
        ),
        (
            "ttl",
            "adopt ttl over 30 days",
            TakeoverRequest::adopt(
                "orphan",
                "worker-c",
                Some(MAX_TTL + Duration::from_millis(1)),
            ),
        ),
        (
            "error",
            "error over 16 KiB",
            fail_with("x".repeat(MAX_TEXT_BYTES + 1), None),
        ),
        (
            "stop_reason",
            "stop reason with a NUL",
            fail_with("gone".into(), Some("a\u{0}b".into())),
        ),
    ];
    for (field, what, request) in bad_takeovers {
        expect_invalid(ctx.store.claim_for_takeover(&request).await, field, what)?;
        unchanged(what).await?;
    }

    let scan = |query: ExpiredQuery| {
        let ctx = ctx.clone();
        async move { ctx.store.list_expired(&query).await }
    };
    expect_invalid(
        scan(ExpiredQuery::new(Duration::ZERO).limit(0)).await,
        "limit",
        "limit 0",
    )?;
    expect_invalid(
        scan(ExpiredQuery::new(Duration::ZERO).limit(MAX_LIST_LIMIT + 1)).await,
        "limit",
        "limit over 10 000",
    )?;
    expect_invalid(
        scan(ExpiredQuery::new(MAX_GRACE + Duration::from_secs(1))).await,
        "grace",
        "list_expired grace over the maximum",
    )?;
    expect_invalid(ctx.store.get("").await, "id", "get of an empty id")?;
    expect_invalid(
        ctx.store.get(&"i".repeat(MAX_NAME_BYTES + 1)).await,
        "id",
        "get of an id over 256 bytes",
    )?;
    expect_invalid(
        ctx.store.list_by_scope("").await,
        "scope",
        "list_by_scope of an empty scope",
    )?;
    expect_invalid(
        ctx.store.list_by_scope("held\n").await,
        "scope",
        "list_by_scope of a scope with a control character",
    )?;
    expect_invalid(
        ctx.store
            .purge(MAX_RETENTION + Duration::from_secs(1))
            .await,
        "terminal_older_than",
        "purge over 100 years",
    )?;
    unchanged("queries").await?;

    // The control: a valid takeover of the same orphan is taken.
    let outcome = ctx.store.claim_for_takeover(&adopt("worker-c")).await?;
    ensure!(
        matches!(outcome, Takeover::Taken(_)),
        "the valid takeover is taken, got {outcome:?}"
    );
    Ok(())
}

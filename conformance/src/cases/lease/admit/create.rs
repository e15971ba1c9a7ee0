//! Creating a record: what a new record holds, an admission without a
//! ttl, a duplicate id, scopes that are empty, and the kind carried through
//! every answer.

use super::*;

/// A new record is `Pending`, owned by the requester, holds its scopes, has a
/// fence and a lease of `now + ttl` in store time, and reads back unchanged.
pub async fn admit_creates_pending_record<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let before = ctx.store.now().await?;
    let record = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["thread:1", "account:7"])
            .kind("checkpoint_write")
            .ttl(LONG_TTL)
            .metadata(json!({ "step": 3 })),
    )
    .await?;
    let after = ctx.store.now().await?;
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(record.owner.as_deref(), Some("worker-a"));
    ensure_eq!(record.kind, "checkpoint_write");
    ensure_eq!(
        record.scopes.iter().map(String::as_str).collect::<Vec<_>>(),
        vec!["account:7", "thread:1"]
    );
    ensure!(record.fence > 0, "fences start above zero");
    ensure!(
        before <= record.created_at && record.created_at <= after,
        "created_at is store time"
    );
    ensure_eq!(
        record.lease_expires_at,
        Some(clock::add(record.created_at, LONG_TTL))
    );
    ensure_eq!(record.metadata.get("step"), Some(&json!(3)));
    ensure_eq!(
        get(&ctx, "op-1").await?,
        record,
        "get returns the record as admitted"
    );
    Ok(())
}

/// A record admitted without a ttl has no lease (`lease_expires_at` is none),
/// yet is active and holds its scope like any other, with no retry_after.
pub async fn admit_without_ttl_has_no_lease<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let record = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a").scope("thread:1"),
    )
    .await?;
    ensure_eq!(record.lease_expires_at, None, "no ttl, no lease");
    ensure_eq!(record.status, Status::Pending);
    ensure_eq!(
        get(&ctx, "op-1").await?,
        record,
        "get returns the record as admitted"
    );
    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-2", "worker-b").scope("thread:1"))
        .await?;
    let (holder, retry_after) = conflict(answer, "op-2")?;
    ensure_eq!(holder, record, "the lease-less record holds its scope");
    ensure_eq!(
        retry_after,
        None,
        "a holder without a lease has no retry_after"
    );
    Ok(())
}

/// Admitting an existing id is an `AlreadyExists` error whatever else the
/// request says, and changes nothing: the record keeps its scopes.
pub async fn admit_duplicate_id_is_already_exists<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let original = admit(
        &ctx,
        AdmitRequest::new("op-1", "worker-a")
            .scope("dup:1")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("op-side", "worker-c").scope("dup:3"),
    )
    .await?;
    let ids = ["op-1", "op-side"];
    let scopes = ["dup:1", "dup:2", "dup:3"];
    let before = view(&ctx, &ids, &scopes).await?;
    let duplicates = [
        AdmitRequest::new("op-1", "worker-a")
            .scope("dup:1")
            .ttl(LONG_TTL),
        AdmitRequest::new("op-1", "worker-b")
            .scope("dup:2")
            .ttl(LONG_TTL),
        // Both holders named here are interruptible (the record itself is the
        // requester's own, the other has no lease): a backend that interrupts
        // before checking the id shows it.
        AdmitRequest::new("op-1", "worker-a")
            .scopes(["dup:1", "dup:3"])
            .strategy(AdmitStrategy::Interrupt),
    ];
    for request in duplicates {
        match ctx.store.admit(&request).await {
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
            other => {
                return Err(Failure(format!(
                    "expected AlreadyExists for {request:?}, got {other:?}"
                )))
            }
        }
        ensure_eq!(
            view(&ctx, &ids, &scopes).await?,
            before,
            "a duplicate admission changed the store: {request:?}"
        );
    }
    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-2", "worker-b").scope("dup:1"))
        .await?;
    let (holder, _) = conflict(answer, "op-2")?;
    ensure_eq!(
        holder,
        original,
        "the original record still holds its scope"
    );
    Ok(())
}

/// A record naming no scope never conflicts and interrupts nothing, whatever
/// the strategy, the owner or the records already active.
pub async fn admit_empty_scopes_never_conflict<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("h-1", "worker-b")
            .scope("e:1")
            .ttl(LONG_TTL),
    )
    .await?;
    let strategies = [
        AdmitStrategy::Reject,
        AdmitStrategy::Interrupt,
        AdmitStrategy::Reject,
        AdmitStrategy::Interrupt,
    ];
    let mut expected_active = BTreeSet::from(["h-1".to_owned()]);
    for (index, strategy) in strategies.into_iter().enumerate() {
        let id = format!("op-{index}");
        let mut request =
            AdmitRequest::new(id.as_str(), format!("worker-{}", index % 2)).strategy(strategy);
        if index < 2 {
            request = request.ttl(LONG_TTL);
        }
        let (record, interrupted) = admitted(ctx.store.admit(&request).await?, &id)?;
        ensure!(
            interrupted.is_empty(),
            "an admission without scopes interrupted {interrupted:?}"
        );
        ensure!(record.scopes.is_empty(), "no scope was asked for");
        ensure_eq!(record.status, Status::Pending);
        expected_active.insert(id);
    }
    let active: BTreeSet<String> = ctx
        .store
        .list_active()
        .await?
        .into_iter()
        .map(|record| record.id)
        .collect();
    ensure_eq!(active, expected_active, "every admission is active");
    Ok(())
}

/// The kind label travels through every answer: the admitted record, a
/// conflict's holder, the interrupted records, and the default `"run"`.
pub async fn admit_kind_is_carried_through_answers<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    admit(
        &ctx,
        AdmitRequest::new("h-checkpoint", "worker-b")
            .scope("k:1")
            .kind("checkpoint_write")
            .ttl(LONG_TTL),
    )
    .await?;
    admit(
        &ctx,
        AdmitRequest::new("h-sweep", "worker-c")
            .scope("k:2")
            .kind("sweep"),
    )
    .await?;
    let default = admit(
        &ctx,
        AdmitRequest::new("h-default", "worker-d").scope("k:3"),
    )
    .await?;
    ensure_eq!(
        default.kind,
        DEFAULT_KIND,
        "no kind given means the default"
    );

    let report = AdmitRequest::new("op-report", REQUESTER)
        .kind("report")
        .ttl(LONG_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let answer = ctx
        .store
        .admit(&report.clone().scopes(["k:1", "k:2"]))
        .await?;
    let (holder, _) = conflict(answer, "op-report")?;
    ensure_eq!(
        holder.kind,
        "checkpoint_write",
        "the conflict's holder keeps its kind"
    );

    let answer = ctx.store.admit(&report.scope("k:2")).await?;
    let (record, interrupted) = admitted(answer, "op-report")?;
    ensure_eq!(
        record.kind,
        "report",
        "the admitted record carries its kind"
    );
    ensure_eq!(
        interrupted
            .iter()
            .map(|r| r.kind.as_str())
            .collect::<Vec<_>>(),
        vec!["sweep"],
        "the interrupted record keeps its kind"
    );
    ensure_eq!(get(&ctx, "op-report").await?.kind, "report");
    ensure_eq!(get(&ctx, "h-sweep").await?.kind, "sweep");

    let answer = ctx
        .store
        .admit(&AdmitRequest::new("op-probe", REQUESTER).scope("k:3"))
        .await?;
    let (holder, _) = conflict(answer, "op-probe")?;
    ensure_eq!(holder.kind, DEFAULT_KIND, "the default kind is carried too");
    Ok(())
}

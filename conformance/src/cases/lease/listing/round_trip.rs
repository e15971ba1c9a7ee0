//! What must survive a trip through any store unchanged: timestamps to
//! the microsecond, metadata, and ids and scopes verbatim.

use super::*;

/// Fails the case unless every timestamp of `record` is a whole microsecond.
fn ensure_whole_micros(record: &LeaseRecord, source: &str) -> CaseResult {
    let stamps = [
        ("created_at", Some(record.created_at)),
        ("updated_at", Some(record.updated_at)),
        ("lease_expires_at", record.lease_expires_at),
    ];
    for (field, stamp) in stamps {
        if let Some(stamp) = stamp {
            ensure_eq!(
                stamp.nanosecond() % 1_000,
                0,
                "{field} {stamp} of {:?} from {source} has sub-microsecond digits",
                record.id
            );
        }
    }
    Ok(())
}

/// Timestamps in every answer (admit, renew, transition, takeover) are whole
/// microseconds and equal what `get` reads back, even for a ttl with
/// sub-microsecond digits.
pub async fn timestamps_round_trip_at_microseconds<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let ttl = LONG_TTL + Duration::from_nanos(1_999);
    let now = ctx.store.now().await?;
    ensure_eq!(
        now.nanosecond() % 1_000,
        0,
        "now() {now} is whole microseconds"
    );

    let admitted = admit(
        &ctx,
        AdmitRequest::new("stamped", "worker-a")
            .scope("stamp")
            .ttl(ttl),
    )
    .await?;
    ensure_whole_micros(&admitted, "admit")?;
    ensure_eq!(
        get(&ctx, "stamped").await?,
        admitted,
        "get reads the admitted record"
    );
    let claim = claim_of(&admitted)?;

    ctx.advance(TICK).await?;
    let outcome = ctx.store.renew(&claim, ttl).await?;
    let Renewal::Renewed { expires_at } = outcome else {
        return Err(Failure(format!("a fresh claim renews, got {outcome:?}")));
    };
    ensure_eq!(
        expires_at.nanosecond() % 1_000,
        0,
        "renewed expiry {expires_at} is whole microseconds"
    );
    let renewed = get(&ctx, "stamped").await?;
    ensure_whole_micros(&renewed, "get after renew")?;
    ensure_eq!(
        renewed.lease_expires_at,
        Some(expires_at),
        "get reads the renewed expiry"
    );

    ctx.advance(TICK).await?;
    let running = apply_transition(&ctx, &claim, &StatusChange::running()).await?;
    ensure_whole_micros(&running, "transition")?;

    admit(
        &ctx,
        AdmitRequest::new("unleased", "worker-a").scope("stamp-2"),
    )
    .await?;
    ctx.advance(TICK).await?;
    let adopted = take_over(
        &ctx,
        &TakeoverRequest::adopt("unleased", "worker-b", Some(ttl)),
    )
    .await?;
    ensure_whole_micros(&adopted, "claim_for_takeover")?;

    for record in ctx.store.list_active().await? {
        ensure_whole_micros(&record, "list_active")?;
        ensure_eq!(
            get(&ctx, &record.id).await?,
            record,
            "list_active reads as get"
        );
    }
    for record in ctx.store.list_by_scope("stamp").await? {
        ensure_eq!(
            get(&ctx, &record.id).await?,
            record,
            "list_by_scope reads as get"
        );
    }
    Ok(())
}

/// Metadata is opaque: nested objects, arrays, unicode, extreme integers,
/// floats, booleans, null and empty containers read back equal everywhere.
pub async fn metadata_round_trips<S: LeaseStore + 'static>(ctx: Ctx<S>) -> CaseResult {
    let metadata = json!({
        "nested": { "deeper": { "deepest": [1, { "x": "y" }, []] } },
        "array": [1, "two", 3.5, null, true, { "k": "v" }, [[]]],
        "unicode": "héllo wörld, Привет, 你好, 🦀🚀",
        "ключ 🔑": "unicode key",
        "": "empty key",
        "escapes": "quote \" backslash \\ slash / tab \t newline \n bell \u{7}",
        "max_u64": u64::MAX,
        "min_i64": i64::MIN,
        "negative": -42,
        "zero": 0,
        "float": 0.1,
        "negative_float": -2.5e-8,
        "huge_float": 1.5e300,
        "true": true,
        "false": false,
        "null": null,
        "empty_object": {},
        "empty_array": [],
        "empty_string": "",
    });
    let serde_json::Value::Object(expected) = metadata.clone() else {
        return Err(Failure("the metadata literal is an object".into()));
    };
    let admitted = admit(
        &ctx,
        AdmitRequest::new("rich", "worker-a")
            .scope("meta")
            .ttl(LONG_TTL)
            .metadata(metadata),
    )
    .await?;
    ensure_eq!(
        admitted.metadata,
        expected,
        "admit answers the metadata as given"
    );
    ensure_eq!(
        get(&ctx, "rich").await?.metadata,
        expected,
        "get reads it back"
    );
    let by_scope = ctx.store.list_by_scope("meta").await?;
    ensure_eq!(
        by_scope.first().map(|record| &record.metadata),
        Some(&expected),
        "list_by_scope reads it back"
    );
    let running = apply_transition(&ctx, &claim_of(&admitted)?, &StatusChange::running()).await?;
    ensure_eq!(
        running.metadata,
        expected,
        "a status write leaves metadata alone"
    );

    let empty = admit(
        &ctx,
        AdmitRequest::new("bare", "worker-a").metadata(json!({})),
    )
    .await?;
    ensure!(
        empty.metadata.is_empty(),
        "empty metadata is an empty object"
    );
    ensure_eq!(get(&ctx, "bare").await?, empty, "empty metadata reads back");
    Ok(())
}

/// Ids and scopes that break naive key, pattern or query schemes, with pairs
/// built to collide (`"a:b"+"c"` vs `"a"+"b:c"`), each `(id, scopes)`.
const TRICKY_RECORDS: &[(&str, &[&str])] = &[
    ("a:b", &["c"]),
    ("a", &["b:c"]),
    ("x{y}", &["x"]),
    ("x", &["x{y}", "{x}"]),
    ("%", &["%"]),
    ("anything", &["anything", "any"]),
    ("_", &["a_c"]),
    ("abc", &["abc"]),
    ("s*", &["s*"]),
    ("start", &["start"]),
    ("q?", &["q?"]),
    ("qq", &["qq"]),
    ("[ab]", &["[ab]"]),
    ("plain", &["a", "b"]),
    ("it's", &["it's"]),
    ("say \"hi\"", &["say \"hi\""]),
    ("x'; DROP TABLE leases; --", &["x'; DROP TABLE leases; --"]),
    ("back\\slash", &["back\\slash", "back\\\\slash"]),
    ("ключ ünïcödé 🦀", &["ключ 🦀"]),
    ("with space", &["with space"]),
    ("trailing ", &["trailing "]),
    ("trailing", &["trailing"]),
    ("Case", &["Case"]),
    ("case", &["case"]),
    ("caf\u{e9}", &["caf\u{e9}"]),
    ("cafe\u{301}", &["cafe\u{301}"]),
];

/// Tricky ids and scopes are kept verbatim and never collide: each reads back
/// as given, each scope lists exactly its record, and holding one never
/// blocks another.
pub async fn verbatim_ids_and_scopes_never_collide<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let longest_id = "i".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES);
    let longest_scope = "s".repeat(tenure_lease_core::backend::validate::MAX_NAME_BYTES);
    let records: Vec<(&str, Vec<&str>)> = TRICKY_RECORDS
        .iter()
        .map(|(id, scopes)| (*id, scopes.to_vec()))
        .chain([(longest_id.as_str(), vec![longest_scope.as_str()])])
        .collect();

    // Every scope is distinct, so a Reject admission of each succeeds only if
    // no other record's scope is mistaken for its own.
    let mut admitted = Vec::new();
    for (id, scopes) in &records {
        let record = admit(
            &ctx,
            AdmitRequest::new(*id, "worker-a")
                .scopes(scopes.iter().copied())
                .ttl(LONG_TTL),
        )
        .await?;
        ensure_eq!(record.id, *id, "admit answers the id verbatim");
        ensure_eq!(
            record.scopes.iter().map(String::as_str).collect::<Vec<_>>(),
            {
                let mut sorted = scopes.clone();
                sorted.sort_unstable();
                sorted
            },
            "admit answers the scopes of {id:?} verbatim"
        );
        admitted.push(record);
    }
    for record in &admitted {
        ensure_eq!(
            get(&ctx, &record.id).await?,
            *record,
            "get reads {:?} verbatim",
            record.id
        );
        for scope in &record.scopes {
            ensure_eq!(
                ids_of(&ctx.store.list_by_scope(scope).await?),
                vec![record.id.as_str()],
                "scope {scope:?} lists exactly its own record"
            );
        }
    }
    let mut all_ids: Vec<&str> = records.iter().map(|(id, _)| *id).collect();
    all_ids.sort_unstable();
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        all_ids,
        "list_active finds every record once"
    );

    // Contention lands on exactly the right holder.
    for (scope, holder) in [("%", "%"), ("b:c", "a"), ("x{y}", "x"), ("a_c", "_")] {
        ensure_scope_held_by(&ctx, scope, holder).await?;
    }
    // Finishing one record frees its scope and nothing that looks like it.
    apply_transition(&ctx, &claim_of(&admitted[0])?, &StatusChange::succeeded()).await?;
    admit(
        &ctx,
        AdmitRequest::new("a:b-again", "worker-b")
            .scope("c")
            .ttl(LONG_TTL),
    )
    .await?;
    ensure_scope_held_by(&ctx, "b:c", "a").await?;
    ensure_eq!(
        get(&ctx, "a").await?.status,
        Status::Pending,
        "finishing \"a:b\" leaves \"a\" alone"
    );
    match ctx
        .store
        .admit(&AdmitRequest::new("a:b", "worker-b").scope("fresh"))
        .await
    {
        Err(error) if error.kind() == tenure_lease_core::ErrorKind::AlreadyExists => {}
        other => {
            return Err(Failure(format!(
                "re-admitting the id \"a:b\" is AlreadyExists, got {other:?}"
            )))
        }
    }
    Ok(())
}

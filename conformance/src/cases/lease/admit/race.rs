//! Admissions released together from a start line: exactly one admitted
//! per scope and per id, no deadlock whatever the scope order, and the
//! invariants checked afterwards.

use super::*;

/// How many admissions each race releases at once.
const RACERS: usize = 16;

/// How long a race may take before it counts as hung (deadlocked): far
/// beyond what a starved machine needs for a few dozen admissions.
const RACE_TIMEOUT: Duration = Duration::from_secs(60);

/// Sixteen admissions of different ids released together on one free scope:
/// exactly one is admitted and the others conflict with it. Racing `Interrupt`
/// admissions over an expired holder never leave two active holders.
pub async fn race_admissions_one_scope_exactly_one_admitted<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let requests = (0..RACERS)
        .map(|i| {
            AdmitRequest::new(format!("race-{i}"), format!("worker-{i}"))
                .scope("hot")
                .ttl(LONG_TTL)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let winners: Vec<&LeaseRecord> = answers
        .iter()
        .filter_map(|(_, answer)| answer.admitted())
        .collect();
    let [winner] = winners.as_slice() else {
        return Err(Failure(format!(
            "expected exactly one admission on a free scope, got {:?}",
            ids_of(winners.iter().copied())
        )));
    };
    for (request, answer) in &answers {
        if request.id == winner.id {
            continue;
        }
        let (holder, _) = conflict(answer.clone(), &request.id)?;
        ensure_eq!(holder.id, winner.id, "losers conflict with the winner");
        ensure_eq!(
            ctx.store.get(&request.id).await?,
            None,
            "a losing admission left a record"
        );
    }
    ensure_eq!(
        ids_of(&ctx.store.list_active().await?),
        vec![winner.id.as_str()],
        "one active holder"
    );

    let stale = admit(
        &ctx,
        AdmitRequest::new("stale", "worker-old")
            .scope("hot-2")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &stale, Duration::ZERO).await?;
    let requests = (0..RACERS)
        .map(|i| {
            AdmitRequest::new(format!("irace-{i}"), format!("worker-{i}"))
                .scope("hot-2")
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let mut winners = Vec::new();
    for (request, answer) in answers {
        match answer {
            Admission::Admitted {
                record,
                interrupted,
            } => winners.push((record, interrupted)),
            Admission::Conflict { holder, .. } => ensure!(
                holder.scopes.contains("hot-2") && holder.id != request.id,
                "{:?} conflicts with {holder:?}, which does not hold the scope",
                request.id
            ),
            other => return Err(Failure(format!("unexpected answer {other:?}"))),
        }
    }
    ensure!(
        winners.len() <= 1,
        "{} Interrupt admissions won the same scope",
        winners.len()
    );
    let holders = active_holders_of(&ctx, "hot-2").await?;
    ensure!(
        holders.len() <= 1,
        "two active holders of one scope: {holders:?}"
    );
    if let [(record, interrupted)] = winners.as_slice() {
        ensure_eq!(ids_of(&holders), vec![record.id.as_str()]);
        ensure_eq!(ids_of(interrupted), vec!["stale"]);
        ensure_eq!(get(&ctx, "stale").await?, interrupted[0]);
    }
    Ok(())
}

/// Racing admissions of one id on disjoint scopes: exactly one is
/// admitted, every other answers `AlreadyExists` (no scope lock serialises
/// them, only the id), and no loser leaves a record or holds its scope.
pub async fn race_admissions_one_id_exactly_one_admitted<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let start = StartLine::new(RACERS);
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            let request = AdmitRequest::new("twin", format!("worker-{i}"))
                .scope(format!("twin-scope-{i}"))
                .ttl(LONG_TTL);
            tokio::spawn(async move {
                start.wait().await;
                (request.scopes.clone(), store.admit(&request).await)
            })
        })
        .collect();
    let mut admitted = Vec::new();
    let mut losing_scopes = Vec::new();
    for task in tasks {
        let (scopes, answer) = tokio::time::timeout(RACE_TIMEOUT, task)
            .await
            .map_err(|_| {
                Failure(format!(
                    "an admission did not finish within {RACE_TIMEOUT:?}"
                ))
            })?
            .map_err(|error| Failure(format!("an admission task failed: {error}")))?;
        match answer {
            Ok(Admission::Admitted { record, .. }) => admitted.push(record),
            Err(error) if error.kind() == ErrorKind::AlreadyExists => losing_scopes.extend(scopes),
            other => {
                return Err(Failure(format!(
                    "a racing admission of an existing id answered {other:?}, \
                     expected Admitted or AlreadyExists"
                )))
            }
        }
    }
    let [winner] = admitted.as_slice() else {
        return Err(Failure(format!(
            "expected exactly one admission of the id, got {}",
            admitted.len()
        )));
    };
    ensure_eq!(
        ctx.store.get("twin").await?.as_ref(),
        Some(winner),
        "the stored record is the winner's"
    );
    // A loser that kept its scope would make these conflict.
    for (i, scope) in losing_scopes.iter().enumerate() {
        let probe = AdmitRequest::new(format!("after-{i}"), "worker-probe")
            .scope(scope)
            .ttl(LONG_TTL);
        admit(&ctx, probe).await?;
    }
    Ok(())
}

/// Rounds of concurrent admissions over overlapping scope sets (`Reject` with
/// leases, `Interrupt` over lease-less holders): no `Err`, no hang, at least
/// one winner, and never two active records holding one scope.
pub async fn race_admissions_opposite_scope_orders_never_deadlock<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const SCOPE_SETS: [&[&str]; 8] = [
        &["a", "b"],
        &["b", "a"],
        &["b", "c"],
        &["c", "a"],
        &["c", "d"],
        &["d", "a"],
        &["a", "b", "c", "d"],
        &["d", "c", "b"],
    ];
    const ROUNDS: usize = 6;
    for round in 0..ROUNDS {
        let interrupting = round % 2 == 1;
        let requests = SCOPE_SETS
            .iter()
            .enumerate()
            .map(|(i, scopes)| {
                let request = AdmitRequest::new(format!("r{round}-{i}"), format!("worker-{i}"))
                    .scopes(scopes.iter().map(|scope| format!("r{round}:{scope}")));
                if interrupting {
                    // No lease: every holder is interruptible by any owner.
                    request.strategy(AdmitStrategy::Interrupt)
                } else {
                    request.ttl(LONG_TTL)
                }
            })
            .collect();
        let answers = race(&ctx, requests).await?;
        let winners: Vec<&LeaseRecord> = answers
            .iter()
            .filter_map(|(_, answer)| answer.admitted())
            .collect();
        ensure!(!winners.is_empty(), "round {round}: no admission won");
        ensure_one_holder_per_scope(&ctx).await?;
        for winner in winners {
            let stored = get(&ctx, &winner.id).await?;
            let expected = if interrupting {
                stored.is_active() || stored.status == Status::Interrupted
            } else {
                stored.is_active()
            };
            ensure!(
                expected,
                "round {round}: admitted {:?} is now {:?}",
                winner.id,
                stored.status
            );
        }
    }
    Ok(())
}

/// Concurrent `Interrupt` admissions by different owners over the same expired
/// holders: every answer is Admitted or Conflict, each holder is interrupted
/// at most once (as `get` reads it), and no scope ends with two active holders.
pub async fn race_interrupt_admissions_answer_admitted_or_conflict<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    const SCOPE_SETS: [&[&str]; 6] = [
        &["x:a"],
        &["x:b"],
        &["x:c"],
        &["x:a", "x:c"],
        &["x:b", "x:c"],
        &["x:a", "x:b", "x:c"],
    ];
    let stale_ab = admit(
        &ctx,
        AdmitRequest::new("stale-ab", "worker-old")
            .scopes(["x:a", "x:b"])
            .ttl(SHORT_TTL),
    )
    .await?;
    let stale_c = admit(
        &ctx,
        AdmitRequest::new("stale-c", "worker-old")
            .scope("x:c")
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(&ctx, &stale_ab, Duration::ZERO).await?;
    expire(&ctx, &stale_c, Duration::ZERO).await?;

    let requests = (0..2 * SCOPE_SETS.len())
        .map(|i| {
            AdmitRequest::new(format!("op-{i}"), format!("worker-{i}"))
                .scopes(SCOPE_SETS[i % SCOPE_SETS.len()].iter().copied())
                .ttl(LONG_TTL)
                .strategy(AdmitStrategy::Interrupt)
        })
        .collect();
    let answers = race(&ctx, requests).await?;
    let mut interrupted_by: BTreeMap<String, LeaseRecord> = BTreeMap::new();
    let mut admitted_count = 0;
    for (request, answer) in answers {
        match answer {
            Admission::Admitted { interrupted, .. } => {
                admitted_count += 1;
                for record in interrupted {
                    ensure!(
                        record.id == "stale-ab" || record.id == "stale-c",
                        "{:?} interrupted {:?}, which had a valid foreign lease",
                        request.id,
                        record.id
                    );
                    ensure_eq!(record.owner.as_deref(), Some(request.owner.as_str()));
                    if let Some(earlier) = interrupted_by.insert(record.id.clone(), record) {
                        return Err(Failure(format!(
                            "{:?} was interrupted twice (first by {:?}, then by {:?})",
                            earlier.id, earlier.owner, request.owner
                        )));
                    }
                }
            }
            Admission::Conflict { holder, .. } => ensure!(
                holder.id != request.id
                    && holder
                        .scopes
                        .iter()
                        .any(|scope| request.scopes.contains(scope)),
                "{:?} conflicts with {holder:?}, which holds none of its scopes",
                request.id
            ),
            other => return Err(Failure(format!("unexpected answer {other:?}"))),
        }
    }
    ensure!(admitted_count > 0, "no Interrupt admission won");
    ensure_one_holder_per_scope(&ctx).await?;
    for (id, record) in &interrupted_by {
        ensure_eq!(
            get(&ctx, id).await?,
            *record,
            "the interrupted record as answered is the record as stored"
        );
    }
    Ok(())
}

/// Admits every request concurrently, released together from a start line, and
/// answers each with its outcome; any `Err`, panic or hang fails the case.
async fn race<S: LeaseStore + 'static>(
    ctx: &Ctx<S>,
    requests: Vec<AdmitRequest>,
) -> Result<Vec<(AdmitRequest, Admission)>, Failure> {
    let start = StartLine::new(requests.len());
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let store = Arc::clone(&ctx.store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let answer = store.admit(&request).await;
                (request, answer)
            })
        })
        .collect();
    let collect = async {
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            let (request, answer) = task
                .await
                .map_err(|error| Failure(format!("an admission task failed: {error}")))?;
            let answer = answer.map_err(|error| {
                Failure(format!(
                    "racing admission {:?} answered Err (races must surface as Conflict): {error}",
                    request.id
                ))
            })?;
            answers.push((request, answer));
        }
        Ok(answers)
    };
    tokio::time::timeout(RACE_TIMEOUT, collect)
        .await
        .map_err(|_| {
            Failure(format!(
                "racing admissions did not finish within {RACE_TIMEOUT:?}"
            ))
        })?
}

/// Overlapping multi-scope admissions (a ring of scope pairs and a chord)
/// issued one after another in a fixed order, its reverse and two seeded
/// shuffles, then all at once: each answer is what the scopes' holders at
/// that moment dictate (admitted exactly when every scope is free), and at
/// the end every scope has at most one active holder, which holds all its
/// scopes.
pub async fn admit_overlapping_multi_scope_admissions_keep_one_holder_per_scope<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    const PAIRS: [[usize; 2]; 5] = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]];
    let orders: [Vec<usize>; 4] = [
        vec![0, 1, 2, 3, 4],
        vec![4, 3, 2, 1, 0],
        vec![2, 0, 4, 1, 3],
        vec![3, 4, 0, 2, 1],
    ];
    for (round, order) in orders.iter().enumerate() {
        let scope = |index: usize| format!("ring-{round}-{index}");
        let mut held = BTreeSet::new();
        for &pair in order {
            let scopes = PAIRS[pair].map(scope);
            let request = AdmitRequest::new(format!("ring-{round}-{pair}"), REQUESTER)
                .scopes(scopes.clone())
                .ttl(LONG_TTL);
            let free = scopes.iter().all(|scope| !held.contains(scope));
            match (ctx.store.admit(&request).await?, free) {
                (Admission::Admitted { .. }, true) => held.extend(scopes),
                (Admission::Conflict { holder, .. }, false) => ensure!(
                    holder.scopes.iter().any(|scope| scopes.contains(scope)),
                    "{request:?} is blocked by a holder of one of its scopes, not {holder:?}"
                ),
                (answer, free) => {
                    return Err(Failure(format!(
                    "order {order:?}: {request:?} with its scopes free={free} answered {answer:?}"
                )))
                }
            }
        }
        ensure_one_holder_per_scope(&ctx).await?;
    }
    let start = StartLine::new(PAIRS.len());
    let mut racers = Vec::with_capacity(PAIRS.len());
    for (pair, scopes) in PAIRS.iter().enumerate() {
        let store = Arc::clone(&ctx.store);
        let start = Arc::clone(&start);
        let request = AdmitRequest::new(format!("ring-race-{pair}"), REQUESTER)
            .scopes(scopes.map(|index| format!("ring-race-{index}")))
            .ttl(LONG_TTL);
        racers.push(tokio::spawn(async move {
            start.wait().await;
            store.admit(&request).await
        }));
    }
    for racer in racers {
        racer
            .await
            .map_err(|error| Failure(format!("an admission panicked: {error}")))??;
    }
    ensure_one_holder_per_scope(&ctx).await
}

//! The history scenario: rounds of random admissions (`Reject` or
//! `Interrupt`, short leases) over a few scopes, renewals, transitions,
//! takeovers of expired records and one contested takeover per round. An
//! `Err` answer is recorded as unknown: the call may or may not have
//! happened, and the checks allow both.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, LeaseRecord, LeaseStore, Renewal, Status,
    StatusChange, Takeover, TakeoverRequest, Transition,
};

use super::{answer, check_fences, field, ChildAnswers, ProcessScenario, ROUNDS};

/// Several processes play random histories on one store: admissions race
/// over three scopes with short leases, holders renew, run and finish,
/// workers take over what expired, and all of them race for one orphan per
/// round. The parent checks mutual exclusion per scope, single winners,
/// fences (distinct, growing per process, the last one stored) and that
/// the store holds exactly what the processes were told, unknown answers
/// allowing either outcome.
pub fn processes_race_random_history<S: LeaseStore + 'static>() -> ProcessScenario<S> {
    ProcessScenario {
        prepare: |store| Box::pin(async move { prepare(store.as_ref(), ROUNDS).await }),
        play: |store, worker, seed| {
            Box::pin(async move { play_child(store.as_ref(), &worker, ROUNDS, seed).await })
        },
        check: |store, results| {
            Box::pin(async move {
                let summary = check_history(store.as_ref(), &results, ROUNDS).await;
                format!("{summary:?}")
            })
        },
    }
}

/// The scopes the workers contend for.
const SCOPES: [&str; 3] = ["scope-a", "scope-b", "scope-c"];
/// Shortest and longest lease of an admitted or adopted record.
const SHORT_TTL_MILLIS: (u64, u64) = (20, 90);
/// The first orphan's lease; every next one lasts [`ORPHAN_STEP`] longer, so
/// the workers meet at each orphan's expiry, one round after another.
const FIRST_ORPHAN_TTL: Duration = Duration::from_millis(150);
const ORPHAN_STEP: Duration = Duration::from_millis(60);
/// An adopted orphan's lease: nobody may take it again during the test.
const ADOPTED_ORPHAN_TTL: Duration = Duration::from_secs(600);
/// Expired records one worker tries to take over per round.
const TAKEOVERS_PER_ROUND: usize = 2;
/// Bound on waiting for the store clock to pass an orphan's expiry.
const CLOCK_WAIT_BOUND: Duration = Duration::from_secs(3);
const CLOCK_POLL: Duration = Duration::from_millis(5);

/// The contested orphan of `round`.
fn orphan(round: usize) -> String {
    format!("orphan-{round:02}")
}

fn orphan_ttl(round: usize) -> Duration {
    FIRST_ORPHAN_TTL + ORPHAN_STEP * round as u32
}

/// Parent side, before go: admits one orphan per round, scope-less, owned by
/// a crashed worker, each expiring `ORPHAN_STEP` after the previous one.
async fn prepare<S: LeaseStore>(store: &S, rounds: usize) {
    for round in 0..rounds {
        let admitted = store
            .admit(&AdmitRequest::new(orphan(round), "crashed-worker").ttl(orphan_ttl(round)))
            .await
            .expect("admit an orphan");
        assert!(admitted.admitted().is_some(), "the orphan is admitted");
    }
}

fn unknown(op: &str, id: &str, error: &tenure_lease_core::Error) -> Value {
    json!({ "op": op, "id": id, "outcome": "unknown", "error": error.to_string() })
}

fn brief(record: &LeaseRecord) -> Value {
    json!({ "id": record.id, "fence": record.fence })
}

/// Child side: plays `rounds` rounds as `worker` with randomness from
/// `seed`, printing every answer. Each round: one admission per scope
/// (Reject or Interrupt, short lease), one random step (renew, run, succeed
/// or nothing) per record still held, takeovers of expired records, then the
/// round's orphan, raced for by every worker once the store clock passed its
/// expiry (Fail in even rounds, Adopt in odd ones).
async fn play_child<S: LeaseStore>(store: &S, worker: &str, rounds: usize, seed: u64) {
    let worker_salt = worker.bytes().fold(0u64, |salt, byte| {
        salt.wrapping_mul(31).wrapping_add(u64::from(byte))
    });
    let mut dice = fastrand::Rng::with_seed(seed ^ worker_salt);
    let mut held: Vec<Claim> = Vec::new();
    for round in 0..rounds {
        for scope in SCOPES {
            let strategy = if dice.bool() {
                AdmitStrategy::Interrupt
            } else {
                AdmitStrategy::Reject
            };
            let request = AdmitRequest::new(format!("{worker}-{scope}-{round:02}"), worker)
                .scope(scope)
                .ttl(short_ttl(&mut dice))
                .strategy(strategy);
            match store.admit(&request).await {
                Ok(Admission::Admitted {
                    record,
                    interrupted,
                }) => {
                    answer(json!({
                        "op": "admit", "id": record.id, "scope": scope,
                        "outcome": "admitted", "fence": record.fence,
                        "interrupted": interrupted.iter().map(brief).collect::<Vec<_>>(),
                    }));
                    held.extend(record.claim());
                }
                Ok(Admission::Conflict { holder, .. }) => answer(json!({
                    "op": "admit", "id": request.id, "scope": scope,
                    "outcome": "conflict", "holder": holder.id,
                })),
                Ok(other) => panic!("unexpected admission {other:?}"),
                Err(error) => {
                    let mut line = unknown("admit", &request.id, &error);
                    line["scope"] = json!(scope);
                    answer(line);
                }
            }
        }
        let mut kept = Vec::new();
        for claim in held.drain(..) {
            if step(store, &claim, &mut dice).await {
                kept.push(claim);
            }
        }
        held = kept;
        held.extend(take_over_expired(store, worker, &mut dice).await);
        race_for_orphan(store, worker, round).await;
    }
}

fn short_ttl(dice: &mut fastrand::Rng) -> Duration {
    Duration::from_millis(dice.u64(SHORT_TTL_MILLIS.0..=SHORT_TTL_MILLIS.1))
}

/// One random step on a held record; answers whether it is still held.
async fn step<S: LeaseStore>(store: &S, claim: &Claim, dice: &mut fastrand::Rng) -> bool {
    let change = match dice.u8(0..4) {
        0 => {
            let line = match store.renew(claim, short_ttl(dice)).await {
                Ok(Renewal::Renewed { .. }) => {
                    json!({ "op": "renew", "id": claim.id, "outcome": "renewed" })
                }
                Ok(Renewal::Lost(reason)) => {
                    json!({ "op": "renew", "id": claim.id, "outcome": "lost", "reason": reason.label() })
                }
                Ok(other) => panic!("unexpected renewal {other:?}"),
                Err(error) => unknown("renew", &claim.id, &error),
            };
            let still_held = field(&line, "outcome") == "renewed";
            answer(line);
            return still_held;
        }
        1 => StatusChange::running(),
        2 => StatusChange::succeeded(),
        _ => return true,
    };
    let line = match store.transition(claim, &change).await {
        Ok(Transition::Applied(record)) => json!({
            "op": "transition", "id": claim.id, "to": record.status.as_str(),
            "outcome": "applied",
        }),
        Ok(Transition::Rejected(why)) => json!({
            "op": "transition", "id": claim.id, "outcome": "rejected",
            "reason": format!("{why:?}"),
        }),
        Ok(other) => panic!("unexpected transition {other:?}"),
        Err(error) => unknown("transition", &claim.id, &error),
    };
    let still_held = field(&line, "outcome") == "applied" && field(&line, "to") == "running";
    answer(line);
    still_held
}

/// Tries to adopt a few active scope records whose lease the store clock
/// says is over; answers the claims won.
async fn take_over_expired<S: LeaseStore>(
    store: &S,
    worker: &str,
    dice: &mut fastrand::Rng,
) -> Vec<Claim> {
    let (Ok(active), Ok(now)) = (store.list_active().await, store.now().await) else {
        return Vec::new();
    };
    let expired = active.into_iter().filter(|record| {
        !record.scopes.is_empty() && record.lease_expires_at.is_some_and(|end| end < now)
    });
    let mut won = Vec::new();
    for record in expired.take(TAKEOVERS_PER_ROUND) {
        let request = TakeoverRequest::adopt(&record.id, worker, Some(short_ttl(dice)));
        let line = match store.claim_for_takeover(&request).await {
            Ok(Takeover::Taken(taken)) => {
                won.extend(taken.claim());
                json!({ "op": "takeover", "id": taken.id, "outcome": "taken", "fence": taken.fence })
            }
            Ok(Takeover::NotTaken(why)) => json!({
                "op": "takeover", "id": record.id, "outcome": "not_taken",
                "reason": format!("{why:?}"),
            }),
            Ok(other) => panic!("unexpected takeover {other:?}"),
            Err(error) => unknown("takeover", &record.id, &error),
        };
        answer(line);
    }
    won
}

/// Waits until the store clock passed the round's orphan's expiry, then
/// races for it.
async fn race_for_orphan<S: LeaseStore>(store: &S, worker: &str, round: usize) {
    let id = orphan(round);
    // From its admission, not its current lease: a faster worker may have
    // adopted it already.
    let expiry = match store.get(&id).await {
        Ok(Some(record)) => tenure_lease_core::clock::add(record.created_at, orphan_ttl(round)),
        Ok(None) => panic!("{id} is missing"),
        Err(error) => return answer(unknown("orphan", &id, &error)),
    };
    let waited = tokio::time::timeout(CLOCK_WAIT_BOUND, async {
        while !matches!(store.now().await, Ok(now) if now > expiry) {
            tokio::time::sleep(CLOCK_POLL).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the store clock never passed {id}'s expiry");
    let request = if round % 2 == 0 {
        TakeoverRequest::fail(&id, worker, "orphaned")
    } else {
        TakeoverRequest::adopt(&id, worker, Some(ADOPTED_ORPHAN_TTL))
    };
    answer(match store.claim_for_takeover(&request).await {
        Ok(Takeover::Taken(record)) => {
            json!({ "op": "orphan", "id": id, "outcome": "taken", "fence": record.fence })
        }
        Ok(Takeover::NotTaken(why)) => json!({
            "op": "orphan", "id": id, "outcome": "not_taken", "reason": format!("{why:?}"),
        }),
        Ok(other) => panic!("unexpected takeover {other:?}"),
        Err(error) => unknown("orphan", &id, &error),
    });
}

/// What [`check_history`] counted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HistorySummary {
    /// Calls the children made and answered (unknown answers included).
    calls: usize,
    /// Calls answered with an `Err`.
    unknown: usize,
    /// Fences handed out.
    fences: usize,
    /// Records admitted.
    admitted: usize,
    /// Records interrupted by admissions.
    interrupted: usize,
    /// Admissions refused by a conflict.
    conflicts: usize,
    /// Takeovers won (orphans and expired scope records).
    taken: usize,
}

fn all_answers<'a>(results: &'a [ChildAnswers]) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
    results.iter().flat_map(|child| {
        child
            .answers
            .iter()
            .map(move |answer| (child.worker.as_str(), answer))
    })
}

fn is(answer: &Value, op: &str, outcome: &str) -> bool {
    field(answer, "op") == op && field(answer, "outcome") == outcome
}

/// Parent side, after every child exited: checks the answers of
/// [`play_child`] against each other and against the store.
///
/// - every child answered every round's calls, and fences are distinct and
///   grow per process ([`check_fences`]);
/// - per scope, the store's history (`list_by_scope`) holds every record a
///   child was told was admitted, and nothing nobody asked for; no two
///   records' active periods overlap (each record left the active states
///   no later than the next one was created) and at most one is active now;
/// - per record, its fence is the last one handed out for it (or later, if
///   a call on it went unanswered);
/// - per orphan, exactly one worker took it (at most one when a call went
///   unanswered), and the store agrees on its owner and fence.
async fn check_history<S: LeaseStore>(
    store: &S,
    results: &[ChildAnswers],
    rounds: usize,
) -> HistorySummary {
    for child in results {
        let orphan_answers = child
            .answers
            .iter()
            .filter(|answer| field(answer, "op") == "orphan")
            .count();
        let admit_answers = child
            .answers
            .iter()
            .filter(|answer| field(answer, "op") == "admit")
            .count();
        assert_eq!(
            (admit_answers, orphan_answers),
            (rounds * SCOPES.len(), rounds),
            "{} answered every admission and every race",
            child.worker
        );
    }
    let fences = check_fences(results);
    let unknown_ids: BTreeSet<&str> = all_answers(results)
        .filter(|(_, answer)| field(answer, "outcome") == "unknown")
        .map(|(_, answer)| field(answer, "id").as_str().expect("an id"))
        .collect();

    let mut handed: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, answer) in all_answers(results) {
        if let Some(fence) = answer.get("fence").and_then(Value::as_u64) {
            let id = field(answer, "id").as_str().expect("an id");
            handed.entry(id).or_default().push(fence);
        }
        for each in answer
            .get("interrupted")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = field(each, "id").as_str().expect("an id");
            let fence = field(each, "fence").as_u64().expect("a fence");
            handed.entry(id).or_default().push(fence);
        }
    }
    for (id, fences) in &handed {
        let record = store
            .get(id)
            .await
            .expect("get")
            .expect("a handed-out record");
        let last = fences.iter().copied().max().unwrap_or_default();
        if unknown_ids.contains(id) {
            assert!(
                record.fence >= last,
                "{id}: fence {} < {last}",
                record.fence
            );
        } else {
            assert_eq!(
                record.fence, last,
                "{id}: the last fence handed out is stored"
            );
        }
    }

    let mut admitted = 0;
    for scope in SCOPES {
        let told: BTreeMap<&str, u64> = all_answers(results)
            .filter(|(_, answer)| is(answer, "admit", "admitted"))
            .filter(|(_, answer)| field(answer, "scope") == scope)
            .map(|(_, answer)| {
                let id = field(answer, "id").as_str().expect("an id");
                (id, field(answer, "fence").as_u64().expect("a fence"))
            })
            .collect();
        admitted += told.len();
        let mut history = store.list_by_scope(scope).await.expect("history");
        history.sort_by_key(|record| (record.created_at, record.fence));
        let stored: BTreeSet<&str> = history.iter().map(|record| record.id.as_str()).collect();
        for id in told.keys() {
            assert!(stored.contains(id), "{scope}: admitted {id} is missing");
        }
        for id in &stored {
            assert!(
                told.contains_key(id) || unknown_ids.contains(id),
                "{scope}: {id} is stored but nobody was told it was admitted"
            );
        }
        let active = history.iter().filter(|record| record.is_active()).count();
        assert!(active <= 1, "{scope}: {active} active records at the end");
        for (index, later) in history.iter().enumerate() {
            for earlier in &history[..index] {
                assert!(
                    !earlier.is_active() && earlier.updated_at <= later.created_at,
                    "{scope}: {} ({}, until {}) was still active when {} was admitted at {}",
                    earlier.id,
                    earlier.status,
                    earlier.updated_at,
                    later.id,
                    later.created_at
                );
            }
        }
    }

    for round in 0..rounds {
        let id = orphan(round);
        let winners: Vec<(&str, u64)> = all_answers(results)
            .filter(|(_, answer)| {
                is(answer, "orphan", "taken") && field(answer, "id") == id.as_str()
            })
            .map(|(worker, answer)| (worker, field(answer, "fence").as_u64().expect("a fence")))
            .collect();
        let record = store.get(&id).await.expect("get").expect("the orphan");
        let expected_status = if round % 2 == 0 {
            Status::Failed
        } else {
            Status::Running
        };
        assert_eq!(record.status, expected_status, "{id}");
        match winners.as_slice() {
            [(worker, fence)] => {
                assert_eq!(
                    record.owner.as_deref(),
                    Some(*worker),
                    "{id}: the winner owns it"
                );
                assert_eq!(record.fence, *fence, "{id}: the winner's fence is stored");
            }
            [] => assert!(
                unknown_ids.contains(id.as_str()),
                "{id}: nobody took it and no call on it went unanswered"
            ),
            many => panic!("{id}: {} takeovers won: {many:?}", many.len()),
        }
    }

    let calls = all_answers(results).count();
    HistorySummary {
        calls,
        unknown: all_answers(results)
            .filter(|(_, answer)| field(answer, "outcome") == "unknown")
            .count(),
        fences,
        admitted,
        interrupted: all_answers(results)
            .filter_map(|(_, answer)| answer.get("interrupted").and_then(Value::as_array))
            .map(Vec::len)
            .sum(),
        conflicts: all_answers(results)
            .filter(|(_, answer)| is(answer, "admit", "conflict"))
            .count(),
        taken: all_answers(results)
            .filter(|(_, answer)| field(answer, "outcome") == "taken")
            .count(),
    }
}

//! Every field of a stored lease record and of a stored job damaged in turn
//! (values out of range, not numbers, unknown states, malformed JSON, bytes
//! that are not UTF-8, missing fields, a key of the wrong type): every read
//! path answers `Corrupt` (point reads) or skips and reports (scans), nothing
//! panics, and nothing but what the healthy records' own operations write
//! changes.
//!
//! Each test works in a fresh namespace of the shared server
//! (`TENURE_REDIS_URL`) and deletes it afterwards; without the variable it
//! prints one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde_json::json;
use tenure_backend_redis::RedisStore;
use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, NewJob, UniquePolicy};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, ErrorKind, ExpiredQuery, LeaseStore,
};

use crate::scratch;

use scratch::{admitted, with_namespace, Scratch};

const TTL: Duration = Duration::from_secs(600);

/// One damage: a field set to bytes, or deleted (`None`).
type Damage = (&'static str, Option<&'static [u8]>);

/// Damages to a lease record hash, each leaving a record tenure cannot
/// represent.
const LEASE_DAMAGES: &[Damage] = &[
    ("status", Some(b"bogus")),
    ("status", None),
    ("fence", Some(b"abc")),
    ("fence", Some(b"-1")),
    ("fence", Some(b"99999999999999999999999")),
    ("fence", None),
    ("created", Some(b"yesterday")),
    ("created", Some(b"9223372036854775807")),
    ("created", Some(b"-9223372036854775808")),
    ("created", Some(b"1e5")),
    ("created", None),
    ("updated", Some(b"12.5")),
    ("updated", Some(b"99999999999999999999999999")),
    ("updated", None),
    ("expires", Some(b"soon")),
    ("expires", Some(b"9223372036854775807")),
    ("kind", None),
    ("kind", Some(b"\xff\xfe")),
    ("owner", Some(b"\xff")),
    ("error", Some(b"\xc3")),
    ("stop", Some(b"\xff")),
    ("scopes", Some(b"not json")),
    ("scopes", Some(b"[1]")),
    ("scopes", Some(b"\"s\"")),
    ("scopes", Some(b"[\"\xff\"]")),
    ("scopes", None),
    ("meta", Some(b"{not json")),
    ("meta", Some(b"[1]")),
    ("meta", None),
];

/// Damages to a job hash the scripts themselves detect, so `claim` and
/// `reap` leave the job alone (with `owner` or `error` not UTF-8 a script
/// would claim the job and overwrite the owner; those are in
/// [`JOB_TEXT_DAMAGES`]).
const JOB_DAMAGES: &[Damage] = &[
    ("state", Some(b"bogus")),
    ("state", None),
    ("payload", Some(b"{not json")),
    ("payload", None),
    ("priority", Some(b"high")),
    ("priority", Some(b"99999999999")),
    ("priority", None),
    ("run_at", Some(b"-9223372036854775808")),
    ("attempt", Some(b"-1")),
    ("attempt", Some(b"4294967296")),
    ("attempt", Some(b"1001")),
    ("max_attempts", Some(b"5000")),
    ("attempt", None),
    ("max_attempts", Some(b"three")),
    ("caps", Some(b"{\"a\":1}")),
    ("caps", Some(b"[1]")),
    ("caps", None),
    ("fence", Some(b"abc")),
    ("fence", Some(b"-3")),
    ("fence", None),
    ("expires", Some(b"soon")),
    ("dead", Some(b"bogus")),
    ("created", Some(b"x")),
    ("created", Some(b"99999999999999999999")),
    ("updated", None),
    ("unique_key", Some(b"k")),
    ("unique_policy", Some(b"while_queued")),
    ("unique_until", Some(b"1700000000000000")),
    ("progress", Some(b"{not json")),
    ("progress", Some(b"null")),
];

/// Damages to the uniqueness fields of a job enqueued with a key, each
/// with the policy of the job it is applied to.
const UNIQUE_DAMAGES: &[(UniquePolicy, Damage)] = &[
    (UniquePolicy::WhileQueued, ("unique_policy", Some(b"bogus"))),
    (UniquePolicy::WhileQueued, ("unique_policy", None)),
    (UniquePolicy::WhileQueued, ("unique_key", None)),
    (UniquePolicy::WhileQueued, ("unique_key", Some(b""))),
    (
        UniquePolicy::WhileQueued,
        ("unique_key", Some(b"line\nbreak")),
    ),
    (
        UniquePolicy::WhileQueued,
        ("unique_until", Some(b"9000000000000000")),
    ),
    (UniquePolicy::ForPeriod(TTL), ("unique_until", None)),
    (
        UniquePolicy::ForPeriod(TTL),
        ("unique_until", Some(b"soon")),
    ),
    (UniquePolicy::ForPeriod(TTL), ("unique_until", Some(b"0"))),
    (
        UniquePolicy::ForPeriod(TTL),
        ("unique_policy", Some(b"while_unfinished")),
    ),
];

/// Damages only the Rust side detects: point reads answer `Corrupt`.
const JOB_TEXT_DAMAGES: &[Damage] = &[
    ("owner", Some(b"\xff")),
    ("error", Some(b"\xc3")),
    ("queue", Some(b"\xff")),
    ("run_at", Some(b"9223372036854775807")),
];

/// A rate limit's log damaged in turn, for a limit of two permits: no JSON
/// array of integer instants, or more uses than permits.
const RATE_LOG_DAMAGES: &[&[u8]] = &[
    b"",
    b"not json",
    b"{\"a\":1}",
    b"[1.5]",
    b"[1e3]",
    b"[\"1700000000000000\"]",
    b"[01]",
    b"[1,]",
    b"[1 2]",
    b"[9223372036854775807]",
    b"[-9223372036854775808]",
    b"[1,2,3]",
    b"\xff",
    b"[1,\xff]",
];

/// A counted holder's `slots` field damaged in turn: no JSON object of
/// `u32` slot numbers. The scripts refuse each as the Rust side does.
const SLOTS_DAMAGES: &[&[u8]] = &[
    b"",
    b"not json",
    b"[1]",
    b"[]",
    b"\"c\"",
    b"1",
    b"null",
    b"{\"c\":-1}",
    b"{\"c\":-0}",
    b"{\"c\":1.5}",
    b"{\"c\":1.0}",
    b"{\"c\":1e0}",
    b"{\"c\":01}",
    b"{\"c\":4294967296}",
    b"{\"c\":99999999999999999999999}",
    b"{\"c\":\"1\"}",
    b"{\"c\":null}",
    b"{\"c\":true}",
    b"{\"c\":{}}",
    b"{\"c\":[1]}",
    b"{\"c\":1",
    b"{\"c\":1,}",
    b"{\"c\" 1}",
    b"{\"c\":1}}",
    b"{\"c\":1} x",
    b"{\"c\\\":1}",
    b"{c:1}",
];

/// Damages to `slots` only the Rust side detects (the scripts do not check
/// the UTF-8 of texts): reads answer `Corrupt`.
const SLOTS_TEXT_DAMAGES: &[&[u8]] = &[b"{\"\xff\":1}", b"{\"c\":1,\"\xc3\":2}"];

/// Every key of the namespace with its type and content, to compare.
async fn snapshot(raw: &mut MultiplexedConnection, prefix: &str) -> BTreeMap<String, String> {
    let keys: Vec<String> = raw.keys(format!("{prefix}*")).await.expect("KEYS");
    let mut contents = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(raw)
            .await
            .expect("TYPE");
        let content = match kind.as_str() {
            "hash" => {
                let fields: BTreeMap<String, Vec<u8>> = raw.hgetall(&key).await.expect("HGETALL");
                format!("{fields:?}")
            }
            "zset" => {
                let members: Vec<(Vec<u8>, f64)> =
                    raw.zrange_withscores(&key, 0, -1).await.expect("ZRANGE");
                format!("{members:?}")
            }
            "string" => {
                let value: Vec<u8> = raw.get(&key).await.expect("GET");
                format!("{value:?}")
            }
            other => other.to_owned(),
        };
        contents.insert(key, content);
    }
    contents
}

/// Applies `damage` to the hash at `key`.
async fn damage(raw: &mut MultiplexedConnection, key: &str, (field, value): Damage) {
    scratch::set_field(raw, key, field, value)
        .await
        .expect("HSET or HDEL");
}

/// Replaces the hash at `key` by a string: the wrong type.
async fn wrong_type(raw: &mut MultiplexedConnection, key: &str) {
    let _: () = raw.del(key).await.expect("DEL");
    let _: () = raw.set(key, "not a hash").await.expect("SET");
}

fn assert_corrupt<T: std::fmt::Debug>(what: &str, answer: tenure_lease_core::Result<T>) {
    match answer {
        Err(error) => assert_eq!(error.kind(), ErrorKind::Corrupt, "{what}: {error}"),
        Ok(value) => panic!("{what} answered {value:?}, not Corrupt"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_lease_field_is_corrupt_or_skipped() {
    with_namespace(
        "damaged_leases",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let good = admitted(&store, AdmitRequest::new("good", "w").scope("s-good")).await;
            let mut damaged = BTreeMap::new();
            for (index, &what) in LEASE_DAMAGES.iter().enumerate() {
                let id = format!("lease-{index}");
                admitted(
                    &store,
                    AdmitRequest::new(id.clone(), "w").scope(format!("s-{index}")),
                )
                .await;
                damage(&mut raw, &format!("{prefix}rec:{id}"), what).await;
                damaged.insert(id, format!("{what:?}"));
            }
            let index = LEASE_DAMAGES.len();
            let id = format!("lease-{index}");
            admitted(
                &store,
                AdmitRequest::new(id.clone(), "w").scope(format!("s-{index}")),
            )
            .await;
            wrong_type(&mut raw, &format!("{prefix}rec:{id}")).await;
            damaged.insert(id, "a string, not a hash".to_owned());
            let before = snapshot(&mut raw, &prefix).await;

            for (id, what) in &damaged {
                assert_corrupt(&format!("get of {id} ({what})"), store.get(id).await);
            }
            let scan = store
                .list_expired(&ExpiredQuery::new(Duration::ZERO).limit(1000))
                .await
                .expect("list_expired skips what it cannot decode");
            assert_eq!(scan.records, vec![good.clone()]);
            let skipped: BTreeSet<&str> = scan.skipped.iter().map(|s| s.id.as_str()).collect();
            let expected: BTreeSet<&str> = damaged.keys().map(String::as_str).collect();
            assert_eq!(skipped, expected, "{:?}", scan.skipped);
            assert!(
                scan.skipped.iter().all(|s| !s.reason.is_empty()),
                "{:?}",
                scan.skipped
            );
            for (id, what) in &damaged {
                let scope = format!("s-{}", id.trim_start_matches("lease-"));
                assert_corrupt(
                    &format!("list_by_scope of {id} ({what})"),
                    store.list_by_scope(&scope).await,
                );
            }
            assert_corrupt("list_active", store.list_active().await);
            assert_eq!(
                store
                    .list_by_scope("s-good")
                    .await
                    .expect("a healthy scope"),
                vec![good.clone()]
            );
            assert_eq!(store.get("good").await.expect("get"), Some(good));
            assert_eq!(
                snapshot(&mut raw, &prefix).await,
                before,
                "reads changed nothing"
            );
        },
    )
    .await;
}

/// Enqueues `id` on `queue` with `priority`.
async fn enqueue(store: &RedisStore, queue: &str, id: &str, priority: i32) {
    store
        .enqueue(
            &NewJob::new(queue, json!({ "id": id }))
                .id(id)
                .priority(priority),
        )
        .await
        .expect("enqueue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_job_field_is_corrupt_or_skipped() {
    with_namespace(
        "damaged_jobs",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let job_key = |id: &str| format!("{prefix}job:{id}");

            // Queued jobs: claim skips every damaged one and leaves it as it is.
            enqueue(&store, "q", "good", -1).await;
            let mut damaged = BTreeMap::new();
            for (index, &what) in JOB_DAMAGES.iter().enumerate() {
                let id = format!("queued-{index}");
                enqueue(&store, "q", &id, 1).await;
                damage(&mut raw, &job_key(&id), what).await;
                damaged.insert(id, format!("{what:?}"));
            }
            enqueue(&store, "q", "queued-wrong-type", 1).await;
            wrong_type(&mut raw, &job_key("queued-wrong-type")).await;
            damaged.insert("queued-wrong-type".to_owned(), "a string".to_owned());
            for (index, &what) in JOB_TEXT_DAMAGES.iter().enumerate() {
                let id = format!("text-{index}");
                enqueue(&store, "t", &id, 1).await;
                damage(&mut raw, &job_key(&id), what).await;
                assert_corrupt(
                    &format!("get_job of {id} ({what:?})"),
                    store.get_job(&id).await,
                );
            }
            for (id, what) in &damaged {
                assert_corrupt(
                    &format!("get_job of {id} ({what})"),
                    store.get_job(id).await,
                );
            }
            let before = snapshot(&mut raw, &prefix).await;
            let claimed = store
                .claim(&ClaimRequest::new("q", "w", TTL).limit(100))
                .await
                .expect("claim skips what it cannot judge");
            let claimed_ids: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
            assert_eq!(claimed_ids, ["good"]);
            let after = snapshot(&mut raw, &prefix).await;
            for (key, content) in &before {
                if key.ends_with(":job:good") || key.ends_with(":fence") {
                    continue;
                }
                let now = after.get(key).unwrap_or_else(|| panic!("{key} vanished"));
                if key.ends_with(":ready:q") {
                    continue;
                }
                assert_eq!(now, content, "{key} changed");
            }
            let ready: Vec<String> = raw
                .zrange(format!("{prefix}ready:q"), 0, -1)
                .await
                .expect("ZRANGE");
            assert_eq!(ready.len(), damaged.len(), "only the good job left ready");
            assert!(ready.iter().all(|rank| !rank.ends_with("good")));

            // Claimed jobs whose lease expired: reap skips the damaged ones,
            // settling them answers Corrupt, and they stay as they are.
            let short = Duration::from_millis(5);
            enqueue(&store, "r", "reaped", 0).await;
            for index in 0..JOB_DAMAGES.len() {
                enqueue(&store, "r", &format!("claimed-{index}"), 0).await;
            }
            let claimed = store
                .claim(&ClaimRequest::new("r", "w", short).limit(100))
                .await
                .expect("claim");
            assert_eq!(claimed.len(), JOB_DAMAGES.len() + 1);
            let mut claims = BTreeMap::new();
            for job in &claimed {
                claims.insert(job.job.id.clone(), job.claim.clone());
            }
            for (index, &what) in JOB_DAMAGES.iter().enumerate() {
                damage(&mut raw, &job_key(&format!("claimed-{index}")), what).await;
            }
            let latest = claimed
                .iter()
                .filter_map(|job| job.job.lease_expires_at)
                .max()
                .expect("leases");
            while store.now().await.expect("now") <= latest {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let before = snapshot(&mut raw, &prefix).await;
            for (index, what) in JOB_DAMAGES.iter().enumerate() {
                let id = format!("claimed-{index}");
                let claim = &claims[&id];
                assert_corrupt(
                    &format!("complete of {id} ({what:?})"),
                    store.complete(claim).await,
                );
                assert_corrupt(
                    &format!("renew_job of {id} ({what:?})"),
                    store.renew_job(claim, TTL).await,
                );
                assert_corrupt(
                    &format!("fail of {id} ({what:?})"),
                    store.fail(claim, "boom", FailAction::DeadLetter).await,
                );
            }
            assert_eq!(snapshot(&mut raw, &prefix).await, before, "nothing settled");
            let report = store.reap(Duration::ZERO).await.expect("reap skips");
            let requeued: Vec<&str> = report.requeued.iter().map(|job| job.id.as_str()).collect();
            assert_eq!(requeued, ["reaped"]);
            assert!(report.dead_lettered.is_empty(), "{report:?}");
            let after = snapshot(&mut raw, &prefix).await;
            for index in 0..JOB_DAMAGES.len() {
                let key = job_key(&format!("claimed-{index}"));
                assert_eq!(after.get(&key), before.get(&key), "{key} changed");
            }

            // A dead letter that is damaged makes the listing Corrupt.
            enqueue(&store, "d", "dead", 0).await;
            let job = store
                .claim(&ClaimRequest::new("d", "w", TTL))
                .await
                .expect("claim")
                .pop()
                .expect("a job");
            store
                .fail(&job.claim, "boom", FailAction::DeadLetter)
                .await
                .expect("dead-letter");
            assert_eq!(
                store.list_dead_letters("d", 10).await.expect("list").len(),
                1
            );
            damage(&mut raw, &job_key("dead"), ("updated", Some(b"later"))).await;
            assert_corrupt("list_dead_letters", store.list_dead_letters("d", 10).await);
            assert_corrupt("retry_dead_letter", store.retry_dead_letter("dead").await);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_uniqueness_field_is_corrupt_and_holds_nothing() {
    with_namespace(
        "damaged_unique",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let keyed = |id: &str, key: &str, policy| {
                NewJob::new("q", json!({ "id": id }))
                    .id(id)
                    .unique(key, policy)
            };
            for (index, &(policy, what)) in UNIQUE_DAMAGES.iter().enumerate() {
                let (id, key) = (format!("damaged-{index}"), format!("key-{index}"));
                let answer = store
                    .enqueue_unique(&keyed(&id, &key, policy))
                    .await
                    .expect("enqueue_unique");
                assert!(answer.is_created(), "{answer:?}");
                damage(&mut raw, &format!("{prefix}job:{id}"), what).await;
                assert_corrupt(
                    &format!("get_job of {id} ({what:?})"),
                    store.get_job(&id).await,
                );
                let before = snapshot(&mut raw, &format!("{prefix}job:{id}")).await;
                let again = store
                    .enqueue_unique(&keyed(&format!("again-{index}"), &key, policy))
                    .await
                    .expect("enqueue_unique passes over the damaged job");
                assert!(again.is_created(), "{what:?}: {again:?}");
                let after = snapshot(&mut raw, &format!("{prefix}job:{id}")).await;
                assert_eq!(after, before, "{what:?}: the damaged job is left alone");
            }
            let claimed = store
                .claim(&ClaimRequest::new("q", "w", TTL).limit(100))
                .await
                .expect("claim skips what it cannot judge");
            let mut claimed_ids: Vec<&str> = claimed.iter().map(|c| c.job.id.as_str()).collect();
            claimed_ids.sort_unstable();
            let mut again: Vec<String> = (0..UNIQUE_DAMAGES.len())
                .map(|index| format!("again-{index}"))
                .collect();
            again.sort_unstable();
            assert_eq!(claimed_ids, again, "only the healthy jobs are claimed");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_key_of_the_wrong_type_never_wedges_retention() {
    with_namespace(
        "wedged_retention",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            for id in ["before", "damaged", "after"] {
                enqueue(&store, "q", id, 0).await;
            }
            let claimed = store
                .claim(&ClaimRequest::new("q", "w", TTL).limit(10))
                .await
                .expect("claim");
            assert_eq!(claimed.len(), 3);
            for job in &claimed {
                store.complete(&job.claim).await.expect("complete");
            }
            let damaged_key = format!("{prefix}job:damaged");
            wrong_type(&mut raw, &damaged_key).await;

            assert_eq!(
                store.purge_jobs(Duration::ZERO).await.expect("purge"),
                2,
                "the healthy jobs on both sides of the damaged one go"
            );
            let left: String = raw.get(&damaged_key).await.expect("GET");
            assert_eq!(left, "not a hash", "a key tenure cannot read is left alone");
            for id in ["before", "after"] {
                assert_eq!(store.get_job(id).await.expect("get_job"), None, "{id}");
            }
            let finished: Vec<String> = raw
                .zrange(format!("{prefix}finished"), 0, -1)
                .await
                .expect("ZRANGE");
            assert!(finished.is_empty(), "{finished:?}");
            assert_eq!(store.purge_jobs(Duration::ZERO).await.expect("again"), 0);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_follow_the_clock_and_never_go_back() {
    with_namespace(
        "fence_clock",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let fence_key = format!("{prefix}fence");
            // A counter lost or left behind (a restart, a lagging replica):
            // the next fence comes from the server's clock.
            let _: () = raw.set(&fence_key, "5").await.expect("SET");
            let now = tenure_lease_core::clock::to_micros(store.now().await.expect("now"));
            let first = admitted(&store, AdmitRequest::new("a", "w")).await;
            assert!(
                i128::from(first.fence) >= i128::from(now),
                "{} from a clock at {now}",
                first.fence
            );
            // Fences drawn faster than the clock ticks still increase.
            let second = admitted(&store, AdmitRequest::new("b", "w")).await;
            assert!(second.fence > first.fence);
            // A counter ahead of the clock goes on from where it is.
            let ahead = first.fence + 1_000_000_000_000;
            let _: () = raw.set(&fence_key, ahead).await.expect("SET");
            let third = admitted(&store, AdmitRequest::new("c", "w")).await;
            assert_eq!(third.fence, ahead + 1);
            enqueue(&store, "q", "job", 0).await;
            let job = store
                .claim(&ClaimRequest::new("q", "w", TTL))
                .await
                .expect("claim")
                .pop()
                .expect("a job");
            assert_eq!(job.claim.fence, ahead + 2);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_exhausted_fence_counter_is_corrupt_and_changes_nothing() {
    with_namespace(
        "fence_damaged",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let fence_key = format!("{prefix}fence");
            let holder = admitted(&store, AdmitRequest::new("holder", "w").scope("s")).await;
            enqueue(&store, "q", "job", 0).await;
            // 2^53 - 2^32 and beyond: Lua's doubles would round the next fences.
            for counter in [
                "abc",
                "-1",
                "9007199254740992",
                "9007194959773696",
                "123456789012345678901",
            ] {
                let _: () = raw.set(&fence_key, counter).await.expect("SET");
                let before = snapshot(&mut raw, &prefix).await;
                assert_corrupt(
                    &format!("admit with counter {counter}"),
                    store
                        .admit(
                            &AdmitRequest::new("rival", "w2")
                                .scope("s")
                                .strategy(tenure_lease_core::AdmitStrategy::Interrupt),
                        )
                        .await,
                );
                assert_corrupt(
                    &format!("takeover with counter {counter}"),
                    store
                        .claim_for_takeover(&tenure_lease_core::TakeoverRequest::adopt(
                            "holder", "w3", None,
                        ))
                        .await,
                );
                assert_corrupt(
                    &format!("claim with counter {counter}"),
                    store.claim(&ClaimRequest::new("q", "w", TTL)).await,
                );
                assert_eq!(snapshot(&mut raw, &prefix).await, before, "{counter}");
            }
            let _: () = raw.del(&fence_key).await.expect("DEL");
            let _: () = raw.hset(&fence_key, "a", "b").await.expect("HSET");
            assert_corrupt(
                "admit with a hash for a counter",
                store.admit(&AdmitRequest::new("other", "w")).await,
            );
            assert_eq!(store.get("holder").await.expect("get"), Some(holder));
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_rate_log_is_corrupt_and_changes_nothing() {
    with_namespace(
        "damaged_rate_log",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let limit = RateLimit::new("api", 2, Duration::from_secs(60));
            let log_key = format!("{prefix}rate:2:60000:api");
            let index_key = format!("{prefix}rates");
            // An expired holder an interrupting admission would interrupt, a
            // queued job and a due one still in the delayed index: a claim
            // would take the first and move the second.
            let holder = admitted(
                &store,
                AdmitRequest::new("holder", "w1")
                    .scope("s")
                    .ttl(Duration::from_millis(1)),
            )
            .await;
            enqueue(&store, "q", "ready", 0).await;
            let soon = tenure_lease_core::clock::add(
                store.now().await.expect("now"),
                Duration::from_millis(50),
            );
            store
                .enqueue(&NewJob::new("q", json!({})).id("due").run_at(soon))
                .await
                .expect("enqueue");
            while store.now().await.expect("now") <= soon {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let admission = AdmitRequest::new("rival", "w2")
                .scope("s")
                .strategy(AdmitStrategy::Interrupt)
                .rate_limit(limit.clone());
            let claim = ClaimRequest::new("q", "w", TTL)
                .limit(10)
                .rate_limit(limit.clone());

            for &bytes in RATE_LOG_DAMAGES {
                if let Ok(text) = std::str::from_utf8(bytes) {
                    assert!(
                        rate_rules::decode_uses(text, &limit).is_err(),
                        "every backend refuses {text:?}"
                    );
                }
                let _: () = raw.set(&log_key, bytes).await.expect("SET");
                let what = format!("log {:?}", String::from_utf8_lossy(bytes));
                let before = snapshot(&mut raw, &prefix).await;
                assert_corrupt(&format!("admit, {what}"), store.admit(&admission).await);
                assert_corrupt(
                    &format!("claim_limited, {what}"),
                    store.claim_limited(&claim).await,
                );
                assert_eq!(
                    snapshot(&mut raw, &prefix).await,
                    before,
                    "{what}: nothing changed"
                );
                // The id and the scopes are judged before the limit.
                let taken = store
                    .admit(&AdmitRequest::new("holder", "w2").rate_limit(limit.clone()))
                    .await
                    .expect_err("a taken id");
                assert_eq!(taken.kind(), ErrorKind::AlreadyExists, "{what}");
                let rejected = store
                    .admit(
                        &AdmitRequest::new("rival", "w2")
                            .scope("s")
                            .rate_limit(limit.clone()),
                    )
                    .await
                    .expect("a held scope");
                assert!(
                    matches!(rejected, Admission::Conflict { .. }),
                    "{what}: {rejected:?}"
                );
            }

            // A log of another type, then an index of another type.
            let _: () = raw.del(&log_key).await.expect("DEL");
            let _: () = raw.hset(&log_key, "a", "b").await.expect("HSET");
            let before = snapshot(&mut raw, &prefix).await;
            assert_corrupt("admit, a hash for a log", store.admit(&admission).await);
            assert_corrupt(
                "claim_limited, a hash for a log",
                store.claim_limited(&claim).await,
            );
            assert_eq!(
                snapshot(&mut raw, &prefix).await,
                before,
                "a hash for a log"
            );
            let _: () = raw.del(&log_key).await.expect("DEL");
            let _: () = raw.set(&index_key, "not a zset").await.expect("SET");
            let before = snapshot(&mut raw, &prefix).await;
            assert_corrupt(
                "admit, a string for the index",
                store.admit(&admission).await,
            );
            assert_corrupt(
                "claim_limited, a string for the index",
                store.claim_limited(&claim).await,
            );
            assert_eq!(
                snapshot(&mut raw, &prefix).await,
                before,
                "a string for the index"
            );
            let jobs: Vec<String> = raw
                .zrange(format!("{prefix}delayed:q"), 0, -1)
                .await
                .expect("ZRANGE");
            assert_eq!(jobs.len(), 1, "the due job was never moved");

            // Repaired, the same calls go through, each using its permits.
            let _: () = raw.del(&index_key).await.expect("DEL");
            let admitted = store.admit(&admission).await.expect("admit");
            let Admission::Admitted { interrupted, .. } = admitted else {
                panic!("not admitted: {admitted:?}");
            };
            assert_eq!(interrupted.len(), 1);
            assert_eq!(interrupted[0].id, holder.id);
            let claimed = store.claim_limited(&claim).await.expect("claim_limited");
            assert_eq!(claimed.jobs.len(), 1, "{claimed:?}");
            assert!(claimed.retry_after.is_some(), "{claimed:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_slots_field_is_corrupt_and_changes_nothing() {
    with_namespace(
        "damaged_slots",
        |config| config,
        |scratch| async move {
            let Scratch {
                store,
                mut raw,
                prefix,
            } = scratch;
            let key = format!("{prefix}rec:victim");
            // Two lapsed holders of a counted scope: an interrupting
            // admission, full, reads both and would interrupt the first.
            let lapsing = |id: &str| {
                AdmitRequest::new(id, "w1")
                    .counted_scope("c", 2)
                    .ttl(Duration::from_millis(1))
            };
            let first = admitted(&store, lapsing("first")).await;
            let victim = admitted(&store, lapsing("victim")).await;
            assert_eq!(victim.slot("c"), Some(1));
            let stored: Vec<u8> = raw.hget(&key, "slots").await.expect("HGET");
            let ends = victim.lease_expires_at.expect("a lease");
            while store.now().await.expect("now") <= ends {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let rival = AdmitRequest::new("rival", "w2")
                .counted_scope("c", 2)
                .strategy(AdmitStrategy::Interrupt);
            let claim = victim.claim().expect("a claim");

            for &bytes in SLOTS_DAMAGES.iter().chain(SLOTS_TEXT_DAMAGES) {
                assert!(
                    serde_json::from_slice::<BTreeMap<String, u32>>(bytes).is_err(),
                    "{:?} is no JSON object of u32",
                    String::from_utf8_lossy(bytes)
                );
                let what = format!("slots {:?}", String::from_utf8_lossy(bytes));
                let _: () = raw.hset(&key, "slots", bytes).await.expect("HSET");
                let before = snapshot(&mut raw, &prefix).await;
                assert_corrupt(&format!("get, {what}"), store.get("victim").await);
                assert_corrupt(
                    &format!("list_by_scope, {what}"),
                    store.list_by_scope("c").await,
                );
                assert_corrupt(&format!("list_active, {what}"), store.list_active().await);
                let scan = store
                    .list_expired(&ExpiredQuery::new(Duration::ZERO).limit(10))
                    .await
                    .expect("list_expired skips what it cannot decode");
                assert_eq!(scan.records, vec![first.clone()], "{what}");
                assert_eq!(
                    scan.skipped
                        .iter()
                        .map(|s| s.id.as_str())
                        .collect::<Vec<_>>(),
                    ["victim"],
                    "{what}"
                );
                if SLOTS_DAMAGES.contains(&bytes) {
                    assert_corrupt(&format!("admit, {what}"), store.admit(&rival).await);
                    assert_corrupt(
                        &format!("transition, {what}"),
                        store
                            .transition(&claim, &tenure_lease_core::StatusChange::failed("x"))
                            .await,
                    );
                    assert_corrupt(
                        &format!("takeover, {what}"),
                        store
                            .claim_for_takeover(&tenure_lease_core::TakeoverRequest::adopt(
                                "victim", "w3", None,
                            ))
                            .await,
                    );
                }
                assert_eq!(
                    snapshot(&mut raw, &prefix).await,
                    before,
                    "{what}: nothing changed"
                );
            }

            // Repaired, the record reads as admitted and the admission goes
            // through, interrupting the lowest lapsed holder only.
            let _: () = raw.hset(&key, "slots", &stored).await.expect("HSET");
            assert_eq!(store.get("victim").await.expect("get"), Some(victim));
            let admission = store.admit(&rival).await.expect("admit");
            let Admission::Admitted {
                record,
                interrupted,
            } = admission
            else {
                panic!("not admitted: {admission:?}");
            };
            assert_eq!(record.slot("c"), Some(0));
            assert_eq!(
                interrupted
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>(),
                ["first"]
            );
        },
    )
    .await;
}

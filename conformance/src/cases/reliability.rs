//! Conformance cases: reliability under hostile input and under concurrency
//! ([contract](tenure_lease_core::contract) §11 input limits, §7 fences, §13
//! invariants).
//!
//! The other cases feed each operation the values its author thought of.
//! These two feed it what nobody thought of: random and adversarial values
//! at every entry point (a backend must store or refuse each one, never choke
//! on it), and random interleavings of six workers admitting, renewing,
//! taking over and writing through a [`FenceGate`] (the answers must keep
//! mutual exclusion and fence order, so that the gate never lets a stale
//! owner write).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Number, Value};
use tenure_lease_core::backend::validate;
use tenure_lease_core::backend::validate::{
    MAX_JSON_DEPTH, MAX_LIST_LIMIT, MAX_RETENTION, MAX_SCOPES, MAX_TTL, MIN_TTL,
};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, ExpiredQuery, FenceGate, LeaseRecord,
    LeaseStore, Renewal, Status, StatusChange, Takeover, TakeoverAction, TakeoverRequest,
    Timestamp, Transition,
};
use tokio::runtime::Handle;

use super::util::{same_json, SHORT_TTL};
use crate::harness::{CaseResult, ClockControl, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// The environment variable that sets how many random runs the hostile-input
/// cases play: [`hostile_input_is_rejected_or_answered_never_panics`]
/// (default 64 on a clock the kit moves, 16 on a real clock) and
/// `queue_hostile_input_is_rejected_or_answered_never_panics` (48 and 12).
pub const HOSTILE_CASES_VAR: &str = "TENURE_HOSTILE_CASES";

/// Most operations one hostile run plays.
const MAX_HOSTILE_STEPS: usize = 6;

/// Shrinking stops after this long, well inside the case's time limit.
const MAX_SHRINK_MILLIS: u32 = 40_000;

/// Longest rendering of a value in a failure message: hostile values reach
/// 100 KiB.
const MAX_SHOWN_CHARS: usize = 600;

/// Every `LeaseStore` entry point, fed random and adversarial values (empty,
/// 100 KiB, control characters, NUL, emoji, key-pattern characters,
/// durations from zero to `Duration::MAX`, fences 0 and `u64::MAX`,
/// timestamps at chrono's extremes, metadata that is no object, deeply
/// nested or huge), answers `Ok` exactly when `tenure_lease_core::backend::validate` accepts
/// the input and `InvalidInput` exactly when it refuses it (or
/// `AlreadyExists` for an existing id), never another error, never a panic;
/// a refused call changes nothing, and an admitted record reads back
/// verbatim.
pub async fn hostile_input_is_rejected_or_answered_never_panics<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let cases = hostile_case_count(ctx.clock(), 64, 16)?;
    let handle = Handle::current();
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon_when_dropped = AbandonOnDrop(Arc::clone(&abandoned));
    // proptest drives the runs synchronously; each run drives the store on
    // the case's runtime.
    tokio::task::spawn_blocking(move || explore_hostile(&ctx, &handle, cases, &abandoned))
        .await
        .map_err(|error| Failure(format!("the hostile-input run panicked: {error}")))?
}

/// How many random runs a hostile-input case plays: [`HOSTILE_CASES_VAR`]
/// when set, else `manual` on a clock the kit moves and `real` otherwise.
pub(crate) fn hostile_case_count(
    clock: &ClockControl,
    manual: u32,
    real: u32,
) -> Result<u32, Failure> {
    match std::env::var(HOSTILE_CASES_VAR) {
        Ok(text) => text.trim().parse().map_err(|_| {
            Failure(format!(
                "{HOSTILE_CASES_VAR}={text:?} is not a number of cases"
            ))
        }),
        Err(_) => Ok(match clock {
            ClockControl::Manual(_) => manual,
            _ => real,
        }),
    }
}

/// Tells the blocking exploration to stop when the case is dropped (its time
/// limit passed): the runtime cannot shut down while it runs.
pub(crate) struct AbandonOnDrop(pub(crate) Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn explore_hostile<S: LeaseStore>(
    ctx: &Ctx<S>,
    handle: &Handle,
    cases: u32,
    abandoned: &AtomicBool,
) -> CaseResult {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        max_shrink_time: MAX_SHRINK_MILLIS,
        ..Config::default()
    });
    let runs = AtomicUsize::new(0);
    let tally = Tally::default();
    // A store left broken by one run fails every later one, shrinking
    // included, so the first failure is reported as well as the shortest.
    let first_failure = Mutex::new(None);
    let started = Instant::now();
    let strategy = proptest::collection::vec(hostile_op(), 1..=MAX_HOSTILE_STEPS);
    let result = runner.run(&strategy, |ops| {
        if abandoned.load(Ordering::Relaxed) {
            return Err(TestCaseError::fail("abandoned: the case ran out of time"));
        }
        // Every run, shrinking included, gets ids and scopes of its own.
        let prefix = format!("h{}-", runs.fetch_add(1, Ordering::Relaxed));
        handle
            .block_on(HostileRun::new(ctx, prefix).play(&ops, &tally))
            .map_err(|why| {
                first_failure
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_or_insert_with(|| why.clone());
                TestCaseError::fail(why)
            })
    });
    let tally = tally
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tracing::debug!(
        "hostile input: {} runs, {} calls in {:?}: {tally:?}",
        runs.load(Ordering::Relaxed),
        tally.values().sum::<usize>(),
        started.elapsed()
    );
    hostile_verdict("a store", result, first_failure)
}

// ---------------------------------------------------------------------------
// What a hostile run is made of.

/// Which record an operation names.
#[derive(Debug, Clone)]
enum IdPick {
    /// A record this run admitted (none yet: a prefixed id nobody used).
    Known(Index),
    /// This text after the run's prefix; the empty text stays empty.
    Text(String),
}

/// Which owner a claim presents.
#[derive(Debug, Clone)]
enum OwnerPick {
    /// The record's current owner.
    Current,
    /// This text.
    Text(String),
}

/// Which fence a claim presents.
#[derive(Debug, Clone)]
enum FencePick {
    /// The record's current fence.
    Current,
    /// One below it (wrapping at zero).
    Below,
    /// One above it (wrapping at `u64::MAX`).
    Above,
    /// This fence.
    Exact(u64),
}

#[derive(Debug, Clone)]
struct ClaimPick {
    id: IdPick,
    owner: OwnerPick,
    fence: FencePick,
}

/// A `created_before` bound.
#[derive(Debug, Clone)]
enum InstantPick {
    /// This instant.
    Fixed(Timestamp),
    /// The store's now moved by this many microseconds (saturating).
    FromNow(i64),
}

#[derive(Debug, Clone)]
enum ActionPick {
    Fail {
        error: String,
        stop_reason: Option<String>,
    },
    Adopt {
        ttl: Option<Duration>,
    },
}

#[derive(Debug, Clone)]
enum HostileOp {
    Admit {
        id: IdPick,
        owner: String,
        scopes: Vec<String>,
        kind: String,
        ttl: Option<Duration>,
        grace: Duration,
        interrupt: bool,
        metadata: Value,
    },
    Renew {
        claim: ClaimPick,
        ttl: Duration,
    },
    RenewMany {
        claims: Vec<ClaimPick>,
        ttl: Duration,
    },
    Transition {
        claim: ClaimPick,
        status: Status,
        error: Option<String>,
        stop_reason: Option<String>,
    },
    Takeover {
        id: IdPick,
        claimer: String,
        grace: Duration,
        action: ActionPick,
    },
    ListExpired {
        grace: Duration,
        created_before: Option<InstantPick>,
        limit: usize,
    },
    Get {
        id: IdPick,
    },
    ListByScope {
        scope: String,
    },
    Purge {
        older_than: Duration,
    },
}

/// Pieces tricky text is assembled from: separators, invisible and combining
/// characters, emoji sequences, the pattern characters of SQL `LIKE`, globs
/// and Redis keys, quotes and escapes. Every one is allowed in a name.
const TRICKY_FRAGMENTS: &[&str] = &[
    "a",
    "Z9",
    "op",
    " ",
    "\u{a0}",
    "\u{3000}",
    "\u{2028}",
    "\u{200b}",
    "\u{feff}",
    "\u{202e}",
    "é",
    "e\u{301}",
    "日本",
    "🦀",
    "👩\u{200d}👩\u{200d}👧",
    "%",
    "_",
    "*",
    "?",
    "[",
    "]",
    "[a-z]",
    "^",
    "{",
    "}",
    "{tag}",
    ":",
    "::",
    "'",
    "\"",
    "\\",
    "\\u0000",
    "'; DROP TABLE leases; --",
    "$1",
    "NULL",
    "/",
    "..",
    "-",
    "~",
];

/// Control characters, NUL included: no name may hold one.
const CONTROL_FRAGMENTS: &[&str] = &["\t", "\n", "\r", "\0", "\u{7f}", "\u{1b}[31m", "\u{85}"];

/// Text a store must keep verbatim: non-empty, short, no control character,
/// but otherwise anything (whitespace, emoji, pattern characters, quotes,
/// exactly 256 bytes of multi-byte characters).
fn tricky_text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => "[a-z0-9:_-]{1,16}",
        6 => proptest::collection::vec(select(TRICKY_FRAGMENTS), 1..6).prop_map(|parts| parts.concat()),
        2 => "\\PC{1,12}",
        1 => select(vec!["a", "é", "🦀", "%"]).prop_map(|unit| unit.repeat(200 / unit.len())),
    ]
    .boxed()
}

/// Text no name may be: empty, holding a control character or NUL, or
/// longer than 256 bytes (up to 100 KiB).
fn invalid_text() -> BoxedStrategy<String> {
    let huge = (
        select(vec![257usize, 1024, 16 * 1024 + 1, 64 * 1024, 100 * 1024]),
        select(vec!["a", "é", "🦀", "%"]),
    )
        .prop_map(|(bytes, unit)| unit.repeat(bytes.div_ceil(unit.len())));
    let controlled = (tricky_text(), select(CONTROL_FRAGMENTS), any::<bool>()).prop_map(
        |(text, control, before)| {
            if before {
                format!("{control}{text}")
            } else {
                format!("{text}{control}")
            }
        },
    );
    prop_oneof![
        1 => Just(String::new()),
        2 => controlled,
        1 => "[\\x00-\\x1f\\x7f]{1,3}",
        1 => huge,
    ]
    .boxed()
}

/// Mostly [`tricky_text`], sometimes [`invalid_text`], so that most
/// requests are valid but every field is sometimes not.
pub(crate) fn hostile_text() -> BoxedStrategy<String> {
    prop_oneof![
        12 => tricky_text(),
        1 => invalid_text(),
    ]
    .boxed()
}

/// Worker ids: mostly tricky text without whitespace (which no worker id
/// may hold), sometimes anything.
pub(crate) fn owner_text() -> BoxedStrategy<String> {
    let tricky = tricky_text().prop_map(|text| {
        let kept: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if kept.is_empty() {
            "w".to_owned()
        } else {
            kept
        }
    });
    prop_oneof![
        5 => tricky,
        1 => hostile_text(),
    ]
    .boxed()
}

/// Durations from zero to `Duration::MAX`, mostly valid leases, dense around
/// every bound the contract draws (the 1 ms minimum lease, the 30-day
/// maximum, the 100-year retention).
pub(crate) fn hostile_duration() -> BoxedStrategy<Duration> {
    let nanosecond = Duration::from_nanos(1);
    let valid_bounds = vec![
        MIN_TTL,
        MIN_TTL + nanosecond,
        Duration::from_secs(1),
        MAX_TTL - nanosecond,
        MAX_TTL,
    ];
    let other_bounds = vec![
        Duration::ZERO,
        nanosecond,
        MIN_TTL - nanosecond,
        MAX_TTL + nanosecond,
        MAX_RETENTION,
        MAX_RETENTION + nanosecond,
        Duration::from_secs(i64::MAX as u64),
        Duration::MAX,
    ];
    prop_oneof![
        3 => select(valid_bounds),
        8 => (1u64..600_000).prop_map(Duration::from_millis),
        1 => select(other_bounds),
        1 => any::<u64>().prop_map(Duration::from_nanos),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(secs, nanos)| Duration::new(secs, nanos)),
    ]
    .boxed()
}

fn json_number() -> BoxedStrategy<Value> {
    let special = vec![
        0.1,
        -0.0,
        1e308,
        -1e308,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        9_007_199_254_740_993.0,
    ];
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        select(special).prop_map(Value::from),
        any::<f64>().prop_map(|float| Number::from_f64(float).map_or(Value::Null, Value::Number)),
    ]
    .boxed()
}

fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        hostile_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((hostile_text(), inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
    .boxed()
}

/// `depth` arrays or objects inside one another, around a string.
fn nested(depth: usize, objects: bool) -> Value {
    (0..depth).fold(Value::from("core"), |inner, _| {
        if objects {
            Value::Object(Map::from_iter([("n".to_owned(), inner)]))
        } else {
            Value::Array(vec![inner])
        }
    })
}

/// Metadata: mostly objects of random values, sometimes no object at all,
/// deeply nested, or a string around the 64 KiB limit.
pub(crate) fn hostile_metadata() -> BoxedStrategy<Value> {
    let object = proptest::collection::vec((hostile_text(), json_value()), 0..5)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()));
    let deep = (
        select(vec![
            MAX_JSON_DEPTH / 2,
            MAX_JSON_DEPTH - 2,
            MAX_JSON_DEPTH - 1,
            MAX_JSON_DEPTH,
            127,
            128,
            400,
        ]),
        any::<bool>(),
    )
        .prop_map(|(depth, objects)| serde_json::json!({ "deep": nested(depth, objects) }));
    let huge = select(vec![60 * 1024usize, 64 * 1024 - 12, 64 * 1024, 100 * 1024])
        .prop_map(|bytes| serde_json::json!({ "blob": "x".repeat(bytes) }));
    prop_oneof![
        2 => Just(Value::Object(Map::new())),
        6 => object,
        2 => json_value(),
        1 => deep,
        1 => huge,
    ]
    .boxed()
}

fn id_pick() -> BoxedStrategy<IdPick> {
    prop_oneof![
        3 => any::<Index>().prop_map(IdPick::Known),
        1 => hostile_text().prop_map(IdPick::Text),
    ]
    .boxed()
}

fn claim_pick() -> BoxedStrategy<ClaimPick> {
    let owner = prop_oneof![
        2 => Just(OwnerPick::Current),
        1 => owner_text().prop_map(OwnerPick::Text),
    ];
    let exact = prop_oneof![
        select(vec![
            0u64,
            1,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            u64::MAX
        ]),
        any::<u64>(),
    ];
    let fence = prop_oneof![
        3 => Just(FencePick::Current),
        1 => Just(FencePick::Below),
        1 => Just(FencePick::Above),
        2 => exact.prop_map(FencePick::Exact),
    ];
    (id_pick(), owner, fence)
        .prop_map(|(id, owner, fence)| ClaimPick { id, owner, fence })
        .boxed()
}

fn optional_text() -> BoxedStrategy<Option<String>> {
    proptest::option::of(hostile_text()).boxed()
}

fn scopes() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        8 => proptest::collection::vec(hostile_text(), 0..4),
        1 => select(vec![MAX_SCOPES, MAX_SCOPES + 1])
            .prop_map(|count| (0..count).map(|n| format!("s{n}")).collect()),
    ]
    .boxed()
}

fn instant_pick() -> BoxedStrategy<InstantPick> {
    let fixed = vec![
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
        DateTime::<Utc>::UNIX_EPOCH,
    ];
    prop_oneof![
        select(fixed).prop_map(InstantPick::Fixed),
        any::<i64>().prop_map(InstantPick::FromNow),
        (-3_600_000_000i64..3_600_000_000).prop_map(InstantPick::FromNow),
    ]
    .boxed()
}

fn hostile_op() -> BoxedStrategy<HostileOp> {
    let optional_duration = proptest::option::of(hostile_duration());
    let admit = (
        prop_oneof![
            3 => hostile_text().prop_map(IdPick::Text),
            1 => any::<Index>().prop_map(IdPick::Known),
        ],
        owner_text(),
        scopes(),
        prop_oneof![Just("run".to_owned()), hostile_text()],
        optional_duration.clone(),
        hostile_duration(),
        any::<bool>(),
        hostile_metadata(),
    )
        .prop_map(
            |(id, owner, scopes, kind, ttl, grace, interrupt, metadata)| HostileOp::Admit {
                id,
                owner,
                scopes,
                kind,
                ttl,
                grace,
                interrupt,
                metadata,
            },
        );
    let renew =
        (claim_pick(), hostile_duration()).prop_map(|(claim, ttl)| HostileOp::Renew { claim, ttl });
    let renew_many = (
        proptest::collection::vec(claim_pick(), 0..4),
        hostile_duration(),
    )
        .prop_map(|(claims, ttl)| HostileOp::RenewMany { claims, ttl });
    let transition = (
        claim_pick(),
        select(Status::ALL.to_vec()),
        optional_text(),
        optional_text(),
    )
        .prop_map(
            |(claim, status, error, stop_reason)| HostileOp::Transition {
                claim,
                status,
                error,
                stop_reason,
            },
        );
    let action = prop_oneof![
        (hostile_text(), optional_text())
            .prop_map(|(error, stop_reason)| ActionPick::Fail { error, stop_reason }),
        optional_duration.prop_map(|ttl| ActionPick::Adopt { ttl }),
    ];
    let takeover = (id_pick(), owner_text(), hostile_duration(), action).prop_map(
        |(id, claimer, grace, action)| HostileOp::Takeover {
            id,
            claimer,
            grace,
            action,
        },
    );
    let limit = prop_oneof![
        select(vec![
            0usize,
            1,
            2,
            MAX_LIST_LIMIT,
            MAX_LIST_LIMIT + 1,
            usize::MAX
        ]),
        any::<usize>(),
    ];
    let list_expired = (
        hostile_duration(),
        proptest::option::of(instant_pick()),
        limit,
    )
        .prop_map(|(grace, created_before, limit)| HostileOp::ListExpired {
            grace,
            created_before,
            limit,
        });
    prop_oneof![
        5 => admit,
        3 => renew,
        1 => renew_many,
        3 => transition,
        3 => takeover,
        1 => list_expired,
        1 => id_pick().prop_map(|id| HostileOp::Get { id }),
        1 => hostile_text().prop_map(|scope| HostileOp::ListByScope { scope }),
        1 => hostile_duration().prop_map(|older_than| HostileOp::Purge { older_than }),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// Playing a hostile run.

/// One concrete call, its picks resolved against the store.
#[derive(Debug)]
enum Call {
    Admit(AdmitRequest),
    Renew(Claim, Duration),
    RenewMany(Vec<Claim>, Duration),
    Transition(Claim, StatusChange),
    Takeover(TakeoverRequest),
    ListExpired(ExpiredQuery),
    Get(String),
    ListByScope(String),
    Purge(Duration),
}

/// A successful answer, kept for the checks that follow it.
enum Answer {
    Admission(Admission),
    Takeover(Takeover),
    Transition(Transition),
    Other,
}

impl Call {
    /// What the contract says about this input: `tenure_lease_core::backend::validate`,
    /// which every backend calls first.
    fn validity(&self) -> tenure_lease_core::Result<()> {
        match self {
            Call::Admit(request) => validate::admit(request).map(drop),
            Call::Renew(claim, ttl) => validate::claim(claim).and_then(|()| validate::ttl(*ttl)),
            Call::RenewMany(claims, ttl) => {
                validate::claims(claims).and_then(|()| validate::ttl(*ttl))
            }
            Call::Transition(claim, change) => {
                validate::claim(claim).and_then(|()| validate::status_change(change))
            }
            Call::Takeover(request) => validate::takeover(request),
            Call::ListExpired(query) => validate::expired_query(query),
            Call::Get(id) => validate::lease_id(id),
            Call::ListByScope(scope) => validate::scope(scope),
            Call::Purge(older_than) => validate::retention(*older_than),
        }
    }

    /// The record ids the call names.
    fn ids(&self) -> Vec<&str> {
        match self {
            Call::Admit(request) => vec![&request.id],
            Call::Renew(claim, _) | Call::Transition(claim, _) => vec![&claim.id],
            Call::RenewMany(claims, _) => claims.iter().map(|claim| claim.id.as_str()).collect(),
            Call::Takeover(request) => vec![&request.id],
            Call::Get(id) => vec![id],
            Call::ListExpired(_) | Call::ListByScope(_) | Call::Purge(_) => Vec::new(),
        }
    }

    async fn run<S: LeaseStore>(&self, store: &S) -> tenure_lease_core::Result<Answer> {
        Ok(match self {
            Call::Admit(request) => Answer::Admission(store.admit(request).await?),
            Call::Renew(claim, ttl) => store.renew(claim, *ttl).await.map(|_| Answer::Other)?,
            Call::RenewMany(claims, ttl) => {
                let outcomes = store.renew_many(claims, *ttl).await?;
                if outcomes.len() != claims.len() {
                    return Err(tenure_lease_core::Error::new(
                        ErrorKind::Corrupt,
                        format!(
                            "renew_many answered {} outcomes for {} claims",
                            outcomes.len(),
                            claims.len()
                        ),
                    ));
                }
                Answer::Other
            }
            Call::Transition(claim, change) => {
                Answer::Transition(store.transition(claim, change).await?)
            }
            Call::Takeover(request) => Answer::Takeover(store.claim_for_takeover(request).await?),
            Call::ListExpired(query) => store.list_expired(query).await.map(|_| Answer::Other)?,
            Call::Get(id) => store.get(id).await.map(|_| Answer::Other)?,
            Call::ListByScope(scope) => store.list_by_scope(scope).await.map(|_| Answer::Other)?,
            Call::Purge(older_than) => store.purge(*older_than).await.map(|_| Answer::Other)?,
        })
    }

    fn label(&self) -> &'static str {
        match self {
            Call::Admit(_) => "admit",
            Call::Renew(..) => "renew",
            Call::RenewMany(..) => "renew_many",
            Call::Transition(..) => "transition",
            Call::Takeover(_) => "claim_for_takeover",
            Call::ListExpired(_) => "list_expired",
            Call::Get(_) => "get",
            Call::ListByScope(_) => "list_by_scope",
            Call::Purge(_) => "purge",
        }
    }
}

/// `value`'s debug form, its middle cut out when long.
fn shown(value: &impl Debug) -> String {
    let text = format!("{value:?}");
    let chars = text.chars().count();
    if chars <= MAX_SHOWN_CHARS {
        return text;
    }
    let head: String = text.chars().take(MAX_SHOWN_CHARS / 2).collect();
    let tail: String = text.chars().skip(chars - MAX_SHOWN_CHARS / 2).collect();
    format!("{head} ..[{} chars cut].. {tail}", chars - MAX_SHOWN_CHARS)
}

/// How many calls got each answer, per entry point.
type Tally = Mutex<BTreeMap<String, usize>>;

/// What "nothing changed" compares: every active record and every record the
/// run or the call names.
#[derive(Debug, PartialEq)]
struct StoreView {
    active: Vec<LeaseRecord>,
    records: Vec<Option<LeaseRecord>>,
}

struct HostileRun<'a, S> {
    ctx: &'a Ctx<S>,
    prefix: String,
    /// Every id this run admitted, in admission order.
    known: Vec<String>,
}

impl<'a, S: LeaseStore> HostileRun<'a, S> {
    fn new(ctx: &'a Ctx<S>, prefix: String) -> Self {
        HostileRun {
            ctx,
            prefix,
            known: Vec::new(),
        }
    }

    /// Plays `ops`, counting each call's answer in `tally`.
    async fn play(mut self, ops: &[HostileOp], tally: &Tally) -> Result<(), String> {
        let mut transcript = Vec::with_capacity(ops.len());
        for (step, op) in ops.iter().enumerate() {
            let call = self.resolve(op).await?;
            transcript.push(format!("step {step}: {}", shown(&call)));
            let answered = self
                .check(&call)
                .await
                .map_err(|why| format!("{}\n{why}", transcript.join("\n")))?;
            *tally
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(format!("{} {answered}", call.label()))
                .or_default() += 1;
        }
        self.clean_up().await
    }

    /// Finishes every record the run admitted and purges them, so that the
    /// store's active set stays small across runs.
    async fn clean_up(&self) -> Result<(), String> {
        let store = &self.ctx.store;
        for id in &self.known {
            let record = store
                .get(id)
                .await
                .map_err(|e| format!("get {id:?}: {e}"))?;
            let Some(claim) = record
                .filter(|record| record.is_active() || record.status == Status::Interrupted)
                .and_then(|record| record.claim())
            else {
                continue;
            };
            let change = StatusChange::failed("hostile run over");
            match store.transition(&claim, &change).await {
                Ok(Transition::Applied(_)) => {}
                other => {
                    return Err(format!(
                        "cleaning up: failing {claim:?} answered {}",
                        shown(&other)
                    ))
                }
            }
        }
        store
            .purge(Duration::ZERO)
            .await
            .map(drop)
            .map_err(|error| format!("cleaning up: purge answered {error}"))
    }

    fn id(&self, pick: &IdPick) -> String {
        match pick {
            IdPick::Known(index) if !self.known.is_empty() => index.get(&self.known).clone(),
            IdPick::Known(_) => format!("{}unknown", self.prefix),
            IdPick::Text(text) if text.is_empty() => String::new(),
            IdPick::Text(text) => format!("{}{text}", self.prefix),
        }
    }

    async fn claim(&self, pick: &ClaimPick) -> Result<Claim, String> {
        let id = self.id(&pick.id);
        let current = if validate::lease_id(&id).is_ok() {
            self.ctx
                .store
                .get(&id)
                .await
                .map_err(|error| format!("get {}: {error}", shown(&id)))?
        } else {
            None
        };
        let (current_owner, current_fence) = current.map_or_else(
            || ("worker-a".to_owned(), 1),
            |record| (record.owner.unwrap_or_default(), record.fence),
        );
        let owner = match &pick.owner {
            OwnerPick::Current => current_owner,
            OwnerPick::Text(text) => text.clone(),
        };
        let fence = match pick.fence {
            FencePick::Current => current_fence,
            FencePick::Below => current_fence.wrapping_sub(1),
            FencePick::Above => current_fence.wrapping_add(1),
            FencePick::Exact(fence) => fence,
        };
        Ok(Claim { id, owner, fence })
    }

    async fn resolve(&self, op: &HostileOp) -> Result<Call, String> {
        Ok(match op {
            HostileOp::Admit {
                id,
                owner,
                scopes,
                kind,
                ttl,
                grace,
                interrupt,
                metadata,
            } => Call::Admit(AdmitRequest {
                id: self.id(id),
                scopes: scopes.iter().map(|scope| self.scope(scope)).collect(),
                kind: kind.clone(),
                owner: owner.clone(),
                ttl: *ttl,
                strategy: if *interrupt {
                    AdmitStrategy::Interrupt
                } else {
                    AdmitStrategy::Reject
                },
                metadata: metadata.clone(),
                grace: *grace,
            }),
            HostileOp::Renew { claim, ttl } => Call::Renew(self.claim(claim).await?, *ttl),
            HostileOp::RenewMany { claims, ttl } => {
                let mut resolved = Vec::with_capacity(claims.len());
                for claim in claims {
                    resolved.push(self.claim(claim).await?);
                }
                Call::RenewMany(resolved, *ttl)
            }
            HostileOp::Transition {
                claim,
                status,
                error,
                stop_reason,
            } => Call::Transition(
                self.claim(claim).await?,
                StatusChange {
                    status: *status,
                    error: error.clone(),
                    stop_reason: stop_reason.clone(),
                },
            ),
            HostileOp::Takeover {
                id,
                claimer,
                grace,
                action,
            } => Call::Takeover(TakeoverRequest {
                id: self.id(id),
                claimer: claimer.clone(),
                grace: *grace,
                action: match action {
                    ActionPick::Fail { error, stop_reason } => TakeoverAction::Fail {
                        error: error.clone(),
                        stop_reason: stop_reason.clone(),
                    },
                    ActionPick::Adopt { ttl } => TakeoverAction::Adopt { ttl: *ttl },
                },
            }),
            HostileOp::ListExpired {
                grace,
                created_before,
                limit,
            } => {
                let created_before = match created_before {
                    None => None,
                    Some(InstantPick::Fixed(instant)) => Some(*instant),
                    Some(InstantPick::FromNow(micros)) => {
                        let now = self
                            .ctx
                            .store
                            .now()
                            .await
                            .map_err(|e| format!("now: {e}"))?;
                        Some(
                            now.checked_add_signed(chrono::Duration::microseconds(*micros))
                                .unwrap_or(if *micros < 0 {
                                    DateTime::<Utc>::MIN_UTC
                                } else {
                                    DateTime::<Utc>::MAX_UTC
                                }),
                        )
                    }
                };
                Call::ListExpired(ExpiredQuery {
                    grace: *grace,
                    created_before,
                    limit: *limit,
                })
            }
            HostileOp::Get { id } => Call::Get(self.id(id)),
            HostileOp::ListByScope { scope } => Call::ListByScope(self.scope(scope)),
            HostileOp::Purge { older_than } => Call::Purge(*older_than),
        })
    }

    fn scope(&self, text: &str) -> String {
        if text.is_empty() {
            String::new()
        } else {
            format!("{}{text}", self.prefix)
        }
    }

    async fn view(&self, call: &Call) -> Result<StoreView, String> {
        let store = &self.ctx.store;
        let mut ids: BTreeSet<&str> = self.known.iter().map(String::as_str).collect();
        ids.extend(call.ids());
        let mut records = Vec::with_capacity(ids.len());
        for id in ids.into_iter().filter(|id| validate::lease_id(id).is_ok()) {
            records.push(
                store
                    .get(id)
                    .await
                    .map_err(|error| format!("get {}: {error}", shown(&id)))?,
            );
        }
        let active = store
            .list_active()
            .await
            .map_err(|error| format!("list_active: {error}"))?;
        Ok(StoreView { active, records })
    }

    /// Plays `call` and checks its answer against what `validate` says of it.
    /// Answers what the call was answered (`refused: <kind>` for a rightful
    /// refusal), for the run's tally.
    async fn check(&mut self, call: &Call) -> Result<String, String> {
        let validity = call.validity();
        let admitted_id = match call {
            Call::Admit(request) => Some(request.id.as_str()),
            _ => None,
        };
        let before = if validity.is_err() || admitted_id.is_some() {
            Some(self.view(call).await?)
        } else {
            None
        };
        let existed = match admitted_id {
            Some(id) if validity.is_ok() => self
                .ctx
                .store
                .get(id)
                .await
                .map_err(|error| format!("get {}: {error}", shown(&id)))?
                .is_some(),
            _ => false,
        };
        let answer = call.run(&*self.ctx.store).await;
        let answer = match (answer, &validity) {
            (Ok(answer), Ok(())) if !existed => answer,
            (Ok(answer), Ok(())) => {
                return Err(format!(
                    "admit of an existing id answered {} instead of AlreadyExists",
                    answer_label(&answer)
                ))
            }
            (Ok(answer), Err(refusal)) => {
                return Err(format!(
                    "{} accepted input the contract refuses ({refusal}); answered {}",
                    call.label(),
                    answer_label(&answer)
                ))
            }
            (Err(error), expected) => {
                let refused_rightly = match (error.kind(), expected) {
                    (ErrorKind::InvalidInput, Err(_)) => true,
                    (ErrorKind::AlreadyExists, Ok(())) => existed,
                    _ => false,
                };
                if !refused_rightly {
                    return Err(format!(
                        "{} answered the error {error} (kind {}) where validate says {:?}{}",
                        call.label(),
                        error.kind(),
                        expected.as_ref().map_err(ToString::to_string),
                        if existed { " and the id exists" } else { "" }
                    ));
                }
                let after = self.view(call).await?;
                if before.as_ref() != Some(&after) {
                    return Err(format!(
                        "{} refused ({error}) but changed the store:\nbefore: {}\n after: {}",
                        call.label(),
                        shown(&before),
                        shown(&after)
                    ));
                }
                return Ok(format!("refused: {}", error.kind()));
            }
        };
        if let (Call::Admit(request), Answer::Admission(Admission::Admitted { record, .. })) =
            (call, &answer)
        {
            self.check_admitted(request, record).await?;
            self.known.push(request.id.clone());
        }
        Ok(answer_label(&answer).to_owned())
    }

    /// An admitted record is the request, verbatim, and reads back as answered.
    async fn check_admitted(
        &self,
        request: &AdmitRequest,
        record: &LeaseRecord,
    ) -> Result<(), String> {
        let as_requested = record.id == request.id
            && record.scopes == request.scopes
            && record.kind == request.kind
            && record.owner.as_deref() == Some(request.owner.as_str())
            && same_json(&Value::Object(record.metadata.clone()), &request.metadata);
        if !as_requested {
            return Err(format!(
                "admit answered a record that is not the request verbatim: {}",
                shown(record)
            ));
        }
        let store = &self.ctx.store;
        let read = store
            .get(&request.id)
            .await
            .map_err(|error| format!("get after admit: {error}"))?;
        if read.as_ref() != Some(record) {
            return Err(format!(
                "get after admit reads {}, not the admitted record",
                shown(&read)
            ));
        }
        for scope in request.scopes.iter().take(3) {
            let listed = store
                .list_by_scope(scope)
                .await
                .map_err(|error| format!("list_by_scope {}: {error}", shown(scope)))?;
            if !listed.iter().any(|each| each == record) {
                return Err(format!(
                    "list_by_scope {} does not list the admitted record",
                    shown(scope)
                ));
            }
        }
        Ok(())
    }
}

fn answer_label(answer: &Answer) -> &'static str {
    match answer {
        Answer::Admission(admission) => admission.label(),
        Answer::Takeover(takeover) => takeover.label(),
        Answer::Transition(transition) => transition.label(),
        Answer::Other => "ok",
    }
}

// ---------------------------------------------------------------------------
// Concurrent history.

/// How many workers run at once.
const WORKERS: usize = 6;
/// How many rounds the history has; each is a takeover race then a free mix.
const ROUNDS: usize = 6;
/// How many operations each worker draws in the free mix of a round.
const MIX_OPS: usize = 5;
/// How many expired records every worker races for at the start of a round.
const RACED_PER_ROUND: usize = 2;
/// The scopes the workers contend for; each is also a guarded resource.
const CONTENDED_SCOPES: [&str; 3] = ["res:0", "res:1", "res:2"];
/// The environment variable that fixes the history's random seed (default:
/// a new one each run, shown in any failure).
pub const HISTORY_SEED_VAR: &str = "TENURE_HISTORY_SEED";

/// A small deterministic random source (SplitMix64): enough to vary a
/// history, reproducible from its seed.
#[derive(Debug, Clone)]
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A fence the store handed out, and when.
#[derive(Debug, Clone)]
struct Handout {
    /// Phase of the history: phases are separated by joins, so a fence
    /// handed out in a later phase was drawn after every earlier one.
    phase: usize,
    worker: usize,
    /// Position of the call among the worker's calls.
    call: usize,
    id: String,
    fence: u64,
    how: &'static str,
}

impl std::fmt::Display for Handout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fence {} ({} {:?}, worker-{} call {} in phase {})",
            self.fence, self.how, self.id, self.worker, self.call, self.phase
        )
    }
}

/// One write to a guarded resource: its fence and whether the gate let it
/// through, in the order the resource saw them.
#[derive(Debug, Clone)]
struct GateDecision {
    scope: String,
    fence: u64,
    accepted: bool,
    writer: String,
    /// A takeover winner's first write: nobody newer can hold the scope.
    must_pass: bool,
}

/// The resource the fences protect: one append-only log per scope, written
/// only through the gate, check and append under one lock.
#[derive(Default)]
struct GuardedResource {
    gate: FenceGate,
    state: Mutex<ResourceState>,
}

#[derive(Default)]
struct ResourceState {
    entries: HashMap<String, Vec<(u64, String)>>,
    decisions: Vec<GateDecision>,
}

impl std::fmt::Display for GateDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}'s write to {:?} with fence {}",
            self.writer, self.scope, self.fence
        )
    }
}

impl GuardedResource {
    fn write(&self, scope: &str, fence: u64, writer: &str, must_pass: bool) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let accepted = self.gate.admit(scope, fence).is_ok();
        if accepted {
            state
                .entries
                .entry(scope.to_owned())
                .or_default()
                .push((fence, format!("{writer}@{fence}")));
        }
        state.decisions.push(GateDecision {
            scope: scope.to_owned(),
            fence,
            accepted,
            writer: writer.to_owned(),
            must_pass,
        });
    }
}

/// A claim a worker believes it holds, on one scope.
#[derive(Debug, Clone)]
struct Held {
    claim: Claim,
    scope: String,
}

/// One of the racing workers, carried from phase to phase.
struct Worker {
    index: usize,
    name: String,
    dice: Dice,
    held: Vec<Held>,
    calls: usize,
    unknown: Vec<String>,
    handouts: Vec<Handout>,
    /// Per race (phase, raced id): the record as this worker took it, or
    /// `None` when it did not, or why it could not tell.
    races: Vec<(usize, String, Result<Option<LeaseRecord>, String>)>,
}

impl Worker {
    fn hand_out(&mut self, phase: usize, record: &LeaseRecord, how: &'static str) {
        self.handouts.push(Handout {
            phase,
            worker: self.index,
            call: self.calls,
            id: record.id.clone(),
            fence: record.fence,
            how,
        });
    }

    fn take(&mut self, record: &LeaseRecord) {
        if let (Some(claim), Some(scope)) = (record.claim(), record.scopes.first()) {
            self.held.push(Held {
                claim,
                scope: scope.clone(),
            });
        }
    }
}

/// Six workers over three scopes, in rounds: every expired record is raced
/// for by all workers (exactly one takes it, and an adopting winner writes
/// to the scope's guarded resource at once), then each worker admits
/// (Reject or Interrupt, short leases), renews, transitions and writes
/// through a [`FenceGate`] after random pauses, starting each round by
/// writing with every claim it still believes it holds. Between rounds the
/// clock passes every lease. The answers must show at most one active record
/// per scope after every phase, every fence handed out distinct and growing
/// in the order handed out, one winner per race; the gate must refuse every
/// write older than one it accepted (a takeover winner's write always
/// passes), so the guarded logs only ever grow in fence order.
pub async fn concurrent_history_keeps_invariants_and_fences_guard_a_resource<
    S: LeaseStore + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let seed = match std::env::var(HISTORY_SEED_VAR) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| Failure(format!("{HISTORY_SEED_VAR}={text:?} is not a number")))?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64),
    };
    play_history(&ctx, seed)
        .await
        .map_err(|failure| Failure(format!("{} ({HISTORY_SEED_VAR}={seed})", failure.0)))
}

async fn play_history<S: LeaseStore + 'static>(ctx: &Ctx<S>, seed: u64) -> CaseResult {
    let started = Instant::now();
    let resource = Arc::new(GuardedResource::default());
    let mut dice = Dice(seed);
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|index| Worker {
            index,
            name: format!("worker-{index}"),
            dice: Dice(seed ^ (index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)),
            held: Vec::new(),
            calls: 0,
            unknown: Vec::new(),
            handouts: Vec::new(),
            races: Vec::new(),
        })
        .collect();
    let mut races = 0;
    for round in 0..ROUNDS {
        let active = ctx.store.list_active().await?;
        if let Some(latest) = active.iter().filter_map(|r| r.lease_expires_at).max() {
            ctx.advance_past(latest).await?;
        }
        let mut raced = Vec::new();
        while raced.len() < RACED_PER_ROUND.min(active.len()) {
            let pick = &active[dice.below(active.len())];
            if !raced.iter().any(|(id, _)| id == &pick.id) {
                raced.push((pick.id.clone(), dice.chance(75)));
            }
        }
        races += raced.len();
        let race_phase = 2 * round;
        // On a clock only the kit moves, a takeover winner's lease outlasts
        // the race phase, so nobody newer can hold its scope when it writes.
        let clock_frozen = matches!(ctx.clock(), ClockControl::Manual(_));
        workers = run_phase(workers, |worker| {
            race_for(
                ctx.clone(),
                Arc::clone(&resource),
                worker,
                race_phase,
                raced.clone(),
                clock_frozen,
            )
        })
        .await?;
        check_exclusion(ctx, race_phase).await?;
        let mix_phase = race_phase + 1;
        workers = run_phase(workers, |worker| {
            mix(ctx.clone(), Arc::clone(&resource), worker, mix_phase, round)
        })
        .await?;
        check_exclusion(ctx, mix_phase).await?;
    }
    let report = audit(ctx, &workers, &resource).await?;
    ensure!(races > 0, "the history raced for no expired record");
    ensure!(
        report.stale_refused > 0,
        "no stale owner ever tried to write: the history exercised nothing"
    );
    tracing::debug!(
        "concurrent history: {} calls, {} unknown answers, {} races, {} writes \
         ({} stale refused) in {:?}",
        workers.iter().map(|w| w.calls).sum::<usize>(),
        workers.iter().map(|w| w.unknown.len()).sum::<usize>(),
        races,
        report.writes,
        report.stale_refused,
        started.elapsed()
    );
    Ok(())
}

/// Runs `step` for every worker at once and hands the workers back.
async fn run_phase<F, Fut>(workers: Vec<Worker>, step: F) -> Result<Vec<Worker>, Failure>
where
    F: Fn(Worker) -> Fut,
    Fut: std::future::Future<Output = Worker> + Send + 'static,
{
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|worker| tokio::spawn(step(worker)))
        .collect();
    let mut back = Vec::with_capacity(tasks.len());
    for task in tasks {
        back.push(
            task.await
                .map_err(|error| Failure(format!("a worker panicked: {error}")))?,
        );
    }
    Ok(back)
}

/// At most one active record per scope.
async fn check_exclusion<S: LeaseStore>(ctx: &Ctx<S>, phase: usize) -> CaseResult {
    let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let active = ctx.store.list_active().await?;
    for record in &active {
        for scope in &record.scopes {
            holders.entry(scope).or_default().push(&record.id);
        }
    }
    for (scope, ids) in holders {
        ensure!(
            ids.len() <= 1,
            "after phase {phase}, scope {scope:?} has {} active records: {ids:?}",
            ids.len()
        );
    }
    Ok(())
}

/// Every worker tries to take every raced record (in its own order).
async fn race_for<S: LeaseStore>(
    ctx: Ctx<S>,
    resource: Arc<GuardedResource>,
    mut worker: Worker,
    phase: usize,
    mut raced: Vec<(String, bool)>,
    clock_frozen: bool,
) -> Worker {
    let shift = worker.index % raced.len().max(1);
    raced.rotate_left(shift);
    for (id, adopt) in raced {
        let request = if adopt {
            TakeoverRequest::adopt(id.clone(), worker.name.clone(), Some(SHORT_TTL))
        } else {
            TakeoverRequest::fail(id.clone(), worker.name.clone(), "owner presumed dead")
        };
        worker.calls += 1;
        match ctx.store.claim_for_takeover(&request).await {
            Ok(Takeover::Taken(record)) => {
                worker.hand_out(phase, &record, "taken");
                if adopt {
                    if let Some(scope) = record.scopes.first() {
                        resource.write(scope, record.fence, &worker.name, clock_frozen);
                    }
                    worker.take(&record);
                }
                worker.races.push((phase, id, Ok(Some(record))));
            }
            Ok(_) => worker.races.push((phase, id, Ok(None))),
            Err(error) => {
                worker.unknown.push(format!("takeover {id}: {error}"));
                worker.races.push((phase, id, Err(error.to_string())));
            }
        }
    }
    worker
}

/// A worker's free mix: resume writing with every claim it holds, then
/// random admissions, renewals, transitions and paused writes.
async fn mix<S: LeaseStore>(
    ctx: Ctx<S>,
    resource: Arc<GuardedResource>,
    mut worker: Worker,
    phase: usize,
    round: usize,
) -> Worker {
    for held in worker.held.clone() {
        resource.write(&held.scope, held.claim.fence, &worker.name, false);
    }
    for op in 0..MIX_OPS {
        let roll = worker.dice.below(100);
        let pick = (!worker.held.is_empty()).then(|| worker.dice.below(worker.held.len()));
        match (roll, pick) {
            (0..=39, _) | (_, None) => {
                admit_one(&ctx, &resource, &mut worker, phase, round, op).await;
            }
            (40..=59, Some(at)) => {
                renew_held(&ctx, &mut worker, at).await;
            }
            (60..=74, Some(at)) => transition_held(&ctx, &mut worker, at).await,
            (_, Some(at)) => {
                if renew_held(&ctx, &mut worker, at).await {
                    for _ in 0..worker.dice.below(8) {
                        tokio::task::yield_now().await;
                    }
                    let held = &worker.held[at];
                    resource.write(&held.scope, held.claim.fence, &worker.name, false);
                }
            }
        }
    }
    worker
}

async fn admit_one<S: LeaseStore>(
    ctx: &Ctx<S>,
    resource: &GuardedResource,
    worker: &mut Worker,
    phase: usize,
    round: usize,
    op: usize,
) {
    let scope = CONTENDED_SCOPES[worker.dice.below(CONTENDED_SCOPES.len())];
    let strategy = if worker.dice.chance(50) {
        AdmitStrategy::Interrupt
    } else {
        AdmitStrategy::Reject
    };
    let request = AdmitRequest::new(format!("op-r{round}-w{}-{op}", worker.index), &worker.name)
        .scope(scope)
        .ttl(SHORT_TTL)
        .strategy(strategy);
    worker.calls += 1;
    match ctx.store.admit(&request).await {
        Ok(Admission::Admitted {
            record,
            interrupted,
        }) => {
            for holder in &interrupted {
                worker.hand_out(phase, holder, "interrupted");
            }
            worker.hand_out(phase, &record, "admitted");
            resource.write(scope, record.fence, &worker.name, false);
            worker.take(&record);
        }
        Ok(_) => {}
        Err(error) => worker
            .unknown
            .push(format!("admit {}: {error}", request.id)),
    }
}

/// Renews the claim at `at`; answers whether it still holds, dropping it
/// when lost.
async fn renew_held<S: LeaseStore>(ctx: &Ctx<S>, worker: &mut Worker, at: usize) -> bool {
    let claim = worker.held[at].claim.clone();
    worker.calls += 1;
    match ctx.store.renew(&claim, SHORT_TTL).await {
        Ok(Renewal::Renewed { .. }) => true,
        Ok(_) => {
            worker.held.remove(at);
            false
        }
        Err(error) => {
            worker.unknown.push(format!("renew {claim:?}: {error}"));
            false
        }
    }
}

async fn transition_held<S: LeaseStore>(ctx: &Ctx<S>, worker: &mut Worker, at: usize) {
    let claim = worker.held[at].claim.clone();
    let change = match worker.dice.below(3) {
        0 => StatusChange::running(),
        1 => StatusChange::succeeded(),
        _ => StatusChange::failed("gave up"),
    };
    worker.calls += 1;
    match ctx.store.transition(&claim, &change).await {
        Ok(Transition::Applied(record)) if record.is_active() => {}
        Ok(Transition::Rejected(tenure_lease_core::TransitionRejection::NotAllowed { .. })) => {}
        Ok(_) => {
            worker.held.remove(at);
        }
        Err(error) => worker
            .unknown
            .push(format!("transition {claim:?}: {error}")),
    }
}

/// What the audit counted.
struct AuditReport {
    writes: usize,
    stale_refused: usize,
}

/// Checks the answers and the guarded resource once the history is over.
async fn audit<S: LeaseStore>(
    ctx: &Ctx<S>,
    workers: &[Worker],
    resource: &GuardedResource,
) -> Result<AuditReport, Failure> {
    let handouts: Vec<&Handout> = workers.iter().flat_map(|w| &w.handouts).collect();
    let unknown: Vec<&String> = workers.iter().flat_map(|w| &w.unknown).collect();
    for error in &unknown {
        ensure!(
            !error.contains("invalid_input") && !error.contains("already_exists"),
            "a valid call was refused: {error}"
        );
    }

    // Fences are distinct, and grow in the order handed out: along each
    // worker's calls, and from phase to phase.
    let mut by_fence: BTreeMap<u64, &Handout> = BTreeMap::new();
    for handout in &handouts {
        if let Some(other) = by_fence.insert(handout.fence, handout) {
            return Err(Failure(format!(
                "fence {} handed out twice: {other} and {handout}",
                handout.fence
            )));
        }
    }
    for worker in workers {
        for pair in worker.handouts.windows(2) {
            ensure!(
                pair[0].fence < pair[1].fence,
                "{} was handed {} after {}",
                worker.name,
                pair[1],
                pair[0]
            );
        }
    }
    let mut highest_before: Option<(u64, usize)> = None;
    let mut phases: BTreeMap<usize, Vec<&Handout>> = BTreeMap::new();
    for handout in &handouts {
        phases.entry(handout.phase).or_default().push(handout);
    }
    for (phase, handed) in &phases {
        let lowest = handed.iter().map(|h| h.fence).min().unwrap_or(u64::MAX);
        if let Some((highest, earlier_phase)) = highest_before {
            ensure!(
                highest < lowest,
                "phase {phase} handed out fence {lowest}, below fence {highest} of phase \
                 {earlier_phase}"
            );
        }
        let highest = handed.iter().map(|h| h.fence).max().unwrap_or(0);
        highest_before = Some((highest.max(highest_before.map_or(0, |h| h.0)), *phase));
    }

    // The last fence handed out for each id is its fence now (unless an
    // unknown answer may have moved it).
    if unknown.is_empty() {
        let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
        for handout in &handouts {
            let fence = latest.entry(&handout.id).or_default();
            *fence = (*fence).max(handout.fence);
        }
        for (id, fence) in latest {
            let record = ctx.store.get(id).await?;
            ensure_eq!(
                record.map(|r| r.fence),
                Some(fence),
                "record {id:?} carries the last fence handed out for it"
            );
        }
    }

    // One winner per race; a second only once the first winner adopted the
    // record and its lease ran out (the clock only moves during a race on a
    // real clock).
    let mut races: BTreeMap<(usize, &str), (Vec<&LeaseRecord>, usize)> = BTreeMap::new();
    for (phase, id, outcome) in workers.iter().flat_map(|w| &w.races) {
        let (winners, unknowns) = races.entry((*phase, id)).or_default();
        match outcome {
            Ok(Some(record)) => winners.push(record),
            Ok(None) => {}
            Err(_) => *unknowns += 1,
        }
    }
    for ((phase, id), (mut winners, unknowns)) in races {
        ensure!(
            !winners.is_empty() || unknowns > 0,
            "nobody took the expired record {id:?} in the race of phase {phase}"
        );
        winners.sort_by_key(|record| record.fence);
        for pair in winners.windows(2) {
            let expired_first = pair[0].is_active()
                && pair[0]
                    .lease_expires_at
                    .is_some_and(|expiry| expiry <= pair[1].updated_at);
            ensure!(
                expired_first,
                "{} workers took {id:?} in the race of phase {phase}: {:?} took it at {} \
                 while {:?} held it ({:?}, lease until {:?})",
                winners.len(),
                pair[1].owner,
                pair[1].updated_at,
                pair[0].owner,
                pair[0].status,
                pair[0].lease_expires_at
            );
        }
    }

    // The gate: per resource, accepted fences never go down, a write older
    // than an accepted one is refused, a takeover winner's write passes, and
    // the log holds exactly the accepted writes, in fence order.
    let state = resource
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut highest: HashMap<&str, u64> = HashMap::new();
    let mut accepted: HashMap<&str, usize> = HashMap::new();
    let mut stale_refused = 0;
    for decision in &state.decisions {
        let seen = highest.get(decision.scope.as_str()).copied();
        let stale = seen.is_some_and(|seen| decision.fence < seen);
        ensure!(
            decision.accepted != stale,
            "the gate {} {decision} after accepting fence {seen:?}",
            if decision.accepted {
                "accepted"
            } else {
                "refused"
            }
        );
        ensure!(
            decision.accepted || !decision.must_pass,
            "a takeover winner's write was refused ({decision}, highest seen {seen:?}): \
             an older owner was handed a greater fence"
        );
        if decision.accepted {
            highest.insert(&decision.scope, decision.fence);
            *accepted.entry(&decision.scope).or_default() += 1;
        } else {
            stale_refused += 1;
        }
    }
    for (scope, entries) in &state.entries {
        ensure!(
            entries.windows(2).all(|pair| pair[0].0 <= pair[1].0),
            "the log of {scope:?} went back in fence order: {entries:?}"
        );
        ensure_eq!(
            accepted.get(scope.as_str()).copied(),
            Some(entries.len()),
            "the log of {scope:?} holds exactly the accepted writes"
        );
    }
    Ok(AuditReport {
        writes: state.decisions.len(),
        stale_refused,
    })
}

/// The verdict of a hostile-input property run by proptest: the first
/// failing run (as played, before shrinking) and the shortest one found.
pub(crate) fn hostile_verdict<T>(
    subject: &str,
    result: Result<(), TestError<Vec<T>>>,
    first_failure: Mutex<Option<String>>,
) -> CaseResult {
    match result {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, ops)) => Err(Failure(format!(
            "{subject} mishandled hostile input; first failing run:\n{}\n\
             shortest failing run found ({} operations):\n{reason}",
            first_failure
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_default(),
            ops.len()
        ))),
        Err(TestError::Abort(reason)) => {
            Err(Failure(format!("the hostile-input run gave up: {reason}")))
        }
    }
}

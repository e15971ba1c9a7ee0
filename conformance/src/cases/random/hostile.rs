//! Hostile input at every lease entry point ([contract](tenure_lease_core::contract)
//! §11 input limits).
//!
//! The other cases feed each operation the values its author thought of.
//! This one feeds it what nobody thought of: random and adversarial values
//! (control characters, huge and deep metadata, absurd durations and
//! instants, forged claims). A backend must store or refuse each one with
//! the typed answer the validators give, never choke on it. The strategies
//! here are shared with [`super::hostile_queue`].

use std::collections::{BTreeMap, BTreeSet};
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
    MAX_JSON_DEPTH, MAX_LIST_LIMIT, MAX_RATE_PERMITS, MAX_RETENTION, MAX_SCOPES,
    MAX_SCOPE_CAPACITY, MAX_TTL, MIN_TTL,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, ExpiredQuery, LeaseRecord,
    LeaseStore, Status, StatusChange, Takeover, TakeoverAction, TakeoverRequest, Timestamp,
    Transition,
};
use tokio::runtime::Handle;

use crate::cases::util::same_json;
use crate::harness::{CaseResult, ClockControl, Ctx, Failure};

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
        rate_limit: Option<RateLimit>,
        /// Capacities of counted scopes: of the first scope (`None`) or of
        /// any text.
        capacities: Vec<(Option<String>, u32)>,
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

/// A rate limit: any text as its key, permits around their bounds, any
/// duration as its period.
fn hostile_rate_limit() -> BoxedStrategy<RateLimit> {
    let permits = prop_oneof![
        select(vec![
            0,
            1,
            2,
            MAX_RATE_PERMITS,
            MAX_RATE_PERMITS + 1,
            u32::MAX
        ]),
        any::<u32>(),
    ];
    (hostile_text(), permits, hostile_duration())
        .prop_map(|(key, permits, period)| RateLimit::new(key, permits, period))
        .boxed()
}

/// Capacities of counted scopes, around their bounds, mostly of the
/// request's first scope.
fn hostile_capacities() -> BoxedStrategy<Vec<(Option<String>, u32)>> {
    let capacity = prop_oneof![
        select(vec![
            0,
            1,
            2,
            MAX_SCOPE_CAPACITY,
            MAX_SCOPE_CAPACITY + 1,
            u32::MAX
        ]),
        any::<u32>(),
    ];
    let scope = prop_oneof![3 => Just(None), 1 => hostile_text().prop_map(Some)];
    proptest::collection::vec((scope, capacity), 0..=2).boxed()
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
        proptest::option::of(hostile_rate_limit()),
        hostile_capacities(),
    )
        .prop_map(
            |(id, owner, scopes, kind, ttl, grace, interrupt, metadata, rate_limit, capacities)| {
                HostileOp::Admit {
                    id,
                    owner,
                    scopes,
                    kind,
                    ttl,
                    grace,
                    interrupt,
                    metadata,
                    rate_limit,
                    capacities,
                }
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
                rate_limit,
                capacities,
            } => Call::Admit(AdmitRequest {
                id: self.id(id),
                scopes: scopes.iter().map(|scope| self.scope(scope)).collect(),
                capacities: capacities
                    .iter()
                    .filter_map(|(scope, capacity)| {
                        let scope = scope.as_ref().or(scopes.first())?;
                        Some((self.scope(scope), *capacity))
                    })
                    .collect(),
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
                rate_limit: rate_limit.clone(),
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

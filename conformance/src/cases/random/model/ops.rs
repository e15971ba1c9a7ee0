//! The operations a random run is made of, and how proptest draws them.
//!
//! Operations name records and claims by [`Index`] into what the run has
//! seen so far rather than by id, so every generated sequence is meaningful
//! whatever came before, and shrinking (dropping steps) keeps it so.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::{BoxedStrategy, Union};
use tenure_lease_core::{AdmitStrategy, Status};

use super::reference::{Grace, Ttl};

/// How many workers the run draws owners and claimers from.
pub(crate) const OWNER_POOL: usize = 3;
/// How many scopes the run draws from.
pub(crate) const SCOPE_POOL: usize = 4;
/// How many rate limits admissions draw from: limit `n` has `n + 1`
/// permits and a period no run outlasts.
pub(crate) const RATE_POOL: usize = 2;

/// The largest capacity a counted scope of a run has.
pub(crate) const MAX_CAPACITY: u32 = 3;

/// Which id an admission uses.
#[derive(Debug, Clone)]
pub(crate) enum IdChoice {
    /// One never used before in the run.
    New,
    /// One the run already used (live, purged, or refused).
    Reuse(Index),
}

/// Which claim a fenced operation presents for its record.
#[derive(Debug, Clone)]
pub(crate) enum ClaimChoice {
    /// The latest claim the store handed out for it.
    Current,
    /// Any claim ever handed out for it (often a stale one).
    Earlier(Index),
    /// The latest claim, with another worker's name.
    WrongOwner,
    /// The latest claim, with a fence the store never gave it.
    WrongFence,
}

/// What a takeover does when it wins.
#[derive(Debug, Clone)]
pub(crate) enum ActionChoice {
    /// `Fail`, with or without a stop reason.
    Fail { stop_reason: bool },
    /// `Adopt` under this lease.
    Adopt { ttl: Option<Ttl> },
}

/// An `admit`.
#[derive(Debug, Clone)]
pub(crate) struct AdmitOp {
    pub(crate) id: IdChoice,
    /// Index into the owner pool.
    pub(crate) owner: usize,
    /// Indexes into the scope pool.
    pub(crate) scopes: Vec<usize>,
    pub(crate) strategy: AdmitStrategy,
    pub(crate) ttl: Option<Ttl>,
    pub(crate) grace: Grace,
    /// A kind other than the default.
    pub(crate) custom_kind: bool,
    /// Metadata `{"tag": n}` instead of `{}`.
    pub(crate) tag: Option<u8>,
    /// Index into the rate limit pool.
    pub(crate) rate_limit: Option<usize>,
    /// The capacity of its first scope, counted
    /// ([contract §17](tenure_lease_core::contract)).
    pub(crate) capacity: Option<u32>,
}

/// A `transition`, with or without an error and a stop reason.
#[derive(Debug, Clone)]
pub(crate) struct TransitionOp {
    pub(crate) target: Index,
    pub(crate) claim: ClaimChoice,
    pub(crate) to: Status,
    pub(crate) error: bool,
    pub(crate) stop_reason: bool,
}

/// A `claim_for_takeover`.
#[derive(Debug, Clone)]
pub(crate) struct TakeoverOp {
    pub(crate) target: Index,
    /// Index into the owner pool.
    pub(crate) claimer: usize,
    pub(crate) grace: Grace,
    pub(crate) action: ActionChoice,
}

/// One step of a run.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// `admit`.
    Admit(AdmitOp),
    /// `renew`, or `renew_with_progress` reporting `{"step": n}`.
    Renew {
        target: Index,
        claim: ClaimChoice,
        ttl: Ttl,
        progress: Option<u8>,
    },
    /// `renew_many`.
    RenewMany {
        claims: Vec<(Index, ClaimChoice)>,
        ttl: Ttl,
    },
    /// `transition`.
    Transition(TransitionOp),
    /// `claim_for_takeover`.
    Takeover(TakeoverOp),
    /// `list_expired`, optionally cut off at a record's creation time.
    ListExpired { grace: Grace, cutoff: Option<Index> },
    /// `get`.
    Get { target: Index },
    /// `list_active`.
    ListActive,
    /// `list_by_scope`.
    ListByScope { scope: usize },
    /// `purge` with a retention of zero.
    Purge,
    /// Moves the store's clock a little: no lease changes standing.
    Tick,
    /// Moves the store's clock past every lease and every grace (only on
    /// clocks the kit can move).
    Jump,
}

fn ttl() -> impl Strategy<Value = Ttl> {
    prop_oneof![Just(Ttl::Long), Just(Ttl::Short)]
}

fn optional_ttl() -> impl Strategy<Value = Option<Ttl>> {
    prop_oneof![Just(Some(Ttl::Long)), Just(Some(Ttl::Short)), Just(None)]
}

fn grace() -> impl Strategy<Value = Grace> {
    prop_oneof![Just(Grace::Zero), Just(Grace::Long)]
}

fn claim() -> impl Strategy<Value = ClaimChoice> {
    prop_oneof![
        5 => Just(ClaimChoice::Current),
        2 => any::<Index>().prop_map(ClaimChoice::Earlier),
        1 => Just(ClaimChoice::WrongOwner),
        1 => Just(ClaimChoice::WrongFence),
    ]
}

fn admit() -> impl Strategy<Value = Op> {
    let id = prop_oneof![
        6 => Just(IdChoice::New),
        1 => any::<Index>().prop_map(IdChoice::Reuse),
    ];
    let strategy = prop_oneof![Just(AdmitStrategy::Reject), Just(AdmitStrategy::Interrupt)];
    (
        id,
        0..OWNER_POOL,
        prop::sample::subsequence((0..SCOPE_POOL).collect::<Vec<_>>(), 0..=3),
        strategy,
        optional_ttl(),
        grace(),
        any::<bool>(),
        prop::option::of(0u8..4),
        prop::option::weighted(0.4, 0..RATE_POOL),
        prop::option::weighted(0.5, 1..=MAX_CAPACITY),
    )
        .prop_map(
            |(id, owner, scopes, strategy, ttl, grace, custom_kind, tag, rate_limit, capacity)| {
                Op::Admit(AdmitOp {
                    id,
                    owner,
                    scopes,
                    strategy,
                    ttl,
                    grace,
                    custom_kind,
                    tag,
                    rate_limit,
                    capacity,
                })
            },
        )
}

fn transition() -> impl Strategy<Value = Op> {
    let to = prop::sample::select(vec![
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::Interrupted,
    ]);
    (any::<Index>(), claim(), to, any::<bool>(), any::<bool>()).prop_map(
        |(target, claim, to, error, stop_reason)| {
            Op::Transition(TransitionOp {
                target,
                claim,
                to,
                error,
                stop_reason,
            })
        },
    )
}

fn takeover() -> impl Strategy<Value = Op> {
    let action = prop_oneof![
        any::<bool>().prop_map(|stop_reason| ActionChoice::Fail { stop_reason }),
        optional_ttl().prop_map(|ttl| ActionChoice::Adopt { ttl }),
    ];
    (any::<Index>(), 0..OWNER_POOL, grace(), action).prop_map(|(target, claimer, grace, action)| {
        Op::Takeover(TakeoverOp {
            target,
            claimer,
            grace,
            action,
        })
    })
}

/// Sequences of 1 to `max_steps` operations; clock jumps only when
/// `can_jump`.
pub(crate) fn sequence(max_steps: usize, can_jump: bool) -> impl Strategy<Value = Vec<Op>> {
    let mut choices: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (8, admit().boxed()),
        (
            4,
            (any::<Index>(), claim(), ttl(), prop::option::of(0u8..4))
                .prop_map(|(target, claim, ttl, progress)| Op::Renew {
                    target,
                    claim,
                    ttl,
                    progress,
                })
                .boxed(),
        ),
        (
            2,
            (
                prop::collection::vec((any::<Index>(), claim()), 1..=4),
                ttl(),
            )
                .prop_map(|(claims, ttl)| Op::RenewMany { claims, ttl })
                .boxed(),
        ),
        (5, transition().boxed()),
        (4, takeover().boxed()),
        (
            2,
            (grace(), prop::option::of(any::<Index>()))
                .prop_map(|(grace, cutoff)| Op::ListExpired { grace, cutoff })
                .boxed(),
        ),
        (
            1,
            any::<Index>().prop_map(|target| Op::Get { target }).boxed(),
        ),
        (1, Just(Op::ListActive).boxed()),
        (
            1,
            (0..SCOPE_POOL)
                .prop_map(|scope| Op::ListByScope { scope })
                .boxed(),
        ),
        (1, Just(Op::Purge).boxed()),
        (1, Just(Op::Tick).boxed()),
    ];
    if can_jump {
        choices.push((2, Just(Op::Jump).boxed()));
    }
    prop::collection::vec(Union::new_weighted(choices), 1..=max_steps)
}

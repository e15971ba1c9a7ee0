//! The network suite: faults between a store and its server, at chosen
//! moments, which a real server on loopback never produces by itself.
//!
//! [Contract §10](tenure_lease_core::contract) says an `Err` means "the
//! store could not say": a retryable error, never a made-up outcome, and
//! whatever the server did is whole and visible to the next call. Checking
//! that takes a call whose answer never comes, a connection dropped while a
//! request is in flight, a reply lost after the server acted. The factory
//! hands out the means ([`NetworkSupport`]): a second store on the records
//! of the case's store, connected through something that fails on command
//! ([`NetworkFaults`]; the workspace's `FaultProxy` is one, a byte-level
//! TCP proxy). Outcomes are always judged through the case's own store,
//! which no fault touches.
//!
//! The only waits that are not signals are the faults themselves (an outage
//! of a given length) and polls for a server-side effect, all bounded.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tenure_keeper::Keeper;
use tenure_keeper::{AdmitOutcome, KeeperConfig, LossCause};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, LeaseRecord, LeaseStore, LossReason,
    NotTakenReason, Renewal, Status, StatusChange, Takeover, TakeoverRequest, Transition,
    TransitionRejection,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{define_suite, factory_unavailable, unsupported};
pub use crate::capability::network::{
    BehindFaults, CutAfter, NetworkFaults, NetworkProfile, NetworkSupport, RoundTrips,
    ScopeAfterCut,
};
use crate::harness::{conclude, guarded, runtime, with_cleanup, CaseOutcome, Factory};

/// What a network scenario runs on.
#[derive(Clone)]
pub struct NetworkRig {
    /// A store connected straight to the server: the referee.
    pub direct: Arc<dyn LeaseStore>,
    /// A store on the same records, connected through `faults`.
    pub proxied: Arc<dyn LeaseStore>,
    /// The faults between `proxied` and the server.
    pub faults: Arc<dyn NetworkFaults>,
    /// Where the backend's protocol may be cut.
    pub profile: NetworkProfile,
}

define_suite! {$
    /// Expands to one `#[test]` per scenario of the [network
    /// suite](crate::suites::network), named after it, each on a fresh
    /// store from the factory expression (evaluated once per test) and a
    /// second one behind its [`Factory::network`] faults; skipped with the
    /// reason when the factory offers none.
    ///
    /// ```ignore
    /// tenure_conformance::tenure_network_conformance!(MyFactory::from_env());
    /// ```
    tenure_network_conformance => network [
        unanswered_call_is_retryable_unknown,
        reset_connection_is_retryable_unknown,
        admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted,
        reply_dropped_after_commit_is_resolved_by_next_operation,
        keeper_rides_through_short_outage_and_fail_stops_through_long_one,
        each_operation_costs_the_round_trips_its_backend_declares,
    ]
}

/// The body of each test [`tenure_network_conformance!`](crate::tenure_network_conformance)
/// generates.
#[doc(hidden)]
pub fn run_named<F, G, Fut>(factory: F, _module: &str, name: &str, scenario: G)
where
    F: Factory,
    G: FnOnce(NetworkRig) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    conclude(name, runtime().block_on(run_scenario(&factory, scenario)));
}

/// Runs one network `scenario` (one of this module's public functions) on a
/// fresh store from `factory` and a second one behind its faults, then
/// stops the faults and tears the store down.
pub async fn run_scenario<F, G, Fut>(factory: &F, scenario: G) -> CaseOutcome
where
    F: Factory,
    G: FnOnce(NetworkRig) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(network) = factory.network() else {
        return unsupported("network faults", "network");
    };
    if let Some(outcome) = factory_unavailable(factory) {
        return outcome;
    }
    let direct = match factory.create().await {
        Ok(subject) => Arc::new(subject.store),
        Err(error) => {
            return CaseOutcome::Failed(format!("factory could not create a store: {error}"))
        }
    };
    let outcome = match network.connect_behind_faults(&direct).await {
        Ok(behind) => {
            let faults = Arc::clone(&behind.faults);
            let rig = NetworkRig {
                direct: Arc::clone(&direct) as Arc<dyn LeaseStore>,
                proxied: Arc::new(behind.store),
                faults: Arc::clone(&faults),
                profile: network.profile(),
            };
            let outcome = guarded(async move {
                scenario(rig).await;
                Ok(())
            })
            .await;
            // Stopping the faults first ends any session a scenario left
            // hanging, so the teardown does not wait on it.
            faults.stop().await;
            outcome
        }
        Err(error) => CaseOutcome::Failed(format!(
            "factory could not connect a store behind faults: {error}"
        )),
    };
    with_cleanup(outcome, factory.teardown(&direct).await)
}

/// Lease length of records the scenarios admit directly: far longer than any
/// scenario, so no lease expires by accident.
const RECORD_TTL: Duration = Duration::from_secs(60);
/// The most any call under a fault may take before the scenario calls it
/// hung: well above the short timeouts the rigs configure.
const CALL_BOUND: Duration = Duration::from_secs(10);
/// The most a server-side effect may take to become visible.
const EFFECT_BOUND: Duration = Duration::from_secs(5);
/// Pause between two looks at the server, or two retries of a call.
const POLL_STEP: Duration = Duration::from_millis(20);
/// The keeper's lease in [`keeper_rides_through_short_outage_and_fail_stops_through_long_one`].
const KEEPER_TTL: Duration = Duration::from_millis(1500);
/// Its beat: several per ttl, so an outage shorter than the ttl leaves room
/// for a confirmed renewal before the deadline.
const KEEPER_BEAT: Duration = Duration::from_millis(250);
/// An outage a lease of [`KEEPER_TTL`] must ride through: it spans at least
/// one beat.
const SHORT_OUTAGE: Duration = Duration::from_millis(500);
/// Scheduling slack allowed past the keeper's ttl before its fail-stop.
const FAIL_STOP_SLACK: Duration = Duration::from_millis(1000);

/// A name no other scenario or run uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", tenure_lease_core::generate_id())
}

/// Awaits `call`, failing the scenario if it takes more than [`CALL_BOUND`].
async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(CALL_BOUND, call).await {
        Ok(answer) => answer,
        Err(_) => panic!("{what}: no answer within {CALL_BOUND:?}"),
    }
}

/// Calls `call` until it answers something other than a retryable error,
/// as a client does while its store reconnects after a fault.
async fn once_reconnected<T, F, Fut>(what: &str, mut call: F) -> tenure_lease_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = tenure_lease_core::Result<T>>,
{
    let give_up = Instant::now() + CALL_BOUND;
    loop {
        match bounded(what, call()).await {
            Err(error) if error.is_retryable() && Instant::now() < give_up => {
                tokio::time::sleep(POLL_STEP).await;
            }
            answer => return answer,
        }
    }
}

/// Like [`once_reconnected`], for calls that must then succeed.
async fn answered<T, F, Fut>(what: &str, call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = tenure_lease_core::Result<T>>,
{
    match once_reconnected(what, call).await {
        Ok(answer) => answer,
        Err(error) => panic!("{what}: {error}"),
    }
}

/// Polls until `check` holds, failing the scenario after [`EFFECT_BOUND`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = Instant::now() + EFFECT_BOUND;
    while !check().await {
        assert!(
            Instant::now() < give_up,
            "{what}: not within {EFFECT_BOUND:?}"
        );
        tokio::time::sleep(POLL_STEP).await;
    }
}

/// Asserts that a call under a fault answered a retryable error, not an
/// outcome.
fn assert_unknown<T: Debug>(what: &str, answer: tenure_lease_core::Result<T>) {
    match answer {
        Ok(outcome) => panic!("{what}: answered {outcome:?}; only an unknown outcome is true"),
        Err(error) => assert!(
            error.is_retryable() && error.is_outcome_unknown(),
            "{what}: answered {error} ({:?}); expected a retryable, unknown outcome",
            error.kind()
        ),
    }
}

/// Admits a fresh record in `scope` for `owner` through `store` and
/// answers it as stored.
async fn admit_fresh(store: &dyn LeaseStore, scope: &str, owner: &str) -> LeaseRecord {
    let request = AdmitRequest::new(unique("rec"), owner)
        .scope(scope)
        .ttl(RECORD_TTL);
    match answered("admit a fresh record", || store.admit(&request)).await {
        Admission::Admitted { record, .. } => record,
        other => panic!("admit a fresh record in {scope}: {other:?}"),
    }
}

/// [`admit_fresh`] for `owner`, then marked running; answers its claim and
/// the record.
async fn running_record(store: &dyn LeaseStore, scope: &str, owner: &str) -> (Claim, LeaseRecord) {
    let record = admit_fresh(store, scope, owner).await;
    let claim = record.claim().expect("an admitted record has an owner");
    let running = StatusChange::running();
    match answered("mark running", || store.transition(&claim, &running)).await {
        Transition::Applied(record) => (claim, record),
        other => panic!("mark {} running: {other:?}", claim.id),
    }
}

/// Opens the proxied store's connection before a fault, so the fault hits
/// an established connection rather than connection setup.
async fn warm_up(rig: &NetworkRig) {
    answered("warm up the proxied store", || rig.proxied.now()).await;
}

/// Arms a reply drop on `marker`, spawns `call` and waits until its request
/// reached the server; answers the call still waiting for its reply. A call
/// that answers before its request left (a client still reconnecting after
/// an earlier reset may fail fast, as etcd's channel does) must answer a
/// retryable error, and is sent again, a bounded number of times.
async fn sent_with_reply_dropped<T, F, Fut>(
    rig: &NetworkRig,
    what: &str,
    marker: &[u8],
    call: F,
) -> JoinHandle<tenure_lease_core::Result<T>>
where
    T: Debug + Send + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = tenure_lease_core::Result<T>> + Send + 'static,
{
    const ATTEMPTS: usize = 5;
    for _ in 0..ATTEMPTS {
        rig.faults.drop_reply_after(marker);
        let mut task = tokio::spawn(call());
        tokio::select! {
            biased;
            reached = rig.faults.request_reached_server(CALL_BOUND) => {
                assert!(reached, "{what}: the marked request never reached the server");
                return task;
            }
            early = &mut task => match early.expect("the call's task") {
                Err(error) if error.is_retryable() => warm_up(rig).await,
                answer => panic!("{what}: answered {answer:?} before its request reached the server"),
            },
        }
    }
    panic!("{what}: failed {ATTEMPTS} times before its request reached the server");
}

/// `request` admitted through the store behind the faults, as a future that
/// owns what it needs.
fn admit_behind_faults(
    rig: &NetworkRig,
    request: &AdmitRequest,
) -> impl Future<Output = tenure_lease_core::Result<Admission>> + Send + 'static {
    let proxied = Arc::clone(&rig.proxied);
    let request = request.clone();
    async move { proxied.admit(&request).await }
}

/// Blackholed `renew` and `admit` answer retryable errors, never an outcome;
/// nothing reaches the server; once healed the store works again.
pub async fn unanswered_call_is_retryable_unknown(rig: NetworkRig) {
    let (claim, before) =
        running_record(rig.direct.as_ref(), &unique("scope"), &unique("holder")).await;
    warm_up(&rig).await;
    rig.faults.blackhole();
    let renewal = bounded("blackholed renew", rig.proxied.renew(&claim, RECORD_TTL)).await;
    assert_unknown("blackholed renew", renewal);
    let request = AdmitRequest::new(unique("rec"), unique("owner"))
        .scope(unique("scope"))
        .ttl(RECORD_TTL);
    let admission = bounded("blackholed admit", rig.proxied.admit(&request)).await;
    assert_unknown("blackholed admit", admission);
    rig.faults.heal();

    let after = answered("read the holder", || rig.direct.get(&claim.id)).await;
    assert_eq!(
        after.as_ref(),
        Some(&before),
        "a blackholed renew changed the record"
    );
    let admitted = answered("read the admission", || rig.direct.get(&request.id)).await;
    assert_eq!(admitted, None, "a blackholed admit reached the server");
    let renewal = answered("renew once healed", || {
        rig.proxied.renew(&claim, RECORD_TTL)
    })
    .await;
    assert!(
        matches!(renewal, Renewal::Renewed { .. }),
        "renew once healed: {renewal:?}"
    );
}

/// A connection reset while `renew` or `admit` waits for its reply answers a
/// retryable error; the store then works again through the same faults.
pub async fn reset_connection_is_retryable_unknown(rig: NetworkRig) {
    let (claim, _) = running_record(rig.direct.as_ref(), &unique("scope"), &unique("holder")).await;
    warm_up(&rig).await;

    let renewal = sent_with_reply_dropped(&rig, "renewal", claim.id.as_bytes(), || {
        let proxied = Arc::clone(&rig.proxied);
        let renewing = claim.clone();
        async move { proxied.renew(&renewing, RECORD_TTL).await }
    })
    .await;
    rig.faults.reset();
    assert_unknown(
        "renew cut by a reset",
        bounded("renew cut", renewal).await.expect("renew task"),
    );
    // The admission must leave on a live connection: a client still
    // reconnecting after the first reset (etcd's channel) fails it before
    // it is sent.
    warm_up(&rig).await;

    let request = AdmitRequest::new(unique("rec"), unique("owner"))
        .scope(unique("scope"))
        .ttl(RECORD_TTL);
    let admission = sent_with_reply_dropped(&rig, "admission", request.id.as_bytes(), || {
        admit_behind_faults(&rig, &request)
    })
    .await;
    rig.faults.reset();
    assert_unknown(
        "admit cut by a reset",
        bounded("admit cut", admission).await.expect("admit task"),
    );
    rig.faults.heal();

    let renewal = answered("renew after the reset", || {
        rig.proxied.renew(&claim, RECORD_TTL)
    })
    .await;
    assert!(
        matches!(renewal, Renewal::Renewed { .. }),
        "renew after the reset: {renewal:?}"
    );
    // The cut admission's outcome is unknown: the server may still commit
    // it while these reads run (PostgreSQL finishes a statement whose
    // client is gone). A proxied read bracketed by two direct ones must
    // see what one of them saw.
    let direct_before = answered("read directly", || rig.direct.get(&request.id)).await;
    let seen_proxied = answered("read behind the faults", || rig.proxied.get(&request.id)).await;
    let direct_after = answered("read directly again", || rig.direct.get(&request.id)).await;
    assert!(
        seen_proxied == direct_before || seen_proxied == direct_after,
        "the proxied store reads stale data: {seen_proxied:?}, directly before {direct_before:?} \
         and after {direct_after:?}"
    );
}

/// An `Interrupt` admission over a running holder of the same owner, its
/// reply lost after the request each of the profile's
/// [`admission_cuts`](NetworkProfile::admission_cuts) names reached the
/// server and the connection reset, leaves the scope exactly as before or
/// fully admitted, never half; and as the profile says for that cut.
pub async fn admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted(rig: NetworkRig) {
    for &(cut, expected) in &rig.profile.admission_cuts {
        admission_cut_mid_flight(&rig, cut, expected).await;
    }
}

/// One cut of [`admission_cut_mid_flight_leaves_scope_as_before_or_fully_admitted`]:
/// judges the scope through the direct store, waiting for a whole
/// admission when `expected` says it lands.
async fn admission_cut_mid_flight(rig: &NetworkRig, cut: CutAfter, expected: ScopeAfterCut) {
    let scope = unique("scope");
    // The holder's own worker admits again (as after a restart): the one
    // case where `Interrupt` displaces a holder whose lease is valid.
    let owner = unique("worker");
    let (_, holder_before) = running_record(rig.direct.as_ref(), &scope, &owner).await;
    warm_up(rig).await;
    let request = AdmitRequest::new(unique("rec"), owner)
        .scope(&scope)
        .ttl(RECORD_TTL)
        .strategy(AdmitStrategy::Interrupt);
    let admission = sent_with_reply_dropped(
        rig,
        &format!("admission cut after {cut:?}"),
        &cut.marker(&request),
        || admit_behind_faults(rig, &request),
    )
    .await;
    rig.faults.reset();
    let answer = bounded("cut admission", admission)
        .await
        .expect("admit task");
    assert_unknown(&format!("admission cut after {cut:?}"), answer);
    rig.faults.heal();

    let judge = || judge_scope(rig.direct.as_ref(), &holder_before, &request);
    match expected {
        ScopeAfterCut::FullyAdmitted => {
            eventually(&format!("{cut:?}: the admission lands whole"), || async {
                judge().await == ScopeAfterCut::FullyAdmitted
            })
            .await;
        }
        ScopeAfterCut::AsBefore => assert_eq!(judge().await, ScopeAfterCut::AsBefore, "{cut:?}"),
    }
}

/// Reads the scope directly and asserts the admission in it is either
/// absent or whole.
async fn judge_scope(
    direct: &dyn LeaseStore,
    holder_before: &LeaseRecord,
    request: &AdmitRequest,
) -> ScopeAfterCut {
    let scope = request.scopes.iter().next().expect("one scope");
    // One read, so the holder and the newcomer are seen at one instant.
    let in_scope = answered("list the scope", || direct.list_by_scope(scope)).await;
    let find = |id: &str| in_scope.iter().find(|record| record.id == id).cloned();
    let holder = find(&holder_before.id).expect("the holder is listed in its scope");
    let newcomer = find(&request.id);
    let active: Vec<&str> = in_scope
        .iter()
        .filter(|record| record.is_active())
        .map(|record| record.id.as_str())
        .collect();
    let Some(newcomer) = newcomer else {
        assert_eq!(
            &holder, holder_before,
            "half an admission: no new record, yet the holder changed"
        );
        assert_eq!(active, [holder.id.as_str()], "the scope lost its holder");
        return ScopeAfterCut::AsBefore;
    };
    assert!(
        newcomer.is_active() && newcomer.owner.as_deref() == Some(request.owner.as_str()),
        "the new record is not held by its requester: {newcomer:?}"
    );
    assert_eq!(
        holder.status,
        Status::Interrupted,
        "half an admission: new record, but the holder was not interrupted: {holder:?}"
    );
    assert_eq!(holder.owner.as_deref(), Some(request.owner.as_str()));
    assert_eq!(
        holder.stop_reason.as_deref(),
        Some(tenure_lease_core::backend::rules::INTERRUPTED_BY_ADMISSION)
    );
    assert_eq!(holder.lease_expires_at, holder_before.lease_expires_at);
    assert!(
        holder_before.fence < holder.fence && holder.fence < newcomer.fence,
        "fences out of order: before {}, interrupted {}, new {}",
        holder_before.fence,
        holder.fence,
        newcomer.fence
    );
    assert_eq!(
        active,
        [newcomer.id.as_str()],
        "double ownership of {scope}"
    );
    ScopeAfterCut::FullyAdmitted
}

/// A committed `transition(.., Succeeded)` whose reply is lost answers a
/// retryable error; the caller's next calls tell the truth and the terminal
/// write stays. Then the same for an admission, its reply lost after the
/// request the profile's [`commit`](NetworkProfile::commit) names: the
/// record exists, a retry is `AlreadyExists`, one owner holds the scope.
pub async fn reply_dropped_after_commit_is_resolved_by_next_operation(rig: NetworkRig) {
    let commit = rig.profile.commit;
    let (claim, _) = running_record(rig.direct.as_ref(), &unique("scope"), &unique("holder")).await;
    warm_up(&rig).await;
    let transition = sent_with_reply_dropped(
        &rig,
        "terminal write",
        &commit.marker_for(&claim.id, &claim.owner),
        || {
            let proxied = Arc::clone(&rig.proxied);
            let finishing = claim.clone();
            async move {
                proxied
                    .transition(&finishing, &StatusChange::succeeded())
                    .await
            }
        },
    )
    .await;
    eventually("the terminal write commits", || async {
        matches!(
            rig.direct.get(&claim.id).await,
            Ok(Some(LeaseRecord {
                status: Status::Succeeded,
                ..
            }))
        )
    })
    .await;
    rig.faults.reset();
    let answer = bounded("terminal write", transition)
        .await
        .expect("transition task");
    assert_unknown("terminal write without its reply", answer);
    rig.faults.heal();

    let record = answered("read after the lost reply", || rig.proxied.get(&claim.id))
        .await
        .expect("the record exists");
    assert_eq!(
        record.status,
        Status::Succeeded,
        "the terminal write was lost"
    );
    assert_eq!(record.claim().as_ref(), Some(&claim), "ownership moved");
    let renewal = answered("renew after the lost reply", || {
        rig.proxied.renew(&claim, RECORD_TTL)
    })
    .await;
    assert_eq!(
        renewal,
        Renewal::Lost(LossReason::Terminal(Status::Succeeded))
    );
    let succeeded = StatusChange::succeeded();
    let retry = answered("repeat the terminal write", || {
        rig.proxied.transition(&claim, &succeeded)
    })
    .await;
    assert_eq!(
        retry,
        Transition::Rejected(TransitionRejection::Terminal(Status::Succeeded))
    );

    let scope = unique("scope");
    let request = AdmitRequest::new(unique("rec"), unique("owner"))
        .scope(&scope)
        .ttl(RECORD_TTL);
    let admission = sent_with_reply_dropped(&rig, "admission", &commit.marker(&request), || {
        admit_behind_faults(&rig, &request)
    })
    .await;
    eventually("the admission commits", || async {
        matches!(rig.direct.get(&request.id).await, Ok(Some(_)))
    })
    .await;
    rig.faults.reset();
    let answer = bounded("admission", admission).await.expect("admit task");
    assert_unknown("admission without its reply", answer);
    rig.faults.heal();

    let again = once_reconnected("repeat the admission", || rig.proxied.admit(&request)).await;
    match again {
        Err(error) => assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{error}"),
        Ok(admission) => panic!("a repeated admission answered {admission:?}"),
    }
    let record = answered("read the admitted record", || rig.proxied.get(&request.id))
        .await
        .expect("the admitted record exists");
    assert_eq!(record.owner.as_deref(), Some(request.owner.as_str()));
    assert!(record.is_active(), "{record:?}");
    let in_scope = answered("list the scope", || rig.proxied.list_by_scope(&scope)).await;
    let active: Vec<&str> = in_scope
        .iter()
        .filter(|record| record.is_active())
        .map(|record| record.id.as_str())
        .collect();
    assert_eq!(active, [request.id.as_str()], "double ownership of {scope}");
}

/// A keeper over the proxied store keeps its run through an outage shorter
/// than the ttl (later renewals confirmed), fail-stops it in an outage
/// longer than the ttl, after which a peer takes the record over with a
/// greater fence.
pub async fn keeper_rides_through_short_outage_and_fail_stops_through_long_one(rig: NetworkRig) {
    let config = KeeperConfig::with_ttl(KEEPER_TTL)
        .renew_interval(KEEPER_BEAT)
        .auto_reconcile(false)
        .worker_id(unique("keeper"));
    let keeper = Keeper::builder(Arc::clone(&rig.proxied), config)
        .start()
        .expect("keeper config");
    let request = keeper.request(unique("rec")).scope(unique("scope"));
    let id = request.id.clone();
    let admitted = answered("keeper admit", || async {
        keeper
            .admit(request.clone())
            .await
            .map_err(|error| match error {
                tenure_keeper::KeeperError::Store(error) => error,
                other => panic!("keeper admit: {other}"),
            })
    })
    .await;
    let AdmitOutcome::Admitted { guard, .. } = admitted else {
        panic!("keeper admit: {admitted:?}");
    };
    let token = guard.token();

    rig.faults.blackhole();
    tokio::time::sleep(SHORT_OUTAGE).await;
    rig.faults.heal();
    assert!(
        !token.is_cancelled() && guard.loss().is_none(),
        "a {SHORT_OUTAGE:?} outage stopped a {KEEPER_TTL:?} lease: {:?}",
        guard.loss()
    );
    let deadline_at_heal = guard.confirmed_deadline();
    eventually("a renewal is confirmed after the outage", || async {
        guard.confirmed_deadline() > deadline_at_heal
    })
    .await;
    assert!(
        !token.is_cancelled(),
        "lost after the outage: {:?}",
        guard.loss()
    );

    rig.faults.blackhole();
    let outage_started = Instant::now();
    bounded("fail-stop in a long outage", token.cancelled()).await;
    let stopped_after = outage_started.elapsed();
    assert_eq!(guard.loss(), Some(LossCause::DeadlinePassed));
    assert!(
        stopped_after <= KEEPER_TTL + FAIL_STOP_SLACK,
        "fail-stop came {stopped_after:?} into the outage, ttl {KEEPER_TTL:?}"
    );
    rig.faults.heal();

    let peer = unique("peer");
    let give_up = Instant::now() + CALL_BOUND;
    let taken = loop {
        let takeover = TakeoverRequest::adopt(&id, &peer, Some(RECORD_TTL));
        match answered("peer takeover", || rig.direct.claim_for_takeover(&takeover)).await {
            Takeover::Taken(record) => break record,
            Takeover::NotTaken(reason) if Instant::now() < give_up => {
                // The store's expiry trails the keeper's conservative
                // deadline by one round trip: wait it out.
                wait_out_valid_lease(reason).await;
            }
            other => panic!("peer takeover: {other:?}"),
        }
    };
    assert_eq!(taken.owner.as_deref(), Some(peer.as_str()));
    assert!(
        taken.fence > guard.fence(),
        "takeover fence {} not above the keeper's {}",
        taken.fence,
        guard.fence()
    );
    let report = keeper
        .shutdown(Instant::now() + Duration::from_secs(2))
        .await;
    assert!(report.stopped_runs.is_empty(), "{report:?}");
}

/// Waits out a lease a takeover found still valid (bounded by the keeper's
/// ttl); any other refusal ends the scenario.
async fn wait_out_valid_lease(reason: tenure_lease_core::NotTakenReason) {
    match reason {
        tenure_lease_core::NotTakenReason::LeaseValid { retry_after } => {
            tokio::time::sleep(retry_after.clamp(POLL_STEP, KEEPER_TTL)).await;
        }
        other => panic!("peer takeover refused: {other:?}"),
    }
}

/// Times each operation is measured; the count must be the same every time.
/// Rounds measured after the first (which warms up); the least count of
/// each operation over them must be its declared count.
const MEASURED_ROUNDS: usize = 3;
/// Rounds begun in all before the case gives up, counting the ones a
/// retryable error (a slow commit past the proxied store's short operation
/// timeout on a loaded machine) cut short.
const MOST_ROUNDS: usize = 12;
/// The longest a lapsed lease may still be held by a server's own timers.
const TIMER_OVERRUN_BOUND: Duration = Duration::from_secs(10);
/// The lease of the records taken over in
/// [`each_operation_costs_the_round_trips_its_backend_declares`]: expired
/// soon after admission.
const SHORT_TTL: Duration = Duration::from_millis(50);

/// Awaits `call` and answers the round trips `faults` saw while it ran,
/// with its answer.
async fn round_trips_of<T>(
    faults: &dyn NetworkFaults,
    what: &str,
    call: impl Future<Output = tenure_lease_core::Result<T>>,
) -> tenure_lease_core::Result<(u64, T)> {
    let before = faults.round_trips();
    let answer = bounded(what, call).await?;
    Ok((faults.round_trips() - before, answer))
}

/// Each operation of a lease's life (admit into a free scope, renew, mark
/// running, get, finish, take over), on a warm connection, costs the round
/// trips its backend declares ([`NetworkProfile::round_trips`]): one, for a
/// backend that does each in one statement, script or request. Each
/// operation is measured in several rounds: none may cost fewer, and the
/// least each costs must be the declared count, so an exchange more on
/// every call (a pool's ping before or after the statement, a read before
/// a write) fails the case on every run, while a stray exchange beside one
/// call (a connection opened again after a pause) does not.
pub async fn each_operation_costs_the_round_trips_its_backend_declares(rig: NetworkRig) {
    let mut rounds: Vec<RoundTrips> = Vec::new();
    let mut begun = 0;
    // Round 0 warms up: the first call of each kind may open a connection,
    // prepare a statement or load a script.
    while rounds.len() <= MEASURED_ROUNDS {
        begun += 1;
        assert!(
            begun <= MOST_ROUNDS,
            "only {} of {MOST_ROUNDS} rounds of operations answered without an error",
            rounds.len()
        );
        match round_of_lease_operations(&rig).await {
            Ok(round) => rounds.push(round),
            Err(error) if error.is_retryable() => {}
            Err(error) => panic!("a round of lease operations: {error}"),
        }
    }
    let Some(declared) = rig.profile.round_trips else {
        return;
    };
    let measured = &rounds[1..];
    let least = |field: fn(&RoundTrips) -> u64| measured.iter().map(field).min().unwrap_or(0);
    let fewest = RoundTrips {
        admit: least(|round| round.admit),
        renew: least(|round| round.renew),
        mark_running: least(|round| round.mark_running),
        get: least(|round| round.get),
        finish: least(|round| round.finish),
        takeover: least(|round| round.takeover),
    };
    assert_eq!(
        fewest, declared,
        "the fewest round trips of each operation over {MEASURED_ROUNDS} rounds \
         (left: measured; every round: {measured:?})"
    );
}

/// One round of [`each_operation_costs_the_round_trips_its_backend_declares`]:
/// the round trips of each operation through the proxied store.
async fn round_of_lease_operations(rig: &NetworkRig) -> tenure_lease_core::Result<RoundTrips> {
    let store = rig.proxied.as_ref();
    let faults = rig.faults.as_ref();
    let owner = unique("owner");
    let request = AdmitRequest::new(unique("rec"), &owner)
        .scope(unique("scope"))
        .ttl(RECORD_TTL);
    let (admit, admission) = round_trips_of(faults, "admit", store.admit(&request)).await?;
    let Admission::Admitted { record, .. } = admission else {
        panic!("admit into a free scope: {admission:?}");
    };
    let claim = record.claim().expect("an admitted record has an owner");
    let (renew, renewal) = round_trips_of(faults, "renew", store.renew(&claim, RECORD_TTL)).await?;
    assert!(
        matches!(renewal, Renewal::Renewed { .. }),
        "renew: {renewal:?}"
    );
    let running = StatusChange::running();
    let (mark_running, marked) =
        round_trips_of(faults, "mark running", store.transition(&claim, &running)).await?;
    assert!(
        matches!(marked, Transition::Applied(_)),
        "mark running: {marked:?}"
    );
    let (get, read) = round_trips_of(faults, "get", store.get(&claim.id)).await?;
    assert!(read.is_some(), "get {}: nothing", claim.id);
    let succeeded = StatusChange::succeeded();
    let (finish, finished) =
        round_trips_of(faults, "finish", store.transition(&claim, &succeeded)).await?;
    assert!(
        matches!(finished, Transition::Applied(_)),
        "finish: {finished:?}"
    );

    let lapsing = AdmitRequest::new(unique("rec"), &owner)
        .scope(unique("scope"))
        .ttl(SHORT_TTL);
    let lapsed = match answered("admit to lapse", || rig.direct.admit(&lapsing)).await {
        Admission::Admitted { record, .. } => record,
        other => panic!("admit to lapse: {other:?}"),
    };
    let expires_at = lapsed.lease_expires_at.expect("an admitted record expires");
    eventually("the short lease to lapse", || async {
        matches!(rig.direct.now().await, Ok(now) if now > expires_at)
    })
    .await;
    let adopt = TakeoverRequest::adopt(&lapsed.id, unique("claimer"), Some(RECORD_TTL));
    // A store whose leases end on the server's own timers (etcd) may still
    // hold the lease a little longer: the attempt that takes it is the one
    // counted.
    let give_up = Instant::now() + TIMER_OVERRUN_BOUND;
    let takeover = loop {
        let (takeover, taken) =
            round_trips_of(faults, "take over", store.claim_for_takeover(&adopt)).await?;
        match taken {
            Takeover::Taken(_) => break takeover,
            Takeover::NotTaken(NotTakenReason::LeaseValid { .. }) if Instant::now() < give_up => {
                tokio::time::sleep(POLL_STEP).await;
            }
            other => panic!("take over a lapsed lease: {other:?}"),
        }
    };
    Ok(RoundTrips {
        admit,
        renew,
        mark_running,
        get,
        finish,
        takeover,
    })
}

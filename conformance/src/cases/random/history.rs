//! Concurrent lease histories ([contract](tenure_lease_core::contract) §7
//! fences, §13 invariants).
//!
//! Six workers admit, renew, take over and write through a [`FenceGate`] in
//! random interleavings; the recorded answers must keep mutual exclusion and
//! fence order, so that the gate never lets a stale owner write.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, FenceGate, LeaseRecord, LeaseStore, Renewal,
    StatusChange, Takeover, TakeoverRequest, Transition,
};

use crate::cases::util::SHORT_TTL;
use crate::harness::{CaseResult, ClockControl, Ctx, Failure};
use crate::{ensure, ensure_eq};

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

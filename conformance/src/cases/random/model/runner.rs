//! Plays one sequence of operations against the store and the reference
//! model side by side, and says where they first part.
//!
//! Each step: resolve the operation against what the run has seen, let the
//! model predict, ask the store (reading the store's clock just before and
//! just after, the window every freshly drawn timestamp must fall in),
//! compare, teach the model the values the store drew, move the clock past
//! any short lease just set, then audit every record and the mutual
//! exclusion of scopes ([contract §13](tenure_lease_core::contract), invariants 1, 2
//! and 7).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::sample::Index;
use tenure_lease_core::backend::validate;
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    clock, Admission, AdmitRequest, Claim, ErrorKind, ExpiredQuery, LeaseRecord, LeaseStore,
    NotTakenReason, Renewal, StatusChange, Takeover, TakeoverAction, TakeoverRequest, Timestamp,
    Transition, DEFAULT_KIND,
};

use super::ops::{ActionChoice, AdmitOp, ClaimChoice, IdChoice, Op, TakeoverOp, TransitionOp};
use super::reference::{
    Admit, AdmitExpectation, Drawn, Grace, Model, ModelRecord, NotTaken, Standing, TakeoverAct, Ttl,
};
use crate::cases::util::{LONG_GRACE, LONG_TTL};
use crate::harness::Ctx;

/// A clock move that changes no lease's standing.
const TICK: Duration = Duration::from_millis(1);

/// The period of the model's rate limits: no run outlasts it, so every use
/// counts for the whole run.
const RATE_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The store's clock just before and just after an operation.
#[derive(Debug, Clone, Copy)]
struct Window {
    before: Timestamp,
    after: Timestamp,
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ..= {}", self.before, self.after)
    }
}

/// Plays `ops` on `ctx`'s store under ids and scopes starting with
/// `prefix`, which no other run uses. `highest_fence` is the greatest fence
/// seen from this store so far, across runs.
///
/// `Err` carries the transcript of the run up to the divergence, then the
/// divergence itself.
pub(crate) async fn run<S: LeaseStore>(
    ctx: &Ctx<S>,
    prefix: String,
    ops: &[Op],
    highest_fence: &AtomicU64,
) -> Result<(), String> {
    let mut run = Run {
        ctx,
        prefix,
        model: Model::default(),
        ids: Vec::new(),
        claims: BTreeMap::new(),
        highest_fence,
        transcript: Vec::new(),
        step: 0,
        window: None,
    };
    let outcome = run.play(ops).await;
    outcome.map_err(|divergence| format!("{}\n{divergence}", run.transcript.join("\n")))
}

struct Run<'a, S> {
    ctx: &'a Ctx<S>,
    prefix: String,
    model: Model,
    /// Every id this run admitted, in first-admission order.
    ids: Vec<String>,
    /// Every claim the store handed out, per id, oldest first.
    claims: BTreeMap<String, Vec<Claim>>,
    highest_fence: &'a AtomicU64,
    /// One line per step: the operation, then what the store answered.
    transcript: Vec<String>,
    step: usize,
    /// The window of the current step's store operation.
    window: Option<Window>,
}

fn store_error(operation: &str, error: tenure_lease_core::Error) -> String {
    format!("{operation} answered an error: {error}")
}

fn owner_name(index: usize) -> String {
    format!("w{index}")
}

fn show_claim(claim: &Claim) -> String {
    format!("{}@{}#{}", claim.id, claim.owner, claim.fence)
}

fn ids_of<'r>(records: impl IntoIterator<Item = &'r LeaseRecord>) -> Vec<String> {
    records
        .into_iter()
        .map(|record| record.id.clone())
        .collect()
}

fn model_ids(records: Vec<&ModelRecord>) -> Vec<String> {
    records
        .into_iter()
        .map(|record| record.id.clone())
        .collect()
}

/// Checks a `retry_after` against the instant the model says the lease
/// stops holding, as seen from anywhere in `window`.
fn check_retry(
    retry_until: Option<Timestamp>,
    retry_after: Option<Duration>,
    window: Window,
) -> Result<(), String> {
    match (retry_until, retry_after) {
        (None, None) => Ok(()),
        (Some(until), Some(retry_after)) => {
            let shortest = clock::until(window.after, until);
            let longest = clock::until(window.before, until);
            if shortest <= retry_after && retry_after <= longest {
                Ok(())
            } else {
                Err(format!(
                    "retry_after {retry_after:?} does not end at {until} (expiry + grace) \
                     from store time {window}"
                ))
            }
        }
        (None, Some(retry_after)) => Err(format!(
            "retry_after is {retry_after:?}, but the model says the holder's lease no longer holds"
        )),
        (Some(until), None) => Err(format!(
            "retry_after is none, but the model says the holder's lease holds until {until}"
        )),
    }
}

/// Compares a timestamp the model knows, or checks one the store just drew
/// falls in `window`.
fn check_stamp(
    differences: &mut Vec<String>,
    field: &str,
    expected: Drawn<Timestamp>,
    actual: Timestamp,
    window: Window,
) {
    match expected {
        Drawn::Known(known) if known != actual => {
            differences.push(format!("{field}: model {known}, store {actual}"));
        }
        Drawn::Fresh if actual < window.before || actual > window.after => {
            differences.push(format!(
                "{field}: {actual} is not store time of this step ({window})"
            ));
        }
        _ => {}
    }
}

fn check_field<T: PartialEq + fmt::Debug>(
    differences: &mut Vec<String>,
    field: &str,
    expected: &T,
    actual: &T,
) {
    if expected != actual {
        differences.push(format!("{field}: model {expected:?}, store {actual:?}"));
    }
}

impl<S: LeaseStore> Run<'_, S> {
    async fn play(&mut self, ops: &[Op]) -> Result<(), String> {
        // Finished records of earlier runs on this store would otherwise be
        // counted by this run's purges.
        self.ctx
            .store
            .purge(Duration::ZERO)
            .await
            .map_err(|error| store_error("the opening purge", error))?;
        for (step, op) in ops.iter().enumerate() {
            self.step = step;
            self.window = None;
            self.apply(op)
                .await
                .map_err(|why| format!("step {step} diverged from the model: {why}"))?;
        }
        self.wind_down()
            .await
            .map_err(|why| format!("winding down diverged from the model: {why}"))
    }

    /// Fails every unfinished record of the run with its current claim and
    /// purges them all, so later runs list only what they made.
    async fn wind_down(&mut self) -> Result<(), String> {
        self.step = self.transcript.len();
        self.note("wind down: fail every unfinished record, purge".to_owned());
        let unfinished: Vec<Claim> = self
            .model
            .unfinished()
            .into_iter()
            .filter_map(|record| self.claims.get(&record.id)?.last().cloned())
            .collect();
        for claim in unfinished {
            let change = StatusChange::failed("wound down");
            let expected = self.model.transition(
                &claim,
                change.status,
                change.error.as_deref(),
                change.stop_reason.as_deref(),
            );
            let before = self.now().await?;
            let answer = self.ctx.store.transition(&claim, &change).await;
            self.window_since(before).await?;
            match (expected, answer) {
                (Ok(()), Ok(Transition::Applied(record))) if record.id == claim.id => {
                    self.settle(&record, None)?;
                }
                (expected, answer) => {
                    return Err(format!(
                        "failing {}: the model expects {expected:?}, the store answered \
                         {answer:?}",
                        show_claim(&claim)
                    ))
                }
            }
        }
        self.purge().await.map(drop)
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let short_lease_ends = match op {
            Op::Admit(admit) => self.admit(admit).await?,
            Op::Renew {
                target,
                claim,
                ttl,
                progress,
            } => self.renew(target, claim, *ttl, *progress).await?,
            Op::RenewMany { claims, ttl } => self.renew_many(claims, *ttl).await?,
            Op::Transition(transition) => self.transition(transition).await?,
            Op::Takeover(takeover) => self.take_over(takeover).await?,
            Op::ListExpired { grace, cutoff } => self.list_expired(*grace, cutoff).await?,
            Op::Get { target } => self.get(target).await?,
            Op::ListActive => self.list_active().await?,
            Op::ListByScope { scope } => self.list_by_scope(*scope).await?,
            Op::Purge => self.purge().await?,
            Op::Tick => {
                self.note(format!("clock +{TICK:?}"));
                self.ctx.advance(TICK).await.map_err(|failure| failure.0)?;
                None
            }
            Op::Jump => {
                self.note("clock past every lease and grace".to_owned());
                let now = self
                    .ctx
                    .store
                    .now()
                    .await
                    .map_err(|error| error.to_string())?;
                self.ctx
                    .advance_past(clock::add(now, LONG_TTL + LONG_GRACE))
                    .await
                    .map_err(|failure| failure.0)?;
                self.model.outlive_every_lease();
                None
            }
        };
        if let Some(deadline) = short_lease_ends {
            self.ctx
                .advance_past(deadline)
                .await
                .map_err(|failure| failure.0)?;
        }
        self.audit().await
    }

    // --- resolving operations -------------------------------------------

    fn note(&mut self, operation: String) {
        self.transcript
            .push(format!("  {:>3}: {operation}", self.step));
    }

    fn answered(&mut self, answer: impl fmt::Display) {
        if let Some(line) = self.transcript.last_mut() {
            line.push_str(&format!("  =>  {answer}"));
        }
    }

    fn mine<'r>(&self, records: &'r [LeaseRecord]) -> Vec<&'r LeaseRecord> {
        records
            .iter()
            .filter(|record| record.id.starts_with(&self.prefix))
            .collect()
    }

    fn scope(&self, index: usize) -> String {
        format!("{}s{index}", self.prefix)
    }

    fn pick(&self, index: &Index) -> Option<String> {
        (!self.ids.is_empty()).then(|| index.get(&self.ids).clone())
    }

    /// The id an operation targets: one the run has used, or one that never
    /// existed when there is none yet.
    fn target(&self, index: &Index) -> String {
        self.pick(index)
            .unwrap_or_else(|| format!("{}ghost", self.prefix))
    }

    fn claim(&self, target: &Index, choice: &ClaimChoice) -> Claim {
        let id = self.target(target);
        let history = self.claims.get(&id).map(Vec::as_slice).unwrap_or_default();
        let current = history
            .last()
            .cloned()
            .unwrap_or_else(|| Claim::new(id, owner_name(0), 1));
        match choice {
            ClaimChoice::Earlier(index) if !history.is_empty() => index.get(history).clone(),
            ClaimChoice::Current | ClaimChoice::Earlier(_) => current,
            ClaimChoice::WrongOwner => Claim {
                owner: format!("{}-impostor", current.owner),
                ..current
            },
            ClaimChoice::WrongFence => Claim {
                fence: current.fence + 1,
                ..current
            },
        }
    }

    async fn now(&self) -> Result<Timestamp, String> {
        self.ctx
            .store
            .now()
            .await
            .map_err(|error| store_error("now", error))
    }

    /// Closes the window of the current step's store operation.
    async fn window_since(&mut self, before: Timestamp) -> Result<Window, String> {
        let window = Window {
            before,
            after: self.now().await?,
        };
        self.window = Some(window);
        Ok(window)
    }

    // --- comparing -----------------------------------------------------

    /// Compares `actual` with the model's record of the same id, field by
    /// field, then teaches the model the values the store drew. With
    /// `standing_at`, also checks where the lease stands at that instant.
    fn settle(
        &mut self,
        actual: &LeaseRecord,
        standing_at: Option<Timestamp>,
    ) -> Result<(), String> {
        let highest = self.highest_fence.load(Ordering::Relaxed);
        let Some(expected) = self.model.get_mut(&actual.id) else {
            return Err(format!(
                "the store answered a record the model does not hold (never admitted, or purged): \
                 {actual:?}"
            ));
        };
        let mut differences = Vec::new();
        check_field(&mut differences, "scopes", &expected.scopes, &actual.scopes);
        check_field(&mut differences, "slots", &expected.slots, &actual.slots);
        check_field(&mut differences, "kind", &expected.kind, &actual.kind);
        check_field(&mut differences, "status", &expected.status, &actual.status);
        check_field(
            &mut differences,
            "owner",
            &Some(&expected.owner),
            &actual.owner.as_ref(),
        );
        check_field(&mut differences, "error", &expected.error, &actual.error);
        check_field(
            &mut differences,
            "stop_reason",
            &expected.stop_reason,
            &actual.stop_reason,
        );
        check_field(
            &mut differences,
            "metadata",
            &expected.metadata,
            &actual.metadata,
        );
        check_field(
            &mut differences,
            "progress",
            &expected.progress,
            &actual.progress,
        );
        match expected.fence {
            Drawn::Known(fence) if fence != actual.fence => {
                differences.push(format!("fence: model {fence}, store {}", actual.fence));
            }
            Drawn::Fresh if actual.fence <= highest => differences.push(format!(
                "fence: the new fence {} is not greater than every fence handed out before it \
                 (highest seen: {highest})",
                actual.fence
            )),
            _ => {}
        }
        // A step without a store operation draws nothing: its empty window
        // refuses every fresh value.
        let window = self.window.unwrap_or(Window {
            before: Timestamp::MAX_UTC,
            after: Timestamp::MIN_UTC,
        });
        check_stamp(
            &mut differences,
            "created_at",
            expected.created_at,
            actual.created_at,
            window,
        );
        check_stamp(
            &mut differences,
            "updated_at",
            expected.updated_at,
            actual.updated_at,
            window,
        );
        match (&expected.lease, actual.lease_expires_at) {
            (None, None) => {}
            (Some(lease), Some(expires_at)) => {
                let ttl = lease.ttl.duration();
                let (earliest, latest) = (
                    clock::add(window.before, ttl),
                    clock::add(window.after, ttl),
                );
                match lease.expires_at {
                    Drawn::Known(known) if known != expires_at => differences.push(format!(
                        "lease_expires_at: model {known}, store {expires_at}"
                    )),
                    Drawn::Fresh if expires_at < earliest || expires_at > latest => {
                        differences.push(format!(
                            "lease_expires_at: {expires_at} is not store now + {ttl:?} \
                             (store time of this step: {window})"
                        ));
                    }
                    _ => {}
                }
                if let Some(now) = standing_at {
                    let standing = Standing::at(expires_at, now);
                    if standing != lease.standing {
                        differences.push(format!(
                            "lease: the model's is {:?}, the store's (until {expires_at}) is \
                             {standing:?} at {now}",
                            lease.standing
                        ));
                    }
                }
            }
            (None, Some(expires_at)) => differences.push(format!(
                "lease: the model has none, the store has one until {expires_at}"
            )),
            (Some(lease), None) => differences.push(format!(
                "lease: the model has a {} lease, the store has none",
                lease.ttl
            )),
        }
        if !differences.is_empty() {
            return Err(format!(
                "record {:?} differs from the model:\n    {}\n  model: {expected:?}\n  store: {actual:?}",
                actual.id,
                differences.join("\n    ")
            ));
        }
        if expected.fence == Drawn::Fresh {
            self.highest_fence
                .fetch_max(actual.fence, Ordering::Relaxed);
            if let Some(claim) = actual.claim() {
                self.claims
                    .entry(actual.id.clone())
                    .or_default()
                    .push(claim);
            }
        }
        expected.fence = Drawn::Known(actual.fence);
        expected.created_at = Drawn::Known(actual.created_at);
        expected.updated_at = Drawn::Known(actual.updated_at);
        if let (Some(lease), Some(expires_at)) = (&mut expected.lease, actual.lease_expires_at) {
            lease.expires_at = Drawn::Known(expires_at);
        }
        Ok(())
    }

    /// Compares a listing (already narrowed to this run) with the ids the
    /// model lists, in order, then every record in it.
    fn settle_listing(
        &mut self,
        operation: &str,
        expected: Vec<String>,
        actual: &[&LeaseRecord],
        standing_at: Option<Timestamp>,
    ) -> Result<(), String> {
        let listed = ids_of(actual.iter().copied());
        if listed != expected {
            return Err(format!(
                "{operation} lists {listed:?}, the model lists {expected:?}"
            ));
        }
        actual
            .iter()
            .try_for_each(|record| self.settle(record, standing_at))
    }

    // --- operations ----------------------------------------------------

    async fn admit(&mut self, op: &AdmitOp) -> Result<Option<Timestamp>, String> {
        let id = match &op.id {
            IdChoice::Reuse(index) => self.pick(index),
            IdChoice::New => None,
        }
        .unwrap_or_else(|| format!("{}r{}", self.prefix, self.ids.len()));
        let mut metadata = serde_json::Map::new();
        if let Some(tag) = op.tag {
            metadata.insert("tag".to_owned(), tag.into());
        }
        let admit = Admit {
            id,
            owner: owner_name(op.owner),
            scopes: op.scopes.iter().map(|&scope| self.scope(scope)).collect(),
            kind: if op.custom_kind {
                "checkpoint_write"
            } else {
                DEFAULT_KIND
            }
            .to_owned(),
            strategy: op.strategy,
            ttl: op.ttl,
            grace: op.grace,
            metadata,
            capacities: op
                .capacity
                .zip(op.scopes.first())
                .map(|(capacity, &scope)| (self.scope(scope), capacity))
                .into_iter()
                .collect(),
            rate_limit: op.rate_limit.map(|index| {
                let permits = u32::try_from(index + 1).unwrap_or(u32::MAX);
                (format!("{}rate{index}", self.prefix), permits)
            }),
        };
        self.note(format!(
            "admit {} by {} on {:?} (capacities {:?}), {:?}, ttl {}, grace {}, kind {}, metadata {}, \
             rate limit {:?}",
            admit.id,
            admit.owner,
            admit.scopes,
            admit.capacities,
            admit.strategy,
            admit.ttl.map_or("none".to_owned(), |ttl| ttl.to_string()),
            admit.grace,
            admit.kind,
            serde_json::Value::Object(admit.metadata.clone()),
            admit.rate_limit
        ));
        let request = AdmitRequest {
            id: admit.id.clone(),
            scopes: admit.scopes.clone(),
            capacities: admit.capacities.clone(),
            kind: admit.kind.clone(),
            owner: admit.owner.clone(),
            ttl: admit.ttl.map(Ttl::duration),
            strategy: admit.strategy,
            metadata: serde_json::Value::Object(admit.metadata.clone()),
            grace: admit.grace.duration(),
            rate_limit: admit
                .rate_limit
                .as_ref()
                .map(|(key, permits)| RateLimit::new(key.as_str(), *permits, RATE_PERIOD)),
        };
        let expected = self.model.admit(&admit);
        let before = self.now().await?;
        let answer = self.ctx.store.admit(&request).await;
        self.window_since(before).await?;
        self.answered(match &answer {
            Ok(Admission::Admitted {
                record,
                interrupted,
            }) => format!(
                "admitted #{}, interrupted {:?}",
                record.fence,
                ids_of(interrupted)
            ),
            Ok(Admission::Conflict {
                holder,
                retry_after,
            }) => format!("conflict with {}, retry_after {retry_after:?}", holder.id),
            Ok(other) => format!("{other:?}"),
            Err(error) => format!("error: {error}"),
        });
        match (expected, answer) {
            (AdmitExpectation::AlreadyExists, Err(error))
                if error.kind() == ErrorKind::AlreadyExists =>
            {
                Ok(None)
            }
            (
                AdmitExpectation::RateLimited { key },
                Ok(Admission::RateLimited {
                    key: actual,
                    retry_after,
                }),
            ) if actual == key && retry_after <= RATE_PERIOD => Ok(None),
            (
                AdmitExpectation::Conflict {
                    holder,
                    retry_until,
                },
                Ok(Admission::Conflict {
                    holder: actual,
                    retry_after,
                }),
            ) if actual.id == holder => {
                self.settle(&actual, None)?;
                let window = self.window.ok_or("no store time recorded")?;
                check_retry(retry_until, retry_after, window)?;
                Ok(None)
            }
            (
                AdmitExpectation::Admitted { interrupted },
                Ok(Admission::Admitted {
                    record,
                    interrupted: actual,
                }),
            ) if ids_of(&actual) == interrupted && record.id == request.id => {
                if !self.ids.contains(&record.id) {
                    self.ids.push(record.id.clone());
                }
                // In the order the store drew their fences: holders in scope
                // order, then the new record.
                for holder in &actual {
                    self.settle(holder, None)?;
                }
                self.settle(&record, None)?;
                Ok(record
                    .lease_expires_at
                    .filter(|_| op.ttl == Some(Ttl::Short)))
            }
            (expected, answer) => Err(format!(
                "admit {:?}: the model expects {expected:?}, the store answered {answer:?}",
                request.id
            )),
        }
    }

    /// Judges one renewal answer; the end of the lease when it set a short
    /// one.
    fn judge_renewal(
        &mut self,
        claim: &Claim,
        ttl: Ttl,
        expected: Result<(), tenure_lease_core::LossReason>,
        answer: Renewal,
    ) -> Result<Option<Timestamp>, String> {
        match (expected, answer) {
            (Ok(()), Renewal::Renewed { expires_at }) => {
                let window = self.window.ok_or("no store time recorded")?;
                let duration = ttl.duration();
                let (earliest, latest) = (
                    clock::add(window.before, duration),
                    clock::add(window.after, duration),
                );
                if expires_at < earliest || expires_at > latest {
                    return Err(format!(
                        "renewing {}: expires_at {expires_at} is not store now + {duration:?} \
                         (store time of this step: {window})",
                        show_claim(claim)
                    ));
                }
                if let Some(lease) = self
                    .model
                    .get_mut(&claim.id)
                    .and_then(|record| record.lease.as_mut())
                {
                    lease.expires_at = Drawn::Known(expires_at);
                }
                Ok((ttl == Ttl::Short).then_some(expires_at))
            }
            (Err(reason), Renewal::Lost(lost)) if reason == lost => Ok(None),
            (expected, answer) => Err(format!(
                "renewing {}: the model expects {expected:?}, the store answered {answer:?}",
                show_claim(claim)
            )),
        }
    }

    async fn renew(
        &mut self,
        target: &Index,
        choice: &ClaimChoice,
        ttl: Ttl,
        progress: Option<u8>,
    ) -> Result<Option<Timestamp>, String> {
        let claim = self.claim(target, choice);
        let progress = progress.map(|step| serde_json::json!({ "step": step }));
        let operation = match &progress {
            Some(progress) => {
                self.note(format!(
                    "renew {} for a {ttl} lease with progress {progress}",
                    show_claim(&claim)
                ));
                "renew_with_progress"
            }
            None => {
                self.note(format!("renew {} for a {ttl} lease", show_claim(&claim)));
                "renew"
            }
        };
        let expected = self.model.renew(&claim, ttl, progress.as_ref());
        let before = self.now().await?;
        let store = &self.ctx.store;
        let answer = match &progress {
            Some(progress) => {
                store
                    .renew_with_progress(&claim, ttl.duration(), progress)
                    .await
            }
            None => store.renew(&claim, ttl.duration()).await,
        };
        self.window_since(before).await?;
        let answer = answer.map_err(|error| store_error(operation, error))?;
        self.answered(format!("{answer:?}"));
        self.judge_renewal(&claim, ttl, expected, answer)
    }

    async fn renew_many(
        &mut self,
        choices: &[(Index, ClaimChoice)],
        ttl: Ttl,
    ) -> Result<Option<Timestamp>, String> {
        let claims: Vec<Claim> = choices
            .iter()
            .map(|(target, choice)| self.claim(target, choice))
            .collect();
        self.note(format!(
            "renew_many {:?} for a {ttl} lease",
            claims.iter().map(show_claim).collect::<Vec<_>>()
        ));
        let expected: Vec<_> = claims
            .iter()
            .map(|claim| self.model.renew(claim, ttl, None))
            .collect();
        let before = self.now().await?;
        let answer = self.ctx.store.renew_many(&claims, ttl.duration()).await;
        self.window_since(before).await?;
        let answers = answer.map_err(|error| store_error("renew_many", error))?;
        self.answered(format!("{answers:?}"));
        if answers.len() != claims.len() {
            return Err(format!(
                "renew_many answered {} outcomes for {} claims",
                answers.len(),
                claims.len()
            ));
        }
        let mut short_lease_ends = None;
        for ((claim, expected), answer) in claims.iter().zip(expected).zip(answers) {
            let ends = self.judge_renewal(claim, ttl, expected, answer)?;
            short_lease_ends = short_lease_ends.max(ends);
        }
        Ok(short_lease_ends)
    }

    async fn transition(&mut self, op: &TransitionOp) -> Result<Option<Timestamp>, String> {
        let claim = self.claim(&op.target, &op.claim);
        // Texts unique to the step, so a write that keeps an old one shows.
        let change = StatusChange {
            status: op.to,
            error: op.error.then(|| format!("error-{}", self.step)),
            stop_reason: op.stop_reason.then(|| format!("stop-{}", self.step)),
        };
        self.note(format!(
            "transition {} to {:?}, error {:?}, stop_reason {:?}",
            show_claim(&claim),
            change.status,
            change.error,
            change.stop_reason
        ));
        let expected = self.model.transition(
            &claim,
            change.status,
            change.error.as_deref(),
            change.stop_reason.as_deref(),
        );
        let before = self.now().await?;
        let answer = self.ctx.store.transition(&claim, &change).await;
        self.window_since(before).await?;
        let answer = answer.map_err(|error| store_error("transition", error))?;
        self.answered(match &answer {
            Transition::Applied(record) => format!("applied, now {:?}", record.status),
            Transition::Rejected(why) => format!("rejected: {why:?}"),
            other => format!("{other:?}"),
        });
        match (expected, answer) {
            (Ok(()), Transition::Applied(record)) if record.id == claim.id => {
                self.settle(&record, None)?;
                Ok(None)
            }
            (Err(expected), Transition::Rejected(rejection)) if expected == rejection => Ok(None),
            (expected, answer) => Err(format!(
                "transition of {}: the model expects {expected:?}, the store answered {answer:?}",
                show_claim(&claim)
            )),
        }
    }

    async fn take_over(&mut self, op: &TakeoverOp) -> Result<Option<Timestamp>, String> {
        let id = self.target(&op.target);
        let claimer = owner_name(op.claimer);
        let act = match &op.action {
            ActionChoice::Fail { stop_reason } => TakeoverAct::Fail {
                error: format!("orphaned-{}", self.step),
                stop_reason: stop_reason.then(|| format!("reaped-{}", self.step)),
            },
            ActionChoice::Adopt { ttl } => TakeoverAct::Adopt { ttl: *ttl },
        };
        let action = match &act {
            TakeoverAct::Fail { error, stop_reason } => TakeoverAction::Fail {
                error: error.clone(),
                stop_reason: stop_reason.clone(),
            },
            TakeoverAct::Adopt { ttl } => TakeoverAction::Adopt {
                ttl: ttl.map(Ttl::duration),
            },
        };
        self.note(format!(
            "claim_for_takeover {id} by {claimer}, grace {}, {act:?}",
            op.grace
        ));
        let request = TakeoverRequest {
            id: id.clone(),
            claimer: claimer.clone(),
            grace: op.grace.duration(),
            action,
        };
        let expected = self.model.take_over(&id, &claimer, op.grace, &act);
        let before = self.now().await?;
        let answer = self.ctx.store.claim_for_takeover(&request).await;
        let window = self.window_since(before).await?;
        let answer = answer.map_err(|error| store_error("claim_for_takeover", error))?;
        self.answered(match &answer {
            Takeover::Taken(record) => format!("taken #{}, now {:?}", record.fence, record.status),
            Takeover::NotTaken(why) => format!("not taken: {why:?}"),
            other => format!("{other:?}"),
        });
        match (expected, answer) {
            (Ok(()), Takeover::Taken(record)) if record.id == id => {
                self.settle(&record, None)?;
                let adopted_short = act
                    == TakeoverAct::Adopt {
                        ttl: Some(Ttl::Short),
                    };
                Ok(record.lease_expires_at.filter(|_| adopted_short))
            }
            (
                Err(NotTaken::LeaseValid { retry_until }),
                Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }),
            ) => {
                check_retry(retry_until, Some(retry_after), window)?;
                Ok(None)
            }
            (Err(NotTaken::Because(expected)), Takeover::NotTaken(reason))
                if expected == reason =>
            {
                Ok(None)
            }
            (expected, answer) => Err(format!(
                "claim_for_takeover of {id:?}: the model expects {expected:?}, the store \
                 answered {answer:?}"
            )),
        }
    }

    async fn list_expired(
        &mut self,
        grace: Grace,
        cutoff: &Option<Index>,
    ) -> Result<Option<Timestamp>, String> {
        let created_before = cutoff
            .as_ref()
            .and_then(|index| self.pick(index))
            .and_then(|id| self.model.get(&id).and_then(|r| r.created_at.known()));
        self.note(format!(
            "list_expired grace {grace}, created_before {created_before:?}"
        ));
        let query = ExpiredQuery {
            grace: grace.duration(),
            created_before,
            limit: validate::MAX_LIST_LIMIT,
        };
        let expected = model_ids(self.model.expired(grace, created_before));
        let scan = self
            .ctx
            .store
            .list_expired(&query)
            .await
            .map_err(|error| store_error("list_expired", error))?;
        let mine = self.mine(&scan.records);
        self.answered(format!("{:?}", ids_of(mine.iter().copied())));
        if !scan.skipped.is_empty() {
            return Err(format!(
                "list_expired skipped records no backend should fail to decode: {:?}",
                scan.skipped
            ));
        }
        self.settle_listing("list_expired", expected, &mine, None)?;
        Ok(None)
    }

    async fn get(&mut self, target: &Index) -> Result<Option<Timestamp>, String> {
        let id = self.target(target);
        self.note(format!("get {id}"));
        let answer = self
            .ctx
            .store
            .get(&id)
            .await
            .map_err(|error| store_error("get", error))?;
        self.answered(match &answer {
            Some(record) => format!("{:?} #{}", record.status, record.fence),
            None => "none".to_owned(),
        });
        match (self.model.get(&id).is_some(), answer) {
            (true, Some(record)) => self.settle(&record, None)?,
            (false, None) => {}
            (_, answer) => {
                return Err(format!(
                    "get {id:?}: the model holds {:?}, the store answered {answer:?}",
                    self.model.get(&id)
                ))
            }
        }
        Ok(None)
    }

    async fn list_active(&mut self) -> Result<Option<Timestamp>, String> {
        self.note("list_active".to_owned());
        let active = self
            .ctx
            .store
            .list_active()
            .await
            .map_err(|error| store_error("list_active", error))?;
        let mine = self.mine(&active);
        self.answered(format!("{:?}", ids_of(mine.iter().copied())));
        let expected = model_ids(self.model.active());
        self.settle_listing("list_active", expected, &mine, None)?;
        Ok(None)
    }

    async fn list_by_scope(&mut self, scope: usize) -> Result<Option<Timestamp>, String> {
        let scope = self.scope(scope);
        self.note(format!("list_by_scope {scope}"));
        let records = self
            .ctx
            .store
            .list_by_scope(&scope)
            .await
            .map_err(|error| store_error("list_by_scope", error))?;
        let listed: Vec<&LeaseRecord> = records.iter().collect();
        self.answered(format!("{:?}", ids_of(listed.iter().copied())));
        let expected = model_ids(self.model.by_scope(&scope));
        self.settle_listing("list_by_scope", expected, &listed, None)?;
        Ok(None)
    }

    async fn purge(&mut self) -> Result<Option<Timestamp>, String> {
        self.note("purge older than 0s".to_owned());
        let purged = self
            .ctx
            .store
            .purge(Duration::ZERO)
            .await
            .map_err(|error| store_error("purge", error))?;
        self.answered(purged);
        let expected = self.model.purge_finished();
        if purged != expected {
            return Err(format!(
                "purge removed {purged} records, the model has {expected} finished ones"
            ));
        }
        Ok(None)
    }

    // --- invariants ----------------------------------------------------

    /// After every step: every record the run admitted reads back as the
    /// model holds it (and purged ones not at all), each lease stands where
    /// the model says, and no scope has two active holders.
    async fn audit(&mut self) -> Result<(), String> {
        let now = self.now().await?;
        for id in self.ids.clone() {
            let actual = self
                .ctx
                .store
                .get(&id)
                .await
                .map_err(|error| store_error("get", error))?;
            match (self.model.get(&id).is_some(), actual) {
                (true, Some(record)) => self
                    .settle(&record, Some(now))
                    .map_err(|why| format!("after the step, get {id:?}: {why}"))?,
                (false, None) => {}
                (true, None) => {
                    return Err(format!(
                        "after the step, get {id:?} finds nothing, but it was admitted and never \
                         purged (contract §13, invariant 7)"
                    ))
                }
                (false, Some(record)) => {
                    return Err(format!(
                        "after the step, get {id:?} finds {record:?}, but the model holds no such \
                         record (never admitted, or purged)"
                    ))
                }
            }
        }
        let active = self
            .ctx
            .store
            .list_active()
            .await
            .map_err(|error| store_error("list_active", error))?;
        let mut holders: BTreeMap<(&str, Option<u32>), &str> = BTreeMap::new();
        for record in &active {
            if !record.is_active() {
                return Err(format!(
                    "list_active answered {:?}, which is {:?}",
                    record.id, record.status
                ));
            }
            for scope in &record.scopes {
                let slot = record.slot(scope);
                if let Some(other) = holders.insert((scope, slot), &record.id) {
                    return Err(format!(
                        "two active records hold slot {slot:?} of scope {scope:?}: {other:?} \
                         and {:?} (contract §13, invariant 1)",
                        record.id
                    ));
                }
            }
        }
        let mine = self.mine(&active);
        let expected = model_ids(self.model.active());
        self.settle_listing("after the step, list_active", expected, &mine, Some(now))
    }
}

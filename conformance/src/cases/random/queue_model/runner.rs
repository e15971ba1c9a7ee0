//! Plays one sequence of queue operations against the store and the
//! reference side by side, and says where they first part.
//!
//! Each step: move the store's clock strictly past the last step, resolve
//! the operation against what the run has seen, ask the store (reading
//! its clock just before and just after: the window every instant the
//! store stamps must fall in), check the instant and the fences the store
//! drew, apply the same change to the model at that instant, compare the
//! answer whole, wait out a short lease just set, then read every job of
//! the run back and compare it whole.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::sample::Index;
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, Enqueued, FailAction, Job, JobClaim, JobQueue, JobRenewal, JobSettle,
    JobState, NewJob, OperatorRetry, TakeBack, UniquePolicy,
};
use tenure_lease_core::{clock, ErrorKind, Timestamp};

use super::ops::{ClaimPick, FailChoice, NewJobOp, Op, UniqueChoice, CAPABILITY_SETS, IDS, QUEUES};
use super::reference::{EnqueueRefusal, Model};
use crate::cases::util::LONG_TTL;
use crate::harness::Ctx;

/// The limits every listing is read back with after each step: the
/// smallest, which cuts every listing of more than one job, and one above
/// every listing.
const LISTING_LIMITS: [usize; 2] = [1, 100];

/// A lease the run waits out before its next step.
const SHORT_TTL: Duration = Duration::from_millis(5);
/// A delay no step outlives: a `run_at` or backoff this far ahead is never
/// due during the run, and a purge with this retention deletes nothing.
const BEYOND_THE_RUN: Duration = LONG_TTL;

/// Plays `ops` on `ctx`'s store under ids and queues starting with
/// `prefix`, which no other run uses. `highest_fence` is the greatest fence
/// seen from this store so far, across runs.
///
/// `Err` carries the transcript of the run up to the divergence, then the
/// divergence itself.
pub(super) async fn run<S: JobQueue>(
    ctx: &Ctx<S>,
    prefix: String,
    ops: &[Op],
    highest_fence: &AtomicU64,
) -> Result<(), String> {
    let mut run = Run {
        ctx,
        prefix,
        model: Model::default(),
        claims: Vec::new(),
        highest_fence,
        transcript: Vec::new(),
        last_after: None,
    };
    let outcome = run.play(ops).await;
    outcome.map_err(|divergence| format!("{}\n{divergence}", run.transcript.join("\n")))
}

struct Run<'a, S> {
    ctx: &'a Ctx<S>,
    prefix: String,
    model: Model,
    /// Every claim the store handed out (claims and take-backs), oldest
    /// first: fenced operations present current and stale ones alike.
    claims: Vec<JobClaim>,
    highest_fence: &'a AtomicU64,
    /// One line per step: the operation, then what the store answered.
    transcript: Vec<String>,
    /// The store's clock after the last step.
    last_after: Option<Timestamp>,
}

/// The store's clock just before and just after one operation.
#[derive(Debug, Clone, Copy)]
struct Window {
    before: Timestamp,
    after: Timestamp,
}

/// `what` differs: the store's answer against the model's, led by the
/// fields that differ when both are jobs (or lists of jobs).
fn differs<T: std::fmt::Debug + serde::Serialize>(what: &str, store: &T, model: &T) -> String {
    let fields = match (serde_json::to_value(store), serde_json::to_value(model)) {
        (Ok(store), Ok(model)) => differing_fields("", &store, &model),
        _ => Vec::new(),
    };
    let fields = if fields.is_empty() {
        String::new()
    } else {
        format!("\n  differing: {}", fields.join("; "))
    };
    format!("{what} differs{fields}\n  store: {store:?}\n  model: {model:?}")
}

/// `path: store X, model Y` for each field of two JSON objects (or of the
/// objects at the same place in two lists) that differs.
fn differing_fields(
    path: &str,
    store: &serde_json::Value,
    model: &serde_json::Value,
) -> Vec<String> {
    use serde_json::Value;
    match (store, model) {
        (Value::Object(store), Value::Object(model)) => model
            .iter()
            .filter(|(name, value)| store.get(*name) != Some(*value))
            .map(|(name, value)| {
                let found = store.get(name).unwrap_or(&Value::Null);
                format!("{path}{name}: store {found}, model {value}")
            })
            .collect(),
        (Value::Array(store), Value::Array(model)) if store.len() == model.len() => store
            .iter()
            .zip(model)
            .enumerate()
            .flat_map(|(at, (store, model))| {
                differing_fields(&format!("{path}[{at}]."), store, model)
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn store_error(operation: &str, error: &tenure_lease_core::Error) -> String {
    format!("{operation} answered an error: {error}")
}

/// Judges an enqueue of `ids` that was not answered with jobs as the model
/// expected: a refusal the model expects is the step's success;
/// `answer` is the store's, each job in brief.
fn refused(
    operation: &str,
    ids: &[&str],
    expected: Result<(), EnqueueRefusal>,
    answer: tenure_lease_core::Result<Vec<String>>,
) -> Result<String, String> {
    match (expected, answer) {
        (Err(EnqueueRefusal::AlreadyExists), Err(error))
            if error.kind() == ErrorKind::AlreadyExists =>
        {
            Ok(format!("{operation} {ids:?} -> AlreadyExists"))
        }
        (Err(EnqueueRefusal::DuplicateInBatch), Err(error))
            if error.kind() == ErrorKind::InvalidInput =>
        {
            Ok(format!("{operation} {ids:?} -> InvalidInput (an id twice)"))
        }
        (expected, answer) => Err(format!(
            "{operation} of {ids:?} answered {answer:?}; the model expects {expected:?}"
        )),
    }
}

/// A job in a transcript line.
fn brief(job: &Job) -> String {
    format!("{}:{}#{}", job.id, job.state.as_str(), job.fence)
}

fn brief_claim(claim: &JobClaim) -> String {
    format!("{}@{}#{}", claim.id, claim.owner, claim.fence)
}

impl<S: JobQueue> Run<'_, S> {
    async fn play(&mut self, ops: &[Op]) -> Result<(), String> {
        // Reaps and purges reach the whole store. Earlier runs' short
        // leases have all ended: reaped and purged here, whatever is left
        // of those runs (queued in their own queues, or held under long
        // leases) never finishes during this one, so this run's purges
        // count its own jobs alone (and its reaps are judged on them).
        self.ctx
            .store
            .reap(Duration::ZERO)
            .await
            .map_err(|error| store_error("reap", &error))?;
        self.ctx
            .store
            .purge_jobs(Duration::ZERO)
            .await
            .map_err(|error| store_error("purge_jobs", &error))?;
        for (step, op) in ops.iter().enumerate() {
            if let Some(last) = self.last_after {
                self.strictly_after(last).await?;
            }
            let line = self
                .step(step, op)
                .await
                .map_err(|divergence| format!("{step}: {op:?}\n{divergence}"))?;
            self.transcript.push(format!("{step}: {line}"));
            self.audit(step).await?;
        }
        Ok(())
    }

    /// Waits (or, on a clock the kit moves, moves it) until the store's
    /// clock reads strictly after `instant`. Unlike
    /// [`Ctx::advance_past`], never waits out a store's own timers: only
    /// the order of the steps matters here.
    async fn strictly_after(&self, instant: Timestamp) -> Result<(), String> {
        if self.ctx.manual_clock().is_some() {
            return self
                .ctx
                .advance_past(instant)
                .await
                .map_err(|failure| failure.0);
        }
        while self.now().await? <= instant {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    fn id(&self, index: usize) -> String {
        format!("{}j{index}", self.prefix)
    }

    fn queue(&self, index: usize) -> String {
        format!("{}q{index}", self.prefix)
    }

    async fn now(&self) -> Result<Timestamp, String> {
        self.ctx
            .store
            .now()
            .await
            .map_err(|error| store_error("now", &error))
    }

    /// Closes the step's window, opened at `before`.
    async fn window(&mut self, before: Timestamp) -> Result<Window, String> {
        let after = self.now().await?;
        self.last_after = Some(after);
        Ok(Window { before, after })
    }

    /// Checks that the store stamped `instant` inside `window`.
    fn stamped(window: Window, instant: Timestamp, what: &str) -> Result<Timestamp, String> {
        if instant < window.before || instant > window.after {
            return Err(format!(
                "{what} is {instant}, outside the store's clock during the call ({} ..= {})",
                window.before, window.after
            ));
        }
        Ok(instant)
    }

    /// Checks that `fence`, drawn now, exceeds every fence drawn before.
    fn drawn_fence(&self, fence: u64) -> Result<(), String> {
        let highest = self.highest_fence.load(Ordering::Relaxed);
        if fence <= highest {
            return Err(format!(
                "a new claim carries fence {fence}, not above {highest}, drawn before"
            ));
        }
        self.highest_fence.store(fence, Ordering::Relaxed);
        Ok(())
    }

    /// The claim `index` picks among those handed out, if any.
    fn pick_any(&self, index: &Index) -> Option<JobClaim> {
        (!self.claims.is_empty()).then(|| index.get(&self.claims).clone())
    }

    /// The claim `pick` picks: among those still holding their job, when
    /// it asks for one and any does, else among all handed out.
    fn pick(&self, pick: &ClaimPick) -> Option<JobClaim> {
        let holding: Vec<JobClaim> = self
            .claims
            .iter()
            .filter(|claim| self.model.judge(claim).is_ok())
            .cloned()
            .collect();
        if pick.holding && !holding.is_empty() {
            return Some(pick.index.get(&holding).clone());
        }
        self.pick_any(&pick.index)
    }

    /// The claims `picks` pick, one per job (a later pick of a job already
    /// picked is dropped: batches name each job once).
    fn pick_distinct(&self, picks: &[ClaimPick]) -> Vec<JobClaim> {
        let mut seen = BTreeSet::new();
        picks
            .iter()
            .filter_map(|pick| self.pick(pick))
            .filter(|claim| seen.insert(claim.id.clone()))
            .collect()
    }

    fn new_job(&self, op: &NewJobOp, before: Timestamp) -> NewJob {
        let mut job = NewJob::new(
            self.queue(op.queue),
            serde_json::json!({ "job": op.id, "priority": op.priority }),
        )
        .priority(op.priority)
        .max_attempts(op.max_attempts);
        job.id = self.id(op.id);
        if op.later {
            job.run_at = Some(clock::add(before, BEYOND_THE_RUN));
        }
        if op.gpu {
            job = job.require("gpu");
        }
        if let Some((key, choice)) = op.unique {
            let policy = match choice {
                UniqueChoice::WhileQueued => UniquePolicy::WhileQueued,
                UniqueChoice::WhileUnfinished => UniquePolicy::WhileUnfinished,
                UniqueChoice::ForTheRun => UniquePolicy::ForPeriod(BEYOND_THE_RUN),
            };
            job = job.unique(format!("key-{key}"), policy);
        }
        job
    }

    async fn step(&mut self, step: usize, op: &Op) -> Result<String, String> {
        let before = self.now().await?;
        match op {
            Op::Enqueue(new) => {
                let job = self.new_job(new, before);
                let answer = self.ctx.store.enqueue(&job).await;
                let window = self.window(before).await?;
                self.enqueued(window, &[job], answer.map(|job| vec![job]), "enqueue")
            }
            Op::EnqueueBatch(news) => {
                let jobs: Vec<NewJob> = news.iter().map(|new| self.new_job(new, before)).collect();
                let answer = self.ctx.store.enqueue_batch(&jobs).await;
                let window = self.window(before).await?;
                self.enqueued(window, &jobs, answer, "enqueue_batch")
            }
            Op::EnqueueUnique(new) => {
                let job = self.new_job(new, before);
                let answer = self.ctx.store.enqueue_unique(&job).await;
                let window = self.window(before).await?;
                let answer = answer.map(|answer| vec![answer]);
                self.enqueued_unique(window, &[job], answer, "enqueue_unique")
            }
            Op::EnqueueUniqueBatch(news) => {
                let jobs: Vec<NewJob> = news.iter().map(|new| self.new_job(new, before)).collect();
                let answer = self.ctx.store.enqueue_unique_batch(&jobs).await;
                let window = self.window(before).await?;
                self.enqueued_unique(window, &jobs, answer, "enqueue_unique_batch")
            }
            Op::Claim {
                queue,
                worker,
                capabilities,
                limit,
                short,
            } => {
                let capabilities: BTreeSet<String> = CAPABILITY_SETS[*capabilities]
                    .iter()
                    .map(|&capability| capability.to_owned())
                    .collect();
                let ttl = if *short { SHORT_TTL } else { LONG_TTL };
                let mut request = ClaimRequest::new(self.queue(*queue), format!("w{worker}"), ttl);
                request.capabilities = capabilities;
                request.limit = *limit;
                self.claim(before, &request).await
            }
            Op::Renew(index) => match self.pick(index) {
                Some(claim) => self.renew(before, &[claim], false, None).await,
                None => Ok("renew_job: no claim yet".to_owned()),
            },
            Op::ReportProgress(index, step) => match self.pick(index) {
                Some(claim) => {
                    let progress = serde_json::json!({ "step": step });
                    self.renew(before, &[claim], false, Some(&progress)).await
                }
                None => Ok("renew_job_with_progress: no claim yet".to_owned()),
            },
            Op::RenewJobs(indexes) => {
                let claims = self.pick_distinct(indexes);
                if claims.is_empty() {
                    return Ok("renew_jobs: no claim yet".to_owned());
                }
                self.renew(before, &claims, true, None).await
            }
            Op::Complete(index) => match self.pick(index) {
                Some(claim) => self.settle(before, &[claim], Settle::Complete).await,
                None => Ok("complete: no claim yet".to_owned()),
            },
            Op::CompleteMany(indexes) => {
                let claims = self.pick_distinct(indexes);
                if claims.is_empty() {
                    return Ok("complete_many: no claim yet".to_owned());
                }
                self.settle(before, &claims, Settle::CompleteMany).await
            }
            Op::Fail(index, choice) => {
                let action = match choice {
                    FailChoice::RetryNow => FailAction::Retry {
                        backoff: Duration::ZERO,
                    },
                    FailChoice::RetryLater => FailAction::Retry {
                        backoff: BEYOND_THE_RUN,
                    },
                    FailChoice::DeadLetter => FailAction::DeadLetter,
                };
                match self.pick(index) {
                    Some(claim) => {
                        let error = format!("failed at step {step}");
                        self.settle(before, &[claim], Settle::Fail(action, error))
                            .await
                    }
                    None => Ok("fail: no claim yet".to_owned()),
                }
            }
            Op::Defer(index, ssd) => {
                let missing = BTreeSet::from([if *ssd { "ssd" } else { "gpu" }.to_owned()]);
                match self.pick(index) {
                    Some(claim) => self.settle(before, &[claim], Settle::Defer(missing)).await,
                    None => Ok("defer: no claim yet".to_owned()),
                }
            }
            Op::Reap => self.reap(before).await,
            Op::TakeBack(index) => match self.pick_any(index) {
                Some(claim) => self.take_back(before, &claim).await,
                None => Ok("take_back: no claim yet".to_owned()),
            },
            Op::RetryDeadLetter(id) => self.retry_dead_letter(before, &self.id(*id)).await,
            Op::Purge(all) => {
                let retention = if *all { Duration::ZERO } else { BEYOND_THE_RUN };
                let purged = self
                    .ctx
                    .store
                    .purge_jobs(retention)
                    .await
                    .map_err(|error| store_error("purge_jobs", &error))?;
                let window = self.window(before).await?;
                let expected = if *all {
                    self.model.purge_finished(window.before)
                } else {
                    0
                };
                if purged != expected {
                    return Err(differs(
                        &format!("purge_jobs({retention:?})'s count"),
                        &purged,
                        &expected,
                    ));
                }
                Ok(format!("purge_jobs({retention:?}) -> {purged}"))
            }
        }
    }

    /// Judges a unique enqueue of `jobs` that answered `answer`: ids as a
    /// plain enqueue, then each job created or named a duplicate of the
    /// holder the model names, as it stands.
    fn enqueued_unique(
        &mut self,
        window: Window,
        jobs: &[NewJob],
        answer: tenure_lease_core::Result<Vec<Enqueued>>,
        operation: &str,
    ) -> Result<String, String> {
        let ids: Vec<&str> = jobs.iter().map(|job| job.id.as_str()).collect();
        match (self.model.judge_enqueue(jobs), answer) {
            (Ok(()), Ok(answers)) => {
                let got: Vec<(bool, Job)> = answers
                    .iter()
                    .map(|answer| (answer.is_created(), answer.job().clone()))
                    .collect();
                // Keys are judged at the store's instant, which only a
                // created job shows; without one, every holder holds its
                // key all run long, whatever the instant.
                let now = match got.iter().find(|(created, _)| *created) {
                    Some((_, job)) => {
                        Self::stamped(window, job.created_at, "the enqueued job's created_at")?
                    }
                    None => window.before,
                };
                let expected = self.model.enqueue_unique(jobs, now);
                if got != expected {
                    return Err(differs(&format!("{operation} of {ids:?}"), &got, &expected));
                }
                let shape: Vec<&str> = got
                    .iter()
                    .map(|(created, _)| if *created { "created" } else { "duplicate" })
                    .collect();
                Ok(format!("{operation} {ids:?} -> {shape:?}"))
            }
            (expected, answer) => refused(
                operation,
                &ids,
                expected,
                answer.map(|answers| {
                    answers
                        .iter()
                        .map(|answer| match answer {
                            Enqueued::Created(job) => format!("created {}", brief(job)),
                            _ => format!("duplicate of {}", brief(answer.job())),
                        })
                        .collect()
                }),
            ),
        }
    }

    /// Judges an enqueue of `jobs` that answered `answer`.
    fn enqueued(
        &mut self,
        window: Window,
        jobs: &[NewJob],
        answer: tenure_lease_core::Result<Vec<Job>>,
        operation: &str,
    ) -> Result<String, String> {
        let ids: Vec<&str> = jobs.iter().map(|job| job.id.as_str()).collect();
        match (self.model.judge_enqueue(jobs), answer) {
            (Ok(()), Ok(stored)) => {
                let Some(first) = stored.first() else {
                    return Err(format!("{operation} of {ids:?} answered no job"));
                };
                let now = Self::stamped(window, first.created_at, "the enqueued job's created_at")?;
                let expected = self.model.enqueue(jobs, now);
                if stored != expected {
                    return Err(differs(
                        &format!("{operation} of {ids:?}"),
                        &stored,
                        &expected,
                    ));
                }
                Ok(format!("{operation} {ids:?} -> enqueued"))
            }
            (expected, answer) => refused(
                operation,
                &ids,
                expected,
                answer.map(|jobs| jobs.iter().map(brief).collect()),
            ),
        }
    }

    async fn claim(&mut self, before: Timestamp, request: &ClaimRequest) -> Result<String, String> {
        let claimed = self
            .ctx
            .store
            .claim(request)
            .await
            .map_err(|error| store_error("claim", &error))?;
        let window = self.window(before).await?;
        // Every run_at the model holds is before this step or beyond the
        // run: `before` stands for the claim's instant.
        let expected = self.model.claimable(
            &request.queue,
            &request.capabilities,
            request.limit,
            window.before,
        );
        let got: Vec<String> = claimed.iter().map(|job| job.job.id.clone()).collect();
        let what = format!(
            "claim({}, {}, {:?}, limit {})",
            request.queue, request.worker, request.capabilities, request.limit
        );
        if got != expected {
            return Err(differs(
                &format!("{what}: the jobs, best first"),
                &got,
                &expected,
            ));
        }
        let mut lease_ends = None;
        for ClaimedJob { job, claim } in &claimed {
            let now = Self::stamped(window, job.updated_at, "the claimed job's updated_at")?;
            self.drawn_fence(claim.fence)?;
            let expected = self
                .model
                .claim(&job.id, &request.worker, claim.fence, request.ttl, now)
                .ok_or_else(|| format!("{what} handed out {}, which the model lacks", job.id))?;
            if *job != expected {
                return Err(differs(&format!("{what}: job {}", job.id), job, &expected));
            }
            let expected_claim = JobClaim {
                id: job.id.clone(),
                owner: request.worker.clone(),
                fence: claim.fence,
                attempt: expected.attempt,
            };
            if *claim != expected_claim {
                return Err(differs(
                    &format!("{what}: claim on {}", job.id),
                    claim,
                    &expected_claim,
                ));
            }
            self.claims.push(claim.clone());
            lease_ends = expected.lease_expires_at;
        }
        if request.ttl == SHORT_TTL {
            if let Some(end) = lease_ends {
                self.ctx
                    .advance_past(end)
                    .await
                    .map_err(|failure| failure.0)?;
            }
        }
        Ok(format!(
            "{what} -> {:?}",
            claimed
                .iter()
                .map(|job| brief_claim(&job.claim))
                .collect::<Vec<_>>()
        ))
    }

    /// Renews through `batch`'s operation: `renew_jobs`, or `renew_job` of
    /// the first claim (`renew_job_with_progress` with a progress).
    async fn renew(
        &mut self,
        before: Timestamp,
        claims: &[JobClaim],
        batch: bool,
        progress: Option<&serde_json::Value>,
    ) -> Result<String, String> {
        let store = &self.ctx.store;
        let (operation, answers) = match (batch, progress) {
            (true, _) => ("renew_jobs", store.renew_jobs(claims, LONG_TTL).await),
            (false, Some(progress)) => (
                "renew_job_with_progress",
                store
                    .renew_job_with_progress(&claims[0], LONG_TTL, progress)
                    .await
                    .map(|answer| vec![answer]),
            ),
            (false, None) => (
                "renew_job",
                store
                    .renew_job(&claims[0], LONG_TTL)
                    .await
                    .map(|answer| vec![answer]),
            ),
        };
        let answers = answers.map_err(|error| store_error(operation, &error))?;
        let window = self.window(before).await?;
        let shown: Vec<String> = claims.iter().map(brief_claim).collect();
        if answers.len() != claims.len() {
            return Err(format!(
                "{operation} of {} claims answered {} renewals",
                claims.len(),
                answers.len()
            ));
        }
        let expected: Vec<Result<(), _>> =
            claims.iter().map(|claim| self.model.judge(claim)).collect();
        for ((claim, answer), judged) in claims.iter().zip(&answers).zip(expected) {
            match (judged, answer) {
                (Ok(()), JobRenewal::Renewed { expires_at }) => {
                    let lowest = clock::add(window.before, LONG_TTL);
                    let highest = clock::add(window.after, LONG_TTL);
                    if *expires_at < lowest || *expires_at > highest {
                        return Err(format!(
                            "{operation} of {} renewed until {expires_at}, not ttl after the \
                             call ({lowest} ..= {highest})",
                            brief_claim(claim)
                        ));
                    }
                    let now = *expires_at
                        - chrono::Duration::from_std(LONG_TTL).unwrap_or(chrono::Duration::zero());
                    self.model.renew(&claim.id, LONG_TTL, now, progress);
                }
                (Err(loss), JobRenewal::Lost(lost)) if loss == *lost => {}
                (judged, answer) => {
                    return Err(format!(
                        "{operation} of {} answered {answer:?}; the model expects {judged:?}",
                        brief_claim(claim)
                    ))
                }
            }
        }
        Ok(format!("{operation} {shown:?} -> {answers:?}"))
    }

    async fn settle(
        &mut self,
        before: Timestamp,
        claims: &[JobClaim],
        settle: Settle,
    ) -> Result<String, String> {
        let store = &self.ctx.store;
        let answers = match &settle {
            Settle::Complete => store.complete(&claims[0]).await.map(|answer| vec![answer]),
            Settle::CompleteMany => store.complete_many(claims).await,
            Settle::Fail(action, error) => store
                .fail(&claims[0], error, *action)
                .await
                .map(|answer| vec![answer]),
            Settle::Defer(missing) => store
                .defer(&claims[0], missing)
                .await
                .map(|answer| vec![answer]),
        }
        .map_err(|error| store_error(settle.name(), &error))?;
        let window = self.window(before).await?;
        if answers.len() != claims.len() {
            return Err(format!(
                "{} of {} claims answered {} outcomes",
                settle.name(),
                claims.len(),
                answers.len()
            ));
        }
        let judged: Vec<Result<(), _>> =
            claims.iter().map(|claim| self.model.judge(claim)).collect();
        let mut shown = Vec::new();
        for ((claim, answer), judged) in claims.iter().zip(&answers).zip(judged) {
            let what = format!("{} of {}", settle.name(), brief_claim(claim));
            match (judged, answer) {
                (Ok(()), JobSettle::Settled(job)) => {
                    let now =
                        Self::stamped(window, job.updated_at, "the settled job's updated_at")?;
                    let expected = match &settle {
                        Settle::Complete | Settle::CompleteMany => {
                            self.model.complete(&claim.id, now)
                        }
                        Settle::Fail(action, error) => {
                            self.model.fail(&claim.id, error, *action, now)
                        }
                        Settle::Defer(missing) => self.model.defer(&claim.id, missing, now),
                    };
                    if Some(job) != expected.as_ref() {
                        return Err(differs(&what, &Some(job.clone()), &expected));
                    }
                    shown.push(brief(job));
                }
                (Err(loss), JobSettle::Rejected(lost)) if loss == *lost => {
                    shown.push(format!("{lost:?}"));
                }
                (judged, answer) => {
                    return Err(format!(
                        "{what} answered {answer:?}; the model expects {judged:?}"
                    ))
                }
            }
        }
        let claims: Vec<String> = claims.iter().map(brief_claim).collect();
        Ok(format!("{} {claims:?} -> {shown:?}", settle.name()))
    }

    async fn reap(&mut self, before: Timestamp) -> Result<String, String> {
        let report = self
            .ctx
            .store
            .reap(Duration::ZERO)
            .await
            .map_err(|error| store_error("reap", &error))?;
        let window = self.window(before).await?;
        // Short leases ended before this step began; long ones outlast the
        // run: `before` stands for the reaper's instant.
        let due = self.model.reapable(window.before);
        let mut requeued = report.requeued.clone();
        let mut dead = report.dead_lettered.clone();
        // Only this run's jobs: other runs' leftovers are theirs.
        requeued.retain(|job| job.id.starts_with(&self.prefix));
        dead.retain(|job| job.id.starts_with(&self.prefix));
        requeued.sort_by(|a, b| a.id.cmp(&b.id));
        dead.sort_by(|a, b| a.id.cmp(&b.id));
        let mut expected_requeued = Vec::new();
        let mut expected_dead = Vec::new();
        if let Some(first) = requeued.first().or(dead.first()) {
            let now = Self::stamped(window, first.updated_at, "the reaped job's updated_at")?;
            for id in &due {
                if let Some(job) = self.model.reap(id, now) {
                    if job.state == JobState::Queued {
                        expected_requeued.push(job);
                    } else {
                        expected_dead.push(job);
                    }
                }
            }
        }
        let reaped_ids: Vec<&str> = requeued
            .iter()
            .chain(&dead)
            .map(|job| job.id.as_str())
            .collect();
        let mut due_sorted = due.clone();
        due_sorted.sort();
        let mut reaped_sorted: Vec<String> = reaped_ids.iter().map(|&id| id.to_owned()).collect();
        reaped_sorted.sort();
        if reaped_sorted != due_sorted {
            return Err(differs("reap's jobs", &reaped_sorted, &due_sorted));
        }
        if requeued != expected_requeued {
            return Err(differs(
                "reap's requeued jobs",
                &requeued,
                &expected_requeued,
            ));
        }
        if dead != expected_dead {
            return Err(differs("reap's dead-lettered jobs", &dead, &expected_dead));
        }
        Ok(format!(
            "reap -> requeued {:?}, dead-lettered {:?}",
            requeued.iter().map(brief).collect::<Vec<_>>(),
            dead.iter().map(brief).collect::<Vec<_>>()
        ))
    }

    async fn take_back(&mut self, before: Timestamp, claim: &JobClaim) -> Result<String, String> {
        let answer = self
            .ctx
            .store
            .take_back(claim, LONG_TTL)
            .await
            .map_err(|error| store_error("take_back", &error))?;
        let window = self.window(before).await?;
        let what = format!("take_back of {}", brief_claim(claim));
        match (self.model.judge_take_back(claim), &answer) {
            (Ok(()), TakeBack::Taken(ClaimedJob { job, claim: taken })) => {
                let now = Self::stamped(window, job.updated_at, "the taken job's updated_at")?;
                self.drawn_fence(taken.fence)?;
                let expected = self
                    .model
                    .take_back(&claim.id, taken.fence, LONG_TTL, now)
                    .ok_or_else(|| format!("{what}: the model lacks the job"))?;
                if *job != expected {
                    return Err(differs(&what, job, &expected));
                }
                let expected_claim = JobClaim {
                    id: claim.id.clone(),
                    owner: claim.owner.clone(),
                    fence: taken.fence,
                    attempt: expected.attempt,
                };
                if *taken != expected_claim {
                    return Err(differs(
                        &format!("{what}: the claim"),
                        taken,
                        &expected_claim,
                    ));
                }
                self.claims.push(taken.clone());
                Ok(format!("{what} -> taken as {}", brief_claim(taken)))
            }
            (Err(refusal), TakeBack::NotTaken(refused)) if refusal == *refused => {
                Ok(format!("{what} -> {refused:?}"))
            }
            (judged, answer) => Err(format!(
                "{what} answered {answer:?}; the model expects {judged:?}"
            )),
        }
    }

    async fn retry_dead_letter(&mut self, before: Timestamp, id: &str) -> Result<String, String> {
        let answer = self
            .ctx
            .store
            .retry_dead_letter(id)
            .await
            .map_err(|error| store_error("retry_dead_letter", &error))?;
        let window = self.window(before).await?;
        let what = format!("retry_dead_letter({id})");
        match (self.model.state_of(id), &answer) {
            (Some(JobState::DeadLettered), OperatorRetry::Requeued(job)) => {
                let now = Self::stamped(window, job.updated_at, "the retried job's updated_at")?;
                let expected = self.model.retry_dead_letter(id, now);
                if Some(job) != expected.as_ref() {
                    return Err(differs(&what, &Some(job.clone()), &expected));
                }
                Ok(format!("{what} -> {}", brief(job)))
            }
            (Some(state), OperatorRetry::NotDeadLettered(found))
                if state != JobState::DeadLettered && state == *found =>
            {
                Ok(format!("{what} -> NotDeadLettered({found:?})"))
            }
            (None, OperatorRetry::Missing) => Ok(format!("{what} -> Missing")),
            (state, answer) => Err(format!(
                "{what} answered {answer:?}; the model holds the job as {state:?}"
            )),
        }
    }

    /// Reads every job of the run back and compares it whole, then the
    /// counts of every queue, then every listing of every queue: each
    /// state filter and none, each limit of [`LISTING_LIMITS`], and the
    /// dead letters.
    async fn audit(&self, step: usize) -> Result<(), String> {
        self.audit_jobs(step).await?;
        // The store holds the earlier runs' queues too.
        let ours: Vec<String> = (0..QUEUES).map(|index| self.queue(index)).collect();
        let mut counted = self
            .ctx
            .store
            .count_jobs()
            .await
            .map_err(|error| store_error("count_jobs", &error))?;
        counted.retain(|counts| ours.contains(&counts.queue));
        let expected = self.model.count_jobs();
        if counted != expected {
            return Err(differs(
                &format!("after step {step}, count_jobs()"),
                &counted,
                &expected,
            ));
        }
        for queue in (0..QUEUES).map(|index| self.queue(index)) {
            for &limit in &LISTING_LIMITS {
                for state in std::iter::once(None).chain(JobState::ALL.into_iter().map(Some)) {
                    let listed = self
                        .ctx
                        .store
                        .list_jobs(&queue, state, limit)
                        .await
                        .map_err(|error| store_error("list_jobs", &error))?;
                    let expected = self.model.list_jobs(&queue, state, limit);
                    if listed != expected {
                        return Err(differs(
                            &format!("after step {step}, list_jobs({queue}, {state:?}, {limit})"),
                            &listed,
                            &expected,
                        ));
                    }
                }
                let listed = self
                    .ctx
                    .store
                    .list_dead_letters(&queue, limit)
                    .await
                    .map_err(|error| store_error("list_dead_letters", &error))?;
                let expected = self.model.list_dead_letters(&queue, limit);
                if listed != expected {
                    return Err(differs(
                        &format!("after step {step}, list_dead_letters({queue}, {limit})"),
                        &listed,
                        &expected,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads every job of the run back and compares it whole.
    async fn audit_jobs(&self, step: usize) -> Result<(), String> {
        for index in 0..IDS {
            let id = self.id(index);
            let stored = self
                .ctx
                .store
                .get_job(&id)
                .await
                .map_err(|error| store_error("get_job", &error))?;
            let expected = self.model.job(&id).cloned();
            if stored != expected {
                return Err(differs(
                    &format!("after step {step}, job {id} read back"),
                    &stored,
                    &expected,
                ));
            }
        }
        Ok(())
    }
}

/// A fenced write that settles a job (or, deferring, puts it back).
enum Settle {
    Complete,
    CompleteMany,
    Fail(FailAction, String),
    Defer(BTreeSet<String>),
}

impl Settle {
    fn name(&self) -> &'static str {
        match self {
            Settle::Complete => "complete",
            Settle::CompleteMany => "complete_many",
            Settle::Fail(..) => "fail",
            Settle::Defer(_) => "defer",
        }
    }
}

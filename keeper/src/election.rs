//! Leader election on the keeper ([contract §14](tenure_lease_core::contract)): several
//! processes campaign for one scope, the one whose admission wins leads
//! under that record's lease and fence, the others keep campaigning.
//!
//! Why it is built from what the keeper already has rather than a lock of
//! its own:
//! * **A term is a run.** Each campaign admits a fresh record (kind
//!   [`ELECTION_KIND`]) on the election's scope with
//!   [`AdmitStrategy::Interrupt`]: the store admits it only when no other
//!   worker holds the scope under a lease valid by the store's clock (plus
//!   grace), and interrupts a lapsed leader's record in the same atomic
//!   step. So two leaders whose leases are both valid by the store never
//!   exist, whatever the clocks of the campaigners say.
//! * **The keeper keeps it.** The leader's record is held like any run: the
//!   heartbeat renews it, and loss is noticed the keeper's way (a `Lost`
//!   renewal, a refused write, or renewals unconfirmed until the confirmed
//!   deadline: fail-stop at that deadline). The leader's work is the run's
//!   registered task, aborted the moment leadership is gone.
//! * **The fence says who leads.** Every term draws a new fence, greater
//!   than every earlier leader's, so a resource that checks it
//!   (the store's gate, [`FenceStore::check_fence`](tenure_lease_core::FenceStore::check_fence),
//!   shared by every process; [`FenceGate`](tenure_lease_core::FenceGate) inside one; or
//!   a conditional write in another store) refuses a deposed leader that has
//!   not noticed yet.
//! * **Stepping down is a settle.** On [`Election::shutdown`] the work is
//!   asked to finish ([`Term::stepping_down`]); once it has returned, the
//!   record is completed, which frees the scope at once, so a follower's
//!   next attempt wins instead of waiting out the lease.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{health, AdmitOutcome, Keeper, KeeperError, LossCause, OwnershipLost, RunGuard};
use tenure_lease_core::backend::validate;
use tenure_lease_core::{generate_id, AdmitStrategy, StatusChange};
use tenure_lease_core::{Claim, LeaseRecord};
use tenure_lease_core::{Error, ErrorKind};

/// The kind of the records an [`Election`] admits, one per term.
pub const ELECTION_KIND: &str = "election";

/// The error written on a lapsed leader's record that a new leader's
/// admission interrupted (the record is finalised `Failed`).
pub const DEPOSED: &str = "deposed: its lease had lapsed when another campaigner was elected";

/// Where this campaigner stands, as [`Election::watch`] follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leadership {
    /// Not leading, and no leader known: starting, between terms, or the
    /// store could not say.
    Campaigning,
    /// Another worker leads (the holder of the election's scope when this
    /// campaigner last tried).
    Following {
        /// The leader's worker id.
        leader: String,
        /// The leader's fence.
        fence: u64,
    },
    /// This campaigner leads under `claim` (its fence is the term's).
    Leading {
        /// The term's claim.
        claim: Claim,
    },
    /// The election was shut down, or its keeper takes no more leases.
    Stopped,
}

impl Leadership {
    /// Whether this campaigner leads.
    pub fn is_leading(&self) -> bool {
        matches!(self, Leadership::Leading { .. })
    }

    /// The fence of the term this campaigner leads, if it does.
    pub fn fence(&self) -> Option<u64> {
        match self {
            Leadership::Leading { claim } => Some(claim.fence),
            _ => None,
        }
    }
}

/// Why a term of leadership ended, as [`ElectionBuilder::on_term_end`] and
/// [`Election::shutdown`] report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermEnd {
    /// Leadership was lost (the store said so, renewals went unconfirmed
    /// until the confirmed deadline, a write was refused as stale, the
    /// keeper stopped, ...); the work was aborted. The campaign goes on.
    Lost(LossCause),
    /// The work returned `Ok`: the record was completed `Succeeded`,
    /// releasing the scope. The campaign goes on, so this campaigner may be
    /// elected again at once.
    WorkReturned,
    /// The work returned an error (or panicked): the record was completed
    /// `Failed` with this text, releasing the scope. The campaign goes on.
    WorkFailed(String),
    /// Shutdown: the work returned once asked to step down and the record
    /// was completed `Succeeded`, so a follower can be elected at once.
    SteppedDown,
    /// Shutdown: the work was still running at the deadline. It was aborted
    /// and the lease left to expire (as the keeper's shutdown does), so a
    /// follower is elected only once the store sees it lapsed.
    StoppedAtDeadline,
}

/// The term handed to the leader's work: its fence and the signals that
/// end it. Clones share the term.
#[derive(Clone)]
pub struct Term {
    guard: RunGuard,
    stepping_down: CancellationToken,
    election: Arc<str>,
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("election", &self.election)
            .field("claim", self.claim())
            .finish_non_exhaustive()
    }
}

impl Term {
    /// The election's name (its scope).
    pub fn election(&self) -> &str {
        &self.election
    }

    /// The term's claim: its record's id, this worker, the fence.
    pub fn claim(&self) -> &Claim {
        self.guard.claim()
    }

    /// The term's fence: greater than every earlier leader's. Present it to
    /// every resource the leader writes
    /// ([`FenceStore::check_fence`](tenure_lease_core::FenceStore::check_fence),
    /// [`FenceGate::admit`](tenure_lease_core::FenceGate::admit) or a conditional write
    /// on the fence), so a deposed leader that has not noticed yet is
    /// refused.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// Cancelled the moment leadership is lost (the work is aborted then
    /// too); never on a normal step-down.
    pub fn token(&self) -> CancellationToken {
        self.guard.token()
    }

    /// Cancelled when [`Election::shutdown`] asks the leader to step down:
    /// finish the current step and return, so the record is completed and a
    /// follower takes over at its next attempt, not a lease later.
    pub fn stepping_down(&self) -> CancellationToken {
        self.stepping_down.clone()
    }

    /// Whether leadership still holds, for work between items (see
    /// [`RunGuard::check`]).
    pub async fn check(&self) -> Result<(), OwnershipLost> {
        self.guard.check().await
    }

    /// Why leadership was lost, if it was.
    pub fn loss(&self) -> Option<LossCause> {
        self.guard.loss()
    }

    /// The local instant until which leadership is confirmed (see
    /// [`RunGuard::confirmed_deadline`]).
    pub fn confirmed_deadline(&self) -> Option<Instant> {
        self.guard.confirmed_deadline()
    }
}

/// What the leader runs each term: a future ending in `Ok` or an error
/// text, started by the campaign.
type Work = Arc<dyn Fn(Term) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;
type TermEndHook = Arc<dyn Fn(TermEnd) + Send + Sync>;

/// Builds an [`Election`]; see [`Election::builder`].
pub struct ElectionBuilder {
    keeper: Arc<Keeper>,
    name: String,
    retry_interval: Option<Duration>,
    on_term_end: Option<TermEndHook>,
}

impl ElectionBuilder {
    /// How often a follower tries again at most (default: the keeper's
    /// beat). A follower tries again after this, or when the leader's lease
    /// (plus grace) ends if that is sooner; a leader that steps down is
    /// replaced within one such interval.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = Some(interval);
        self
    }

    /// Called once at the end of every term, with why it ended, in the
    /// campaign's task (keep it short; a panic in it is caught and logged).
    pub fn on_term_end<F>(mut self, hook: F) -> Self
    where
        F: Fn(TermEnd) + Send + Sync + 'static,
    {
        self.on_term_end = Some(Arc::new(hook));
        self
    }

    /// Starts campaigning. `on_elected` is called at the start of every
    /// term this campaigner wins; the future it answers is the leader's
    /// work, run as the term's registered task (aborted the moment
    /// leadership is lost). Returning ends the term (see [`TermEnd`]), so
    /// work that leads until deposed or shut down waits for
    /// [`Term::stepping_down`] rather than returning.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a name that is not a valid scope, a
    /// keeper without a ttl (single-worker mode has no lease to lose) or a
    /// zero retry interval; [`ErrorKind::Config`] outside a tokio runtime.
    pub fn start<F, Fut, E>(self, on_elected: F) -> Result<Election, Error>
    where
        F: Fn(Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + 'static,
    {
        validate::scope(&self.name)?;
        let Some(beat) = self.keeper.config().effective_renew_interval() else {
            return Err(Error::invalid_input(
                "keeper",
                "an election needs a keeper with a ttl: leadership is a lease",
            ));
        };
        let retry_interval = self.retry_interval.unwrap_or(beat);
        if retry_interval.is_zero() {
            return Err(Error::invalid_input("retry_interval", "must be above zero"));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::new(
                ErrorKind::Config,
                "an Election must be started inside a tokio runtime",
            ));
        }
        let work: Work = Arc::new(move |term| {
            let work = on_elected(term);
            Box::pin(async move { work.await.map_err(|error| error.to_string()) })
        });
        let (state, watch) = watch::channel(Leadership::Campaigning);
        let stop = Stop::default();
        let name: Arc<str> = self.name.into();
        let campaign = Campaign {
            keeper: self.keeper,
            name: Arc::clone(&name),
            retry_interval,
            work,
            on_term_end: self.on_term_end,
            state,
            stop: stop.clone(),
        };
        let task = tokio::spawn(campaign.run());
        Ok(Election {
            name,
            watch,
            stop,
            task: Mutex::new(Some(task)),
        })
    }
}

/// One campaigner of a leader election ([contract §14](tenure_lease_core::contract)).
///
/// Each campaign admits a fresh record (kind [`ELECTION_KIND`]) on the
/// election's scope with [`AdmitStrategy::Interrupt`]: the store admits it
/// only when no other worker holds the scope under a lease valid by the
/// store's clock (plus grace), interrupting a lapsed leader's record in the
/// same step, so two leaders whose leases are both valid by the store never
/// exist. The winner's record is held by its keeper like any run (renewed
/// by the heartbeat, lost the keeper's way: fail-stop at the confirmed
/// deadline when renewals go unconfirmed), and the leader's work is its
/// registered task, aborted the moment leadership is gone. Each term's
/// fence is greater than every earlier leader's: present it to what the
/// leader writes ([`FenceStore::check_fence`](tenure_lease_core::FenceStore::check_fence)
/// across processes, [`FenceGate`](tenure_lease_core::FenceGate) inside one) so a
/// deposed leader that has not noticed yet is refused. Followers try again every
/// [`retry_interval`](ElectionBuilder::retry_interval) (sooner when the
/// leader's lease ends first); a leader that steps down
/// ([`Election::shutdown`]) completes its record once its work has
/// returned, freeing the scope for the next attempt.
///
/// Give every campaigner its own keeper (its own worker id): a campaign
/// interrupts records of its own worker id whatever their lease, which is
/// what lets a restarted process with a fixed worker id take its crashed
/// term back at once, and would make two campaigners sharing one depose
/// each other.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use tenure_backend_memory::MemoryStore;
/// use tenure_keeper::{Election, Keeper, KeeperConfig, TermEnd};
/// use tenure_lease_core::FenceGate;
/// use tokio::time::Instant;
///
/// let store = Arc::new(MemoryStore::new());
/// let keeper = Arc::new(Keeper::builder(store, KeeperConfig::with_ttl(Duration::from_secs(10))).start()?);
/// let gate = Arc::new(FenceGate::new()); // stands for the resource the leader writes
/// let election = Election::builder(keeper.clone(), "leader:billing")
///     .on_term_end(|end: TermEnd| println!("term ended: {end:?}"))
///     .start(move |term| {
///         let gate = gate.clone();
///         async move {
///             // Every write carries the term's fence: a deposed leader is refused.
///             gate.admit("invoices", term.fence())?;
///             term.stepping_down().cancelled().await; // lead until asked to step down
///             Ok::<(), tenure_lease_core::StaleFence>(())
///         }
///     })?;
///
/// let mut leadership = election.watch();
/// leadership.wait_for(|state| state.is_leading()).await?;
/// let ended = election.shutdown(Instant::now() + Duration::from_secs(5)).await;
/// assert_eq!(ended, Some(TermEnd::SteppedDown)); // released: a follower takes over at its next try
/// keeper.shutdown(Instant::now() + Duration::from_secs(5)).await;
/// # Ok(())
/// # }
/// ```
pub struct Election {
    name: Arc<str>,
    watch: watch::Receiver<Leadership>,
    stop: Stop,
    task: Mutex<Option<JoinHandle<Option<TermEnd>>>>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("leadership", &*self.watch.borrow())
            .finish_non_exhaustive()
    }
}

impl Election {
    /// An election named `name` (the scope every campaigner admits on)
    /// among the keepers that campaign for it; configure it, then
    /// [`start`](ElectionBuilder::start) it.
    pub fn builder(keeper: Arc<Keeper>, name: impl Into<String>) -> ElectionBuilder {
        ElectionBuilder {
            keeper,
            name: name.into(),
            retry_interval: None,
            on_term_end: None,
        }
    }

    /// The election's name (its scope).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where this campaigner stands now.
    pub fn leadership(&self) -> Leadership {
        self.watch.borrow().clone()
    }

    /// Follows where this campaigner stands: changes as it is elected,
    /// loses a term, learns of another leader, or stops.
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.watch.clone()
    }

    /// [`shutdown`](Self::shutdown) with a deadline `grace` from now: for
    /// an election shut down on its own (with its keeper after it, use one
    /// shared deadline).
    pub async fn shutdown_within(&self, grace: Duration) -> Option<TermEnd> {
        self.shutdown(Instant::now() + grace).await
    }

    /// Stops campaigning under `deadline`. A leader is asked to step down
    /// ([`Term::stepping_down`]); once its work has returned, the record is
    /// completed, releasing the scope for a follower at once. Work still
    /// running at the deadline is aborted and the lease left to expire.
    /// Answers how the term in progress ended, `None` when not leading.
    ///
    /// Shut the election down before its keeper: the keeper's own shutdown
    /// would stop the term at its deadline without releasing it.
    pub async fn shutdown(&self, deadline: Instant) -> Option<TermEnd> {
        self.stop.request(deadline);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        match task.await {
            Ok(ended) => ended,
            Err(error) => {
                tracing::error!(election = %self.name, %error, "the campaign task failed");
                None
            }
        }
    }
}

impl Drop for Election {
    /// Dropping an election without [`shutdown`](Election::shutdown) stops
    /// it like a crash: the work is aborted, nothing more is written, and
    /// the lease is left to expire.
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

/// The shutdown request: a token, and the deadline set just before it is
/// cancelled.
#[derive(Clone, Default)]
pub(super) struct Stop {
    pub(super) token: CancellationToken,
    deadline: Arc<Mutex<Option<Instant>>>,
}

impl Stop {
    pub(super) fn request(&self, deadline: Instant) {
        self.deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(deadline);
        self.token.cancel();
    }

    pub(super) fn deadline(&self) -> Instant {
        self.deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or_else(Instant::now)
    }
}

/// The campaign task's state.
struct Campaign {
    keeper: Arc<Keeper>,
    name: Arc<str>,
    retry_interval: Duration,
    work: Work,
    on_term_end: Option<TermEndHook>,
    state: watch::Sender<Leadership>,
    stop: Stop,
}

impl Campaign {
    /// Campaigns until stopped; answers how the last term ended when the
    /// stop came while leading.
    async fn run(self) -> Option<TermEnd> {
        loop {
            if self.stop.token.is_cancelled() {
                break;
            }
            let request = self
                .keeper
                .request(generate_id())
                .scope(&*self.name)
                .kind(ELECTION_KIND)
                .strategy(AdmitStrategy::Interrupt)
                .metadata(serde_json::json!({ "election": &*self.name }));
            // Never cut short by the stop: an admission dropped mid-flight
            // could leave a term nobody renews blocking the scope.
            let wait = match self.keeper.admit(request).await {
                Ok(AdmitOutcome::Admitted {
                    guard, interrupted, ..
                }) => {
                    let ended = self.lead(guard, interrupted).await;
                    self.set(Leadership::Campaigning);
                    self.report(&ended);
                    if self.stop.token.is_cancelled() {
                        self.set(Leadership::Stopped);
                        return Some(ended);
                    }
                    // A term that ended at once (work that returned or
                    // failed straight away) must not win again before the
                    // followers, who wait this long, try.
                    self.retry_interval
                }
                Ok(AdmitOutcome::Conflict {
                    holder,
                    retry_after,
                }) => {
                    self.set(Leadership::Following {
                        leader: holder.owner.unwrap_or_default(),
                        fence: holder.fence,
                    });
                    retry_after.map_or(self.retry_interval, |after| after.min(self.retry_interval))
                }
                Ok(AdmitOutcome::RateLimited { key, retry_after }) => {
                    // A campaign names no rate limit: the store is wrong.
                    tracing::warn!(election = %self.name, key, "campaign answered rate limited; trying again");
                    self.set(Leadership::Campaigning);
                    retry_after.min(self.retry_interval)
                }
                Err(KeeperError::Store(error)) => {
                    tracing::warn!(election = %self.name, %error, "campaign could not be decided; trying again");
                    self.set(Leadership::Campaigning);
                    self.retry_interval
                }
                Err(error) => {
                    tracing::warn!(election = %self.name, %error, "the keeper takes no more leases; the campaign stops");
                    break;
                }
            };
            tokio::select! {
                _ = self.stop.token.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        self.set(Leadership::Stopped);
        None
    }

    /// One term: runs the work under `guard` until it returns, leadership is
    /// lost, or the election stops.
    async fn lead(&self, guard: RunGuard, interrupted: Vec<LeaseRecord>) -> TermEnd {
        tracing::info!(election = %self.name, fence = guard.fence(), "elected");
        if self.stop.token.is_cancelled() {
            return match release(&guard, StatusChange::succeeded()).await {
                Ok(()) => TermEnd::SteppedDown,
                Err(cause) => TermEnd::Lost(cause),
            };
        }
        let term = Term {
            guard: guard.clone(),
            stepping_down: CancellationToken::new(),
            election: Arc::clone(&self.name),
        };
        let work = Arc::clone(&self.work);
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| work(term.clone())));
        self.set(Leadership::Leading {
            claim: guard.claim().clone(),
        });
        let mut task = match started {
            Ok(future) => AbortOnDrop(guard.spawn(|_| future)),
            Err(payload) => {
                let text = format!("on_elected panicked: {}", health::panic_message(&*payload));
                return settle_failed(&guard, text).await;
            }
        };
        self.finalise(interrupted).await;
        let joined = tokio::select! {
            joined = &mut task.0 => joined,
            _ = self.stop.token.cancelled() => {
                term.stepping_down.cancel();
                match tokio::time::timeout_at(self.stop.deadline(), &mut task.0).await {
                    Ok(Ok(Ok(()))) => {
                        return match release(&guard, StatusChange::succeeded()).await {
                            Ok(()) => TermEnd::SteppedDown,
                            Err(cause) => TermEnd::Lost(cause),
                        };
                    }
                    Ok(joined) => joined,
                    Err(_) => {
                        task.0.abort();
                        // Waits for the aborted work to be gone before the
                        // lease is abandoned.
                        let _ = (&mut task.0).await;
                        return TermEnd::StoppedAtDeadline;
                    }
                }
            }
        };
        match joined {
            Ok(Ok(())) => match release(&guard, StatusChange::succeeded()).await {
                Ok(()) => TermEnd::WorkReturned,
                Err(cause) => TermEnd::Lost(cause),
            },
            Ok(Err(text)) => settle_failed(&guard, text).await,
            Err(error) => match work_ended(&guard, error) {
                Ok(text) => settle_failed(&guard, text).await,
                Err(cause) => TermEnd::Lost(cause),
            },
        }
    }

    /// Finalises the lapsed terms this one interrupted as `Failed`, so they
    /// can be purged; a failure leaves them `Interrupted`, harmless.
    async fn finalise(&self, interrupted: Vec<LeaseRecord>) {
        let shared = &self.keeper.shared;
        let deposed = StatusChange::failed(DEPOSED);
        for record in interrupted {
            let Some(claim) = record.claim() else {
                continue;
            };
            let write = shared.store.transition(&claim, &deposed);
            if let Err(error) = shared.bounded("finalising a deposed term", write).await {
                tracing::warn!(election = %self.name, lease.id = %claim.id, %error, "could not finalise a deposed term");
            }
        }
    }

    fn set(&self, leadership: Leadership) {
        self.state.send_if_modified(|state| {
            let changed = *state != leadership;
            *state = leadership;
            changed
        });
    }

    fn report(&self, ended: &TermEnd) {
        tracing::info!(election = %self.name, ended = ?ended, "term ended");
        if let Some(hook) = &self.on_term_end {
            let ended = ended.clone();
            if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(|| hook(ended))) {
                tracing::error!(election = %self.name, panic = %health::panic_message(&*payload), "on_term_end panicked");
            }
        }
    }
}

/// Completes the term `Failed` with `text`; answers `WorkFailed`, or `Lost`
/// when the write could not be made.
async fn settle_failed(guard: &RunGuard, text: String) -> TermEnd {
    match release(guard, StatusChange::failed(&text)).await {
        Ok(()) => TermEnd::WorkFailed(text),
        Err(cause) => TermEnd::Lost(cause),
    }
}

/// Completes `guard`'s run with `change`; when that is refused or cannot be
/// confirmed, answers why ownership is gone (the guard's loss, or
/// `Abandoned` when the keeper still held it: it is left to expire).
pub(super) async fn release(guard: &RunGuard, change: StatusChange) -> Result<(), LossCause> {
    match guard.complete(change).await {
        Ok(_) => Ok(()),
        Err(error) => {
            tracing::warn!(lease.id = %guard.id(), %error, "the run could not be completed");
            Err(guard.loss().unwrap_or(LossCause::Abandoned))
        }
    }
}

/// How a task run under `guard` ended without answering: a panic (its
/// text), or an abort at a loss (the loss).
pub(super) fn work_ended(guard: &RunGuard, error: JoinError) -> Result<String, LossCause> {
    if error.is_panic() {
        Ok(format!(
            "panicked: {}",
            health::panic_message(&*error.into_panic())
        ))
    } else {
        Err(guard.loss().unwrap_or(LossCause::Abandoned))
    }
}

/// A task aborted when its handle is dropped, so dropping the future that
/// waits for it (a shutdown at its deadline, a dropped caller) stops it too.
pub(super) struct AbortOnDrop<T>(pub(super) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

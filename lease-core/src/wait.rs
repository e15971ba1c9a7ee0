//! Acquire-or-wait: an admission that waits its turn for a held scope.
//!
//! [`LeaseStore::admit`] answers at once: admitted, or
//! [`Admission::Conflict`] with the holder. A caller that would rather wait
//! for the scope than give up needs a wait queue, a wake-up when the holder
//! releases, a fallback for a wake-up that never comes, and a deadline.
//! [`Waiter`] is that queue, over any store:
//!
//! * **in turn**: callers of one `Waiter` wait for a set of scopes in a FIFO
//!   line of their own; only the first of a line asks the store, and when it
//!   is admitted (or gives up) the next one's turn begins. A caller that is
//!   admitted, releases and asks again joins the back of the line;
//! * **woken by releases**: the first of a line listens to the store's
//!   [release notices](crate::release) and asks again as soon as one names
//!   a scope it waits for (PostgreSQL, Redis on one server and memory
//!   announce every release; SQLite, MySQL, etcd, the file store and a
//!   Redis Cluster store those made through the same store value or its
//!   clones);
//! * **never stuck on a lost notice**: it also asks again when the holder's
//!   lease ends (`retry_after`) and at least every
//!   [`poll`](Waiter::poll) interval. Whether a holder whose lease ended
//!   still blocks is the request's [`AdmitStrategy`](crate::AdmitStrategy):
//!   `Interrupt` is admitted over it, `Reject` (the default) waits until the
//!   holder is released or taken over;
//! * **bounded**: after `wait_for` it answers the store's last
//!   [`Admission::Conflict`].
//!
//! The line is per process: waiters in other processes (or other
//! `Waiter`s) are not in it, and the first of each line races for a freed
//! scope as plain admissions do. Requests for different sets of scopes wait
//! in different lines.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_lease_core::Result<()> {
//! use std::time::Duration;
//! use tenure_backend_memory::MemoryStore;
//! use tenure_lease_core::wait::Waiter;
//! use tenure_lease_core::{Admission, AdmitRequest};
//!
//! let waiter = Waiter::new(MemoryStore::new());
//! let request = AdmitRequest::new("nightly-report", "worker-a")
//!     .scope("reports")
//!     .ttl(Duration::from_secs(30));
//! match waiter.admit(&request, Duration::from_secs(10)).await? {
//!     Admission::Admitted { record, .. } => println!("fence {}", record.fence),
//!     Admission::Conflict { holder, .. } => println!("still held by {:?}", holder.owner),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Result;
use crate::outcome::Admission;
use crate::release::Releases;
use crate::request::AdmitRequest;
use crate::store::LeaseStore;

/// How often the first of a line asks again, at most, when its store
/// announces the releases of every process: only a lost notice waits this
/// long.
pub const POLL_WITH_NOTICES: Duration = Duration::from_secs(1);

/// How often the first of a line asks again, at most, when its store
/// announces no releases, or only those made in this process: the longest
/// a scope another process freed stays unclaimed.
pub const POLL_WITHOUT_NOTICES: Duration = Duration::from_millis(50);

/// The least time between two asks, so a holder whose lease the store
/// still counts as valid at `retry_after` zero is not asked about in a
/// spin.
const LEAST_PAUSE: Duration = Duration::from_millis(1);

/// How long a wait of more than an instant can hold lasts: a century.
const FOR_EVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Admissions that wait their turn for held scopes (see the
/// [module docs](self)). Share one `Waiter` (in an `Arc`) between the
/// callers that should take turns.
#[derive(Debug)]
pub struct Waiter<S> {
    store: S,
    poll: Option<Duration>,
    lines: Mutex<Lines>,
}

/// The lines of one [`Waiter`], by the set of scopes their callers wait
/// for, and the next ticket to hand out.
#[derive(Debug, Default)]
struct Lines {
    by_scopes: HashMap<BTreeSet<String>, Line>,
    next_ticket: u64,
}

/// One line: tickets in arrival order.
#[derive(Debug, Default)]
struct Line {
    tickets: VecDeque<Ticket>,
}

/// A caller's number in a line, and the signal that its turn began: each
/// has its own, so a turn that begins wakes the one caller it is for, not
/// the whole line.
#[derive(Debug)]
struct Ticket {
    number: u64,
    turn: Arc<Notify>,
}

impl<S: LeaseStore> Waiter<S> {
    /// Waits for scopes of `store`, polling at [`POLL_WITH_NOTICES`] when
    /// the store announces the releases of every process, at
    /// [`POLL_WITHOUT_NOTICES`] otherwise.
    pub fn new(store: S) -> Self {
        Waiter {
            store,
            poll: None,
            lines: Mutex::default(),
        }
    }

    /// Asks again at least every `interval` (1 ms at least) while first in
    /// line, whether the store announces releases or not.
    #[must_use]
    pub fn poll(mut self, interval: Duration) -> Self {
        self.poll = Some(interval.max(LEAST_PAUSE));
        self
    }

    /// The store this waiter admits on.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Admits `request`, waiting up to `wait_for` for its scopes: in line
    /// behind this waiter's earlier callers for the same scopes, then asking
    /// the store whenever a scope may have come free. Answers
    /// [`Admission::Admitted`] as soon as the store admits it, or the
    /// store's last [`Admission::Conflict`] (or
    /// [`Admission::RateLimited`]) once `wait_for` has passed (a caller
    /// still in line then asks once, to name the holder). A rate-limited
    /// answer is waited out outside the line (those behind go first
    /// meanwhile), then the caller lines up again.
    ///
    /// A request without scopes is admitted outside any line, at once
    /// unless its rate limit makes it wait.
    /// When the store cannot start listening for releases before the
    /// deadline, the waiter polls at [`POLL_WITHOUT_NOTICES`] (unless
    /// [`poll`](Self::poll) set another interval) and logs why.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// request [`LeaseStore::admit`] would refuse, before it waits in line;
    /// what [`LeaseStore::admit`] answers, at once: the wait ends and the
    /// caller leaves the line. An admission whose outcome is unknown (a
    /// timeout) may have been applied, as with a plain admission.
    ///
    /// # Cancellation
    ///
    /// Dropping the future leaves the line (the next caller's turn begins);
    /// an admission in flight at that moment may have been applied, as with
    /// [`LeaseStore::admit`].
    pub async fn admit(&self, request: &AdmitRequest, wait_for: Duration) -> Result<Admission> {
        // Refused before it waits in line, not when its turn comes.
        crate::backend::validate::admit(request)?;
        let now = Instant::now();
        // A wait too long for an instant is as good as for ever.
        let deadline = now.checked_add(wait_for).unwrap_or_else(|| now + FOR_EVER);
        loop {
            let answer = if request.scopes.is_empty() {
                self.store.admit(request).await?
            } else {
                self.admit_in_line(request, deadline).await?
            };
            // A rate limit is waited out outside the line: the callers
            // behind may be admitted meanwhile.
            let Admission::RateLimited { retry_after, .. } = &answer else {
                return Ok(answer);
            };
            let Some(until) = ask_again_at(*retry_after, deadline) else {
                return Ok(answer);
            };
            tokio::time::sleep_until(until).await;
        }
    }

    /// Admits `request` in its line: answers anything but a `Conflict`
    /// at once, a `Conflict` once the deadline has passed; leaves the line
    /// on return.
    async fn admit_in_line(&self, request: &AdmitRequest, deadline: Instant) -> Result<Admission> {
        let place = self.join(&request.scopes);
        if !place.wait_for_turn(deadline).await {
            return self.store.admit(request).await;
        }
        let mut releases = self.subscribe(deadline).await;
        let poll = self.poll.unwrap_or(
            if releases.as_ref().is_some_and(Releases::of_every_process) {
                POLL_WITH_NOTICES
            } else {
                POLL_WITHOUT_NOTICES
            },
        );
        loop {
            let answer = self.store.admit(request).await?;
            let Admission::Conflict { retry_after, .. } = &answer else {
                return Ok(answer);
            };
            let pause = retry_after.map_or(poll, |ends| ends.min(poll));
            let Some(until) = ask_again_at(pause, deadline) else {
                return Ok(answer);
            };
            match releases.as_mut() {
                Some(releases) => freed_or_until(releases, &request.scopes, until).await,
                None => tokio::time::sleep_until(until).await,
            }
        }
    }

    /// The store's release notices, or `None` to poll: when it announces
    /// none, or cannot start listening before `deadline` (notices only
    /// save time, so a waiter never fails for want of them).
    async fn subscribe(&self, deadline: Instant) -> Option<Releases> {
        match tokio::time::timeout_at(deadline, self.store.releases()).await {
            Ok(Ok(releases)) => releases,
            Ok(Err(error)) => {
                tracing::warn!(%error, "no release notices; the waiter polls");
                None
            }
            Err(_) => None,
        }
    }

    /// Takes a ticket at the back of the line for `scopes`.
    fn join<'a>(&'a self, scopes: &'a BTreeSet<String>) -> Place<'a> {
        let mut lines = self.lines();
        let ticket = lines.next_ticket;
        lines.next_ticket += 1;
        let turn = Arc::new(Notify::new());
        lines
            .by_scopes
            .entry(scopes.clone())
            .or_default()
            .tickets
            .push_back(Ticket {
                number: ticket,
                turn: Arc::clone(&turn),
            });
        Place {
            lines: &self.lines,
            scopes,
            ticket,
            turn,
        }
    }

    fn lines(&self) -> MutexGuard<'_, Lines> {
        lock(&self.lines)
    }
}

/// Locks `lines`; a panic while it was held left nothing half-done (each
/// change is one collection call), so a poisoned lock is used as it is.
fn lock(lines: &Mutex<Lines>) -> MutexGuard<'_, Lines> {
    lines.lock().unwrap_or_else(PoisonError::into_inner)
}

/// When to ask again after `pause` (at least [`LEAST_PAUSE`], at most the
/// deadline), or `None` once the deadline has passed.
fn ask_again_at(pause: Duration, deadline: Instant) -> Option<Instant> {
    let now = Instant::now();
    if now >= deadline {
        return None;
    }
    Some(
        now.checked_add(pause.max(LEAST_PAUSE))
            .map_or(deadline, |until| until.min(deadline)),
    )
}

/// Waits until a notice may concern `scopes`, or until `until`.
async fn freed_or_until(releases: &mut Releases, scopes: &BTreeSet<String>, until: Instant) {
    let freed = async { while !releases.next().await.concerns(scopes.iter()) {} };
    // Either way it is time to ask again.
    let _ = tokio::time::timeout_at(until, freed).await;
}

/// A caller's ticket in a line; leaving the line (dropping it) begins the
/// next caller's turn.
struct Place<'a> {
    lines: &'a Mutex<Lines>,
    scopes: &'a BTreeSet<String>,
    ticket: u64,
    turn: Arc<Notify>,
}

impl Place<'_> {
    fn is_first(&self) -> bool {
        lock(self.lines)
            .by_scopes
            .get(self.scopes)
            .and_then(|line| line.tickets.front())
            .is_some_and(|first| first.number == self.ticket)
    }

    /// Waits until this ticket is first in its line: true, or false when
    /// `deadline` came first.
    async fn wait_for_turn(&self, deadline: Instant) -> bool {
        loop {
            let turn = self.turn.notified();
            tokio::pin!(turn);
            // Registered before looking, so a turn that begins in between
            // is not missed.
            turn.as_mut().enable();
            if self.is_first() {
                return true;
            }
            if tokio::time::timeout_at(deadline, turn).await.is_err() {
                return false;
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut lines = lock(self.lines);
        let Some(line) = lines.by_scopes.get_mut(self.scopes) else {
            return;
        };
        if line
            .tickets
            .front()
            .is_some_and(|first| first.number == self.ticket)
        {
            line.tickets.pop_front();
            if let Some(next) = line.tickets.front() {
                // Stored if the next caller is between looking and
                // waiting, so its turn is never missed.
                next.turn.notify_one();
            }
        } else {
            line.tickets.retain(|ticket| ticket.number != self.ticket);
        }
        if line.tickets.is_empty() {
            lines.by_scopes.remove(self.scopes);
        }
    }
}

//! Word that scopes came free, for callers waiting to be admitted.
//!
//! A caller refused by a holder can poll until the holder's lease ends
//! (`retry_after`), but a holder that finishes early frees its scopes long
//! before that. A store that can tell its clients about releases answers
//! [`LeaseStore::releases`](crate::LeaseStore::releases) with a
//! [`Releases`] receiver, and [`Waiter`](crate::wait::Waiter) tries again as
//! soon as a notice names a scope it waits for: PostgreSQL
//! (`LISTEN`/`NOTIFY`), Redis (pub/sub) and memory announce the releases of
//! every client; SQLite, MySQL, etcd, the file store and a Redis Cluster
//! store those made through the same store value or its clones (a store
//! opened again is another store), which the validating front announces
//! from the writes' answers.
//!
//! Notices are hints, never proof: one may be lost (a connection cut, a slow
//! receiver), and one may name a scope that another caller took again at
//! once. A receiver learns of a loss as [`ReleaseNotice::Missed`], and
//! every waiter still polls at its holder's `retry_after` and at a bound of
//! its own, so a lost notice costs time, never an admission.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, OnceCell};
use tokio::task::AbortHandle;

use crate::error::Result;
use crate::outcome::{Admission, Takeover, Transition};
use crate::record::LeaseRecord;

/// How many notices a receiver may fall behind before it is told
/// [`ReleaseNotice::Missed`] instead.
const BACKLOG: usize = 1024;

/// What a [`Releases`] receiver hears next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseNotice {
    /// A release (a transition or a takeover to a status that is not
    /// active) freed this scope.
    Freed(Arc<str>),
    /// Notices may have been lost (the store's connection was cut, or this
    /// receiver fell behind): any scope may have come free.
    Missed,
}

impl ReleaseNotice {
    /// True when a waiter for `scopes` should try again: the notice names
    /// one of them, or notices were lost.
    pub fn concerns<'a>(&self, mut scopes: impl Iterator<Item = &'a String>) -> bool {
        match self {
            ReleaseNotice::Freed(freed) => scopes.any(|scope| scope.as_str() == &**freed),
            ReleaseNotice::Missed => true,
        }
    }
}

/// One caller's receiver of the release notices of a store, from the moment
/// it was made on (see the [module docs](self)).
#[derive(Debug)]
pub struct Releases {
    receiver: broadcast::Receiver<ReleaseNotice>,
    of_every_process: bool,
}

impl Releases {
    /// True when notices name releases made by every client of the store;
    /// false when they name only those made through this store in this
    /// process (SQLite, MySQL, etcd and the file store announce no other),
    /// so a waiter polls as often as without notices for the rest.
    pub fn of_every_process(&self) -> bool {
        self.of_every_process
    }

    /// The next notice. Waits until there is one; a receiver whose store
    /// stopped announcing (dropped, or its listener ended) waits forever, so
    /// callers race it against a timer.
    pub async fn next(&mut self) -> ReleaseNotice {
        match self.receiver.recv().await {
            Ok(notice) => notice,
            Err(broadcast::error::RecvError::Lagged(_)) => ReleaseNotice::Missed,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// Where a backend announces releases, for the [`Releases`] receivers it
/// hands out. Cheap to clone: clones announce to the same receivers.
#[derive(Debug, Clone)]
pub struct ReleaseBoard {
    sender: broadcast::Sender<ReleaseNotice>,
    of_every_process: bool,
}

impl Default for ReleaseBoard {
    fn default() -> Self {
        ReleaseBoard {
            sender: broadcast::Sender::new(BACKLOG),
            of_every_process: true,
        }
    }
}

impl ReleaseBoard {
    /// A board no one listens to yet, for the releases of every client of
    /// the store (a server's notices, or a store only one process reaches).
    pub fn new() -> Self {
        Self::default()
    }

    /// A board for the releases made through one store in this process
    /// only (see [`Backend::releases_in_process`](crate::backend::stores::Backend::releases_in_process)).
    pub fn in_process() -> Self {
        ReleaseBoard {
            of_every_process: false,
            ..Self::default()
        }
    }

    /// A receiver of every notice announced from now on.
    pub fn subscribe(&self) -> Releases {
        Releases {
            receiver: self.sender.subscribe(),
            of_every_process: self.of_every_process,
        }
    }

    /// Announces the scopes a write's answer freed: a transition or takeover
    /// to an inactive status frees the record's scopes, an admission those
    /// of the holders it interrupted. From the answer alone a `Failed`
    /// written over an `Interrupted` record looks alike, so its scopes
    /// (released at the interruption) are named again: a hint like any.
    pub fn announce(&self, freed: Freed<'_>) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let records: &[LeaseRecord] = match freed {
            Freed::Transition(Transition::Applied(record))
            | Freed::Takeover(Takeover::Taken(record))
                if !record.is_active() =>
            {
                std::slice::from_ref(record)
            }
            Freed::Admission(Admission::Admitted { interrupted, .. }) => interrupted,
            _ => &[],
        };
        for scope in records.iter().flat_map(|record| &record.scopes) {
            self.freed(scope);
        }
    }

    /// Announces that `scope` came free.
    pub fn freed(&self, scope: &str) {
        // No receiver is not a failure: nobody waits.
        let _ = self.sender.send(ReleaseNotice::Freed(Arc::from(scope)));
    }

    /// Announces that notices may have been lost.
    pub fn missed(&self) {
        let _ = self.sender.send(ReleaseNotice::Missed);
    }
}

/// How long a listener hears nothing before it checks that its connection
/// still answers: an idle connection a firewall or a failover dropped
/// without a word would otherwise leave waiters polling unseen.
pub const LISTEN_CHECK: Duration = Duration::from_secs(10);

/// A write's answer that may have freed scopes (a transition's or a
/// takeover's to an inactive status, an interrupting admission's), for
/// [`ReleaseBoard::announce`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Freed<'a> {
    /// An admission's: the holders it interrupted.
    Admission(&'a Admission),
    /// A transition's.
    Transition(&'a Transition),
    /// A takeover's.
    Takeover(&'a Takeover),
}

/// A listener's pause before listening again after a failure: 100 ms at
/// first, doubling to 5 s, and 100 ms again once it hears something.
#[derive(Debug)]
pub struct ListenBackoff {
    next: Duration,
}

impl ListenBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const LONGEST: Duration = Duration::from_secs(5);

    /// A backoff at its first pause.
    pub fn new() -> Self {
        ListenBackoff { next: Self::FIRST }
    }

    /// The listener heard something: the next failure pauses briefly again.
    pub fn heard(&mut self) {
        self.next = Self::FIRST;
    }

    /// How long the next [`pause`](Self::pause) lasts.
    pub fn next_pause(&self) -> Duration {
        self.next
    }

    /// Sleeps the next pause, and doubles the one after.
    pub async fn pause(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::LONGEST);
    }
}

impl Default for ListenBackoff {
    fn default() -> Self {
        Self::new()
    }
}

/// A backend's listener, started by the first subscription and shared by
/// the store's clones; dropping the last clone stops it. What listening
/// means is the backend's: the `start` it passes to
/// [`subscribe`](Self::subscribe).
#[derive(Debug, Clone, Default)]
pub struct ReleaseListener {
    listening: Arc<OnceCell<Listening>>,
}

/// A started listener: where it announces, and its task.
#[derive(Debug)]
struct Listening {
    board: ReleaseBoard,
    task: AbortHandle,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ReleaseListener {
    /// A listener not started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A receiver of the notices announced from now on. The first call
    /// runs `start` with the board to announce on: it must be listening
    /// when it returns (so no release after this call is missed), with the
    /// task that forwards what it hears.
    ///
    /// # Errors
    ///
    /// What `start` answers; the next call tries again.
    pub async fn subscribe<Start, Started>(&self, start: Start) -> Result<Releases>
    where
        Start: FnOnce(ReleaseBoard) -> Started,
        Started: Future<Output = Result<AbortHandle>>,
    {
        let listening = self
            .listening
            .get_or_try_init(|| async {
                let board = ReleaseBoard::new();
                let task = start(board.clone()).await?;
                Ok::<_, crate::Error>(Listening { board, task })
            })
            .await?;
        Ok(listening.board.subscribe())
    }

    /// Stops the listener, if started: receivers hear nothing more (a
    /// closed store's). Later subscriptions receive nothing either.
    pub fn stop(&self) {
        if let Some(listening) = self.listening.get() {
            listening.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::record::Status;
    use crate::TransitionRejection;

    fn record(status: Status, scopes: &[&str]) -> LeaseRecord {
        let now = Timestamp::from_timestamp_micros(1_700_000_000_000_000).unwrap_or_default();
        LeaseRecord {
            id: "r".into(),
            scopes: scopes.iter().map(|scope| (*scope).to_owned()).collect(),
            slots: Default::default(),
            kind: crate::DEFAULT_KIND.into(),
            status,
            owner: Some("w".into()),
            fence: 1,
            lease_expires_at: None,
            created_at: now,
            updated_at: now,
            error: None,
            stop_reason: None,
            metadata: serde_json::Map::new(),
            progress: None,
        }
    }

    /// Every notice waiting in `releases`, in order.
    fn drain(releases: &mut Releases) -> Vec<String> {
        let mut heard = Vec::new();
        while let Ok(ReleaseNotice::Freed(scope)) = releases.receiver.try_recv() {
            heard.push(scope.to_string());
        }
        heard
    }

    #[test]
    fn a_board_names_what_finishing_writes_and_interrupting_admissions_freed() {
        let board = ReleaseBoard::in_process();
        let mut releases = board.subscribe();
        assert!(!releases.of_every_process());
        let finished = record(Status::Succeeded, &["a", "b"]);
        board.announce(Freed::Transition(&Transition::Applied(finished.clone())));
        board.announce(Freed::Takeover(&Takeover::Taken(record(
            Status::Failed,
            &["c"],
        ))));
        board.announce(Freed::Admission(&Admission::Admitted {
            record: record(Status::Pending, &["d"]),
            interrupted: vec![record(Status::Interrupted, &["d"])],
        }));
        assert_eq!(drain(&mut releases), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_board_is_silent_on_writes_that_free_nothing() {
        let board = ReleaseBoard::new();
        let mut releases = board.subscribe();
        assert!(releases.of_every_process());
        board.announce(Freed::Transition(&Transition::Applied(record(
            Status::Running,
            &["a"],
        ))));
        board.announce(Freed::Transition(&Transition::Rejected(
            TransitionRejection::Missing,
        )));
        board.announce(Freed::Takeover(&Takeover::Taken(record(
            Status::Running,
            &["b"],
        ))));
        board.announce(Freed::Admission(&Admission::Admitted {
            record: record(Status::Pending, &["c"]),
            interrupted: Vec::new(),
        }));
        assert_eq!(drain(&mut releases), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_receiver_hears_what_is_announced_after_it_subscribed() {
        let board = ReleaseBoard::new();
        board.freed("before");
        let mut releases = board.subscribe();
        board.freed("after");
        board.missed();
        assert_eq!(
            releases.next().await,
            ReleaseNotice::Freed(Arc::from("after"))
        );
        assert_eq!(releases.next().await, ReleaseNotice::Missed);
    }

    #[tokio::test]
    async fn a_receiver_that_falls_behind_hears_missed() {
        let board = ReleaseBoard::new();
        let mut releases = board.subscribe();
        for n in 0..=BACKLOG {
            board.freed(&format!("scope-{n}"));
        }
        assert_eq!(releases.next().await, ReleaseNotice::Missed);
    }

    #[test]
    fn a_notice_concerns_its_scope_and_a_miss_concerns_every_scope() {
        let scopes = ["a".to_owned(), "b".to_owned()];
        assert!(ReleaseNotice::Freed(Arc::from("b")).concerns(scopes.iter()));
        assert!(!ReleaseNotice::Freed(Arc::from("c")).concerns(scopes.iter()));
        assert!(ReleaseNotice::Missed.concerns(scopes.iter()));
    }
}

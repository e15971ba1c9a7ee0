//! Leader election ([`Election`], contract §14) on every backend: memory,
//! SQLite, PostgreSQL and Redis (see `support` for how each store is made
//! and removed, and how its clock moves).
//!
//! Every campaigner has its own keeper, its own worker id, and its own
//! fault layer over the test's store (to count its admissions, or to cut it
//! off). A leader's lease is made to lapse behind its keeper's back (a raw
//! 1 ms renewal with its claim, then store time moved past it), standing
//! for a leader paused or partitioned without noticing: that is when a
//! second, stale leader exists and the fence must refuse it.

use crate::support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{on_every_backend, FaultyStore, Subject, SIGNAL};
use tenure::keeper::{Election, Keeper, Leadership, LossCause, Term, TermEnd, DEPOSED};
use tenure::layer::Fault;
use tenure::{FenceGate, LeaseRecord, LeaseStore, StaleFence, Status};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

on_every_backend!(
    one_leader_among_campaigners,
    a_lapsed_leader_is_replaced_and_its_stale_fence_refused,
    shutdown_drains_the_work_then_steps_down,
    store_errors_fail_stop_the_leader_at_its_deadline,
    failed_work_ends_the_term_as_a_failed_run,
);

#[tokio::test]
async fn an_election_needs_a_leased_keeper_and_a_valid_name() {
    let store: Arc<dyn LeaseStore> = Arc::new(tenure::memory::MemoryStore::new());
    let work = |term: Term| async move {
        term.stepping_down().cancelled().await;
        Ok::<(), String>(())
    };
    let refused = |keeper: &Arc<Keeper>, name: &str, retry: Duration, field: &str| {
        let error = Election::builder(keeper.clone(), name)
            .retry_interval(retry)
            .start(work)
            .expect_err("refused");
        assert_eq!(error.kind(), tenure::ErrorKind::InvalidInput);
        assert_eq!(error.field(), Some(field));
    };
    let single = Arc::new(
        Keeper::builder(
            store.clone(),
            tenure::KeeperConfig::single_worker()
                .reconcile_action(tenure::keeper::ReconcileAction::default()),
        )
        .start()
        .unwrap(),
    );
    refused(&single, "leader:x", RETRY, "keeper");
    let leased = support::keeper(store, "w0");
    refused(&leased, "", RETRY, "scope");
    refused(&leased, "leader:x", Duration::ZERO, "retry_interval");
    single.shutdown(Instant::now()).await;
    leased.shutdown(Instant::now()).await;
}

/// How often a follower tries again.
const RETRY: Duration = Duration::from_millis(50);
/// The resource the leaders write, behind a fence gate.
const RESOURCE: &str = "ledger";

/// One campaigner: its store (behind its own fault layer), keeper and
/// election, and the ends of its terms as they were reported.
struct Campaigner {
    worker: String,
    store: Arc<FaultyStore>,
    keeper: Arc<Keeper>,
    election: Arc<Election>,
    ends: tokio::sync::Mutex<mpsc::UnboundedReceiver<TermEnd>>,
}

impl Campaigner {
    fn start<F, Fut>(subject: &Subject, name: &str, worker: &str, work: F) -> Campaigner
    where
        F: Fn(Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let store = subject.faulty();
        let keeper = support::keeper(store.clone(), worker);
        let (ended, ends) = mpsc::unbounded_channel();
        let election = Election::builder(keeper.clone(), name)
            .retry_interval(RETRY)
            .on_term_end(move |end| {
                let _ = ended.send(end);
            })
            .start(work)
            .expect("the election starts");
        Campaigner {
            worker: worker.to_owned(),
            store,
            keeper,
            election: Arc::new(election),
            ends: tokio::sync::Mutex::new(ends),
        }
    }

    /// How many admissions it has attempted.
    fn attempts(&self) -> usize {
        self.store.hook().calls("admit")
    }

    /// Waits until it has attempted `count` admissions (the campaign has no
    /// signal of its own between attempts).
    async fn attempted(&self, count: usize) {
        support::until(
            "the follower kept campaigning",
            || (self.attempts() >= count).then_some(()),
            || tokio::time::sleep(Duration::from_millis(10)),
        )
        .await;
    }

    /// The next end of one of its terms.
    async fn next_end(&self) -> TermEnd {
        tokio::time::timeout(SIGNAL, self.ends.lock().await.recv())
            .await
            .expect("a term ended")
            .expect("the election reports its terms")
    }

    async fn shut_down(&self) -> Option<TermEnd> {
        let ended = self.election.shutdown(Instant::now() + SIGNAL).await;
        self.keeper.shutdown(Instant::now() + SIGNAL).await;
        ended
    }
}

/// Starts `count` campaigners for `name`, workers `w0`, `w1`, ..., each
/// running the work `work(worker)` makes.
fn campaigners<W, F, Fut>(subject: &Subject, name: &str, count: usize, work: W) -> Vec<Campaigner>
where
    W: Fn(String) -> F,
    F: Fn(Term) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    (0..count)
        .map(|index| {
            let worker = format!("w{index}");
            Campaigner::start(subject, name, &worker, work(worker.clone()))
        })
        .collect()
}

/// Work that leads until asked to step down.
fn lead_until_stepping_down(
    _worker: String,
) -> impl Fn(Term) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
    |term: Term| {
        Box::pin(async move {
            term.stepping_down().cancelled().await;
            Ok(())
        })
    }
}

/// Waits until `ready` answers `Some` for the campaigners' states, woken by
/// every change of any of them, for at most `bound`; `None` when it did not.
async fn states_within<T>(
    bound: Duration,
    campaigners: &[Campaigner],
    mut ready: impl FnMut(&[Leadership]) -> Option<T>,
) -> Option<T> {
    let mut watches: Vec<watch::Receiver<Leadership>> =
        campaigners.iter().map(|c| c.election.watch()).collect();
    let waiting = async {
        loop {
            let states: Vec<Leadership> = watches
                .iter_mut()
                .map(|watch| watch.borrow_and_update().clone())
                .collect();
            if let Some(found) = ready(&states) {
                return found;
            }
            let changes = watches.iter_mut().map(|watch| {
                Box::pin(async move {
                    if watch.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                })
            });
            futures_util::future::select_all(changes).await;
        }
    };
    tokio::time::timeout(bound, waiting).await.ok()
}

/// [`states_within`] for [`SIGNAL`], panicking with `what` when it times out.
async fn states<T>(
    what: &str,
    campaigners: &[Campaigner],
    ready: impl FnMut(&[Leadership]) -> Option<T>,
) -> T {
    states_within(SIGNAL, campaigners, ready)
        .await
        .unwrap_or_else(|| panic!("{what}: not within {SIGNAL:?}"))
}

/// The index of the one leader when every other campaigner follows it.
fn settled(campaigners: &[Campaigner], states: &[Leadership]) -> Option<usize> {
    let mut leaders = states.iter().enumerate().filter(|(_, s)| s.is_leading());
    let (leader, Leadership::Leading { claim }) = leaders.next()? else {
        return None;
    };
    if leaders.next().is_some() {
        return None;
    }
    let followed = states.iter().enumerate().all(|(index, state)| {
        index == leader
            || *state
                == Leadership::Following {
                    leader: campaigners[leader].worker.clone(),
                    fence: claim.fence,
                }
    });
    followed.then_some(leader)
}

/// A campaigner other than `old` that leads under a fence above `fence`.
fn new_leader(states: &[Leadership], old: usize, fence: u64) -> Option<(usize, u64)> {
    states
        .iter()
        .enumerate()
        .find_map(|(index, state)| match state.fence() {
            Some(new) if index != old && new > fence => Some((index, new)),
            _ => None,
        })
}

fn leading_claim(campaigner: &Campaigner) -> tenure::Claim {
    match campaigner.election.leadership() {
        Leadership::Leading { claim } => claim,
        other => panic!("{} does not lead: {other:?}", campaigner.worker),
    }
}

/// The active records on the election's scope.
async fn active_terms(subject: &Subject, name: &str) -> Vec<LeaseRecord> {
    let mut records = subject
        .store
        .list_by_scope(name)
        .await
        .expect("a scope read");
    records.retain(LeaseRecord::is_active);
    records
}

async fn record(subject: &Subject, id: &str) -> LeaseRecord {
    subject
        .store
        .get(id)
        .await
        .expect("a read")
        .expect("the term's record exists")
}

async fn shut_down_all(campaigners: &[Campaigner]) {
    for campaigner in campaigners {
        campaigner.shut_down().await;
    }
}

// ----------------------------------------------------------------------------

async fn one_leader_among_campaigners(subject: Arc<Subject>) {
    let name = "leader:one";
    let campaigners = campaigners(&subject, name, 3, lead_until_stepping_down);
    let leader = states(
        "one leader, followed by the others",
        &campaigners,
        |states| settled(&campaigners, states),
    )
    .await;
    let claim = leading_claim(&campaigners[leader]);
    let terms = active_terms(&subject, name).await;
    assert_eq!(terms.len(), 1, "one active term: {terms:?}");
    assert_eq!(terms[0].claim(), Some(claim.clone()));
    assert_eq!(terms[0].kind, tenure::keeper::ELECTION_KIND);

    // The followers keep trying, and keep being refused.
    for (index, follower) in campaigners.iter().enumerate() {
        if index != leader {
            follower.attempted(follower.attempts() + 3).await;
        }
    }
    let states: Vec<Leadership> = campaigners
        .iter()
        .map(|c| c.election.leadership())
        .collect();
    assert_eq!(settled(&campaigners, &states), Some(leader), "{states:?}");
    assert_eq!(leading_claim(&campaigners[leader]), claim, "the same term");
    let every_term = subject.store.list_by_scope(name).await.unwrap();
    assert_eq!(every_term.len(), 1, "no follower ever won: {every_term:?}");
    shut_down_all(&campaigners).await;
}

async fn a_lapsed_leader_is_replaced_and_its_stale_fence_refused(subject: Arc<Subject>) {
    let name = "leader:lapse";
    // The store's own gate: what every process writing the ledger checks.
    let gate = subject.gates.clone();
    let (wrote, mut writes) = mpsc::unbounded_channel::<(String, u64)>();
    let campaigners = campaigners(&subject, name, 3, |worker| {
        let gate = gate.clone();
        let wrote = wrote.clone();
        move |term: Term| {
            let (gate, wrote, worker) = (gate.clone(), wrote.clone(), worker.clone());
            async move {
                gate.check_fence(RESOURCE, term.fence())
                    .await
                    .map_err(|error| error.to_string())?
                    .into_result()
                    .map_err(|stale| stale.to_string())?;
                let _ = wrote.send((worker, term.fence()));
                term.stepping_down().cancelled().await;
                Ok(())
            }
        }
    });
    let old = states("a first leader", &campaigners, |states| {
        settled(&campaigners, states)
    })
    .await;
    let old_claim = leading_claim(&campaigners[old]);
    assert_eq!(
        writes.recv().await,
        Some((campaigners[old].worker.clone(), old_claim.fence))
    );

    // The leader's lease lapses behind its back; a follower's next attempt
    // interrupts it. A beat of the old leader may renew it first: lapse it
    // again then.
    let mut elected = None;
    for _ in 0..50 {
        if !subject.lapse(&old_claim).await {
            elected = Some(
                states("a new leader", &campaigners, |states| {
                    new_leader(states, old, old_claim.fence)
                })
                .await,
            );
            break;
        }
        elected = states_within(Duration::from_millis(500), &campaigners, |states| {
            new_leader(states, old, old_claim.fence)
        })
        .await;
        if elected.is_some() {
            break;
        }
    }
    let (new, new_fence) = elected.expect("a follower took over the lapsed lease");
    assert!(new_fence > old_claim.fence);
    let old_term = record(&subject, &old_claim.id).await;
    assert!(
        !old_term.is_active(),
        "the old term no longer holds the scope: {old_term:?}"
    );
    let new_term = record(&subject, &leading_claim(&campaigners[new]).id).await;
    assert!(new_term.is_active());
    // The new leader may renew between the two reads: compare the terms.
    let active: Vec<String> = active_terms(&subject, name)
        .await
        .into_iter()
        .map(|term| term.id)
        .collect();
    assert_eq!(active, vec![new_term.id.clone()]);

    // The new leader writes; the stale one, whatever it believes, is refused.
    assert_eq!(
        writes.recv().await,
        Some((campaigners[new].worker.clone(), new_fence))
    );
    assert_eq!(
        gate.check_fence(RESOURCE, old_claim.fence)
            .await
            .expect("the gate answers")
            .into_result(),
        Err(StaleFence {
            presented: old_claim.fence,
            highest_seen: new_fence,
        })
    );

    // The old leader notices at its next renewal, and follows.
    let ended = campaigners[old].next_end().await;
    assert!(
        matches!(ended, TermEnd::Lost(LossCause::Lost(_))),
        "the old term ended with a loss: {ended:?}"
    );
    states(
        "the old leader follows the new one",
        &campaigners,
        |states| {
            (states[old]
                == Leadership::Following {
                    leader: campaigners[new].worker.clone(),
                    fence: new_fence,
                })
            .then_some(())
        },
    )
    .await;
    let deposed = record(&subject, &old_claim.id).await;
    if deposed.status == Status::Failed {
        assert_eq!(deposed.error.as_deref(), Some(DEPOSED));
    }
    shut_down_all(&campaigners).await;
}

async fn shutdown_drains_the_work_then_steps_down(subject: Arc<Subject>) {
    let name = "leader:drain";
    let gate = Arc::new(FenceGate::new());
    let (stepping, mut steppings) = mpsc::unbounded_channel::<String>();
    let flush = Arc::new(Notify::new());
    let campaigners = campaigners(&subject, name, 2, |worker| {
        let (gate, stepping, flush) = (gate.clone(), stepping.clone(), flush.clone());
        move |term: Term| {
            let (gate, stepping, flush) = (gate.clone(), stepping.clone(), flush.clone());
            let worker = worker.clone();
            async move {
                term.stepping_down().cancelled().await;
                let _ = stepping.send(worker);
                flush.notified().await;
                gate.admit(RESOURCE, term.fence())
                    .map_err(|stale| stale.to_string())
            }
        }
    });
    let leader = states("a leader", &campaigners, |states| {
        settled(&campaigners, states)
    })
    .await;
    let follower = 1 - leader;
    let claim = leading_claim(&campaigners[leader]);

    let election = campaigners[leader].election.clone();
    let shutdown = tokio::spawn(async move { election.shutdown(Instant::now() + SIGNAL).await });
    assert_eq!(
        steppings.recv().await,
        Some(campaigners[leader].worker.clone())
    );
    // While the work drains, the term holds: the follower is refused.
    let follower_attempts = campaigners[follower].attempts();
    campaigners[follower].attempted(follower_attempts + 2).await;
    assert!(!campaigners[follower].election.leadership().is_leading());
    assert!(record(&subject, &claim.id).await.is_active());
    assert!(!shutdown.is_finished());

    flush.notify_one();
    let ended = shutdown.await.expect("the shutdown task");
    assert_eq!(ended, Some(TermEnd::SteppedDown));
    assert_eq!(campaigners[leader].next_end().await, TermEnd::SteppedDown);
    assert_eq!(
        gate.highest_seen(RESOURCE),
        Some(claim.fence),
        "the work's last write happened before the step-down"
    );
    assert_eq!(record(&subject, &claim.id).await.status, Status::Succeeded);
    assert_eq!(
        campaigners[leader].election.leadership(),
        Leadership::Stopped
    );

    let (_, fence) = states("the follower takes over", &campaigners, |states| {
        new_leader(states, leader, claim.fence)
    })
    .await;
    assert!(fence > claim.fence);
    flush.notify_one(); // lets the new leader's work finish its last write too
    assert_eq!(
        campaigners[follower].shut_down().await,
        Some(TermEnd::SteppedDown)
    );
    shut_down_all(&campaigners).await;
}

async fn store_errors_fail_stop_the_leader_at_its_deadline(subject: Arc<Subject>) {
    let name = "leader:fail-stop";
    let (handed, mut terms) = mpsc::unbounded_channel::<Term>();
    let first = Campaigner::start(&subject, name, "w0", move |term: Term| {
        let handed = handed.clone();
        async move {
            let _ = handed.send(term.clone());
            term.stepping_down().cancelled().await;
            Ok::<(), String>(())
        }
    });
    let term = tokio::time::timeout(SIGNAL, terms.recv())
        .await
        .expect("w0 is elected")
        .expect("the term");
    let second = Campaigner::start(&subject, name, "w1", |term: Term| async move {
        term.stepping_down().cancelled().await;
        Ok::<(), String>(())
    });
    let campaigners = [first, second];
    states("w1 follows w0", &campaigners, |states| {
        settled(&campaigners, states).filter(|leader| *leader == 0)
    })
    .await;

    // w0 is cut off from the store: every renewal (and campaign) fails.
    for operation in ["renew", "renew_many", "admit", "transition", "get"] {
        campaigners[0]
            .store
            .hook()
            .inject(operation, None, Fault::Unavailable);
    }
    tokio::time::timeout(SIGNAL, term.token().cancelled())
        .await
        .expect("w0's leadership is lost");
    let lost_at = Instant::now();
    assert_eq!(term.loss(), Some(LossCause::DeadlinePassed));
    let deadline = term.confirmed_deadline().expect("a leased term");
    assert!(
        lost_at >= deadline,
        "lost at its confirmed deadline, not before"
    );
    assert_eq!(
        campaigners[0].next_end().await,
        TermEnd::Lost(LossCause::DeadlinePassed)
    );
    assert!(!campaigners[0].election.leadership().is_leading());

    // Nothing was written for the lost term: the store sees its lease run
    // out, and only then does w1 win (on a server's clock that may already
    // have happened: the store's expiry is about the keeper's deadline).
    let stale = record(&subject, &term.claim().id).await;
    if stale.is_active() {
        assert_eq!(stale.claim().as_ref(), Some(term.claim()));
        subject
            .advance_past(stale.lease_expires_at.expect("a lease"))
            .await;
    } else {
        assert!(
            !subject.manual_clock(),
            "store time did not move: {stale:?}"
        );
        assert_eq!(stale.owner.as_deref(), Some("w1"), "interrupted by w1");
    }
    let (new, fence) = states("w1 takes over", &campaigners, |states| {
        new_leader(states, 0, term.fence())
    })
    .await;
    assert_eq!(new, 1);
    assert!(fence > term.fence());
    assert!(!campaigners[0].election.leadership().is_leading());
    campaigners[0].store.hook().clear();
    shut_down_all(&campaigners).await;
}

async fn failed_work_ends_the_term_as_a_failed_run(subject: Arc<Subject>) {
    let name = "leader:failing";
    let terms = Arc::new(AtomicUsize::new(0));
    let first_claim = Arc::new(Mutex::new(None));
    let campaigner = {
        let (terms, first_claim) = (terms.clone(), first_claim.clone());
        Campaigner::start(&subject, name, "w0", move |term: Term| {
            let first = terms.fetch_add(1, Ordering::SeqCst) == 0;
            if first {
                *first_claim.lock().unwrap() = Some(term.claim().clone());
            }
            async move {
                if first {
                    return Err("the printer is on fire".to_owned());
                }
                term.stepping_down().cancelled().await;
                Ok::<(), String>(())
            }
        })
    };
    assert_eq!(
        campaigner.next_end().await,
        TermEnd::WorkFailed("the printer is on fire".to_owned())
    );
    let claim = first_claim.lock().unwrap().clone().expect("a first term");
    let failed = record(&subject, &claim.id).await;
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.error.as_deref(), Some("the printer is on fire"));

    // The campaign goes on: a new term, under a greater fence.
    let campaigners = [campaigner];
    let fence = states("elected again", &campaigners, |states| states[0].fence()).await;
    assert!(fence > claim.fence);
    assert_eq!(terms.load(Ordering::SeqCst), 2);
    shut_down_all(&campaigners).await;
}

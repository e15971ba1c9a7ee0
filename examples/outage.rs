//! A worker that runs a long job under a keeper: it rides out a store outage
//! shorter than its lease, and stops cleanly the moment a peer takes the job
//! over.
//!
//! worker-a reaches the store through a connection the example can cut (a
//! layer that fails every call while cut). Its keeper renews the
//! lease every beat; the work checks `guard.check()` between items.
//!
//! 1. The outage: renewals and checks fail for less than the lease, so the
//!    keeper keeps the run on its confirmed deadline and the work goes on.
//! 2. The takeover: to show it without waiting out a lease, the store's
//!    clock jumps past worker-a's lease while worker-a is cut off (standing
//!    for a pause worker-a did not notice). worker-b, which reaches the
//!    store directly, adopts the job. worker-a's late `complete()` is
//!    refused as stale, which cancels the run's token: the work task stops
//!    mid-item; worker-b's record is untouched.
//!
//! `cargo run --example outage`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::keeper::{AdmitOutcome, Keeper, KeeperConfig, WriteError};
use tenure::layer::{Answer, Hook, LayerExt, Operation, Pending};
use tenure::memory::MemoryStore;
use tenure::{
    clock, Clock, LeaseStore, StatusChange, SystemClock, Takeover, TakeoverRequest, Timestamp,
    Transition,
};
use tokio::sync::watch;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(2);
/// Renewals every 400 ms: an outage is survived when it ends, plus one beat
/// to the next renewal, plus the age of the last one, within the lease.
const BEAT: Duration = Duration::from_millis(400);
const OUTAGE: Duration = Duration::from_millis(800);
const ITEMS: usize = 100;
const ITEM_TIME: Duration = Duration::from_millis(40);
const JOB: &str = "import-customers-2026-11-29";

/// The wall clock, plus a jump the example can add.
#[derive(Debug, Default)]
struct JumpableClock {
    jumped: Mutex<Duration>,
}

impl JumpableClock {
    fn jump(&self, by: Duration) {
        *self
            .jumped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += by;
    }
}

impl Clock for JumpableClock {
    fn now(&self) -> Timestamp {
        let jumped = *self
            .jumped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        clock::add(SystemClock.now(), jumped)
    }
}

/// worker-a's connection to the store, as a layer: every call fails while
/// it is cut.
#[derive(Default)]
struct Cable {
    cut: AtomicBool,
}

impl Hook for Cable {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        _: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        if self.cut.load(Ordering::SeqCst) {
            Box::pin(async {
                Err(tenure::Error::unavailable(
                    "connection to the store is down",
                ))
            })
        } else {
            call
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Prints a line stamped with the time since the example started.
fn say(started: Instant, line: impl std::fmt::Display) {
    println!("[{:5.2}s] {line}", started.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let started = Instant::now();
    let clock = Arc::new(JumpableClock::default());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let connection = Arc::new(Arc::clone(&store).layer(Cable::default()));
    let config = KeeperConfig::with_ttl(TTL)
        .renew_interval(BEAT)
        .worker_id("worker-a")
        .auto_reconcile(false);
    let keeper = Keeper::builder(connection.clone(), config).start()?;

    let request = keeper.request(JOB).scope("dataset:customers");
    let AdmitOutcome::Admitted { guard, .. } = keeper.admit(request).await? else {
        return Err("another worker holds dataset:customers".into());
    };
    say(
        started,
        format_args!(
            "worker-a admitted {JOB} with fence {}; lease {TTL:?}, renewed every {:?}",
            guard.fence(),
            BEAT
        ),
    );

    let (progress, mut items_done) = watch::channel(0usize);
    let work = guard.spawn(move |guard| async move {
        guard.mark_running().await?;
        let lost = guard.token();
        for item in 1..=ITEMS {
            guard.check().await?;
            tokio::select! {
                _ = lost.cancelled() => {
                    return Err(format!("cancelled while writing item {item}").into());
                }
                // ... write the item downstream, presenting guard.fence() ...
                _ = tokio::time::sleep(ITEM_TIME) => {}
            }
            progress.send_replace(item);
        }
        guard.complete(StatusChange::succeeded()).await?;
        Ok::<(), BoxError>(())
    });

    items_done.wait_for(|done| *done >= 10).await?;
    say(started, "worker-a has written 10 items");

    connection.hook().cut.store(true, Ordering::SeqCst);
    say(
        started,
        format_args!("the store becomes unreachable for {OUTAGE:?} (less than the lease)"),
    );
    let before_outage = *items_done.borrow();
    tokio::time::sleep(OUTAGE).await;
    connection.hook().cut.store(false, Ordering::SeqCst);
    let during_outage = *items_done.borrow() - before_outage;
    if let Some(cause) = guard.loss() {
        return Err(format!("worker-a lost its lease in a short outage ({cause})").into());
    }
    say(
        started,
        format_args!(
            "the store is back; worker-a wrote {during_outage} items meanwhile and still holds its lease"
        ),
    );
    let deadline_after_outage = guard.confirmed_deadline();
    let renewed = tokio::time::timeout(TTL, async {
        while guard.confirmed_deadline() <= deadline_after_outage {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    if renewed.await.is_err() {
        return Err("no renewal went through after the outage".into());
    }
    say(
        started,
        "the next renewal went through: the lease is confirmed again",
    );

    connection.hook().cut.store(true, Ordering::SeqCst);
    clock.jump(TTL * 2);
    say(
        started,
        "worker-a is cut off again and the store's clock jumps past its lease",
    );
    let takeover = TakeoverRequest::adopt(JOB, "worker-b", Some(TTL));
    let Takeover::Taken(taken) = store.claim_for_takeover(&takeover).await? else {
        return Err("worker-b could not take the job over".into());
    };
    say(
        started,
        format_args!(
            "worker-b adopted {JOB}: status {:?}, fence {} (worker-a still holds fence {})",
            taken.status,
            taken.fence,
            guard.fence()
        ),
    );
    connection.hook().cut.store(false, Ordering::SeqCst);

    match guard.complete(StatusChange::succeeded()).await {
        Err(WriteError::TakenOver) => say(
            started,
            "worker-a tries to mark the job succeeded: complete() is refused as stale, a peer took over",
        ),
        Err(WriteError::OwnershipLost(cause)) => say(
            started,
            format_args!(
                "worker-a's heartbeat saw the loss first ({cause}); complete() wrote nothing"
            ),
        ),
        other => {
            return Err(format!("worker-a's complete() should be refused, got {other:?}").into())
        }
    }
    // A loss found by the heartbeat or `check()` also aborts the task; one
    // found by a `complete()` made elsewhere cancels the token, which the
    // work watches while writing an item.
    let stopped_how = match work.await {
        Ok(Err(error)) => format!("stopped: {error}"),
        Err(aborted) if aborted.is_cancelled() => "was aborted".to_owned(),
        other => {
            return Err(format!("the work task should have stopped, got {other:?}").into());
        }
    };
    say(
        started,
        format_args!(
            "worker-a's work task {stopped_how} ({} items written)",
            *items_done.borrow()
        ),
    );

    let record = store.get(JOB).await?.ok_or("the job record is missing")?;
    say(
        started,
        format_args!(
            "the record is worker-b's, untouched: owner {:?}, status {:?}, fence {}",
            record.owner.as_deref().unwrap_or("none"),
            record.status,
            record.fence
        ),
    );
    let claim = record.claim().ok_or("worker-b's record has no owner")?;
    let Transition::Applied(done) = store.transition(&claim, &StatusChange::succeeded()).await?
    else {
        return Err("worker-b could not finish the job".into());
    };
    say(
        started,
        format_args!("worker-b finished the job: {:?}", done.status),
    );

    let report = keeper
        .shutdown(Instant::now() + Duration::from_secs(2))
        .await;
    say(
        started,
        format_args!("worker-a's keeper shut down; drained: {}", report.drained),
    );
    Ok(())
}

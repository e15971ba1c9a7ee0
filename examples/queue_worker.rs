//! A queue worker: claims jobs up to a concurrency limit, keeps their leases
//! alive through a keeper, runs each job in its own task, completes or fails
//! it, and sees one job's task stopped the moment its lease is lost.
//!
//! The queue holds five quick emails (one of which fails once and is retried
//! after a backoff) and one long video job, claimed last (lower priority).
//! While the video runs, the worker stalls: its claim loop stops claiming,
//! and, to show it without waiting out a lease, the store's clock jumps past
//! the lease (standing for a pause the keeper did not notice). The reaper
//! requeues the video. Whoever looks first, the video's own `check()`
//! between steps or the keeper's next renewal, is answered `Requeued`: the
//! video's task is aborted at once, before it can write anything under its
//! stale fence. The worker then resumes, claims the video again (attempt 2,
//! a greater fence) and finishes it.
//!
//! `cargo run --example queue_worker`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::keeper::{JobGuard, Keeper, KeeperConfig};
use tenure::memory::MemoryStore;
use tenure::queue::{ClaimRequest, FailAction, Job, JobQueue, JobState, NewJob};
use tenure::{clock, Clock, SystemClock, Timestamp};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;

const QUEUE: &str = "media";
const TTL: Duration = Duration::from_secs(1);
const CONCURRENCY: usize = 3;
const STEP: Duration = Duration::from_millis(100);
const EMAILS: usize = 5;
const VIDEO: &str = "video-42";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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

/// What the job tasks tell `main`.
#[derive(Debug)]
enum Event {
    Started {
        id: String,
        attempt: u32,
    },
    Settled {
        id: String,
        state: JobState,
    },
    Stopped {
        id: String,
    },
    /// The claim loop will not claim until resumed.
    Paused,
}

/// Prints a line stamped with the time since the example started.
fn say(started: Instant, line: impl std::fmt::Display) {
    println!("[{:5.2}s] {line}", started.elapsed().as_secs_f64());
}

/// One job's work: a few steps, checking the lease between them; the flaky
/// email fails its first attempt.
async fn run_job(guard: JobGuard, events: mpsc::UnboundedSender<Event>) -> Result<Job, BoxError> {
    let job = guard.job();
    let steps = job.payload["steps"].as_u64().unwrap_or(1);
    let _ = events.send(Event::Started {
        id: job.id.clone(),
        attempt: job.attempt,
    });
    for _ in 0..steps {
        guard.check().await?;
        tokio::time::sleep(STEP).await; // the side effect, presenting guard.fence()
    }
    let flaky = job.payload["flaky"].as_bool().unwrap_or(false);
    let settled = if flaky && job.attempt == 1 {
        let backoff = Duration::from_millis(300);
        guard
            .fail("smtp timeout", FailAction::Retry { backoff })
            .await?
    } else {
        guard.complete().await?
    };
    Ok(settled)
}

/// Claims jobs while permits are free and runs each in its own task, until
/// `stop`; holds off claiming while `claiming` is false.
async fn claim_loop(
    keeper: Arc<Keeper>,
    queue: Arc<dyn JobQueue>,
    mut stop: watch::Receiver<bool>,
    mut claiming: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<Event>,
    started: Instant,
) -> Result<(), BoxError> {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    loop {
        let first = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit?,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        if !*claiming.borrow_and_update() {
            let _ = events.send(Event::Paused);
            claiming.wait_for(|claiming| *claiming).await?;
        }
        let limit = 1 + permits.available_permits();
        let request = ClaimRequest::new(QUEUE, keeper.worker_id(), TTL).limit(limit);
        let guards = keeper.claim_jobs(Arc::clone(&queue), request).await?;
        if guards.is_empty() {
            drop(first);
            // Nothing visible: poll again shortly (or stop).
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
            continue;
        }
        let mut first = Some(first);
        for guard in guards {
            // Only this loop takes permits, so those counted above are there.
            let permit = match first.take() {
                Some(permit) => permit,
                None => Arc::clone(&permits).acquire_owned().await?,
            };
            let (id, attempt, fence) =
                (guard.id().to_owned(), guard.claim().attempt, guard.fence());
            say(
                started,
                format!("claimed {id} (attempt {attempt}, fence {fence})"),
            );
            let work = guard.spawn({
                let events = events.clone();
                |guard| run_job(guard, events)
            });
            let events = events.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let state = match work.await {
                    Ok(Ok(job)) => {
                        let what = match job.state {
                            JobState::Queued => "failed; requeued after its backoff",
                            _ => "completed",
                        };
                        say(started, format!("{id} (attempt {attempt}) {what}"));
                        job.state
                    }
                    Ok(Err(error)) => {
                        say(
                            started,
                            format!("{id} (attempt {attempt}) stopped: {error}"),
                        );
                        return;
                    }
                    Err(aborted) if aborted.is_cancelled() => {
                        let cause = guard.loss().map_or("unknown".to_owned(), |c| c.to_string());
                        say(
                            started,
                            format!(
                                "{id} (attempt {attempt}, fence {fence}): lease lost ({cause}); its task was stopped at once"
                            ),
                        );
                        let _ = events.send(Event::Stopped { id });
                        return;
                    }
                    Err(panicked) => {
                        say(started, format!("{id} task panicked: {panicked}"));
                        return;
                    }
                };
                let _ = events.send(Event::Settled { id, state });
            });
        }
    }
    Ok(())
}

/// Waits for the first event that matches.
async fn wait_for(
    events: &mut mpsc::UnboundedReceiver<Event>,
    wanted: impl Fn(&Event) -> bool,
) -> Result<(), BoxError> {
    loop {
        match events.recv().await {
            Some(event) if wanted(&event) => return Ok(()),
            Some(_) => {}
            None => return Err("the worker stopped early".into()),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let started = Instant::now();
    let clock = Arc::new(JumpableClock::default());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let keeper = Arc::new(
        Keeper::builder(
            store.clone(),
            KeeperConfig::with_ttl(TTL).auto_reconcile(false),
        )
        .start()?,
    );
    say(
        started,
        format!("keeper {} started, job ttl {TTL:?}", keeper.worker_id()),
    );

    let mut jobs: Vec<NewJob> = (1..=EMAILS)
        .map(|n| {
            NewJob::new(QUEUE, serde_json::json!({ "steps": 2, "flaky": n == 4 }))
                .id(format!("email-{n}"))
                .priority(1)
        })
        .collect();
    jobs.push(NewJob::new(QUEUE, serde_json::json!({ "steps": 20 })).id(VIDEO));
    store.enqueue_batch(&jobs).await?;
    say(started, format!("enqueued {} jobs", jobs.len()));

    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (stop, stop_rx) = watch::channel(false);
    let (claiming, claiming_rx) = watch::channel(true);
    let worker = tokio::spawn(claim_loop(
        Arc::clone(&keeper),
        store.clone(),
        stop_rx,
        claiming_rx,
        events_tx,
        started,
    ));

    // Wait until every email is done and the video's first attempt runs.
    let (mut emails_done, mut video_running) = (0, false);
    while emails_done < EMAILS || !video_running {
        match events.recv().await {
            Some(Event::Started { id, attempt: 1 }) if id == VIDEO => video_running = true,
            Some(Event::Settled {
                id,
                state: JobState::Completed,
            }) if id != VIDEO => emails_done += 1,
            Some(_) => {}
            None => return Err("the worker stopped early".into()),
        }
    }

    say(
        started,
        "the worker stalls: no more claims, and the store's clock moves past the video's lease",
    );
    claiming.send_replace(false);
    wait_for(&mut events, |event| matches!(event, Event::Paused)).await?;
    clock.jump(TTL * 3);
    let reaped = store.reap(Duration::ZERO).await?;
    for job in &reaped.requeued {
        say(
            started,
            format!(
                "reaper requeued {} (attempt {} of {})",
                job.id, job.attempt, job.max_attempts
            ),
        );
    }

    wait_for(
        &mut events,
        |event| matches!(event, Event::Stopped { id } if id == VIDEO),
    )
    .await?;

    // The re-run: claimed again under a greater fence, and finished.
    say(started, "the worker resumes");
    claiming.send_replace(true);
    wait_for(
        &mut events,
        |event| matches!(event, Event::Settled { id, state: JobState::Completed } if id == VIDEO),
    )
    .await?;

    stop.send_replace(true);
    worker.await??;
    let report = keeper
        .shutdown(Instant::now() + Duration::from_secs(2))
        .await;
    say(
        started,
        format!(
            "keeper shut down: drained {}, jobs stopped {:?}",
            report.drained, report.stopped_jobs
        ),
    );
    let video = store
        .get_job(VIDEO)
        .await?
        .ok_or("the video job vanished")?;
    say(
        started,
        format!(
            "{VIDEO}: {} after {} attempts, fence {}",
            video.state, video.attempt, video.fence
        ),
    );
    if !report.drained || video.state != JobState::Completed {
        return Err("the example did not finish cleanly".into());
    }
    Ok(())
}

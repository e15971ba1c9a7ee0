//! What a holder that pauses past its ttl meets, observed rather than
//! read from the docs: each side takes a lock (or claims a job) with a
//! 300 ms ttl, stops for 700 ms without renewing, and a second worker
//! moves in; then the first one comes back and renews, releases or
//! completes, and presents its token to a fence check where it has one.
//!
//! Nothing here is timed. The answers are printed as they came back, so
//! the "Peers" section of the benchmark log
//! (benchmarks/archive/2026-11-29_to_2026-12-02.md) can quote them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::{
    BoxDynError, Data, TaskSink, WorkerBuilder, WorkerBuilderExt, WorkerContext,
};
use apalis_postgres::{Config, PgPool, PostgresStorage};
use sqlx::postgres::{PgAdvisoryLock, PgConnection};
use sqlx::{Connection, Either};
use tenure::queue::{ClaimRequest, JobRenewal, JobSettle, NewJob};
use tenure::{
    Admission, AdmitRequest, AdmitStrategy, FenceCheck, Renewal, StatusChange, Store, Transition,
};

use crate::Result;

const TTL: Duration = Duration::from_millis(300);
const PAUSE: Duration = Duration::from_millis(700);

/// One row: what each party saw.
pub struct Row {
    pub side: String,
    /// What a second worker got once the holder's ttl had passed.
    pub second: String,
    /// The holder's renewal (or extension) after its pause.
    pub renewal: String,
    /// The holder's release or completion after its pause.
    pub release: String,
    /// The holder's token at a fence check after the second worker's.
    pub fenced_write: String,
}

/// tenure's lease as a lock: the second worker admits with
/// `AdmitStrategy::Interrupt` (the default `Reject` waits for a takeover).
pub async fn tenure_lock(side: &str, store: &Arc<dyn Store>, key: &str) -> Result<Row> {
    let first = AdmitRequest::new(tenure::generate_id(), "paused")
        .scope(key)
        .ttl(TTL);
    let Admission::Admitted { record, .. } = store.admit(&first).await? else {
        return Err("the first admission of a free scope conflicted".into());
    };
    let claim = record.claim().ok_or("admitted without a claim")?;
    tokio::time::sleep(PAUSE).await;
    let second = AdmitRequest::new(tenure::generate_id(), "second")
        .scope(key)
        .ttl(Duration::from_secs(10))
        .strategy(AdmitStrategy::Interrupt)
        .grace(Duration::ZERO);
    let (second, second_claim) = match store.admit(&second).await? {
        Admission::Admitted {
            record,
            interrupted,
        } => (
            format!(
                "admitted (fence {} > {}), the holder's record `Interrupted` ({} interrupted)",
                record.fence,
                claim.fence,
                interrupted.len()
            ),
            record.claim().ok_or("admitted without a claim")?,
        ),
        other => return Err(format!("the second admission answered {other:?}").into()),
    };
    let resource = format!("{key}-resource");
    second_writes(store, &resource, second_claim.fence).await?;
    let renewal = match store.renew(&claim, TTL).await? {
        Renewal::Lost(reason) => format!("`Lost({reason:?})`"),
        other => format!("{other:?}"),
    };
    let release = match store.transition(&claim, &StatusChange::succeeded()).await? {
        Transition::Rejected(why) => format!("`Rejected({why:?})`"),
        other => format!("{other:?}"),
    };
    let fenced_write = fence_answer(store.check_fence(&resource, claim.fence).await?);
    store
        .transition(&second_claim, &StatusChange::succeeded())
        .await?;
    Ok(Row {
        side: side.to_owned(),
        second,
        renewal,
        release,
        fenced_write,
    })
}

/// rslock: `lock` with a 300 ms ttl, then `extend` and `release` after the pause.
pub async fn redlock(manager: &rslock::LockManager, key: &str) -> Result<Row> {
    let mut manager = manager.clone();
    manager.set_retry(1, Duration::from_millis(1));
    let paused = manager.lock(key.as_bytes(), TTL).await?;
    tokio::time::sleep(PAUSE).await;
    let second_lock = manager
        .lock(key.as_bytes(), Duration::from_secs(10))
        .await?;
    let renewal = match manager.extend(&paused, TTL).await {
        Ok(_) => "extended".to_owned(),
        Err(error) => format!("`Err({error:?})`, the error a busy lock answers too"),
    };
    paused.release().await;
    let kept =
        manager.query_redis_for_key_value(key.as_bytes()).await? == Some(second_lock.val.clone());
    let release = format!(
        "`()` (best effort, answers nothing); the second holder's key {}",
        if kept { "kept" } else { "deleted" }
    );
    second_lock.release().await;
    Ok(Row {
        side: "rslock (Redis)".to_owned(),
        second: "acquired; `Lock` carries a random value and a validity time, no token".to_owned(),
        renewal,
        release,
        fenced_write: "nothing to present: no token".to_owned(),
    })
}

/// PgAdvisoryLock: there is no ttl; the pause is followed by the end of the
/// holder's session (its backend terminated), the way a lost connection
/// ends it.
pub async fn advisory(url: &str, key: &str) -> Result<Row> {
    let lock = PgAdvisoryLock::new(key);
    let mut holder_conn = PgConnection::connect(url).await?;
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut holder_conn)
        .await?;
    let Either::Left(held) = lock.try_acquire(holder_conn).await? else {
        return Err("a free advisory lock was refused".into());
    };
    tokio::time::sleep(PAUSE).await;
    let mut second_conn = PgConnection::connect(url).await?;
    let during_pause = match lock.try_acquire(&mut second_conn).await? {
        Either::Left(_) => "acquired",
        Either::Right(_) => "refused: no ttl, the paused holder keeps it",
    };
    let mut third = PgConnection::connect(url).await?;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(holder_pid)
        .execute(&mut third)
        .await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_session = match lock.try_acquire(&mut second_conn).await? {
        Either::Left(guard) => {
            guard.release_now().await?;
            "acquired"
        }
        Either::Right(_) => "refused",
    };
    let release = match held.release_now().await {
        Ok(_) => "`Ok`".to_owned(),
        Err(error) => format!("`Err` of the connection (`{}`)", short(&error.to_string())),
    };
    Ok(Row {
        side: "PgAdvisoryLock (PostgreSQL)".to_owned(),
        second: format!(
            "after the pause: {during_pause}; once the holder's session ended: {after_session}"
        ),
        renewal: "no ttl, nothing to renew".to_owned(),
        release,
        fenced_write: "nothing to present: no token".to_owned(),
    })
}

/// The second worker's fenced write, which must pass.
async fn second_writes(store: &Arc<dyn Store>, resource: &str, fence: u64) -> Result<()> {
    match store.check_fence(resource, fence).await? {
        FenceCheck::Accepted => Ok(()),
        other => Err(format!("the new holder's fence was refused: {other:?}").into()),
    }
}

/// A fence check's answer, as the table prints it.
fn fence_answer(check: FenceCheck) -> String {
    match check {
        FenceCheck::Stale(stale) => format!(
            "refused: `Stale {{ presented: {}, highest_seen: {} }}`",
            stale.presented, stale.highest_seen
        ),
        other => format!("{other:?}"),
    }
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

/// tenure's queue: a claim with a 300 ms ttl, paused; the reaper requeues
/// the job and a second worker claims it.
pub async fn tenure_job(store: &Arc<dyn Store>, queue: &str) -> Result<Row> {
    store
        .enqueue(&NewJob::new(queue, serde_json::json!(0)))
        .await?;
    let first = store
        .claim(&ClaimRequest::new(queue, "paused", TTL))
        .await?;
    let claim = first.first().ok_or("no job to claim")?.claim.clone();
    tokio::time::sleep(PAUSE).await;
    let reaped = store.reap(Duration::ZERO).await?;
    let second = store
        .claim(&ClaimRequest::new(queue, "second", Duration::from_secs(10)))
        .await?;
    let second_claim = second
        .first()
        .ok_or("nothing to claim after the reap")?
        .claim
        .clone();
    let renewal = match store.renew_job(&claim, TTL).await? {
        JobRenewal::Lost(loss) => format!("`Lost({loss:?})`"),
        other => format!("{other:?}"),
    };
    let release = match store.complete(&claim).await? {
        JobSettle::Rejected(loss) => format!("`Rejected({loss:?})`"),
        _ => "settled".to_owned(),
    };
    let resource = format!("{queue}-resource");
    second_writes(store, &resource, second_claim.fence).await?;
    let fenced_write = fence_answer(store.check_fence(&resource, claim.fence).await?);
    store.complete(&second_claim).await?;
    Ok(Row {
        side: "tenure queue (PostgreSQL)".to_owned(),
        second: format!(
            "reap requeued {}; claimed with fence {} > {}",
            reaped.requeued.len(),
            second_claim.fence,
            claim.fence
        ),
        renewal,
        release,
        fenced_write,
    })
}

/// How often the apalis job ran, and whether its first run started.
struct Runs {
    count: AtomicU32,
    started: tokio::sync::Notify,
}

async fn job(_job: u64, runs: Data<Arc<Runs>>) -> std::result::Result<(), BoxDynError> {
    if runs.count.fetch_add(1, Ordering::SeqCst) == 0 {
        runs.started.notify_one();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Runs `future` while `running` is true; while it is false the future is
/// not polled at all, as if its process were stopped (`SIGSTOP`).
async fn pausable<F: std::future::Future>(
    future: F,
    mut running: tokio::sync::watch::Receiver<bool>,
) -> F::Output {
    tokio::pin!(future);
    loop {
        if *running.borrow_and_update() {
            tokio::select! {
                output = &mut future => return output,
                _ = running.changed() => {}
            }
        } else if running.changed().await.is_err() {
            return future.await;
        }
    }
}

/// apalis: two workers whose orphan timeout is 1 s (`heartbeat_interval`
/// 1 s × `missed_heartbeats` 1; the storage counts it in whole seconds, so
/// a shorter one would be 0); the one running the job is frozen for 3 s in
/// the middle of it (its future not polled: no heartbeat, no progress),
/// then resumes and finishes the job.
pub async fn apalis_job(pool: &PgPool, queue: &str) -> Result<Row> {
    let config = Config::default()
        .queue(queue)
        .batch_size(1)
        .heartbeat_interval(Duration::from_secs(1))
        .missed_heartbeats(1);
    let mut storage = PostgresStorage::<u64>::new(pool).with_config(config);
    storage
        .push(0)
        .await
        .map_err(|error| format!("apalis push: {error:?}"))?;
    let runs = Arc::new(Runs {
        count: AtomicU32::new(0),
        started: tokio::sync::Notify::new(),
    });
    let build = |name: &str| {
        let context = WorkerContext::new(&format!("{queue}-{name}"));
        let worker = WorkerBuilder::new(&context)
            .backend(storage.clone())
            .data(Arc::clone(&runs))
            .concurrency(1)
            .build(job);
        (context, worker)
    };
    let (paused_context, paused_worker) = build("paused");
    let (running, gate) = tokio::sync::watch::channel(true);
    let paused_run = tokio::spawn(pausable(paused_worker.run(), gate));
    runs.started.notified().await;
    running.send(false)?;
    let (second_context, second_worker) = build("second");
    let second_run = tokio::spawn(second_worker.run());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during_pause = runs.count.load(Ordering::SeqCst);
    running.send(true)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for context in [&paused_context, &second_context] {
        context.stop()?;
    }
    paused_run.await??;
    second_run.await??;
    let total = runs.count.load(Ordering::SeqCst);
    let (status, attempts, lock_by): (String, i32, Option<String>) =
        sqlx::query_as("SELECT status, attempts, lock_by FROM apalis.jobs WHERE job_type = $1")
            .bind(queue)
            .fetch_one(pool)
            .await?;
    Ok(Row {
        side: "apalis (PostgreSQL)".to_owned(),
        second: if during_pause >= 2 {
            format!("re-enqueued after the orphan timeout and run by the second worker while the first was still frozen in it ({total} runs in all)")
        } else {
            format!("not re-enqueued while the first worker was frozen ({total} runs in all)")
        },
        renewal: "no per-job lease; the frozen worker's heartbeat resumed, no error".to_owned(),
        release: format!(
            "its acknowledgement is `UPDATE … WHERE lock_by = <its name>`; the job ended `{status}`, attempts {attempts}, locked by `{}`, and no error reached the resumed worker",
            lock_by.unwrap_or_default().trim_start_matches(&format!("{queue}-"))
        ),
        fenced_write: "nothing to present: no token (the task id is the same on every attempt)".to_owned(),
    })
}

//! One error story: every error a keeper user meets converts into
//! `tenure::Error` with `?`, keeps its class, and can be recovered as the
//! specific type for the callers that must match on it.

use std::sync::Arc;
use std::time::Duration;

use tenure::memory::MemoryStore;
use tenure::queue::{ClaimRequest, NewJob};
use tenure::{
    AdmitOutcome, Error, ErrorKind, FenceCheck, JobQueue, JobWriteError, Keeper, KeeperConfig,
    KeeperError, LeaseRecord, LeaseStore, OwnershipLost, RunGuard, StaleFence, StatusChange,
    WriteError,
};

const TTL: Duration = Duration::from_secs(30);

fn keeper(store: Arc<MemoryStore>) -> tenure::Result<Keeper> {
    let store: Arc<dyn LeaseStore> = store;
    Keeper::builder(store, KeeperConfig::with_ttl(TTL)).start()
}

/// Admits `id`, or answers why not, all through `?` into `tenure::Result`.
async fn admit(keeper: &Keeper, id: &str) -> tenure::Result<RunGuard> {
    match keeper.admit(keeper.request(id)).await? {
        AdmitOutcome::Admitted { guard, .. } => Ok(guard),
        other => panic!("{id} was not admitted: {other:?}"),
    }
}

/// A run written the way the README shows it: checks, then completes.
async fn finish(guard: &RunGuard) -> tenure::Result<LeaseRecord> {
    guard.check().await?;
    Ok(guard.complete(StatusChange::succeeded()).await?)
}

#[tokio::test]
async fn a_run_that_goes_well_answers_through_tenure_result() -> tenure::Result<()> {
    let keeper = keeper(Arc::new(MemoryStore::new()))?;
    let guard = admit(&keeper, "report-1").await?;
    let record = finish(&guard).await?;
    assert_eq!(record.status, tenure::Status::Succeeded);
    keeper.shutdown_within(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn a_cancelled_run_is_ownership_lost_with_its_cause() -> tenure::Result<()> {
    let keeper = keeper(Arc::new(MemoryStore::new()))?;
    let guard = admit(&keeper, "report-2").await?;
    keeper.cancel("report-2").await;

    let error = finish(&guard).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OwnershipLost);
    assert!(!error.is_retryable());
    assert!(!error.is_outcome_unknown());
    let lost = error
        .downcast_source::<OwnershipLost>()
        .expect("the specific error is the source");
    assert_eq!(lost.id, "report-2");
    assert_eq!(lost.cause, tenure::LossCause::Cancelled);
    keeper.shutdown_within(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn a_second_completion_is_invalid_input_and_keeps_its_write_error() -> tenure::Result<()> {
    let keeper = keeper(Arc::new(MemoryStore::new()))?;
    let guard = admit(&keeper, "report-3").await?;
    finish(&guard).await?;

    let error: Error = guard
        .complete(StatusChange::succeeded())
        .await
        .unwrap_err()
        .into();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(matches!(
        error.downcast_source::<WriteError>(),
        Some(WriteError::AlreadyCompleted)
    ));
    keeper.shutdown_within(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn a_keeper_that_shut_down_is_stopped() -> tenure::Result<()> {
    let keeper = keeper(Arc::new(MemoryStore::new()))?;
    keeper.shutdown_within(Duration::from_secs(1)).await;

    let error = admit(&keeper, "report-4").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Stopped);
    assert!(matches!(
        error.downcast_source::<KeeperError>(),
        Some(KeeperError::ShuttingDown)
    ));
    Ok(())
}

#[tokio::test]
async fn a_store_error_passes_through_unchanged() -> tenure::Result<()> {
    let keeper = keeper(Arc::new(MemoryStore::new()))?;
    let error = admit(&keeper, "").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert_eq!(error.field(), Some("id"));
    keeper.shutdown_within(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn a_job_settled_twice_is_invalid_input() -> tenure::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let keeper = keeper(store.clone())?;
    store
        .enqueue(&NewJob::new("mail", serde_json::json!({"to": "a"})))
        .await?;
    let queue: Arc<dyn JobQueue> = store;
    let jobs = keeper
        .claim_jobs(queue, ClaimRequest::new("mail", "worker-a", TTL))
        .await?;
    let job = jobs.first().expect("the enqueued job is claimed");
    job.complete().await?;

    let error: Error = job.complete().await.unwrap_err().into();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(matches!(
        error.downcast_source::<JobWriteError>(),
        Some(JobWriteError::AlreadySettled)
    ));
    keeper.shutdown_within(Duration::from_secs(1)).await;
    Ok(())
}

#[test]
fn a_stale_fence_is_ownership_lost() {
    fn write(check: FenceCheck) -> tenure::Result<()> {
        check.into_result()?;
        Ok(())
    }
    let stale = StaleFence {
        presented: 3,
        highest_seen: 7,
    };
    let error = write(FenceCheck::Stale(stale)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OwnershipLost);
    assert_eq!(error.downcast_source::<StaleFence>(), Some(&stale));
    assert!(write(FenceCheck::Accepted).is_ok());
}

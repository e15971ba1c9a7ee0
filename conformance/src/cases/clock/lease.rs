//! The lease operations on a clock offset from the process's.

use std::time::Duration;

use tenure_lease_core::{
    Admission, AdmitRequest, ExpiredQuery, LeaseStore, NotTakenReason, Takeover, TakeoverRequest,
};

use super::{ensure_near, expected_now, plus, MARGIN, OFFSETS, TTL};
use crate::ensure;
use crate::harness::{CaseResult, Ctx, Failure};

/// A lease store on a clock an hour ahead of, then behind, the process's:
/// `now` reads it, an admitted lease ends ten minutes after it, the orphan
/// scan does not list that lease and a takeover refuses it with the
/// retry-after its own clock gives. (A store judging expiry by the process
/// clock lists and takes the lease on the clock behind; one stamping by the
/// process clock and judging by its own, on the clock ahead.)
pub async fn clock_lease_decisions_follow_the_store_clock<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    for (tag, offset) in OFFSETS {
        let Some(store) = ctx.offset_store(offset).await? else {
            return Ok(());
        };
        let what = |step: &str| format!("{step}, the store's clock {tag} of the process's");
        ensure_near(store.now().await?, expected_now(offset), &what("now"))?;
        let id = format!("clock-lease-{tag}");
        let expected = expected_now(offset);
        let record = match store
            .admit(&AdmitRequest::new(&id, "worker").ttl(TTL))
            .await?
        {
            Admission::Admitted { record, .. } => record,
            other => return Err(Failure(format!("{}: got {other:?}", what("admit")))),
        };
        ensure_near(
            record.created_at,
            expected,
            &what("the admitted record's created_at"),
        )?;
        let Some(expires_at) = record.lease_expires_at else {
            return Err(Failure(format!(
                "{}: no lease in {record:?}",
                what("admit")
            )));
        };
        ensure_near(
            expires_at,
            plus(expected, TTL),
            &what("the admitted lease's end"),
        )?;
        let scan = store
            .list_expired(&ExpiredQuery::new(Duration::ZERO))
            .await?;
        ensure!(
            scan.records.iter().all(|listed| listed.id != id),
            "{}: a lease with ten minutes left is listed as expired",
            what("list_expired")
        );
        let takeover = store
            .claim_for_takeover(&TakeoverRequest::fail(&id, "claimer", "orphaned"))
            .await?;
        let Takeover::NotTaken(NotTakenReason::LeaseValid { retry_after }) = takeover else {
            return Err(Failure(format!(
                "{}: a lease with ten minutes left answered {takeover:?}, not LeaseValid",
                what("claim_for_takeover")
            )));
        };
        let least = TTL.saturating_sub(MARGIN.to_std().unwrap_or_default());
        ensure!(
            least <= retry_after && retry_after <= TTL,
            "{}: retry_after {retry_after:?} should be about ten minutes",
            what("claim_for_takeover")
        );
    }
    Ok(())
}

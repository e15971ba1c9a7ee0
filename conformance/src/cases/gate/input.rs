//! Bad input at a gate: refused with `InvalidInput` naming the field, and
//! nothing changed.

use std::time::Duration;

use tenure_lease_core::backend::validate::{MAX_GATE_FENCE, MAX_NAME_BYTES, MAX_RETENTION};
use tenure_lease_core::{FenceStore, LeaseStore};

use super::{accepted, refused};
use crate::cases::util::expect_invalid;
use crate::ensure_eq;
use crate::harness::{CaseResult, Ctx};

/// Empty, oversized and control-character resources, fence 0, a fence
/// beyond every store's, and a retention beyond a century: each refused,
/// the gates as they were; the limits themselves are accepted.
pub async fn gate_invalid_input_is_rejected_and_changes_nothing<S: LeaseStore + FenceStore>(
    ctx: Ctx<S>,
) -> CaseResult {
    accepted(&ctx, "kept", 5).await?;
    let long = "r".repeat(MAX_NAME_BYTES + 1);
    for (resource, what) in [
        ("", "an empty resource"),
        (long.as_str(), "an oversized resource"),
        ("a\nb", "a resource with a control character"),
    ] {
        expect_invalid(ctx.store.check_fence(resource, 9).await, "resource", what)?;
        expect_invalid(ctx.store.highest_fence(resource).await, "resource", what)?;
    }
    expect_invalid(ctx.store.check_fence("kept", 0).await, "fence", "fence 0")?;
    expect_invalid(
        ctx.store.check_fence("kept", MAX_GATE_FENCE + 1).await,
        "fence",
        "a fence beyond every store's",
    )?;
    expect_invalid(
        ctx.store.check_fence("kept", u64::MAX).await,
        "fence",
        "u64::MAX",
    )?;
    expect_invalid(
        ctx.store
            .purge_fences(MAX_RETENTION + Duration::from_secs(1))
            .await,
        "unused_for",
        "a retention beyond a century",
    )?;
    expect_invalid(
        ctx.store.purge_fences(Duration::MAX).await,
        "unused_for",
        "Duration::MAX",
    )?;
    ensure_eq!(
        ctx.store.highest_fence("kept").await?,
        Some(5),
        "bad input changed no gate"
    );
    refused(&ctx, "kept", 4, 5).await?;

    accepted(&ctx, &"r".repeat(MAX_NAME_BYTES), 1).await?;
    accepted(&ctx, "kept", MAX_GATE_FENCE).await?;
    refused(&ctx, "kept", MAX_GATE_FENCE - 1, MAX_GATE_FENCE).await?;
    ensure_eq!(
        ctx.store.purge_fences(MAX_RETENTION).await?,
        0,
        "the longest retention is accepted and purges nothing recent"
    );
    Ok(())
}

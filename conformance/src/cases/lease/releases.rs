//! Conformance cases: release notices
//! ([`LeaseStore::releases`]) and the waiting admission built on them
//! ([`tenure_lease_core::wait`]).
//!
//! Notices are hints (one may be lost, one may name a scope held again),
//! so a store that announces none passes by answering `None`. A store that
//! answers a receiver must deliver, on a healthy connection, a notice for
//! every scope a release frees, whatever the scope's name, and a waiter on
//! it must be woken by the release rather than by its poll.

use std::sync::Arc;
use std::time::Duration;

use tenure_lease_core::layer::{Answer, Hook, Operation, Pending};
use tenure_lease_core::limits::{MAX_NAME_BYTES, MAX_SCOPES};
use tenure_lease_core::release::{ReleaseNotice, Releases};
use tenure_lease_core::wait::Waiter;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, LayerExt, LeaseStore, StatusChange, TakeoverRequest,
};
use tokio::sync::Notify;

use crate::cases::util::{
    admit, apply_transition, claim_of, expire, take_over, LONG_TTL, SHORT_TTL,
};
use crate::harness::{CaseResult, Ctx, Failure};

/// How long a notice may take to arrive on a healthy store: hundreds of
/// times what delivery takes on a loaded machine, so only a notice never
/// sent runs out of it.
const NOTICE_WAIT: Duration = Duration::from_secs(5);

/// Why a case is skipped on a store that announces no releases.
const NO_NOTICES: &str = "the store announces no releases (`releases` answers None); waiters poll";

/// Scopes whose names a notice must carry intact: two differing only in
/// case, quotes and backslashes (JSON and Lua strings), a separator,
/// non-ASCII, and two of the longest length sharing all but their last
/// byte.
fn tricky_scopes() -> Vec<String> {
    let longest = "s".repeat(MAX_NAME_BYTES - 1);
    vec![
        "plain".to_owned(),
        "PLAIN".to_owned(),
        "quote\"back\\slash".to_owned(),
        "a:b/c {d} %".to_owned(),
        "ünïcödé ☃".to_owned(),
        format!("{longest}s"),
        format!("{longest}t"),
    ]
}

/// Reads `releases` until every one of `scopes` was named (other notices
/// are allowed), failing after [`NOTICE_WAIT`].
async fn expect_freed(
    releases: &mut Releases,
    scopes: &[String],
    after: &str,
) -> Result<(), Failure> {
    let mut unseen: Vec<&String> = scopes.iter().collect();
    let heard = tokio::time::timeout(NOTICE_WAIT, async {
        while !unseen.is_empty() {
            if let ReleaseNotice::Freed(scope) = releases.next().await {
                unseen.retain(|unseen| unseen.as_str() != &*scope);
            }
        }
    })
    .await;
    match heard {
        Ok(()) => Ok(()),
        Err(_) => Err(Failure(format!(
            "after {after}, no notice named {unseen:?} within {NOTICE_WAIT:?}"
        ))),
    }
}

/// Admits `"lapses"` on `scopes` with a short lease and lets it expire.
async fn lapsed_holder<S: LeaseStore>(ctx: &Ctx<S>, scopes: &[String]) -> Result<(), Failure> {
    let record = admit(
        ctx,
        AdmitRequest::new("lapses", "worker-a")
            .scopes(scopes.iter().cloned())
            .ttl(SHORT_TTL),
    )
    .await?;
    expire(ctx, &record, Duration::ZERO).await
}

/// A lease on tricky scopes finishes: a receiver subscribed before hears
/// every scope freed.
pub async fn releases_name_every_scope_a_finished_lease_frees<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(mut releases) = ctx.store.releases().await? else {
        return ctx.skip(NO_NOTICES);
    };
    let scopes = tricky_scopes();
    let record = admit(
        &ctx,
        AdmitRequest::new("finishes", "worker-a")
            .scopes(scopes.iter().cloned())
            .ttl(LONG_TTL),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&record)?, &StatusChange::succeeded()).await?;
    expect_freed(&mut releases, &scopes, "a transition to succeeded").await
}

/// A lease holding the most scopes a request may name finishes: every
/// one of them is announced, none dropped or cut short by the size of one
/// release.
pub async fn releases_name_every_scope_of_a_lease_with_the_most_scopes<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(mut releases) = ctx.store.releases().await? else {
        return ctx.skip(NO_NOTICES);
    };
    let scopes: Vec<String> = (0..MAX_SCOPES)
        .map(|n| format!("{n:0>MAX_NAME_BYTES$}"))
        .collect();
    let record = admit(
        &ctx,
        AdmitRequest::new("holds-most", "worker-a")
            .scopes(scopes.iter().cloned())
            .ttl(LONG_TTL),
    )
    .await?;
    apply_transition(&ctx, &claim_of(&record)?, &StatusChange::failed("done")).await?;
    expect_freed(
        &mut releases,
        &scopes,
        "a transition of a lease with the most scopes",
    )
    .await
}

/// Holders of counted scopes finish, one in a slot above 0: each notice
/// names the scope, never the key its slot is held under, the longest
/// scope name included.
pub async fn releases_name_the_counted_scope_a_slot_frees<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(mut releases) = ctx.store.releases().await? else {
        return ctx.skip(NO_NOTICES);
    };
    let scopes = tricky_scopes();
    let counted = |id: &str| {
        scopes.iter().fold(
            AdmitRequest::new(id, "worker-a").ttl(LONG_TTL),
            |request, scope| request.counted_scope(scope.as_str(), 3),
        )
    };
    admit(&ctx, counted("slot-0")).await?;
    let second = admit(&ctx, counted("slot-1")).await?;
    if second.slots.values().any(|&slot| slot != 1) {
        return Err(Failure(format!("expected slot 1 everywhere: {second:?}")));
    }
    apply_transition(&ctx, &claim_of(&second)?, &StatusChange::succeeded()).await?;
    expect_freed(&mut releases, &scopes, "the end of a holder of slot 1").await
}

/// A lapsed lease is taken over and failed: its scopes are freed, and
/// announced.
pub async fn releases_name_the_scopes_a_failing_takeover_frees<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(mut releases) = ctx.store.releases().await? else {
        return ctx.skip(NO_NOTICES);
    };
    let scopes = vec!["taken \"over\"".to_owned(), "other".to_owned()];
    lapsed_holder(&ctx, &scopes).await?;
    take_over(&ctx, &TakeoverRequest::fail("lapses", "reaper", "lapsed")).await?;
    expect_freed(&mut releases, &scopes, "a failing takeover").await
}

/// A lapsed holder is interrupted by another worker's admission, which
/// takes its scope at once: the release is announced all the same (a hint
/// that the scope changed hands).
pub async fn releases_name_the_scopes_an_interrupting_admission_frees<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    let Some(mut releases) = ctx.store.releases().await? else {
        return ctx.skip(NO_NOTICES);
    };
    let scopes = vec!["interrupted 'here'".to_owned()];
    lapsed_holder(&ctx, &scopes).await?;
    admit(
        &ctx,
        AdmitRequest::new("takes", "worker-b")
            .scopes(scopes.iter().cloned())
            .ttl(LONG_TTL)
            .strategy(AdmitStrategy::Interrupt),
    )
    .await?;
    expect_freed(&mut releases, &scopes, "an interrupting admission").await
}

/// A hook that signals each admission answered `Conflict`.
struct ConflictSignal(Arc<Notify>);

impl Hook for ConflictSignal {
    fn call<'a, T: Answer + 'a>(
        &'a self,
        operation: Operation<'a>,
        call: Pending<'a, T>,
    ) -> Pending<'a, T> {
        if operation.name != "admit" {
            return call;
        }
        Box::pin(async move {
            let answer = call.await?;
            if answer.label() == "conflict" {
                self.0.notify_one();
            }
            Ok(answer)
        })
    }
}

/// A waiter that never polls (its interval and its deadline are longer
/// than the case) is refused by a holder, which then finishes: the waiter
/// is admitted within [`NOTICE_WAIT`], so a notice woke it.
pub async fn a_waiter_is_admitted_when_the_holder_finishes<S: LeaseStore + 'static>(
    ctx: Ctx<S>,
) -> CaseResult {
    if ctx.store.releases().await?.is_none() {
        return ctx.skip(NO_NOTICES);
    }
    let scope = "waited for";
    let holder = admit(
        &ctx,
        AdmitRequest::new("holder", "worker-a")
            .scope(scope)
            .ttl(LONG_TTL),
    )
    .await?;
    let refused = Arc::new(Notify::new());
    let waiter = Arc::new(
        Waiter::new(Arc::clone(&ctx.store).layer(ConflictSignal(Arc::clone(&refused))))
            .poll(LONG_TTL),
    );
    let mut waiting = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        async move {
            let request = AdmitRequest::new("waiter", "worker-b")
                .scope(scope)
                .ttl(LONG_TTL);
            waiter.admit(&request, LONG_TTL).await
        }
    });
    refused.notified().await;
    apply_transition(&ctx, &claim_of(&holder)?, &StatusChange::succeeded()).await?;
    let Ok(answer) = tokio::time::timeout(NOTICE_WAIT, &mut waiting).await else {
        waiting.abort();
        return Err(Failure(format!(
            "the holder finished but the waiter was not admitted within {NOTICE_WAIT:?}: \
             no notice woke it"
        )));
    };
    let answer = answer.map_err(|error| Failure(format!("the waiter panicked: {error}")))??;
    match answer {
        Admission::Admitted { record, .. } => {
            crate::ensure_eq!(record.id, "waiter", "the waiter's record");
            Ok(())
        }
        other => Err(Failure(format!(
            "the holder finished but the waiter was refused: {other:?}"
        ))),
    }
}

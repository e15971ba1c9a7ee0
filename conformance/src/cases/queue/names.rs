//! Names: every identifier of the queue (job ids, queue names, capabilities,
//! worker ids) is kept verbatim, and two different names are never one.

use std::collections::BTreeSet;

use serde_json::json;
use tenure_lease_core::backend::validate::MAX_NAME_BYTES;
use tenure_lease_core::queue::{ClaimRequest, JobState, NewJob, QueueCounts};
use tenure_lease_core::JobQueue;

use super::{get_job, ids, settled};
use crate::cases::util::LONG_TTL;
use crate::harness::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

/// Names that break naive key, pattern, path or query schemes: pairs
/// differing only in case, in a trailing space or in Unicode normalisation,
/// names that are prefixes of others or built to collide when joined with a
/// separator, glob and `LIKE` characters, quotes, SQL, backslashes, hash
/// tags, non-ASCII text.
const TRICKY: &[&str] = &[
    "a:b",
    "a",
    "a:",
    "a/b",
    "x{y}",
    "{x}",
    "%",
    "_",
    "a_c",
    "abc",
    "s*",
    "q?",
    "[ab]",
    "it's",
    "say \"hi\"",
    "x'; DROP TABLE jobs; --",
    "back\\slash",
    "back\\\\slash",
    "ключ ünïcödé 🦀",
    "with space",
    "trailing ",
    "trailing",
    "Case",
    "case",
    "CASE",
    "caf\u{e9}",
    "cafe\u{301}",
];

/// The names of the case: [`TRICKY`], and names exactly at the length
/// limit: two sharing all but their last byte, and one of two-byte
/// characters.
pub(crate) fn names() -> Vec<String> {
    let long = "n".repeat(MAX_NAME_BYTES - 1);
    TRICKY
        .iter()
        .map(|&name| name.to_owned())
        .chain([
            format!("{long}1"),
            format!("{long}2"),
            "\u{e9}".repeat(MAX_NAME_BYTES / 2),
        ])
        .collect()
}

/// A worker id for `name`: the name itself, its whitespace replaced (no
/// worker id holds any).
fn worker_for(name: &str) -> String {
    name.replace(char::is_whitespace, "-")
}

/// Each tricky name (and each at the length limit) serves as a job id, the
/// job's queue and the one capability it requires, and a worker id: every
/// job reads back verbatim; a claim from a queue finds exactly its own job,
/// and only with exactly its capability (every other name, those differing
/// only in case, in a trailing space or in normalisation among them, is not
/// it); the claim's owner reads back verbatim; each queue lists its own job
/// alone, before and after it completes, and is counted apart from every
/// other.
pub async fn queue_tricky_names_never_collide<S: JobQueue + 'static>(ctx: Ctx<S>) -> CaseResult {
    let names = names();
    for name in &names {
        let job = NewJob::new(name.clone(), json!({ "name": name }))
            .id(name.clone())
            .require(name.clone());
        let stored = ctx.store.enqueue(&job).await?;
        ensure_eq!(
            (&stored.id, &stored.queue),
            (name, name),
            "enqueue answers the job's id and queue verbatim"
        );
        ensure_eq!(
            stored.required_capabilities,
            BTreeSet::from([name.clone()]),
            "enqueue answers the requirement verbatim"
        );
    }
    let each_once = |state: JobState| {
        let mut sorted = names.clone();
        sorted.sort();
        sorted
            .into_iter()
            .map(|name| {
                let mut counts = QueueCounts::new(name);
                counts.add(state, 1);
                counts
            })
            .collect::<Vec<_>>()
    };
    ensure_eq!(
        ctx.store.count_jobs().await?,
        each_once(JobState::Queued),
        "count_jobs counts each queue's one queued job apart, in name order"
    );
    for name in &names {
        let stored = get_job(&ctx, name).await?;
        ensure_eq!(
            (&stored.id, &stored.queue, &stored.payload),
            (name, name, &json!({ "name": name })),
            "get_job reads job {name:?} verbatim"
        );
        let listed = ctx.store.list_jobs(name, None, 100).await?;
        ensure_eq!(
            ids(&listed),
            [name.as_str()],
            "queue {name:?} lists its own job alone"
        );
    }
    for name in &names {
        let worker = worker_for(name);
        let others: BTreeSet<String> = names
            .iter()
            .filter(|other| *other != name)
            .cloned()
            .collect();
        let mut request = ClaimRequest::new(name.clone(), worker.clone(), LONG_TTL);
        request.capabilities = others;
        request.limit = names.len();
        let claimed = ctx.store.claim(&request).await?;
        ensure!(
            claimed.is_empty(),
            "a worker with every capability but {name:?} claimed {:?} from queue {name:?}",
            ids(claimed.iter().map(|each| &each.job))
        );
        request.capabilities = BTreeSet::from([name.clone()]);
        let claimed = ctx.store.claim(&request).await?;
        ensure_eq!(
            ids(claimed.iter().map(|each| &each.job)),
            [name.as_str()],
            "a worker with capability {name:?} claims exactly job {name:?} from queue {name:?}"
        );
        let held = get_job(&ctx, name).await?;
        ensure_eq!(
            held.owner.as_deref(),
            Some(worker.as_str()),
            "the claim's owner reads back verbatim"
        );
        let claim = claimed
            .into_iter()
            .next()
            .map(|each| each.claim)
            .ok_or_else(|| crate::harness::Failure("no claim".to_owned()))?;
        ensure_eq!(
            claim.owner,
            worker,
            "the claim carries the worker id verbatim"
        );
        let done = settled(&ctx, ctx.store.complete(&claim).await?, "complete").await?;
        ensure_eq!(done.state, JobState::Completed, "job {name:?} completed");
    }
    for name in &names {
        let listed = ctx
            .store
            .list_jobs(name, Some(JobState::Completed), 100)
            .await?;
        ensure_eq!(
            ids(&listed),
            [name.as_str()],
            "queue {name:?} lists its own completed job alone"
        );
    }
    ensure_eq!(
        ctx.store.count_jobs().await?,
        each_once(JobState::Completed),
        "count_jobs counts each queue's one completed job apart, in name order"
    );
    Ok(())
}

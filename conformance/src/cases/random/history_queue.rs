//! Concurrent queue histories ([contract §9](tenure_lease_core::contract),
//! with the fences of §7).
//!
//! Six workers claim, settle, abandon and take back jobs on two queues at
//! once, writing through a [`FenceGate`], so that the recorded answers can
//! show that no job was ever held twice, none was lost and no stale copy
//! ever wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, FailAction, JobClaim, JobQueue, JobSettle, JobState, NewJob, TakeBack,
};
use tenure_lease_core::{clock, FenceGate};

use crate::cases::util::SHORT_TTL;
use crate::harness::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

/// Workers playing at once.
const WORKERS: usize = 6;

/// Rounds of enqueue, concurrent work, and reap.
const ROUNDS: usize = 4;

/// Jobs enqueued per queue per round.
const JOBS_PER_QUEUE: usize = 5;

/// Claim attempts per worker per round.
const CLAIMS_PER_WORKER: usize = 2;

/// Capabilities jobs may require and workers may offer.
const CAPABILITIES: [&str; 2] = ["gpu", "ssd"];

/// A small deterministic random source, seeded per worker.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % bound
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn capabilities(&mut self) -> BTreeSet<String> {
        CAPABILITIES
            .iter()
            .filter(|_| self.chance(50))
            .map(|c| (*c).to_owned())
            .collect()
    }
}

/// One claim answered to a worker (by `claim` or `take_back`).
#[derive(Debug, Clone)]
struct Handout {
    round: usize,
    claim: JobClaim,
}

/// What a worker recorded.
#[derive(Default)]
struct Record {
    handouts: Vec<Handout>,
    /// Jobs whose completion was answered `Settled`.
    completed: Vec<String>,
    /// Claims the worker left to expire (its "live copies").
    abandoned: Vec<JobClaim>,
    /// Jobs taken back by a live copy.
    taken_back: usize,
    calls: usize,
}

/// The shared resource: a log of writes per job, guarded by a fence gate.
#[derive(Default)]
struct Guarded {
    gate: FenceGate,
    /// (job, fence, accepted) in the order decided.
    decisions: Mutex<Vec<(String, u64, bool)>>,
}

impl Guarded {
    fn write(&self, job: &str, fence: u64) -> bool {
        let mut decisions = self
            .decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let accepted = self.gate.admit(job, fence).is_ok();
        decisions.push((job.to_owned(), fence, accepted));
        accepted
    }
}

/// Six workers claim jobs from two queues with random capabilities, then
/// complete, fail (to retry), defer or abandon them; between rounds a
/// coordinator moves the clock past every lease and reaps, and workers'
/// live copies of abandoned claims try to take them back. Every claim and
/// every take-back draws a distinct fence greater than every earlier claim
/// of the job; every write with a superseded claim is refused; every job
/// ends exactly once completed, dead-lettered or queued; and a fence gate
/// guarding a per-job log never accepts a fence below one it accepted.
pub async fn queue_concurrent_claims_keep_invariants_and_fences_guard_a_resource<
    S: JobQueue + 'static,
>(
    ctx: Ctx<S>,
) -> CaseResult {
    let started = Instant::now();
    let run = format!("qc{}-", ctx.store.now().await?.timestamp_micros());
    let queues = [format!("{run}a"), format!("{run}b")];
    let guarded = Arc::new(Guarded::default());
    let mut enqueued = Vec::new();
    let mut records: Vec<Record> = (0..WORKERS).map(|_| Record::default()).collect();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    for round in 0..ROUNDS {
        let mut jobs = Vec::new();
        for queue in &queues {
            for n in 0..JOBS_PER_QUEUE {
                let id = format!("{queue}-r{round}-{n}");
                let mut job = NewJob::new(queue.clone(), serde_json::json!({ "n": n }))
                    .id(id.clone())
                    .max_attempts(1 + dice.below(3) as u32);
                job.required_capabilities = dice.capabilities();
                jobs.push(job);
                enqueued.push(id);
            }
        }
        ctx.store.enqueue_batch(&jobs).await?;
        let tasks: Vec<_> = records
            .into_iter()
            .enumerate()
            .map(|(index, record)| {
                let ctx = ctx.clone();
                let guarded = Arc::clone(&guarded);
                let queues = queues.clone();
                let seed = (round * WORKERS + index) as u64 + 1;
                tokio::spawn(async move {
                    work(&ctx, &guarded, &queues, index, round, seed, record).await
                })
            })
            .collect();
        records = Vec::with_capacity(WORKERS);
        for task in tasks {
            records.push(
                task.await
                    .map_err(|error| Failure(format!("a worker panicked: {error}")))??,
            );
        }
        reap_all(&ctx).await?;
        // Live copies of abandoned claims try to take their jobs back and,
        // whatever the answer, to write.
        for record in &mut records {
            for claim in std::mem::take(&mut record.abandoned) {
                record.calls += 1;
                if let TakeBack::Taken(ClaimedJob { claim, .. }) =
                    ctx.store.take_back(&claim, SHORT_TTL).await?
                {
                    record.handouts.push(Handout {
                        round,
                        claim: claim.clone(),
                    });
                    record.taken_back += 1;
                    guarded.write(&claim.id, claim.fence);
                    record.calls += 1;
                    if let JobSettle::Settled(_) = ctx.store.complete(&claim).await? {
                        record.completed.push(claim.id.clone());
                    }
                } else {
                    guarded.write(&claim.id, claim.fence);
                }
            }
        }
    }
    reap_all(&ctx).await?;
    let stale_refused = audit(&ctx, &records, &enqueued, &guarded).await?;
    tracing::debug!(
        "queue concurrent history: {} calls, {} claims ({} taken back), {stale_refused} stale \
         writes refused in {:?}",
        records.iter().map(|r| r.calls).sum::<usize>(),
        records.iter().map(|r| r.handouts.len()).sum::<usize>(),
        records.iter().map(|r| r.taken_back).sum::<usize>(),
        started.elapsed()
    );
    Ok(())
}

/// Moves the clock past every lease and reaps until nothing is claimed.
async fn reap_all<S: JobQueue>(ctx: &Ctx<S>) -> CaseResult {
    let now = ctx.store.now().await?;
    ctx.advance_past(clock::add(now, SHORT_TTL)).await?;
    ctx.store.reap(Duration::ZERO).await?;
    Ok(())
}

async fn work<S: JobQueue>(
    ctx: &Ctx<S>,
    guarded: &Guarded,
    queues: &[String],
    index: usize,
    round: usize,
    seed: u64,
    mut record: Record,
) -> Result<Record, Failure> {
    let mut dice = Dice(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    for _ in 0..CLAIMS_PER_WORKER {
        let request = ClaimRequest::new(
            queues[dice.below(queues.len())].clone(),
            format!("worker-{index}"),
            SHORT_TTL,
        )
        .capabilities(dice.capabilities())
        .limit(1 + dice.below(3));
        record.calls += 1;
        for claimed in ctx.store.claim(&request).await? {
            let claim = claimed.claim;
            record.handouts.push(Handout {
                round,
                claim: claim.clone(),
            });
            guarded.write(&claim.id, claim.fence);
            tokio::task::yield_now().await;
            record.calls += 1;
            match dice.below(4) {
                0 => {
                    if let JobSettle::Settled(_) = ctx.store.complete(&claim).await? {
                        record.completed.push(claim.id.clone());
                    }
                }
                1 => {
                    let retry = FailAction::Retry {
                        backoff: Duration::ZERO,
                    };
                    ctx.store.fail(&claim, "flaky", retry).await?;
                }
                2 => {
                    let missing = BTreeSet::from(["tpu".to_owned()]);
                    ctx.store.defer(&claim, &missing).await?;
                }
                _ => record.abandoned.push(claim),
            }
        }
    }
    Ok(record)
}

async fn audit<S: JobQueue>(
    ctx: &Ctx<S>,
    records: &[Record],
    enqueued: &[String],
    guarded: &Guarded,
) -> Result<usize, Failure> {
    let handouts: Vec<&Handout> = records.iter().flat_map(|r| &r.handouts).collect();
    ensure!(!handouts.is_empty(), "no job was ever claimed");
    // Fences are distinct across every claim.
    let mut by_fence = BTreeMap::new();
    for handout in &handouts {
        if let Some(other) = by_fence.insert(handout.claim.fence, *handout) {
            return Err(Failure(format!(
                "fence {} handed out twice: {other:?} and {handout:?}",
                handout.claim.fence
            )));
        }
    }
    // Per job, claims in fence order run in round order, and every claim but
    // the last is refused on every write.
    let mut per_job: BTreeMap<&str, Vec<&Handout>> = BTreeMap::new();
    for handout in &handouts {
        per_job.entry(&handout.claim.id).or_default().push(handout);
    }
    let mut stale_refused = 0;
    for (id, claims) in &mut per_job {
        claims.sort_by_key(|h| h.claim.fence);
        for pair in claims.windows(2) {
            ensure!(
                pair[0].round <= pair[1].round,
                "job {id:?}: {:?} holds a lower fence than {:?} of an earlier round",
                pair[1],
                pair[0]
            );
        }
        let job = ctx.store.get_job(id).await?;
        let job = job.ok_or_else(|| Failure(format!("job {id:?} was lost")))?;
        let latest = &claims[claims.len() - 1].claim;
        ensure_eq!(
            job.fence,
            latest.fence,
            "job {id:?} carries its last claim's fence"
        );
        for stale in &claims[..claims.len() - 1] {
            let answer = ctx.store.complete(&stale.claim).await?;
            ensure!(
                matches!(answer, JobSettle::Rejected(_)),
                "a superseded claim {:?} completed {id:?}: {answer:?}",
                stale.claim
            );
            let renewal = ctx.store.renew_job(&stale.claim, SHORT_TTL).await?;
            ensure!(
                matches!(renewal, tenure_lease_core::queue::JobRenewal::Lost(_)),
                "a superseded claim {:?} renewed {id:?}: {renewal:?}",
                stale.claim
            );
            stale_refused += usize::from(!guarded.write(id, stale.claim.fence));
        }
    }
    // Nothing lost: each job ends once completed, dead-lettered or queued,
    // and completed exactly when one completion was answered Settled.
    let mut completions: BTreeMap<&str, usize> = BTreeMap::new();
    for id in records.iter().flat_map(|r| &r.completed) {
        *completions.entry(id).or_default() += 1;
    }
    for id in enqueued {
        let job = ctx
            .store
            .get_job(id)
            .await?
            .ok_or_else(|| Failure(format!("job {id:?} was lost")))?;
        ensure!(
            matches!(
                job.state,
                JobState::Completed | JobState::DeadLettered | JobState::Queued
            ),
            "job {id:?} ended {:?} after the final reap",
            job.state
        );
        ensure_eq!(
            completions.get(id.as_str()).copied().unwrap_or(0),
            usize::from(job.state == JobState::Completed),
            "completions answered Settled for {id:?} (now {:?})",
            job.state
        );
    }
    // The gate: per job, an accepted fence is never below an accepted one
    // before it, and a refused one always is.
    let decisions = guarded
        .decisions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
    for (job, fence, accepted) in decisions.iter() {
        let seen = highest.get(job.as_str()).copied();
        let stale = seen.is_some_and(|seen| *fence < seen);
        ensure!(
            *accepted != stale,
            "the gate decided {accepted} for fence {fence} of {job:?} after accepting {seen:?}"
        );
        if *accepted {
            highest.insert(job, *fence);
        }
    }
    ensure!(
        stale_refused > 0 || per_job.values().all(|c| c.len() == 1),
        "no stale copy's write was refused by the gate"
    );
    Ok(stale_refused)
}

//! The claims scenario: admissions that finish at once, takeovers of
//! orphans exactly one claimer may win, a chain of adoptions of one orphan,
//! and job claims from one queue, all interleaved in every process.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, JobSettle, JobState, NewJob};
use tenure_lease_core::{
    Admission, AdmitRequest, LeaseRecord, Status, StatusChange, Takeover, TakeoverRequest,
    Transition,
};

use super::{answer, check_fences, field, ChildAnswers, ProcessScenario, PROCESSES, ROUNDS};

/// Several processes race on one store: each round every process admits on
/// three scopes (the winner finishes its record at once), tries to fail
/// four orphans and to adopt one orphan that has no lease, and claims (and
/// completes) jobs from one queue, which they drain at the end. The parent
/// checks each scope's history holds exactly the admitted records, one
/// after another with growing fences; exactly one winner per orphan; an
/// unbroken chain of adoptions; every job claimed exactly once; fences
/// distinct and growing per process.
pub fn processes_race_admissions_takeovers_and_claims<S: JobQueue + 'static>() -> ProcessScenario<S>
{
    ProcessScenario {
        prepare: |store| Box::pin(async move { prepare(store.as_ref()).await }),
        play: |store, worker, _seed| Box::pin(async move { play(store.as_ref(), &worker).await }),
        check: |store, results| {
            Box::pin(async move { check_results(store.as_ref(), &results).await })
        },
    }
}

/// Parent side, before go: the orphans (no lease, owned by a crashed
/// worker) and the jobs.
async fn prepare<S: JobQueue>(store: &S) {
    for id in (0..FAIL_ORPHANS)
        .map(fail_orphan)
        .chain([CHAIN_ORPHAN.to_owned()])
    {
        let admitted = store
            .admit(&AdmitRequest::new(id, "crashed-worker"))
            .await
            .expect("admit an orphan");
        assert!(admitted.admitted().is_some());
    }
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|index| NewJob::new(QUEUE, json!({ "index": index })).id(job_id(index)))
        .collect();
    store.enqueue_batch(&jobs).await.expect("enqueue the jobs");
}

/// The scopes the workers contend for.
const SCOPES: [&str; 3] = ["scope-a", "scope-b", "scope-c"];
const FAIL_ORPHANS: usize = 4;
const CHAIN_ORPHAN: &str = "orphan-chain";
const LONG_TTL: Duration = Duration::from_secs(600);
const QUEUE: &str = "race-queue";
const JOBS: usize = 40;
/// Most jobs one claim takes, in each round and then while the processes
/// drain what the rounds left.
const CLAIM_LIMIT: usize = 2;

fn fail_orphan(index: usize) -> String {
    format!("orphan-fail-{index}")
}

/// Child side: the rounds, then claims until the queue is empty.
async fn play<S: JobQueue>(store: &S, worker: &str) {
    for round in 0..ROUNDS {
        for scope in SCOPES {
            admit_and_finish(store, worker, scope, round).await;
        }
        for index in 0..FAIL_ORPHANS {
            let request = TakeoverRequest::fail(fail_orphan(index), worker, "orphaned");
            let outcome = store.claim_for_takeover(&request).await.expect("takeover");
            answer(json!({
                "op": "takeover_fail",
                "id": request.id,
                "taken": matches!(outcome, Takeover::Taken(_)),
                "fence": taken_fence(&outcome),
            }));
        }
        let request = TakeoverRequest::adopt(CHAIN_ORPHAN, worker, None);
        let outcome = store.claim_for_takeover(&request).await.expect("takeover");
        answer(json!({
            "op": "takeover_chain",
            "id": CHAIN_ORPHAN,
            "taken": matches!(outcome, Takeover::Taken(_)),
            "fence": taken_fence(&outcome),
        }));
        claim_and_complete(store, worker).await;
    }
    while claim_and_complete(store, worker).await > 0 {}
}

/// Claims up to [`CLAIM_LIMIT`] jobs and completes each; answers how many.
async fn claim_and_complete<S: JobQueue>(store: &S, worker: &str) -> usize {
    let request = ClaimRequest::new(QUEUE, worker, LONG_TTL).limit(CLAIM_LIMIT);
    let claimed = store.claim(&request).await.expect("claim");
    for each in &claimed {
        answer(json!({
            "op": "job_claim",
            "id": each.claim.id,
            "fence": each.claim.fence,
        }));
        let settled = store.complete(&each.claim).await.expect("complete");
        assert!(
            matches!(settled, JobSettle::Settled(_)),
            "the claimer completes its own job: {settled:?}"
        );
    }
    claimed.len()
}

fn job_id(index: usize) -> String {
    format!("job-{index:02}")
}

fn taken_fence(outcome: &Takeover) -> Option<u64> {
    match outcome {
        Takeover::Taken(record) => Some(record.fence),
        _ => None,
    }
}

async fn admit_and_finish<S: JobQueue>(store: &S, worker: &str, scope: &str, round: usize) {
    let request = AdmitRequest::new(format!("{worker}-{scope}-{round}"), worker)
        .scope(scope)
        .ttl(LONG_TTL);
    match store.admit(&request).await.expect("admit") {
        Admission::Admitted { record, .. } => {
            answer(json!({
                "op": "admit",
                "id": record.id,
                "scope": scope,
                "admitted": true,
                "fence": record.fence,
            }));
            let claim = record.claim().expect("an owned record");
            let finished = store
                .transition(&claim, &StatusChange::succeeded())
                .await
                .expect("transition");
            assert!(
                matches!(finished, Transition::Applied(_)),
                "the holder finishes its own record: {finished:?}"
            );
        }
        Admission::Conflict { holder, .. } => answer(json!({
            "op": "admit",
            "id": request.id,
            "scope": scope,
            "admitted": false,
            "holder": holder.id,
        })),
        other => panic!("unexpected admission {other:?}"),
    }
}

fn ops<'a>(results: &'a [ChildAnswers], op: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    results
        .iter()
        .flat_map(|child| child.answers.iter())
        .filter(move |answer| field(answer, "op") == op)
}

/// Parent side: checks the answers against each other and the store;
/// answers the summary line.
async fn check_results<S: JobQueue>(store: &S, results: &[ChildAnswers]) -> String {
    for child in results {
        let expected = ROUNDS * (SCOPES.len() + FAIL_ORPHANS + 1);
        let lease_answers = child
            .answers
            .iter()
            .filter(|answer| field(answer, "op") != "job_claim")
            .count();
        assert_eq!(
            lease_answers, expected,
            "{} answered every operation",
            child.worker
        );
    }
    let handed_out = check_fences(results);

    let conflicts = ops(results, "admit")
        .filter(|answer| field(answer, "admitted") == false)
        .count();
    check_admissions(store, results).await;
    check_fail_takeovers(store, results).await;
    check_takeover_chain(store, results).await;
    let per_worker = check_job_claims(store, results).await;
    format!(
        "{handed_out} fences handed out, {conflicts} admission conflicts, \
         {JOBS} jobs claimed per process: {per_worker:?}"
    )
}

async fn check_admissions<S: JobQueue>(store: &S, results: &[ChildAnswers]) {
    let mut admitted: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for answer in ops(results, "admit").filter(|answer| field(answer, "admitted") == true) {
        let scope = SCOPES
            .iter()
            .find(|scope| field(answer, "scope") == **scope)
            .expect("a known scope");
        let id = field(answer, "id").as_str().expect("an id").to_owned();
        let fence = field(answer, "fence").as_u64().expect("a fence");
        admitted.entry(scope).or_default().insert(id, fence);
    }
    for scope in SCOPES {
        let mut history: Vec<LeaseRecord> = store.list_by_scope(scope).await.expect("history");
        history.reverse();
        let stored: BTreeMap<String, u64> = history
            .iter()
            .map(|record| (record.id.clone(), record.fence))
            .collect();
        assert_eq!(
            Some(&stored),
            admitted.get(scope),
            "{scope}: the file holds exactly the records the processes were told were admitted"
        );
        for pair in history.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            assert_eq!(earlier.status, Status::Succeeded);
            assert!(
                earlier.updated_at <= later.created_at,
                "{scope}: {} was admitted at {} while {} was active until {}",
                later.id,
                later.created_at,
                earlier.id,
                earlier.updated_at
            );
            assert!(
                earlier.fence < later.fence,
                "{scope}: fences grow in creation order ({} then {})",
                earlier.fence,
                later.fence
            );
        }
    }
}

async fn check_fail_takeovers<S: JobQueue>(store: &S, results: &[ChildAnswers]) {
    for index in 0..FAIL_ORPHANS {
        let id = fail_orphan(index);
        let winners: Vec<(&str, u64)> = results
            .iter()
            .flat_map(|child| {
                child
                    .answers
                    .iter()
                    .filter(|answer| field(answer, "op") == "takeover_fail")
                    .filter(|answer| field(answer, "id") == id.as_str())
                    .filter(|answer| field(answer, "taken") == true)
                    .map(|answer| {
                        (
                            child.worker.as_str(),
                            field(answer, "fence").as_u64().expect("a fence"),
                        )
                    })
            })
            .collect();
        assert_eq!(winners.len(), 1, "{id}: exactly one takeover wins");
        let record = store.get(&id).await.expect("get").expect("the orphan");
        assert_eq!(record.status, Status::Failed);
        assert_eq!(record.owner.as_deref(), Some(winners[0].0));
        assert_eq!(record.fence, winners[0].1);
    }
}

async fn check_takeover_chain<S: JobQueue>(store: &S, results: &[ChildAnswers]) {
    let fences: Vec<u64> = ops(results, "takeover_chain")
        .filter(|answer| field(answer, "taken") == true)
        .map(|answer| field(answer, "fence").as_u64().expect("a fence"))
        .collect();
    assert_eq!(
        fences.len(),
        PROCESSES * ROUNDS,
        "a record with no lease is always taken"
    );
    let record = store
        .get(CHAIN_ORPHAN)
        .await
        .expect("get")
        .expect("the chain");
    assert_eq!(Some(record.fence), fences.iter().copied().max());
    assert_eq!(record.status, Status::Running);
}

/// Every job claimed exactly once, by the process it says; answers how
/// many each process claimed.
async fn check_job_claims<S: JobQueue>(
    store: &S,
    results: &[ChildAnswers],
) -> BTreeMap<String, usize> {
    let mut claims: BTreeMap<String, Vec<(&str, u64)>> = BTreeMap::new();
    for child in results {
        for answer in child
            .answers
            .iter()
            .filter(|answer| field(answer, "op") == "job_claim")
        {
            let id = field(answer, "id").as_str().expect("an id").to_owned();
            let fence = field(answer, "fence").as_u64().expect("a fence");
            claims
                .entry(id)
                .or_default()
                .push((child.worker.as_str(), fence));
        }
    }
    let expected: BTreeSet<String> = (0..JOBS).map(job_id).collect();
    assert_eq!(
        claims.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "every job was claimed"
    );
    let per_worker: BTreeMap<&str, usize> =
        claims
            .values()
            .flatten()
            .fold(BTreeMap::new(), |mut counts, (worker, _)| {
                *counts.entry(*worker).or_default() += 1;
                counts
            });
    for (id, claimers) in &claims {
        assert_eq!(claimers.len(), 1, "{id} was claimed once: {claimers:?}");
        let (worker, fence) = claimers[0];
        let job = store.get_job(id).await.expect("get_job").expect("the job");
        assert_eq!(job.state, JobState::Completed, "{id}");
        assert_eq!(job.owner.as_deref(), Some(worker), "{id}");
        assert_eq!((job.fence, job.attempt), (fence, 1), "{id}");
    }
    per_worker
        .into_iter()
        .map(|(worker, claimed)| (worker.to_owned(), claimed))
        .collect()
}

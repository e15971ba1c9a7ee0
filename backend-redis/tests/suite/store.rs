//! Redis-specific behaviour the conformance kit cannot check: undecodable
//! records and jobs, batches larger than one script call, a connection
//! killed in the middle of a run, fences across a server restart, the job
//! indexes and the claim scan bound, fences drawn several per call, the
//! rate logs and their purge, and rough throughput figures.
//!
//! Tests that need a shared server read `TENURE_REDIS_URL`; without it each
//! prints one skip line (and fails under `TENURE_REQUIRE_SERVICES=1`). Each
//! works in its own namespace and deletes it afterwards.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde_json::json;
use tenure_backend_redis::{RedisConfig, RedisStore, CLAIM_SCAN_PER_JOB, RENEW_BATCH};
use tenure_lease_core::backend::{rate_rules, rules};
use tenure_lease_core::queue::{
    ClaimRequest, ClaimedJob, Enqueued, FailAction, Job, JobQueue, JobSettle, JobState, NewJob,
    OperatorRetry, UniquePolicy,
};
use tenure_lease_core::rate::RateLimit;
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, ExpiredQuery, LeaseRecord,
    LeaseStore, LossReason, Renewal, Status, StatusChange, Takeover, TakeoverRequest,
};
use tenure_test_support::servers::{until_ok, PrivateRedis};

use crate::scratch;

use scratch::{admitted, namespace_keys, with_namespace, Scratch};

const TTL: Duration = Duration::from_secs(600);

fn claim(record: &LeaseRecord) -> Claim {
    record.claim().expect("an owner")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_records_are_skipped_or_corrupt_never_a_panic() {
    with_namespace(
        "undecodable_records",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let good = admitted(store, AdmitRequest::new("good", "w").scope("s-good")).await;
            let bad_status = admitted(
                store,
                AdmitRequest::new("bad-status", "w").scope("s-status"),
            )
            .await;
            let bad_fence =
                admitted(store, AdmitRequest::new("bad-fence", "w").scope("s-fence")).await;
            let mut raw = scratch.raw.clone();
            let _: () = raw
                .hset(scratch.record_key("bad-status"), "status", "bogus")
                .await
                .expect("edit status");
            let _: () = raw
                .hset(scratch.record_key("bad-fence"), "fence", "abc")
                .await
                .expect("edit fence");

            let scan = store
                .list_expired(&ExpiredQuery::new(Duration::ZERO))
                .await
                .expect("list_expired survives undecodable records");
            assert_eq!(scan.records, vec![good.clone()]);
            let skipped: HashMap<&str, &str> = scan
                .skipped
                .iter()
                .map(|skipped| (skipped.id.as_str(), skipped.reason.as_str()))
                .collect();
            assert_eq!(skipped.len(), 2, "{skipped:?}");
            assert!(skipped["bad-status"].contains("bogus"), "{skipped:?}");
            assert!(skipped["bad-fence"].contains("fence"), "{skipped:?}");

            for id in ["bad-status", "bad-fence"] {
                let error = store.get(id).await.expect_err("an undecodable record");
                assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            }
            let error = store
                .renew(&claim(&bad_status), TTL)
                .await
                .expect_err("renew");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            // A batch with one undecodable record renews nothing at all.
            let error = store
                .renew_many(&[claim(&good), claim(&bad_fence)], TTL)
                .await
                .expect_err("renew_many");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert_eq!(store.get("good").await.expect("get"), Some(good.clone()));
            let error = store
                .claim_for_takeover(&TakeoverRequest::fail("bad-status", "reaper", "gone"))
                .await
                .expect_err("takeover");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            let error = store
                .admit(
                    &AdmitRequest::new("newcomer", "w2")
                        .scopes(["s-good", "s-fence"])
                        .strategy(AdmitStrategy::Interrupt),
                )
                .await
                .expect_err("admitting over an undecodable holder");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            assert_eq!(
                store.get("good").await.expect("get"),
                Some(good),
                "nothing changed"
            );
            assert_eq!(store.get("newcomer").await.expect("get"), None);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_many_splits_large_batches_and_answers_per_claim() {
    with_namespace(
        "renew_many_large",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let count = RENEW_BATCH * 2 + 500;
            let mut claims = Vec::with_capacity(count);
            for index in 0..count {
                let record = admitted(
                    store,
                    AdmitRequest::new(format!("op-{index}"), "w").ttl(TTL),
                )
                .await;
                claims.push(claim(&record));
            }
            let stale = RENEW_BATCH + 7;
            claims[stale].fence += 1_000_000;
            claims.push(Claim::new("never-admitted", "w", 1));

            let outcomes = store.renew_many(&claims, TTL).await.expect("renew_many");
            assert_eq!(outcomes.len(), claims.len());
            for (index, outcome) in outcomes.iter().enumerate() {
                match (index, outcome) {
                    (index, Renewal::Lost(LossReason::FenceChanged)) if index == stale => {}
                    (index, Renewal::Lost(LossReason::Missing)) if index == count => {}
                    (index, Renewal::Renewed { .. }) if index != stale && index != count => {}
                    (index, other) => panic!("claim {index} answered {other:?}"),
                }
            }
        },
    )
    .await;
}

/// Fences a script draws several at a time (the interrupted holders and
/// the newcomer of one admission, the jobs of one batch claim) are stored
/// as the counter once, at the greatest: the next call draws above all of
/// them. The counter is set far ahead of the server's clock first, as a
/// burst of draws faster than one per microsecond leaves it, so the clock
/// cannot hide a counter stored too low.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_drawn_together_all_stay_below_the_next_call() {
    with_namespace(
        "fences_drawn_together",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let ahead_of_the_clock: u64 = 8_000_000_000_000_000;
            let () = scratch
                .raw
                .clone()
                .set(format!("{}fence", scratch.prefix), ahead_of_the_clock)
                .await
                .expect("SET the fence counter");

            let holder = admitted(store, AdmitRequest::new("holder", "a").scope("s")).await;
            let (newcomer, interrupted) = match store
                .admit(
                    &AdmitRequest::new("newcomer", "a")
                        .scope("s")
                        .strategy(AdmitStrategy::Interrupt),
                )
                .await
                .expect("admit")
            {
                Admission::Admitted {
                    record,
                    interrupted,
                } => (record, interrupted),
                other => panic!("the newcomer was not admitted: {other:?}"),
            };
            assert_eq!(interrupted.len(), 1, "the holder is interrupted");
            for index in 0..3 {
                enqueued(store, NewJob::new("fences", json!({ "job": index }))).await;
            }
            let jobs = claim_jobs(store, ClaimRequest::new("fences", "w", TTL).limit(3)).await;
            assert_eq!(jobs.len(), 3);
            let last = admitted(store, AdmitRequest::new("last", "a")).await;

            let fences: Vec<u64> = [holder.fence, interrupted[0].fence, newcomer.fence]
                .into_iter()
                .chain(jobs.iter().map(|claimed| claimed.claim.fence))
                .chain([last.fence])
                .collect();
            assert!(
                fences[0] > ahead_of_the_clock && fences.windows(2).all(|pair| pair[0] < pair[1]),
                "fences in the order they were drawn: {fences:?}"
            );
        },
    )
    .await;
}

/// The id of the connection named `name`, from `CLIENT LIST`.
async fn client_id(raw: &mut MultiplexedConnection, name: &str) -> Option<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(raw)
        .await
        .expect("CLIENT LIST");
    let wanted = format!("name={name}");
    list.lines()
        .find(|line| line.split(' ').any(|field| field == wanted))
        .and_then(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
        .and_then(|id| id.parse().ok())
}

const WORKERS: usize = 4;
const SCOPES: usize = 6;
const KILLS: usize = 3;

/// One worker's run: admissions that interrupt each other over shared
/// scopes, renewals and transitions, until `stop`. Every `Err` must be
/// retryable; answers how many there were.
async fn churn(
    store: RedisStore,
    worker: usize,
    stop: Arc<AtomicBool>,
    progress: tokio::sync::watch::Sender<usize>,
) -> usize {
    let owner = format!("worker-{worker}");
    let mut errors = 0;
    let mut round = 0_usize;
    while !stop.load(Ordering::Acquire) {
        round += 1;
        let scopes = [
            format!("scope-{}", (round + worker) % SCOPES),
            format!("scope-{}", (round * 7 + worker * 3) % SCOPES),
        ];
        let mut request = AdmitRequest::new(format!("{owner}-{round}"), owner.as_str())
            .scopes(scopes)
            .strategy(AdmitStrategy::Interrupt);
        if round % 4 == 0 {
            // A counted scope beside the exclusive ones: its slot 0 is the
            // exclusive scope of the same name.
            request = request.counted_scope(format!("scope-{}", round % SCOPES), 3);
        }
        if round % 2 == 1 {
            request = request.ttl(Duration::from_millis(1));
        }
        let mut results = Vec::new();
        match store.admit(&request).await {
            Ok(Admission::Admitted { record, .. }) => {
                let claim = claim(&record);
                let ttl = Duration::from_millis(1);
                results.push(store.renew(&claim, ttl).await.map(drop));
                let running = StatusChange::running();
                results.push(store.transition(&claim, &running).await.map(drop));
                if round % 3 == 0 {
                    let succeeded = StatusChange::succeeded();
                    results.push(store.transition(&claim, &succeeded).await.map(drop));
                }
            }
            Ok(_) => {}
            Err(error) => results.push(Err(error)),
        }
        for result in results {
            if let Err(error) = result {
                assert!(error.is_retryable(), "a non-retryable error: {error}");
                errors += 1;
            }
        }
        progress.send_modify(|done| *done += 1);
    }
    errors
}

/// Checks the indexes against the records: every active record's held
/// keys (one slot of each counted scope) point back to it and it is in the
/// expiry index; every held key points to an active record holding it; no
/// fence was handed out twice.
async fn assert_consistent(scratch: &Scratch) {
    let mut raw = scratch.raw.clone();
    let prefix = &scratch.prefix;
    let active: BTreeSet<String> = raw
        .zrange(format!("{prefix}active"), 0, -1)
        .await
        .expect("active ids");
    let expiring: BTreeSet<String> = raw
        .zrange(format!("{prefix}expiry"), 0, -1)
        .await
        .expect("expiry index");
    assert_eq!(
        active, expiring,
        "the expiry index holds exactly the active ids"
    );
    let listed: BTreeSet<String> = scratch
        .store
        .list_active()
        .await
        .expect("list_active")
        .into_iter()
        .map(|record| record.id)
        .collect();
    assert_eq!(active, listed);

    let mut fences = HashSet::new();
    let mut records = HashMap::new();
    for key in namespace_keys(&mut raw, &format!("{prefix}rec:")).await {
        let id = key[prefix.len() + "rec:".len()..].to_owned();
        let record = scratch.store.get(&id).await.expect("get").expect("present");
        assert!(
            fences.insert(record.fence),
            "fence {} handed out twice",
            record.fence
        );
        assert_eq!(record.is_active(), active.contains(&id), "{record:?}");
        records.insert(id, record);
    }
    assert!(
        records
            .values()
            .any(|record| record.status == Status::Interrupted),
        "the run interrupted holders"
    );
    for id in &active {
        for key in rules::held_keys(&records[id]) {
            let holder: Option<String> = raw
                .get(format!("{prefix}holder:{key}"))
                .await
                .expect("holder");
            assert_eq!(holder.as_ref(), Some(id), "active {id} holds {key:?}");
        }
    }
    assert!(
        records.values().any(|record| !record.slots.is_empty()),
        "the run admitted into counted scopes"
    );
    for key in namespace_keys(&mut raw, &format!("{prefix}holder:")).await {
        let held = &key[prefix.len() + "holder:".len()..];
        let holder: String = raw.get(&key).await.expect("holder");
        let record = &records[&holder];
        assert!(
            record.is_active() && rules::held_keys(record).any(|key| key == held),
            "{held:?} -> {record:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connection_is_retryable_and_leaves_nothing_half_applied() {
    let name = format!("tenure-kill-test-{}", tenure_lease_core::generate_id());
    let config_name = name.clone();
    with_namespace(
        "killed_connection_is_retryable_and_leaves_nothing_half_applied",
        move |config| config.client_name(config_name),
        |scratch| async move {
            let stop = Arc::new(AtomicBool::new(false));
            let (progress, mut watcher) = tokio::sync::watch::channel(0_usize);
            let workers: Vec<_> = (0..WORKERS)
                .map(|worker| {
                    tokio::spawn(churn(
                        scratch.store.clone(),
                        worker,
                        Arc::clone(&stop),
                        progress.clone(),
                    ))
                })
                .collect();
            let mut raw = scratch.raw.clone();
            for kill in 1..=KILLS {
                // After each kill the store names its new connection at its
                // next call: wait for progress until the name shows up.
                let mut target = kill * 50;
                let id = loop {
                    watcher
                        .wait_for(|done| *done >= target)
                        .await
                        .expect("workers run");
                    if let Some(id) = client_id(&mut raw, &name).await {
                        break id;
                    }
                    target += 10;
                    assert!(
                        target < kill * 50 + 5000,
                        "the store's connection never showed up"
                    );
                };
                let killed: u64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut raw)
                    .await
                    .expect("CLIENT KILL");
                assert_eq!(killed, 1);
            }
            let target = *watcher.borrow() + 50;
            watcher
                .wait_for(|done| *done >= target)
                .await
                .expect("workers run");
            stop.store(true, Ordering::Release);
            let mut errors = 0;
            for worker in workers {
                errors += worker.await.expect("a worker panicked");
            }
            assert!(errors > 0, "killing the connection surfaced no error");

            assert_consistent(&scratch).await;
            let record = admitted(&scratch.store, AdmitRequest::new("after", "w").ttl(TTL)).await;
            let renewal = scratch
                .store
                .renew(&claim(&record), TTL)
                .await
                .expect("renew");
            assert!(matches!(renewal, Renewal::Renewed { .. }), "{renewal:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_survive_a_restart_with_aof() {
    const TEST: &str = "fences_survive_a_restart_with_aof";
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        return tenure_conformance::skip_unless_required(TEST, &reason);
    }
    let mut server = PrivateRedis::start().await.expect("start redis-server");
    let store = RedisStore::connect(RedisConfig::new(server.url(), "aof"))
        .await
        .expect("connect to the private server");

    let first = admitted(&store, AdmitRequest::new("job", "worker-a").scope("s")).await;
    let Takeover::Taken(adopted) = store
        .claim_for_takeover(&TakeoverRequest::adopt("job", "worker-b", None))
        .await
        .expect("takeover")
    else {
        panic!("a record without a lease is taken over");
    };
    assert!(adopted.fence > first.fence);
    let before = store.get("job").await.expect("get");

    server
        .restart(Duration::ZERO)
        .await
        .expect("restart redis-server");

    let after = until_ok(|| store.get("job")).await;
    assert_eq!(after, before, "the record survived the restart unchanged");
    let readopt = TakeoverRequest::adopt("job", "worker-c", None);
    let Takeover::Taken(again) = until_ok(|| store.claim_for_takeover(&readopt)).await else {
        panic!("a record without a lease is taken over");
    };
    assert!(
        again.fence > adopted.fence,
        "{} after {}",
        again.fence,
        adopted.fence
    );
    let newcomer = admitted(&store, AdmitRequest::new("next", "worker-d")).await;
    assert!(
        newcomer.fence > again.fence,
        "{} after {}",
        newcomer.fence,
        again.fence
    );
}

/// A first rough figure of renewals per second. Run with
/// `TENURE_REDIS_URL=redis://127.0.0.1:6379 cargo test -j2 -p tenure-backend-redis --release --test redis -- --ignored --nocapture renewal_throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn renewal_throughput() {
    with_namespace(
        "renewal_throughput",
        |config| config,
        |scratch| async move {
            const LEASES: usize = 1000;
            const PERIOD: Duration = Duration::from_secs(3);
            const CONCURRENCY: usize = 32;
            let store = scratch.store;
            let mut claims = Vec::with_capacity(LEASES);
            for index in 0..LEASES {
                let record = admitted(
                    &store,
                    AdmitRequest::new(format!("op-{index}"), "w").ttl(TTL),
                )
                .await;
                claims.push(claim(&record));
            }

            let started = Instant::now();
            let mut renewed = 0;
            while started.elapsed() < PERIOD {
                renewed += store
                    .renew_many(&claims, TTL)
                    .await
                    .expect("renew_many")
                    .len();
            }
            let batched = renewed as f64 / started.elapsed().as_secs_f64();

            let claims = Arc::new(claims);
            let started = Instant::now();
            let tasks: Vec<_> = (0..CONCURRENCY)
                .map(|task| {
                    let (store, claims) = (store.clone(), Arc::clone(&claims));
                    tokio::spawn(async move {
                        let mut renewed = 0_usize;
                        while started.elapsed() < PERIOD {
                            let claim = &claims[(task + renewed * CONCURRENCY) % claims.len()];
                            store.renew(claim, TTL).await.expect("renew");
                            renewed += 1;
                        }
                        renewed
                    })
                })
                .collect();
            let mut renewed = 0;
            for task in tasks {
                renewed += task.await.expect("a renewal task");
            }
            let single = renewed as f64 / started.elapsed().as_secs_f64();
            println!(
                "renew_many ({LEASES} claims per call): {batched:.0} renewals/s; \
             renew ({CONCURRENCY} concurrent callers): {single:.0} renewals/s"
            );
        },
    )
    .await;
}

// ---- The job queue -------------------------------------------------------

impl Scratch {
    fn job_key(&self, id: &str) -> String {
        format!("{}job:{id}", self.prefix)
    }

    /// The members of the index `name` (a key family and its argument, such
    /// as `ready:emails`, or a fixed key such as `claimed`).
    async fn index(&self, name: &str) -> Vec<String> {
        self.raw
            .clone()
            .zrange(format!("{}{name}", self.prefix), 0, -1)
            .await
            .expect("ZRANGE")
    }
}

impl Scratch {
    /// The rate log of `limit`, decoded as every backend decodes it, and
    /// its score in the index of logs; `None` when there is none.
    async fn rate_log(
        &self,
        limit: &RateLimit,
    ) -> Option<(Vec<tenure_lease_core::Timestamp>, f64)> {
        let mut raw = self.raw.clone();
        let name = rate_rules::log_name(limit);
        let text: Option<String> = raw
            .get(format!("{}rate:{name}", self.prefix))
            .await
            .expect("GET");
        let score: Option<f64> = raw
            .zscore(format!("{}rates", self.prefix), &name)
            .await
            .expect("ZSCORE");
        match (text, score) {
            (Some(text), Some(score)) => Some((
                rate_rules::decode_uses(&text, limit).expect("a log every backend reads"),
                score,
            )),
            (None, None) => None,
            other => panic!("a log and its index entry go together: {other:?}"),
        }
    }
}

async fn enqueued(store: &RedisStore, job: NewJob) -> Job {
    store.enqueue(&job).await.expect("enqueue")
}

async fn claim_jobs(store: &RedisStore, request: ClaimRequest) -> Vec<ClaimedJob> {
    store.claim(&request).await.expect("claim")
}

fn ids(jobs: &[ClaimedJob]) -> Vec<&str> {
    jobs.iter().map(|claimed| claimed.job.id.as_str()).collect()
}

/// Waits on the store's clock until `instant` has passed (no signal can
/// tell: only the server's clock decides).
async fn wait_past(store: &RedisStore, instant: tenure_lease_core::Timestamp) {
    while store.now().await.expect("now") <= instant {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_jobs_are_skipped_by_claim_and_reap_corrupt_elsewhere() {
    with_namespace(
        "undecodable_jobs",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let mut raw = scratch.raw.clone();
            for (id, priority) in [("bad-state", 3), ("bad-caps", 2), ("good", 1)] {
                enqueued(store, NewJob::new("q", json!({})).id(id).priority(priority)).await;
            }
            let _: () = raw
                .hset(scratch.job_key("bad-state"), "state", "bogus")
                .await
                .expect("edit state");
            let _: () = raw
                .hset(scratch.job_key("bad-caps"), "caps", "{\"a\":1}")
                .await
                .expect("edit caps");

            let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL).limit(10)).await;
            assert_eq!(ids(&claimed), ["good"], "claim skips undecodable jobs");
            for id in ["bad-state", "bad-caps"] {
                let error = store.get_job(id).await.expect_err("an undecodable job");
                assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            }

            // Two claimed jobs expire; one of them then becomes undecodable.
            let short = Duration::from_millis(5);
            for id in ["reaped", "bad-payload"] {
                enqueued(store, NewJob::new("r", json!({})).id(id)).await;
            }
            let claimed = claim_jobs(store, ClaimRequest::new("r", "w", short).limit(2)).await;
            assert_eq!(claimed.len(), 2);
            let _: () = raw
                .hset(scratch.job_key("bad-payload"), "payload", "{not json")
                .await
                .expect("edit payload");
            let error = store
                .complete(&claimed[1].claim)
                .await
                .expect_err("completing an undecodable job");
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
            let latest = claimed
                .iter()
                .filter_map(|claimed| claimed.job.lease_expires_at)
                .max()
                .expect("leases");
            wait_past(store, latest).await;
            let report = store.reap(Duration::ZERO).await.expect("reap");
            let requeued: Vec<&str> = report.requeued.iter().map(|job| job.id.as_str()).collect();
            assert_eq!(requeued, ["reaped"]);
            assert!(report.dead_lettered.is_empty(), "{report:?}");
            let state: String = raw
                .hget(scratch.job_key("bad-payload"), "state")
                .await
                .expect("state");
            assert_eq!(state, "claimed", "the undecodable job is left alone");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_looks_at_a_bounded_number_of_ready_jobs() {
    with_namespace(
        "claim_scan_bound",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let demanding: Vec<NewJob> = (0..CLAIM_SCAN_PER_JOB)
                .map(|index| {
                    NewJob::new("q", json!(index))
                        .id(format!("gpu-{index:03}"))
                        .priority(1)
                        .require("gpu")
                })
                .collect();
            store.enqueue_batch(&demanding).await.expect("enqueue");
            enqueued(store, NewJob::new("q", json!("plain")).id("plain")).await;

            let none = claim_jobs(store, ClaimRequest::new("q", "cpu-only", TTL)).await;
            assert!(
                none.is_empty(),
                "one claim looks at {CLAIM_SCAN_PER_JOB} jobs: {none:?}"
            );
            let two = ClaimRequest::new("q", "cpu-only", TTL).limit(2);
            assert_eq!(ids(&claim_jobs(store, two).await), ["plain"]);
            let gpu = ClaimRequest::new("q", "gpu-box", TTL).capabilities(["gpu"]);
            assert_eq!(ids(&claim_jobs(store, gpu).await), ["gpu-000"]);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_follow_job_states() {
    with_namespace(
        "job_indexes",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let now = store.now().await.expect("now");
            // Far enough ahead that the enqueue surely runs before it.
            let soon = tenure_lease_core::clock::add(now, Duration::from_millis(500));
            enqueued(store, NewJob::new("q", json!(1)).id("later").run_at(soon)).await;
            assert_eq!(scratch.index("delayed:q").await.len(), 1);
            assert!(scratch.index("ready:q").await.is_empty());
            assert!(claim_jobs(store, ClaimRequest::new("q", "w", TTL))
                .await
                .is_empty());

            wait_past(store, soon).await;
            let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL)).await;
            assert_eq!(ids(&claimed), ["later"]);
            assert!(scratch.index("delayed:q").await.is_empty());
            assert!(scratch.index("ready:q").await.is_empty());
            assert_eq!(scratch.index("claimed").await, ["later"]);

            let settle = store
                .fail(&claimed[0].claim, "boom", FailAction::DeadLetter)
                .await
                .expect("fail");
            assert!(matches!(settle, JobSettle::Settled(_)), "{settle:?}");
            assert!(scratch.index("claimed").await.is_empty());
            assert_eq!(scratch.index("dead:q").await, ["later"]);

            let retry = store.retry_dead_letter("later").await.expect("retry");
            assert!(matches!(retry, OperatorRetry::Requeued(_)), "{retry:?}");
            assert!(scratch.index("dead:q").await.is_empty());
            let ready = scratch.index("ready:q").await;
            assert!(ready.len() == 1 && ready[0].ends_with("later"), "{ready:?}");

            let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL)).await;
            let done = store.complete(&claimed[0].claim).await.expect("complete");
            assert!(matches!(done, JobSettle::Settled(_)), "{done:?}");
            for index in ["ready:q", "delayed:q", "claimed", "dead:q"] {
                assert!(scratch.index(index).await.is_empty(), "{index}");
            }

            // A job may share its id with a lease; neither touches the other.
            let lease = admitted(store, AdmitRequest::new("later", "w").ttl(TTL)).await;
            assert_eq!(store.get("later").await.expect("get"), Some(lease));
            let job = store
                .get_job("later")
                .await
                .expect("get_job")
                .expect("the job");
            assert_eq!(job.state, JobState::Completed);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniqueness_indexes_hold_each_keyed_job_until_it_is_purged() {
    with_namespace(
        "unique_indexes",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let keyed = |id: &str, queue: &str, key: &str| {
                NewJob::new(queue, json!({}))
                    .id(id)
                    .unique(key, UniquePolicy::WhileQueued)
            };
            // The queue's length comes first: "a:b" with "c" and "a" with
            // "b:c" have an index each.
            let batch = [
                keyed("first", "a:b", "c"),
                keyed("second", "a", "b:c"),
                keyed("third", "a:b", "c"),
                NewJob::new("a:b", json!({})).id("plain"),
            ];
            let answers = store.enqueue_unique_batch(&batch).await.expect("enqueue");
            let created: Vec<bool> = answers.iter().map(Enqueued::is_created).collect();
            assert_eq!(created, [true, true, false, true]);
            assert_eq!(scratch.index("unique:3:a:b:c").await, ["first"]);
            assert_eq!(scratch.index("unique:1:a:b:c").await, ["second"]);

            // Claimed, the first frees its key; its entry stays until purged.
            claim_jobs(store, ClaimRequest::new("a:b", "w", TTL)).await;
            let next = store
                .enqueue_unique(&keyed("fourth", "a:b", "c"))
                .await
                .expect("enqueue");
            assert!(next.is_created(), "{next:?}");
            assert_eq!(scratch.index("unique:3:a:b:c").await, ["first", "fourth"]);

            let claimed = claim_jobs(store, ClaimRequest::new("a:b", "w", TTL).limit(10)).await;
            let claimed = [
                claimed,
                claim_jobs(store, ClaimRequest::new("a", "w", TTL)).await,
            ];
            for job in claimed.iter().flatten() {
                store.complete(&job.claim).await.expect("complete");
            }
            let first = store
                .get_job("first")
                .await
                .expect("get_job")
                .expect("first");
            store
                .complete(&first.claim().expect("claimed"))
                .await
                .expect("complete");
            assert_eq!(store.purge_jobs(Duration::ZERO).await.expect("purge"), 4);
            let left = namespace_keys(&mut scratch.raw.clone(), &scratch.prefix).await;
            assert!(
                left.iter().all(|key| !key.contains(":unique:")),
                "purge_jobs leaves no uniqueness index behind: {left:?}"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_jobs_passes_over_more_period_holders_than_a_batch() {
    with_namespace(
        "unique_purge_batches",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            // More kept jobs than one purge batch (1000), finished first.
            let holders: Vec<NewJob> = (0..1005)
                .map(|index| {
                    NewJob::new("q", json!(index))
                        .id(format!("held-{index:04}"))
                        .unique(format!("key-{index}"), UniquePolicy::ForPeriod(TTL))
                })
                .collect();
            store
                .enqueue_unique_batch(&holders)
                .await
                .expect("enqueue_unique_batch");
            let plain: Vec<NewJob> = (0..3)
                .map(|index| NewJob::new("q", json!(index)).id(format!("plain-{index}")))
                .collect();
            let mut claims = Vec::new();
            for _ in 0..2 {
                let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL).limit(1000)).await;
                claims.extend(claimed.into_iter().map(|job| job.claim));
            }
            assert_eq!(claims.len(), holders.len());
            store.complete_many(&claims).await.expect("complete_many");
            store.enqueue_batch(&plain).await.expect("enqueue_batch");
            let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL).limit(10)).await;
            for job in &claimed {
                store.complete(&job.claim).await.expect("complete");
            }

            let purged =
                tokio::time::timeout(Duration::from_secs(60), store.purge_jobs(Duration::ZERO))
                    .await
                    .expect("purge_jobs ends")
                    .expect("purge_jobs");
            assert_eq!(purged, 3, "the plain jobs go, the period holders stay");
            assert_eq!(scratch.index("finished").await.len(), holders.len());
            assert_eq!(store.purge_jobs(Duration::ZERO).await.expect("again"), 0);
            let kept = store.get_job("held-1004").await.expect("get_job");
            assert!(kept.is_some_and(|job| job.state == JobState::Completed));
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_order_holds_at_the_extremes_of_priority_and_time() {
    with_namespace(
        "claim_order_extremes",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            // The extremes of the `run_at` the contract accepts (years 1 to 9999).
            let earliest = "0001-01-01T00:00:00Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .expect("year 1");
            let latest = "9999-12-31T23:59:59.999999Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .expect("year 9999");
            let jobs = [
                NewJob::new("q", json!(1))
                    .id("min-priority")
                    .priority(i32::MIN)
                    .run_at(earliest),
                NewJob::new("q", json!(2)).id("recent"),
                NewJob::new("q", json!(3))
                    .id("never")
                    .priority(i32::MAX)
                    .run_at(latest),
                NewJob::new("q", json!(4)).id("ancient").run_at(earliest),
                NewJob::new("q", json!(5))
                    .id("max-priority")
                    .priority(i32::MAX),
            ];
            let stored = store.enqueue_batch(&jobs).await.expect("enqueue_batch");
            for job in &stored {
                let read = store.get_job(&job.id).await.expect("get_job");
                assert_eq!(read.as_ref(), Some(job), "round trip");
            }
            let claimed = claim_jobs(store, ClaimRequest::new("q", "w", TTL).limit(10)).await;
            assert_eq!(
                ids(&claimed),
                ["max-priority", "ancient", "recent", "min-priority"]
            );
            assert_eq!(
                scratch.index("delayed:q").await.len(),
                1,
                "never is not due"
            );
        },
    )
    .await;
}

/// `log_ends_at` as the index of logs scores it, in microseconds.
fn log_end(uses: &[tenure_lease_core::Timestamp], limit: &RateLimit) -> f64 {
    let end = rate_rules::log_ends_at(uses, limit).expect("a use");
    tenure_lease_core::clock::to_micros(end) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_logs_are_one_per_limit_and_purge_deletes_the_ended_ones() {
    with_namespace(
        "rate_logs",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let short = RateLimit::new("api", 2, Duration::from_millis(20));
            let long = RateLimit::new("api", 2, TTL);
            let jobs = RateLimit::new("api", 3, TTL);
            admitted(store, AdmitRequest::new("a", "w").rate_limit(short.clone())).await;
            admitted(store, AdmitRequest::new("b", "w").rate_limit(long.clone())).await;
            for id in ["j1", "j2"] {
                enqueued(store, NewJob::new("q", json!({})).id(id)).await;
            }
            let claimed = store
                .claim_limited(
                    &ClaimRequest::new("q", "w", TTL)
                        .limit(5)
                        .rate_limit(jobs.clone()),
                )
                .await
                .expect("claim_limited");
            assert_eq!(ids(&claimed.jobs), ["j1", "j2"]);
            assert_eq!(claimed.retry_after, None, "the limit held nothing back");

            // One log per key, permits and period, each indexed by its end.
            let (uses, score) = scratch.rate_log(&jobs).await.expect("the claim's log");
            assert_eq!(uses.len(), 2, "one use per job claimed");
            assert_eq!(uses[0], uses[1], "both at the claim's instant");
            assert_eq!(score, log_end(&uses, &jobs));
            let (uses, score) = scratch.rate_log(&long).await.expect("b's log");
            assert_eq!(uses.len(), 1);
            assert_eq!(score, log_end(&uses, &long));
            let (short_uses, _) = scratch.rate_log(&short).await.expect("a's log");
            assert_eq!(scratch.index("rates").await.len(), 3);

            // The short log ends; purge deletes it, uncounted, and keeps the live ones.
            let end = rate_rules::log_ends_at(&short_uses, &short).expect("a use");
            wait_past(store, end).await;
            assert_eq!(store.purge(TTL).await.expect("purge"), 0);
            assert_eq!(scratch.rate_log(&short).await, None);
            assert!(scratch.rate_log(&long).await.is_some());
            assert!(scratch.rate_log(&jobs).await.is_some());
            assert_eq!(scratch.index("rates").await.len(), 2);

            // The live logs still count: the long limit has one permit left.
            admitted(store, AdmitRequest::new("c", "w").rate_limit(long.clone())).await;
            let refused = store
                .admit(&AdmitRequest::new("d", "w").rate_limit(long.clone()))
                .await
                .expect("admit");
            let Admission::RateLimited { key, retry_after } = refused else {
                panic!("not rate limited: {refused:?}");
            };
            assert_eq!(key, "api");
            assert!(retry_after <= TTL && retry_after > TTL - Duration::from_secs(60));
            assert_eq!(store.get("d").await.expect("get"), None, "nothing written");
            let claimed = store
                .claim_limited(&ClaimRequest::new("q", "w", TTL).rate_limit(jobs.clone()))
                .await
                .expect("claim_limited");
            assert!(
                claimed.jobs.is_empty() && claimed.retry_after.is_none(),
                "{claimed:?}"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_more_ended_rate_logs_than_a_batch() {
    with_namespace(
        "rate_log_batches",
        |config| config,
        |scratch| async move {
            let store = &scratch.store;
            let period = Duration::from_millis(1);
            for index in 0..1005 {
                let limit = RateLimit::new(format!("key-{index}"), 1, period);
                admitted(
                    store,
                    AdmitRequest::new(format!("r-{index}"), "w").rate_limit(limit),
                )
                .await;
            }
            assert_eq!(scratch.index("rates").await.len(), 1005);
            let newest = tenure_lease_core::clock::add(store.now().await.expect("now"), period);
            wait_past(store, newest).await;
            assert_eq!(store.purge(TTL).await.expect("purge"), 0);
            let logs: Vec<String> = namespace_keys(&mut scratch.raw.clone(), &scratch.prefix)
                .await
                .into_iter()
                .filter(|key| key[scratch.prefix.len()..].starts_with("rate"))
                .collect();
            assert!(
                logs.is_empty(),
                "purge leaves no ended log behind: {logs:?}"
            );
        },
    )
    .await;
}

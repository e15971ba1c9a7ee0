//! Hostile deployments: sessions above READ COMMITTED, unreachable servers
//! and wrong logins, and an interrupt over several holders.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tenure_backend_postgres::{PgStore, PgStoreConfig};
use tenure_lease_core::queue::{ClaimRequest, FailAction, JobQueue, NewJob, TakeBack};
use tenure_lease_core::{
    Admission, AdmitRequest, AdmitStrategy, Claim, ErrorKind, ExpiredQuery, LeaseStore,
    StatusChange, TakeoverRequest,
};
use tokio::sync::Mutex;

use support::{server_url, with_store};

const LONG: Duration = Duration::from_secs(600);

/// Admits `id` on `scopes` for worker-a, and answers its fence.
async fn admit_on(store: &PgStore, id: &str, scopes: &[&str]) -> u64 {
    let request = AdmitRequest::new(id, "worker-a")
        .scopes(scopes.iter().copied())
        .ttl(LONG);
    match store.admit(&request).await.expect("admit") {
        Admission::Admitted { record, .. } => record.fence,
        other => panic!("expected Admitted, got {other:?}"),
    }
}

/// Admits r0 on `first`, r1 on `second`, then interrupts both with one
/// admission on {s1, s3}: the interrupted holders' new fences must ascend in
/// the order the answer lists them, match what is stored, and lie below the
/// new record's.
async fn interrupt_two_holders(store: &PgStore, first: &str, second: &str) {
    admit_on(store, "r0", &[first]).await;
    admit_on(store, "r1", &[second]).await;
    let request = AdmitRequest::new("r2", "worker-a")
        .scopes(["s1", "s3"])
        .strategy(AdmitStrategy::Interrupt)
        .ttl(LONG);
    let (record, interrupted) = match store.admit(&request).await.expect("interrupt") {
        Admission::Admitted {
            record,
            interrupted,
        } => (record, interrupted),
        other => panic!("expected Admitted, got {other:?}"),
    };
    let listed: Vec<(&str, u64)> = interrupted
        .iter()
        .map(|holder| (holder.id.as_str(), holder.fence))
        .collect();
    assert_eq!(interrupted.len(), 2, "{listed:?}");
    assert!(
        interrupted[0].fence < interrupted[1].fence,
        "fences must ascend in the answer's order: {listed:?}"
    );
    assert!(
        interrupted[1].fence < record.fence,
        "{listed:?} then {}",
        record.fence
    );
    for holder in &interrupted {
        let stored = store.get(&holder.id).await.expect("get").expect("stored");
        assert_eq!(&stored, holder);
    }
}

/// The reproduction of the kit's rare failure: the holder admitted second
/// holds the first scope in scope order, so the answer lists it first,
/// although the table keeps it second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_fences_ascend_in_answer_order_against_row_order() {
    with_store(
        "interrupt_fences_ascend_in_answer_order_against_row_order",
        |store, _| async move { interrupt_two_holders(&store, "s3", "s1").await },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_fences_ascend_in_answer_order_along_row_order() {
    with_store(
        "interrupt_fences_ascend_in_answer_order_along_row_order",
        |store, _| async move { interrupt_two_holders(&store, "s1", "s3").await },
    )
    .await;
}

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_unavailable_naming_the_address() {
    let port = free_port();
    // A generous wait: answering `Unavailable` with the cause, rather than a
    // pool timeout, shows the refusal was reported as it happened.
    let config = PgStoreConfig::new(format!("postgres://app:hunter2@127.0.0.1:{port}/jobs"))
        .acquire_timeout(Duration::from_secs(120));
    let error = PgStore::connect(config).await.expect_err("nobody listens");
    let message = error.to_string();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{message}");
    assert!(error.is_retryable(), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.to_lowercase().contains("refused"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

/// A server that takes the connection and never answers: connecting gives
/// up after the acquire timeout, `Unavailable` naming the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_is_unavailable_after_the_acquire_timeout() {
    // Bound and listening, never accepting: the kernel completes the
    // handshake, nothing ever replies.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let config = PgStoreConfig::new(format!("postgres://app@127.0.0.1:{port}/jobs"))
        .acquire_timeout(Duration::from_millis(300));
    let error = PgStore::connect(config).await.expect_err("silent");
    let message = error.to_string();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("no answer"), "{message}");
    drop(listener);
}

/// Another protocol's server at the port, silent after PostgreSQL's
/// opening request as Redis is: refused after the short first-reply wait,
/// not the whole acquire timeout, with the message naming the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_other_protocol_is_refused_before_the_acquire_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let config = PgStoreConfig::new(format!("postgres://app@127.0.0.1:{port}/jobs"))
        .acquire_timeout(Duration::from_secs(600));
    let error = PgStore::connect(config).await.expect_err("silent");
    let message = error.to_string();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{message}");
    assert!(
        message.contains("opening request within 2s") && message.contains("port"),
        "{message}"
    );
    drop(listener);
}

/// A server that answers PostgreSQL's opening request with what no
/// PostgreSQL server sends (here an error line, as a text protocol would)
/// is a configuration error naming the port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_another_protocol_is_a_config_error() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let server = tokio::spawn(async move {
        while let Ok((mut connection, _)) = listener.accept().await {
            let mut request = [0_u8; 8];
            let _ = connection.read_exact(&mut request).await;
            let _ = connection.write_all(b"-ERR unknown command\r\n").await;
        }
    });
    let config = PgStoreConfig::new(format!("postgres://app@127.0.0.1:{port}/jobs"));
    let error = PgStore::connect(config).await.expect_err("not PostgreSQL");
    let message = error.to_string();
    assert_eq!(error.kind(), ErrorKind::Config, "{message}");
    assert!(!error.is_retryable(), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{port}")) && message.contains("check the URL's port"),
        "{message}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_database_or_user_is_a_config_error() {
    let Some(url) = server_url("unknown_database_or_user_is_a_config_error") else {
        return;
    };
    let options: PgConnectOptions = url.parse().expect("url");
    let host = options.get_host().to_owned();
    let port = options.get_port();
    let user = options.get_username().to_owned();
    for (url, what) in [
        (
            format!("postgres://{user}@{host}:{port}/tenure_no_such_database"),
            "tenure_no_such_database",
        ),
        (
            format!("postgres://tenure_no_such_role@{host}:{port}/test"),
            "tenure_no_such_role",
        ),
    ] {
        let error = PgStore::connect(PgStoreConfig::new(url))
            .await
            .expect_err(what);
        let message = error.to_string();
        assert_eq!(error.kind(), ErrorKind::Config, "{message}");
        assert!(!error.is_retryable(), "{message}");
        assert!(message.contains(what), "{message}");
        assert!(message.contains(&format!("{host}:{port}")), "{message}");
    }
}

/// A store on the schema of `store`, on a pool whose sessions default to
/// `isolation`.
async fn store_at(url: &str, store: &PgStore, isolation: &str) -> PgStore {
    let options: PgConnectOptions = url.parse().expect("url");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        // A startup option's spaces must be escaped.
        .connect_with(options.options([(
            "default_transaction_isolation",
            isolation.replace(' ', "\\ "),
        )]))
        .await
        .expect("pool");
    let shown: String = sqlx::query_scalar("SHOW default_transaction_isolation")
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(shown, isolation);
    PgStore::from_pool(pool, store.schema())
        .await
        .expect("store")
}

/// Every error of a workload, as text.
type Errors = Arc<Mutex<Vec<String>>>;

async fn note<T>(errors: &Errors, what: &str, answer: tenure_lease_core::Result<T>) -> Option<T> {
    match answer {
        Ok(value) => Some(value),
        Err(error) => {
            errors.lock().await.push(format!("{what}: {error}"));
            None
        }
    }
}

/// One lease worker: admissions over shared scopes, renewals (single and
/// batched), transitions, takeovers of the other workers' records, scans
/// and purges.
async fn lease_worker(store: PgStore, worker: usize, rounds: usize, errors: Errors) {
    let owner = format!("w{worker}");
    let mut claims: Vec<Claim> = Vec::new();
    for round in 0..rounds {
        let id = format!("l{worker}-{round}");
        // No lease on every other record: takeovers may take it at once.
        let mut request = AdmitRequest::new(&id, &owner)
            .scope(format!("s{}", round % 3))
            .strategy(AdmitStrategy::Interrupt);
        if round % 2 == 0 {
            request = request.ttl(LONG);
        }
        if let Some(Admission::Admitted { record, .. }) =
            note(&errors, "admit", store.admit(&request).await).await
        {
            claims.extend(record.claim());
        }
        let Some(claim) = claims.last().cloned() else {
            continue;
        };
        note(&errors, "renew", store.renew(&claim, LONG).await).await;
        note(
            &errors,
            "transition",
            store.transition(&claim, &StatusChange::running()).await,
        )
        .await;
        let batch: Vec<Claim> = claims.iter().rev().take(4).cloned().collect();
        note(&errors, "renew_many", store.renew_many(&batch, LONG).await).await;
        for other in 0..4 {
            let victim = format!("l{other}-{}", round.saturating_sub(1));
            let takeover = if round % 2 == 0 {
                TakeoverRequest::fail(&victim, &owner, "taken over")
            } else {
                TakeoverRequest::adopt(&victim, &owner, Some(LONG))
            };
            note(
                &errors,
                "takeover",
                store.claim_for_takeover(&takeover).await,
            )
            .await;
        }
        if round % 3 == 0 {
            note(
                &errors,
                "transition",
                store.transition(&claim, &StatusChange::succeeded()).await,
            )
            .await;
        }
        if round % 5 == 0 {
            note(&errors, "purge", store.purge(Duration::ZERO).await).await;
            note(
                &errors,
                "list_expired",
                store.list_expired(&ExpiredQuery::new(Duration::ZERO)).await,
            )
            .await;
        }
    }
}

/// One queue worker: enqueues, claims from a shared queue, and settles each
/// job a different way; lets some claims lapse for the reaper and takes
/// the reaped ones back.
async fn queue_worker(store: PgStore, worker: usize, rounds: usize, errors: Errors) {
    let owner = format!("q{worker}");
    let short = Duration::from_millis(1);
    for round in 0..rounds {
        let jobs: Vec<NewJob> = (0..3)
            .map(|n| {
                NewJob::new("shared", serde_json::json!({ "n": n }))
                    .id(format!("j{worker}-{round}-{n}"))
                    .max_attempts(if n == 0 { 1 } else { 3 })
            })
            .collect();
        note(&errors, "enqueue", store.enqueue_batch(&jobs).await).await;
        let ttl = if round % 4 == 0 { short } else { LONG };
        let request = ClaimRequest::new("shared", &owner, ttl).limit(3);
        let claimed = note(&errors, "claim", store.claim(&request).await)
            .await
            .unwrap_or_default();
        for (n, job) in claimed.iter().enumerate() {
            if ttl == short {
                continue;
            }
            let claim = &job.claim;
            note(&errors, "renew_job", store.renew_job(claim, LONG).await).await;
            let answer = match (round + n) % 4 {
                0 => store.complete(claim).await,
                1 => {
                    store
                        .fail(
                            claim,
                            "retry",
                            FailAction::Retry {
                                backoff: Duration::ZERO,
                            },
                        )
                        .await
                }
                2 => store.fail(claim, "dead", FailAction::DeadLetter).await,
                _ => {
                    store
                        .defer(claim, &BTreeSet::from(["gpu".to_owned()]))
                        .await
                }
            };
            note(&errors, "settle", answer).await;
        }
        if let Some(report) = note(&errors, "reap", store.reap(Duration::ZERO).await).await {
            for job in report.dead_lettered {
                if let Some(claim) = job.claim() {
                    if let Some(TakeBack::Taken(taken)) =
                        note(&errors, "take_back", store.take_back(&claim, LONG).await).await
                    {
                        note(&errors, "complete", store.complete(&taken.claim).await).await;
                    }
                }
            }
        }
        note(
            &errors,
            "list_dead_letters",
            store.list_dead_letters("shared", 10).await,
        )
        .await;
    }
}

/// Runs lease and queue workers side by side on sessions defaulting to
/// `isolation`: every call must answer, none may fail.
async fn mixed_workload_never_errs(test: &str, isolation: &'static str) {
    with_store(test, |store, url| async move {
        let errors: Errors = Arc::default();
        let mut tasks = Vec::new();
        for worker in 0..3 {
            let store = store_at(&url, &store, isolation).await;
            tasks.push(tokio::spawn(lease_worker(
                store.clone(),
                worker,
                40,
                errors.clone(),
            )));
            tasks.push(tokio::spawn(queue_worker(
                store,
                worker,
                40,
                errors.clone(),
            )));
        }
        for task in tasks {
            task.await.expect("worker panicked");
        }
        let errors = errors.lock().await;
        assert!(
            errors.is_empty(),
            "{} errors at {isolation}, first: {:#?}",
            errors.len(),
            &errors[..errors.len().min(10)]
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_workload_at_repeatable_read_never_errs() {
    mixed_workload_never_errs(
        "mixed_workload_at_repeatable_read_never_errs",
        "repeatable read",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_workload_at_serializable_never_errs() {
    mixed_workload_never_errs("mixed_workload_at_serializable_never_errs", "serializable").await;
}

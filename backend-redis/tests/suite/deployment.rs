//! Hostile deployments, each on a private `redis-server` of its own (the
//! shared server is never reconfigured): eviction policies that may drop
//! tenure's keys, `CONFIG` renamed away, refused credentials, a server that
//! keeps nothing on disk and forgets everything when it restarts. The
//! refused eviction policies are the kit's deployment suite, which
//! `kit::deployment` runs through [`common::RedisFactory`]'s deployment
//! capability.
//!
//! Without `redis-server` each test prints one skip line (and fails under
//! `TENURE_REQUIRE_SERVICES=1`).

use std::time::Duration;

use serde_json::json;
use tenure_backend_redis::{AppendFsync, RedisConfig, RedisStore, SettingsSource};
use tenure_lease_core::queue::{ClaimRequest, JobQueue, NewJob};
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{
    Admission, AdmitRequest, ErrorKind, FenceCheck, FenceGate, FenceStore, LeaseStore, LossReason,
    Renewal, Takeover, TakeoverRequest,
};
use tenure_test_support::certificates::TestCertificates;
use tenure_test_support::sentinel::{PrivateSentinels, SERVICE};
use tenure_test_support::servers::{until_ok, PrivateRedis};

const TTL: Duration = Duration::from_secs(600);
/// Long enough that a refusal answered within it was not a time-out (which
/// would answer `Unavailable`), whatever the load of the machine.
const PATIENT: Duration = Duration::from_secs(60);

/// A private server started with `args`, or `None` after printing a skip
/// line (panicking instead when services are required).
async fn private_server(test: &str, args: &[&str]) -> Option<PrivateRedis> {
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        tenure_conformance::skip_unless_required(test, &reason);
        return None;
    }
    Some(
        PrivateRedis::start_with(args)
            .await
            .unwrap_or_else(|error| panic!("{test}: start redis-server {args:?}: {error}")),
    )
}

fn config(url: impl Into<String>) -> RedisConfig {
    RedisConfig::new(url, "deployment").connect_timeout(PATIENT)
}

async fn connect(url: impl Into<String>) -> tenure_lease_core::Result<RedisStore> {
    RedisStore::connect(config(url)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_that_never_evict_tenure_keys_are_accepted() {
    const TEST: &str = "policies_that_never_evict_tenure_keys_are_accepted";
    for policy in ["noeviction", "volatile-lru", "volatile-ttl"] {
        let Some(server) = private_server(TEST, &["--maxmemory-policy", policy]).await else {
            return;
        };
        let store = connect(server.url())
            .await
            .unwrap_or_else(|error| panic!("{policy}: {error}"));
        let durability = store.durability();
        // RESP3 answers CONFIG GET with a map rather than an array.
        let resp3 = connect(format!("{}/?protocol=resp3", server.url()))
            .await
            .unwrap_or_else(|error| panic!("{policy} over RESP3: {error}"));
        assert_eq!(resp3.durability(), durability);
        assert_eq!(durability.eviction_policy, policy);
        assert_eq!(durability.source, SettingsSource::Config);
        // The private server's defaults: an fsync-always append-only file.
        assert_eq!(durability.append_only, Some(true));
        assert_eq!(durability.append_fsync, Some(AppendFsync::Always));
        assert_eq!(durability.snapshot_schedule.as_deref(), Some(""));
        assert!(durability.survives_a_crash() && !durability.keeps_nothing_on_disk());
        assert!(matches!(
            store
                .admit(&AdmitRequest::new("op", "w").scope("s").ttl(TTL))
                .await
                .expect("admit"),
            Admission::Admitted { .. }
        ));
    }
}

/// No tenure key carries an expiry, so a `volatile-*` policy never evicts
/// one: the premise of accepting those policies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tenure_key_carries_an_expiry() {
    const TEST: &str = "no_tenure_key_carries_an_expiry";
    let Some(server) = private_server(TEST, &["--maxmemory-policy", "volatile-lru"]).await else {
        return;
    };
    let store = connect(server.url()).await.expect("connect");
    // Every key family: records, holders, scope indexes, the indexes of
    // active, expiring and terminal records, the fence counter, jobs and
    // their ready, delayed, claimed and dead-letter indexes.
    store
        .admit(&AdmitRequest::new("op", "w").scope("s").ttl(TTL))
        .await
        .expect("admit");
    store
        .admit(&AdmitRequest::new("done", "w"))
        .await
        .expect("admit");
    store
        .claim_for_takeover(&TakeoverRequest::fail("done", "reaper", "gone"))
        .await
        .expect("takeover");
    store
        .enqueue(&NewJob::new("q", json!(1)).id("now"))
        .await
        .expect("enqueue");
    store
        .enqueue(
            &NewJob::new("q", json!(2))
                .id("later")
                .run_at(store.now().await.expect("now") + chrono::Duration::hours(1)),
        )
        .await
        .expect("enqueue");
    store
        .enqueue(&NewJob::new("d", json!(3)).id("dead"))
        .await
        .expect("enqueue");
    let claimed = store
        .claim(&ClaimRequest::new("d", "w", TTL))
        .await
        .expect("claim");
    store
        .fail(
            &claimed[0].claim,
            "no",
            tenure_lease_core::queue::FailAction::DeadLetter,
        )
        .await
        .expect("fail");
    store
        .claim(&ClaimRequest::new("q", "w", TTL))
        .await
        .expect("claim");
    store
        .enqueue(&NewJob::new("q", json!(4)).id("waiting"))
        .await
        .expect("enqueue");

    let mut raw = redis::Client::open(server.url())
        .expect("URL")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tenure:*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    for family in [
        "rec:", "holder:", "scope:", "active", "expiry", "terminal", "fence", "job:", "ready:",
        "delayed:", "claimed", "dead:",
    ] {
        assert!(
            keys.iter().any(|key| key.contains(&format!("}}:{family}"))),
            "no {family} key in {keys:?}"
        );
    }
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .expect("PTTL");
        assert_eq!(ttl, -1, "{key} carries an expiry");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_config_the_policy_is_read_from_info() {
    const TEST: &str = "without_config_the_policy_is_read_from_info";
    let renamed = ["--rename-command", "CONFIG", ""];
    let Some(server) = private_server(
        TEST,
        &[&renamed[..], &["--maxmemory-policy", "allkeys-lru"]].concat(),
    )
    .await
    else {
        return;
    };
    let error = connect(server.url()).await.expect_err("allkeys-lru");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(error.message().contains("allkeys-lru"), "{error}");
    drop(server);

    let Some(server) = private_server(
        TEST,
        &[&renamed[..], &["--maxmemory-policy", "noeviction"]].concat(),
    )
    .await
    else {
        return;
    };
    // RESP3 answers INFO in another shape (a verbatim string).
    let resp3 = connect(format!("{}/?protocol=resp3", server.url()))
        .await
        .expect("noeviction over RESP3");
    let store = connect(server.url()).await.expect("noeviction");
    assert_eq!(resp3.durability(), store.durability());
    let durability = store.durability();
    assert_eq!(durability.source, SettingsSource::Info);
    assert_eq!(durability.eviction_policy, "noeviction");
    assert_eq!(durability.append_only, Some(true));
    assert_eq!(
        (
            durability.append_fsync,
            durability.snapshot_schedule.as_deref()
        ),
        (None, None),
        "INFO does not tell"
    );
    assert!(!durability.keeps_nothing_on_disk() && !durability.survives_a_crash());
}

/// An ACL that forbids `CONFIG` (as managed services do) answers NOPERM:
/// the policy comes from INFO all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_forbidding_config_falls_back_to_info() {
    const TEST: &str = "an_acl_forbidding_config_falls_back_to_info";
    let acl = ["--user", "app", "on", ">pw", "~*", "&*", "+@all", "-config"];
    for (policy, accepted) in [("allkeys-lfu", false), ("volatile-lfu", true)] {
        let Some(server) =
            private_server(TEST, &[&acl[..], &["--maxmemory-policy", policy]].concat()).await
        else {
            return;
        };
        let url = server.url().replacen("redis://", "redis://app:pw@", 1);
        match connect(url).await {
            Ok(store) if accepted => {
                assert_eq!(store.durability().source, SettingsSource::Info);
                assert_eq!(store.durability().eviction_policy, policy);
            }
            Err(error) if !accepted => {
                assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
                assert!(error.message().contains(policy), "{error}");
            }
            other => panic!("{policy}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_config_nor_info_is_refused_naming_both() {
    const TEST: &str = "neither_config_nor_info_is_refused_naming_both";
    let Some(server) = private_server(
        TEST,
        &[
            "--rename-command",
            "CONFIG",
            "",
            "--rename-command",
            "INFO",
            "",
        ],
    )
    .await
    else {
        return;
    };
    let error = connect(server.url()).await.expect_err("unknown policy");
    assert_eq!(error.kind(), ErrorKind::Incompatible, "{error}");
    assert!(
        error.message().contains("CONFIG GET") && error.message().contains("INFO"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_answer_at_once_with_a_configuration_error() {
    const TEST: &str = "refused_credentials_answer_at_once_with_a_configuration_error";
    let Some(server) = private_server(TEST, &["--requirepass", "s3cret"]).await else {
        return;
    };
    let port = server.url().rsplit(':').next().expect("a port").to_owned();
    for (case, url) in [
        ("wrong password", format!("redis://:wrong@127.0.0.1:{port}")),
        (
            "unknown user",
            format!("redis://nobody:s3cret@127.0.0.1:{port}"),
        ),
        ("no password (NOAUTH)", format!("redis://127.0.0.1:{port}")),
    ] {
        // Within PATIENT: a time-out would answer Unavailable.
        let error = connect(url).await.expect_err(case);
        assert_eq!(error.kind(), ErrorKind::Config, "{case}: {error}");
        assert!(!error.is_retryable(), "{case}: {error}");
        assert!(!error.to_string().contains("s3cret"), "{case}: {error}");
    }
    let store = connect(format!("redis://:s3cret@127.0.0.1:{port}"))
        .await
        .expect("the right password");
    store.now().await.expect("a call");
}

/// A server that keeps nothing on disk forgets everything when killed; the
/// fence counter starts again from the server's clock, so every fence drawn
/// after the wipe exceeds every fence drawn before it and a stale holder
/// cannot pass a gate a newer holder passed. (With a bare `INCR` the first
/// fences after the wipe were 1, 2, ...: the same fences again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_stay_monotonic_across_a_restart_that_loses_everything() {
    const TEST: &str = "fences_stay_monotonic_across_a_restart_that_loses_everything";
    let Some(mut server) = private_server(TEST, &["--appendonly", "no", "--save", ""]).await else {
        return;
    };
    let store = RedisStore::connect(
        config(server.url())
            .operation_timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(5)),
    )
    .await
    .expect("connect");
    let durability = store.durability();
    assert_eq!(durability.append_only, Some(false));
    assert!(durability.keeps_nothing_on_disk(), "{durability}");

    let mut before = Vec::new();
    // No lease: the record may be taken over at any time.
    let stale = match store
        .admit(&AdmitRequest::new("op", "worker-a").scope("s"))
        .await
        .expect("admit")
    {
        Admission::Admitted { record, .. } => record,
        other => panic!("{other:?}"),
    };
    before.push(stale.fence);
    for index in 0..5 {
        let Admission::Admitted { record, .. } = store
            .admit(&AdmitRequest::new(format!("other-{index}"), "worker-a"))
            .await
            .expect("admit")
        else {
            panic!("admitted");
        };
        before.push(record.fence);
    }
    store
        .enqueue(&NewJob::new("q", json!(1)).id("job"))
        .await
        .expect("enqueue");
    let stale_job = store
        .claim(&ClaimRequest::new("q", "worker-a", TTL))
        .await
        .expect("claim")
        .pop()
        .expect("a job");
    before.push(stale_job.claim.fence);
    let highest_before = before.iter().copied().max().expect("fences");
    let gate = FenceGate::new();
    gate.admit("resource", stale.fence)
        .expect("the first write");

    server
        .restart(Duration::ZERO)
        .await
        .expect("restart redis-server");

    let stale_claim = stale.claim().expect("owner");
    let renewal = until_ok(|| store.renew(&stale_claim, TTL)).await;
    assert_eq!(
        renewal,
        Renewal::Lost(LossReason::Missing),
        "the server forgot everything"
    );
    let mut after = Vec::new();
    let Admission::Admitted { record: newer, .. } = store
        .admit(&AdmitRequest::new("op", "worker-b").scope("s"))
        .await
        .expect("admit after the wipe")
    else {
        panic!("the scope is free after the wipe");
    };
    after.push(newer.fence);
    let Takeover::Taken(adopted) = store
        .claim_for_takeover(&TakeoverRequest::adopt("op", "worker-c", None))
        .await
        .expect("takeover")
    else {
        panic!("a record without a lease is taken over");
    };
    assert!(adopted.fence > newer.fence);
    after.push(adopted.fence);
    store
        .enqueue(&NewJob::new("q", json!(1)).id("job"))
        .await
        .expect("enqueue after the wipe");
    let newer_job = store
        .claim(&ClaimRequest::new("q", "worker-b", TTL))
        .await
        .expect("claim")
        .pop()
        .expect("a job");
    after.push(newer_job.claim.fence);
    let lowest_after = after.iter().copied().min().expect("fences");
    assert!(
        lowest_after > highest_before,
        "fences after the wipe {after:?} must exceed every fence before it {before:?}"
    );

    gate.admit("resource", newer.fence)
        .expect("the newer holder writes");
    let refused = gate
        .admit("resource", stale.fence)
        .expect_err("the stale holder from before the wipe");
    assert_eq!(refused.presented, stale.fence);
    let gate = FenceGate::new();
    gate.admit("job", newer_job.claim.fence).expect("newer job");
    gate.admit("job", stale_job.claim.fence)
        .expect_err("the stale job claim from before the wipe");
}

/// With `noeviction` a full server refuses writes instead of dropping keys:
/// the refused operation is retryable and leaves nothing behind, and what
/// was stored stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_writes_and_keeps_every_key() {
    const TEST: &str = "a_full_server_refuses_writes_and_keeps_every_key";
    let Some(server) = private_server(
        TEST,
        &["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"],
    )
    .await
    else {
        return;
    };
    let store = connect(server.url()).await.expect("connect");
    let metadata = json!({ "padding": "x".repeat(60 * 1024) });
    let mut stored = Vec::new();
    let refusal = loop {
        let id = format!("op-{}", stored.len());
        let request = AdmitRequest::new(id.clone(), "w")
            .scope(format!("s-{}", stored.len()))
            .metadata(metadata.clone());
        match store.admit(&request).await {
            Ok(Admission::Admitted { record, .. }) => stored.push(record),
            Ok(other) => panic!("{other:?}"),
            Err(error) => break (id, error),
        }
        assert!(stored.len() < 1000, "4mb never filled up");
    };
    let (refused_id, error) = refusal;
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(error.is_retryable(), "{error}");
    assert!(error.message().contains("out of memory"), "{error}");
    assert_eq!(store.get(&refused_id).await.expect("get"), None);
    let scope = format!("s-{}", stored.len());
    assert!(store
        .list_by_scope(&scope)
        .await
        .expect("list_by_scope")
        .is_empty());
    for record in &stored {
        assert_eq!(
            store.get(&record.id).await.expect("get").as_ref(),
            Some(record)
        );
    }
}

/// Calls of `command` (`fcall`, `evalsha`, ...) the server has counted.
async fn calls_of(url: &str, command: &str) -> u64 {
    let client = redis::Client::open(url).expect("client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

/// A little of everything, checked: admission, renewal, a read, a job.
async fn exercise(store: &RedisStore, id: &str) {
    let admitted = store
        .admit(&AdmitRequest::new(id, "w").scope(format!("s-{id}")).ttl(TTL))
        .await
        .expect("admit");
    let Admission::Admitted { record, .. } = admitted else {
        panic!("{admitted:?}");
    };
    let claim = record.claim().expect("an owner");
    assert!(matches!(
        store.renew(&claim, TTL).await.expect("renew"),
        Renewal::Renewed { .. }
    ));
    assert!(store.get(id).await.expect("get").is_some());
    store
        .enqueue(&NewJob::new("q", json!(1)).id(format!("job-{id}")))
        .await
        .expect("enqueue");
    let claimed = store
        .claim(&ClaimRequest::new("q", "w", TTL))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
}

/// On Redis 7 every operation is a function of one library, loaded at
/// connect; `FUNCTION FLUSH` (as a restart without persistence) loses it,
/// and the next call loads it again and answers as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_function_library_is_loaded_again() {
    const TEST: &str = "a_flushed_function_library_is_loaded_again";
    let Some(server) = private_server(TEST, &[]).await else {
        return;
    };
    let url = server.url();
    let store = connect(url.clone()).await.expect("connect");
    exercise(&store, "before").await;
    let before = calls_of(&url, "fcall").await;
    assert!(before > 0, "no FCALL on a Redis 7 server");
    assert_eq!(calls_of(&url, "evalsha").await, 0);

    let client = redis::Client::open(url.as_str()).expect("client");
    let mut plain = client
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let flushed: String = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut plain)
        .await
        .expect("FUNCTION FLUSH");
    assert_eq!(flushed, "OK");

    exercise(&store, "after").await;
    assert!(calls_of(&url, "fcall").await > before);
    assert_eq!(calls_of(&url, "evalsha").await, 0, "functions all along");
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut plain)
        .await
        .expect("FUNCTION LIST");
    assert!(
        format!("{libraries:?}").contains("tenure_"),
        "{libraries:?}"
    );
}

/// A user the ACL denies `FUNCTION` (and so `FCALL`) runs every operation
/// as a script by `EVALSHA`, as on a server older than Redis 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_forbidding_functions_falls_back_to_evalsha() {
    const TEST: &str = "an_acl_forbidding_functions_falls_back_to_evalsha";
    let acl = [
        "--user",
        "app",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-function",
        "-fcall",
        "-fcall_ro",
    ];
    let Some(server) = private_server(TEST, &acl).await else {
        return;
    };
    let url = server.url();
    let store = connect(url.replacen("redis://", "redis://app:pw@", 1))
        .await
        .expect("connect");
    exercise(&store, "scripted").await;
    assert_eq!(calls_of(&url, "fcall").await, 0);
    assert!(calls_of(&url, "evalsha").await > 0);
}

/// `store` admits a lease of `id` to `owner`: the connection carries real
/// calls. The record admitted.
async fn admits_to(store: &RedisStore, id: &str, owner: &str) -> tenure_lease_core::LeaseRecord {
    match store
        .admit(&AdmitRequest::new(id, owner).ttl(TTL))
        .await
        .expect("an admission")
    {
        Admission::Admitted { record, .. } => record,
        other => panic!("{id}: {other:?}"),
    }
}

/// [`admits_to`] a worker.
async fn admits(store: &RedisStore, id: &str) {
    admits_to(store, id, "worker").await;
}

/// A TLS-only server with a certificate of a test authority: trusted
/// through the config or through the URL's `tls_ca=` file, the store
/// connects and works; trusting another authority, or only the system's,
/// it is refused at once with a configuration error that says what to
/// check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise() {
    const TEST: &str = "tls_connects_when_the_server_certificate_is_trusted_and_refuses_otherwise";
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let certificates = TestCertificates::generate("redis").expect("certificates");
    let stranger = TestCertificates::generate("stranger").expect("certificates");
    let server = PrivateRedis::start_tls(&certificates, false, &[])
        .await
        .expect("a TLS redis-server");
    assert!(server.url().starts_with("rediss://"), "{}", server.url());

    let trusted = TlsCertificates::new().trust_pem(certificates.ca_pem());
    let store = RedisStore::connect(config(server.url()).tls(trusted))
        .await
        .expect("the authority is trusted");
    admits(&store, "through-config").await;

    let url = format!(
        "{}/?tls_ca={}",
        server.url(),
        certificates.ca_file().display()
    );
    let store = connect(url).await.expect("the URL's authority is trusted");
    admits(&store, "through-url").await;

    for (case, store) in [
        (
            "another authority",
            RedisStore::connect(
                config(server.url()).tls(TlsCertificates::new().trust_pem(stranger.ca_pem())),
            )
            .await,
        ),
        ("the system's authorities", connect(server.url()).await),
    ] {
        // Within PATIENT: a time-out would answer Unavailable.
        let error = store.expect_err(case);
        assert_eq!(error.kind(), ErrorKind::Config, "{case}: {error}");
        assert!(!error.is_retryable(), "{case}: {error}");
        assert!(error.message().contains("TLS handshake"), "{case}: {error}");
        assert!(error.message().contains("certificate"), "{case}: {error}");
    }

    let plain = RedisConfig::new(format!("redis://127.0.0.1:{}", server.port()), "deployment")
        .tls(TlsCertificates::new().trust_pem(certificates.ca_pem()));
    let error = RedisStore::connect(plain)
        .await
        .expect_err("certificates for a plain URL");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains("rediss://"), "{error}");
}

/// A server that asks every client for a certificate (`tls-auth-clients
/// yes`) and an ACL user: the store logs in as that user with the client
/// certificate of the config or of the URL; without a certificate it is
/// refused with a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificates_and_acl_users_log_in() {
    const TEST: &str = "tls_client_certificates_and_acl_users_log_in";
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let certificates = TestCertificates::generate("redis-mtls").expect("certificates");
    let acl = ["--user", "app", "on", ">s3cret", "~*", "&*", "+@all"];
    let server = PrivateRedis::start_tls(&certificates, true, &acl)
        .await
        .expect("a TLS redis-server asking for client certificates");
    let url = server
        .url()
        .replacen("rediss://", "rediss://app:s3cret@", 1);
    let (certificate, key) = certificates.client_pem();
    let identified = TlsCertificates::new()
        .trust_pem(certificates.ca_pem())
        .identity_pem(certificate, key);
    let store = RedisStore::connect(config(url.as_str()).tls(identified))
        .await
        .expect("a client certificate and the ACL user");
    admits(&store, "mtls-config").await;

    let with_files = format!(
        "{url}/?tls_ca={}&tls_cert={}&tls_key={}",
        certificates.ca_file().display(),
        certificates.client_file().display(),
        certificates.client_key_file().display()
    );
    let store = connect(with_files)
        .await
        .expect("the URL's client certificate");
    admits(&store, "mtls-url").await;

    let anonymous = RedisStore::connect(
        config(url.as_str()).tls(TlsCertificates::new().trust_pem(certificates.ca_pem())),
    )
    .await
    .expect_err("no client certificate");
    assert_eq!(anonymous.kind(), ErrorKind::Config, "{anonymous}");
    assert!(!anonymous.to_string().contains("s3cret"), "{anonymous}");

    let wrong_password = url.replacen("s3cret", "wrong", 1);
    let error = RedisStore::connect(
        config(wrong_password).tls(
            TlsCertificates::new()
                .trust_pem(certificates.ca_pem())
                .identity_pem(certificate, key),
        ),
    )
    .await
    .expect_err("a wrong password");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
}

/// A read-only replica is refused at connect, naming its primary; the
/// primary says how many replicas follow it; a primary demoted after
/// connect (`REPLICAOF`) answers every write with a retryable error that
/// says it became a replica, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_refused_at_connect_and_a_demotion_is_reported() {
    const TEST: &str = "replicas_are_refused_at_connect_and_a_demotion_is_reported";
    let Some(primary) = private_server(TEST, &[]).await else {
        return;
    };
    let port = primary.port().to_string();
    let replica = PrivateRedis::start_with(&["--replicaof", "127.0.0.1", &port])
        .await
        .expect("a replica");
    let error = connect(replica.url()).await.expect_err("a replica");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(!error.is_retryable(), "{error}");
    assert!(error.message().contains("replica"), "{error}");
    assert!(
        error.message().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );

    // The replica attaches in its own time: there is no signal to wait on.
    let give_up = tokio::time::Instant::now() + PATIENT;
    let followed = loop {
        let store = connect(primary.url()).await.expect("the primary");
        match store.durability().replicas {
            Some(1) => break store,
            other if tokio::time::Instant::now() < give_up => {
                assert_eq!(other, Some(0), "{:?}", store.durability());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the replica never attached: replicas {other:?}"),
        }
    };
    admits(&followed, "before-demotion").await;

    let other = PrivateRedis::start().await.expect("a new primary");
    let mut raw = redis::Client::open(primary.url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port())
        .query_async(&mut raw)
        .await
        .expect("demoted");
    let error = followed
        .admit(&AdmitRequest::new("after-demotion", "worker").ttl(TTL))
        .await
        .expect_err("a demoted server refuses writes");
    assert!(error.is_retryable(), "{error}");
    assert!(error.message().contains("read-only replica"), "{error}");
}

/// A replica promoted while its primary went on alone (the asynchronous
/// worst case: the successor's admission and gate write lost): fences
/// drawn on it still exceed every fence of the old primary; a plain
/// store's gate accepts the deposed owner's fence (the loss
/// RELIABILITY.md documents); a store refusing fences from before a
/// failover refuses it, and accepts the owners who took their leases
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_deposed_owners_are_refused_when_asked() {
    const TEST: &str = "after_a_failover_deposed_owners_are_refused_when_asked";
    let Some(primary) = private_server(TEST, &[]).await else {
        return;
    };
    let port = primary.port().to_string();
    let replica = PrivateRedis::start_with(&["--replicaof", "127.0.0.1", &port])
        .await
        .expect("a replica");
    let old = connect(primary.url()).await.expect("the primary");
    let first = admits_to(&old, "run", "worker-a").await;
    assert_eq!(
        old.check_fence("resource", first.fence)
            .await
            .expect("a check"),
        FenceCheck::Accepted
    );
    let mut raw_primary = redis::Client::open(primary.url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    // Everything so far reaches the replica before it is promoted (the
    // replica attaches in its own time: WAIT in short steps, bounded).
    let give_up = tokio::time::Instant::now() + PATIENT;
    loop {
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(100)
            .query_async(&mut raw_primary)
            .await
            .expect("WAIT");
        if acknowledged == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the replica never acknowledged"
        );
    }
    let mut raw_replica = redis::Client::open(replica.url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut raw_replica)
        .await
        .expect("promoted");

    // The successor's admission and gate write, on the old primary only.
    let successor = admits_to(&old, "run-successor", "worker-b").await;
    assert_eq!(
        old.check_fence("resource", successor.fence)
            .await
            .expect("a check"),
        FenceCheck::Accepted
    );
    drop(old);
    drop(primary);

    let plain = connect(replica.url()).await.expect("the promoted replica");
    assert_eq!(
        plain
            .check_fence("resource", first.fence)
            .await
            .expect("a check"),
        FenceCheck::Accepted,
        "the plain gate lost the successor's write"
    );
    let refusing =
        RedisStore::connect(config(replica.url()).refuse_fences_from_before_failover(true))
            .await
            .expect("a refusing store");
    let refused = refusing
        .check_fence("resource", first.fence)
        .await
        .expect("a check");
    assert!(
        matches!(refused, FenceCheck::Stale(_)),
        "the deposed owner: {refused:?}"
    );
    let again = admits_to(&refusing, "run-again", "worker-a").await;
    assert!(
        again.fence > successor.fence,
        "fence {} after the failover, {} before it",
        again.fence,
        successor.fence
    );
    assert_eq!(
        refusing
            .check_fence("resource", again.fence)
            .await
            .expect("a check"),
        FenceCheck::Accepted
    );
}

/// Behind Sentinel (`redis+sentinel://`), the store finds the primary,
/// follows it through failovers (the primary killed, a replica promoted)
/// and never writes to a replica; a service the Sentinels do not monitor
/// is refused, once the connect timeout has passed (mid-failover the
/// Sentinels name no primary for a while), with a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_finds_the_primary_and_follows_its_failovers() {
    const TEST: &str = "sentinel_finds_the_primary_and_follows_its_failovers";
    if let Some(reason) = PrivateRedis::unavailable_reason() {
        tenure_conformance::skip_unless_required(TEST, &reason);
        return;
    }
    let mut sentinels = PrivateSentinels::start(1)
        .await
        .expect("a Sentinel deployment");
    let unknown = sentinels.url().replace(SERVICE, "no-such-service");
    let error = RedisStore::connect(
        RedisConfig::new(unknown, "deployment").connect_timeout(Duration::from_secs(1)),
    )
    .await
    .expect_err("an unknown service");
    assert_eq!(error.kind(), ErrorKind::Config, "{error}");
    assert!(error.message().contains("no-such-service"), "{error}");

    let store =
        RedisStore::connect(config(sentinels.url()).operation_timeout(Duration::from_secs(1)))
            .await
            .expect("the primary, through the Sentinels");
    let mut fences = vec![admits_to(&store, "before", "worker").await.fence];
    for round in 0..2 {
        sentinels.fail_over().await.expect("a failover");
        let id = format!("after-failover-{round}");
        let give_up = tokio::time::Instant::now() + PATIENT;
        let record = loop {
            match store
                .admit(&AdmitRequest::new(&id, "worker").ttl(TTL))
                .await
            {
                Ok(Admission::Admitted { record, .. }) => break record,
                Ok(other) => panic!("{id}: {other:?}"),
                Err(error) => {
                    assert!(error.is_retryable(), "{error}");
                    assert!(
                        tokio::time::Instant::now() < give_up,
                        "never followed: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        assert!(record.fence > *fences.last().expect("a fence"));
        fences.push(record.fence);
        // Written to the new primary, not to a replica.
        let primary = connect(sentinels.primary_url().await.expect("the primary"))
            .await
            .expect("the new primary alone");
        assert_eq!(
            primary
                .get(&id)
                .await
                .expect("a read")
                .map(|found| found.fence),
            Some(record.fence)
        );
    }
}

/// A store waiting for one replica (`wait_replicas=1` in the URL) on a
/// primary that has none: its writes answer a retryable `Unavailable`
/// saying that no replica confirmed them, its reads answer; once a
/// replica follows, its writes are acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_their_replicas_when_asked() {
    const TEST: &str = "writes_wait_for_their_replicas_when_asked";
    let Some(primary) = private_server(TEST, &[]).await else {
        return;
    };
    let store = connect(format!(
        "{}?wait_replicas=1&wait_timeout_ms=100",
        primary.url()
    ))
    .await
    .expect("connects without its replica");
    assert_eq!(
        store.waits_for_replicas().map(|wait| wait.replicas),
        Some(1)
    );
    let error = store
        .admit(&AdmitRequest::new("unconfirmed", "worker").ttl(TTL))
        .await
        .expect_err("no replica confirms the write");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(error.is_retryable(), "{error}");
    assert!(
        error.message().contains("confirmed by 0 of the 1 replicas"),
        "{error}"
    );
    // The write is on the primary: its outcome was unknown, not refused.
    assert!(store.get("unconfirmed").await.expect("a read").is_some());

    let port = primary.port().to_string();
    let _replica = PrivateRedis::start_with(&["--replicaof", "127.0.0.1", &port])
        .await
        .expect("a replica");
    // The replica attaches in its own time: there is no signal to wait on.
    let give_up = tokio::time::Instant::now() + PATIENT;
    let mut round = 0;
    loop {
        round += 1;
        let id = format!("confirmed-{round}");
        match store
            .admit(&AdmitRequest::new(&id, "worker").ttl(TTL))
            .await
        {
            Ok(Admission::Admitted { .. }) => break,
            Ok(other) => panic!("{id}: {other:?}"),
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
                assert!(
                    tokio::time::Instant::now() < give_up,
                    "the replica never confirmed: {error}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    // A server's refusal keeps its code and text through the pipeline
    // carrying WAIT: a lost function library is still loaded again.
    let mut raw = redis::Client::open(primary.url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .expect("flushed");
    admits(&store, "after-the-flush").await;
}

/// An address where nothing listens is refused soon, saying what to check,
/// however long the connect timeout: a wrong port is not waited out.
#[tokio::test]
async fn an_address_where_nothing_listens_is_refused_before_the_connect_timeout() {
    let port = tenure_test_support::servers::free_port().expect("a free port");
    let config = RedisConfig::new(format!("redis://127.0.0.1:{port}"), "deployment")
        .connect_timeout(Duration::from_secs(3600));
    let error = RedisStore::connect(config)
        .await
        .expect_err("nobody listens there");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error.message().contains("nothing accepts connections")
            && error.message().contains(&port.to_string()),
        "{error}"
    );
}

/// A user without the release channel's permission (Redis 7 gives new ACL
/// users none): the scripts' `PUBLISH` is refused, yet every release is
/// written whole (the scope is free, the record finished) and no call
/// fails; only the notices are missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_permission_releases_whole_without_notices() {
    const TEST: &str = "a_user_without_channel_permission_releases_whole_without_notices";
    let acl = ["--user", "app", "on", ">pw", "~*", "resetchannels", "+@all"];
    let Some(server) = private_server(TEST, &acl).await else {
        return;
    };
    let url = server.url().replacen("redis://", "redis://app:pw@", 1);
    let store = connect(url).await.expect("the ACL user connects");
    let request = AdmitRequest::new("held", "worker-a").scope("shared");
    let Admission::Admitted { record, .. } = store.admit(&request).await.expect("admit") else {
        panic!("a free scope was refused");
    };
    let claim = record.claim().expect("an owner");
    let finished = store
        .transition(&claim, &tenure_lease_core::StatusChange::succeeded())
        .await
        .expect("the release applies though its notice is refused");
    assert!(
        matches!(finished, tenure_lease_core::Transition::Applied(_)),
        "{finished:?}"
    );
    let next = store
        .admit(&AdmitRequest::new("next", "worker-b").scope("shared"))
        .await
        .expect("admit after the release");
    assert!(next.admitted().is_some(), "the scope stayed held: {next:?}");
    assert!(
        store
            .list_active()
            .await
            .expect("list")
            .iter()
            .all(|r| r.id != "held"),
        "the finished record is still indexed as active"
    );
}

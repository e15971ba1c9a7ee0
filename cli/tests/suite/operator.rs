//! The operator's repairs of issue 31 end to end, on every backend:
//! `release` of a lease under its claim, `cancel` of a run whose owner is
//! gone, `retry --all --queue Q`, the counts of `purge --dry-run`, and
//! `queues`.
//! Each checks what the binary printed, its exit code, and what the store
//! holds afterwards.

use crate::support;

use std::time::Duration;

use predicates::prelude::*;
use predicates::str::contains;
use tenure::queue::{ClaimRequest, FailAction, JobState, NewJob};
use tenure::{
    AdmitRequest, JobQueue as _, LeaseStore as _, Status, StatusChange, Transition,
    TransitionRejection,
};

use support::{json, tenure, with_postgres, with_redis, with_sqlite, Subject};

const HOUR: Duration = Duration::from_secs(3600);

/// What the command printed on stdout, as text; panics unless it ran
/// successfully.
fn stdout(command: &mut assert_cmd::Command) -> String {
    let output = command.assert().success().get_output().stdout.clone();
    String::from_utf8(output).expect("UTF-8 output")
}

/// `release`: an adopted lease given up at once under the fence `take-over`
/// printed; stale, finished and unknown claims refused with exit 1.
async fn release_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    // No lease: an orphan at once.
    store
        .admit(&AdmitRequest::new("run-stuck", "worker-gone").scope("account:7"))
        .await
        .expect("admitted");
    let adopted = stdout(&mut tenure(
        url,
        &["take-over", "run-stuck", "--adopt", "--ttl", "5m"],
    ));
    let record = store.get("run-stuck").await.unwrap().expect("stored");
    assert_eq!(record.status, Status::Running);
    let fence = record.fence.to_string();
    assert!(
        adopted.contains(&format!(
            "tenure release run-stuck --owner tenure-cli --fence {fence}"
        )),
        "{adopted}"
    );
    // The scope stays held by the CLI's adoption...
    let blocked = store
        .admit(&AdmitRequest::new("run-next", "worker-b").scope("account:7"))
        .await
        .unwrap();
    assert!(blocked.admitted().is_none(), "{blocked:?}");

    // ...a stale fence or another owner changes nothing...
    let stale = (record.fence + 1).to_string();
    tenure(url, &["release", "run-stuck", "--fence", &stale])
        .assert()
        .code(1)
        .stderr(
            contains("was not released, nothing changed")
                .and(contains("no longer holds it"))
                .and(contains("tenure show run-stuck")),
        );
    tenure(
        url,
        &[
            "release",
            "run-stuck",
            "--owner",
            "worker-gone",
            "--fence",
            &fence,
        ],
    )
    .assert()
    .code(1)
    .stderr(contains("no longer holds it"));
    assert_eq!(store.get("run-stuck").await.unwrap(), Some(record.clone()));

    // ...and the claim gives it up: interrupted, scopes free at once.
    tenure(url, &["release", "run-stuck", "--fence", &fence])
        .assert()
        .success()
        .stdout(contains("released \"run-stuck\": interrupted").and(contains("scopes are free")));
    let released = store.get("run-stuck").await.unwrap().expect("kept");
    assert_eq!(released.status, Status::Interrupted);
    assert_eq!(released.fence, record.fence, "a release draws no fence");
    assert_eq!(
        released.stop_reason.as_deref(),
        Some("released by an operator (tenure release)")
    );
    let admitted = store
        .admit(&AdmitRequest::new("run-next", "worker-b").scope("account:7"))
        .await
        .unwrap();
    assert!(
        admitted.admitted().is_some(),
        "the scope is free: {admitted:?}"
    );

    // Given up once: a second release is refused.
    tenure(url, &["release", "run-stuck", "--fence", &fence])
        .assert()
        .code(1)
        .stderr(contains("it is interrupted"));
    tenure(url, &["release", "no-such-run", "--fence", "1"])
        .assert()
        .code(1)
        .stderr(contains("no lease record with that id"));
    tenure(url, &["release", "run-stuck", "--fence", "0"])
        .assert()
        .code(2)
        .stderr(contains("fences start at 1"));
    tenure(url, &["release", "run-stuck"]).assert().code(2);

    // A pending record under its claim cannot be interrupted: failed.
    let pending = store
        .admit(&AdmitRequest::new("run-pending", "worker-c").ttl(HOUR))
        .await
        .unwrap();
    let pending = pending.admitted().expect("admitted").clone();
    let written = json(&mut tenure(
        url,
        &[
            "release",
            "run-pending",
            "--owner",
            "worker-c",
            "--fence",
            &pending.fence.to_string(),
            "--reason",
            "host drained",
            "--json",
        ],
    ));
    assert_eq!(written["status"], "Failed", "{written}");
    assert_eq!(written["stop_reason"], "host drained", "{written}");
    // A finished record is refused, and stays as it was.
    let finished = store.get("run-pending").await.unwrap().expect("kept");
    tenure(
        url,
        &[
            "release",
            "run-pending",
            "--owner",
            "worker-c",
            "--fence",
            &pending.fence.to_string(),
        ],
    )
    .assert()
    .code(1)
    .stderr(contains("it already finished (failed)"));
    assert_eq!(store.get("run-pending").await.unwrap(), Some(finished));
}

/// `cancel`: a live holder refused, an orphan failed under a new fence that
/// refuses the old owner.
async fn cancel_story(subject: Subject) {
    let (url, store) = (subject.url.as_str(), &subject.store);
    let live = store
        .admit(&AdmitRequest::new("run-live", "worker-a").ttl(HOUR))
        .await
        .unwrap();
    let live = live.admitted().expect("admitted").clone();
    tenure(url, &["cancel", "run-live"])
        .assert()
        .code(1)
        .stderr(
            contains("was not cancelled, nothing changed")
                .and(contains("still valid"))
                .and(contains("cannot be cancelled from outside its worker")),
        );
    assert_eq!(store.get("run-live").await.unwrap(), Some(live));

    let orphan = store
        .admit(&AdmitRequest::new("run-orphan", "worker-b"))
        .await
        .unwrap();
    let orphan = orphan.admitted().expect("admitted").clone();
    tenure(url, &["cancel", "run-orphan", "--claimer", "oncall"])
        .assert()
        .success()
        .stdout(contains("cancelled \"run-orphan\": failed by oncall"));
    let cancelled = store.get("run-orphan").await.unwrap().expect("kept");
    assert_eq!(cancelled.status, Status::Failed);
    assert_eq!(cancelled.stop_reason.as_deref(), Some("cancelled"));
    assert_eq!(cancelled.error.as_deref(), Some("cancelled"));
    assert!(cancelled.fence > orphan.fence, "{cancelled:?}");
    // The old owner's writes are refused from now on.
    let late = store
        .transition(&orphan.claim().expect("owned"), &StatusChange::succeeded())
        .await
        .unwrap();
    assert_eq!(late, Transition::Rejected(TransitionRejection::Stale));

    tenure(url, &["cancel", "run-orphan"])
        .assert()
        .code(1)
        .stderr(contains("already finished (failed)"));
    tenure(url, &["cancel", "no-such-run"])
        .assert()
        .code(1)
        .stderr(contains("no lease record with that id"));
    store
        .admit(&AdmitRequest::new("run-other", "worker-c"))
        .await
        .unwrap();
    let failed = json(&mut tenure(
        url,
        &[
            "cancel",
            "run-other",
            "--reason",
            "customer asked",
            "--json",
        ],
    ));
    assert_eq!(failed["error"], "customer asked", "{failed}");
    assert_eq!(failed["stop_reason"], "cancelled", "{failed}");
}

/// Dead-letters `count` new jobs of `queue`, ids `{queue}-{n}`.
async fn dead_letters(subject: &Subject, queue: &str, count: usize) {
    let store = &subject.store;
    for n in 0..count {
        store
            .enqueue(&NewJob::new(queue, serde_json::json!({ "n": n })).id(format!("{queue}-{n}")))
            .await
            .expect("enqueued");
    }
    let claimed = store
        .claim(&ClaimRequest::new(queue, "worker-a", HOUR).limit(count))
        .await
        .expect("claimed");
    assert_eq!(claimed.len(), count);
    for job in claimed {
        store
            .fail(&job.claim, "smtp said no", FailAction::DeadLetter)
            .await
            .expect("dead-lettered");
    }
}

/// `retry --all --queue Q`: every dead letter of that queue, over several
/// pages, and none of another queue.
async fn retry_all_story(subject: Subject) {
    let url = subject.url.clone();
    dead_letters(&subject, "mail", 5).await;
    dead_letters(&subject, "other", 1).await;
    let store = &subject.store;

    tenure(
        &url,
        &["retry", "--all", "--queue", "mail", "--page-size", "2"],
    )
    .assert()
    .success()
    .stdout(contains(
        "requeued 5 dead letters of queue \"mail\", attempts reset",
    ));
    for n in 0..5 {
        let job = store
            .get_job(&format!("mail-{n}"))
            .await
            .unwrap()
            .expect("kept");
        assert_eq!(job.state, JobState::Queued, "{job:?}");
        assert_eq!(job.attempt, 0, "{job:?}");
    }
    let other = store.get_job("other-0").await.unwrap().expect("kept");
    assert_eq!(other.state, JobState::DeadLettered, "another queue is left");

    let again = json(&mut tenure(
        &url,
        &["retry", "--all", "--queue", "mail", "--json"],
    ));
    assert_eq!(again["requeued"], 0, "{again}");
    assert_eq!(again["queue"], "mail", "{again}");
    // One job by id still works.
    tenure(&url, &["retry", "other-0"])
        .assert()
        .success()
        .stdout(contains("requeued \"other-0\""));

    tenure(&url, &["retry", "--all"]).assert().code(2);
    tenure(&url, &["retry"]).assert().code(2);
    tenure(&url, &["retry", "other-0", "--all", "--queue", "mail"])
        .assert()
        .code(2);
    tenure(&url, &["retry", "other-0", "--queue", "mail"])
        .assert()
        .code(2);
}

/// `purge --dry-run`: the real purge's refusals, and counts that match
/// what the real purge then deletes.
async fn purge_dry_run_story(subject: Subject) {
    let url = subject.url.clone();
    let store = &subject.store;
    // Too long a retention: refused alike, dry or not, nothing deleted.
    for args in [
        &["purge", "--older-than", "200years", "--dry-run"][..],
        &["purge", "--older-than", "200years"],
    ] {
        tenure(&url, args).assert().code(2).stderr(
            contains("invalid_input")
                .and(contains("terminal_older_than"))
                .and(contains("longer than the maximum")),
        );
    }

    // Two finished records and an active one on scope a, one finished on b.
    for (id, scope, finish) in [
        ("run-1", "scope-a", true),
        ("run-2", "scope-a", true),
        ("run-3", "scope-b", true),
        ("run-4", "scope-a", false),
    ] {
        let admitted = store
            .admit(&AdmitRequest::new(id, "worker-a").scope(scope))
            .await
            .unwrap();
        let record = admitted.admitted().expect("admitted").clone();
        if finish {
            store
                .transition(&record.claim().unwrap(), &StatusChange::succeeded())
                .await
                .unwrap();
        }
    }
    dead_letters(&subject, "mail", 2).await;
    store
        .enqueue(&NewJob::new("mail", serde_json::json!({})).id("mail-queued"))
        .await
        .unwrap();

    let counted = json(&mut tenure(
        &url,
        &[
            "purge",
            "--older-than",
            "0s",
            "--dry-run",
            "--scope",
            "scope-a",
            "--scope",
            "scope-b",
            "--queue",
            "mail",
            "--queue",
            "empty",
            "--json",
        ],
    ));
    assert_eq!(counted["dry_run"], true, "{counted}");
    assert_eq!(counted["leases"], 3, "{counted}");
    assert_eq!(counted["leases_naming_scopes"], 3, "{counted}");
    assert_eq!(counted["jobs"]["mail"]["count"], 2, "{counted}");
    assert_eq!(counted["jobs"]["mail"]["at_least"], false, "{counted}");
    assert_eq!(counted["jobs"]["empty"]["count"], 0, "{counted}");
    tenure(
        &url,
        &[
            "purge",
            "--older-than",
            "0s",
            "--dry-run",
            "--scope",
            "scope-a",
            "--queue",
            "mail",
        ],
    )
    .assert()
    .success()
    .stdout(
        contains("would delete 3 lease records")
            .and(contains("of them, 2 lease records naming scope-a"))
            .and(contains("would delete 2 jobs of queue \"mail\""))
            .and(contains("Nothing was deleted")),
    );
    let young = json(&mut tenure(
        &url,
        &[
            "purge",
            "--older-than",
            "7d",
            "--dry-run",
            "--scope",
            "scope-a",
            "--queue",
            "mail",
            "--json",
        ],
    ));
    assert_eq!(young["leases"], 0, "{young}");
    assert_eq!(young["jobs"]["mail"]["count"], 0, "{young}");
    // No --queue: every queue with a finished job.
    let every = json(&mut tenure(
        &url,
        &["purge", "--older-than", "0s", "--dry-run", "--json"],
    ));
    assert_eq!(every["jobs"]["mail"]["count"], 2, "{every}");
    assert_eq!(
        every["jobs"].as_object().map(serde_json::Map::len),
        Some(1),
        "{every}"
    );
    assert_eq!(every["leases"], 3, "{every}");
    assert_eq!(
        every["leases_naming_scopes"],
        serde_json::Value::Null,
        "{every}"
    );
    tenure(&url, &["purge", "--older-than", "0s", "--dry-run"])
        .assert()
        .success()
        .stdout(
            contains("would delete 2 jobs of queue \"mail\"")
                .and(contains("would delete 3 lease records"))
                .and(contains("Nothing was deleted")),
        );
    assert!(
        store.get("run-1").await.unwrap().is_some(),
        "a dry run deletes nothing"
    );
    tenure(&url, &["purge", "--older-than", "0s", "--queue", "mail"])
        .assert()
        .code(2);

    let purged = json(&mut tenure(
        &url,
        &["purge", "--older-than", "0s", "--json"],
    ));
    assert_eq!(purged["leases"], 3, "{purged}");
    assert_eq!(purged["jobs"], 2, "{purged}");
}

/// `queues`: every queue with a job, counted by state, in name order, as a
/// table and as JSON; an empty store says so; read-only.
async fn queues_story(subject: Subject) {
    let url = subject.url.clone();
    tenure(&url, &["queues"])
        .assert()
        .success()
        .stdout(contains("no queue holds a job"));
    dead_letters(&subject, "mail", 2).await;
    let store = &subject.store;
    for id in ["a-1", "a-2", "a-3"] {
        store
            .enqueue(&NewJob::new("archive", serde_json::json!({})).id(id))
            .await
            .expect("enqueued");
    }
    store
        .claim(&ClaimRequest::new("archive", "worker-a", HOUR))
        .await
        .expect("claimed");

    let table = stdout(&mut tenure(&url, &["queues"]));
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["QUEUE", "QUEUED", "CLAIMED", "COMPLETED", "DEAD", "TOTAL"],
            vec!["archive", "2", "1", "0", "0", "3"],
            vec!["mail", "0", "0", "0", "2", "2"],
        ],
        "{table}"
    );
    let counted = json(&mut tenure(&url, &["queues", "--json"]));
    assert_eq!(counted[0]["queue"], "archive", "{counted}");
    assert_eq!(counted[0]["queued"], 2, "{counted}");
    assert_eq!(counted[0]["claimed"], 1, "{counted}");
    assert_eq!(counted[1]["queue"], "mail", "{counted}");
    assert_eq!(counted[1]["dead_lettered"], 2, "{counted}");
    assert_eq!(counted.as_array().map(Vec::len), Some(2), "{counted}");
    tenure(&url, &["jobs"])
        .assert()
        .code(2)
        .stderr(contains("tenure queues lists every queue"));
}

/// One module per story, a test per backend: `story::sqlite`,
/// `story::postgres` and `story::redis`.
macro_rules! on_each_backend {
    ($($story:ident),* $(,)?) => {$(
        mod $story {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                with_sqlite(super::$story).await;
            }

            #[tokio::test]
            async fn postgres() {
                with_postgres(concat!(stringify!($story), "::postgres"), super::$story).await;
            }

            #[tokio::test]
            async fn redis() {
                with_redis(concat!(stringify!($story), "::redis"), super::$story).await;
            }
        }
    )*};
}

on_each_backend!(
    release_story,
    cancel_story,
    retry_all_story,
    purge_dry_run_story,
    queues_story
);

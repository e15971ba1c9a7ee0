//! `tenure serve` over HTTP, on every backend: every page against a store
//! the test seeded through the library, every action done through its
//! form, and every refusal (read-only, no session, wrong token, bad CSRF
//! token, unknown host), checking the status, the page, and what the store
//! holds afterwards. Requests go to the router without a socket; one test
//! runs the built binary on a loopback port.

use crate::support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use tenure::queue::{ClaimRequest, FailAction, JobQueue as _, JobState, NewJob};
use tenure::{AdmitRequest, FenceStore as _, LeaseStore as _, Status, Store};
use tenure_cli::serve::{self, Options, Token};
use tower::ServiceExt as _;

use support::{with_postgres, with_redis, with_sqlite, Subject};

const HOUR: Duration = Duration::from_secs(3600);
const TOKEN: &str = "a-token-for-the-tests-0123456789";
/// An id made to break HTML, URLs and paths.
const TRICKY: &str = "<b>run</b> & \"q\"/x?y=1#z";

/// An answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    }

    /// The session cookie it set (`name=value`).
    fn cookie(&self) -> String {
        let set = self
            .headers
            .get(header::SET_COOKIE)
            .and_then(|value| value.to_str().ok())
            .expect("a cookie was set");
        assert!(set.contains("HttpOnly"), "{set}");
        assert!(set.contains("SameSite=Lax"), "{set}");
        set.split(';').next().unwrap_or_default().to_owned()
    }

    /// The CSRF token of the page's first form.
    fn csrf(&self) -> String {
        let marker = r#"name="csrf" value=""#;
        let start = self.body.find(marker).expect("a form with a CSRF token") + marker.len();
        let end = self.body[start..].find('"').expect("the value ends");
        self.body[start..start + end].to_owned()
    }

    #[track_caller]
    fn expect(self, status: StatusCode, text: &str) -> Self {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(
            self.body.contains(text),
            "{text:?} missing from {}",
            self.body
        );
        self
    }
}

/// The web view of one store, driven without a socket.
struct Web {
    router: axum::Router,
    cookie: Option<String>,
}

impl Web {
    fn new(store: &Arc<dyn Store>, options: Options) -> Self {
        Web {
            router: serve::router(Arc::clone(store), options),
            cookie: None,
        }
    }

    fn writable(store: &Arc<dyn Store>) -> Self {
        Web::new(store, Options::read_only("test-store").allow_write(token()))
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router answers");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("the body is read")
            .to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).expect("UTF-8"),
        }
    }

    fn request(&self, method: Method, path: &str) -> axum::http::request::Builder {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(cookie) = &self.cookie {
            builder = builder.header(header::COOKIE, cookie);
        }
        builder
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.request(Method::GET, path).body(Body::empty()).unwrap())
            .await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let body = serde_urlencoded::to_string(form).unwrap();
        self.send(
            self.request(Method::POST, path)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
    }

    async fn sign_in(&mut self) {
        let answer = self
            .post("/login", &[("token", TOKEN), ("next", "/queues")])
            .await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        assert_eq!(answer.location(), "/queues");
        self.cookie = Some(answer.cookie());
    }

    /// Opens the action's confirmation page, then posts its form with
    /// `fields` added.
    async fn confirm(
        &self,
        action: &str,
        target: &[(&str, &str)],
        fields: &[(&str, &str)],
    ) -> Answer {
        let query = serde_urlencoded::to_string(target).unwrap();
        let page = self
            .get(&format!("/actions/{action}?{query}"))
            .await
            .expect(StatusCode::OK, "Confirm");
        let csrf = page.csrf();
        let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf)];
        form.extend_from_slice(target);
        form.extend_from_slice(fields);
        self.post(&format!("/actions/{action}"), &form).await
    }
}

fn token() -> Token {
    Token::new(TOKEN).expect("a long enough token")
}

fn path(base: &str, parameters: &[(&str, &str)]) -> String {
    format!(
        "{base}?{}",
        serde_urlencoded::to_string(parameters).unwrap()
    )
}

async fn with_memory<F, Fut>(test: F)
where
    F: FnOnce(Subject) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let store = tenure::connect("memory:").await.expect("a memory store");
    test(Subject {
        url: "memory:".to_owned(),
        store,
    })
    .await;
}

/// Leases (live, orphaned, counted, tricky), a queue with a queued job
/// and a dead letter, and a gate.
async fn seed(store: &Arc<dyn Store>) {
    let live = store
        .admit(
            &AdmitRequest::new("run-live", "worker-a")
                .scope("account:1")
                .kind("report")
                .ttl(HOUR),
        )
        .await
        .unwrap();
    let claim = live.admitted().expect("free").claim().expect("owned");
    store
        .renew_with_progress(&claim, HOUR, &serde_json::json!({"done": 7, "of": 9}))
        .await
        .unwrap();
    // No lease: an orphan at once.
    store
        .admit(&AdmitRequest::new("run-orphan", "worker-b").scope("account:2"))
        .await
        .unwrap();
    store
        .admit(
            &AdmitRequest::new("run-slot", "worker-c")
                .counted_scope("exports", 3)
                .ttl(HOUR),
        )
        .await
        .unwrap();
    store
        .admit(&AdmitRequest::new(TRICKY, "worker-d").ttl(HOUR))
        .await
        .unwrap();
    assert!(store
        .check_fence("account:1", 41)
        .await
        .unwrap()
        .is_accepted());

    store
        .enqueue(
            &NewJob::new("emails", serde_json::json!({"to": "a@example.com"})).id("job-waiting"),
        )
        .await
        .unwrap();
    store
        .enqueue(
            &NewJob::new("emails", serde_json::json!({"to": "b@example.com"}))
                .id("job-dead")
                .max_attempts(1)
                .priority(10),
        )
        .await
        .unwrap();
}

/// Every page, read-only, shows what the store holds.
async fn pages_show_the_store(subject: Subject) {
    let store = &subject.store;
    seed(store).await;
    let web = Web::new(store, Options::read_only("test-store"));

    let leases = web.get("/leases").await.expect(StatusCode::OK, "run-live");
    for text in [
        "run-orphan",
        "orphan",
        "run-slot",
        "exports",
        "(slot 0)",
        "(in ",
        "no lease",
    ] {
        assert!(leases.body.contains(text), "{text:?} in {}", leases.body);
    }
    // Escaped, and linked by a percent-encoded query.
    assert!(!leases.body.contains("<b>run</b>"), "{}", leases.body);
    assert!(leases
        .body
        .contains("&lt;b&gt;run&lt;/b&gt; &amp; &quot;q&quot;/x?y=1#z"));
    assert!(leases
        .body
        .contains(&path("/lease", &[("id", TRICKY)]).replace('&', "&amp;")));

    let expired = web
        .get("/leases?status=expired")
        .await
        .expect(StatusCode::OK, "run-orphan");
    assert!(!expired.body.contains("run-live"), "{}", expired.body);
    let by_scope = web
        .get("/leases?status=any&scope=account%3A1")
        .await
        .expect(StatusCode::OK, "run-live");
    assert!(!by_scope.body.contains("run-orphan"));
    let by_holder = web
        .get("/leases?holder=worker-b")
        .await
        .expect(StatusCode::OK, "run-orphan");
    assert!(!by_holder.body.contains("run-live"));
    let by_kind = web
        .get("/leases?kind=report")
        .await
        .expect(StatusCode::OK, "run-live");
    assert!(!by_kind.body.contains("run-orphan"));
    web.get("/leases?status=failed")
        .await
        .expect(StatusCode::OK, "give a scope");
    web.get("/leases?status=bogus")
        .await
        .expect(StatusCode::BAD_REQUEST, "Filter by one of");

    let lease = web
        .get("/lease?id=run-live")
        .await
        .expect(StatusCode::OK, "worker-a");
    for text in ["&quot;done&quot;: 7", "account:1", "41", "Read-only"] {
        assert!(lease.body.contains(text), "{text:?} in {}", lease.body);
    }
    let tricky = web
        .get(&path("/lease", &[("id", TRICKY)]))
        .await
        .expect(StatusCode::OK, "worker-d");
    assert!(!tricky.body.contains("<b>run"));
    let slot = web
        .get("/lease?id=run-slot")
        .await
        .expect(StatusCode::OK, "exports#0");
    assert!(slot.body.contains("(slot 0)"));
    let redirected = web.get("/lease?id=job-waiting").await;
    assert_eq!(redirected.status, StatusCode::SEE_OTHER);
    assert_eq!(redirected.location(), "/job?id=job-waiting");
    web.get("/lease?id=nobody")
        .await
        .expect(StatusCode::NOT_FOUND, "No lease record or job");
    web.get("/lease")
        .await
        .expect(StatusCode::NOT_FOUND, "Name the lease");

    dead_letter(store).await;
    let queues = web.get("/queues").await.expect(StatusCode::OK, "emails");
    assert!(queues.body.contains("/dead?queue=emails"));
    assert!(!queues.body.contains("Purge"), "read-only: {}", queues.body);
    let jobs = web
        .get("/jobs?queue=emails")
        .await
        .expect(StatusCode::OK, "job-waiting");
    assert!(jobs.body.contains("job-dead"));
    let dead_only = web
        .get("/jobs?queue=emails&state=dead_lettered")
        .await
        .expect(StatusCode::OK, "job-dead");
    assert!(!dead_only.body.contains("job-waiting"));
    web.get("/jobs?queue=emails&state=bogus")
        .await
        .expect(StatusCode::BAD_REQUEST, "Filter by");
    let dead = web
        .get("/dead?queue=emails")
        .await
        .expect(StatusCode::OK, "smtp said no");
    assert!(!dead.body.contains("job-waiting"));
    assert!(!dead.body.contains("Retry"), "read-only: {}", dead.body);
    web.get("/job?id=job-dead")
        .await
        .expect(StatusCode::OK, "b@example.com");
    web.get("/job?id=nobody")
        .await
        .expect(StatusCode::NOT_FOUND, "No job");

    let gates = web.get("/gates").await.expect(StatusCode::OK, "account:1");
    assert!(gates.body.contains("41"));
    web.get("/gates?resource=account%3A1")
        .await
        .expect(StatusCode::OK, "highest fence accepted");
    web.get("/gates?after=account%3A1")
        .await
        .expect(StatusCode::OK, "No gate.");
    web.get("/gates?resource=never")
        .await
        .expect(StatusCode::OK, "no gate has accepted");

    let watch = web.get("/watch").await.expect(StatusCode::OK, "run-live");
    assert!(watch.body.contains("/watch/events"));
    let events = web
        .router
        .clone()
        .oneshot(Request::get("/watch/events").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(events.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = events.into_body();
    let frame = body
        .frame()
        .await
        .expect("a first frame")
        .expect("readable");
    let frame = String::from_utf8(frame.into_data().expect("data").to_vec()).unwrap();
    assert!(
        frame.starts_with("data: ") && frame.contains("run-live"),
        "{frame}"
    );

    web.get("/assets/style.css")
        .await
        .expect(StatusCode::OK, "--accent");
    web.get("/assets/tenure.js")
        .await
        .expect(StatusCode::OK, "EventSource");
    web.get("/nowhere")
        .await
        .expect(StatusCode::NOT_FOUND, "no page here");
    let root = web.get("/").await;
    assert_eq!(root.location(), "/leases");
    for (name, value) in [
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        assert_eq!(root.headers[name], value);
    }
    assert!(root.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
}

/// Claims `job-dead` (the highest priority) and fails it into the dead
/// letters.
async fn dead_letter(store: &Arc<dyn Store>) {
    let claimed = store
        .claim(&ClaimRequest::new("emails", "worker-a", HOUR))
        .await
        .unwrap()
        .pop()
        .expect("a job to claim");
    assert_eq!(claimed.job.id, "job-dead");
    store
        .fail(&claimed.claim, "smtp said no", FailAction::DeadLetter)
        .await
        .unwrap();
}

/// Every action through its confirmation page and form, and what the
/// store holds afterwards; refusals change nothing.
async fn actions_repair_the_store(subject: Subject) {
    let store = &subject.store;
    seed(store).await;
    dead_letter(store).await;
    let orphan = fence_of(store, "run-orphan").await;
    let live = fence_of(store, "run-live").await;

    // Read-only: no confirmation page, no action, nothing changed.
    let read_only = Web::new(store, Options::read_only("test-store"));
    read_only
        .get("/actions/take-over?id=run-orphan")
        .await
        .expect(StatusCode::FORBIDDEN, "--allow-write");
    read_only
        .post("/actions/take-over", &[("id", "run-orphan"), ("csrf", "x")])
        .await
        .expect(StatusCode::FORBIDDEN, "read-only");
    assert_eq!(fence_of(store, "run-orphan").await, orphan);

    let mut web = Web::writable(store);
    // Not signed in: sent to sign in, then back to the confirmation.
    let unsigned = web.get("/actions/take-over?id=run-orphan").await;
    assert_eq!(unsigned.status, StatusCode::SEE_OTHER);
    assert!(
        unsigned
            .location()
            .starts_with("/login?next=%2Factions%2Ftake-over"),
        "{}",
        unsigned.location()
    );
    web.post("/actions/take-over", &[("id", "run-orphan"), ("csrf", "x")])
        .await
        .expect(StatusCode::UNAUTHORIZED, "Sign in first");
    web.get("/login")
        .await
        .expect(StatusCode::OK, "type=\"password\"");
    web.post("/login", &[("token", "not-the-token-at-all-no")])
        .await
        .expect(StatusCode::FORBIDDEN, "Wrong token");
    web.sign_in().await;
    web.get("/leases").await.expect(StatusCode::OK, "Sign out");

    // A form without the session's CSRF token does nothing.
    web.post(
        "/actions/take-over",
        &[("id", "run-orphan"), ("csrf", "forged")],
    )
    .await
    .expect(StatusCode::FORBIDDEN, "CSRF");
    web.post("/actions/take-over", &[("id", "run-orphan")])
        .await
        .expect(StatusCode::FORBIDDEN, "CSRF");
    assert_eq!(fence_of(store, "run-orphan").await, orphan);

    // Take over an orphan: failed under a new fence.
    let done = web
        .confirm(
            "take-over",
            &[("id", "run-orphan")],
            &[("reason", "host lost")],
        )
        .await
        .expect(StatusCode::OK, "Took over");
    let taken = store.get("run-orphan").await.unwrap().expect("kept");
    assert_eq!(taken.status, Status::Failed);
    assert!(taken.fence > orphan.1, "a new fence: {taken:?}");
    assert!(
        done.body.contains(&format!("fence {}", taken.fence)),
        "{}",
        done.body
    );
    assert_eq!(taken.error.as_deref(), Some("host lost"));
    assert_eq!(taken.owner.as_deref(), Some(serve::DEFAULT_CLAIMER));
    // A live holder is refused, and keeps its lease.
    web.confirm("take-over", &[("id", "run-live")], &[])
        .await
        .expect(StatusCode::CONFLICT, "still valid");
    web.confirm("cancel", &[("id", "run-live")], &[])
        .await
        .expect(StatusCode::CONFLICT, "a live holder cannot be cancelled");
    assert_eq!(fence_of(store, "run-live").await, live);
    web.get("/actions/take-over?id=nobody")
        .await
        .expect(StatusCode::NOT_FOUND, "No lease record");
    web.get("/actions/bogus")
        .await
        .expect(StatusCode::NOT_FOUND, "no action");

    // Release under the holder's claim; a wrong fence or none is refused.
    web.confirm(
        "release",
        &[("id", "run-live")],
        &[("owner", "worker-b"), ("fence", &live.1.to_string())],
    )
    .await
    .expect(StatusCode::CONFLICT, "no longer holds it");
    web.confirm(
        "release",
        &[("id", "run-live")],
        &[("owner", "worker-a"), ("fence", "one")],
    )
    .await
    .expect(StatusCode::BAD_REQUEST, "whole number");
    assert_eq!(fence_of(store, "run-live").await, live);
    web.confirm(
        "release",
        &[("id", "run-live")],
        &[("owner", "worker-a"), ("fence", &live.1.to_string())],
    )
    .await
    .expect(StatusCode::OK, "its scopes are free");
    // Pending: written failed (contract §5), its scopes free all the same.
    assert_eq!(fence_of(store, "run-live").await.0, Status::Failed);

    // Cancel an orphan whose lease ended.
    store
        .admit(&AdmitRequest::new("run-stuck", "worker-e"))
        .await
        .unwrap();
    web.confirm("cancel", &[("id", "run-stuck")], &[])
        .await
        .expect(StatusCode::OK, "Cancelled");
    let cancelled = store.get("run-stuck").await.unwrap().expect("kept");
    assert_eq!(
        cancelled.stop_reason.as_deref(),
        Some(tenure::keeper::CANCELLED)
    );

    // Retry a dead letter; again, it is refused.
    let retry_page = web
        .get("/actions/retry?id=job-dead")
        .await
        .expect(StatusCode::OK, "smtp said no");
    assert!(retry_page.body.contains("Confirm"));
    web.confirm("retry", &[("id", "job-dead")], &[])
        .await
        .expect(StatusCode::OK, "Requeued");
    assert_eq!(job_state(store, "job-dead").await, JobState::Queued);
    web.confirm("retry", &[("id", "job-dead")], &[])
        .await
        .expect(StatusCode::CONFLICT, "not dead-lettered");

    // Retry every dead letter of the queue.
    dead_letter(store).await;
    web.get("/dead?queue=emails")
        .await
        .expect(StatusCode::OK, "Retry all");
    web.confirm("retry-all", &[("queue", "emails")], &[])
        .await
        .expect(StatusCode::OK, "Requeued 1 dead letters");
    assert_eq!(job_state(store, "job-dead").await, JobState::Queued);

    // Purge: a bad retention is refused; a real one deletes what is old
    // enough (nothing here is).
    let csrf = web.get("/leases").await.csrf();
    web.post("/actions/purge", &[("csrf", &csrf), ("older_than", "soon")])
        .await
        .expect(StatusCode::BAD_REQUEST, "30s, 5m");
    // A form that cannot be read is answered with a page, and logged.
    web.post(
        "/actions/purge",
        &[("csrf", &csrf), ("older_than", "1h"), ("older_than", "2h")],
    )
    .await
    .expect(StatusCode::BAD_REQUEST, "could not be read");
    let counted = web
        .get("/actions/purge?older_than=1h")
        .await
        .expect(StatusCode::OK, "0</strong> lease records");
    assert!(
        counted.body.contains(r#"name="older_than" value="1h""#),
        "{}",
        counted.body
    );
    web.get("/actions/purge?older_than=soon")
        .await
        .expect(StatusCode::BAD_REQUEST, "30s, 5m");
    web.confirm("purge", &[("older_than", "1h")], &[])
        .await
        .expect(StatusCode::OK, "Deleted 0 lease records and 0 jobs");
    assert!(store.get("run-orphan").await.unwrap().is_some());
    // What finished (the orphan taken over, the run cancelled) goes with a
    // zero retention; what is active stays.
    web.get("/actions/purge?older_than=0s")
        .await
        .expect(StatusCode::OK, "lease records");
    let purged = web
        .confirm("purge", &[("older_than", "0s")], &[])
        .await
        .expect(StatusCode::OK, "Deleted");
    assert!(
        store.get("run-orphan").await.unwrap().is_none(),
        "{}",
        purged.body
    );
    assert!(store.get("run-stuck").await.unwrap().is_none());
    assert!(store.get("run-slot").await.unwrap().is_some());

    // Signing out needs the CSRF token, then actions need signing in.
    let page = web.get("/leases").await;
    web.post("/logout", &[("csrf", "forged")])
        .await
        .expect(StatusCode::FORBIDDEN, "CSRF");
    let out = web.post("/logout", &[("csrf", &page.csrf())]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    web.post(
        "/actions/purge",
        &[("csrf", &page.csrf()), ("older_than", "0s")],
    )
    .await
    .expect(StatusCode::UNAUTHORIZED, "Sign in first");
}

/// Every action is refused, changing nothing, on a read-only server,
/// without a session, and with another session's CSRF token.
async fn every_action_refuses_without_write_session_or_csrf(subject: Subject) {
    let store = &subject.store;
    seed(store).await;
    dead_letter(store).await;
    let forms: [(&str, Vec<(&str, &str)>); 6] = [
        ("take-over", vec![("id", "run-orphan")]),
        ("cancel", vec![("id", "run-orphan")]),
        (
            "release",
            vec![("id", "run-slot"), ("owner", "worker-c"), ("fence", "1")],
        ),
        ("retry", vec![("id", "job-dead")]),
        ("retry-all", vec![("queue", "emails")]),
        ("purge", vec![("older_than", "0s")]),
    ];
    let read_only = Web::new(store, Options::read_only("test-store"));
    let mut first = Web::writable(store);
    first.sign_in().await;
    let mut second = Web {
        router: first.router.clone(),
        cookie: None,
    };
    second.sign_in().await;
    let second_csrf = second.get("/leases").await.csrf();
    let before = snapshot(store).await;
    for (action, fields) in &forms {
        let path = format!("/actions/{action}");
        let mut form = vec![("csrf", second_csrf.as_str())];
        form.extend_from_slice(fields);
        read_only
            .post(&path, &form)
            .await
            .expect(StatusCode::FORBIDDEN, "read-only");
        let unsigned = Web {
            router: first.router.clone(),
            cookie: None,
        };
        unsigned
            .post(&path, &form)
            .await
            .expect(StatusCode::UNAUTHORIZED, "Sign in first");
        // The second session's token in the first session's form.
        first
            .post(&path, &form)
            .await
            .expect(StatusCode::FORBIDDEN, "CSRF");
        assert_eq!(snapshot(store).await, before, "{action} changed the store");
    }
}

/// What the actions could change: the records' statuses and fences, the
/// jobs' states.
async fn snapshot(store: &Arc<dyn Store>) -> Vec<String> {
    let mut seen = Vec::new();
    for id in ["run-orphan", "run-slot", "run-live"] {
        let record = store.get(id).await.unwrap();
        seen.push(format!("{id}: {:?}", record.map(|r| (r.status, r.fence))));
    }
    for id in ["job-dead", "job-waiting"] {
        let job = store.get_job(id).await.unwrap();
        seen.push(format!("{id}: {:?}", job.map(|j| j.state)));
    }
    seen
}

async fn fence_of(store: &Arc<dyn Store>, id: &str) -> (Status, u64) {
    let record = store.get(id).await.unwrap().expect("the record");
    (record.status, record.fence)
}

async fn job_state(store: &Arc<dyn Store>, id: &str) -> JobState {
    store.get_job(id).await.unwrap().expect("the job").state
}

#[tokio::test]
async fn pages_show_the_store_on_memory() {
    with_memory(pages_show_the_store).await;
}

#[tokio::test]
async fn pages_show_the_store_on_sqlite() {
    with_sqlite(pages_show_the_store).await;
}

#[tokio::test]
async fn pages_show_the_store_on_postgres() {
    with_postgres("pages_show_the_store_on_postgres", pages_show_the_store).await;
}

#[tokio::test]
async fn pages_show_the_store_on_redis() {
    with_redis("pages_show_the_store_on_redis", pages_show_the_store).await;
}

#[tokio::test]
async fn actions_repair_the_store_on_memory() {
    with_memory(actions_repair_the_store).await;
}

#[tokio::test]
async fn actions_repair_the_store_on_sqlite() {
    with_sqlite(actions_repair_the_store).await;
}

#[tokio::test]
async fn actions_repair_the_store_on_postgres() {
    with_postgres(
        "actions_repair_the_store_on_postgres",
        actions_repair_the_store,
    )
    .await;
}

#[tokio::test]
async fn actions_repair_the_store_on_redis() {
    with_redis(
        "actions_repair_the_store_on_redis",
        actions_repair_the_store,
    )
    .await;
}

#[tokio::test]
async fn every_action_refuses_without_write_session_or_csrf_on_memory() {
    with_memory(every_action_refuses_without_write_session_or_csrf).await;
}

#[tokio::test]
async fn every_action_refuses_without_write_session_or_csrf_on_sqlite() {
    with_sqlite(every_action_refuses_without_write_session_or_csrf).await;
}

#[tokio::test]
async fn a_token_file_guards_every_page() {
    let store = tenure::connect("memory:").await.unwrap();
    let mut web = Web::new(
        &store,
        Options::read_only("test-store").token_for_reads(token()),
    );
    let sent = web.get("/leases?status=expired").await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER);
    assert_eq!(sent.location(), "/login?next=%2Fleases%3Fstatus%3Dexpired");
    web.get("/assets/style.css")
        .await
        .expect(StatusCode::OK, "--accent");
    web.get("/login").await.expect(StatusCode::OK, "Sign in");
    web.post("/actions/purge", &[])
        .await
        .expect(StatusCode::UNAUTHORIZED, "needs the token");
    web.sign_in().await;
    let page = web
        .get("/leases")
        .await
        .expect(StatusCode::OK, "No lease records");
    // Reads only: a token file without --allow-write leaves it read-only.
    assert!(page.body.contains("read-only"));
    web.post("/actions/purge", &[("older_than", "0s")])
        .await
        .expect(StatusCode::FORBIDDEN, "read-only");
}

#[tokio::test]
async fn with_a_token_file_the_watch_stream_ends_at_sign_out() {
    let store = tenure::connect("memory:").await.unwrap();
    let mut web = Web::new(
        &store,
        Options::read_only("test-store")
            .token_for_reads(token())
            .refresh(Duration::from_millis(100)),
    );
    web.sign_in().await;
    let events = web
        .router
        .clone()
        .oneshot(
            web.request(Method::GET, "/watch/events")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = events.into_body();
    let first = body
        .frame()
        .await
        .expect("a first frame")
        .expect("readable");
    assert!(first
        .into_data()
        .is_ok_and(|data| data.starts_with(b"data: ")));
    let csrf = web.get("/leases").await.csrf();
    let out = web.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(
        body.frame().await.is_none(),
        "the stream ends once its session is gone"
    );
}

#[tokio::test]
async fn on_loopback_only_the_listening_address_is_answered() {
    let store = tenure::connect("memory:").await.unwrap();
    let web = Web::new(
        &store,
        Options::read_only("test-store").only_host("127.0.0.1:7474".parse().unwrap()),
    );
    for (host, status) in [
        ("127.0.0.1:7474", StatusCode::OK),
        ("localhost:7474", StatusCode::OK),
        ("LOCALHOST:7474", StatusCode::OK),
        ("evil.example:7474", StatusCode::BAD_REQUEST),
        ("127.0.0.1:7475", StatusCode::BAD_REQUEST),
    ] {
        let answer = web
            .send(
                Request::get("/leases")
                    .header(header::HOST, host)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(answer.status, status, "{host}");
    }
    let answer = web
        .send(Request::get("/leases").body(Body::empty()).unwrap())
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "no Host at all");
}

#[test]
fn a_non_loopback_address_needs_a_token_file() {
    support::tenure("memory:", &["serve", "--listen", "0.0.0.0:0"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("not a loopback address"));
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("token");
    std::fs::write(&short, "short\n").unwrap();
    support::tenure(
        "memory:",
        &[
            "serve",
            "--allow-write",
            "--token-file",
            short.to_str().unwrap(),
        ],
    )
    .assert()
    .code(2)
    .stderr(predicates::str::contains("shorter than 16 characters"));
    support::tenure(
        "memory:",
        &[
            "serve",
            "--token-file",
            dir.path().join("missing").to_str().unwrap(),
        ],
    )
    .assert()
    .code(2)
    .stderr(predicates::str::contains("cannot read the token file"));
}

/// The binary: prints its address and a token once, serves pages on
/// loopback, stops on SIGTERM.
#[test]
fn the_binary_serves_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("s.db").display());
    support::tenure(&url, &["migrate"]).assert().success();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tenure"))
        .env_remove("TENURE_URL")
        .args([
            "--url",
            &url,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-write",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tenure serve starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .strip_prefix("tenure serve: http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("the address line: {line:?}"))
        .to_owned();
    assert!(line.contains("actions allowed"), "{line}");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut token_line = String::new();
    stderr.read_line(&mut token_line).unwrap();
    assert!(
        token_line.contains("sign in to act with the token"),
        "{token_line}"
    );

    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET /leases HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("No lease records"), "{page}");

    // An open event stream does not keep it from stopping.
    let mut events = std::net::TcpStream::connect(&address).unwrap();
    write!(
        events,
        "GET /watch/events HTTP/1.1\r\nHost: {address}\r\n\r\n"
    )
    .unwrap();
    let mut first = [0_u8; 512];
    let read = events.read(&mut first).unwrap();
    assert!(
        String::from_utf8_lossy(&first[..read]).contains("text/event-stream"),
        "{}",
        String::from_utf8_lossy(&first[..read])
    );

    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("stopped"), "{rest}");
}

//! `tenure serve` in a real browser (headless Chromium over WebDriver), as
//! an operator uses it: a lease admitted by the test appears in the watch
//! view without a reload, the operator signs in, takes an orphan over
//! through its confirmation page and sees its fence change, retries a dead
//! letter; the main pages are saved as screenshots on the way
//! (`target/tmp/serve-screenshots/`, also on a phone-sized window).
//!
//! Every wait is for something to appear in the page (WebDriver's own
//! polling for an element), never a fixed sleep.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, Locator};
use tenure::queue::{ClaimRequest, FailAction, JobQueue as _, JobState, NewJob};
use tenure::{AdmitRequest, FenceStore as _, LeaseStore as _, Status, Store};
use tenure_cli::serve::{self, Options, Token};

use support::browser;

const HOUR: Duration = Duration::from_secs(3600);
const TOKEN: &str = "a-token-for-the-browser-0123456789";
/// WebDriver's Tab key.
const TAB: &str = "\u{e004}";
/// How long the page may take to show what the test waits for (the
/// machine may be loaded).
const APPEARS_WITHIN: Duration = Duration::from_secs(30);

/// The web view of `store` on a free loopback port, writable with
/// [`TOKEN`], until the returned sender is dropped.
async fn serve_on_loopback(
    store: &Arc<dyn Store>,
    label: &str,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let options = Options::read_only(label)
        .allow_write(Token::new(TOKEN).unwrap())
        .only_host(address)
        .refresh(Duration::from_millis(250));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve::serve(
        listener,
        serve::router(Arc::clone(store), options),
        async move {
            let _ = stopped.await;
        },
    ));
    (format!("http://{address}"), stop)
}

/// Waits until the page shows an element `css` whose text contains `text`.
async fn wait_for_text(client: &Client, css: &str, text: &str) -> fantoccini::elements::Element {
    let xpath = format!(
        "//{}[contains(normalize-space(.), {})]",
        css,
        xpath_literal(text)
    );
    client
        .wait()
        .at_most(APPEARS_WITHIN)
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|error| panic!("{text:?} in a <{css}> did not appear: {error}"))
}

/// `text` as an XPath string literal (no quote inside it here).
fn xpath_literal(text: &str) -> String {
    assert!(!text.contains('"'));
    format!("\"{text}\"")
}

/// The fence a lease page shows.
async fn fence_shown(client: &Client) -> String {
    client
        .find(Locator::Css("dd.fence"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn click_link(client: &Client, text: &str) {
    client
        .wait()
        .at_most(APPEARS_WITHIN)
        .for_element(Locator::LinkText(text))
        .await
        .unwrap_or_else(|error| panic!("no link {text:?}: {error}"))
        .click()
        .await
        .unwrap();
}

async fn click_button(client: &Client, text: &str) {
    wait_for_text(client, "button", text)
        .await
        .click()
        .await
        .unwrap();
}

/// The operator's night, on one store.
async fn operator_in_a_browser(store: Arc<dyn Store>, backend: &str, test: &str) {
    let Some(browser) = browser::start(test).await else {
        return;
    };
    let (base, _stop) = serve_on_loopback(&store, backend).await;
    let client = browser.client();
    let shot = |name: &str| format!("{backend}-{name}");

    // A live lease, a counted one, and a queue with a dead letter.
    store
        .admit(
            &AdmitRequest::new("nightly-report", "worker-a")
                .scope("account:1")
                .kind("report")
                .ttl(HOUR),
        )
        .await
        .unwrap();
    store
        .admit(
            &AdmitRequest::new("export-7", "worker-b")
                .counted_scope("exports", 3)
                .ttl(HOUR),
        )
        .await
        .unwrap();
    assert!(store
        .check_fence("account:1", 12)
        .await
        .unwrap()
        .is_accepted());
    store
        .enqueue(&NewJob::new("emails", serde_json::json!({"to": "ops@example.com"})).id("mail-1"))
        .await
        .unwrap();
    store
        .enqueue(
            &NewJob::new("emails", serde_json::json!({"to": "bounce@example.com"}))
                .id("mail-2")
                .max_attempts(1)
                .priority(5),
        )
        .await
        .unwrap();
    let claimed = store
        .claim(&ClaimRequest::new("emails", "mailer-1", HOUR))
        .await
        .unwrap()
        .pop()
        .expect("mail-2 claimed");
    store
        .fail(
            &claimed.claim,
            "550 mailbox unavailable",
            FailAction::DeadLetter,
        )
        .await
        .unwrap();

    // The watch view shows a lease admitted after it opened, without a
    // reload (server-sent events).
    client.goto(&format!("{base}/watch")).await.unwrap();
    wait_for_text(client, "a", "nightly-report").await;
    store
        .admit(&AdmitRequest::new("orphan-run", "worker-lost").scope("account:2"))
        .await
        .unwrap();
    wait_for_text(client, "a", "orphan-run").await;
    browser.screenshot(&shot("watch")).await;

    client.goto(&format!("{base}/leases")).await.unwrap();
    wait_for_text(client, "a", "orphan-run").await;
    wait_for_text(client, "span", "orphan").await;
    browser.screenshot(&shot("leases")).await;
    // With a keyboard: the first Tab reaches the link past the navigation.
    client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys(TAB)
        .await
        .unwrap();
    let focused = client.active_element().await.unwrap().text().await.unwrap();
    assert_eq!(focused, "Skip to content");

    // Take the orphan over through the UI: sign in on the way.
    let before = store
        .get("orphan-run")
        .await
        .unwrap()
        .expect("admitted")
        .fence;
    click_link(client, "orphan-run").await;
    wait_for_text(client, "h1", "Lease orphan-run").await;
    assert_eq!(
        fence_shown(client).await,
        before.to_string(),
        "the page shows the fence"
    );
    browser.screenshot(&shot("lease")).await;
    click_link(client, "Take over…").await;
    wait_for_text(client, "h1", "Sign in").await;
    browser.screenshot(&shot("sign-in")).await;
    client
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    click_button(client, "Sign in").await;
    wait_for_text(client, "h1", "Take over orphan-run?").await;
    let reason = client.find(Locator::Id("reason")).await.unwrap();
    reason.clear().await.unwrap();
    reason
        .send_keys("host lost in the rack-3 outage")
        .await
        .unwrap();
    browser.screenshot(&shot("confirm")).await;
    click_button(client, "Confirm").await;
    // The click returns once dispatched: the answer page says it is done.
    wait_for_text(client, "h1", "Done").await;
    let taken = store.get("orphan-run").await.unwrap().expect("kept");
    assert_eq!(taken.status, Status::Failed);
    assert!(taken.fence > before, "a new fence: {taken:?}");
    wait_for_text(client, "p", &format!("fence {}", taken.fence)).await;
    click_link(client, "Back").await;
    wait_for_text(client, "dd", "failed").await;
    assert_eq!(
        fence_shown(client).await,
        taken.fence.to_string(),
        "the page shows the new fence"
    );
    wait_for_text(client, "dd", "host lost in the rack-3 outage").await;
    browser.screenshot(&shot("lease-taken-over")).await;

    // Retry the dead letter.
    client.goto(&format!("{base}/queues")).await.unwrap();
    wait_for_text(client, "a", "emails").await;
    browser.screenshot(&shot("queues")).await;
    client
        .goto(&format!("{base}/dead?queue=emails"))
        .await
        .unwrap();
    wait_for_text(client, "td", "550 mailbox unavailable").await;
    browser.screenshot(&shot("dead-letters")).await;
    click_link(client, "Retry…").await;
    wait_for_text(client, "h1", "Retry mail-2?").await;
    click_button(client, "Confirm").await;
    wait_for_text(client, "p", "Requeued").await;
    assert_eq!(
        store.get_job("mail-2").await.unwrap().expect("kept").state,
        JobState::Queued
    );
    click_link(client, "Back").await;
    wait_for_text(client, "span", "queued").await;

    client.goto(&format!("{base}/gates")).await.unwrap();
    wait_for_text(client, "td", "12").await;
    browser.screenshot(&shot("gates")).await;

    // A phone-sized window: the leases page still reads, nothing hidden.
    browser.resize(390, 844).await;
    client.goto(&format!("{base}/leases")).await.unwrap();
    wait_for_text(client, "a", "nightly-report").await;
    browser.screenshot(&shot("leases-phone")).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_in_a_browser_on_memory() {
    let store = tenure::connect("memory:").await.unwrap();
    operator_in_a_browser(store, "memory", "an_operator_in_a_browser_on_memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_in_a_browser_on_sqlite() {
    support::with_sqlite(|subject| async move {
        operator_in_a_browser(
            subject.store,
            "sqlite",
            "an_operator_in_a_browser_on_sqlite",
        )
        .await;
    })
    .await;
}

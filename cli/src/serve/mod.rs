//! `tenure serve`: the operator's web view of a store, on any backend.
//!
//! Who holds what, since when and under which fence; what is expiring or
//! orphaned; each queue's jobs by state; dead letters with their last
//! error; the highest fence a gate has accepted; and, only when started
//! with `--allow-write`, the repairs `tenure`'s commands make (take over,
//! cancel, release, retry, purge), through the same library calls
//! ([`crate::operations`]), each behind a confirmation page.
//!
//! Pages are rendered on the server (HTML escaped by `maud`), usable
//! without JavaScript; one small script adds the live countdowns and the
//! watch view's server-sent updates. Why it is safe to leave running:
//!
//! * It is **read-only by default**: the action routes answer 403.
//! * With `--allow-write`, an action needs a session signed in with the
//!   token given at start (read from `--token-file`, or generated and
//!   printed once), a CSRF token bound to that session in the form, and a
//!   confirmation step; every action, refused or done, is logged on stderr.
//! * It listens on loopback unless told otherwise, and refuses a
//!   non-loopback address without `--token-file`; with a token file, every
//!   page needs the token. On loopback it answers only requests whose
//!   `Host` names the loopback address (no DNS rebinding).
//! * It never shows a credential: the store's URL appears with its
//!   password replaced by `***`.
//!
//! [`router`] builds the application for a store (what the tests drive);
//! [`serve`] runs it on a listener until a shutdown signal.

mod access;
mod actions;
mod pages;
mod render;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use tenure::Store;

pub use access::Token;

/// How `tenure serve` runs: who may read, who may act, and how it names
/// the store.
#[derive(Debug, Clone)]
pub struct Options {
    allow_write: bool,
    token: Option<Token>,
    token_for_reads: bool,
    allowed_hosts: Option<Vec<String>>,
    claimer: String,
    refresh: Duration,
    store_label: String,
}

/// Who web actions take records over as, unless told otherwise.
pub const DEFAULT_CLAIMER: &str = "tenure-serve";

impl Options {
    /// Read-only, no token, any `Host`, the store shown as `store_label`
    /// (give it without a password: [`tenure::redact_url`]).
    pub fn read_only(store_label: impl Into<String>) -> Self {
        Options {
            allow_write: false,
            token: None,
            token_for_reads: false,
            allowed_hosts: None,
            claimer: DEFAULT_CLAIMER.to_owned(),
            refresh: Duration::from_secs(2),
            store_label: store_label.into(),
        }
    }

    /// Allows the actions to a session signed in with `token`.
    #[must_use]
    pub fn allow_write(mut self, token: Token) -> Self {
        self.allow_write = true;
        self.token = Some(token);
        self
    }

    /// Every page, not only the actions, needs a session signed in with
    /// `token` (as `--token-file` does).
    #[must_use]
    pub fn token_for_reads(mut self, token: Token) -> Self {
        self.token = Some(token);
        self.token_for_reads = true;
        self
    }

    /// Answers only requests whose `Host` names `address` (with
    /// `localhost` for a loopback address): against DNS rebinding, for a
    /// server on loopback.
    #[must_use]
    pub fn only_host(mut self, address: SocketAddr) -> Self {
        let port = address.port();
        let mut hosts = vec![address.to_string()];
        if address.ip().is_loopback() {
            hosts.push(format!("localhost:{port}"));
        }
        self.allowed_hosts = Some(hosts);
        self
    }

    /// Who takeovers and cancellations are recorded as (default
    /// [`DEFAULT_CLAIMER`]).
    #[must_use]
    pub fn claimer(mut self, claimer: impl Into<String>) -> Self {
        self.claimer = claimer.into();
        self
    }

    /// How often the watch view is refreshed (default 2 s, at least
    /// 100 ms).
    #[must_use]
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every.max(Duration::from_millis(100));
        self
    }
}

/// What the handlers share.
struct App {
    store: Arc<dyn Store>,
    options: Options,
    access: access::Access,
}

type Shared = Arc<App>;

/// The web view of `store`, as `options` allow.
pub fn router(store: Arc<dyn Store>, options: Options) -> Router {
    let access = access::Access::new(&options);
    let app = Arc::new(App {
        store,
        options,
        access,
    });
    Router::new()
        .route("/", get(pages::home))
        .route("/leases", get(pages::leases))
        .route("/lease", get(pages::lease))
        .route("/watch", get(pages::watch))
        .route("/watch/events", get(pages::watch_events))
        .route("/queues", get(pages::queues))
        .route("/jobs", get(pages::jobs))
        .route("/dead", get(pages::dead_letters))
        .route("/job", get(pages::job))
        .route("/gates", get(pages::gates))
        .route(
            "/actions/{action}",
            get(actions::confirm).post(actions::act),
        )
        .route("/login", get(access::login_page).post(access::login))
        .route("/logout", post(access::logout))
        .route("/assets/style.css", get(render::style))
        .route("/assets/tenure.js", get(render::script))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            access::guard,
        ))
        .with_state(app)
}

/// How long the requests in flight get to finish once shutdown starts:
/// the watch view's event streams never finish by themselves.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Serves `router` on `listener` until `shutdown` completes, then lets the
/// requests in flight finish, for at most [`SHUTDOWN_GRACE`] (open event
/// streams are cut then).
///
/// # Errors
///
/// When the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    let graceful = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stopping.send(true);
    });
    let grace_over = async move {
        // An error: the server ended first, which the other branch reports.
        if stopped.wait_for(|stopping| *stopping).await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = graceful => served,
        () = grace_over => Ok(()),
    }
}

/// Reads a token from `path` (its first line, trimmed).
///
/// # Errors
///
/// A message naming the file, when it cannot be read or holds a token too
/// short to guess at ([`Token::MIN_LENGTH`] characters).
pub fn read_token(path: &Path) -> Result<Token, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read the token file {}: {error}", path.display()))?;
    Token::new(text.lines().next().unwrap_or_default().trim())
        .map_err(|why| format!("the token in {} {why}", path.display()))
}

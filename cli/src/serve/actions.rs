//! The repairs, only with `--allow-write`: `GET /actions/NAME` shows what
//! will happen and asks to confirm; `POST /actions/NAME` does it, for a
//! signed-in session whose CSRF token the form carries, through the same
//! calls as the commands ([`crate::operations`]). Every attempt is logged
//! on stderr, done or refused.

use std::time::Duration;

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use axum_extra::extract::cookie::CookieJar;
use maud::{html, Markup};
use serde::Deserialize;
use tenure::{Claim, TakeoverRequest};

use super::render::{self, url, Problem, Section};
use super::Shared;
use crate::{operations, Failure};

/// The actions, by the name their path gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    TakeOver,
    Cancel,
    Release,
    Retry,
    RetryAll,
    Purge,
}

impl Action {
    fn from_path(name: &str) -> Option<Self> {
        Some(match name {
            "take-over" => Action::TakeOver,
            "cancel" => Action::Cancel,
            "release" => Action::Release,
            "retry" => Action::Retry,
            "retry-all" => Action::RetryAll,
            "purge" => Action::Purge,
            _ => return None,
        })
    }

    fn path(self) -> &'static str {
        match self {
            Action::TakeOver => "take-over",
            Action::Cancel => "cancel",
            Action::Release => "release",
            Action::Retry => "retry",
            Action::RetryAll => "retry-all",
            Action::Purge => "purge",
        }
    }
}

/// The stop reason and error a web takeover records unless given one.
const TAKEN_OVER: &str = "taken over by an operator (tenure serve)";
/// The stop reason a web release records unless given one.
const RELEASED: &str = "released by an operator (tenure serve)";
/// The retention the purge form proposes.
const PURGE_PROPOSAL: &str = "7d";
/// Dead letters read per page by "retry all".
const RETRY_PAGE: usize = 500;

/// What an action's target is: a lease or job id, a queue, or (for a
/// purge) the retention to count.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Target {
    id: Option<String>,
    queue: Option<String>,
    older_than: Option<String>,
}

/// `GET /actions/NAME?id=|queue=`: what the action will do, and the form
/// that does it.
pub(super) async fn confirm(
    State(app): State<Shared>,
    jar: CookieJar,
    Path(name): Path<String>,
    Query(target): Query<Target>,
) -> Result<Response, Problem> {
    let action = Action::from_path(&name).ok_or_else(|| no_such_action(&name))?;
    refuse_read_only(&app)?;
    let Some(session) = app.access.session(&jar) else {
        let here = url(
            &format!("/actions/{}", action.path()),
            &[
                ("id", target.id.as_deref().unwrap_or_default()),
                ("queue", target.queue.as_deref().unwrap_or_default()),
                (
                    "older_than",
                    target.older_than.as_deref().unwrap_or_default(),
                ),
            ],
        );
        return Ok(Redirect::to(&url("/login", &[("next", &here)])).into_response());
    };
    let store = &*app.store;
    let id = target.id.as_deref().unwrap_or_default();
    let queue = target.queue.as_deref().unwrap_or_default();
    let (title, explanation, fields): (String, Markup, Markup) = match action {
        Action::TakeOver | Action::Cancel | Action::Release => {
            let Some(record) = store.get(id).await? else {
                return Err(Problem::not_found(&format!(
                    "No lease record has the id {id:?}."
                )));
            };
            let now = store.now().await?;
            let state = html! {
                p { "Now: " strong { (record.status.as_str()) } ", owner "
                    code { (record.owner.as_deref().unwrap_or("-")) } ", fence " strong.fence { (record.fence) } ", lease "
                    @match record.lease_expires_at { Some(at) => { "ends " (render::time(at, now)) } None => { "none" } } "." }
            };
            match action {
                Action::TakeOver => (
                    format!("Take over {id}?"),
                    html! { (state) p { "Takes the lease over as " code { (app.options.claimer) }
                    " under a new, higher fence and marks it failed with the reason below: the previous owner's writes are refused from then on. Refused while the owner's lease is still valid." } },
                    html! { label for="reason" { "Reason (kept as its error)" }
                    input #reason type="text" name="reason" value=(TAKEN_OVER) required; },
                ),
                Action::Cancel => (
                    format!("Cancel {id}?"),
                    html! { (state) p { "Fails the run with stop reason " code { "cancelled" } " under a new fence, only if its owner's lease has ended; a live holder is refused (stop it where it runs)." } },
                    html! { label for="reason" { "Reason (kept as its error)" }
                    input #reason type="text" name="reason" value=(tenure::keeper::CANCELLED) required; },
                ),
                _ => (
                    format!("Release {id}?"),
                    html! { (state) p { "Gives the lease up at once under the claim below (owner and fence): written interrupted (failed while pending), its scopes free now. Refused unless the claim still holds it." } },
                    html! {
                        label for="owner" { "Owner" }
                        input #owner type="text" name="owner" value=[record.owner.as_deref()] required;
                        label for="fence" { "Fence" }
                        input #fence type="number" name="fence" min="1" inputmode="numeric" required;
                        label for="reason" { "Reason" }
                        input #reason type="text" name="reason" value=(RELEASED) required;
                    },
                ),
            }
        }
        Action::Retry => {
            let Some(job) = store.get_job(id).await? else {
                return Err(Problem::not_found(&format!("No job has the id {id:?}.")));
            };
            (
                format!("Retry {id}?"),
                html! {
                    p { "Job " code { (job.id) } " of queue " code { (job.queue) } " is " strong { (job.state.as_str()) } "." }
                    @if let Some(error) = &job.last_error { p { "Last error: " code { (render::cut(error, 400)) } } }
                    p { "Sends the dead letter back to its queue with its attempts reset. Refused unless it is dead-lettered." }
                },
                html! {},
            )
        }
        Action::RetryAll => {
            let waiting = store.list_dead_letters(queue, RETRY_PAGE).await?.len();
            let more = if waiting >= RETRY_PAGE {
                " at least"
            } else {
                ""
            };
            (
                format!("Retry every dead letter of {queue}?"),
                html! { p { "Sends" (more) " " (waiting) " dead letters of queue " code { (queue) } " back to it, attempts reset, each at most once." } },
                html! {},
            )
        }
        Action::Purge => {
            let text = target
                .older_than
                .as_deref()
                .filter(|text| !text.is_empty())
                .unwrap_or(PURGE_PROPOSAL);
            let older_than = crate::parse_duration(text)
                .map_err(|why| Problem::new(StatusCode::BAD_REQUEST, "Not a retention", &why))?;
            let cutoff = operations::purge_cutoff(store, older_than).await?;
            let leases = store.count_purgeable(older_than).await?;
            let jobs = operations::count_purgeable_jobs(store, &[], cutoff).await?;
            (
                "Purge finished records and jobs?".to_owned(),
                html! {
                    p { "Deletes the finished and interrupted lease records and the completed and dead-lettered jobs last changed at least " strong { (text) } " ago (at or before "
                        (cutoff.map_or_else(|| "the beginning of time".to_owned(), render::utc)) " by the store's clock). Active records and queued or claimed jobs stay. " strong { "This cannot be undone." } }
                    ul.counts {
                        li { strong { (leases) } " lease records" }
                        @for queue in &jobs {
                            li { @if queue.at_least { "at least " } strong { (queue.count) } " jobs of queue " code { (queue.queue) } }
                        }
                        @if jobs.is_empty() { li { "no job: no queue holds a finished job" } }
                    }
                    form.filters method="get" action="/actions/purge" {
                        label { "Count for another retention (30s, 5m, 2h, 7d) "
                            input type="text" name="older_than" value=(text) required; }
                        button type="submit" { "Count" }
                    }
                },
                html! { input type="hidden" name="older_than" value=(text); },
            )
        }
    };
    let body = html! {
        h1 { (title) }
        (explanation)
        form.card method="post" action=(format!("/actions/{}", action.path())) {
            input type="hidden" name="csrf" value=(session.csrf);
            @if !id.is_empty() { input type="hidden" name="id" value=(id); }
            @if !queue.is_empty() { input type="hidden" name="queue" value=(queue); }
            (fields)
            div.buttons {
                button.danger type="submit" { "Confirm" }
                a href=(back(action, id, queue)) { "Back" }
            }
        }
    };
    Ok(render::page(&app, Some(&session), section(action), &title, body).into_response())
}

/// An action's form (no `Debug`: it holds the CSRF token).
#[derive(Default, Deserialize)]
pub(super) struct ActionForm {
    csrf: Option<String>,
    id: Option<String>,
    queue: Option<String>,
    reason: Option<String>,
    owner: Option<String>,
    fence: Option<String>,
    older_than: Option<String>,
}

/// `POST /actions/NAME`: does the action for a signed-in session whose
/// token the form carries; answers what was done, or why not.
pub(super) async fn act(
    State(app): State<Shared>,
    jar: CookieJar,
    Path(name): Path<String>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Response, Problem> {
    let Some(action) = Action::from_path(&name) else {
        log("-", &name, "-", "refused: no such action");
        return Err(no_such_action(&name));
    };
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) => {
            log(
                "-",
                action.path(),
                "-",
                "refused: the form could not be read",
            );
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "Not done",
                &format!(
                    "The form could not be read ({}); nothing was done. Go back, reload the \
                     page and confirm again.",
                    rejection.body_text()
                ),
            ));
        }
    };
    let target = form
        .id
        .as_deref()
        .or(form.queue.as_deref())
        .unwrap_or("-")
        .to_owned();
    if let Err(problem) = refuse_read_only(&app) {
        log("-", action.path(), &target, "refused: read-only");
        return Err(problem);
    }
    let Some(session) = app.access.session(&jar) else {
        log("-", action.path(), &target, "refused: not signed in");
        return Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "Actions need a session signed in with the server's token: sign in, then confirm again.",
        ));
    };
    let who = session.number.to_string();
    if !session.accepts(form.csrf.as_deref()) {
        log(&who, action.path(), &target, "refused: CSRF token mismatch");
        return Err(render::bad_csrf());
    }
    match perform(&app, &who, action, &form).await {
        Ok((done, next)) => {
            log(&who, action.path(), &target, &done);
            let body = html! {
                h1 { "Done" }
                p.result role="status" { (done) }
                p { a href=(next) { "Back" } }
            };
            Ok(render::page(&app, Some(&session), section(action), "Done", body).into_response())
        }
        Err(failure) => {
            let problem = Problem::from(failure);
            log(&who, action.path(), &target, &problem.summary());
            Err(problem)
        }
    }
}

/// Does the action: what was done, and where to look at it.
async fn perform(
    app: &Shared,
    who: &str,
    action: Action,
    form: &ActionForm,
) -> Result<(String, String), Failure> {
    let store = &*app.store;
    let claimer = app.options.claimer.as_str();
    let id = form.id.as_deref().unwrap_or_default();
    let queue = form.queue.as_deref().unwrap_or_default();
    let reason = |proposal: &str| {
        form.reason
            .as_deref()
            .filter(|reason| !reason.trim().is_empty())
            .unwrap_or(proposal)
            .to_owned()
    };
    let lease_page = url("/lease", &[("id", id)]);
    match action {
        Action::TakeOver => {
            let request = TakeoverRequest::fail(id, claimer, reason(TAKEN_OVER));
            let record = operations::take_over(store, &request).await?;
            Ok((
                format!(
                    "Took over {:?}: {} by {claimer}, fence {}.",
                    record.id,
                    record.status.as_str(),
                    record.fence
                ),
                lease_page,
            ))
        }
        Action::Cancel => {
            let record = operations::cancel(
                store,
                id,
                claimer,
                &reason(tenure::keeper::CANCELLED),
                Duration::ZERO,
            )
            .await?;
            Ok((
                format!(
                    "Cancelled {:?}: {} by {claimer}, fence {}; the previous owner's writes are refused.",
                    record.id,
                    record.status.as_str(),
                    record.fence
                ),
                lease_page,
            ))
        }
        Action::Release => {
            let fence = form
                .fence
                .as_deref()
                .and_then(|fence| fence.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    Failure::Usage("give the claim's fence, a whole number from 1".to_owned())
                })?;
            let owner = form.owner.as_deref().unwrap_or(claimer);
            let record =
                operations::release(store, &Claim::new(id, owner, fence), &reason(RELEASED))
                    .await?;
            Ok((
                format!(
                    "Released {:?}: {}, its scopes are free (owner {owner:?}, fence {}).",
                    record.id,
                    record.status.as_str(),
                    record.fence
                ),
                lease_page,
            ))
        }
        Action::Retry => {
            let job = operations::retry(store, id).await?;
            Ok((
                format!(
                    "Requeued {:?} on queue {:?}, attempts reset.",
                    job.id, job.queue
                ),
                url("/job", &[("id", &job.id)]),
            ))
        }
        Action::RetryAll => {
            let done = operations::retry_all(store, queue, RETRY_PAGE)
                .await
                .map_err(|(done, error)| {
                    log(
                        who,
                        "retry-all",
                        queue,
                        &format!("requeued {} before the store failed", done.requeued),
                    );
                    Failure::Store(error)
                })?;
            Ok((
                format!(
                    "Requeued {} dead letters of queue {queue:?}, attempts reset; {} were no longer dead-lettered.",
                    done.requeued, done.skipped
                ),
                url("/dead", &[("queue", queue)]),
            ))
        }
        Action::Purge => {
            let text = form.older_than.as_deref().unwrap_or_default();
            let older_than = crate::parse_duration(text).map_err(Failure::Usage)?;
            let (leases, jobs) = operations::purge(store, older_than).await?;
            Ok((
                format!("Deleted {leases} lease records and {jobs} jobs older than {text}."),
                "/queues".to_owned(),
            ))
        }
    }
}

/// 403 on a read-only server.
fn refuse_read_only(app: &Shared) -> Result<(), Problem> {
    if app.options.allow_write {
        return Ok(());
    }
    Err(Problem::new(
        StatusCode::FORBIDDEN,
        "Read-only",
        "This server was started read-only: nothing was done. Restart `tenure serve` with \
         --allow-write to act from the web view.",
    ))
}

fn no_such_action(name: &str) -> Problem {
    Problem::not_found(&format!(
        "There is no action {name:?}: take-over, cancel, release, retry, retry-all, purge."
    ))
}

fn section(action: Action) -> Option<Section> {
    Some(match action {
        Action::TakeOver | Action::Cancel | Action::Release => Section::Leases,
        Action::Retry | Action::RetryAll | Action::Purge => Section::Queues,
    })
}

/// Where "Back" leads from a confirmation.
fn back(action: Action, id: &str, queue: &str) -> String {
    match action {
        Action::TakeOver | Action::Cancel | Action::Release => url("/lease", &[("id", id)]),
        Action::Retry => url("/job", &[("id", id)]),
        Action::RetryAll => url("/dead", &[("queue", queue)]),
        Action::Purge => "/queues".to_owned(),
    }
}

/// One line on stderr per attempt (and a `tracing` event): which session,
/// which action on what, and what came of it.
pub(super) fn log(session: &str, action: &str, target: &str, outcome: &str) {
    tracing::info!(target: "tenure::serve", session, action, target, outcome, "operator action");
    // Escaped: what an operator typed (a reason, an owner) cannot forge
    // a line of the log.
    eprintln!(
        "tenure serve: session {session}: {action} {target:?}: {}",
        outcome.escape_debug()
    );
}

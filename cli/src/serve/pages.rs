//! The read-only views: leases (filtered, with countdowns), one lease with
//! what the store keeps of its history and its gates, the watch view
//! (server-sent updates), queues, a queue's jobs, dead letters, one job,
//! and fence gates.
//!
//! Identifiers travel in query strings (`/lease?id=...`), so an id holding
//! `/`, `?` or any other character names its record.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use futures_util::Stream;
use maud::{html, Markup};
use serde::Deserialize;
use tenure::queue::{Job, JobState};
use tenure::{ExpiredQuery, LeaseRecord, Store, Timestamp};

use super::render::{self, page_at, time, url, Problem, Section};
use super::Shared;

type Page = Result<Response, Problem>;

/// The most records or jobs a list shows.
const LIST_LIMIT: usize = 500;
/// The gates a page of the gates view lists.
const GATE_PAGE: usize = 200;
/// The most characters of an error or progress a table cell shows.
const CELL: usize = 80;

/// A query value, `None` when absent or empty (as a form sends it).
fn given(value: Option<&String>) -> Option<&str> {
    value.map(String::as_str).filter(|value| !value.is_empty())
}

/// `GET /`: the leases.
pub(super) async fn home() -> Redirect {
    Redirect::to("/leases")
}

/// Every other path.
pub(super) async fn not_found() -> Problem {
    Problem::not_found("There is no page here: the navigation above lists them.")
}

/// The leases page's filters.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LeasesQuery {
    status: Option<String>,
    scope: Option<String>,
    holder: Option<String>,
    kind: Option<String>,
}

/// What the status filter may name: the active records, those whose lease
/// ended (orphans), every status (with a scope), or one status.
const STATUS_FILTERS: [&str; 8] = [
    "active",
    "expired",
    "any",
    "pending",
    "running",
    "interrupted",
    "succeeded",
    "failed",
];

/// `GET /leases`: lease records, filtered by status, scope, holder, kind.
pub(super) async fn leases(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<LeasesQuery>,
) -> Page {
    let store = &*app.store;
    let status = given(query.status.as_ref()).unwrap_or("active");
    if !STATUS_FILTERS.contains(&status) {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "Unknown status",
            &format!("Filter by one of: {}.", STATUS_FILTERS.join(", ")),
        ));
    }
    let scope = given(query.scope.as_ref());
    let holder = given(query.holder.as_ref());
    let kind = given(query.kind.as_ref());
    // The stores list active records, expired ones, or every record of a
    // scope: a status past active needs a scope to look in.
    let (mut records, note) = match (status, scope) {
        ("expired", _) => {
            let scan = store
                .list_expired(&ExpiredQuery::new(Duration::ZERO).limit(LIST_LIMIT))
                .await?;
            let note = (!scan.skipped.is_empty()).then(|| {
                format!(
                    "{} records could not be decoded and are left out: {}",
                    scan.skipped.len(),
                    scan.skipped
                        .iter()
                        .map(|skipped| format!("{:?} ({})", skipped.id, skipped.reason))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            });
            (scan.records, note)
        }
        (_, Some(scope)) => (store.list_by_scope(scope).await?, None),
        ("active" | "pending" | "running", None) => (store.list_active().await?, None),
        (_, None) => (
            Vec::new(),
            Some(
                "The stores list ended records by scope: give a scope to see its finished, \
                 failed and interrupted records."
                    .to_owned(),
            ),
        ),
    };
    records.retain(|record| {
        let status_matches = match status {
            "active" => record.status.is_active(),
            "expired" | "any" => true,
            named => record.status.as_str() == named,
        };
        status_matches
            && scope.is_none_or(|scope| record.scopes.contains(scope))
            && holder.is_none_or(|holder| {
                record
                    .owner
                    .as_deref()
                    .is_some_and(|owner| owner.contains(holder))
            })
            && kind.is_none_or(|kind| record.kind == kind)
    });
    let now = store.now().await?;
    let shown = records.len().min(LIST_LIMIT);
    let body = html! {
        h1 { "Leases" }
        form.filters method="get" action="/leases" role="search" {
            label { "Status "
                select name="status" {
                    @for each in STATUS_FILTERS {
                        option value=(each) selected[each == status] { (each) }
                    }
                }
            }
            label { "Scope " input type="text" name="scope" value=[scope] placeholder="any"; }
            label { "Holder contains " input type="text" name="holder" value=[holder] placeholder="any"; }
            label { "Kind " input type="text" name="kind" value=[kind] placeholder="any"; }
            button type="submit" { "Filter" }
        }
        @if let Some(note) = note { p.note { (note) } }
        p.summary { (records.len()) " records, by the store's clock at " (render::utc(now)) "."
            @if shown < records.len() { " The first " (shown) " are shown: narrow the filters to see the others." } }
        (lease_table(&records[..shown], now))
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Leases),
        "Leases",
        Some(now),
        body,
    )
    .into_response())
}

/// A table of lease records; ended leases marked.
fn lease_table(records: &[LeaseRecord], now: Timestamp) -> Markup {
    html! {
        @if records.is_empty() {
            p.empty { "No lease records." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Id" } th scope="col" { "Kind" } th scope="col" { "Status" }
                    th scope="col" { "Owner" } th scope="col" { "Fence" }
                    th scope="col" { "Lease ends" } th scope="col" { "Scopes" }
                } }
                tbody {
                    @for record in records {
                        @let ended = record.status.is_active()
                            && record.lease_expires_at.is_none_or(|at| at <= now);
                        tr.ended[ended] {
                            td { a href=(url("/lease", &[("id", &record.id)])) { (record.id) } }
                            td { (record.kind) }
                            td { span class={"status " (record.status.as_str())} { (record.status.as_str()) } }
                            td { (record.owner.as_deref().unwrap_or("-")) }
                            td.fence { (record.fence) }
                            td {
                                @match record.lease_expires_at {
                                    Some(at) => { (time(at, now)) }
                                    None => { "no lease" }
                                }
                                @if ended { " " span.badge { "orphan" } }
                            }
                            td { (scopes(record)) }
                        }
                    }
                }
            } }
        }
    }
}

/// The record's scopes, a counted one with its slot.
fn scopes(record: &LeaseRecord) -> Markup {
    html! {
        @if record.scopes.is_empty() { "-" }
        @for (index, scope) in record.scopes.iter().enumerate() {
            @if index > 0 { ", " }
            a href=(url("/leases", &[("scope", scope), ("status", "any")])) { (scope) }
            @if let Some(slot) = record.slots.get(scope) { " (slot " (slot) ")" }
        }
    }
}

/// `?id=`.
#[derive(Debug, Deserialize)]
pub(super) struct IdQuery {
    id: Option<String>,
}

/// `GET /lease?id=`: one record, what the store keeps of its scopes'
/// history, its gates, and the actions.
pub(super) async fn lease(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<IdQuery>,
) -> Page {
    let Some(id) = given(query.id.as_ref()) else {
        return Err(Problem::not_found("Name the lease: /lease?id=ID."));
    };
    let store = &*app.store;
    let Some(record) = store.get(id).await? else {
        if store.get_job(id).await?.is_some() {
            return Ok(Redirect::to(&url("/job", &[("id", id)])).into_response());
        }
        return Err(Problem::not_found(&format!(
            "No lease record or job has the id {id:?} (finished records go when purged)."
        )));
    };
    let now = store.now().await?;
    let mut history = Vec::new();
    for scope in &record.scopes {
        let others: Vec<LeaseRecord> = store
            .list_by_scope(scope)
            .await?
            .into_iter()
            .filter(|other| other.id != record.id)
            .take(LIST_LIMIT)
            .collect();
        history.push((scope, others));
    }
    let gates = gate_fences(store, &gate_resources(&record)).await?;
    let session = app.access.session(&jar);
    let ended = record.status.is_active() && record.lease_expires_at.is_none_or(|at| at <= now);
    let body = html! {
        h1 { "Lease " code { (record.id) } }
        dl.record {
            dt { "Status" } dd { span class={"status " (record.status.as_str())} { (record.status.as_str()) }
                @if ended { " " span.badge { "orphan: its lease has ended" } } }
            dt { "Kind" } dd { (record.kind) }
            dt { "Owner" } dd { (record.owner.as_deref().unwrap_or("-")) }
            dt { "Fence" } dd.fence { (record.fence) }
            dt { "Lease ends" } dd { @match record.lease_expires_at {
                Some(at) => { (time(at, now)) } None => { "no lease" } } }
            dt { "Scopes" } dd { (scopes(&record)) }
            dt { "Created" } dd { (time(record.created_at, now)) }
            dt { "Updated" } dd { (time(record.updated_at, now)) }
            @if let Some(error) = &record.error { dt { "Error" } dd { (error) } }
            @if let Some(reason) = &record.stop_reason { dt { "Stop reason" } dd { (reason) } }
            @if !record.metadata.is_empty() {
                dt { "Metadata" } dd { pre { (render::json(&record.metadata)) } }
            }
            @if let Some(progress) = &record.progress {
                dt { "Progress" } dd { pre { (render::json(progress)) } }
            }
        }
        (lease_actions(&app, &record))
        h2 { "History" }
        p.note { "What the store keeps: the record's own creation and last change, and the other records of its scopes (until purged), newest first." }
        ol.timeline {
            li { (time(record.created_at, now)) " admitted" }
            @if record.updated_at != record.created_at {
                li { (time(record.updated_at, now)) " last changed: " (record.status.as_str())
                    ", fence " (record.fence) }
            }
        }
        @for (scope, others) in &history {
            h3 { "Other records of scope " code { (scope) } }
            (lease_table(others, now))
        }
        h2 { "Gates" }
        p.note { "The highest fence a fence gate named after this lease, its scopes or its slots has accepted." }
        (gate_table(&gates))
    };
    Ok(page_at(
        &app,
        session.as_ref(),
        Some(Section::Leases),
        &format!("Lease {}", record.id),
        Some(now),
        body,
    )
    .into_response())
}

/// The action buttons a lease offers, or why there are none.
fn lease_actions(app: &Shared, record: &LeaseRecord) -> Markup {
    let id = record.id.as_str();
    html! {
        section.actions aria-label="Actions" {
            @if !app.options.allow_write {
                p.note { "Read-only: start `tenure serve` with --allow-write to act." }
            } @else if record.status.is_active() {
                a.button href=(url("/actions/take-over", &[("id", id)])) { "Take over…" }
                a.button href=(url("/actions/cancel", &[("id", id)])) { "Cancel…" }
                a.button href=(url("/actions/release", &[("id", id)])) { "Release…" }
            } @else {
                p.note { "It is " (record.status.as_str()) ": nothing to act on." }
            }
        }
    }
}

/// The gate resources a record's fences guard: its id, its scopes, and
/// each counted scope's slot resource.
fn gate_resources(record: &LeaseRecord) -> Vec<String> {
    let mut resources = BTreeSet::from([record.id.clone()]);
    for scope in &record.scopes {
        resources.insert(scope.clone());
        if let Some(resource) = record.slot_resource(scope) {
            resources.insert(resource);
        }
    }
    resources.into_iter().collect()
}

/// Each resource's highest accepted fence (`None`: no gate has seen it).
async fn gate_fences(
    store: &dyn Store,
    resources: &[String],
) -> Result<Vec<(String, Option<u64>)>, Problem> {
    let mut fences = Vec::with_capacity(resources.len());
    for resource in resources {
        fences.push((resource.clone(), store.highest_fence(resource).await?));
    }
    Ok(fences)
}

fn gate_table(gates: &[(String, Option<u64>)]) -> Markup {
    html! {
        div.scroll { table {
            thead { tr { th scope="col" { "Resource" } th scope="col" { "Highest fence accepted" } } }
            tbody { @for (resource, fence) in gates { tr {
                td { a href=(url("/gates", &[("resource", resource)])) { code { (resource) } } }
                td.fence { @match fence { Some(fence) => { (fence) } None => { "no gate has seen it" } } }
            } } }
        } }
    }
}

/// `GET /watch`: the active leases, soonest expiry first, kept current by
/// server-sent events (a reload every few seconds without the script).
pub(super) async fn watch(State(app): State<Shared>, jar: CookieJar) -> Page {
    let (now, frame) = watch_frame(&*app.store).await?;
    let seconds = app.options.refresh.as_secs().max(1);
    let body = html! {
        h1 { "Watch" }
        noscript { p.note { "Without scripts this page reloads every " (seconds) " s." }
            meta http-equiv="refresh" content=(seconds); }
        div #watch-live data-events="/watch/events" aria-live="polite" { (frame) }
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Watch),
        "Watch",
        Some(now),
        body,
    )
    .into_response())
}

/// The watch view's live part: a summary and the table.
async fn watch_frame(store: &dyn Store) -> Result<(Timestamp, Markup), tenure::Error> {
    let (records, now) = crate::operations::active_by_expiry(store).await?;
    let ended = records
        .iter()
        .filter(|record| record.lease_expires_at.is_none_or(|at| at <= now))
        .count();
    let frame = html! {
        div data-store-now=(now.timestamp_millis()) {
            p.summary { (records.len()) " active, " (ended) " orphaned (lease ended or none), at "
                (render::utc(now)) " by the store's clock." }
            (lease_table(&records, now))
        }
    };
    Ok((now, frame))
}

/// `GET /watch/events`: the watch view's frame, every refresh interval;
/// where every page needs signing in, only while the session lasts (the
/// stream ends at sign-out or expiry).
pub(super) async fn watch_events(
    State(app): State<Shared>,
    jar: CookieJar,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let every = app.options.refresh;
    let stream =
        futures_util::stream::unfold((app, jar, true), move |(app, jar, first)| async move {
            if !first {
                tokio::time::sleep(every).await;
            }
            if app.access.reads_need_session() && app.access.session(&jar).is_none() {
                return None;
            }
            let data = match watch_frame(&*app.store).await {
                Ok((_, frame)) => frame.into_string(),
                Err(error) => html! {
                    p.problem role="alert" { "The store did not answer: " (error.message())
                        ". The view resumes when it does." }
                }
                .into_string(),
            };
            Some((Ok(Event::default().data(data)), (app, jar, false)))
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// `GET /queues`: every queue with a job, its jobs counted by state.
pub(super) async fn queues(State(app): State<Shared>, jar: CookieJar) -> Page {
    let queues = app.store.count_jobs().await?;
    let session = app.access.session(&jar);
    let count = |queue: &str, state: &str, count: u64| {
        html! { a href=(url("/jobs", &[("queue", queue), ("state", state)])) { (count) } }
    };
    let body = html! {
        h1 { "Queues" }
        @if queues.is_empty() {
            p.empty { "No queue holds a job." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Queue" } th scope="col" { "Queued" } th scope="col" { "Claimed" }
                    th scope="col" { "Completed" } th scope="col" { "Dead letters" } th scope="col" { "Total" }
                } }
                tbody { @for counts in &queues { tr {
                    td { a href=(url("/jobs", &[("queue", &counts.queue)])) { (counts.queue) } }
                    td.number { (count(&counts.queue, "queued", counts.queued)) }
                    td.number { (count(&counts.queue, "claimed", counts.claimed)) }
                    td.number { (count(&counts.queue, "completed", counts.completed)) }
                    td.number { a href=(url("/dead", &[("queue", &counts.queue)])) { (counts.dead_lettered) } }
                    td.number { (counts.total()) }
                } } }
            } }
        }
        @if app.options.allow_write {
            section.actions aria-label="Actions" {
                a.button href="/actions/purge" { "Purge finished records and jobs…" }
            }
        }
    };
    Ok(render::page(
        &app,
        session.as_ref(),
        Some(Section::Queues),
        "Queues",
        body,
    )
    .into_response())
}

/// `?queue=&state=`.
#[derive(Debug, Deserialize)]
pub(super) struct QueueQuery {
    queue: Option<String>,
    state: Option<String>,
}

/// `GET /jobs?queue=&state=`: a queue's jobs, oldest first.
pub(super) async fn jobs(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<QueueQuery>,
) -> Page {
    let Some(queue) = given(query.queue.as_ref()) else {
        return Err(Problem::not_found(
            "Name the queue: /jobs?queue=Q (the queues page lists them).",
        ));
    };
    let state = match given(query.state.as_ref()) {
        None => None,
        Some(name) => Some(
            JobState::ALL
                .into_iter()
                .find(|state| state.as_str() == name)
                .ok_or_else(|| {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "Unknown state",
                        "Filter by queued, claimed, completed or dead_lettered.",
                    )
                })?,
        ),
    };
    let jobs = app.store.list_jobs(queue, state, LIST_LIMIT).await?;
    let now = app.store.now().await?;
    let body = html! {
        h1 { "Jobs of " code { (queue) } }
        nav.tabs aria-label="States" {
            @let all = url("/jobs", &[("queue", queue)]);
            @if state.is_none() { a href=(all) aria-current="page" { "all" } } @else { a href=(all) { "all" } }
            @for each in JobState::ALL {
                @let link = url("/jobs", &[("queue", queue), ("state", each.as_str())]);
                @if state == Some(each) { a href=(link) aria-current="page" { (each.as_str()) } }
                @else { a href=(link) { (each.as_str()) } }
            }
            a href=(url("/dead", &[("queue", queue)])) { "dead letters" }
        }
        (job_table(&jobs, now, None))
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Queues),
        &format!("Jobs of {queue}"),
        Some(now),
        body,
    )
    .into_response())
}

/// A table of jobs; with `retry`, a retry button on each row.
fn job_table(jobs: &[Job], now: Timestamp, retry: Option<&Shared>) -> Markup {
    html! {
        @if jobs.is_empty() {
            p.empty { "No such jobs." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Id" } th scope="col" { "State" } th scope="col" { "Attempt" }
                    th scope="col" { "Updated" } th scope="col" { "Progress" }
                    th scope="col" { "Unique key" } th scope="col" { "Last error" }
                    @if retry.is_some() { th scope="col" { "Action" } }
                } }
                tbody { @for job in jobs { tr {
                    td { a href=(url("/job", &[("id", &job.id)])) { (job.id) } }
                    td { span class={"status " (job.state.as_str())} { (job.state.as_str()) }
                        @if let Some(reason) = job.dead_reason { " (" (reason.as_str()) ")" } }
                    td.number { (job.attempt) "/" (job.max_attempts) }
                    td { (time(job.updated_at, now)) }
                    td { @match &job.progress { Some(progress) => { code { (render::cut(&progress.to_string(), CELL)) } } None => { "-" } } }
                    td { @match &job.unique { Some(unique) => { code { (unique.key) } } None => { "-" } } }
                    td { (render::cut(job.last_error.as_deref().unwrap_or("-"), CELL)) }
                    @if let Some(app) = retry { td {
                        @if app.options.allow_write {
                            a.button href=(url("/actions/retry", &[("id", &job.id)])) { "Retry…" }
                        } @else { "-" }
                    } }
                } } }
            } }
        }
    }
}

/// `GET /dead?queue=`: a queue's dead letters with their last error,
/// oldest update first.
pub(super) async fn dead_letters(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<QueueQuery>,
) -> Page {
    let Some(queue) = given(query.queue.as_ref()) else {
        return Err(Problem::not_found(
            "Name the queue: /dead?queue=Q (the queues page lists them).",
        ));
    };
    let jobs = app.store.list_dead_letters(queue, LIST_LIMIT).await?;
    let now = app.store.now().await?;
    let body = html! {
        h1 { "Dead letters of " code { (queue) } }
        p { a href=(url("/jobs", &[("queue", queue)])) { "Every job of the queue" } }
        @if !app.options.allow_write {
            p.note { "Read-only: start `tenure serve` with --allow-write to retry them." }
        } @else if !jobs.is_empty() {
            section.actions aria-label="Actions" {
                a.button href=(url("/actions/retry-all", &[("queue", queue)])) { "Retry all…" }
            }
        }
        (job_table(&jobs, now, Some(&app)))
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Queues),
        &format!("Dead letters of {queue}"),
        Some(now),
        body,
    )
    .into_response())
}

/// `GET /job?id=`: one job.
pub(super) async fn job(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<IdQuery>,
) -> Page {
    let Some(id) = given(query.id.as_ref()) else {
        return Err(Problem::not_found("Name the job: /job?id=ID."));
    };
    let Some(job) = app.store.get_job(id).await? else {
        return Err(Problem::not_found(&format!(
            "No job has the id {id:?} (finished jobs go when purged)."
        )));
    };
    let now = app.store.now().await?;
    let body = html! {
        h1 { "Job " code { (job.id) } }
        dl.record {
            dt { "Queue" } dd { a href=(url("/jobs", &[("queue", &job.queue)])) { (job.queue) } }
            dt { "State" } dd { span class={"status " (job.state.as_str())} { (job.state.as_str()) } }
            @if let Some(reason) = job.dead_reason { dt { "Dead reason" } dd { (reason.as_str()) } }
            dt { "Attempt" } dd { (job.attempt) " of " (job.max_attempts) }
            dt { "Owner" } dd { (job.owner.as_deref().unwrap_or("-")) }
            dt { "Fence" } dd.fence { (job.fence) }
            dt { "Priority" } dd { (job.priority) }
            dt { "Run at" } dd { (time(job.run_at, now)) }
            @if let Some(at) = job.lease_expires_at { dt { "Lease ends" } dd { (time(at, now)) } }
            @if let Some(error) = &job.last_error { dt { "Last error" } dd { pre { (error) } } }
            dt { "Created" } dd { (time(job.created_at, now)) }
            dt { "Updated" } dd { (time(job.updated_at, now)) }
            @if let Some(unique) = &job.unique { dt { "Unique key" } dd { code { (unique.key) } } }
            @if let Some(progress) = &job.progress { dt { "Progress" } dd { pre { (render::json(progress)) } } }
            @if !job.required_capabilities.is_empty() {
                dt { "Needs" } dd { (job.required_capabilities.iter().cloned().collect::<Vec<_>>().join(", ")) }
            }
            dt { "Payload" } dd { pre { (render::json(&job.payload)) } }
        }
        @if job.state == JobState::DeadLettered && app.options.allow_write {
            section.actions aria-label="Actions" {
                a.button href=(url("/actions/retry", &[("id", &job.id)])) { "Retry…" }
            }
        }
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Queues),
        &format!("Job {}", job.id),
        Some(now),
        body,
    )
    .into_response())
}

/// `?resource=&after=`.
#[derive(Debug, Deserialize)]
pub(super) struct GateQuery {
    resource: Option<String>,
    after: Option<String>,
}

/// `GET /gates?resource=&after=`: every gate kept, by resource, a page at
/// a time, with its highest fence and last accepted check; and one
/// resource's gate looked up.
pub(super) async fn gates(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<GateQuery>,
) -> Page {
    let store = &*app.store;
    let resource = given(query.resource.as_ref());
    let after = given(query.after.as_ref());
    let looked_up = match resource {
        Some(resource) => Some(store.highest_fence(resource).await?),
        None => None,
    };
    let gates = store.list_fences(after, GATE_PAGE).await?;
    let now = store.now().await?;
    let next = (gates.len() == GATE_PAGE)
        .then(|| {
            gates
                .last()
                .map(|gate| url("/gates", &[("after", &gate.resource)]))
        })
        .flatten();
    let body = html! {
        h1 { "Fence gates" }
        p.note { "A gate remembers, per resource, the highest fence it accepted; writes under a lower fence are refused." }
        form.filters method="get" action="/gates" role="search" {
            label { "Resource " input type="text" name="resource" value=[resource] required; }
            button type="submit" { "Look up" }
        }
        @if let (Some(resource), Some(fence)) = (resource, looked_up) {
            p.result { "Gate " code { (resource) } ": "
                @match fence { Some(fence) => { "highest fence accepted " strong.fence { (fence) } }
                    None => { "no gate has accepted a fence for it." } } }
        }
        h2 { "Every gate" @if let Some(after) = after { " after " code { (after) } } }
        @if gates.is_empty() {
            p.empty { "No gate." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Resource" } th scope="col" { "Highest fence accepted" }
                    th scope="col" { "Last accepted check" }
                } }
                tbody { @for gate in &gates { tr {
                    td { code { (gate.resource) } }
                    td.fence { (gate.fence) }
                    td { (time(gate.checked_at, now)) }
                } } }
            } }
        }
        @if let Some(next) = next { p { a href=(next) { "Next " (GATE_PAGE) " gates" } } }
    };
    Ok(page_at(
        &app,
        app.access.session(&jar).as_ref(),
        Some(Section::Gates),
        "Gates",
        Some(now),
        body,
    )
    .into_response())
}

//! The page every view shares (navigation, who is signed in, the store's
//! name), how times read (UTC and relative, counted down live by the
//! script), error pages, and the style sheet and script.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use tenure::Timestamp;

use super::access::Session;
use super::App;
use crate::Failure;

/// The sections the navigation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Leases,
    Watch,
    Queues,
    Gates,
}

impl Section {
    const ALL: [(Section, &'static str, &'static str); 4] = [
        (Section::Leases, "/leases", "Leases"),
        (Section::Watch, "/watch", "Watch"),
        (Section::Queues, "/queues", "Queues"),
        (Section::Gates, "/gates", "Gates"),
    ];
}

/// A whole page: `body` under the navigation, `section` marked current.
pub(super) fn page(
    app: &App,
    session: Option<&Session>,
    section: Option<Section>,
    title: &str,
    body: Markup,
) -> Markup {
    page_at(app, session, section, title, None, body)
}

/// A whole page whose times count down against `now`, the store's clock.
pub(super) fn page_at(
    app: &App,
    session: Option<&Session>,
    section: Option<Section>,
    title: &str,
    now: Option<Timestamp>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · tenure" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/tenure.js" defer {}
            }
            body data-store-now=[now.map(|now| now.timestamp_millis())] {
                a.skip href="#main" { "Skip to content" }
                header {
                    nav aria-label="Sections" {
                        a.brand href="/" { "tenure" }
                        @for (each, path, name) in Section::ALL {
                            @if section == Some(each) {
                                a href=(path) aria-current="page" { (name) }
                            } @else {
                                a href=(path) { (name) }
                            }
                        }
                    }
                    div.who {
                        span.store title="The store (its password hidden)" { (app.options.store_label) }
                        @if let Some(session) = session {
                            @if app.options.allow_write {
                                span.mode.write { "signed in: actions allowed" }
                            } @else {
                                span.mode { "signed in, read-only" }
                            }
                            form.inline method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(session.csrf);
                                button.link type="submit" { "Sign out" }
                            }
                        } @else if app.options.allow_write {
                            a.mode href="/login" { "Sign in to act" }
                        } @else {
                            span.mode { "read-only" }
                        }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// A time as UTC, and relative to `now` (counted live by the script).
pub(super) fn time(at: Timestamp, now: Timestamp) -> Markup {
    html! {
        time datetime=(at.to_rfc3339()) { (utc(at)) }
        " "
        span.relative data-at=(at.timestamp_millis()) { "(" (relative(at, now)) ")" }
    }
}

/// `2026-12-07 06:00:00 UTC`.
pub(super) fn utc(at: Timestamp) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `in 4 s`, `3 min 2 s ago`: as the script writes it.
pub(super) fn relative(at: Timestamp, now: Timestamp) -> String {
    let millis = (at - now).num_milliseconds();
    let span = span_text(millis.unsigned_abs() / 1000);
    if millis >= 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// Seconds as the largest two units: `4 s`, `2 min 5 s`, `3 h 1 min`,
/// `2 d 4 h`.
fn span_text(seconds: u64) -> String {
    let (days, hours, minutes, seconds) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    if days > 0 {
        format!("{days} d {hours} h")
    } else if hours > 0 {
        format!("{hours} h {minutes} min")
    } else if minutes > 0 {
        format!("{minutes} min {seconds} s")
    } else {
        format!("{seconds} s")
    }
}

/// `path?name=value&...`, every value percent-encoded.
pub(super) fn url(path: &str, parameters: &[(&str, &str)]) -> String {
    if parameters.is_empty() {
        return path.to_owned();
    }
    let query = serde_urlencoded::to_string(parameters).unwrap_or_default();
    format!("{path}?{query}")
}

/// A page saying what went wrong, with its status code.
#[derive(Debug)]
pub(super) struct Problem {
    status: StatusCode,
    title: String,
    message: String,
}

impl Problem {
    pub(super) fn new(status: StatusCode, title: &str, message: &str) -> Self {
        Problem {
            status,
            title: title.to_owned(),
            message: message.to_owned(),
        }
    }

    /// `Refused (409): message`, for the log.
    pub(super) fn summary(&self) -> String {
        format!(
            "{} ({}): {}",
            self.title,
            self.status.as_u16(),
            self.message
        )
    }

    pub(super) fn not_found(message: &str) -> Self {
        Problem::new(StatusCode::NOT_FOUND, "Not found", message)
    }
}

impl From<tenure::Error> for Problem {
    fn from(error: tenure::Error) -> Self {
        if error.is_retryable() {
            return Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "The store is unavailable",
                &format!(
                    "{}. Check that the server is running and reachable, then reload.",
                    error.message()
                ),
            );
        }
        let status = match error.kind() {
            tenure::ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Problem::new(
            status,
            &format!("The store answered {}", error.kind()),
            error.message(),
        )
    }
}

impl From<Failure> for Problem {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Refused(message) => Problem::new(StatusCode::CONFLICT, "Refused", &message),
            Failure::Usage(message) => Problem::new(StatusCode::BAD_REQUEST, "Not done", &message),
            Failure::Store(error) => error.into(),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (self.title) " · tenure" }
                    link rel="stylesheet" href="/assets/style.css";
                }
                body {
                    header { nav aria-label="Sections" {
                        a.brand href="/" { "tenure" }
                        @for (_, path, name) in Section::ALL { a href=(path) { (name) } }
                    } }
                    main #main {
                        h1 { (self.title) }
                        p.problem role="alert" { (self.message) }
                    }
                }
            }
        };
        (self.status, body).into_response()
    }
}

/// The answer to a form whose CSRF token is not its session's.
pub(super) fn bad_csrf() -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "Form expired",
        "The form's CSRF token does not match your session (it was signed out, the \
         server restarted, or the form came from another site). Nothing was done: go back, \
         reload the page and confirm again.",
    )
}

/// Text cut to `most` characters, with `…` when cut.
pub(super) fn cut(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// JSON, pretty, for a `<pre>`.
pub(super) fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|error| format!("(not JSON: {error})"))
}

/// `GET /assets/style.css`.
pub(super) async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/style.css"),
    )
        .into_response()
}

/// `GET /assets/tenure.js`.
pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/tenure.js"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_relative_to_the_store_clock() {
        let now = Timestamp::default();
        let at = |seconds| now + chrono::TimeDelta::seconds(seconds);
        assert_eq!(relative(at(4), now), "in 4 s");
        assert_eq!(relative(at(-125), now), "2 min 5 s ago");
        assert_eq!(relative(at(3 * 3600 + 65), now), "in 3 h 1 min");
        assert_eq!(relative(at(-(2 * 86_400 + 4 * 3600)), now), "2 d 4 h ago");
        assert_eq!(relative(now, now), "in 0 s");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            url("/lease", &[("id", "a b&c=d/é")]),
            "/lease?id=a+b%26c%3Dd%2F%C3%A9"
        );
        assert_eq!(url("/queues", &[]), "/queues");
    }
}

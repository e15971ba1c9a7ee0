//! Who may read and who may act: the token, signed-in sessions with their
//! CSRF tokens, and the guard every request passes (the `Host` check, the
//! sign-in a token file demands, and the headers that keep pages from
//! being framed, sniffed or cached).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use maud::html;
use serde::Deserialize;
use subtle::ConstantTimeEq as _;

use super::render::{self, Problem};
use super::{Options, Shared};

/// The secret an operator signs in with. Its `Debug` shows `***`.
#[derive(Clone)]
pub struct Token(Arc<str>);

impl std::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Token(***)")
    }
}

impl Token {
    /// The fewest characters a token may have.
    pub const MIN_LENGTH: usize = 16;

    /// A token of the operator's choosing.
    ///
    /// # Errors
    ///
    /// When it is shorter than [`Token::MIN_LENGTH`] characters or holds
    /// whitespace or control characters.
    pub fn new(text: &str) -> Result<Self, String> {
        if text.chars().count() < Self::MIN_LENGTH {
            return Err(format!(
                "is shorter than {} characters: use a long random one, e.g. the output of \
                 `openssl rand -hex 32`",
                Self::MIN_LENGTH
            ));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("holds whitespace or control characters".to_owned());
        }
        Ok(Token(text.into()))
    }

    /// A new random token: 32 bytes from the operating system, in hex.
    ///
    /// # Errors
    ///
    /// When the operating system gives no randomness.
    pub fn generate() -> std::io::Result<Self> {
        Ok(Token(random_hex()?.into()))
    }

    /// The token's text, to print once at start.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    fn matches(&self, offered: &str) -> bool {
        bool::from(self.0.as_bytes().ct_eq(offered.as_bytes()))
    }
}

/// 32 random bytes in hex.
fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The cookie naming a signed-in session.
const SESSION_COOKIE: &str = "tenure_session";
/// How long a session lasts from its sign-in.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept; signing in beyond it ends the oldest.
const MAX_SESSIONS: usize = 64;

/// A signed-in session, as a page sees it. Its `Debug` hides the CSRF
/// token.
#[derive(Clone)]
pub(super) struct Session {
    /// Its number since the server started, for the log (its id is a
    /// secret).
    pub(super) number: u64,
    /// The token its forms carry.
    pub(super) csrf: String,
    expires: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Session")
            .field("number", &self.number)
            .field("csrf", &"***")
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Whether a form's CSRF token is this session's.
    pub(super) fn accepts(&self, csrf: Option<&str>) -> bool {
        csrf.is_some_and(|offered| bool::from(self.csrf.as_bytes().ct_eq(offered.as_bytes())))
    }
}

/// The token, the sessions signed in with it, and what needs them.
pub(super) struct Access {
    token: Option<Token>,
    token_for_reads: bool,
    allowed_hosts: Option<Vec<String>>,
    sessions: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Session>,
    signed_in: u64,
}

impl Access {
    pub(super) fn new(options: &Options) -> Self {
        Access {
            token: options.token.clone(),
            token_for_reads: options.token_for_reads,
            allowed_hosts: options.allowed_hosts.clone(),
            sessions: Mutex::default(),
        }
    }

    /// Whether every page needs a signed-in session (a token file).
    pub(super) fn reads_need_session(&self) -> bool {
        self.token_for_reads
    }

    /// Whether signing in means anything here.
    pub(super) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The live session the request's cookie names, if any.
    pub(super) fn session(&self, jar: &CookieJar) -> Option<Session> {
        let id = jar.get(SESSION_COOKIE)?.value();
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let session = sessions.by_id.get(id)?.clone();
        if session.expires <= Instant::now() {
            sessions.by_id.remove(id);
            return None;
        }
        Some(session)
    }

    /// Starts a session: its id (the cookie's value) and number.
    fn sign_in(&self) -> std::io::Result<(String, u64)> {
        let id = random_hex()?;
        let csrf = random_hex()?;
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.by_id.retain(|_, session| session.expires > now);
        if sessions.by_id.len() >= MAX_SESSIONS {
            let oldest = sessions
                .by_id
                .iter()
                .min_by_key(|(_, session)| session.number)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                sessions.by_id.remove(&oldest);
            }
        }
        sessions.signed_in += 1;
        let number = sessions.signed_in;
        sessions.by_id.insert(
            id.clone(),
            Session {
                number,
                csrf,
                expires: now + SESSION_LIFETIME,
            },
        );
        Ok((id, number))
    }

    fn sign_out(&self, jar: &CookieJar) {
        if let Some(cookie) = jar.get(SESSION_COOKIE) {
            self.sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .by_id
                .remove(cookie.value());
        }
    }

    fn host_allowed(&self, request: &Request) -> bool {
        let Some(allowed) = &self.allowed_hosts else {
            return true;
        };
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .unwrap_or_default();
        allowed.iter().any(|name| name.eq_ignore_ascii_case(host))
    }
}

/// Every request: answered only for an allowed `Host`; sent to sign in
/// when every page needs the token; answered with headers that forbid
/// framing, sniffing, caching and inline scripts.
pub(super) async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let mut response = if !app.access.host_allowed(&request) {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "Unknown host",
            "This server answers only requests addressed to the address it listens on \
             (open the address `tenure serve` printed).",
        )
        .into_response()
    } else if needs_sign_in(&app, &request) {
        if request.method() == Method::GET {
            let next = request
                .uri()
                .path_and_query()
                .map_or("/", |path| path.as_str());
            Redirect::to(&render::url("/login", &[("next", next)])).into_response()
        } else {
            super::actions::log("-", request.uri().path(), "-", "refused: not signed in");
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "Sign in first",
                "Every page of this server needs the token it was started with.",
            )
            .into_response()
        }
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether this request needs a session it lacks: with a token file, every
/// page but the sign-in page and the style sheet and script.
fn needs_sign_in(app: &Shared, request: &Request) -> bool {
    if !app.access.reads_need_session() {
        return false;
    }
    let path = request.uri().path();
    if path == "/login" || path.starts_with("/assets/") {
        return false;
    }
    let jar = CookieJar::from_headers(request.headers());
    app.access.session(&jar).is_none()
}

/// Where to go after signing in.
#[derive(Debug, Deserialize)]
pub(super) struct NextQuery {
    next: Option<String>,
}

/// `GET /login`: the sign-in form.
pub(super) async fn login_page(
    State(app): State<Shared>,
    jar: CookieJar,
    Query(query): Query<NextQuery>,
) -> Response {
    let next = local_path(query.next.as_deref());
    if !app.access.has_token() {
        return Redirect::to(next).into_response();
    }
    let body = html! {
        h1 { "Sign in" }
        p { "Give the token `tenure serve` was started with (printed once at its start, or the contents of its --token-file)." }
        form.card method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            button type="submit" { "Sign in" }
        }
    };
    render::page(
        &app,
        app.access.session(&jar).as_ref(),
        None,
        "Sign in",
        body,
    )
    .into_response()
}

/// The sign-in form's fields (no `Debug`: it holds the offered token).
#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: Option<String>,
    next: Option<String>,
}

/// `POST /login`: a session for the right token, its cookie HTTP-only and
/// same-site.
pub(super) async fn login(
    State(app): State<Shared>,
    jar: CookieJar,
    Form(form): Form<LoginForm>,
) -> Response {
    let offered = form.token.as_deref().unwrap_or_default();
    let Some(token) = &app.access.token else {
        return Redirect::to("/").into_response();
    };
    if !token.matches(offered) {
        super::actions::log("-", "sign-in", "-", "refused: wrong token");
        return Problem::new(
            StatusCode::FORBIDDEN,
            "Wrong token",
            "That is not the token this server was started with; nothing was signed in.",
        )
        .into_response();
    }
    let (id, number) = match app.access.sign_in() {
        Ok(session) => session,
        Err(error) => {
            return Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Cannot sign in",
                &format!("The operating system gave no randomness for a session: {error}"),
            )
            .into_response()
        }
    };
    super::actions::log(&number.to_string(), "sign-in", "-", "signed in");
    let cookie = Cookie::build((SESSION_COOKIE, id))
        .http_only(true)
        // Lax: a link from a chat or an alert opens signed in; actions
        // need a POST carrying the CSRF token all the same.
        .same_site(SameSite::Lax)
        .path("/")
        .build();
    (
        jar.add(cookie),
        Redirect::to(local_path(form.next.as_deref())),
    )
        .into_response()
}

/// The sign-out form's field (no `Debug`: it holds the CSRF token).
#[derive(Deserialize)]
pub(super) struct LogoutForm {
    csrf: Option<String>,
}

/// `POST /logout`: ends the session (its CSRF token required, so another
/// site cannot sign an operator out).
pub(super) async fn logout(
    State(app): State<Shared>,
    jar: CookieJar,
    Form(form): Form<LogoutForm>,
) -> Response {
    let Some(session) = app.access.session(&jar) else {
        return Redirect::to("/").into_response();
    };
    if !session.accepts(form.csrf.as_deref()) {
        super::actions::log(
            &session.number.to_string(),
            "sign-out",
            "-",
            "refused: CSRF token mismatch",
        );
        return render::bad_csrf().into_response();
    }
    app.access.sign_out(&jar);
    super::actions::log(&session.number.to_string(), "sign-out", "-", "signed out");
    (jar.remove(Cookie::from(SESSION_COOKIE)), Redirect::to("/")).into_response()
}

/// `next` when it is a path on this server, else `/` (no open redirect).
fn local_path(next: Option<&str>) -> &str {
    match next {
        // Browsers drop tabs and line breaks from a URL: `/\t/host` would
        // become `//host`. Only printable ASCII, then.
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && path.bytes().all(|byte| byte.is_ascii_graphic()) =>
        {
            path
        }
        _ => "/",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_never_printed_by_debug() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("sixteen chars no").is_err());
        let token = Token::new("0123456789abcdef").expect("long enough");
        assert_eq!(format!("{token:?}"), "Token(***)");
        assert!(token.matches("0123456789abcdef"));
        assert!(!token.matches("0123456789abcdeF"));
        let generated = Token::generate().expect("randomness");
        assert_eq!(generated.reveal().len(), 64);
        assert_ne!(
            generated.reveal(),
            Token::generate().expect("randomness").reveal()
        );
    }

    #[test]
    fn sign_in_goes_only_to_paths_on_this_server() {
        assert_eq!(local_path(Some("/lease?id=a")), "/lease?id=a");
        assert_eq!(local_path(Some("//evil.example/")), "/");
        assert_eq!(local_path(Some("https://evil.example/")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        for control in [
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/ /x",
        ] {
            assert_eq!(local_path(Some(control)), "/", "{control:?}");
        }
        assert_eq!(local_path(None), "/");
    }
}

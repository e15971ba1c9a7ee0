//! Printing connection URLs without their secrets.
//!
//! Every backend's configuration prints its URL in `Debug` and in connection
//! errors, and that text ends up in logs. Passwords are routinely written
//! unescaped (`postgres://app:pa/ss@db/jobs`, `redis://:p@ss?@cache`), so a
//! parser that splits the URL the way a well-formed one would split leaks the
//! part after the first `/`, `?` or `@`. [`redact_url`] is the one function
//! every backend uses: where the text is ambiguous it hides more, never less.

use std::ops::Range;

/// What replaces a secret.
const REDACTED: &str = "***";

/// What stands for text that is not a URL at all (a libpq `key=value`
/// string, say): there is no telling where its password is.
const NOT_A_URL: &str = "<not a URL>";

/// Query parameters whose value is a secret, compared without regard to case.
const SECRET_PARAMETERS: [&str; 6] = [
    "password",
    "pass",
    "passwd",
    "pwd",
    "sslpassword",
    "sentinel_password",
];

/// `url` with every password replaced by `***`, safe to log.
///
/// * The user-info password (`scheme://user:secret@host`) is hidden from the
///   first `:` after the scheme to the **last** `@`, so a password holding
///   unescaped `/`, `?`, `#`, `:` or `@` is hidden whole.
/// * The value of every `password`, `pass`, `passwd`, `pwd`, `sslpassword`
///   or `sentinel_password` query parameter, in any case, is hidden with
///   the rest of the query after it: a password holding an unescaped `&`
///   reads as further parameters (`&tail` or `&name=value`), which cannot
///   be told from real ones.
/// * Text without a `scheme://` prefix is hidden entirely.
///
/// ```
/// use tenure_lease_core::redact::redact_url;
///
/// assert_eq!(redact_url("postgres://app:pa/ss@db/jobs"), "postgres://app:***@db/jobs");
/// assert_eq!(
///     redact_url("redis://cache:6379/0?db=1&PASSWORD=hunter2&x=y"),
///     "redis://cache:6379/0?db=1&PASSWORD=***"
/// );
/// assert_eq!(redact_url("host=db password=hunter2"), "<not a URL>");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return NOT_A_URL.to_owned();
    };
    if !is_scheme(scheme) {
        return NOT_A_URL.to_owned();
    }
    let mut secrets = Vec::new();
    secrets.extend(user_info_password(rest));
    // A password may hold a `?` or an `@`, so any `?` may be the one that
    // starts the query: hide what any reading calls a secret.
    for (question_mark, _) in rest.match_indices('?') {
        secrets.extend(secret_parameter_values(rest, question_mark + 1));
    }
    format!("{scheme}://{}", hide(rest, &secrets))
}

/// RFC 3986: a letter, then letters, digits, `+`, `-` or `.`.
fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The bytes between the first `:` and the last `@`. When the last `@`
/// belongs to the query rather than the user info this is more than the
/// password, which is the safe way to be wrong.
fn user_info_password(rest: &str) -> Option<Range<usize>> {
    let at = rest.rfind('@')?;
    let colon = rest[..at].find(':')?;
    Some(colon + 1..at)
}

/// The value of the first secret parameter of the query starting at byte
/// `start`, run on to the end of the text: what follows may be the rest of
/// a password holding an unescaped `&`.
fn secret_parameter_values(rest: &str, start: usize) -> Option<Range<usize>> {
    let mut parameter_start = start;
    for parameter in rest[start..].split('&') {
        if let Some((name, value)) = parameter.split_once('=') {
            if is_secret_parameter(name) && !value.is_empty() {
                return Some(parameter_start + name.len() + 1..rest.len());
            }
        }
        parameter_start += parameter.len() + 1;
    }
    None
}

fn is_secret_parameter(name: &str) -> bool {
    SECRET_PARAMETERS
        .iter()
        .any(|secret| name.eq_ignore_ascii_case(secret))
}

/// `text` with each run of bytes inside any of `secrets` printed as `***`.
/// Every range starts and ends next to an ASCII delimiter, so on a character
/// boundary.
fn hide(text: &str, secrets: &[Range<usize>]) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut hiding = false;
    for (index, c) in text.char_indices() {
        let secret = secrets.iter().any(|range| range.contains(&index));
        if secret && !hiding {
            shown.push_str(REDACTED);
        } else if !secret {
            shown.push(c);
        }
        hiding = secret;
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hides_user_info_passwords_with_unescaped_delimiters() {
        for (url, shown) in [
            (
                "postgres://app:p%40ss:word@db:5432/jobs?sslmode=require",
                "postgres://app:***@db:5432/jobs?sslmode=require",
            ),
            ("postgres://app:pa/ss@db/jobs", "postgres://app:***@db/jobs"),
            (
                "redis://:p@ss?w#rd@cache:6379/0",
                "redis://:***@cache:6379/0",
            ),
            ("rediss://:hunter2@host", "rediss://:***@host"),
            ("redis://user@host", "redis://user@host"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn hides_secret_query_parameters_in_any_case() {
        for (url, shown) in [
            (
                "postgres://db/jobs?user=app&password=hunter2&sslmode=disable",
                "postgres://db/jobs?user=app&password=***",
            ),
            (
                "postgres://db/jobs?password=hun&ter=2",
                "postgres://db/jobs?password=***",
            ),
            (
                "postgres://db/jobs?PASSWORD=hunter2",
                "postgres://db/jobs?PASSWORD=***",
            ),
            (
                "redis+unix:///run/redis.sock?db=2&pass=hunter2",
                "redis+unix:///run/redis.sock?db=2&pass=***",
            ),
            (
                "postgres://db/jobs?password=hunter2&user=a@b",
                "postgres://db/jobs?password=***",
            ),
            (
                "redis+sentinel://s1/svc?sentinel_password=hun&ter&2&db=1",
                "redis+sentinel://s1/svc?sentinel_password=***",
            ),
            (
                "postgres://db/jobs?sslmode=require&password=hun&ter2",
                "postgres://db/jobs?sslmode=require&password=***",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn hides_text_that_is_not_a_url() {
        for text in [
            "host=db user=app password=hunter2 dbname=jobs",
            "hunter2",
            "host=db password=a://b",
            "://hunter2@db",
        ] {
            assert_eq!(redact_url(text), NOT_A_URL, "{text}");
        }
    }

    #[test]
    fn leaves_urls_without_secrets_alone() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://localhost/test",
            "postgresql:///test?host=/var/run/postgresql",
            "redis://127.0.0.1:6379/0",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    /// Secrets are drawn from letters no other part of a generated URL uses,
    /// mixed with every delimiter a URL parser splits on.
    fn secret(delimiters: &'static str) -> impl Strategy<Value = String> {
        let alphabet: Vec<char> = "QXZ".chars().chain(delimiters.chars()).collect();
        (
            prop::sample::select(vec!['Q', 'X', 'Z']),
            prop::collection::vec(prop::sample::select(alphabet), 0..12),
            prop::sample::select(vec!['Q', 'X', 'Z']),
        )
            .prop_map(|(first, middle, last)| {
                std::iter::once(first)
                    .chain(middle)
                    .chain(std::iter::once(last))
                    .collect()
            })
    }

    fn plain() -> impl Strategy<Value = String> {
        "[a-p0-9._-]{0,8}"
    }

    proptest! {
        #[test]
        fn no_generated_password_is_ever_printed(
            scheme in prop::sample::select(vec!["postgres", "postgresql", "redis", "rediss", "redis+unix"]),
            user in plain(),
            host in "[a-p][a-p0-9.-]{0,10}",
            port in prop::option::of(1u16..),
            path in plain(),
            user_password in prop::option::of(secret("/?@:#&=%")),
            // A query value with `&` or `#` must be percent-encoded to mean
            // one value, so the generated ones leave those out.
            query_password in prop::option::of((
                prop::sample::select(vec!["password", "PASSWORD", "Password", "pass", "PASS", "passwd", "pwd", "sslpassword", "sentinel_password"]),
                secret("/?@:=%"),
            )),
            other_parameter in prop::option::of(("[a-p]{1,6}", "[a-p0-9@._-]{0,8}")),
        ) {
            let mut url = format!("{scheme}://");
            if let Some(password) = &user_password {
                url.push_str(&format!("{user}:{password}@"));
            } else if !user.is_empty() {
                url.push_str(&format!("{user}@"));
            }
            url.push_str(&host);
            if let Some(port) = port {
                url.push_str(&format!(":{port}"));
            }
            url.push_str(&format!("/{path}"));
            let mut parameters = Vec::new();
            if let Some((name, value)) = &other_parameter {
                parameters.push(format!("{name}={value}"));
            }
            if let Some((name, password)) = &query_password {
                parameters.push(format!("{name}={password}"));
            }
            if !parameters.is_empty() {
                url.push('?');
                url.push_str(&parameters.join("&"));
            }
            let shown = redact_url(&url);
            prop_assert!(
                !shown.contains(['Q', 'X', 'Z']),
                "{url} was printed as {shown}"
            );
            // An `@` in the query makes the user info ambiguous, and then
            // more than the password may be hidden.
            let unambiguous = other_parameter.as_ref().is_none_or(|(_, value)| !value.contains('@'));
            if user_password.is_none() && query_password.is_none() && unambiguous {
                prop_assert_eq!(shown, url);
            }
        }
    }
}

//! Connection settings, checked before anything connects, and printed
//! without credentials.

use std::fmt;
use std::time::Duration;

use tenure_lease_core::backend::validate;
use tenure_lease_core::redact::redact_url;
use tenure_lease_core::{Error, ErrorKind, Result};

/// How a [`RedisStore`](crate::RedisStore) reaches its server and which
/// namespace of keys it owns.
///
/// `Debug` never prints the password of the URL.
///
/// ```
/// use std::time::Duration;
/// use tenure_backend_redis::RedisConfig;
///
/// let config = RedisConfig::new("redis://:s3cret@cache.internal:6379/0", "billing")
///     .operation_timeout(Duration::from_secs(2));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    namespace: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    client_name: String,
}

impl RedisConfig {
    /// How long one operation may take, reconnecting included, before it
    /// answers [`ErrorKind::Timeout`].
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
    /// How long connecting may take, retries included.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The namespace of a config made from a bare URL
    /// ([`From<&str>`](#impl-From%3C%26str%3E-for-RedisConfig)).
    pub const DEFAULT_NAMESPACE: &'static str = "tenure";
    /// The name the store gives its connection (`CLIENT SETNAME`).
    pub const DEFAULT_CLIENT_NAME: &'static str = "tenure";

    /// Settings for the server at `url` (`redis://[user:password@]host:port[/db]`,
    /// `rediss://...`, `redis+unix:///path?pass=...`), keeping every key
    /// under `namespace`.
    ///
    /// The namespace separates independent stores on one server: it must be
    /// non-empty, at most 256 bytes, without control characters and without
    /// `{` or `}` (it becomes the keys' hash tag).
    pub fn new(url: impl Into<String>, namespace: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            namespace: namespace.into(),
            operation_timeout: Self::DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            client_name: Self::DEFAULT_CLIENT_NAME.to_owned(),
        }
    }

    /// Sets the bound on one operation.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Sets the bound on connecting.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the connection's name, as `CLIENT LIST` shows it (printable
    /// ASCII, no spaces). The store names every connection it opens,
    /// reconnections included.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The namespace of this store's keys.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The connection's name.
    pub fn connection_name(&self) -> &str {
        &self.client_name
    }

    /// The URL, safe to log: any password replaced by `***`.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let namespace = &self.namespace;
        if namespace.is_empty() || namespace.len() > validate::MAX_NAME_BYTES {
            return Err(config_error(format!(
                "the namespace must be 1 to {} bytes long, got {}",
                validate::MAX_NAME_BYTES,
                namespace.len()
            )));
        }
        if namespace.contains(['{', '}']) || namespace.chars().any(char::is_control) {
            return Err(config_error(format!(
                "the namespace {namespace:?} must not contain `{{`, `}}` or control characters"
            )));
        }
        let name = &self.client_name;
        if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(config_error(format!(
                "the client name {name:?} must be non-empty printable ASCII without spaces"
            )));
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(config_error("timeouts must be greater than zero"));
        }
        Ok(())
    }
}

impl From<&str> for RedisConfig {
    /// [`RedisConfig::new`]`(url, `[`DEFAULT_NAMESPACE`](RedisConfig::DEFAULT_NAMESPACE)`)`.
    fn from(url: &str) -> Self {
        RedisConfig::new(url, RedisConfig::DEFAULT_NAMESPACE)
    }
}

impl From<String> for RedisConfig {
    /// [`RedisConfig::new`]`(url, `[`DEFAULT_NAMESPACE`](RedisConfig::DEFAULT_NAMESPACE)`)`.
    fn from(url: String) -> Self {
        RedisConfig::new(url, RedisConfig::DEFAULT_NAMESPACE)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("namespace", &self.namespace)
            .field("operation_timeout", &self.operation_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("client_name", &self.client_name)
            .finish()
    }
}

pub(crate) fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_passwords() {
        for (url, shown) in [
            (
                "redis://user:hunter2@host:6379/1",
                "redis://user:***@host:6379/1",
            ),
            ("rediss://:hunter2@host", "rediss://:***@host"),
            (
                "redis+unix:///run/redis.sock?db=2&pass=hunter2",
                "redis+unix:///run/redis.sock?db=2&pass=***",
            ),
            (
                "unix:///run/redis.sock?password=hunter2",
                "unix:///run/redis.sock?password=***",
            ),
            ("redis://host:6379", "redis://host:6379"),
            ("hunter2", "<not a URL>"),
        ] {
            let config = RedisConfig::new(url, "ns");
            let debug = format!("{config:?}");
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains(shown), "{debug} should show {shown}");
        }
    }

    #[test]
    fn namespaces_with_braces_or_control_characters_are_refused() {
        for namespace in ["", "a{b", "a}b", "tab\there", &"n".repeat(257)] {
            let error = RedisConfig::new("redis://host", namespace)
                .validate()
                .expect_err(namespace);
            assert_eq!(error.kind(), ErrorKind::Config);
        }
        for namespace in ["tenant:1", "ünïcode spaces *?[", "n"] {
            assert!(RedisConfig::new("redis://host", namespace)
                .validate()
                .is_ok());
        }
    }

    #[test]
    fn client_names_must_be_printable_without_spaces() {
        let error = RedisConfig::new("redis://host", "ns")
            .client_name("has space")
            .validate()
            .expect_err("a space");
        assert_eq!(error.kind(), ErrorKind::Config);
    }
}

//! Redis errors as tenure errors, decided in one place.

use redis::{RedisError, ServerErrorKind};
use tenure_lease_core::tls::find_cause;
use tenure_lease_core::{Error, ErrorKind};

/// The error code scripts raise when a stored record cannot be judged.
const CORRUPT_CODE: &str = "TENURE_CORRUPT";

/// Classifies a Redis error:
/// * I/O failures, dropped or refused connections, a server that is loading,
///   read-only (mid-failover) or busy, a cluster slot that moved (`MOVED`,
///   `ASK`: nothing was run), or out of memory (`OOM`, under
///   `maxmemory-policy noeviction`): [`ErrorKind::Unavailable`], retryable
///   (the connection manager reconnects meanwhile);
/// * time-outs: [`ErrorKind::Timeout`];
/// * a record a script could not judge, a key of the namespace holding the
///   wrong type, an answer of the wrong shape: [`ErrorKind::Corrupt`];
/// * a script that fails to run on this server: [`ErrorKind::Incompatible`];
/// * a refused TLS handshake (an untrusted or misnamed certificate, a
///   plain-text port): [`ErrorKind::Config`], not retryable;
/// * refused or missing credentials (`WRONGPASS`, `NOAUTH`) or permissions
///   (`NOPERM`): [`ErrorKind::Config`], not retryable: retrying cannot fix a
///   password.
///
/// `NOSCRIPT` never reaches here: [`redis::Script`] loads the script and
/// runs it again (and a missing function's `Function not found` neither:
/// the store loads its library and calls again).
pub(crate) fn from_redis(error: RedisError) -> Error {
    if let Some(refused) = find_cause::<rustls::Error>(&error) {
        let message = format!(
            "the TLS handshake with the Redis server failed: {refused}; check that the URL is \
             rediss:// to a TLS port, that the server's certificate is signed by an authority \
             the store trusts (the system's, or tls_ca= / RedisConfig::tls) and names the \
             host in the URL"
        );
        return Error::new(ErrorKind::Config, message).with_source(error);
    }
    let kind = classify(&error);
    let message = match error.detail() {
        Some(detail) if error.code() == Some("READONLY") => format!(
            "the Redis server refused a write as a read-only replica (READONLY: {detail}): it \
             was demoted by a failover, or the URL names a replica; nothing was written. Point \
             the store at the primary, or at an address that follows it through failovers"
        ),
        Some(detail) if matches!(error.code(), Some("MOVED" | "ASK")) => format!(
            "the cluster moved the namespace's hash slot to another node ({}: {detail}): \
             nothing was run; the store follows the slot, so retry",
            error.code().unwrap_or_default()
        ),
        Some(detail) if error.code() == Some("OOM") => format!(
            "the Redis server is out of memory (OOM: {detail}); it refused the script's first \
             write, so nothing was written: free memory or raise maxmemory, then retry"
        ),
        Some(detail) => format!("Redis answered {}: {detail}", error.category()),
        None => format!("Redis call failed: {error}"),
    };
    Error::new(kind, message).with_source(error)
}

fn classify(error: &RedisError) -> ErrorKind {
    if error.is_timeout() {
        return ErrorKind::Timeout;
    }
    if error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal() {
        return ErrorKind::Unavailable;
    }
    match error.kind() {
        redis::ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::NoScript,
        ) => ErrorKind::Unavailable,
        redis::ErrorKind::AuthenticationFailed
        | redis::ErrorKind::InvalidClientConfig
        | redis::ErrorKind::Server(ServerErrorKind::NoPerm) => ErrorKind::Config,
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => ErrorKind::Corrupt,
        _ => match error.code() {
            Some(CORRUPT_CODE | "WRONGTYPE") => ErrorKind::Corrupt,
            Some("NOAUTH" | "WRONGPASS" | "NOPERM") => ErrorKind::Config,
            Some("ERR")
                if error
                    .detail()
                    .is_some_and(|d| d.contains("user_script") || d.contains("user_function")) =>
            {
                ErrorKind::Incompatible
            }
            _ => ErrorKind::Unavailable,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(text: &str) -> RedisError {
        let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn dropped_connections_are_retryable() {
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(from_redis(dropped).is_retryable());
        let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(from_redis(timed_out).kind(), ErrorKind::Timeout);
    }

    #[test]
    fn script_reports_are_classified() {
        let corrupt = server_error("TENURE_CORRUPT tenure:{ns}:rec:a: unknown status");
        assert_eq!(from_redis(corrupt).kind(), ErrorKind::Corrupt);
        let wrong_type = server_error("WRONGTYPE Operation against a key");
        assert_eq!(from_redis(wrong_type).kind(), ErrorKind::Corrupt);
    }

    #[test]
    fn demoted_servers_say_so() {
        let error = from_redis(server_error(
            "READONLY You can't write against a read only replica.",
        ));
        assert!(error.is_retryable());
        assert!(error.message().contains("replica"), "{error}");
        assert!(error.message().contains("primary"), "{error}");
    }

    #[test]
    fn refused_credentials_are_configuration_errors() {
        for text in [
            "NOAUTH Authentication required.",
            "WRONGPASS invalid username-password pair or user is disabled.",
            "NOPERM User app has no permissions to run the 'config|get' command",
        ] {
            let error = from_redis(server_error(text));
            assert_eq!(error.kind(), ErrorKind::Config, "{text}");
            assert!(!error.is_retryable(), "{text}");
        }
    }
}

//! etcd's errors as the store's: what was never sent, what is unknown, and
//! what a deployment must change.

use tenure_lease_core::tls::find_cause;
use tenure_lease_core::{Error, ErrorKind};

/// Whether the request surely never reached the member (no connection could
/// be made), so sending it to another member cannot apply it twice.
pub(crate) fn never_sent(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::Unavailable && connect_failure(status.message())
        }
        _ => false,
    }
}

/// Whether etcd refused a request, applying nothing, because an etcd lease
/// it attaches a key to has ended.
pub(crate) fn lease_ended(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::NotFound && status.message().contains("lease not found"))
}

/// Whether a gRPC message reports a connection that was never made.
fn connect_failure(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "error trying to connect",
        "tcp connect error",
        "connection refused",
        "service was not ready",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

/// A client error as the store's error. Anything that may have reached the
/// server is an unknown outcome (`Unavailable` or `Timeout`).
pub(crate) fn store_error(error: etcd_client::Error) -> Error {
    // etcd-client's error names no source: the cause hangs off the gRPC
    // status it wraps.
    let refused = match &error {
        etcd_client::Error::GRpcStatus(status) => find_cause::<rustls::Error>(status),
        other => find_cause::<rustls::Error>(other),
    };
    if let Some(refused) = refused {
        let message = format!(
            "the TLS handshake with etcd failed: {refused}; check that the members listen for \
             TLS (etcds://), that their certificates are signed by an authority the store \
             trusts (the system's, or tls_ca= / EtcdConfig::tls) and name the host in the URL"
        );
        return Error::new(ErrorKind::Config, message).with_source(error);
    }
    let (kind, message) = match &error {
        etcd_client::Error::GRpcStatus(status) => {
            use tonic::Code;
            let text = status.message();
            match status.code() {
                Code::DeadlineExceeded => (ErrorKind::Timeout, format!("etcd did not answer in time: {text}")),
                Code::InvalidArgument if text.contains("too many operations") => (
                    ErrorKind::Config,
                    format!(
                        "etcd refused a transaction as too large ({text}): raise the cluster's \
                         --max-txn-ops and set EtcdConfig::max_txn_ops to match"
                    ),
                ),
                Code::InvalidArgument if text.contains("too large") => (
                    ErrorKind::Config,
                    format!("etcd refused a request as too large ({text}): raise the cluster's --max-request-bytes"),
                ),
                Code::PermissionDenied | Code::Unauthenticated => (
                    ErrorKind::Config,
                    format!("etcd refused the credentials or their role ({text}): grant read and write on the key prefix"),
                ),
                _ => (ErrorKind::Unavailable, format!("etcd request failed, outcome unknown: {text}")),
            }
        }
        etcd_client::Error::InvalidArgs(_)
        | etcd_client::Error::InvalidUri(_)
        | etcd_client::Error::EndpointError(_) => (
            ErrorKind::Config,
            format!("the etcd endpoints are wrong: {error}"),
        ),
        _ => (
            ErrorKind::Unavailable,
            format!("etcd request failed, outcome unknown: {error}"),
        ),
    };
    Error::new(kind, message).with_source(error)
}

/// What a request that did not answer within `timeout` is.
pub(crate) fn timed_out(timeout: std::time::Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("etcd did not answer within {timeout:?}; the outcome is unknown, retry"),
    )
}

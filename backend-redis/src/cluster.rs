//! Redis Cluster: a `redis+cluster://` URL names some of the cluster's
//! nodes, the `redis` crate's cluster client learns the rest and which node
//! serves which hash slot, and follows the cluster when slots move or a
//! replica is promoted (it learns the new map on `MOVED` and on a lost
//! connection; the call that met the change fails, retryable, rather than
//! being sent again).
//!
//! Why this works with the scripts unchanged: every key of a namespace
//! carries the namespace as its hash tag, so the whole namespace lives in
//! one slot, on one primary, and a script that builds keys at run time
//! still touches only that slot. The store sends every command, keyless
//! ones too (`SCAN`, `INFO`, `FUNCTION LOAD`, `WAIT`), to the primary of
//! its namespace's slot (see [`crate::connection`]), so each namespace is a
//! single-server store on the node that holds it, and different
//! namespaces spread over the cluster's primaries.

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::RedisError;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::{Error, ErrorKind, Result};

use crate::config::{config_error, RedisConfig};
use crate::error;
use crate::hosts::HostListForm;

/// The port a node listens on when the URL names none.
const DEFAULT_NODE_PORT: u16 = 6379;

/// The URLs that name a cluster's nodes rather than one server.
const FORM: HostListForm = HostListForm {
    schemes: [("redis+cluster", false), ("rediss+cluster", true)],
    default_port: DEFAULT_NODE_PORT,
    host_noun: "node",
    name: "a Redis Cluster URL",
    expected: "redis+cluster://[user:password@]host:port[,host:port...]",
};

/// Where a cluster's nodes are, parsed from a `redis+cluster://` or
/// `rediss+cluster://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// `host:port` of each node named, in the URL's order.
    nodes: Vec<(String, u16)>,
    /// Every node speaks TLS (`rediss+cluster://`).
    tls: bool,
    username: Option<String>,
    password: Option<String>,
}

impl ClusterUrl {
    /// The cluster form of `url`, or `None` when it names one server or
    /// Sentinels.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) when a
    /// cluster URL is malformed: no node, a bad port, a path (a cluster has
    /// database 0 only), a parameter.
    pub(crate) fn parse(url: &str) -> Result<Option<Self>> {
        let Some(parts) = FORM.parse(url)? else {
            return Ok(None);
        };
        if !parts.path.is_empty() {
            return Err(FORM.malformed(url, "a cluster has database 0 only: the URL takes no path"));
        }
        if !parts.parameters.is_empty() {
            return Err(FORM.malformed(
                url,
                "no parameter but namespace, wait_replicas, wait_timeout_ms and the tls_ ones",
            ));
        }
        Ok(Some(ClusterUrl {
            nodes: parts.hosts,
            tls: parts.tls,
            username: parts.username,
            password: parts.password,
        }))
    }

    /// The client of the cluster, with `certificates` for every node, its
    /// calls bounded by `config`'s time limits.
    pub(crate) fn client(
        &self,
        config: &RedisConfig,
        certificates: Option<&TlsCertificates>,
    ) -> Result<ClusterClient> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let nodes = self.nodes.iter().map(|(host, port)| {
            if host.contains(':') {
                format!("{scheme}://[{host}]:{port}")
            } else {
                format!("{scheme}://{host}:{port}")
            }
        });
        // No retries: the client would send a command again after a dropped
        // connection, when the first copy may have run, and answer the
        // second copy's verdict (a renewal refused by its own success). A
        // `MOVED` reaches the store as retryable, and the client has
        // learnt the slot's new primary by the next call.
        let mut builder = ClusterClientBuilder::new(nodes)
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.operation_timeout)
            .retries(0);
        if let Some(username) = &self.username {
            builder = builder.username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.password(password);
        }
        if let Some(certificates) = certificates {
            builder = builder.certs(crate::redis_certificates(certificates));
        }
        builder.build().map_err(|error| {
            config_error(format!(
                "cannot open the cluster of {}: {error}",
                config.redacted_url()
            ))
            .with_source(error)
        })
    }
}

/// A failure to connect to a cluster, classified. The cluster client
/// reports every node's refusal as an I/O error carrying the cause as text
/// only, so refused credentials, a refused TLS handshake and a server that
/// is no cluster node are recognised here by what they say (they are
/// configuration errors, which retrying cannot fix).
pub(crate) fn connect_error(error: RedisError) -> Error {
    let text = error.to_string();
    let fix = if ["AuthenticationFailed", "WRONGPASS", "NOAUTH", "NOPERM"]
        .iter()
        .any(|code| text.contains(code))
    {
        "the cluster refused the user or password: check the credentials in the URL \
         (redis+cluster://user:password@host:port,...) against the nodes' ACL"
    } else if text.contains("cluster support disabled") {
        "the server is not a node of a Redis Cluster: name a single server with redis:// \
         (rediss:// for TLS), a Sentinel deployment with redis+sentinel://"
    } else if [
        "certificate",
        "handshake",
        "InvalidContentType",
        "CorruptMessage",
    ]
    .iter()
    .any(|sign| text.contains(sign))
    {
        "the TLS handshake with a node failed: check that the URL is rediss+cluster:// to TLS \
         ports, that the nodes' certificates are signed by an authority the store trusts (the \
         system's, or tls_ca= / RedisConfig::tls) and name the hosts in the URL"
    } else {
        return error::from_redis(error);
    };
    Error::new(ErrorKind::Config, format!("{fix} ({text})")).with_source(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_lease_core::ErrorKind;

    fn initial_connections_failed(cause: &str) -> RedisError {
        RedisError::from((
            redis::ErrorKind::Io,
            "Failed to create initial connections",
            cause.to_owned(),
        ))
    }

    #[test]
    fn refusals_no_retry_can_fix_are_configuration_errors() {
        for (cause, names) in [
            (
                "Password authentication failed - AuthenticationFailed",
                "password",
            ),
            ("WRONGPASS invalid username-password pair", "password"),
            ("This instance has cluster support disabled", "redis://"),
            (
                "invalid peer certificate: UnknownIssuer",
                "rediss+cluster://",
            ),
            ("received corrupt message of type InvalidContentType", "TLS"),
        ] {
            let error = connect_error(initial_connections_failed(cause));
            assert_eq!(error.kind(), ErrorKind::Config, "{cause}: {error}");
            assert!(!error.is_retryable(), "{error}");
            assert!(error.to_string().contains(names), "{error}");
            assert!(error.to_string().contains(cause), "{error}");
        }
    }

    #[test]
    fn unreachable_nodes_are_retryable() {
        let error = connect_error(initial_connections_failed(
            "Connection refused (os error 111)",
        ));
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        assert!(error.is_retryable(), "{error}");
    }

    #[test]
    fn other_urls_are_not_cluster_urls() {
        for url in [
            "redis://h:6379",
            "rediss://h",
            "redis+sentinel://h/svc",
            "x",
        ] {
            assert_eq!(ClusterUrl::parse(url).expect(url), None);
        }
    }

    #[test]
    fn cluster_urls_name_every_node_and_the_credentials() {
        let parsed = ClusterUrl::parse("REDISS+CLUSTER://app:p%40ss@n1:7000,[::1]:7001,n3/")
            .expect("valid")
            .expect("a cluster URL");
        assert_eq!(
            parsed,
            ClusterUrl {
                nodes: vec![
                    ("n1".to_owned(), 7000),
                    ("::1".to_owned(), 7001),
                    ("n3".to_owned(), DEFAULT_NODE_PORT),
                ],
                tls: true,
                username: Some("app".to_owned()),
                password: Some("p@ss".to_owned()),
            }
        );
        let plain = ClusterUrl::parse("redis+cluster://:pw@127.0.0.1:1")
            .expect("valid")
            .expect("a cluster URL");
        assert!(!plain.tls);
        assert_eq!(plain.username, None);
        assert_eq!(plain.password.as_deref(), Some("pw"));
    }

    #[test]
    fn malformed_cluster_urls_are_refused_without_their_passwords() {
        for url in [
            "redis+cluster://",
            "redis+cluster://h:0",
            "redis+cluster://h:port",
            "redis+cluster://h:7000,",
            "redis+cluster://:hunter2@h:7000/1",
            "redis+cluster://:hunter2@h:7000?db=1",
            "redis+cluster://app:hun&ter2@h:7000?x=1&y",
            "redis+cluster://[::1:7000",
            "redis+cluster://::1:7000",
            "redis+cluster://h:7000,fe80::1",
        ] {
            let error = ClusterUrl::parse(url).expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
            assert!(!error.to_string().contains("hunter2"), "{error}");
            assert!(!error.to_string().contains("ter2"), "{error}");
        }
    }
}

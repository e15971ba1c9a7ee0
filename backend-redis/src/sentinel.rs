//! Redis Sentinel: the store asks the Sentinels where the primary of a
//! service is, and asks again when the primary it writes to stops
//! answering or answers as a replica, so it follows a failover instead of
//! staying on the demoted server.
//!
//! Why it is shaped this way: the connection manager reconnects to one
//! address for ever, so following a failover means replacing it. The
//! Sentinels are asked by the `redis` crate's [`SentinelClient`], which
//! checks with `ROLE` that the server it names really is a primary, so a
//! replica is never written to, and only after a call failed in a way a
//! failover explains (a dropped or refused connection, a time-out,
//! `READONLY`: every retryable error) or was cancelled, in the background,
//! at most once per [`ASK_INTERVAL`] however many calls fail at once.

use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::ConnectionAddr;
use tenure_lease_core::tls::TlsCertificates;
use tenure_lease_core::Result;

use crate::config::config_error;
use crate::hosts::HostListForm;

/// The port a Sentinel listens on when the URL names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The least time between two questions to the Sentinels.
pub(crate) const ASK_INTERVAL: Duration = Duration::from_millis(100);

/// The URLs that name Sentinels rather than a server.
const FORM: HostListForm = HostListForm {
    schemes: [("redis+sentinel", false), ("rediss+sentinel", true)],
    default_port: DEFAULT_SENTINEL_PORT,
    host_noun: "Sentinel",
    name: "a Sentinel URL",
    expected: "redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[?db=N\
               &sentinel_username=U&sentinel_password=P]",
};

/// Where the Sentinels are and what to ask them, parsed from a
/// `redis+sentinel://` or `rediss+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `host:port` of each Sentinel, in the URL's order.
    sentinels: Vec<(String, u16)>,
    /// The name the Sentinels monitor the primary by.
    service: String,
    /// The primary and its replicas speak TLS (`rediss+sentinel://`).
    tls: bool,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
}

impl SentinelUrl {
    /// The Sentinel form of `url`, or `None` when it names a server.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) when a
    /// Sentinel URL is malformed: no Sentinel, a bad port, no service name,
    /// an unknown parameter.
    pub(crate) fn parse(url: &str) -> Result<Option<Self>> {
        let Some(parts) = FORM.parse(url)? else {
            return Ok(None);
        };
        let bad = |why: &str| FORM.malformed(url, why);
        if parts.path.is_empty() || parts.path.contains('/') {
            return Err(bad(
                "the path must be the service name the Sentinels monitor",
            ));
        }
        let mut parsed = SentinelUrl {
            sentinels: parts.hosts,
            service: parts.path,
            tls: parts.tls,
            username: parts.username,
            password: parts.password,
            db: 0,
            sentinel_username: None,
            sentinel_password: None,
        };
        for (index, (name, value)) in parts.parameters.into_iter().enumerate() {
            // Named by position, never quoted: an unescaped `&` in a
            // password makes a "parameter" of the password's tail.
            let which = format!("parameter {}", index + 1);
            match name.as_str() {
                "db" => {
                    parsed.db = value
                        .parse()
                        .map_err(|_| bad(&format!("{which}, db, must be a whole number")))?;
                }
                "sentinel_username" => {
                    parsed.sentinel_username = Some(value).filter(|v| !v.is_empty());
                }
                "sentinel_password" => {
                    parsed.sentinel_password = Some(value).filter(|v| !v.is_empty());
                }
                _ => {
                    return Err(bad(&format!(
                        "{which} is none of db, sentinel_username, sentinel_password"
                    )))
                }
            }
        }
        Ok(Some(parsed))
    }

    /// The client that asks the Sentinels, with `certificates` for the
    /// primary (and for the Sentinels, which then speak TLS too).
    pub(crate) fn client(&self, certificates: Option<&TlsCertificates>) -> Result<SentinelClient> {
        let addresses = self.sentinels.iter().map(|(host, port)| {
            if self.tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let built =
            SentinelClientBuilder::new(addresses, &self.service, SentinelServerType::Master)
                .map(|mut builder| {
                    builder = builder.set_client_to_redis_db(self.db);
                    if let Some(username) = &self.username {
                        builder = builder.set_client_to_redis_username(username);
                    }
                    if let Some(password) = &self.password {
                        builder = builder.set_client_to_redis_password(password);
                    }
                    if let Some(username) = &self.sentinel_username {
                        builder = builder.set_client_to_sentinel_username(username);
                    }
                    if let Some(password) = &self.sentinel_password {
                        builder = builder.set_client_to_sentinel_password(password);
                    }
                    if self.tls {
                        builder = builder
                            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                            .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
                        if let Some(certificates) = certificates {
                            builder = builder
                                .set_client_to_redis_certificates(crate::redis_certificates(
                                    certificates,
                                ))
                                .set_client_to_sentinel_certificates(crate::redis_certificates(
                                    certificates,
                                ));
                        }
                    }
                    builder
                })
                .and_then(SentinelClientBuilder::build);
        built.map_err(|error| {
            config_error(format!(
                "cannot ask the Sentinels of {:?}: {error}",
                self.service
            ))
            .with_source(error)
        })
    }

    /// The service name the Sentinels monitor.
    pub(crate) fn service(&self) -> &str {
        &self.service
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_lease_core::ErrorKind;

    #[test]
    fn server_urls_are_not_sentinel_urls() {
        for url in [
            "redis://h:6379",
            "rediss://h",
            "redis+unix:///s",
            "nonsense",
        ] {
            assert_eq!(SentinelUrl::parse(url).expect(url), None);
        }
    }

    #[test]
    fn sentinel_urls_name_every_sentinel_the_service_and_the_credentials() {
        let parsed = SentinelUrl::parse(
            "rediss+sentinel://app:p%40ss@s1:26380,[::1]:26381,s3/my%2Dprimary\
             ?db=2&sentinel_password=sp&sentinel_username=su",
        )
        .expect("valid")
        .expect("a Sentinel URL");
        assert_eq!(
            parsed,
            SentinelUrl {
                sentinels: vec![
                    ("s1".to_owned(), 26380),
                    ("::1".to_owned(), 26381),
                    ("s3".to_owned(), DEFAULT_SENTINEL_PORT),
                ],
                service: "my-primary".to_owned(),
                tls: true,
                username: Some("app".to_owned()),
                password: Some("p@ss".to_owned()),
                db: 2,
                sentinel_username: Some("su".to_owned()),
                sentinel_password: Some("sp".to_owned()),
            }
        );
        let plain = SentinelUrl::parse("REDIS+SENTINEL://:pw@127.0.0.1:1/svc/")
            .expect("valid")
            .expect("a Sentinel URL");
        assert!(!plain.tls);
        assert_eq!(plain.username, None);
        assert_eq!(plain.password.as_deref(), Some("pw"));
        assert_eq!(plain.service(), "svc");
    }

    #[test]
    fn malformed_sentinel_urls_are_refused_without_their_passwords() {
        for url in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel://h:26379/a/b",
            "redis+sentinel://h:0/svc",
            "redis+sentinel://h:port/svc",
            "redis+sentinel://h:26379,/svc",
            "redis+sentinel://:hunter2@h:26379/svc?db=x",
            "redis+sentinel://h/svc?namespace=x",
            "redis+sentinel://h/svc?sentinel_password=%zz",
            "redis+sentinel://[::1/svc",
            "redis+sentinel://app:hun/ter2@h:26379/svc?nope=1",
            "redis+sentinel://app:hun?ter2@h:port/svc",
        ] {
            let error = SentinelUrl::parse(url).expect_err(url);
            assert_eq!(error.kind(), ErrorKind::Config, "{url}");
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
    }
}

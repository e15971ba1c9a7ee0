//! URLs that name several servers: the Sentinels of a service
//! (`redis+sentinel://`) or the nodes of a cluster (`redis+cluster://`).
//! Both have the shape
//! `scheme://[user[:password]@]host[:port][,host[:port]...][/path][?name=value&...]`,
//! which the `redis` crate's URL parser does not take, so this module reads
//! it; what the path and the parameters mean is each form's own.
//!
//! No error quotes the user info or a parameter: a password may be in
//! either (an unescaped `&` in a password makes a "parameter" of its tail).

use tenure_lease_core::redact::redact_url;
use tenure_lease_core::{Error, Result};

use crate::config::config_error;

/// A URL naming several servers, split into its parts (percent-decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostList {
    /// The servers speak TLS (the scheme starts with `rediss`).
    pub(crate) tls: bool,
    /// `host` and port of each server, in the URL's order.
    pub(crate) hosts: Vec<(String, u16)>,
    /// What follows the hosts' `/`, without trailing slashes.
    pub(crate) path: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// The query's `name=value` pairs, in order.
    pub(crate) parameters: Vec<(String, String)>,
}

/// One form of host-list URL: its schemes and how to report a malformed one.
pub(crate) struct HostListForm {
    /// Each scheme, and whether it means TLS.
    pub(crate) schemes: [(&'static str, bool); 2],
    /// The port of a host named without one.
    pub(crate) default_port: u16,
    /// What a host is called in errors ("Sentinel", "node").
    pub(crate) host_noun: &'static str,
    /// The form's name in errors ("a Sentinel URL").
    pub(crate) name: &'static str,
    /// The expected shape, quoted in errors.
    pub(crate) expected: &'static str,
}

impl HostListForm {
    /// `url` split into its parts, or `None` when its scheme is none of this
    /// form's.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`](tenure_lease_core::ErrorKind::Config) when the
    /// URL is malformed: no host, a bad port, text that is not
    /// percent-encoded UTF-8.
    pub(crate) fn parse(&self, url: &str) -> Result<Option<HostList>> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(None);
        };
        let Some(&(_, tls)) = self
            .schemes
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(scheme))
        else {
            return Ok(None);
        };
        let bad = |why: &str| self.malformed(url, why);
        // The user info ends at the last `@`, so a password holding `/`,
        // `?` or `@` is never taken for the rest (and never quoted below).
        let (user_info, rest) = match rest.rsplit_once('@') {
            Some((user_info, rest)) => (Some(user_info), rest),
            None => (None, rest),
        };
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = location.split_once('/').unwrap_or((location, ""));
        let (username, password) = match user_info {
            None => (None, None),
            Some(user_info) => {
                let (user, password) = match user_info.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (user_info, None),
                };
                let user =
                    decode(user).map_err(|()| bad("the user is not percent-encoded UTF-8"))?;
                let password = password
                    .map(decode)
                    .transpose()
                    .map_err(|()| bad("the password is not percent-encoded UTF-8"))?;
                (non_empty(user), password.and_then(non_empty))
            }
        };
        let hosts = hosts
            .split(',')
            .enumerate()
            .map(|(index, host)| {
                address(host, self.default_port).ok_or_else(|| {
                    bad(&format!(
                        "{} {} is not host, host:port or [v6]:port (an IPv6 address in brackets)",
                        self.host_noun,
                        index + 1
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let path = decode(path.trim_end_matches('/'))
            .map_err(|()| bad("the path is not percent-encoded UTF-8"))?;
        let parameters = query
            .split('&')
            .filter(|parameter| !parameter.is_empty())
            .enumerate()
            .map(|(index, parameter)| {
                let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
                let value = decode(value).map_err(|()| {
                    bad(&format!(
                        "parameter {} is not percent-encoded UTF-8",
                        index + 1
                    ))
                })?;
                Ok((name.to_owned(), value))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(HostList {
            tls,
            hosts,
            path,
            username,
            password,
            parameters,
        }))
    }

    /// The error for `url`, malformed because of `why`.
    pub(crate) fn malformed(&self, url: &str, why: &str) -> Error {
        config_error(format!(
            "{} is not {} ({why}); expected {}",
            redact_url(url),
            self.name,
            self.expected
        ))
    }
}

/// `host:port`, `[v6]:port` or a host alone (`default_port`).
fn address(text: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        match after {
            "" => (host, None),
            after => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    // An IPv6 address unbracketed cannot be told from its port.
    if host.is_empty() || (host.contains(':') && !text.starts_with('[')) {
        return None;
    }
    let port = match port {
        Some(port) => port.parse().ok().filter(|&port| port != 0)?,
        None => default_port,
    };
    Some((host.to_owned(), port))
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// Percent-decodes `text` as UTF-8.
fn decode(text: &str) -> std::result::Result<String, ()> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        if byte == b'%' {
            let hex = bytes.get(index + 1..index + 3).ok_or(())?;
            let hex = std::str::from_utf8(hex).map_err(|_| ())?;
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            index += 3;
        } else {
            decoded.push(byte);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| ())
}

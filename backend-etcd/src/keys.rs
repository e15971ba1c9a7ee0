//! Where everything lives: every key of a store starts with its prefix and
//! a `/`, then names one kind of thing.
//!
//! | key | value |
//! | --- | --- |
//! | `<prefix>/fence` | empty: put blindly by every fence draw, whose revision the fences come from |
//! | `<prefix>/unique` | the id of the job last created with a uniqueness key: read by every enqueue with a key and written by every one that creates a keyed job, so two are never judged on the same jobs |
//! | `<prefix>/r/<id>` | a lease record, JSON |
//! | `<prefix>/s/<key>` | the id of the active record holding the key: a scope held exclusively, or one slot of a counted scope ([`slot_key`](tenure_lease_core::backend::rules::slot_key): the scope for slot 0, else the scope, U+001F and the slot number) |
//! | `<prefix>/j/<id>` | a job, JSON |
//! | `<prefix>/g/<resource>` | a fence gate: highest fence and when it was checked, JSON |
//! | `<prefix>/l/r/<id>` | the liveness key of an active lease with an expiry, attached to an etcd lease ([`crate::timers`]); its value, when that etcd lease should end (a hint) |
//! | `<prefix>/l/j/<id>` | the liveness key of a claimed job, likewise |
//! | `<prefix>/rate/<permits>:<period ms>:<key>` | a rate limit's log ([`log_name`]): the instants of its last uses, a JSON array of microseconds ([`encode_uses`](tenure_lease_core::backend::rate_rules::encode_uses)) |

use std::time::Duration;

use tenure_lease_core::backend::rate_rules::log_name;
use tenure_lease_core::backend::rules::SLOT_SEPARATOR;
use tenure_lease_core::rate::RateLimit;

/// The keys of one store.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    fence: String,
    unique: String,
    records: String,
    scopes: String,
    jobs: String,
    gates: String,
    live_records: String,
    live_jobs: String,
    rate_logs: String,
    all: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Keys {
            fence: format!("{prefix}/fence"),
            unique: format!("{prefix}/unique"),
            records: format!("{prefix}/r/"),
            scopes: format!("{prefix}/s/"),
            jobs: format!("{prefix}/j/"),
            gates: format!("{prefix}/g/"),
            live_records: format!("{prefix}/l/r/"),
            live_jobs: format!("{prefix}/l/j/"),
            rate_logs: format!("{prefix}/rate/"),
            all: format!("{prefix}/"),
        }
    }

    /// The key every fence draw puts.
    pub(crate) fn fence(&self) -> &str {
        &self.fence
    }

    /// The key every enqueue with a uniqueness key reads and writes.
    pub(crate) fn unique(&self) -> &str {
        &self.unique
    }

    /// The prefix of every lease record.
    pub(crate) fn records(&self) -> &str {
        &self.records
    }

    /// The prefix of every job.
    pub(crate) fn jobs(&self) -> &str {
        &self.jobs
    }

    /// The prefix of every gate.
    pub(crate) fn gates(&self) -> &str {
        &self.gates
    }

    /// The prefix of every lease's liveness key.
    pub(crate) fn live_records(&self) -> &str {
        &self.live_records
    }

    /// The prefix of every claimed job's liveness key.
    pub(crate) fn live_jobs(&self) -> &str {
        &self.live_jobs
    }

    /// The prefix of every rate log.
    pub(crate) fn rate_logs(&self) -> &str {
        &self.rate_logs
    }

    /// The prefix of everything the store keeps.
    pub(crate) fn all(&self) -> &str {
        &self.all
    }

    pub(crate) fn record(&self, id: &str) -> String {
        format!("{}{id}", self.records)
    }

    /// The index entry of the held key `key`
    /// ([`slot_key`](tenure_lease_core::backend::rules::slot_key): a scope,
    /// or one slot of a counted scope).
    pub(crate) fn held(&self, key: &str) -> String {
        format!("{}{key}", self.scopes)
    }

    /// The prefix of the entries of the slots above 0 of the counted
    /// `scope` (names hold no control character, so no other scope's).
    pub(crate) fn upper_slots(&self, scope: &str) -> String {
        format!("{}{scope}{SLOT_SEPARATOR}", self.scopes)
    }

    pub(crate) fn job(&self, id: &str) -> String {
        format!("{}{id}", self.jobs)
    }

    /// The key of the gate of `resource`: the name as it is, unescaped, so
    /// the gates' keys sort as their names do, byte by byte.
    pub(crate) fn gate(&self, resource: &str) -> String {
        format!("{}{resource}", self.gates)
    }

    /// The first key past every gate's: the end of [`gates`](Self::gates)'s
    /// range.
    pub(crate) fn gates_end(&self) -> Vec<u8> {
        prefix_end(&self.gates)
    }

    /// The liveness key of the lease with `id`.
    pub(crate) fn live_record(&self, id: &str) -> String {
        format!("{}{id}", self.live_records)
    }

    /// The liveness key of the job with `id`.
    pub(crate) fn live_job(&self, id: &str) -> String {
        format!("{}{id}", self.live_jobs)
    }

    /// The key of `limit`'s log.
    pub(crate) fn rate_log(&self, limit: &RateLimit) -> String {
        format!("{}{}", self.rate_logs, log_name(limit))
    }
}

/// The first key past every key starting with `prefix`, as etcd ranges
/// take it: `prefix` with its last byte below 0xFF raised by one and what
/// follows it dropped (`"p/g/"` → `"p/g0"`), or `[0]` (every key to the
/// last) when there is none.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if let Some(raised) = last.checked_add(1) {
            end.push(raised);
            return end;
        }
    }
    vec![0]
}

/// The limit whose log `name` is (a rate log's key past
/// [`Keys::rate_logs`]; [`log_name`]'s inverse), or `None` for a name it
/// never makes.
pub(crate) fn rate_limit_of(name: &str) -> Option<RateLimit> {
    let (permits, rest) = name.split_once(':')?;
    let (millis, key) = rest.split_once(':')?;
    Some(RateLimit::new(
        key,
        permits.parse().ok()?,
        Duration::from_millis(millis.parse().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_past_every_key_under_it() {
        assert_eq!(Keys::new("app").gates_end(), b"app/g0");
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80");
        assert_eq!(prefix_end(""), [0]);
    }
}

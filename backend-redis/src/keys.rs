//! The key layout (described in full in `lua/common.lua`).
//!
//! Every key of a namespace starts with `tenure:{<namespace>}:`, so all of
//! them share one hash slot (the namespace is the hash tag, and it never
//! contains `{` or `}`), and scripts may build keys for ids they discover at
//! run time from that prefix. Each family of per-id or per-scope keys has its
//! own fixed prefix ending in `:` and takes the id or scope verbatim as the
//! rest of the key, while the fixed keys have no `:` after the namespace
//! prefix: no id or scope, whatever characters it holds, can make two keys
//! collide or leave the namespace.

/// The keys of one namespace.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(namespace: &str) -> Self {
        Keys {
            prefix: format!("tenure:{{{namespace}}}:"),
        }
    }

    /// The prefix every key of the namespace starts with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The last fence handed out (see `draw_fence` in `lua/common.lua`).
    pub(crate) fn fence(&self) -> String {
        self.fixed("fence")
    }

    /// Active record ids by lease expiry.
    pub(crate) fn expiry(&self) -> String {
        self.fixed("expiry")
    }

    /// Active record ids, ordered by id.
    pub(crate) fn active(&self) -> String {
        self.fixed("active")
    }

    /// Interrupted and terminal record ids by last update (what `purge`
    /// walks).
    pub(crate) fn terminal(&self) -> String {
        self.fixed("terminal")
    }

    /// Claimed job ids by lease expiry.
    pub(crate) fn claimed_jobs(&self) -> String {
        self.fixed("claimed")
    }

    /// Finished (completed and dead-lettered) job ids by finish time.
    pub(crate) fn finished_jobs(&self) -> String {
        self.fixed("finished")
    }

    /// Resources of fence gates by the time of their last accepted check.
    pub(crate) fn gates(&self) -> String {
        self.fixed("gates")
    }

    /// The highest fence accepted for `resource` (a family apart from
    /// records, scopes and jobs).
    pub(crate) fn gate(&self, resource: &str) -> String {
        format!("{}gate:{resource}", self.prefix)
    }

    /// The hash of job `id` (a family apart from records: a job may share
    /// an id with a lease).
    pub(crate) fn job(&self, id: &str) -> String {
        format!("{}job:{id}", self.prefix)
    }

    /// Visible queued jobs of `queue`, by claim rank.
    pub(crate) fn ready(&self, queue: &str) -> String {
        format!("{}ready:{queue}", self.prefix)
    }

    /// Queued jobs of `queue` not yet visible when indexed, by `run_at`.
    pub(crate) fn delayed(&self, queue: &str) -> String {
        format!("{}delayed:{queue}", self.prefix)
    }

    /// Dead-lettered job ids of `queue`, by last update.
    pub(crate) fn dead_letters(&self, queue: &str) -> String {
        format!("{}dead:{queue}", self.prefix)
    }

    /// Ids of the jobs of `queue` enqueued with the uniqueness key `key`,
    /// by creation, until purged. The queue's length in bytes comes first,
    /// so no queue and key can make two such keys collide (`unique_index`
    /// in `lua/queue_common.lua` builds the same key).
    pub(crate) fn unique(&self, queue: &str, key: &str) -> String {
        format!("{}unique:{}:{queue}:{key}", self.prefix, queue.len())
    }

    /// The log of a rate limit, named by
    /// [`log_name`](tenure_lease_core::backend::rate_rules::log_name):
    /// `<permits>:<period in ms>:<key>`, digits first, so no two limits
    /// share a log.
    pub(crate) fn rate(&self, log_name: &str) -> String {
        format!("{}rate:{log_name}", self.prefix)
    }

    /// The names of the rate logs by when they stop counting (what `purge`
    /// walks).
    pub(crate) fn rates(&self) -> String {
        self.fixed("rates")
    }

    /// The hash of record `id`.
    pub(crate) fn record(&self, id: &str) -> String {
        format!("{}rec:{id}", self.prefix)
    }

    /// The id of the active record holding `scope` exclusively, or slot 0
    /// of it as a counted scope. Slot `k > 0` of a counted scope is held
    /// under this key, U+001F and `k` in decimal
    /// ([`slot_key`](tenure_lease_core::backend::rules::slot_key)), which
    /// `admit.lua` builds from it at run time.
    pub(crate) fn holder(&self, scope: &str) -> String {
        format!("{}holder:{scope}", self.prefix)
    }

    /// Ids of every record naming `scope`, by creation.
    pub(crate) fn scope(&self, scope: &str) -> String {
        format!("{}scope:{scope}", self.prefix)
    }

    /// A `SCAN MATCH` pattern for every key of the namespace, glob
    /// characters of the namespace escaped.
    pub(crate) fn pattern(&self) -> String {
        self.pattern_of("")
    }

    /// A `SCAN MATCH` pattern for every job hash of the namespace.
    pub(crate) fn jobs_pattern(&self) -> String {
        self.pattern_of("job:")
    }

    /// The prefix, glob characters escaped, then `family`, then `*`.
    fn pattern_of(&self, family: &str) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + family.len() + 8);
        for character in self.prefix.chars() {
            if matches!(character, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(character);
        }
        pattern.push_str(family);
        pattern.push('*');
        pattern
    }

    fn fixed(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_never_collide() {
        let keys = Keys::new("ns");
        // An id that looks like another family's key stays in its own family.
        assert_ne!(keys.record("holder:x"), keys.holder("x"));
        assert_ne!(keys.record(""), keys.fence());
        assert_eq!(keys.record("a:{b} c"), "tenure:{ns}:rec:a:{b} c");
        assert_ne!(Keys::new("a").record("b"), Keys::new("a:b").record(""));
        // Jobs and leases may share an id; queues may look like ids.
        assert_ne!(keys.job("x"), keys.record("x"));
        assert_ne!(keys.ready("job:x"), keys.job("x"));
        assert_ne!(keys.dead_letters(""), keys.delayed(""));
        assert_ne!(keys.claimed_jobs(), keys.job(""));
        assert_ne!(keys.finished_jobs(), keys.job(""));
        // A queue and a key never pass for another pair, nor for a queue.
        assert_ne!(keys.unique("a:b", "c"), keys.unique("a", "b:c"));
        assert_ne!(keys.unique("1:a", "b"), keys.unique("1", "a:b"));
        assert_eq!(keys.unique("q:1", "k"), "tenure:{ns}:unique:3:q:1:k");
        // Rate logs are a family of their own, apart from their index.
        assert_eq!(keys.rate("2:1000:k"), "tenure:{ns}:rate:2:1000:k");
        assert_ne!(keys.rate(""), keys.rates());
        assert_ne!(keys.rate("x"), keys.record("x"));
        // Gates are a family of their own, apart from their index.
        assert_ne!(keys.gate("x"), keys.holder("x"));
        assert_ne!(keys.gate("x"), keys.scope("x"));
        assert_ne!(keys.gates(), keys.gate(""));
    }

    #[test]
    fn pattern_escapes_glob_characters() {
        assert_eq!(
            Keys::new("a*b?[c]\\").pattern(),
            "tenure:{a\\*b\\?\\[c\\]\\\\}:*"
        );
        assert_eq!(Keys::new("a*b").jobs_pattern(), "tenure:{a\\*b}:job:*");
    }
}

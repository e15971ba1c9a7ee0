//! The advisory-lock keys that serialise admissions per scope, enqueues
//! per uniqueness key, and rate-limited calls per rate log.
//!
//! Two admissions on overlapping scopes must not both decide on what they
//! read: each would see the scopes free (or the same holder interruptible)
//! and only one write could win, the other answering a lost race. So an
//! admission first takes one transaction-scoped advisory lock per requested
//! scope, and only then reads the holders. The key of a scope is a stable
//! 64-bit hash of the schema name and the scope, so stores in different
//! schemas of one database never wait on one another, and every process and
//! every version of this crate derives the same key for the same scope:
//! FNV-1a 64 over the schema's bytes, one `0xFF` byte (it occurs in no UTF-8
//! text, so no schema/scope split can collide with another), then the
//! scope's bytes, read as a two's-complement `bigint`. Two scopes whose keys
//! collide merely take turns.
//!
//! Enqueues of jobs with a uniqueness key take turns the same way, one lock
//! per (queue, key): its key hashes the schema, `0xFF`, then a `0xFE` byte
//! (which no scope's UTF-8 starts with, so no job key shares its bytes with
//! a scope's), the queue, `0xFF` and the uniqueness key.
//!
//! Admissions and claims with a rate limit take turns per log the same way,
//! one lock per log: its key hashes the schema, `0xFF`, a `0xFD` byte (a
//! family of its own, which no UTF-8 starts with either) and the log's
//! name ([`rate_rules::log_name`]: permits, period and key).

use tenure_lease_core::backend::rate_rules;
use tenure_lease_core::rate::RateLimit;

/// FNV-1a 64 offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Between the schema and the scope: a byte no UTF-8 string contains.
const SEPARATOR: u8 = 0xFF;
/// Marks a job's uniqueness key after the schema's separator: another byte
/// no UTF-8 string contains, so the family never meets a scope's bytes.
const UNIQUE_JOB_FAMILY: u8 = 0xFE;
/// Marks a rate log's name after the schema's separator, as
/// [`UNIQUE_JOB_FAMILY`] marks a job's key.
const RATE_LOG_FAMILY: u8 = 0xFD;

fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(state, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The scope-lock keys of one store's schema.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopeLocks {
    /// The hash state after the schema name and the separator.
    schema_state: u64,
}

impl ScopeLocks {
    pub(crate) fn for_schema(schema: &str) -> Self {
        ScopeLocks {
            schema_state: fnv1a(fnv1a(FNV_OFFSET, schema.as_bytes()), &[SEPARATOR]),
        }
    }

    /// The key of one scope.
    fn key(&self, scope: &str) -> i64 {
        as_bigint(fnv1a(self.schema_state, scope.as_bytes()))
    }

    /// The key of the uniqueness key `key` in `queue`.
    fn unique_job_key(&self, queue: &str, key: &str) -> i64 {
        let queue_state = fnv1a(
            fnv1a(self.schema_state, &[UNIQUE_JOB_FAMILY]),
            queue.as_bytes(),
        );
        as_bigint(fnv1a(fnv1a(queue_state, &[SEPARATOR]), key.as_bytes()))
    }

    /// The key of `limit`'s log.
    pub(crate) fn rate_log_key(&self, limit: &RateLimit) -> i64 {
        let family = fnv1a(self.schema_state, &[RATE_LOG_FAMILY]);
        as_bigint(fnv1a(family, rate_rules::log_name(limit).as_bytes()))
    }

    /// The keys of `scopes`, ascending and distinct: the order every
    /// admission takes them in, so two admissions never wait on each other
    /// in a cycle.
    pub(crate) fn keys<'a>(&self, scopes: impl IntoIterator<Item = &'a str>) -> Vec<i64> {
        ascending(scopes.into_iter().map(|scope| self.key(scope)))
    }

    /// The keys of the `(queue, uniqueness key)` pairs, ascending and
    /// distinct, as [`keys`](Self::keys) for scopes.
    pub(crate) fn unique_job_keys<'a>(
        &self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<i64> {
        ascending(
            pairs
                .into_iter()
                .map(|(queue, key)| self.unique_job_key(queue, key)),
        )
    }
}

/// A hash as a two's-complement `bigint`, the type of an advisory lock key.
fn as_bigint(hash: u64) -> i64 {
    i64::from_ne_bytes(hash.to_ne_bytes())
}

fn ascending(keys: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut keys: Vec<i64> = keys.collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_documented_hash() {
        // FNV-1a 64 of the bytes "s", 0xFF, "a", computed by hand from the
        // published offset and prime: a change of derivation breaks this,
        // and with it the mutual exclusion between versions.
        let mut expected = FNV_OFFSET;
        for byte in [b's', 0xFF, b'a'] {
            expected = (expected ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
        assert_eq!(ScopeLocks::for_schema("s").key("a") as u64, expected);
        assert_eq!(
            ScopeLocks::for_schema("tenure").key("cron:report"),
            ScopeLocks::for_schema("tenure").key("cron:report")
        );
    }

    #[test]
    fn keys_differ_by_schema_and_by_split() {
        let locks = ScopeLocks::for_schema("tenure");
        assert_ne!(locks.key("a"), ScopeLocks::for_schema("other").key("a"));
        assert_ne!(locks.key("a"), locks.key("b"));
        assert_ne!(
            ScopeLocks::for_schema("ab").key("c"),
            ScopeLocks::for_schema("a").key("bc")
        );
    }

    #[test]
    fn keys_are_ascending_and_distinct_whatever_the_input_order() {
        let locks = ScopeLocks::for_schema("tenure");
        let forward = locks.keys(["a", "b", "c", "a"]);
        let backward = locks.keys(["c", "b", "a"]);
        assert_eq!(forward, backward);
        assert_eq!(forward.len(), 3);
        assert!(forward.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(locks.keys([]).is_empty());
    }

    #[test]
    fn unique_job_keys_are_their_own_family() {
        let locks = ScopeLocks::for_schema("tenure");
        let mut expected = FNV_OFFSET;
        for byte in [b's', 0xFF, 0xFE, b'q', 0xFF, b'k'] {
            expected = (expected ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
        assert_eq!(
            ScopeLocks::for_schema("s").unique_job_key("q", "k") as u64,
            expected
        );
        assert_ne!(locks.unique_job_key("q", "k"), locks.key("qk"));
        assert_ne!(
            locks.unique_job_key("a", "bc"),
            locks.unique_job_key("ab", "c")
        );
        assert_ne!(
            locks.unique_job_key("q", "k"),
            ScopeLocks::for_schema("other").unique_job_key("q", "k")
        );
        let keys = locks.unique_job_keys([("q", "b"), ("q", "a"), ("q", "b")]);
        assert_eq!(keys.len(), 2);
        assert!(keys[0] < keys[1]);
    }

    #[test]
    fn rate_log_keys_are_their_own_family() {
        let locks = ScopeLocks::for_schema("tenure");
        let second = std::time::Duration::from_secs(1);
        let limit = RateLimit::new("k", 2, second);
        let mut expected = FNV_OFFSET;
        for byte in [b's', 0xFF, 0xFD]
            .into_iter()
            .chain(b"2:1000:k".iter().copied())
        {
            expected = (expected ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
        assert_eq!(
            ScopeLocks::for_schema("s").rate_log_key(&limit) as u64,
            expected
        );
        assert_ne!(locks.rate_log_key(&limit), locks.key("2:1000:k"));
        assert_ne!(
            locks.rate_log_key(&limit),
            locks.rate_log_key(&RateLimit::new("k", 3, second))
        );
        assert_ne!(
            locks.rate_log_key(&limit),
            locks.rate_log_key(&RateLimit::new("k", 2, 2 * second))
        );
        assert_ne!(
            locks.rate_log_key(&limit),
            ScopeLocks::for_schema("other").rate_log_key(&limit)
        );
    }
}

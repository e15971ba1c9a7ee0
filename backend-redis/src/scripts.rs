//! The Lua scripts, one per operation, and the two ways they run.
//!
//! Each operation's file under `src/lua/` is its body (KEYS, ARGV, a
//! reply), written against the shared prelude `common.lua` (and the queue
//! prelude `queue_common.lua`, the gate prelude `gate_common.lua`). The
//! same files make both forms, so the scripts stay one source of truth:
//!
//! * **a function library** (Redis 7 and newer): one library,
//!   `tenure_<version>`, holding every preludes once and every operation as
//!   a function `tenure_<version>_<op>` whose body is the file's, with
//!   `KEYS` and `ARGV` as its parameters. `FUNCTION LOAD` runs the preludes
//!   once per server, so an `FCALL` runs only the operation's own body,
//!   where an `EVALSHA` of the prelude-prefixed script ran the whole
//!   prelude first (about 7 µs of its 12 µs on a renewal, measured in
//!   the benchmark log, benchmarks/archive/2026-11-29_to_2026-12-02.md,
//!   "Redis: where the microseconds go"). The version is a hash of every
//!   source file, so two versions of this crate on one server load two
//!   libraries side by side and never replace each other's functions.
//!   Read-only operations carry the `no-writes` flag and run with
//!   `FCALL_RO`, so they still answer on a server out of memory, as their
//!   scripts did;
//! * **a script per operation** (every server, the fallback): the prelude
//!   followed by the file, run by `EVALSHA` through [`redis::Script`], which
//!   loads it on `NOSCRIPT`, so a flushed script cache or a restarted server
//!   costs one extra round trip, never an error.
//!
//! [`RedisStore`](crate::RedisStore) loads the library at connect and uses
//! functions when the server takes it; a server without functions (older
//! than 7) or a user the ACL denies `FUNCTION LOAD` gets the scripts. A
//! library gone later (a restart without persistence, `FUNCTION FLUSH`, a
//! failover to a server that never had it) is loaded again on the first
//! `Function not found`, and the call runs again, as `NOSCRIPT` does.

use std::sync::LazyLock;

use redis::{Cmd, RedisResult, Script, ToRedisArgs};

/// The shared prelude and the two family preludes.
const COMMON: &str = include_str!("lua/common.lua");
const QUEUE_COMMON: &str = include_str!("lua/queue_common.lua");
const GATE_COMMON: &str = include_str!("lua/gate_common.lua");

/// Which prelude an operation's body is written against, after `common.lua`.
#[derive(Clone, Copy)]
enum Family {
    Lease,
    Queue,
    Gate,
}

impl Family {
    fn prelude(self) -> &'static str {
        match self {
            Family::Lease => "",
            Family::Queue => QUEUE_COMMON,
            Family::Gate => GATE_COMMON,
        }
    }
}

/// Whether an operation writes (read-only ones run anywhere a read does).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Write,
    Read,
}

/// Every operation: its name, its family, whether it writes, its body.
const SOURCES: &[(&str, Family, Access, &str)] = &[
    (
        "admit",
        Family::Lease,
        Access::Write,
        include_str!("lua/admit.lua"),
    ),
    (
        "renew",
        Family::Lease,
        Access::Write,
        include_str!("lua/renew.lua"),
    ),
    (
        "transition",
        Family::Lease,
        Access::Write,
        include_str!("lua/transition.lua"),
    ),
    (
        "takeover",
        Family::Lease,
        Access::Write,
        include_str!("lua/takeover.lua"),
    ),
    (
        "list_expired",
        Family::Lease,
        Access::Read,
        include_str!("lua/list_expired.lua"),
    ),
    (
        "get",
        Family::Lease,
        Access::Read,
        include_str!("lua/get.lua"),
    ),
    (
        "list_ids",
        Family::Lease,
        Access::Read,
        include_str!("lua/list_ids.lua"),
    ),
    (
        "purge",
        Family::Lease,
        Access::Write,
        include_str!("lua/purge.lua"),
    ),
    (
        "count_purgeable",
        Family::Lease,
        Access::Read,
        include_str!("lua/count_purgeable.lua"),
    ),
    (
        "enqueue",
        Family::Queue,
        Access::Write,
        include_str!("lua/enqueue.lua"),
    ),
    (
        "claim",
        Family::Queue,
        Access::Write,
        include_str!("lua/claim.lua"),
    ),
    (
        "renew_job",
        Family::Queue,
        Access::Write,
        include_str!("lua/renew_job.lua"),
    ),
    (
        "renew_jobs",
        Family::Queue,
        Access::Write,
        include_str!("lua/renew_jobs.lua"),
    ),
    (
        "complete",
        Family::Queue,
        Access::Write,
        include_str!("lua/complete.lua"),
    ),
    (
        "complete_many",
        Family::Queue,
        Access::Write,
        include_str!("lua/complete_many.lua"),
    ),
    (
        "fail",
        Family::Queue,
        Access::Write,
        include_str!("lua/fail.lua"),
    ),
    (
        "defer",
        Family::Queue,
        Access::Write,
        include_str!("lua/defer.lua"),
    ),
    (
        "reap",
        Family::Queue,
        Access::Write,
        include_str!("lua/reap.lua"),
    ),
    (
        "take_back",
        Family::Queue,
        Access::Write,
        include_str!("lua/take_back.lua"),
    ),
    (
        "list_dead_letters",
        Family::Queue,
        Access::Read,
        include_str!("lua/list_dead_letters.lua"),
    ),
    (
        "list_jobs",
        Family::Queue,
        Access::Read,
        include_str!("lua/list_jobs.lua"),
    ),
    (
        "count_jobs",
        Family::Queue,
        Access::Read,
        include_str!("lua/count_jobs.lua"),
    ),
    (
        "retry_dead_letter",
        Family::Queue,
        Access::Write,
        include_str!("lua/retry_dead_letter.lua"),
    ),
    (
        "purge_jobs",
        Family::Queue,
        Access::Write,
        include_str!("lua/purge_jobs.lua"),
    ),
    (
        "check_fence",
        Family::Gate,
        Access::Write,
        include_str!("lua/check_fence.lua"),
    ),
    (
        "write_fenced",
        Family::Gate,
        Access::Write,
        include_str!("lua/write_fenced.lua"),
    ),
    (
        "highest_fence",
        Family::Gate,
        Access::Read,
        include_str!("lua/highest_fence.lua"),
    ),
    (
        "purge_fences",
        Family::Gate,
        Access::Write,
        include_str!("lua/purge_fences.lua"),
    ),
    (
        "list_fences",
        Family::Gate,
        Access::Read,
        include_str!("lua/list_fences.lua"),
    ),
];

/// One operation, in both forms.
pub(crate) struct Op {
    /// Its function in the library, `tenure_<version>_<op>`.
    function: String,
    /// `FCALL_RO` (and the `no-writes` flag) rather than `FCALL`.
    read_only: bool,
    /// The prelude-prefixed script, for `EVALSHA`.
    script: Script,
}

impl Op {
    /// A call of this operation, keys and arguments added by the caller.
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            op: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// One call of an operation: its keys and arguments, run as `FCALL` or as
/// `EVALSHA` (see [`RedisStore::script`](crate::RedisStore)).
pub(crate) struct Invocation<'a> {
    op: &'a Op,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    /// Adds a key (KEYS).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (ARGV).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// The call as `FCALL` (or `FCALL_RO`) of the operation's function.
    pub(crate) fn fcall(&self) -> Cmd {
        let mut command = redis::cmd(if self.op.read_only {
            "FCALL_RO"
        } else {
            "FCALL"
        });
        command.arg(&self.op.function).arg(self.keys.len());
        for key in &self.keys {
            command.arg(key.as_slice());
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// The call as `EVALSHA` of the operation's script (which
    /// [`load_script`](Self::load_script) loads after `NOSCRIPT`).
    pub(crate) fn evalsha(&self) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command.arg(self.op.script.get_hash()).arg(self.keys.len());
        for key in &self.keys {
            command.arg(key.as_slice());
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }

    /// Loads the operation's script into the server's script cache.
    pub(crate) async fn load_script<C>(&self, connection: &mut C) -> RedisResult<String>
    where
        C: redis::aio::ConnectionLike,
    {
        self.op.script.load_async(connection).await
    }

    /// Whether the operation may write.
    pub(crate) fn writes(&self) -> bool {
        !self.op.read_only
    }
}

/// Every operation of the crate, and the library holding them all.
pub(crate) struct Scripts {
    pub(crate) admit: Op,
    pub(crate) renew: Op,
    pub(crate) transition: Op,
    pub(crate) takeover: Op,
    pub(crate) list_expired: Op,
    pub(crate) get: Op,
    pub(crate) list_ids: Op,
    pub(crate) purge: Op,
    pub(crate) count_purgeable: Op,
    pub(crate) enqueue: Op,
    pub(crate) claim: Op,
    pub(crate) renew_job: Op,
    pub(crate) renew_jobs: Op,
    pub(crate) complete: Op,
    pub(crate) complete_many: Op,
    pub(crate) fail: Op,
    pub(crate) defer: Op,
    pub(crate) reap: Op,
    pub(crate) take_back: Op,
    pub(crate) list_dead_letters: Op,
    pub(crate) list_jobs: Op,
    pub(crate) count_jobs: Op,
    pub(crate) retry_dead_letter: Op,
    pub(crate) purge_jobs: Op,
    pub(crate) check_fence: Op,
    pub(crate) write_fenced: Op,
    pub(crate) highest_fence: Op,
    pub(crate) purge_fences: Op,
    pub(crate) list_fences: Op,
    /// The source of the library, for `FUNCTION LOAD`.
    pub(crate) library: String,
}

/// The version of the library: a hash of every source file, so a change
/// to any of them names a new library (and new functions).
fn version() -> String {
    let mut all = String::new();
    for part in [COMMON, QUEUE_COMMON, GATE_COMMON] {
        all.push_str(part);
        all.push('\0');
    }
    for (name, _, access, body) in SOURCES {
        all.push_str(name);
        all.push(if *access == Access::Read { 'r' } else { 'w' });
        all.push_str(body);
        all.push('\0');
    }
    Script::new(&all).get_hash()[..16].to_owned()
}

/// The library: the preludes once, then every operation as a function of
/// `KEYS` and `ARGV` whose body is its file.
fn library(version: &str) -> String {
    let mut library = format!("#!lua name=tenure_{version}\n");
    for part in [COMMON, QUEUE_COMMON, GATE_COMMON] {
        library.push_str(part);
        library.push('\n');
    }
    for (name, _, access, body) in SOURCES {
        let flags = if *access == Access::Read {
            "'no-writes'"
        } else {
            ""
        };
        library.push_str(&format!(
            "redis.register_function{{function_name = 'tenure_{version}_{name}', \
             flags = {{ {flags} }}, callback = function(KEYS, ARGV)\n{body}\nend}}\n"
        ));
    }
    library
}

fn build() -> Scripts {
    let version = version();
    let op = |wanted: &str| {
        let (name, family, access, body) = SOURCES
            .iter()
            .find(|(name, ..)| *name == wanted)
            .unwrap_or_else(|| panic!("no script named {wanted}"));
        Op {
            function: format!("tenure_{version}_{name}"),
            read_only: *access == Access::Read,
            script: Script::new(&format!("{COMMON}{}{body}", family.prelude())),
        }
    };
    Scripts {
        admit: op("admit"),
        renew: op("renew"),
        transition: op("transition"),
        takeover: op("takeover"),
        list_expired: op("list_expired"),
        get: op("get"),
        list_ids: op("list_ids"),
        purge: op("purge"),
        count_purgeable: op("count_purgeable"),
        enqueue: op("enqueue"),
        claim: op("claim"),
        renew_job: op("renew_job"),
        renew_jobs: op("renew_jobs"),
        complete: op("complete"),
        complete_many: op("complete_many"),
        fail: op("fail"),
        defer: op("defer"),
        reap: op("reap"),
        take_back: op("take_back"),
        list_dead_letters: op("list_dead_letters"),
        list_jobs: op("list_jobs"),
        count_jobs: op("count_jobs"),
        retry_dead_letter: op("retry_dead_letter"),
        purge_jobs: op("purge_jobs"),
        check_fence: op("check_fence"),
        write_fenced: op("write_fenced"),
        highest_fence: op("highest_fence"),
        purge_fences: op("purge_fences"),
        list_fences: op("list_fences"),
        library: library(&version),
    }
}

/// The scripts and the library, built and hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(build);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_is_an_operation_once() {
        let library = &SCRIPTS.library;
        for (name, ..) in SOURCES {
            let function = format!("_{name}',");
            assert_eq!(library.matches(&function).count(), 1, "{name}");
        }
        assert!(library.starts_with("#!lua name=tenure_"));
        // Identical sources, identical library (one per version on a server).
        assert_eq!(*library, super::library(&version()));
    }
}

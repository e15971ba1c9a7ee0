//! The Lua scripts, one per operation, each prefixed by the shared prelude
//! (and the job-queue scripts by the queue prelude after it, the gate
//! scripts by the gate prelude).
//!
//! [`redis::Script`] runs a script by `EVALSHA` and loads it on `NOSCRIPT`,
//! so a flushed script cache or a restarted server costs one extra round
//! trip, never an error.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $file))
        ))
    };
}

macro_rules! queue_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/common.lua"),
            include_str!("lua/queue_common.lua"),
            include_str!(concat!("lua/", $file))
        ))
    };
}

macro_rules! gate_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/common.lua"),
            include_str!("lua/gate_common.lua"),
            include_str!(concat!("lua/", $file))
        ))
    };
}

/// Every script of the crate.
pub(crate) struct Scripts {
    pub(crate) admit: Script,
    pub(crate) renew: Script,
    pub(crate) transition: Script,
    pub(crate) takeover: Script,
    pub(crate) list_expired: Script,
    pub(crate) get: Script,
    pub(crate) list_ids: Script,
    pub(crate) purge: Script,
    pub(crate) enqueue: Script,
    pub(crate) claim: Script,
    pub(crate) renew_job: Script,
    pub(crate) renew_jobs: Script,
    pub(crate) complete: Script,
    pub(crate) complete_many: Script,
    pub(crate) fail: Script,
    pub(crate) defer: Script,
    pub(crate) reap: Script,
    pub(crate) take_back: Script,
    pub(crate) list_dead_letters: Script,
    pub(crate) list_jobs: Script,
    pub(crate) retry_dead_letter: Script,
    pub(crate) purge_jobs: Script,
    pub(crate) check_fence: Script,
    pub(crate) write_fenced: Script,
    pub(crate) highest_fence: Script,
    pub(crate) purge_fences: Script,
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    admit: script!("admit.lua"),
    renew: script!("renew.lua"),
    transition: script!("transition.lua"),
    takeover: script!("takeover.lua"),
    list_expired: script!("list_expired.lua"),
    get: script!("get.lua"),
    list_ids: script!("list_ids.lua"),
    purge: script!("purge.lua"),
    enqueue: queue_script!("enqueue.lua"),
    claim: queue_script!("claim.lua"),
    renew_job: queue_script!("renew_job.lua"),
    renew_jobs: queue_script!("renew_jobs.lua"),
    complete: queue_script!("complete.lua"),
    complete_many: queue_script!("complete_many.lua"),
    fail: queue_script!("fail.lua"),
    defer: queue_script!("defer.lua"),
    reap: queue_script!("reap.lua"),
    take_back: queue_script!("take_back.lua"),
    list_dead_letters: queue_script!("list_dead_letters.lua"),
    list_jobs: queue_script!("list_jobs.lua"),
    retry_dead_letter: queue_script!("retry_dead_letter.lua"),
    purge_jobs: queue_script!("purge_jobs.lua"),
    check_fence: gate_script!("check_fence.lua"),
    write_fenced: gate_script!("write_fenced.lua"),
    highest_fence: gate_script!("highest_fence.lua"),
    purge_fences: gate_script!("purge_fences.lua"),
});

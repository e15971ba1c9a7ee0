//! The Lua scripts, one per operation, each prefixed by the shared prelude.
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
});

//! For backend authors only: the contract's decisions and input checks that
//! every store shares, so a backend implements storage, not rules.
//!
//! Users of tenure never need this module (the `tenure` facade does not
//! export it): a store already validates what it is given and judges by
//! these rules. A backend that decides in Rust (memory, SQLite, file, etcd)
//! runs the lease operations through the [`engine`] over its own
//! [`RecordTransaction`](engine::RecordTransaction), the queue's writes
//! through the [`queue_engine`] over its own
//! [`JobTransaction`](queue_engine::JobTransaction), and gates with
//! [`gate_rules`]; one that cannot (Redis Lua, PostgreSQL SQL) mirrors the
//! [`rules`] and [`queue_rules`] and is held to them by the conformance
//! kit.
//! Each store operation starts with the matching [`validate`] check, and
//! a store that retries inside an operation reports it through
//! [`telemetry`].

pub mod engine;
pub mod gate_rules;
pub mod queue_engine;
pub mod queue_rules;
pub mod rules;
pub mod telemetry;
pub mod url;
pub mod validate;

//! For backend authors only: the contract's decisions and input checks that
//! every store shares, so a backend implements storage, not rules.
//!
//! Users of tenure never need this module (the `tenure` facade does not
//! export it): a store already validates what it is given and judges by
//! these rules. A backend that decides in Rust (memory, SQLite) calls
//! [`rules`] and [`queue_rules`] on the records it loaded and writes the
//! result back in the same transaction; one that cannot (Redis Lua,
//! PostgreSQL SQL) mirrors them and is held to them by the conformance kit.
//! Each store operation starts with the matching [`validate`] check.

pub mod queue_rules;
pub mod rules;
pub mod validate;

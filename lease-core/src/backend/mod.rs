//! For backend authors only: what a backend implements, and the contract's
//! decisions and input checks that every store shares, so a backend
//! implements storage, not rules.
//!
//! Users of tenure never need this module (the `tenure` facade does not
//! export it): a store already validates what it is given and judges by
//! these rules. A backend implements the [`stores`] traits, whose arguments
//! are [`Checked`](checked::Checked) (input only the validating front can
//! build), and writes [`serve_backend!`](crate::serve_backend) to get the
//! user traits. A backend that decides in Rust (memory, SQLite, file, etcd,
//! MySQL) runs the lease operations through the [`engine`] over its own
//! [`RecordTransaction`](engine::RecordTransaction), the queue's writes
//! through the [`queue_engine`] over its own
//! [`JobTransaction`](queue_engine::JobTransaction), and gates with
//! [`gate_rules`], and judges rate limits in either engine over its own
//! [`RateLogs`](rate_rules::RateLogs); one that cannot (Redis Lua,
//! PostgreSQL SQL) mirrors the [`rules`], [`queue_rules`] and
//! [`rate_rules`] and is held to them by the conformance kit. A store that retries inside an operation reports it through
//! [`telemetry`].

pub mod checked;
pub mod engine;
pub mod gate_rules;
pub mod queue_engine;
pub mod queue_rules;
pub mod rate_rules;
pub mod rules;
pub mod stored;
pub mod stores;
pub mod telemetry;
pub mod url;
pub mod validate;

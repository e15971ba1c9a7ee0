//! Every test of the facade, in one binary: `tenure::connect` and its
//! deployment checks, election and once-per-tick on every backend, the
//! error story, and the examples the README and GUIDE.md quote (those on
//! SQLite with the `sqlite` feature).

mod connect;
mod deployment;
mod election;
#[cfg(feature = "memory")]
mod error_story;
#[cfg(feature = "sqlite")]
mod fenced_write_example;
mod once_per_tick;
mod support;
#[cfg(feature = "memory")]
mod telemetry;
#[cfg(feature = "sqlite")]
mod worker_example;

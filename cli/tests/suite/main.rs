//! Every test of the `tenure` binary, in one binary: the operator's
//! commands on every backend, what it refuses, and `check-history`.

mod backends;
mod bad_input;
mod browser;
mod check_history;
mod operator;
mod serve;
mod support;

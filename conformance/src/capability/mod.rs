//! What a factory offers the opt-in suites, one module per suite: the
//! capability traits [`Factory`](crate::Factory)'s methods answer and the
//! types they hand over. Apart from the suites, so the harness that
//! declares the methods and the suites that run them both depend on these
//! and not on each other; each suite module re-exports its own.

pub mod deployment;
pub mod nemesis;
pub mod network;
pub mod process;
pub mod restart;

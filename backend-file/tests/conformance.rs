//! The whole lease conformance kit against the file backend, one test per
//! case, each on its own file in its own temporary directory, on a manual
//! clock.

mod common;

tenure_conformance::tenure_conformance!(common::FileFactory::default());

/// The recorded workload under faults, judged by the history checker.
mod nemesis {
    use super::*;

    tenure_conformance::tenure_nemesis_conformance!(common::FileFactory::default());
}

//! The kit's fence-gate cases against the file backend, one test per case.

mod common;

tenure_conformance::tenure_gate_conformance!(common::FileFactory::default());

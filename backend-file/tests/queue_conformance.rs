//! The kit's job-queue cases against the file backend, one test per case.

mod common;

tenure_conformance::tenure_queue_conformance!(common::FileFactory::default());

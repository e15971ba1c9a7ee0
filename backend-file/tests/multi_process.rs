//! Several OS processes racing on one file: the kit's process suites,
//! through [`common::FileFactory`]'s process capability (a file in a
//! temporary directory, on the host clock, opened by every child). The test
//! binary re-invokes itself for the children.

mod common;

tenure_conformance::tenure_process_conformance!(common::FileFactory::default());
tenure_conformance::tenure_queue_process_conformance!(common::FileFactory::default());

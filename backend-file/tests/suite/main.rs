//! Every test of the file backend, in one binary: the whole conformance kit
//! (`kit`, one module per area, the opt-in suites the factory offers no
//! capability for reported skipped) and what the kit cannot see (`store`).

mod common;
mod store;

/// The conformance kit, every area, on a fresh store file per test.
mod kit {
    use crate::common;

    tenure_conformance::tenure_kit!(common::FileFactory::default());
}

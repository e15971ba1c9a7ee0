//! The whole conformance kit against the memory backend, one test per case.

tenure_conformance::tenure_conformance!(tenure_conformance::memory::MemoryFactory);

//! The whole conformance kit against the memory backend, one test per case.

conformance::tenure_conformance!(conformance::memory::MemoryFactory);

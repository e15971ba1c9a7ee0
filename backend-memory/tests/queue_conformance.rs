//! The kit's job-queue cases against the memory backend, one test per case.

tenure_conformance::tenure_queue_conformance!(tenure_conformance::memory::MemoryFactory);

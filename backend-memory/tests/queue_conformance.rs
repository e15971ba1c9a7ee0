//! The kit's job-queue cases against the memory backend, one test per case.

conformance::tenure_queue_conformance!(conformance::memory::MemoryFactory);

//! The whole conformance kit against the memory backend, one test per case.

tenure_conformance::tenure_conformance!(tenure_conformance::memory::MemoryFactory);

/// The recorded workload under faults, judged by the history checker.
mod nemesis {
    tenure_conformance::tenure_nemesis_conformance!(tenure_conformance::memory::MemoryFactory);
}

//! The kit's fence-gate cases against the memory backend, one test per case.

tenure_conformance::tenure_gate_conformance!(tenure_conformance::memory::MemoryFactory);

//! Every test of the memory backend, in one binary: the whole conformance
//! kit, each area in its own module (`leases`, `gates`, `queue`, `nemesis`,
//! and the opt-in suites, reported skipped where the factory offers no
//! capability for them).

tenure_conformance::tenure_kit!(tenure_conformance::memory::MemoryFactory);

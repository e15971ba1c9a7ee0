//! Every integration test of the core, in one binary: the keeper (run
//! leases, job claims, recovery, panics in its background work) on tokio's
//! paused clock, and the layer mechanism.

mod common;
mod keeper;
mod keeper_jobs;
mod keeper_panics;
mod keeper_recovery;
mod layer;

//! # lease-core
//!
//! The contract of tenure: lease records, fencing tokens, the [`LeaseStore`]
//! trait every backend implements, the typed outcomes it answers, the errors
//! it may raise, and the pieces every backend shares (input
//! [`validate`]ion, the contract's decisions in [`rules`], the [`clock`]).
//!
//! Backends live in their own crates (`backend-memory`, `backend-sqlite`,
//! `backend-postgres`, `backend-redis`) and prove themselves with the
//! `conformance` kit. Most users depend on the `tenure` facade instead.
//!
//! The behavioural contract every backend honours is the [`contract`]
//! module, with numbered sections the rest of the code cites as
//! "contract §n"; the short version:
//! * a **lease** says "worker W owns operation X until T" (store time);
//! * a [`Claim`] `(id, owner, fence)` is what the winner holds;
//! * the **fence** grows from one store-wide sequence at every change of
//!   owner, so a stale copy can always be told apart, by the store and by a
//!   downstream [`FenceGate`];
//! * contention is an outcome ([`Admission::Conflict`], [`Renewal::Lost`]),
//!   `Err` means "the store could not say".

pub mod clock;
pub mod contract {
    #![doc = include_str!("contract.md")]
}
mod error;
mod fence;
mod instrument;
pub mod keeper;
mod outcome;
pub mod queue;
mod record;
pub mod redact;
mod request;
pub mod rules;
mod store;
pub mod validate;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp, TokioClock};
pub use error::{Error, ErrorKind, Result};
pub use fence::{FenceGate, StaleFence};
pub use instrument::{Instrumented, LeaseStoreExt};
pub use keeper::{JobGuard, Keeper, KeeperConfig, RunGuard};
pub use outcome::{
    Admission, ExpiredScan, LossReason, NotTakenReason, Renewal, SkippedRecord, Takeover,
    Transition, TransitionRejection,
};
pub use queue::JobQueue;
pub use record::{Claim, LeaseRecord, Status, DEFAULT_KIND};
pub use request::{
    generate_id, AdmitRequest, AdmitStrategy, ExpiredQuery, StatusChange, TakeoverAction,
    TakeoverRequest,
};
pub use store::LeaseStore;

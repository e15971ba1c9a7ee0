//! # tenure-lease-core
//!
//! The contract of tenure: lease records, fencing tokens, the [`LeaseStore`],
//! [`JobQueue`] and [`FenceStore`] traits every backend implements, the typed outcomes they
//! answer, the errors they may raise, the [`layer`]s that wrap a store, the
//! input [`limits`], and, for backend authors only, what every backend shares
//! under [`backend`] (input validation and the contract's decisions).
//!
//! Backends live in their own crates (`tenure-backend-memory`,
//! `tenure-backend-sqlite`, `tenure-backend-postgres`,
//! `tenure-backend-redis`, ...) and prove themselves with the
//! `tenure-conformance` kit; the keeper, which drives any store through these
//! traits, is `tenure-keeper`, which no backend depends on. Users depend on the `tenure` facade, which re-exports everything here
//! but [`backend`] and [`redact`].
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

pub mod backend;
pub mod clock;
pub mod contract {
    #![doc = include_str!("contract.md")]
}
mod error;
mod fence;
pub mod layer;
pub mod limits;
mod outcome;
pub mod queue;
pub mod rate;
mod record;
pub mod redact;
pub mod release;
mod request;
mod store;
pub mod telemetry;
pub mod tls;
pub mod wait;

pub use clock::{Clock, ManualClock, SystemClock, Timestamp, TokioClock};
pub use error::{Error, ErrorKind, Result};
pub use fence::{FenceCheck, FenceGate, FenceStore, GateRecord, StaleFence};
pub use layer::{Instrumented, LayerExt};
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

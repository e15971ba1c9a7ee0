//! The kit's cases, laid out as the [contract](tenure_lease_core::contract)
//! is: lease operations in [`lease`], job-queue operations in [`queue`], fence
//! gates in [`gate`], one
//! file per operation, and the cases that explore random inputs and
//! histories in [`random`]. Scaffolding the cases share lives in [`util`].

pub mod clock;
pub mod fault;
pub mod gate;
pub mod lease;
pub mod queue;
pub mod random;
pub mod util;

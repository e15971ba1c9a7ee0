//! The kit's cases, one module per area of the
//! [contract](tenure_lease_core::contract).

pub mod admit;
pub mod fault;
pub mod fence;
pub mod input;
pub mod keeper;
pub mod listing;
pub mod model;
pub mod queue;
pub mod queue_reliability;
pub mod queue_retention;
pub mod reliability;
pub mod renew;
pub mod takeover;
pub mod transition;
pub mod util;

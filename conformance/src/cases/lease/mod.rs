//! The lease cases, one file per operation or area of the
//! [contract](tenure_lease_core::contract).

pub mod admit;
pub mod counted;
pub mod fence;
pub mod input;
pub mod keeper;
pub mod keeper_cancel;
pub mod keeper_kinds;
pub mod listing;
pub mod progress;
pub mod race;
pub mod rate;
pub mod releases;
pub mod renew;
pub mod takeover;
pub mod transition;

//! Cases that explore instead of enumerate: a model-based run against a
//! reference, hostile input at every entry point, and concurrent histories
//! checked against the invariants.

pub mod gate_model;
pub mod history;
pub mod history_queue;
pub mod hostile;
pub mod hostile_queue;
pub mod model;
pub mod queue_model;

//! Telemetry that plugs in: every span field and metric tenure records,
//! named after OpenTelemetry's semantic conventions where one applies
//! (see [`tenure_lease_core::telemetry`] for the naming), and the one call
//! that describes the metrics to an exporter.
//!
//! Spans come from a [`Tracing`](crate::layer::Tracing) layer
//! ([`LayerExt::instrumented`](crate::LayerExt::instrumented)): one
//! `tenure.store` span per store operation, which `tracing-opentelemetry`
//! exports as a client span named `"{operation} {collection}"` (`"admit
//! leases"`, `"claim jobs"`, `"check_fence fences"`) with the attributes
//! listed on the layer. Metrics go through the `metrics` facade; install
//! any recorder, then call [`describe_metrics`]. `examples/telemetry.rs`
//! wires both: spans to an OpenTelemetry SDK, metrics to a Prometheus
//! exporter.
//!
//! # Every metric
//!
//! | metric | kind | unit | attributes |
//! |---|---|---|---|
//! | `db.client.operation.duration` | histogram | seconds | `db.system.name`, `db.operation.name`, `db.collection.name`, `error.type` (failures only: an error kind, or `cancelled` for a call dropped unanswered) |
//! | `tenure.store.operations` | counter | count | `db.system.name`, `db.operation.name`, `db.collection.name`, `tenure.outcome` |
//! | `tenure.store.admit.retries` | counter | count | `db.system.name` |
//! | `tenure.keeper.renewals` | counter | count | `tenure.outcome`: `renewed`, `lost`, `error`, `timeout`, `late` |
//! | `tenure.keeper.renew_calls` | counter | count | `db.operation.name`: `renew`, `renew_many`, `renew_job`, `renew_jobs`, and `renew_with_progress`, `renew_job_with_progress` for progress reports |
//! | `tenure.keeper.losses` | counter | count | `tenure.loss.reason`: a [`LossCause::label`](crate::LossCause::label) |
//! | `tenure.keeper.fail_stops` | counter | count | |
//! | `tenure.keeper.takeovers` | counter | count | `tenure.takeover.action`: `fail`, `adopt`, `release`, `cancel` |
//! | `tenure.keeper.recovery_failures` | counter | count | |
//! | `tenure.keeper.undecodable_records` | counter | count | |
//! | `tenure.keeper.lease.time_left` | histogram | seconds | |
//! | `tenure.keeper.held_leases` | gauge | count | |
//! | `tenure.keeper.task_panics` | counter | count | `tenure.task`: `heartbeat`, `reconciler`, `recovery_callback` |
//!
//! The stores' metrics are recorded by a `Tracing` layer (and, for
//! admission retries, by the PostgreSQL and etcd stores themselves), the
//! keeper's by every keeper. Through `metrics-exporter-prometheus` with
//! `with_recommended_naming(true)` the names become
//! `db_client_operation_duration_seconds`, `tenure_store_operations_total`,
//! `tenure_keeper_held_leases`, ..., and the attributes labels such as
//! `db_system_name`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use tenure::layer::LayerExt;
//! use tenure::memory::MemoryStore;
//! use tenure::{AdmitRequest, LeaseStore};
//!
//! // Install a `metrics` recorder first (an exporter's), then:
//! tenure::telemetry::describe_metrics();
//! let store = MemoryStore::new().instrumented();
//! store.admit(&AdmitRequest::new(tenure::generate_id(), "worker-a")).await?;
//! assert!(tenure::telemetry::metrics().any(|metric| metric.name == "db.client.operation.duration"));
//! # Ok(()) }
//! ```

pub use tenure_keeper::telemetry::{label as keeper_label, METRICS as KEEPER_METRICS};
pub use tenure_lease_core::telemetry::{
    attribute, describe, Metric, MetricKind, ADMIT_RETRIES, OPERATIONS, OPERATION_DURATION,
    STORE_METRICS,
};

/// Every metric tenure records: the stores' ([`STORE_METRICS`]), then the
/// keeper's ([`KEEPER_METRICS`]).
pub fn metrics() -> impl Iterator<Item = &'static Metric> {
    STORE_METRICS.iter().chain(KEEPER_METRICS)
}

/// Tells the installed `metrics` recorder the unit and description of
/// every metric tenure records; call it once, after installing the
/// recorder (see [`describe`]).
pub fn describe_metrics() {
    describe(STORE_METRICS);
    describe(KEEPER_METRICS);
}

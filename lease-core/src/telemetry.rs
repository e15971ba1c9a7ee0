//! What tenure reports, under which names: the one catalogue of its metrics
//! and the attribute names its spans and metrics share.
//!
//! Names follow [OpenTelemetry's semantic conventions] where one applies. A
//! store operation is a database client call: its duration is the
//! convention's `db.client.operation.duration`, and its span and metrics
//! carry `db.system.name` (the store's [`LeaseStore::system_name`]),
//! `db.operation.name` (the trait method: `admit`, `claim`, ...),
//! `db.collection.name` (`leases`, `jobs` or `fences`),
//! `db.operation.batch.size` for a batch, and `error.type` (an
//! [`ErrorKind`](crate::ErrorKind) name) when it fails. What no convention
//! covers is named under `tenure.`.
//!
//! Metrics are recorded through the [`metrics`] facade with these dotted
//! names, so any exporter works; one renders them in its own style. The
//! Prometheus exporter of `metrics-exporter-prometheus`, built with
//! `with_recommended_naming(true)`, turns dots into underscores and appends
//! units and `_total` as Prometheus expects (`db_client_operation_duration_seconds`,
//! `tenure_store_operations_total`), once [`describe`] has told it the
//! units. Spans are recorded through [`tracing`]; with
//! `tracing-opentelemetry` their `otel.name`, `otel.kind` and
//! `otel.status_code` fields become the exported span's name
//! (`"admit leases"`), kind (client) and status.
//!
//! [OpenTelemetry's semantic conventions]: https://opentelemetry.io/docs/specs/semconv/database/
//! [`LeaseStore::system_name`]: crate::LeaseStore::system_name

use metrics::Unit;

/// Attribute (label and span field) names.
pub mod attribute {
    /// The store's kind: `postgresql`, `redis`, `sqlite`, `mysql`, `etcd`,
    /// `memory`, `file`, ... (OpenTelemetry's name).
    pub const DB_SYSTEM_NAME: &str = "db.system.name";
    /// The store operation: the trait method's name (OpenTelemetry's name).
    pub const DB_OPERATION_NAME: &str = "db.operation.name";
    /// What the operation works on: `leases`, `jobs` or `fences`
    /// (OpenTelemetry's name).
    pub const DB_COLLECTION_NAME: &str = "db.collection.name";
    /// How many claims a batch operation carries (OpenTelemetry's name).
    pub const DB_OPERATION_BATCH_SIZE: &str = "db.operation.batch.size";
    /// Why an operation failed: an [`ErrorKind`](crate::ErrorKind) name
    /// (OpenTelemetry's name); absent when it answered.
    pub const ERROR_TYPE: &str = "error.type";
    /// What an operation answered: an
    /// [`Answer::label`](crate::layer::Answer::label) (`admitted`,
    /// `conflict`, `lost`, ...) or, when it failed, the `error.type`.
    pub const OUTCOME: &str = "tenure.outcome";
}

/// How a metric is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A monotonic count.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of recorded values.
    Histogram,
}

impl MetricKind {
    /// The kind's name in the metric lists: `counter`, `gauge`, `histogram`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric tenure records: its name, kind, unit, what it means and the
/// attributes (labels) it carries. Built with [`Metric::counter`],
/// [`Metric::gauge`] or [`Metric::histogram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metric {
    /// The name, dotted as OpenTelemetry names metrics.
    pub name: &'static str,
    /// How it is recorded.
    pub kind: MetricKind,
    /// What its values count or measure.
    pub unit: Unit,
    /// What it means, for an exporter's help text.
    pub description: &'static str,
    /// The attributes every recording carries (`error.type` only on
    /// failures).
    pub attributes: &'static [&'static str],
}

impl Metric {
    const fn new(kind: MetricKind, name: &'static str, description: &'static str) -> Self {
        Metric {
            name,
            kind,
            unit: Unit::Count,
            description,
            attributes: &[],
        }
    }

    /// A counter named `name`, counting things (unit [`Unit::Count`]), with
    /// no attributes yet.
    pub const fn counter(name: &'static str, description: &'static str) -> Self {
        Metric::new(MetricKind::Counter, name, description)
    }

    /// A gauge named `name`, counting things, with no attributes yet.
    pub const fn gauge(name: &'static str, description: &'static str) -> Self {
        Metric::new(MetricKind::Gauge, name, description)
    }

    /// A histogram named `name` of durations in seconds, with no attributes
    /// yet.
    pub const fn histogram(name: &'static str, description: &'static str) -> Self {
        Metric {
            unit: Unit::Seconds,
            ..Metric::new(MetricKind::Histogram, name, description)
        }
    }

    /// The same metric carrying `attributes`.
    pub const fn attributes(self, attributes: &'static [&'static str]) -> Self {
        Metric { attributes, ..self }
    }
}

/// The duration of each store operation seen by a
/// [`Tracing`](crate::layer::Tracing) layer: OpenTelemetry's database client
/// metric.
pub const OPERATION_DURATION: Metric = Metric::histogram(
    "db.client.operation.duration",
    "Duration of tenure store operations, from the call to its answer.",
)
.attributes(&[
    attribute::DB_SYSTEM_NAME,
    attribute::DB_OPERATION_NAME,
    attribute::DB_COLLECTION_NAME,
    attribute::ERROR_TYPE,
]);

/// Each store operation seen by a [`Tracing`](crate::layer::Tracing) layer,
/// by what it answered.
pub const OPERATIONS: Metric = Metric::counter(
    "tenure.store.operations",
    "Store operations by what they answered (admitted, conflict, lost, ...) or the kind of error.",
)
.attributes(&[
    attribute::DB_SYSTEM_NAME,
    attribute::DB_OPERATION_NAME,
    attribute::DB_COLLECTION_NAME,
    attribute::OUTCOME,
]);

/// Admissions a store decided again after losing a race (contract §3); see
/// [`backend::telemetry`](crate::backend::telemetry).
pub const ADMIT_RETRIES: Metric = Metric::counter(
    "tenure.store.admit.retries",
    "Times a store decided an admission again inside one call after losing a race to another writer.",
)
.attributes(&[attribute::DB_SYSTEM_NAME]);

/// Every metric the stores and their layers record.
pub const STORE_METRICS: &[Metric] = &[OPERATION_DURATION, OPERATIONS, ADMIT_RETRIES];

/// Tells the installed `metrics` recorder the unit and description of each
/// of `metrics` (an exporter shows them as help text and, for Prometheus,
/// unit suffixes). Call it after installing the recorder; a recorder
/// installed later hears nothing of it.
pub fn describe(metrics: &[Metric]) {
    for metric in metrics {
        match metric.kind {
            MetricKind::Counter => {
                metrics::describe_counter!(metric.name, metric.unit, metric.description);
            }
            MetricKind::Gauge => {
                metrics::describe_gauge!(metric.name, metric.unit, metric.description);
            }
            MetricKind::Histogram => {
                metrics::describe_histogram!(metric.name, metric.unit, metric.description);
            }
        }
    }
}

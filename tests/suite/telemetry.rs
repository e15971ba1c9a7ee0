//! Telemetry as an exporter sees it: the spans of an instrumented store
//! through `tracing-opentelemetry` into OpenTelemetry's in-memory exporter,
//! the metrics of a store and a keeper through the Prometheus exporter's
//! recorder (rendered in memory, no listener), and the list of every metric
//! in `tenure::telemetry`'s docs against the catalogue the code records
//! from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tenure::layer::{Fault, Faults, LayerExt};
use tenure::memory::MemoryStore;
use tenure::queue::{ClaimRequest, NewJob};
use tenure::telemetry::{self, Metric, MetricKind};
use tenure::{
    AdmitOutcome, AdmitRequest, FenceStore, JobQueue, Keeper, KeeperConfig, LeaseStore,
    StatusChange, TokioClock,
};
use tracing_subscriber::layer::SubscriberExt as _;

const TTL: Duration = Duration::from_secs(30);

/// A memory store whose `get` fails, instrumented outermost: the layer in
/// between must hand on the store's `system_name`.
fn instrumented_store() -> tenure::Instrumented<tenure::layer::Layered<MemoryStore, Faults>> {
    let store = MemoryStore::new().layer(Faults::new());
    store.hook().inject("get", None, Fault::Unavailable);
    store.hook().inject("list_active", None, Fault::Hang);
    store.instrumented()
}

/// One operation of each collection, a batch, a conflict, a failure and a
/// call dropped unanswered.
async fn exercise(store: &(impl JobQueue + FenceStore)) {
    let holder = store
        .admit(&AdmitRequest::new("run-1", "worker-a").scope("s").ttl(TTL))
        .await
        .expect("admit")
        .admitted()
        .cloned()
        .expect("admitted");
    store
        .admit(&AdmitRequest::new("run-2", "worker-b").scope("s").ttl(TTL))
        .await
        .expect("admit a rival");
    let claim = holder.claim().expect("an owner");
    store
        .renew_many(&[claim.clone(), claim], TTL)
        .await
        .expect("renew_many");
    store
        .enqueue(&NewJob::new("mail", serde_json::json!({})).id("job-1"))
        .await
        .expect("enqueue");
    store
        .claim(&ClaimRequest::new("mail", "worker-a", TTL))
        .await
        .expect("claim");
    let check = store.check_fence("printer", 3).await.expect("check_fence");
    assert_eq!(check, tenure::FenceCheck::Accepted);
    let failed = store.get("run-1").await.expect_err("get fails");
    assert_eq!(failed.kind(), tenure::ErrorKind::Unavailable);
    let hanging = tokio::time::timeout(Duration::from_secs(1), store.list_active()).await;
    assert!(
        hanging.is_err(),
        "the hanging call is given up: {hanging:?}"
    );
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| &attribute.value)
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attribute(span, key).map(Value::to_string)
}

/// Spans and metrics in one test, spans first: `tracing` decides once per
/// call site, for the whole process, whether any subscriber wants it, so
/// another test reaching the store's span first on a thread without a
/// subscriber could switch it off for this one (tokio-rs/tracing#2874).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn spans_and_metrics_reach_opentelemetry_and_prometheus() {
    store_spans_follow_the_database_client_conventions().await;
    store_and_keeper_metrics_reach_prometheus_under_the_listed_names().await;
}

/// A store behind `Arc<dyn Store>` (what `tenure::connect` answers) is
/// labelled with its own system name, through every wrapper.
#[tokio::test(flavor = "current_thread")]
async fn a_connected_store_names_its_system() {
    let store = tenure::connect("memory:").await.expect("memory connects");
    assert_eq!(store.system_name(), "memory");
    assert_eq!(store.instrumented().hook().system(), "memory");
}

async fn store_spans_follow_the_database_client_conventions() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("telemetry-test")));
    {
        let _subscriber = tracing::subscriber::set_default(subscriber);
        exercise(&instrumented_store()).await;
    }
    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");

    let names: Vec<&str> = spans.iter().map(|span| span.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "admit leases",
            "admit leases",
            "renew_many leases",
            "enqueue jobs",
            "claim jobs",
            "check_fence fences",
            "get leases",
            "list_active leases"
        ]
    );
    for span in &spans {
        assert_eq!(span.span_kind, SpanKind::Client, "{}", span.name);
        assert_eq!(
            text(span, "db.system.name").as_deref(),
            Some("memory"),
            "{}",
            span.name
        );
        let (operation, collection) = span.name.split_once(' ').expect("two words");
        assert_eq!(text(span, "db.operation.name").as_deref(), Some(operation));
        assert_eq!(
            text(span, "db.collection.name").as_deref(),
            Some(collection)
        );
    }

    let outcomes: Vec<Option<String>> = spans
        .iter()
        .map(|span| text(span, "tenure.outcome"))
        .collect();
    let expected = [
        "admitted",
        "conflict",
        "answered",
        "enqueued",
        "claimed",
        "accepted",
        "unavailable",
        "cancelled",
    ];
    assert_eq!(
        outcomes,
        expected.map(|outcome| Some(outcome.to_owned())),
        "outcomes"
    );
    let admitted = &spans[0];
    assert_eq!(text(admitted, "tenure.lease.id").as_deref(), Some("run-1"));
    assert_eq!(text(admitted, "tenure.owner").as_deref(), Some("worker-a"));
    assert_eq!(text(admitted, "tenure.fence").as_deref(), Some("1"));
    assert_eq!(admitted.status, Status::Unset);
    assert_eq!(attribute(admitted, "error.type"), None);
    assert_eq!(
        text(&spans[2], "db.operation.batch.size").as_deref(),
        Some("2")
    );
    assert_eq!(attribute(&spans[0], "db.operation.batch.size"), None);

    for (failed, error_type) in [(&spans[6], "unavailable"), (&spans[7], "cancelled")] {
        assert_eq!(text(failed, "error.type").as_deref(), Some(error_type));
        assert!(
            matches!(failed.status, Status::Error { .. }),
            "{:?}",
            failed.status
        );
    }
}

/// A Prometheus exposition, parsed: each metric's type (by its `# TYPE`
/// line) and every sample's labels.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>)>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(declaration) = line.strip_prefix("# TYPE ") {
                let (name, kind) = declaration.split_once(' ').expect("name and type");
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.is_empty() && !line.starts_with('#') {
                let series = line.rsplit_once(' ').expect("a value").0;
                let (name, labels) = match series.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once('=').expect("key=value");
                        (key.to_owned(), value.trim_matches('"').to_owned())
                    })
                    .collect();
                samples.push((name.to_owned(), labels));
            }
        }
        Exposition { types, samples }
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(sample, sample_labels)| {
            sample == name
                && labels
                    .iter()
                    .all(|(key, value)| sample_labels.get(*key).map(String::as_str) == Some(value))
        })
    }
}

/// The name the Prometheus exporter gives `metric` with recommended naming.
fn prometheus_name(metric: &Metric) -> String {
    let mut name = metric.name.replace('.', "_");
    if metric.kind == MetricKind::Histogram {
        name.push_str("_seconds");
    }
    if metric.kind == MetricKind::Counter {
        name.push_str("_total");
    }
    name
}

async fn store_and_keeper_metrics_reach_prometheus_under_the_listed_names() {
    let recorder = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    let _recorder = metrics::set_default_local_recorder(&recorder);
    telemetry::describe_metrics();

    exercise(&instrumented_store()).await;

    // A keeper holds a run through renewals, then loses it to an operator
    // who fails it behind its back.
    let store = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock::new())).instrumented());
    let keeper = Keeper::builder(
        store.clone(),
        KeeperConfig::with_ttl(Duration::from_secs(3)),
    )
    .start()
    .expect("keeper");
    let AdmitOutcome::Admitted { guard, record, .. } = keeper
        .admit(keeper.request("nightly"))
        .await
        .expect("admit")
    else {
        panic!("an empty store admits");
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let claim = record.claim().expect("an owner");
    store
        .transition(&claim, &StatusChange::failed("cancelled by hand"))
        .await
        .expect("fail the run");
    tokio::time::timeout(Duration::from_secs(10), guard.token().cancelled())
        .await
        .expect("the keeper sees the loss");
    let loss = guard.loss().expect("a cause");
    keeper.shutdown_within(Duration::from_secs(5)).await;

    let exposition = Exposition::parse(&handle.render());
    let catalogue: BTreeMap<String, &Metric> = telemetry::metrics()
        .map(|metric| (prometheus_name(metric), metric))
        .collect();
    for (name, kind) in &exposition.types {
        let metric = catalogue
            .get(name)
            .unwrap_or_else(|| panic!("{name} is recorded but not in the catalogue"));
        let expected = match metric.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            _ => "histogram",
        };
        assert_eq!(kind, expected, "{name}");
    }
    for (sample, labels) in &exposition.samples {
        let (name, metric) = catalogue
            .iter()
            .find(|(name, _)| sample.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("{sample} is recorded but not in the catalogue"));
        let allowed: BTreeSet<String> = metric
            .attributes
            .iter()
            .map(|attribute| attribute.replace('.', "_"))
            .chain(["le".to_owned(), "quantile".to_owned()])
            .collect();
        for key in labels.keys() {
            assert!(allowed.contains(key), "{name} carries unlisted label {key}");
        }
    }

    let memory = ("db_system_name", "memory");
    for (name, labels) in [
        (
            "tenure_store_operations_total",
            vec![
                memory,
                ("db_operation_name", "admit"),
                ("tenure_outcome", "conflict"),
            ],
        ),
        (
            "db_client_operation_duration_seconds_count",
            vec![
                memory,
                ("db_operation_name", "get"),
                ("db_collection_name", "leases"),
                ("error_type", "unavailable"),
            ],
        ),
        (
            "db_client_operation_duration_seconds_count",
            vec![
                memory,
                ("db_operation_name", "claim"),
                ("db_collection_name", "jobs"),
            ],
        ),
        (
            "db_client_operation_duration_seconds_count",
            vec![
                memory,
                ("db_operation_name", "list_active"),
                ("error_type", "cancelled"),
            ],
        ),
        (
            "tenure_keeper_renewals_total",
            vec![("tenure_outcome", "renewed")],
        ),
        (
            "tenure_keeper_renewals_total",
            vec![("tenure_outcome", "lost")],
        ),
        (
            "tenure_keeper_renew_calls_total",
            vec![("db_operation_name", "renew")],
        ),
        (
            "tenure_keeper_losses_total",
            vec![("tenure_loss_reason", loss.label())],
        ),
        ("tenure_keeper_held_leases", vec![]),
        ("tenure_keeper_lease_time_left_seconds_count", vec![]),
    ] {
        assert!(
            exposition.has(name, &labels),
            "no {name} with {labels:?} in\n{}",
            handle.render()
        );
    }
}

/// The rows of the "Every metric" table in `tenure::telemetry`'s docs:
/// name, kind, unit, and the attributes column.
fn documented_metrics() -> BTreeMap<String, (String, String, String)> {
    include_str!("../../src/telemetry.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let name = cells[0].trim_end_matches('`').to_owned();
            let column = |index: usize| cells.get(index).map_or("", |cell| cell.trim()).to_owned();
            (name, (column(1), column(2), column(3)))
        })
        .collect()
}

#[test]
fn the_documented_list_is_the_catalogue() {
    let documented = documented_metrics();
    let recorded: BTreeSet<&str> = telemetry::metrics().map(|metric| metric.name).collect();
    let listed: BTreeSet<&str> = documented.keys().map(String::as_str).collect();
    assert_eq!(
        listed, recorded,
        "the docs list other metrics than the code records"
    );
    for metric in telemetry::metrics() {
        let (kind, unit, attributes) = &documented[metric.name];
        assert_eq!(kind, metric.kind.as_str(), "{}", metric.name);
        let expected_unit = match metric.unit {
            metrics::Unit::Seconds => "seconds",
            _ => "count",
        };
        assert_eq!(unit, expected_unit, "{}", metric.name);
        for attribute in metric.attributes {
            assert!(
                attributes.contains(&format!("`{attribute}`")),
                "{} documents no {attribute}",
                metric.name
            );
        }
    }
}

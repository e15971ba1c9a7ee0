//! Telemetry wired to what most deployments run: tenure's spans to
//! OpenTelemetry through `tracing-opentelemetry`, its metrics to Prometheus
//! through `metrics-exporter-prometheus`.
//!
//! `cargo run --example telemetry`
//!
//! The spans go to OpenTelemetry's in-memory exporter so the example can
//! print them; a service puts an OTLP exporter (`opentelemetry-otlp`) in its
//! place, the rest unchanged. The Prometheus text is printed too; a service
//! serves `handle.render()` at `/metrics` (or turns on the exporter's
//! `http-listener` feature).

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tenure::layer::LayerExt;
use tenure::memory::MemoryStore;
use tenure::{AdmitOutcome, AdmitRequest, Keeper, KeeperConfig, LeaseStore, StatusChange};
use tracing_subscriber::layer::SubscriberExt as _;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Metrics: Prometheus names (`_total`, unit suffixes) from the
    // descriptions tenure gives once the recorder is installed.
    // The duration as a histogram with OpenTelemetry's advised buckets
    // (seconds), not the exporter's default summary.
    let prometheus = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets_for_metric(
            Matcher::Full(tenure::telemetry::OPERATION_DURATION.name.to_owned()),
            &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0],
        )?
        .install_recorder()?;
    tenure::telemetry::describe_metrics();

    // Spans: every `tracing` span to an OpenTelemetry tracer.
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let tracer = provider.tracer("telemetry-example");
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer)),
    )?;

    // An instrumented store (any backend), a keeper on it, some work.
    let store = Arc::new(MemoryStore::new().instrumented());
    let keeper = Keeper::builder(
        store.clone(),
        KeeperConfig::with_ttl(Duration::from_secs(30)),
    )
    .start()?;
    let request = keeper.request("nightly-report").scope("report:nightly");
    if let AdmitOutcome::Admitted { guard, .. } = keeper.admit(request).await? {
        // Another worker is refused while the run holds the scope: a
        // `conflict` outcome, not an error.
        let rival = AdmitRequest::new("nightly-report-again", "worker-b").scope("report:nightly");
        store.admit(&rival).await?;
        guard.complete(StatusChange::succeeded()).await?;
    }
    keeper.shutdown_within(Duration::from_secs(5)).await;

    provider.force_flush()?;
    for span in spans.get_finished_spans()? {
        let attributes: Vec<String> = span
            .attributes
            .iter()
            .map(|attribute| format!("{}={}", attribute.key, attribute.value))
            .collect();
        println!(
            "span {:?} ({:?}, {:?}): {}",
            span.name,
            span.span_kind,
            span.status,
            attributes.join(" ")
        );
    }
    println!("\n{}", prometheus.render());
    Ok(())
}

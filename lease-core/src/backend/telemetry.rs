//! What a backend reports about work no layer can see: the retries it makes
//! inside one operation. A [`Tracing`](crate::layer::Tracing) layer sees one
//! call and one answer; an admission a store decided again after losing a
//! race looks the same from there as one that never raced, so the store
//! reports it itself, through these calls, under one metric name for every
//! backend.

use crate::telemetry::{attribute, ADMIT_RETRIES};

/// Reports that a store of kind `system` (its
/// [`Backend::SYSTEM`](super::stores::Backend::SYSTEM)) decided the
/// admission of `id` again `retries` times after lost races: adds them to
/// [`ADMIT_RETRIES`], records them as the `tenure.retries` field of the
/// current span (the `tenure.store` span of a
/// [`Tracing`](crate::layer::Tracing) layer, when there is one) and logs
/// them at debug level. Nothing is reported for 0.
pub fn admit_retried(system: &'static str, id: &str, retries: u32) {
    if retries == 0 {
        return;
    }
    metrics::counter!(ADMIT_RETRIES.name, attribute::DB_SYSTEM_NAME => system)
        .increment(u64::from(retries));
    tracing::Span::current().record("tenure.retries", retries);
    tracing::debug!(
        db.system.name = system,
        tenure.lease.id = id,
        tenure.retries = retries,
        "admission decided again after lost races"
    );
}

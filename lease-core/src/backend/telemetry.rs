//! What a backend reports about work no layer can see: the retries it makes
//! inside one operation. A [`Tracing`](crate::layer::Tracing) layer sees one
//! call and one answer; an admission a store decided again after losing a
//! race looks the same from there as one that never raced, so the store
//! reports it itself, through these calls, under one metric name for every
//! backend.

/// Counter of the attempts admissions made again inside a store after
/// losing a race ([contract §3](crate::contract)), labelled `backend`.
pub const ADMIT_RETRIES_TOTAL: &str = "tenure_admit_retries_total";

/// Reports that `backend` decided the admission of `id` again `retries`
/// times after lost races: adds them to [`ADMIT_RETRIES_TOTAL`], records
/// them as the `retries` field of the current span (the `tenure.store`
/// span of a [`Tracing`](crate::layer::Tracing) layer, when there is one)
/// and logs them at debug level. Nothing is reported for 0.
pub fn admit_retried(backend: &'static str, id: &str, retries: u32) {
    if retries == 0 {
        return;
    }
    metrics::counter!(ADMIT_RETRIES_TOTAL, "backend" => backend).increment(u64::from(retries));
    tracing::Span::current().record("retries", retries);
    tracing::debug!(
        backend,
        lease.id = id,
        retries,
        "admission decided again after lost races"
    );
}

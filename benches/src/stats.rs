//! Latency histograms and the few summary figures every scenario shares.
//!
//! Latencies go into an HDR histogram in microseconds (1 µs to 60 s, three
//! significant digits), so p99 and p999 stay exact enough without keeping
//! every sample. Figures leave this module as plain serialisable structs.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// `duration` in microseconds, the one unit every duration of the JSON
/// report is written in (fields named `*_us`).
pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Serialises a [`Duration`] as its [`micros`], for `#[serde(serialize_with)]`.
///
/// # Errors
///
/// When the serialiser fails.
pub fn serialize_us<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(micros(*duration))
}

/// Highest latency the histograms keep apart; slower samples count as this.
const HIGHEST_MICROS: u64 = 60_000_000;

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Self {
        // Bounds and precision are constants well inside what the crate accepts.
        let histogram = Histogram::new_with_bounds(1, HIGHEST_MICROS, 3)
            .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"));
        Latencies { histogram }
    }

    /// Records one sample.
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(HIGHEST_MICROS);
        self.histogram
            .saturating_record(micros.clamp(1, HIGHEST_MICROS));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        // Both histograms share the same bounds, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The percentiles the report prints.
    pub fn summary(&self) -> LatencySummary {
        let at = |quantile: f64| self.histogram.value_at_quantile(quantile);
        LatencySummary {
            count: self.histogram.len(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: self.histogram.max(),
            mean_us: self.histogram.mean(),
        }
    }
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest sample.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

/// Throughput and latency of one measured loop.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Throughput {
    /// Operations completed.
    pub ops: u64,
    /// Wall time of the loop, in µs.
    pub elapsed_us: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Per-operation latency.
    pub latency: LatencySummary,
    /// Slowest ops/s of one slice, when the loop ran in slices
    /// ([`drive_alternating`](crate::scenario::drive_alternating)); else `ops_per_sec`.
    pub slice_min_per_sec: f64,
    /// Fastest ops/s of one slice; else `ops_per_sec`.
    pub slice_max_per_sec: f64,
}

impl Throughput {
    /// Throughput of `latencies.count()` operations over `elapsed`.
    pub fn from_latencies(latencies: &Latencies, elapsed: Duration) -> Self {
        let ops_per_sec = per_sec(latencies.count(), elapsed);
        Throughput {
            ops: latencies.count(),
            elapsed_us: micros(elapsed),
            ops_per_sec,
            latency: latencies.summary(),
            slice_min_per_sec: ops_per_sec,
            slice_max_per_sec: ops_per_sec,
        }
    }

    /// This throughput with the slowest and fastest of `slice_rates` (ops/s
    /// of each slice) as its spread; unchanged when there are none.
    pub fn with_slices(mut self, slice_rates: &[f64]) -> Self {
        if let (Some(min), Some(max)) = (
            slice_rates.iter().copied().reduce(f64::min),
            slice_rates.iter().copied().reduce(f64::max),
        ) {
            self.slice_min_per_sec = min;
            self.slice_max_per_sec = max;
        }
        self
    }

    /// Fastest slice ÷ slowest slice (1 when even or unsliced).
    pub fn slice_spread(&self) -> f64 {
        if self.slice_min_per_sec > 0.0 {
            self.slice_max_per_sec / self.slice_min_per_sec
        } else {
            1.0
        }
    }
}

/// `count` per second of `elapsed` (0 for no time).
fn per_sec(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The ratio `measured / baseline` at its least and most over slices:
/// `measured`'s slowest slice over `baseline`'s fastest, and the reverse.
pub fn ratio_range(measured: &Throughput, baseline: &Throughput) -> Option<(f64, f64)> {
    Some((
        ratio(measured.slice_min_per_sec, baseline.slice_max_per_sec)?,
        ratio(measured.slice_max_per_sec, baseline.slice_min_per_sec)?,
    ))
}

/// `measured / baseline`, or `None` when the baseline is zero (or absent).
pub fn ratio(measured: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0).then(|| measured / baseline)
}

/// Jain's fairness index of `shares`: 1 when all are equal, `1/n` when one
/// takes everything. An empty or all-zero input is perfectly fair (1).
pub fn jain_index(shares: &[u64]) -> f64 {
    let sum: f64 = shares.iter().map(|&x| x as f64).sum();
    let squares: f64 = shares.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (shares.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_spans_one_over_n_to_one() {
        assert!((jain_index(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain_index(&[8, 0, 0, 0]) - 0.25).abs() < 1e-9);
        assert!((jain_index(&[]) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn percentiles_follow_the_samples() {
        let mut latencies = Latencies::new();
        for micros in 1..=1000 {
            latencies.record(Duration::from_micros(micros));
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 1000);
        assert!((495..=505).contains(&summary.p50_us), "{summary:?}");
        assert!((985..=995).contains(&summary.p99_us), "{summary:?}");
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
    }
}

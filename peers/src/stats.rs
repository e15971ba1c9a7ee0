//! Medians, slice ranges, percentiles and Jain's fairness index: the few
//! figures every table of this program prints.

use std::time::Duration;

/// The figures of one side of a comparison, one per interleaved slice.
#[derive(Debug, Default, Clone)]
pub struct Slices(Vec<f64>);

impl Slices {
    pub fn push(&mut self, value: f64) {
        self.0.push(value);
    }

    /// The middle slice, or the mean of the two middle ones.
    pub fn median(&self) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => 0.0,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }

    /// The slowest and the fastest slice.
    pub fn range(&self) -> (f64, f64) {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
}

/// The `p`-th percentile (0–100) of `values` by nearest rank; 0 when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latencies in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies(Vec<f64>);

impl Latencies {
    pub fn record(&mut self, elapsed: Duration) {
        self.0.push(elapsed.as_secs_f64() * 1e6);
    }

    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    pub fn p(&self, p: f64) -> f64 {
        percentile(&self.0, p)
    }
}

/// Jain's fairness index over per-worker shares: 1 when every worker got
/// the same, 1/n when one worker got everything.
pub fn jain(shares: &[u64]) -> f64 {
    let sum: f64 = shares.iter().map(|&x| x as f64).sum();
    let squares: f64 = shares.iter().map(|&x| (x as f64).powi(2)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (shares.len() as f64 * squares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_their_definitions() {
        assert!((jain(&[3, 3, 3, 3]) - 1.0).abs() < 1e-9);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-9);
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        let mut slices = Slices::default();
        for value in [3.0, 1.0, 2.0] {
            slices.push(value);
        }
        assert_eq!(slices.median(), 2.0);
        slices.push(4.0);
        assert_eq!(slices.median(), 2.5);
        assert_eq!(slices.range(), (1.0, 4.0));
    }
}

//! Latency statistics of a sample set.

use serde_json::{json, Value};
use std::time::Duration;

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(super) fn summary(mut v: Vec<u64>) -> Value {
    v.sort_unstable();
    let mean = if v.is_empty() {
        0
    } else {
        v.iter().sum::<u64>() / v.len() as u64
    };
    json!({"n": v.len(), "median_ns": pct(&v, 50.0), "p99_ns": pct(&v, 99.0), "mean_ns": mean,
           "min_ns": v.first().copied().unwrap_or(0), "max_ns": v.last().copied().unwrap_or(0)})
}

pub(super) fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50.0), 50);
        assert_eq!(pct(&v, 99.0), 99);
        assert_eq!(pct(&[7], 99.0), 7);
        assert_eq!(pct(&[], 50.0), 0);
    }
}

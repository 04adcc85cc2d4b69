//! Summaries of timing samples, with one definition used by every tool:
//!
//! - **median**: the middle sample of the sorted set, or the mean of the two middle samples for an
//!   even count (perftest's `t_typical`);
//! - **percentile p**: nearest rank, the smallest sample such that at least p % of all samples are
//!   less than or equal to it (so p99 of 100 samples is the 99th smallest);
//! - **mean** and **stdev**: arithmetic mean and population standard deviation.
//!
//! NaN samples are dropped; an empty set has no summary.

use serde::Serialize;

/// Summary of a set of samples, in the samples' unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub min: f64,
    pub max: f64,
    pub median: f64,
    pub mean: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub samples: usize,
}

/// Nearest-rank percentile of sorted samples; `p` in (0, 100].
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    // The float rank is at most `len` since p <= 100; clamp guards the rounding.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Median of sorted samples (mean of the two middle ones for an even count).
pub fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        None
    } else if n % 2 == 1 {
        Some(sorted[n / 2])
    } else {
        Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0)
    }
}

/// Median of `samples` in any order, of its finite ones (a NaN or infinite sample is not a
/// measurement); `None` when none is left.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    median_sorted(&s)
}

/// Summarises `samples`; `None` when no non-NaN sample is left.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    Some(Summary {
        min: s[0],
        max: s[s.len() - 1],
        median: median_sorted(&s)?,
        mean,
        stdev: var.sqrt(),
        p99: percentile_sorted(&s, 99.0)?,
        p99_9: percentile_sorted(&s, 99.9)?,
        samples: s.len(),
    })
}

/// [`summarize`] for integer samples (nanosecond counters).
pub fn summarize_u64(samples: &[u64]) -> Option<Summary> {
    summarize(&samples.iter().map(|&v| v as f64).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentiles_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_sorted(&s, 99.0), Some(99.0));
        assert_eq!(percentile_sorted(&s, 50.0), Some(50.0));
        assert_eq!(percentile_sorted(&s, 100.0), Some(100.0));
        assert_eq!(percentile_sorted(&s, 99.9), Some(100.0));
        assert_eq!(percentile_sorted(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(percentile_sorted(&s, 0.0), None);
        assert_eq!(percentile_sorted(&s, f64::NAN), None);
    }

    #[test]
    fn medians() {
        assert_eq!(median_sorted(&[1.0, 2.0, 10.0]), Some(2.0));
        assert_eq!(median_sorted(&[1.0, 2.0, 4.0, 10.0]), Some(3.0));
        assert_eq!(median_sorted(&[]), None);
        // Unsorted, with what is not a measurement left out.
        assert_eq!(median(&[10.0, 1.0, f64::NAN, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, f64::INFINITY, 1.0, 2.0, 10.0]), Some(3.0));
        assert_eq!(median(&[f64::NAN, f64::NEG_INFINITY]), None);
    }

    #[test]
    fn summary_fields() {
        let s = summarize(&[4.0, 2.0, f64::NAN, 6.0, 4.0]).unwrap();
        assert_eq!(s.samples, 4);
        assert_eq!(
            (s.min, s.max, s.median, s.mean, s.p99),
            (2.0, 6.0, 4.0, 4.0, 6.0)
        );
        assert!((s.stdev - 2f64.sqrt()).abs() < 1e-12);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[f64::NAN]).is_none());
        assert_eq!(summarize_u64(&[10, 20]).unwrap().median, 15.0);
    }

    proptest! {
        #[test]
        fn ordered_and_bounded(v in proptest::collection::vec(-1e12f64..1e12, 1..200)) {
            let s = summarize(&v).unwrap();
            prop_assert!(s.min <= s.median && s.median <= s.max);
            prop_assert!(s.min <= s.p99 && s.p99 <= s.p99_9 && s.p99_9 <= s.max);
            prop_assert!(s.min <= s.mean + 1e-3 && s.mean <= s.max + 1e-3);
            prop_assert_eq!(s.samples, v.len());
        }

        #[test]
        fn percentile_is_a_sample(v in proptest::collection::vec(any::<u32>(), 1..100), p in 0.001f64..100.0) {
            let mut s: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            s.sort_by(f64::total_cmp);
            let q = percentile_sorted(&s, p).unwrap();
            prop_assert!(s.contains(&q));
            let below = s.iter().filter(|&&x| x <= q).count() as f64;
            prop_assert!(below >= p / 100.0 * s.len() as f64 - 1e-9);
        }
    }
}

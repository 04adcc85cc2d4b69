//! Latency statistics of a sample set, with the definitions of [`nvpeer_figures::stats`] (median: the
//! middle sample or the mean of the two middle ones; p99: nearest rank), in whole nanoseconds.

use super::document::Latency;
use std::time::Duration;

pub(super) fn summary(v: Vec<u64>) -> Latency {
    let s = nvpeer_figures::stats::summarize_u64(&v);
    // Nanosecond figures stay integers in the documents; an empty set reads as zeros.
    let ns = |f: fn(&nvpeer_figures::stats::Summary) -> f64| {
        s.as_ref().map_or(0, |s| f(s).round() as u64)
    };
    Latency {
        n: v.len() as u64,
        median_ns: ns(|s| s.median),
        p99_ns: ns(|s| s.p99),
        mean_ns: ns(|s| s.mean),
        min_ns: ns(|s| s.min),
        max_ns: ns(|s| s.max),
    }
}

pub(super) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries() {
        let v: Vec<u64> = (1..=100).collect();
        let s = summary(v);
        assert_eq!(s.median_ns, 51); // (50 + 51) / 2, rounded
        assert_eq!(s.p99_ns, 99);
        assert_eq!((s.min_ns, s.max_ns), (1, 100));
        assert_eq!(summary(vec![7]).p99_ns, 7);
        assert_eq!(summary(vec![]).median_ns, 0);
        assert_eq!(summary(vec![u64::MAX, u64::MAX]).n, 2);
    }
}

//! perftest's figures: latency columns (over [`figures::stats`]) and bandwidth runs.

use serde::Serialize;

/// Summary of a set of durations, in microseconds (perftest latency columns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub t_min: f64,
    pub t_max: f64,
    /// Median (perftest's "typical").
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub samples: usize,
}

/// Summarises samples given in microseconds with the definitions of [`figures::stats`] (median
/// as perftest's `t_typical`, nearest-rank percentiles). NaNs are dropped; `None` when nothing
/// is left.
pub fn summarize(samples_us: &[f64]) -> Option<LatencySummary> {
    let s = figures::stats::summarize(samples_us)?;
    Some(LatencySummary {
        t_min: s.min,
        t_max: s.max,
        t_typical: s.median,
        t_avg: s.mean,
        t_stdev: s.stdev,
        p99: s.p99,
        p99_9: s.p99_9,
        samples: s.samples,
    })
}

/// One bandwidth measurement, perftest style.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BwResult {
    pub msg_size: u64,
    pub iterations: u64,
    /// MiB/s over the best completion window.
    pub bw_peak_mib: f64,
    /// MiB/s over the whole run (first post to last completion).
    pub bw_avg_mib: f64,
    /// Million messages per second.
    pub msg_rate_mpps: f64,
}

/// perftest's factor between MiB/s and Gb/s is 8 * 2^20 / 10^9.
pub fn mib_to_gbits(mib_s: f64) -> f64 {
    mib_s * 8.0 * 1_048_576.0 / 1e9
}

/// Builds a bandwidth result from the total elapsed time and the per-window timing of
/// completions (`windows`: (messages completed in the window, window seconds)).
pub fn bandwidth(msg_size: u64, iterations: u64, total_s: f64, windows: &[(u64, f64)]) -> BwResult {
    let mib = |msgs: u64, secs: f64| {
        if secs > 0.0 {
            (msgs as f64 * msg_size as f64) / secs / 1_048_576.0
        } else {
            0.0
        }
    };
    let avg = mib(iterations, total_s);
    let peak = windows
        .iter()
        .filter(|(m, t)| *m > 0 && *t > 0.0)
        .map(|&(m, t)| mib(m, t))
        .fold(avg, f64::max);
    BwResult {
        msg_size,
        iterations,
        bw_peak_mib: peak,
        bw_avg_mib: avg,
        msg_rate_mpps: if total_s > 0.0 {
            iterations as f64 / total_s / 1e6
        } else {
            0.0
        },
    }
}

/// Sizes of a perftest `-a` sweep: 2, 4, ... up to `max` (inclusive if a power of two).
pub fn sweep_sizes(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = 2u64;
    while s <= max {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_fields() {
        let s = summarize(&[4.0, 2.0, f64::NAN, 6.0, 4.0]).unwrap();
        assert_eq!(s.samples, 4);
        assert_eq!(s.t_min, 2.0);
        assert_eq!(s.t_max, 6.0);
        assert_eq!(s.t_typical, 4.0);
        assert_eq!(s.t_avg, 4.0);
        assert!((s.t_stdev - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.p99, 6.0);
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn bandwidth_math() {
        // 1024 messages of 1 MiB in 2 s = 512 MiB/s; one window at 1000 MiB/s.
        let r = bandwidth(1 << 20, 1024, 2.0, &[(100, 0.1), (0, 0.0)]);
        assert!((r.bw_avg_mib - 512.0).abs() < 1e-9);
        assert!((r.bw_peak_mib - 1000.0).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.000512).abs() < 1e-12);
        // Peak never below average.
        let r = bandwidth(4096, 10, 1.0, &[(1, 10.0)]);
        assert!(r.bw_peak_mib >= r.bw_avg_mib);
        // perftest's help text: 1 Gb/s = 119.2 MiB/s.
        assert!((1.0 / mib_to_gbits(1.0) - 119.2).abs() < 0.05);
    }

    #[test]
    fn sweep() {
        assert_eq!(sweep_sizes(u64::MAX).len(), 63);
        assert_eq!(sweep_sizes(1 << 63).last(), Some(&(1 << 63)));
        assert_eq!(sweep_sizes(16), vec![2, 4, 8, 16]);
        assert_eq!(sweep_sizes(20), vec![2, 4, 8, 16]);
        assert_eq!(sweep_sizes(1), Vec::<u64>::new());
        assert_eq!(sweep_sizes(1 << 23).len(), 23);
    }
}

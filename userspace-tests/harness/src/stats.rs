//! perftest's figures: latency columns (over [`nvpeer_figures::stats`]) and bandwidth runs.

use serde::{Deserialize, Serialize};

/// Summary of a set of durations, in microseconds (perftest latency columns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

/// Summarises samples given in microseconds with the definitions of [`nvpeer_figures::stats`] (median
/// as perftest's `t_typical`, nearest-rank percentiles). NaNs are dropped; `None` when nothing
/// is left.
pub fn summarize(samples_us: &[f64]) -> Option<LatencySummary> {
    let s = nvpeer_figures::stats::summarize(samples_us)?;
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    pub msg_size: u64,
    pub iterations: u64,
    /// MiB/s at the shortest time per message over any run of requests (perftest's peak); 0 when
    /// not measured (`-N`, `-D`, more than 20000 iterations), as perftest prints it.
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

/// perftest's peak: the shortest time per message, `(completed[j] - posted[i]) / (j - i + 1)`,
/// over every request `i` and every signalled completion `j >= i` (`posted[i]`: when request `i`
/// was posted; `completed`: (index of the signalled request, when its completion was polled),
/// in order). `None` when no pair exists.
pub fn peak_time_per_msg(posted: &[f64], completed: &[(u64, f64)]) -> Option<f64> {
    let mut best: Option<f64> = None;
    for (i, &tp) in posted.iter().enumerate() {
        let first = completed.partition_point(|&(j, _)| j < i as u64);
        for &(j, tc) in &completed[first..] {
            let t = (tc - tp) / (j - i as u64 + 1) as f64;
            match best {
                Some(b) if b <= t => {}
                _ if t > 0.0 => best = Some(t),
                _ => {}
            }
        }
    }
    best
}

/// Builds a bandwidth result from the time of the measured span and, when the peak is measured,
/// the shortest time per message ([`peak_time_per_msg`]).
pub fn bandwidth(
    msg_size: u64,
    iterations: u64,
    total_s: f64,
    peak_s_per_msg: Option<f64>,
) -> BwResult {
    let mib = |msgs: f64, secs: f64| {
        if secs > 0.0 {
            msgs * msg_size as f64 / secs / 1_048_576.0
        } else {
            0.0
        }
    };
    BwResult {
        msg_size,
        iterations,
        bw_peak_mib: peak_s_per_msg.map_or(0.0, |t| mib(1.0, t)),
        bw_avg_mib: mib(iterations as f64, total_s),
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
        // 1024 messages of 1 MiB in 2 s = 512 MiB/s; a best of 1 ms per message = 1000 MiB/s.
        let r = bandwidth(1 << 20, 1024, 2.0, Some(0.001));
        assert!((r.bw_avg_mib - 512.0).abs() < 1e-9);
        assert!((r.bw_peak_mib - 1000.0).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.000512).abs() < 1e-12);
        // Peak not measured: 0, as perftest prints it.
        assert_eq!(bandwidth(4096, 10, 1.0, None).bw_peak_mib, 0.0);
        // perftest's help text: 1 Gb/s = 119.2 MiB/s.
        assert!((1.0 / mib_to_gbits(1.0) - 119.2).abs() < 0.05);
    }

    #[test]
    fn peak_like_perftest() {
        // Four requests posted at 0, 1, 2, 3 s; signalled completions of #1 at 4 s and #3 at 5 s.
        let posted = [0.0, 1.0, 2.0, 3.0];
        let completed = [(1, 4.0), (3, 5.0)];
        // Candidates: i=0: j=1 -> 4/2, j=3 -> 5/4; i=1: j=1 -> 3, j=3 -> 4/3; i=2: j=3 -> 3/2;
        // i=3: j=3 -> 2. Shortest: 5/4.
        assert_eq!(peak_time_per_msg(&posted, &completed), Some(1.25));
        assert_eq!(peak_time_per_msg(&posted, &[]), None);
        assert_eq!(peak_time_per_msg(&[], &completed), None);
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

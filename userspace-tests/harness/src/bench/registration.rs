//! `reg`: registration, deregistration and reg+dereg latency per size.

use super::doc::{BenchTestDoc, PerftestInfo, RegRow, Row};
use super::{be, Bench, BenchError};
use crate::cli::BenchTest;
use crate::report;
use crate::stats;
use std::time::Instant;

impl Bench {
    /// reg / dereg / reg+dereg latency per size.
    pub(super) fn reg(&mut self) -> Result<BenchTestDoc, BenchError> {
        let sz = if self.args.all {
            matrix(self.args.max_size)
        } else {
            vec![self.args.size_for(BenchTest::Reg)]
        };
        let iters = self.args.iters_for(BenchTest::Reg);
        let max = *sz.iter().max().unwrap_or(&1);
        let buf = self.backend.alloc(max as usize).map_err(be("allocation"))?;
        self.say(&format!(
            "\n Registration latency ({}, {} iterations per size)",
            self.reg.path.label(),
            iters
        ));
        let header = [
            "#bytes",
            "#iterations",
            "reg med[us]",
            "reg p99[us]",
            "dereg med[us]",
            "dereg p99[us]",
            "reg+dereg med",
            "reg+dereg p99",
        ]
        .map(String::from);
        let mut cells = Vec::new();
        let pb = report::progress(
            sz.len() as u64 * iters as u64,
            "reg",
            self.args.no_progress || self.args.common.json,
        );
        let mut rows = Vec::new();
        for s in sz {
            let (mut r, mut d, mut rd) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..iters {
                let t0 = Instant::now();
                let mr = self
                    .reg
                    .register(buf.as_ref(), 0, s as usize)
                    .map_err(|e| BenchError(format!("{s} bytes: {}", e.msg)))?;
                let t1 = Instant::now();
                drop(mr);
                let t2 = Instant::now();
                r.push((t1 - t0).as_secs_f64() * 1e6);
                d.push((t2 - t1).as_secs_f64() * 1e6);
                rd.push((t2 - t0).as_secs_f64() * 1e6);
                pb.inc(1);
            }
            let (r, d, rd) = (
                stats::summarize(&r),
                stats::summarize(&d),
                stats::summarize(&rd),
            );
            if let (Some(r), Some(d), Some(rd)) = (r, d, rd) {
                let mut row = vec![s.to_string(), iters.to_string()];
                let figures = [r.t_typical, r.p99, d.t_typical, d.p99, rd.t_typical, rd.p99];
                row.extend(figures.map(|v| format!("{v:.2}")));
                cells.push(row);
                rows.push(Row::Registration(RegRow {
                    msg_size: s,
                    n_iterations: u64::from(iters),
                    reg: r,
                    dereg: d,
                    reg_dereg: rd,
                }));
            }
        }
        pb.finish_and_clear();
        self.say(&report::table(&header, &cells));
        let info = PerftestInfo {
            registration_path: Some(self.reg.path.label().into()),
            ..self.info("Registration_Latency_Test", None, None, None, None)
        };
        Ok(BenchTestDoc::ran(BenchTest::Reg.name(), info, rows))
    }
}

/// Registration sweep sizes: 4 KiB .. max in powers of four, plus max.
fn matrix(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = 4096u64;
    while s < max {
        v.push(s);
        match s.checked_mul(4) {
            Some(n) => s = n,
            None => break,
        }
    }
    v.push(max);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reg_matrix_sizes() {
        assert_eq!(matrix(4096), vec![4096]);
        assert_eq!(matrix(1 << 20), vec![4096, 16384, 65536, 262144, 1 << 20]);
        assert_eq!(matrix(100), vec![100]);
    }

    proptest::proptest! {
        /// Every maximum, up to 2^64 - 1, gives a finite, increasing sweep ending at it.
        #[test]
        fn reg_matrix_never_overflows(max in 1u64..=u64::MAX) {
            let m = matrix(max);
            proptest::prop_assert_eq!(m.last(), Some(&max));
            proptest::prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
            proptest::prop_assert!(m.len() <= 33);
        }
    }
}

//! Invalidation latency: a free ("cudaFree") under a live MR.

use super::cli::MeasureArgs;
use super::document::InvalRow;
use super::path::Path;
use super::stats::{ns, summary};
use crate::error::Result;
use crate::nvp2p::Gpu;
use std::collections::BTreeMap;
use std::time::Instant;

/// Free ("cudaFree") of a fresh allocation with one live MR on it, then deregistration; and the
/// same free without an MR, for reference.
pub(super) fn invalidation(m: &MeasureArgs, path: &Path, gpu: &Gpu, size: u64) -> Result<InvalRow> {
    let (mut with, mut without, mut dereg_after) = (Vec::new(), Vec::new(), Vec::new());
    let (mut callbacks, mut states) = (0u64, BTreeMap::<String, u32>::new());
    let iters = if size >= 64 << 20 {
        m.inval_iters.min(3)
    } else {
        m.inval_iters
    };
    for _ in 0..iters {
        let a = gpu.alloc(size, 0)?;
        let t = Instant::now();
        gpu.free(a.va)?;
        without.push(ns(t.elapsed()));

        let a = gpu.alloc(size, 0)?;
        let h = path.reg(a.va, size)?;
        let t = Instant::now();
        callbacks += u64::from(gpu.free(a.va)?);
        with.push(ns(t.elapsed()));
        *states.entry(path.state_after_free(h)).or_default() += 1;
        let t = Instant::now();
        path.dereg(h)?;
        dereg_after.push(ns(t.elapsed()));
    }
    Ok(InvalRow {
        size,
        free_with_live_mr: summary(with),
        free_without_mr: summary(without),
        dereg_after_free: summary(dereg_after),
        callbacks_per_free: callbacks as f64 / f64::from(iters.max(1)),
        mr_state_after_free: states,
        ratios: None,
    })
}

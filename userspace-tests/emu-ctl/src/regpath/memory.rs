//! The memory pass (slab memory per live MR) and the live-MR scale test.

use super::cli::MeasureArgs;
use super::document::SlabFigures;
use super::path::Path;
use super::slab::{meminfo_kb, settle, SlabSnap};
use crate::error::Result;
use crate::nvp2p::Gpu;
use std::time::Instant;

/// Slab growth over `n` live 64 KiB registrations of one range.
pub(super) fn memory(path: &Path, gpu: &Gpu, n: u32, settle_s: u64) -> Result<SlabFigures> {
    settle(settle_s);
    let a = gpu.alloc(65536, 0)?;
    // One warm-up cycle so that first-use allocations (caches, xarray nodes) are not counted.
    let h = path.reg(a.va, 65536)?;
    path.dereg(h)?;
    let before = SlabSnap::take();
    let mut hs = Vec::with_capacity(n as usize);
    let mut err = None;
    for _ in 0..n {
        match path.reg(a.va, 65536) {
            Ok(h) => hs.push(h),
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
    }
    let after = SlabSnap::take();
    let held = hs.len() as u64;
    for h in hs {
        path.dereg(h)?;
    }
    gpu.free(a.va)?;
    Ok(SlabFigures {
        mrs: Some(held),
        error: Some(err),
        ..before.per_mr(&after, held)
    })
}

/// As many live 64 KiB MRs as the guest allows (up to `target`), then all freed.
pub(super) fn scale(m: &MeasureArgs, path: &Path, gpu: &Gpu) -> Result<SlabFigures> {
    settle(m.settle_s);
    let a = gpu.alloc(65536, 0)?;
    let before = SlabSnap::take();
    let avail0 = meminfo_kb("MemAvailable");
    let mut hs = Vec::with_capacity(m.scale as usize);
    let mut stopped = String::from("target reached");
    let t = Instant::now();
    for i in 0..m.scale {
        if m.scale_budget_s > 0 && t.elapsed().as_secs() >= m.scale_budget_s {
            stopped = format!("time budget of {} s", m.scale_budget_s);
            break;
        }
        if i % 1024 == 0 && meminfo_kb("MemAvailable") < m.scale_min_avail_mb * 1024 {
            stopped = format!("MemAvailable below {} MiB", m.scale_min_avail_mb);
            break;
        }
        match path.reg(a.va, 65536) {
            Ok(h) => hs.push(h),
            Err(e) => {
                stopped = format!("registration {} failed: {e}", i + 1);
                break;
            }
        }
    }
    let reg_s = t.elapsed().as_secs_f64();
    let after = SlabSnap::take();
    let avail1 = meminfo_kb("MemAvailable");
    let reached = hs.len() as u64;
    let t = Instant::now();
    for h in hs {
        path.dereg(h)?;
    }
    let dereg_s = t.elapsed().as_secs_f64();
    gpu.free(a.va)?;
    let end = SlabSnap::take();
    let per_mr = reached.max(1) as f64;
    Ok(SlabFigures {
        target: Some(m.scale),
        reached: Some(reached),
        stopped_by: Some(stopped),
        reg_us_per_mr: Some(reg_s * 1e6 / per_mr),
        dereg_us_per_mr: Some(dereg_s * 1e6 / per_mr),
        memavailable_drop_bytes_per_mr: Some((avail0 as f64 - avail1 as f64) * 1024.0 / per_mr),
        slab_kb_left_after_free: Some(end.slab_kb as i64 - before.slab_kb as i64),
        ..before.per_mr(&after, reached)
    })
}

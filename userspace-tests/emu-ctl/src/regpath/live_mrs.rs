//! Registration cost against live MRs (issue 38, item 2): the 64 KiB, 1-thread cell measured again
//! with L other 64 KiB MRs live on the same path (registration caches hold thousands, many in one
//! GPU allocation), for each L of `--live-mrs`, with the cost model as the cells have it. Each
//! row is a cell like the others (latencies, time split, provider calls; interleaved with the
//! adjacent floor for core paths), with `live_mrs` added.

use super::cell::{measure_cell, Cell};
use super::cli::MeasureArgs;
use super::document::{CellDoc, LiveMrRow, NotReached};
use super::path::{Handle, Path};
use super::slab::meminfo_kb;
use crate::error::Result;
use crate::nvp2p::{Gpu, GPU_PAGE_SIZE};

/// Raises the live registrations on `va` to `n`; false (with fewer held) when `MemAvailable`
/// fell below `--scale-min-avail-mb` first, as the scale test stops.
fn hold(m: &MeasureArgs, path: &Path, va: u64, live: &mut Vec<Handle>, n: u32) -> Result<bool> {
    while live.len() < n as usize {
        if live.len().is_multiple_of(1024)
            && meminfo_kb("MemAvailable") < m.scale_min_avail_mb * 1024
        {
            return Ok(false);
        }
        live.push(path.reg(va, GPU_PAGE_SIZE)?);
    }
    Ok(true)
}

/// The series `--live-mrs` asks for, in increasing L.
pub(super) fn live_mrs(
    m: &MeasureArgs,
    path: &Path,
    floor: Option<&Path>,
    gpu: &Gpu,
) -> Result<Vec<LiveMrRow>> {
    let mut targets = m.live_mrs.clone();
    targets.sort_unstable();
    targets.dedup();
    let held = gpu.alloc(GPU_PAGE_SIZE, 0)?;
    let measured = match gpu.alloc(GPU_PAGE_SIZE, 0) {
        Ok(a) => a,
        Err(e) => {
            let _ = gpu.free(held.va);
            return Err(e);
        }
    };
    let mut live = Vec::new();
    let mut rows = Vec::new();
    let mut run = || -> Result<()> {
        for &n in &targets {
            if !hold(m, path, held.va, &mut live, n)? {
                eprintln!(
                    "regpath: {}: {n} live MRs not reached ({} held): MemAvailable below {} MiB",
                    m.path,
                    live.len(),
                    m.scale_min_avail_mb
                );
                rows.push(LiveMrRow::NotReached(NotReached {
                    live_mrs: n,
                    not_reached: live.len() as u64,
                    stopped_by: format!("MemAvailable below {} MiB", m.scale_min_avail_mb),
                }));
                break;
            }
            let cell = Cell {
                va: measured.va,
                size: GPU_PAGE_SIZE,
                threads: 1,
            };
            let (c, adjacent) = measure_cell(m, path, floor, gpu, cell)?;
            eprintln!(
                "regpath: {} with {n} live MRs: reg median {} us",
                m.path,
                c.reg.median_ns / 1000
            );
            rows.push(LiveMrRow::Measured(Box::new(CellDoc {
                live_mrs: Some(n),
                adjacent_floor: adjacent.map(Box::new),
                ..c
            })));
        }
        Ok(())
    };
    let r = run();
    let mut end = Ok(());
    for h in live {
        end = end.and(path.dereg(h));
    }
    for va in [measured.va, held.va] {
        end = end.and(gpu.free(va).map(|_| ()));
    }
    r.and(end).map(|()| rows)
}

//! One cell of the benchmark: a path at one registration size and thread count, timed cycle by
//! cycle, with where the time went.

use super::cli::MeasureArgs;
use super::document::{CellDoc, ProviderCalls, TimeSplit};
use super::path::Path;
use super::stats::{ns, summary};
use crate::error::{EmuError, Result};
use crate::nvp2p::{abi, Gpu, OPS};
use std::time::{Duration, Instant};

/// Provider calls per registration, from the counters' growth over `regs` registrations (the
/// first six of [`OPS`]: get, put, persistent get and put, DMA map and unmap).
fn calls_per_reg(grown: &abi::Stats, regs: u64) -> ProviderCalls {
    let per = |op: &str| {
        OPS.iter()
            .position(|o| *o == op)
            .map_or(0.0, |i| grown.calls[i] as f64 / regs.max(1) as f64)
    };
    ProviderCalls {
        get_pages: per("get_pages"),
        get_pages_persistent: per("get_pages_persistent"),
        put_pages: per("put_pages"),
        put_pages_persistent: per("put_pages_persistent"),
        dma_map_pages: per("dma_map_pages"),
        dma_unmap_pages: per("dma_unmap_pages"),
        total: grown.calls[..6].iter().sum::<u64>() as f64 / regs.max(1) as f64,
        failures: grown.failures[..6].iter().sum::<u64>(),
    }
}

/// Cycles for one cell: `ops` at 64 KiB, scaled down with the square root of the size ratio.
pub(super) fn cell_ops(m: &MeasureArgs, size: u64) -> u32 {
    let ratio = (size as f64 / 65536.0).max(1.0).sqrt();
    ((m.ops as f64 / ratio).round() as u32).max(m.min_ops)
}

/// Where a cell's cycles run: the registered range (`size` bytes of emulated GPU memory at
/// `va`) and how many threads register it at once.
#[derive(Clone, Copy)]
pub(super) struct Cell {
    pub(super) va: u64,
    pub(super) size: u64,
    pub(super) threads: u32,
}

/// What some cycles of one path measured: latencies, and the counters' growth over them.
#[derive(Default)]
struct Samples {
    reg: Vec<u64>,
    dereg: Vec<u64>,
    wall: Duration,
    /// Provider counters' growth (calls, failures, api/model/delay ns), as a `Stats` whose every
    /// field is a difference.
    grown: abi::Stats,
    /// Growth of the core's time inside client callbacks (core paths).
    client_ns: Option<u64>,
}

/// Adds the growth of the provider counters from `before` to `after` to `acc`.
fn grow(acc: &mut abi::Stats, before: &abi::Stats, after: &abi::Stats) {
    for i in 0..acc.calls.len() {
        acc.calls[i] += after.calls[i].saturating_sub(before.calls[i]);
        acc.failures[i] += after.failures[i].saturating_sub(before.failures[i]);
    }
    acc.api_ns += after.api_ns.saturating_sub(before.api_ns);
    acc.model_ns += after.model_ns.saturating_sub(before.model_ns);
    acc.delay_ns += after.delay_ns.saturating_sub(before.delay_ns);
}

/// Runs `ops` cycles of `path` in `cell` (at most `budget`), spread over the cell's threads, and
/// adds what they measured to `acc`.
fn samples(
    acc: &mut Samples,
    path: &Path,
    gpu: &Gpu,
    cell: Cell,
    ops: u32,
    budget: Duration,
) -> Result<()> {
    let Cell { va, size, threads } = cell;
    let per_thread = ops.max(threads).div_ceil(threads);
    let before = gpu.stats()?;
    let client_before = path.client_ns()?;
    let start = Instant::now();
    let results: Vec<Result<(Vec<u64>, Vec<u64>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || -> Result<(Vec<u64>, Vec<u64>)> {
                    let (mut reg, mut dereg) = (Vec::new(), Vec::new());
                    for i in 0..per_thread {
                        if i > 0 && start.elapsed() > budget {
                            break;
                        }
                        let t0 = Instant::now();
                        let h = path.reg(va, size)?;
                        let t1 = Instant::now();
                        path.dereg(h)?;
                        reg.push(ns(t1 - t0));
                        dereg.push(ns(t1.elapsed()));
                    }
                    Ok((reg, dereg))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(EmuError::Invalid("thread panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed();
    let after = gpu.stats()?;
    let client_after = path.client_ns()?;
    for r in results {
        let (a, b) = r?;
        acc.reg.extend(a);
        acc.dereg.extend(b);
    }
    acc.wall += wall;
    if let Some(grown) = client_before
        .zip(client_after)
        .map(|(b, a)| a.saturating_sub(b))
    {
        *acc.client_ns.get_or_insert(0) += grown;
    }
    grow(&mut acc.grown, &before, &after);
    Ok(())
}

/// One cell: `path` at the cell's size and threads. With `floor` (a core path's adjacent floor),
/// the cell's cycles are split into `rounds` rounds that alternate floor, client, floor,
/// client..., so that drift (the shared host's load, the IOMMU's IOVA caches, the slab state)
/// lands on both alike; returns the client's cell and the floor's.
pub(super) fn measure_cell(
    m: &MeasureArgs,
    path: &Path,
    floor: Option<&Path>,
    gpu: &Gpu,
    cell: Cell,
) -> Result<(CellDoc, Option<CellDoc>)> {
    let Cell { size, threads, .. } = cell;
    let ops = cell_ops(m, size).max(threads);
    let budget = Duration::from_secs(m.cell_budget_s);
    let Some(f) = floor else {
        let mut client = Samples::default();
        samples(&mut client, path, gpu, cell, ops, budget)?;
        return Ok((cell_value(size, threads, client), None));
    };
    let rounds = m.rounds.clamp(1, ops.div_ceil(threads));
    let (per_round, round_budget) = (ops.div_ceil(rounds), budget / rounds);
    let (mut floor_samples, mut client) = (Samples::default(), Samples::default());
    for _ in 0..rounds {
        samples(&mut floor_samples, f, gpu, cell, per_round, round_budget)?;
        samples(&mut client, path, gpu, cell, per_round, round_budget)?;
    }
    let floor_value = CellDoc {
        rounds: Some(rounds),
        ..cell_value(size, threads, floor_samples)
    };
    let client_value = CellDoc {
        rounds: Some(rounds),
        ..cell_value(size, threads, client)
    };
    Ok((client_value, Some(floor_value)))
}

fn cell_value(size: u64, threads: u32, s: Samples) -> CellDoc {
    let Samples {
        reg,
        dereg,
        wall,
        grown,
        client_ns,
    } = s;
    let cycles: Vec<u64> = reg.iter().zip(&dereg).map(|(a, b)| a + b).collect();
    let n = reg.len() as u64;
    // Of the provider's time, what the cost model asked for and how far its waits overshot it.
    let per = n.max(1) as f64;
    let split = TimeSplit {
        provider_model: Some(grown.model_ns as f64 / per),
        model_overshoot: Some((grown.delay_ns as f64 - grown.model_ns as f64) / per),
        ..time_split(&cycles, grown.api_ns, client_ns)
    };
    CellDoc {
        size,
        threads,
        cycles: n,
        wall_s: wall.as_secs_f64(),
        regs_per_s: n as f64 / wall.as_secs_f64().max(1e-9),
        reg: summary(reg),
        dereg: summary(dereg),
        cycle: summary(cycles),
        provider_calls_per_reg: calls_per_reg(&grown, n),
        time_split_ns_per_cycle: Some(split),
        rounds: None,
        adjacent_floor: None,
        live_mrs: None,
        ratios: None,
    }
}

/// Where a cell's mean registration + deregistration time went, per cycle: inside the provider's
/// entry points (`provider`: modelled RM cost, real IOMMU work, waits for the RM lock); inside
/// the client's callbacks but not the provider (`client_own`, core paths); and the rest
/// (`rest`: the core's own work and the syscalls for core paths, the syscalls and rawfloor's
/// bookkeeping for the floor). With several threads, lock waits count where they happen.
/// The cell adds `provider_model` and `model_overshoot`: the part of `provider` that the cost
/// model asked for, and how much longer than that its waits took.
pub(super) fn time_split(cycles: &[u64], provider_ns: u64, client_ns: Option<u64>) -> TimeSplit {
    let n = cycles.len().max(1) as f64;
    let mean = cycles.iter().sum::<u64>() as f64 / n;
    let provider = provider_ns as f64 / n;
    // Core paths: the client's callbacks include the provider's calls.
    let client = client_ns.map(|c| c as f64 / n);
    TimeSplit {
        mean,
        provider,
        client_own: client.map(|c| c - provider),
        rest: mean - client.unwrap_or(provider),
        provider_model: None,
        model_overshoot: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_split_parts_add_up() {
        let t = time_split(&[100, 300], 200, Some(300));
        assert_eq!(
            (t.mean, t.provider, t.client_own, t.rest),
            (200.0, 100.0, Some(50.0), 50.0)
        );
        let floor = time_split(&[100], 50, None);
        assert_eq!((floor.client_own, floor.rest), (None, 50.0));
    }

    #[test]
    fn provider_calls_are_the_first_six_ops() {
        // The document's field names are the provider's op names the counters are indexed by.
        let v = serde_json::to_value(ProviderCalls::default()).unwrap_or_default();
        for op in &OPS[..6] {
            assert!(v.get(op).is_some(), "{op}");
        }
    }
}

//! `nvpeer emu regpath measure`: one path's cells, invalidation, memory and scale figures.

use super::cell::{cell_ops, measure_cell, Cell};
use super::cli::MeasureArgs;
use super::document::{ClientDoc, CostModelDoc, PathDoc, Skipped, SlabFigures};
use super::floor::{floor_breakdown, Floor};
use super::inval_scale::inval_scale;
use super::invalidation::invalidation;
use super::json_file::read_json;
use super::live_mrs::live_mrs;
use super::memory::{memory, scale};
use super::path::{open_path, Path};
use crate::cost_model::CostModel;
use crate::error::{EmuError, Result};
use crate::nvp2p::{abi, Gpu};

pub(super) fn measure(m: &MeasureArgs) -> Result<PathDoc> {
    let gpu = Gpu::open()?;
    let path = open_path(m)?;
    // Fresh counters, no faults, load-time configuration.
    gpu.reset()?;
    if let Path::Core(c) = &path {
        c.reset()?;
    }
    let orig = gpu.config()?;
    let base = CostModel::preset(&m.cost_model)?;
    let model = base.dilated(m.dilate)?;
    gpu.set_config(model.apply(abi::Config {
        bar1_budget: 0,
        ..orig
    }))?;
    let res = measure_all(m, &path, &gpu);
    gpu.set_config(orig)?;
    let mut doc = res?;
    let st = gpu.stats()?;
    if st.live_pins != 0 || st.live_mappings != 0 {
        return Err(EmuError::Check(format!(
            "{}: {} pins and {} DMA mappings left at the provider after every MR was deregistered",
            m.path, st.live_pins, st.live_mappings
        )));
    }
    doc.cost_model = Some(CostModelDoc {
        preset: Some(m.cost_model.clone()),
        preset_ns: Some(base),
        dilate: Some(m.dilate),
        dilate_source: Some(m.dilate_source.clone()),
        applied_ns: Some(model),
    });
    Ok(doc)
}

fn measure_all(m: &MeasureArgs, path: &Path, gpu: &Gpu) -> Result<PathDoc> {
    let adj = match path {
        Path::Core(_) if m.adjacent_floor => Some(Path::Floor(Floor::open(m.persistent)?)),
        _ => None,
    };
    let clients = match path {
        Path::Core(c) => c
            .clients()?
            .into_iter()
            .map(|c| ClientDoc {
                name: c.name,
                version: c.version,
                invalidating: c.invalidating,
                unmaps: c.unmaps,
            })
            .collect(),
        Path::Floor(_) => Vec::new(),
    };
    let (mut cells, mut skipped, mut breakdown, mut inval) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // A size or cell that fails (e.g. no memory for the allocation, IOVA space exhausted) is
    // reported under "skipped" with its error; the other sizes still run.
    let fail = |size: u64, t: Option<u32>, what: &str, e: EmuError| {
        eprintln!(
            "regpath: {} size {size} threads {t:?}: {what} failed: {e}",
            m.path
        );
        Skipped {
            size,
            threads: t,
            why: format!("{what}: {e}"),
        }
    };
    let sizes: &[u64] = if m.mem_only { &[] } else { &m.sizes };
    for &size in sizes {
        let a = match gpu.alloc(size, 0) {
            Ok(a) => a,
            Err(e) => {
                skipped.push(fail(size, None, "allocation", e));
                continue;
            }
        };
        for &t in &m.threads {
            if size.saturating_mul(u64::from(t)) > m.max_mapped {
                skipped.push(Skipped {
                    size,
                    threads: Some(t),
                    why: format!("size x threads above --max-mapped {} bytes", m.max_mapped),
                });
                continue;
            }
            let cell = Cell {
                va: a.va,
                size,
                threads: t,
            };
            match measure_cell(m, path, adj.as_ref(), gpu, cell) {
                Ok((mut c, adjacent)) => {
                    c.adjacent_floor = adjacent.map(Box::new);
                    eprintln!(
                        "regpath: {} size {} threads {}: {} cycles, reg median {} us",
                        m.path,
                        size,
                        t,
                        c.cycles,
                        c.reg.median_ns / 1000
                    );
                    cells.push(c);
                }
                Err(e) => skipped.push(fail(size, Some(t), "cell", e)),
            }
        }
        if let Path::Floor(f) = path {
            match floor_breakdown(f, a.va, size, cell_ops(m, size).min(20)) {
                Ok(b) => breakdown.push(b),
                Err(e) => skipped.push(fail(size, Some(1), "floor breakdown", e)),
            }
        }
        gpu.free(a.va)?;
        if m.inval_iters > 0 {
            match invalidation(m, path, gpu, size) {
                Ok(r) => inval.push(r),
                Err(e) => skipped.push(fail(size, Some(1), "invalidation", e)),
            }
        }
    }
    let mem = if let Some(f) = &m.memory_from {
        let earlier: PathDoc = read_json(f)?;
        if earlier.path != m.path {
            return Err(EmuError::Invalid(format!(
                "{} holds the memory of path {:?}, not {}",
                f.display(),
                earlier.path,
                m.path
            )));
        }
        let Some(memory) = earlier.memory else {
            return Err(EmuError::Invalid(format!(
                "{} holds no memory figures of path {}",
                f.display(),
                m.path
            )));
        };
        Some(SlabFigures {
            measured: Some("first, in a pass of its own before any cell of any path".into()),
            ..memory
        })
    } else if m.mem_mrs > 0 {
        Some(memory(path, gpu, m.mem_mrs, m.settle_s)?)
    } else {
        None
    };
    // Registration cost against live MRs, with the cost model as the cells had it.
    let live = if m.mem_only || m.live_mrs.is_empty() {
        Vec::new()
    } else {
        match live_mrs(m, path, adj.as_ref(), gpu) {
            Ok(rows) => rows,
            Err(e) => {
                skipped.push(fail(65536, Some(1), "live-MR series", e));
                Vec::new()
            }
        }
    };
    // Invalidation at scale, with the path's cost model as the cells had it.
    let inval_at_scale = if m.mem_only || (m.inval_mrs.is_empty() && m.inval_concurrent == 0) {
        None
    } else {
        match inval_scale(m, path, gpu) {
            Ok(s) => Some(s),
            Err(e) => {
                skipped.push(fail(0, None, "invalidation at scale", e));
                None
            }
        }
    };
    let sc = if m.scale > 0 && !m.mem_only {
        // The scale test measures the software cost per MR: the RM cost model is switched off.
        let cfg = gpu.config()?;
        gpu.set_config(CostModel::default().apply(cfg))?;
        let r = scale(m, path, gpu);
        gpu.set_config(cfg)?;
        Some(r?)
    } else {
        None
    };
    Ok(PathDoc {
        path: m.path.clone(),
        via: m.via,
        persistent_api: m.persistent,
        floor_ref: m.floor_ref.clone(),
        classic_ref: m.classic_ref.clone(),
        clients,
        cells,
        skipped,
        floor_breakdown: breakdown,
        invalidation: inval,
        inval_scale: Some(inval_at_scale),
        live_mrs: Some(live),
        memory: mem,
        scale: sc,
        cost_model: None,
    })
}

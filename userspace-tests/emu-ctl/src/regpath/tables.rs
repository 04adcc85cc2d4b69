//! Markdown tables of a merged document.

use super::document::{
    CellDoc, CellRatios, InvalScale, LiveMrRow, PathDoc, Report, SlabFigures, Via,
};
use serde_json::Value;

pub(super) fn us(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}", x / 1000.0))
        .unwrap_or_else(|| "-".into())
}

/// A ratio; "-" without one (a figure that is not finite was written as null, so it reads as
/// none).
pub(super) fn x(v: Option<f64>) -> String {
    v.filter(|r| r.is_finite())
        .map(|r| format!("{r:.2}x"))
        .unwrap_or_else(|| "-".into())
}

fn size_name(s: u64) -> String {
    match s {
        s if s >= 1 << 30 && s % (1 << 30) == 0 => format!("{}G", s >> 30),
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s => format!("{}K", s >> 10),
    }
}

/// One table row's cells: `f` of each path's cell of `size` and `threads` ("-" where none),
/// joined with " | ".
fn cells_row(paths: &[PathDoc], size: u64, threads: u32, f: impl Fn(&CellDoc) -> String) -> String {
    paths
        .iter()
        .map(|p| p.cell(size, threads).map_or("-".into(), &f))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A ratio `report` added to a cell.
fn cell_ratio(c: &CellDoc, r: fn(&CellRatios) -> Option<f64>) -> String {
    x(c.ratios.as_ref().and_then(r))
}

/// Markdown tables of a merged document, one per figure: the cells' latencies, the classic
/// client's ratio, where the time went, the ratio taken apart, throughput by threads, provider
/// calls, the free under a live MR, the live-MR and invalidation-at-scale series, memory.
pub(super) fn tables(doc: &Report) -> String {
    let paths = &doc.paths;
    let sizes = cell_values(paths, |c| c.size);
    let threads = cell_values(paths, |c| c.threads);
    let mut out = String::new();
    cost_model_line(&mut out, paths);
    latency_tables(&mut out, paths, &sizes);
    vs_classic_table(&mut out, paths, &sizes);
    where_table(&mut out, paths, &sizes);
    split_table(&mut out, paths, &sizes);
    throughput_table(&mut out, paths, &sizes, &threads);
    provider_calls_table(&mut out, paths, &sizes);
    invalidation_table(&mut out, paths, &sizes);
    live_mrs_table(&mut out, paths);
    inval_scale_table(&mut out, paths);
    memory_tables(&mut out, paths);
    out
}

/// The distinct values of the cells' `key` (size, threads) over every path, ascending.
fn cell_values<T: Ord>(paths: &[PathDoc], key: fn(&CellDoc) -> T) -> Vec<T> {
    let mut v: Vec<T> = paths.iter().flat_map(|p| p.cells.iter().map(key)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The cost model the first path was measured with.
fn cost_model_line(out: &mut String, paths: &[PathDoc]) {
    let Some(cm) = paths.first().and_then(|p| p.cost_model.as_ref()) else {
        return;
    };
    out.push_str(&format!(
        "cost model: {} x {:.1} ({}); applied ns: {}\n",
        cm.preset.as_deref().unwrap_or("?"),
        cm.dilate.unwrap_or(1.0),
        cm.dilate_source
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("no dilation"),
        serde_json::to_value(cm.applied_ns).unwrap_or(Value::Null)
    ));
}

/// Latency per size, 1 thread, with the ratio to the floor.
fn latency_tables(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    type Metric = (
        &'static str,
        fn(&CellDoc) -> u64,
        fn(&CellRatios) -> Option<f64>,
    );
    let metrics: [Metric; 5] = [
        (
            "registration, median µs",
            |c| c.reg.median_ns,
            |r| r.reg_median,
        ),
        ("registration, p99 µs", |c| c.reg.p99_ns, |r| r.reg_p99),
        (
            "deregistration, median µs",
            |c| c.dereg.median_ns,
            |r| r.dereg_median,
        ),
        (
            "deregistration, p99 µs",
            |c| c.dereg.p99_ns,
            |r| r.dereg_p99,
        ),
        (
            "registration + deregistration, median µs",
            |c| c.cycle.median_ns,
            |r| r.cycle_median,
        ),
    ];
    for (title, ns, rk) in metrics {
        out.push_str(&format!("\n### {title} (1 thread; ratio to the floor)\n\n"));
        path_header(out, paths, "size");
        for &s in sizes {
            let row = cells_row(paths, s, 1, |c| {
                format!("{} ({})", us(Some(ns(c) as f64)), cell_ratio(c, rk))
            });
            out.push_str(&format!("| {} | {row} |\n", size_name(s)));
        }
    }
}

/// The ratio to the classic C client and the bounds a one-pin client can reach.
fn vs_classic_table(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    let names: Vec<&str> = paths.iter().map(|p| p.path.as_str()).collect();
    // The cost model the first path was measured with, as applied (dilation included).
    let model = paths
        .first()
        .and_then(|p| p.cost_model.as_ref())
        .and_then(|c| c.applied_ns);
    if !paths.iter().any(|p| p.path.starts_with("classic")) {
        return;
    }
    out.push_str(
        "\n### registration + deregistration, median, ratio to the classic C client (1 thread)\n\n",
    );
    out.push_str(
        "(model bound: 1 pin against 2 with every cost but the modelled provider's at zero; \
floor bound: the floor path's median cycle against the same plus the classic pattern's modelled \
extra pin and unpin, i.e. with the provider's real work, the IOMMU mapping above all, counted once \
for both: about the best ratio a one-pin client can reach on this bench)\n\n",
    );
    out.push_str(&format!(
        "| size | {} | model bound | floor bound |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len() + 2)
    ));
    let floor = paths.iter().find(|p| p.path == "floor");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| {
            cell_ratio(c, |r| r.cycle_median_vs_classic)
        });
        let pages = (s >> 16).max(1);
        let bound = x(model.map(|m| m.cycle_ns(pages, 1) / m.cycle_ns(pages, 2)));
        let floor_cycle = floor
            .and_then(|f| f.cell(s, 1))
            .map(|c| c.cycle.median_ns as f64);
        let fb = x(model
            .zip(floor_cycle)
            .map(|(m, f)| f / (f + m.cycle_ns(pages, 2) - m.cycle_ns(pages, 1))));
        out.push_str(&format!("| {} | {row} | {bound} | {fb} |\n", size_name(s)));
    }
}

/// Where a cycle's mean time went, per path.
fn where_table(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    out.push_str("\n### where a registration + deregistration went, mean µs (1 thread): provider (of which the cost model) / client's own / rest (core + syscalls; floor: syscalls + rawfloor)\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| {
            let t = c.time_split_ns_per_cycle.as_ref();
            format!(
                "{} ({}) / {} / {}",
                us(t.map(|t| t.provider)),
                us(t.and_then(|t| t.provider_model)),
                us(t.and_then(|t| t.client_own)),
                us(t.map(|t| t.rest))
            )
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
}

/// The core paths' mean ratio to the floor, taken apart.
fn split_table(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    let core: Vec<&PathDoc> = paths.iter().filter(|p| p.via == Via::Core).collect();
    if core.is_empty() {
        return;
    }
    out.push_str("\n### registration + deregistration, mean, ratio to the floor taken apart (1 thread): ratio = 1 + provider beyond the floor + core beyond the floor + client's own (1 + provider + core: what a client costing nothing would score through this core)\n\n");
    let names: Vec<&str> = core.iter().map(|p| p.path.as_str()).collect();
    out.push_str(&format!(
        "| size | {} |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    ));
    for &s in sizes {
        let row: Vec<String> = core
            .iter()
            .map(|p| {
                p.cell(s, 1)
                    .and_then(|c| c.ratios.as_ref())
                    .and_then(|r| r.cycle_mean_split)
                    .map_or("-".into(), |v| {
                        format!(
                            "{:.3} = 1 {:+.3} {:+.3} {:+.3}",
                            v.ratio, v.provider, v.core, v.client
                        )
                    })
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
    }
}

/// Cycles per second by size and threads.
fn throughput_table(out: &mut String, paths: &[PathDoc], sizes: &[u64], threads: &[u32]) {
    out.push_str("\n### cycles (reg + dereg) per second by threads (ratio to the floor at the same threads)\n\n");
    path_header(out, paths, "size / threads");
    for &s in sizes {
        for &t in threads {
            let row = cells_row(paths, s, t, |c| {
                format!("{:.1} ({})", c.regs_per_s, cell_ratio(c, |r| r.regs_per_s))
            });
            out.push_str(&format!("| {} / {t} | {row} |\n", size_name(s)));
        }
    }
}

/// Provider calls per registration.
fn provider_calls_table(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    out.push_str("\n### provider calls per registration (get_pages + get_pages_persistent; all calls per reg+dereg)\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| {
            let pc = &c.provider_calls_per_reg;
            format!("{:.2} get; {:.2} all", pc.pins(), pc.total)
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
}

/// The free of an allocation under one live MR, per size.
fn invalidation_table(out: &mut String, paths: &[PathDoc], sizes: &[u64]) {
    out.push_str("\n### free (cudaFree) under one live MR, median µs (ratio to the floor); callbacks per free; MR state after\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row: Vec<String> = paths
            .iter()
            .map(|p| {
                p.invalidation_of(s).map_or("-".into(), |r| {
                    let st: Vec<&str> = r.mr_state_after_free.keys().map(String::as_str).collect();
                    format!(
                        "{} ({}); cb {}; {}",
                        us(Some(r.free_with_live_mr.median_ns as f64)),
                        x(r.ratios.as_ref().and_then(|r| r.free_with_live_mr_median)),
                        r.callbacks_per_free,
                        st.join(",")
                    )
                })
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
    }
}

/// A figure of the memory tables as a section holds it: `None` without the key (a row that no
/// path has is left out), `Some(None)` null ("-").
type Figure = Option<Option<String>>;

/// A row of the memory tables: its label and its figure of a section.
type FigureRow = (&'static str, fn(&SlabFigures) -> Figure);

/// Bytes, µs or MRs, to the unit.
fn whole(v: f64) -> Option<String> {
    Some(format!("{v:.0}"))
}

/// A figure `report` added against the floor, or that a writer left null when unknown.
fn nullable(v: Option<Option<f64>>) -> Figure {
    v.map(|v| v.and_then(whole))
}

/// Kernel memory per live MR (`memory`) and the live-MR scale test (`scale`).
fn memory_tables(out: &mut String, paths: &[PathDoc]) {
    type Section = fn(&PathDoc) -> Option<&SlabFigures>;
    let sections: [(Section, &str); 2] = [
        (
            |p| p.memory.as_ref(),
            "kernel slab memory per live 64 KiB MR",
        ),
        (
            |p| p.scale.as_ref(),
            "live-MR scale test (64 KiB MRs, cost model off)",
        ),
    ];
    for (section, title) in sections {
        out.push_str(&format!("\n### {title}\n\n"));
        path_header(out, paths, "figure");
        let rows: [FigureRow; 15] = [
            ("MRs held", |f| f.mrs.map(|n| whole(n as f64))),
            ("target / reached", |f| {
                f.reached.map(|r| {
                    let target = f.target.map_or("null".into(), |t| t.to_string());
                    Some(format!("{target} / {r}"))
                })
            }),
            ("stopped by", |f| f.stopped_by.clone().map(Some)),
            (
                "SUnreclaim bytes per MR (debug-padded on a KASAN kernel)",
                |f| Some(whole(f.meminfo_sunreclaim_bytes_per_mr)),
            ),
            ("ratio to the floor", |f| {
                f.ratio_slab_per_mr.map(|r| r.map(|r| x(Some(r))))
            }),
            ("SUnreclaim bytes per MR above the floor", |f| {
                nullable(f.sunreclaim_bytes_per_mr_above_floor)
            }),
            ("kmalloc bytes per MR, nominal sizes", |f| {
                f.kmalloc_nominal_bytes_per_mr.map(whole)
            }),
            ("kmalloc bytes per MR above the floor, nominal", |f| {
                nullable(f.nominal_bytes_per_mr_above_floor)
            }),
            ("kmalloc profile bytes per MR (whole objects)", |f| {
                f.kmalloc_profile_bytes_per_mr.map(|b| whole(b as f64))
            }),
            ("kmalloc profile bytes per MR above the floor", |f| {
                nullable(f.profile_bytes_per_mr_above_floor)
            }),
            ("kernel allocations per MR (kmemleak objects)", |f| {
                nullable(f.kernel_allocations_per_mr)
            }),
            (
                "client's own bytes per MR (nvpeer debugfs mr_footprint_bytes)",
                |f| f.client_own_bytes_per_mr.map(whole),
            ),
            ("reg µs per MR", |f| f.reg_us_per_mr.map(whole)),
            ("dereg µs per MR", |f| f.dereg_us_per_mr.map(whole)),
            ("MemAvailable drop per MR, bytes", |f| {
                f.memavailable_drop_bytes_per_mr.map(whole)
            }),
        ];
        for (label, figure) in rows {
            let figures: Vec<Figure> = paths.iter().map(|p| section(p).and_then(figure)).collect();
            if figures.iter().all(Option::is_none) {
                continue;
            }
            let row: Vec<String> = figures
                .into_iter()
                .map(|f| f.flatten().unwrap_or_else(|| "-".into()))
                .collect();
            out.push_str(&format!("| {label} | {} |\n", row.join(" | ")));
        }
    }
}

/// The invalidation-at-scale series ([`super::inval_scale`]): per number of MRs on the freed
/// allocation, the free's time, per MR, and its callbacks; then the concurrent frees.
fn inval_scale_table(out: &mut String, paths: &[PathDoc]) {
    let series: Vec<Option<&InvalScale>> = paths.iter().map(PathDoc::inval_scale).collect();
    if series.iter().all(Option::is_none) {
        return;
    }
    out.push_str(
        "\n### free (cudaFree) of an allocation carrying N live 64 KiB MRs: µs until it returned; µs per MR; callbacks\n\n",
    );
    path_header(out, paths, "N");
    let mut ns: Vec<u32> = series
        .iter()
        .flatten()
        .flat_map(|s| s.frees.iter().map(|f| f.mrs))
        .collect();
    ns.sort_unstable();
    ns.dedup();
    for n in ns {
        let row: Vec<String> = series
            .iter()
            .map(|s| {
                s.and_then(|s| s.frees.iter().find(|f| f.mrs == n))
                    .map_or("-".into(), |f| {
                        format!(
                            "{}; {:.1} per MR; cb {}",
                            us(Some(f.free_ns as f64)),
                            f.free_ns_per_mr / 1000.0,
                            f.callbacks
                        )
                    })
            })
            .collect();
        out.push_str(&format!("| {n} | {} |\n", row.join(" | ")));
    }
    let row: Vec<String> = series
        .iter()
        .map(|s| {
            s.and_then(|s| s.concurrent.as_ref())
                .map_or("-".into(), |c| {
                    let max = c.free_ns.iter().copied().max().unwrap_or(0);
                    format!(
                        "{} x {} MRs: slowest {}; cb {}",
                        c.threads,
                        c.mrs_each,
                        us(Some(max as f64)),
                        c.callbacks
                    )
                })
        })
        .collect();
    if row.iter().any(|r| r != "-") {
        out.push_str(&format!("| at once | {} |\n", row.join(" | ")));
    }
}

/// The live-MR series ([`super::live_mrs`]): the 64 KiB cell's registration + deregistration
/// median with L other MRs live, its ratio to the same path with none, and the time the client's
/// own code took per cycle (core paths).
fn live_mrs_table(out: &mut String, paths: &[PathDoc]) {
    let mut ls: Vec<u32> = paths
        .iter()
        .flat_map(|p| p.live_rows().filter_map(LiveMrRow::live_mrs))
        .collect();
    if ls.is_empty() {
        return;
    }
    ls.sort_unstable();
    ls.dedup();

    out.push_str(
        "\n### registration + deregistration of 64 KiB with L other MRs live, median µs (ratio to none live); client's own µs per cycle\n\n",
    );
    path_header(out, paths, "L");
    let cycle = |r: &LiveMrRow| match r {
        LiveMrRow::Measured(c) => Some(c.cycle.median_ns as f64),
        LiveMrRow::NotReached(_) => None,
    };
    for &l in &ls {
        let row: Vec<String> = paths
            .iter()
            .map(|p| match p.live_row(l) {
                None => "-".into(),
                Some(LiveMrRow::NotReached(r)) => {
                    format!("not reached ({} held): {}", r.not_reached, r.stopped_by)
                }
                Some(r @ LiveMrRow::Measured(c)) => {
                    let base = p.live_row(0).and_then(cycle);
                    let ratio = match (cycle(r), base) {
                        (Some(c), Some(b)) if b > 0.0 => format!("{:.2}x", c / b),
                        _ => "-".into(),
                    };
                    let own = c
                        .time_split_ns_per_cycle
                        .and_then(|t| t.client_own)
                        .map_or(String::new(), |c| format!("; client {:.1}", c / 1000.0));
                    format!("{} ({ratio}){own}", us(cycle(r)))
                }
            })
            .collect();
        out.push_str(&format!("| {l} | {} |\n", row.join(" | ")));
    }
}

/// A table's header: `first`, then one column per path.
fn path_header(out: &mut String, paths: &[PathDoc], first: &str) {
    let names: Vec<&str> = paths.iter().map(|p| p.path.as_str()).collect();
    out.push_str(&format!(
        "| {first} | {} |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    ));
}

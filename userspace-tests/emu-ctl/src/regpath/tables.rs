//! Markdown tables of a merged document.

use super::query::{find_cell, find_size, num};
use crate::cost_model::CostModel;
use serde_json::{json, Value};

pub(super) fn us(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}", x / 1000.0))
        .unwrap_or_else(|| "-".into())
}

pub(super) fn x(v: &Value) -> String {
    v.as_f64()
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
fn cells_row(paths: &[Value], size: u64, threads: u64, f: impl Fn(&Value) -> String) -> String {
    paths
        .iter()
        .map(|p| find_cell(p, size, threads).map_or("-".into(), &f))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The cost model a path was measured with, as applied (dilation included).
fn model_of(cm: &Value) -> Option<CostModel> {
    serde_json::from_value(cm["applied_ns"].clone()).ok()
}

/// Markdown tables of a merged document, one per figure: the cells' latencies, the classic
/// client's ratio, where the time went, the ratio taken apart, throughput by threads, provider
/// calls, the free under a live MR, the live-MR and invalidation-at-scale series, memory.
pub fn tables(doc: &Value) -> String {
    let empty = Vec::new();
    let paths = doc["paths"].as_array().unwrap_or(&empty);
    let sizes = cell_values(paths, "size");
    let threads = cell_values(paths, "threads");
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

/// The distinct values of the cells' `key` (`size`, `threads`) over every path, ascending.
fn cell_values(paths: &[Value], key: &str) -> Vec<u64> {
    let mut v: Vec<u64> = paths
        .iter()
        .flat_map(|p| {
            p["cells"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c[key].as_u64())
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The cost model the first path was measured with.
fn cost_model_line(out: &mut String, paths: &[Value]) {
    let Some(cm) = paths
        .first()
        .map(|p| &p["cost_model"])
        .filter(|c| c.is_object())
    else {
        return;
    };
    out.push_str(&format!(
        "cost model: {} x {:.1} ({}); applied ns: {}\n",
        cm["preset"].as_str().unwrap_or("?"),
        cm["dilate"].as_f64().unwrap_or(1.0),
        cm["dilate_source"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("no dilation"),
        cm["applied_ns"]
    ));
}

/// Latency per size, 1 thread, with the ratio to the floor.
fn latency_tables(out: &mut String, paths: &[Value], sizes: &[u64]) {
    let metrics: [(&str, &[&str], &str); 5] = [
        (
            "registration, median µs",
            &["reg", "median_ns"],
            "reg_median",
        ),
        ("registration, p99 µs", &["reg", "p99_ns"], "reg_p99"),
        (
            "deregistration, median µs",
            &["dereg", "median_ns"],
            "dereg_median",
        ),
        ("deregistration, p99 µs", &["dereg", "p99_ns"], "dereg_p99"),
        (
            "registration + deregistration, median µs",
            &["cycle", "median_ns"],
            "cycle_median",
        ),
    ];
    for (title, keys, rk) in metrics {
        out.push_str(&format!("\n### {title} (1 thread; ratio to the floor)\n\n"));
        path_header(out, paths, "size");
        for &s in sizes {
            let row = cells_row(paths, s, 1, |c| {
                format!("{} ({})", us(num(c, keys)), x(&c["ratios"][rk]))
            });
            out.push_str(&format!("| {} | {row} |\n", size_name(s)));
        }
    }
}

/// The ratio to the classic C client and the bounds a one-pin client can reach.
fn vs_classic_table(out: &mut String, paths: &[Value], sizes: &[u64]) {
    let names: Vec<&str> = paths
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("?"))
        .collect();
    let model = paths.first().and_then(|p| model_of(&p["cost_model"]));
    if !paths
        .iter()
        .any(|p| p["path"].as_str().is_some_and(|n| n.starts_with("classic")))
    {
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
    let floor = paths.iter().find(|p| p["path"] == "floor");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| x(&c["ratios"]["cycle_median_vs_classic"]));
        let pages = (s >> 16).max(1);
        let bound = model
            .map(|m| x(&json!(m.cycle_ns(pages, 1) / m.cycle_ns(pages, 2))))
            .unwrap_or_else(|| "-".into());
        let fb = model
            .zip(
                floor
                    .and_then(|f| find_cell(f, s, 1))
                    .and_then(|c| num(c, &["cycle", "median_ns"])),
            )
            .map(|(m, f)| {
                x(&json!(
                    f / (f + m.cycle_ns(pages, 2) - m.cycle_ns(pages, 1))
                ))
            })
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!("| {} | {row} | {bound} | {fb} |\n", size_name(s)));
    }
}

/// Where a cycle's mean time went, per path.
fn where_table(out: &mut String, paths: &[Value], sizes: &[u64]) {
    out.push_str("\n### where a registration + deregistration went, mean µs (1 thread): provider (of which the cost model) / client's own / rest (core + syscalls; floor: syscalls + rawfloor)\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| {
            let t = &c["time_split_ns_per_cycle"];
            let client = num(t, &["client_own"]).map_or("-".into(), |v| us(Some(v)));
            format!(
                "{} ({}) / {client} / {}",
                us(num(t, &["provider"])),
                us(num(t, &["provider_model"])),
                us(num(t, &["rest"]))
            )
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
}

/// The core paths' mean ratio to the floor, taken apart.
fn split_table(out: &mut String, paths: &[Value], sizes: &[u64]) {
    let core: Vec<&Value> = paths.iter().filter(|p| p["via"] == "core").collect();
    if core.is_empty() {
        return;
    }
    out.push_str("\n### registration + deregistration, mean, ratio to the floor taken apart (1 thread): ratio = 1 + provider beyond the floor + core beyond the floor + client's own (1 + provider + core: what a client costing nothing would score through this core)\n\n");
    let names: Vec<&str> = core
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("?"))
        .collect();
    out.push_str(&format!(
        "| size | {} |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    ));
    for &s in sizes {
        let row: Vec<String> = core
            .iter()
            .map(|p| {
                find_cell(p, s, 1)
                    .map(|c| &c["ratios"]["cycle_mean_split"])
                    .filter(|v| v.is_object())
                    .map_or("-".into(), |v| {
                        let f = |k: &str| num(v, &[k]).unwrap_or(f64::NAN);
                        format!(
                            "{:.3} = 1 {:+.3} {:+.3} {:+.3}",
                            f("ratio"),
                            f("provider"),
                            f("core"),
                            f("client")
                        )
                    })
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
    }
}

/// Cycles per second by size and threads.
fn throughput_table(out: &mut String, paths: &[Value], sizes: &[u64], threads: &[u64]) {
    out.push_str("\n### cycles (reg + dereg) per second by threads (ratio to the floor at the same threads)\n\n");
    path_header(out, paths, "size / threads");
    for &s in sizes {
        for &t in threads {
            let row = cells_row(paths, s, t, |c| {
                format!(
                    "{:.1} ({})",
                    num(c, &["regs_per_s"]).unwrap_or(0.0),
                    x(&c["ratios"]["regs_per_s"])
                )
            });
            out.push_str(&format!("| {} / {t} | {row} |\n", size_name(s)));
        }
    }
}

/// Provider calls per registration.
fn provider_calls_table(out: &mut String, paths: &[Value], sizes: &[u64]) {
    out.push_str("\n### provider calls per registration (get_pages + get_pages_persistent; all calls per reg+dereg)\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row = cells_row(paths, s, 1, |c| {
            let pc = &c["provider_calls_per_reg"];
            let gets = num(pc, &["get_pages"]).unwrap_or(0.0)
                + num(pc, &["get_pages_persistent"]).unwrap_or(0.0);
            format!(
                "{gets:.2} get; {:.2} all",
                num(pc, &["total"]).unwrap_or(0.0)
            )
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
}

/// The free of an allocation under one live MR, per size.
fn invalidation_table(out: &mut String, paths: &[Value], sizes: &[u64]) {
    out.push_str("\n### free (cudaFree) under one live MR, median µs (ratio to the floor); callbacks per free; MR state after\n\n");
    path_header(out, paths, "size");
    for &s in sizes {
        let row: Vec<String> = paths
            .iter()
            .map(|p| {
                find_size(p, "invalidation", s).map_or("-".into(), |r| {
                    let st: Vec<String> = r["mr_state_after_free"]
                        .as_object()
                        .map(|o| o.keys().cloned().collect())
                        .unwrap_or_default();
                    format!(
                        "{} ({}); cb {}; {}",
                        us(num(r, &["free_with_live_mr", "median_ns"])),
                        x(&r["ratios"]["free_with_live_mr_median"]),
                        num(r, &["callbacks_per_free"]).unwrap_or(0.0),
                        st.join(",")
                    )
                })
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
    }
}

/// Kernel memory per live MR (`memory`) and the live-MR scale test (`scale`).
fn memory_tables(out: &mut String, paths: &[Value]) {
    for (sec, title) in [
        ("memory", "kernel slab memory per live 64 KiB MR"),
        ("scale", "live-MR scale test (64 KiB MRs, cost model off)"),
    ] {
        out.push_str(&format!("\n### {title}\n\n"));
        path_header(out, paths, "figure");
        let rows: [(&str, &str); 15] = [
            ("MRs held", "mrs"),
            ("target / reached", "reached"),
            ("stopped by", "stopped_by"),
            (
                "SUnreclaim bytes per MR (debug-padded on a KASAN kernel)",
                "meminfo_sunreclaim_bytes_per_mr",
            ),
            ("ratio to the floor", "ratio_slab_per_mr"),
            (
                "SUnreclaim bytes per MR above the floor",
                "sunreclaim_bytes_per_mr_above_floor",
            ),
            (
                "kmalloc bytes per MR, nominal sizes",
                "kmalloc_nominal_bytes_per_mr",
            ),
            (
                "kmalloc bytes per MR above the floor, nominal",
                "nominal_bytes_per_mr_above_floor",
            ),
            (
                "kmalloc profile bytes per MR (whole objects)",
                "kmalloc_profile_bytes_per_mr",
            ),
            (
                "kmalloc profile bytes per MR above the floor",
                "profile_bytes_per_mr_above_floor",
            ),
            (
                "kernel allocations per MR (kmemleak objects)",
                "kernel_allocations_per_mr",
            ),
            (
                "client's own bytes per MR (nvpeer debugfs mr_footprint_bytes)",
                "client_own_bytes_per_mr",
            ),
            ("reg µs per MR", "reg_us_per_mr"),
            ("dereg µs per MR", "dereg_us_per_mr"),
            (
                "MemAvailable drop per MR, bytes",
                "memavailable_drop_bytes_per_mr",
            ),
        ];
        for (label, key) in rows {
            if paths.iter().all(|p| p[sec].get(key).is_none()) {
                continue;
            }
            let row: Vec<String> = paths
                .iter()
                .map(|p| match &p[sec][key] {
                    Value::Null => "-".into(),
                    Value::String(s) => s.clone(),
                    v if key == "ratio_slab_per_mr" => x(v),
                    v if key == "reached" => format!("{} / {}", p[sec]["target"], v),
                    v => v.as_f64().map_or(v.to_string(), |f| format!("{f:.0}")),
                })
                .collect();
            out.push_str(&format!("| {label} | {} |\n", row.join(" | ")));
        }
    }
}

/// The invalidation-at-scale series ([`super::inval_scale`]): per number of MRs on the freed
/// allocation, the free's time, per MR, and its callbacks; then the concurrent frees.
fn inval_scale_table(out: &mut String, paths: &[Value]) {
    use super::inval_scale::InvalScale;
    let series: Vec<Option<InvalScale>> = paths
        .iter()
        .map(|p| serde_json::from_value(p["inval_scale"].clone()).ok())
        .collect();
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
                s.as_ref()
                    .and_then(|s| s.frees.iter().find(|f| f.mrs == n))
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
            s.as_ref()
                .and_then(|s| s.concurrent.as_ref())
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
fn live_mrs_table(out: &mut String, paths: &[Value]) {
    let mut ls: Vec<u64> = paths
        .iter()
        .flat_map(|p| p["live_mrs"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["live_mrs"].as_u64())
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
    let row_of = |p: &Value, l: u64| -> Option<Value> {
        p["live_mrs"]
            .as_array()?
            .iter()
            .find(|r| r["live_mrs"].as_u64() == Some(l))
            .cloned()
    };
    for &l in &ls {
        let row: Vec<String> = paths
            .iter()
            .map(|p| {
                let Some(r) = row_of(p, l) else {
                    return "-".into();
                };
                if let Some(why) = r["stopped_by"].as_str() {
                    return format!("not reached ({} held): {why}", r["not_reached"]);
                }
                let cycle = num(&r, &["cycle", "median_ns"]);
                let base = row_of(p, 0).and_then(|b| num(&b, &["cycle", "median_ns"]));
                let ratio = match (cycle, base) {
                    (Some(c), Some(b)) if b > 0.0 => format!("{:.2}x", c / b),
                    _ => "-".into(),
                };
                let own = num(&r, &["time_split_ns_per_cycle", "client_own"])
                    .map_or(String::new(), |c| format!("; client {:.1}", c / 1000.0));
                format!("{} ({ratio}){own}", us(cycle))
            })
            .collect();
        out.push_str(&format!("| {l} | {} |\n", row.join(" | ")));
    }
}

/// A table's header: `first`, then one column per path.
fn path_header(out: &mut String, paths: &[Value], first: &str) {
    let names: Vec<&str> = paths
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("?"))
        .collect();
    out.push_str(&format!(
        "| {first} | {} |\n|---|{}\n",
        names.join(" | "),
        "---|".repeat(names.len())
    ));
}

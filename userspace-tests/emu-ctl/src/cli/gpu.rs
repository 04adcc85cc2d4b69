//! `nvpeer emu gpu ...`: the NVIDIA P2P provider emulator (/dev/nvp2p_emu).

use super::{json, parse_size};
use crate::cost_model::CostModel;
use crate::error::Result;
use crate::nvp2p::{self, Gpu};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub(super) enum GpuCmd {
    /// Allocate emulated GPU memory, print it, keep it for --hold seconds (freed on exit).
    Alloc {
        /// Size (bytes; suffixes K, M, G).
        #[arg(long, default_value = "256K", value_parser = parse_size)]
        size: u64,
        /// Seconds to keep the allocation alive.
        #[arg(long, default_value_t = 0)]
        hold: u64,
    },
    /// Free every allocation of a process (simulated process exit), with callbacks.
    Free {
        /// Process whose memory to free.
        #[arg(long)]
        tgid: i32,
        /// Destroy the context instead (cuCtxDestroy) of simulating an exit.
        #[arg(long)]
        context: bool,
    },
    /// Free every allocation of every process.
    Teardown,
    /// List allocations (and, with --pins, pins).
    List {
        /// List pins instead of allocations.
        #[arg(long)]
        pins: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Per-call counters and state.
    Counters {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Recorded contract violations (exit 1 if any).
    Violations,
    /// Record a violation per live pin; exit 1 if any pin is live.
    CheckLeaks,
    /// Set or clear injected faults.
    Faults {
        /// Entry point (get_pages, get_pages_persistent, put_pages, put_pages_persistent,
        /// dma_map_pages, dma_unmap_pages) or `all` with --clear.
        #[arg(long)]
        op: String,
        /// Negative errno to return (e.g. -12, -524).
        #[arg(long, allow_hyphen_values = true, default_value_t = -5)]
        err: i32,
        /// Fail every n-th call instead of once.
        #[arg(long)]
        every: Option<u32>,
        /// Calls to let pass first.
        #[arg(long, default_value_t = 0)]
        skip: u32,
        /// Clear instead of set.
        #[arg(long)]
        clear: bool,
    },
    /// Show or change the configuration (page-table ABI, BAR1 budget, delays, costs).
    Config(ConfigArgs),
    /// Clear faults, counters, violations; restore the default configuration.
    Reset,
}

/// What `gpu config` changes (each option not given keeps the provider's value).
#[derive(clap::Args, Debug)]
pub(super) struct ConfigArgs {
    /// Page-table ABI: 1 (0x00010002) or 2 (0x00020000).
    #[arg(long)]
    pt_abi: Option<u32>,
    /// BAR1 budget in bytes (0 = unlimited).
    #[arg(long, value_parser = parse_size)]
    bar1_budget: Option<u64>,
    /// Delay before each free callback, ms.
    #[arg(long)]
    cb_delay_ms: Option<u64>,
    /// Delay after each free callback, ms.
    #[arg(long)]
    cb_after_delay_ms: Option<u64>,
    /// get_pages: delay between pinning and callback registration, ms.
    #[arg(long)]
    reg_window_delay_ms: Option<u64>,
    /// dma_unmap_pages: delay after reading the table, ms.
    #[arg(long)]
    unmap_delay_ms: Option<u64>,
    /// RM cost model: set every call's cost from a preset (see `nvpeer emu calibrate
    /// --help`), optionally dilated by --dilate.
    #[arg(long)]
    cost_model: Option<String>,
    /// Multiply the preset's costs by this factor.
    #[arg(long, default_value_t = 1.0, requires = "cost_model")]
    dilate: f64,
}

fn ms_to_ns(v: Option<u64>, cur: u64) -> u64 {
    v.map(|ms| ms * 1_000_000).unwrap_or(cur)
}

pub(super) fn gpu_cmd(c: GpuCmd) -> Result<u8> {
    let gpu = Gpu::open()?;
    match c {
        GpuCmd::Alloc { size, hold } => {
            let a = gpu.alloc(size, 0)?;
            println!(
                "va {:#x} size {:#x} handle {} pid {}",
                a.va,
                a.size,
                a.handle,
                std::process::id()
            );
            std::thread::sleep(std::time::Duration::from_secs(hold));
        }
        GpuCmd::Free { tgid, context } => {
            let r = if context {
                gpu.destroy_context(tgid)?
            } else {
                gpu.process_exit(tgid)?
            };
            println!(
                "freed {} allocation(s), {} callback(s)",
                r.allocs, r.callbacks
            );
        }
        GpuCmd::Teardown => {
            let r = gpu.gpu_teardown()?;
            println!(
                "freed {} allocation(s), {} callback(s)",
                r.allocs, r.callbacks
            );
        }
        GpuCmd::List { pins, json: j } => return list(&gpu, pins, j),
        GpuCmd::Counters { json: j } => return counters(&gpu, j),
        GpuCmd::Violations => {
            let s = gpu.stats()?;
            let v = nvp2p::violations(&s);
            for (name, n) in &v {
                let what = nvp2p::VIOLATIONS
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, w)| *w)
                    .unwrap_or("");
                println!("{name} x{n}: {what}");
            }
            return Ok(u8::from(!v.is_empty()));
        }
        GpuCmd::CheckLeaks => {
            let n = gpu.check_leaks()?;
            println!("{n} live pin(s)");
            return Ok(u8::from(n != 0));
        }
        GpuCmd::Faults {
            op,
            err,
            every,
            skip,
            clear,
        } => faults(&gpu, &op, err, every, skip, clear)?,
        GpuCmd::Config(change) => config(&gpu, change)?,
        GpuCmd::Reset => gpu.reset()?,
    }
    Ok(0)
}

/// `gpu list`: the live allocations, or with `--pins` the pins.
fn list(gpu: &Gpu, pins: bool, j: bool) -> Result<u8> {
    if pins {
        let p = gpu.list_pins()?;
        if j {
            return json(&p).map(|_| 0);
        }
        for x in p {
            println!(
                "pin {} alloc {} va {:#x} len {:#x} tgid {} {} state {} mappings {}",
                x.id,
                x.alloc_handle,
                x.va,
                x.len,
                x.tgid,
                if x.persistent != 0 {
                    "persistent"
                } else {
                    "callback"
                },
                x.state,
                x.mappings
            );
        }
    } else {
        let a = gpu.list_allocs()?;
        if j {
            return json(&a).map(|_| 0);
        }
        for x in a {
            println!(
                "alloc {} va {:#x} size {:#x} tgid {} {} pins {}",
                x.handle,
                x.va,
                x.size,
                x.tgid,
                if x.state == 0 { "live" } else { "freed" },
                x.pins
            );
        }
    }

    Ok(0)
}

/// `gpu counters`: the provider's calls and failures per entry point and its gauges.
fn counters(gpu: &Gpu, j: bool) -> Result<u8> {
    let s = gpu.stats()?;
    let calls: serde_json::Map<String, serde_json::Value> = nvp2p::OPS
        .iter()
        .enumerate()
        .map(|(i, o)| {
            (
                o.to_string(),
                serde_json::json!({"calls": s.calls[i], "failures": s.failures[i]}),
            )
        })
        .collect();
    let v = serde_json::json!({
        "calls": calls,
        "violations_total": s.violations_total,
        "live_allocs": s.live_allocs, "live_pins": s.live_pins,
        "live_persistent_pins": s.live_persistent_pins, "pinned_pages": s.pinned_pages,
        "live_mappings": s.live_mappings, "callbacks": s.callbacks,
        "put_after_teardown": s.put_after_teardown, "bar1_used": s.bar1_used,
        "quarantined": s.quarantined, "free_calls_in_callback": s.free_calls_in_callback,
        "api_window_hits": s.api_window_hits,
    });
    if j {
        return json(&v).map(|_| 0);
    }
    for (i, o) in nvp2p::OPS.iter().enumerate() {
        if s.calls[i] != 0 {
            println!(
                "{o:<24} calls {:>8} failures {:>6}",
                s.calls[i], s.failures[i]
            );
        }
    }
    for k in [
        "violations_total",
        "live_allocs",
        "live_pins",
        "live_persistent_pins",
        "pinned_pages",
        "live_mappings",
        "callbacks",
        "put_after_teardown",
        "bar1_used",
        "quarantined",
        "free_calls_in_callback",
        "api_window_hits",
    ] {
        println!("{k:<24} {}", v[k]);
    }

    Ok(0)
}

/// `gpu faults`: arms (or clears) fault injection at one entry point or all.
fn faults(gpu: &Gpu, op: &str, err: i32, every: Option<u32>, skip: u32, clear: bool) -> Result<()> {
    let ops: Vec<u32> = if op == "all" {
        (0..nvp2p::FAULT_OPS as u32).collect()
    } else {
        vec![nvp2p::op_index(op)?]
    };
    for o in ops {
        if !clear && op == "all" && !nvp2p::real_errnos(o).contains(&err) {
            println!(
                "{}: not armed (the real call never returns {err})",
                nvp2p::OPS[o as usize]
            );
            continue;
        }
        let (mode, n) = match (clear, every) {
            (true, _) => (nvp2p::fault_mode::OFF, 0),
            (false, Some(n)) => (nvp2p::fault_mode::EVERY_N, n),
            (false, None) => (nvp2p::fault_mode::ONCE, 1),
        };
        let injected = gpu.set_fault(o, mode, if clear { 0 } else { err }, n, skip)?;
        println!(
            "{}: {} (injected so far {injected})",
            nvp2p::OPS[o as usize],
            if clear {
                "cleared".into()
            } else {
                format!("fail with {err}")
            }
        );
    }

    Ok(())
}

/// `gpu config`: applies the changes given and prints the configuration.
fn config(gpu: &Gpu, change: ConfigArgs) -> Result<()> {
    let ConfigArgs {
        pt_abi,
        bar1_budget,
        cb_delay_ms,
        cb_after_delay_ms,
        reg_window_delay_ms,
        unmap_delay_ms,
        cost_model,
        dilate,
    } = change;
    let mut c = gpu.config()?;
    let before = c;
    if let Some(v) = pt_abi {
        c.pt_abi = v;
    }
    if let Some(v) = bar1_budget {
        c.bar1_budget = v;
    }
    c.cb_delay_ns = ms_to_ns(cb_delay_ms, c.cb_delay_ns);
    c.cb_after_delay_ns = ms_to_ns(cb_after_delay_ms, c.cb_after_delay_ns);
    c.reg_window_delay_ns = ms_to_ns(reg_window_delay_ms, c.reg_window_delay_ns);
    c.unmap_delay_ns = ms_to_ns(unmap_delay_ms, c.unmap_delay_ns);
    if let Some(name) = cost_model {
        c = CostModel::preset(&name)?.dilated(dilate)?.apply(c);
    }
    if serde_json::to_string(&c).ok() != serde_json::to_string(&before).ok() {
        gpu.set_config(c)?;
    }
    json(&gpu.config()?)?;

    Ok(())
}

//! `nvpeer emu ...`: drive the bench's emulators from a shell.
//!
//! Exit status: 0 ok, 1 a check failed (violation recorded, scenario failed, leak found),
//! 2 usage or device error.

use crate::core::{self, Core, RegParams};
use crate::cost_model::{self, CostModel};
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, Gpu};
use crate::scenario;
use clap::{Parser, Subcommand};

/// Arguments of `nvpeer emu`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The NVIDIA P2P provider emulator (/dev/nvp2p_emu).
    #[command(subcommand)]
    Gpu(GpuCmd),
    /// The peer-memory core emulator (/dev/peer_mem_emu).
    #[command(subcommand)]
    Core(CoreCmd),
    /// Run a concurrency scenario against the loaded client (`--list` to see them).
    Scenario(ScenarioArgs),
    /// Run steps in one process: alloc:SIZE reg[:OFF:LEN] free dereg activate sleep:MS show.
    Steps {
        /// Steps, in order (memory and MRs die with this process).
        #[arg(required = true)]
        steps: Vec<String>,
    },
    /// Print /sys/kernel/mm/memory_peers/CLIENT/* counters.
    Sysfs {
        /// Client name (nv_mem, nv_mem_nc).
        #[arg(default_value = "nv_mem")]
        client: String,
    },
    /// Registration-path benchmark: measure one path, or merge paths into a report.
    Regpath(crate::regpath::Args),
    /// Time the calibration workload (64 KiB anonymous mmap+populate+munmap) and print JSON;
    /// run on the host and in the bench guest, the ratio is the guest's software slowdown.
    /// Also lists the RM cost-model presets.
    Calibrate {
        /// Rounds (the median round is reported).
        #[arg(long, default_value_t = 7)]
        rounds: u32,
        /// Iterations per round.
        #[arg(long, default_value_t = 2000)]
        iters: u32,
    },
}

#[derive(Subcommand, Debug)]
enum GpuCmd {
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
    Config {
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
    },
    /// Clear faults, counters, violations; restore the default configuration.
    Reset,
}

#[derive(Subcommand, Debug)]
enum CoreCmd {
    /// Show or set the OFED model and flags.
    Model {
        /// 4.9, 5.1, 5.4hf or 5.5.
        name: Option<String>,
        /// Emulate the pre-25.04 stop-notifier lock bug.
        #[arg(long)]
        stop_notifier_bug: Option<bool>,
        /// Header rule: put_pages must free the sg_table.
        #[arg(long)]
        strict_sg: Option<bool>,
        /// sysfs counters on/off.
        #[arg(long)]
        sysfs: Option<bool>,
        /// Lock waits longer than this are recorded as deadlocks (0 = wait forever).
        #[arg(long)]
        hang_timeout_ms: Option<u32>,
    },
    /// Register emulated GPU memory as an MR in this process, show it, hold, deregister.
    Register {
        /// Size (bytes; suffixes K, M, G).
        #[arg(long, default_value = "256K", value_parser = parse_size)]
        size: u64,
        /// Byte offset of the MR inside the allocation.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// No INVAL_SUPP (CQ/QP-style buffer).
        #[arg(long)]
        no_inval: bool,
        /// Use a non-PCI dma_device.
        #[arg(long)]
        non_pci: bool,
        /// Allocate on an emulated MIG instance (persistent pins fail with ENOTSUPP).
        #[arg(long)]
        mig: bool,
        /// Seconds to hold the MR before deregistering.
        #[arg(long, default_value_t = 0)]
        hold: u64,
    },
    /// Registered clients.
    Clients {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Counters.
    Counters {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Recorded violations (exit 1 if any).
    Violations,
    /// Arm a fault point (umem_alloc, peer_umem_alloc, xa_alloc, client_alloc, sysfs, handle_alloc, mkey).
    Fault {
        /// Fault point.
        point: String,
        /// Fire on the n-th hit (0 with --times 0 disarms).
        #[arg(long, default_value_t = 1)]
        nth: u32,
        /// Consecutive hits to fail (0 = forever).
        #[arg(long, default_value_t = 1)]
        times: u32,
        /// Positive errno (0 = ENOMEM).
        #[arg(long, default_value_t = 0)]
        errno: u32,
    },
    /// Arm (or with 0 disarm) a delay point.
    Delay {
        /// Delay point (after_acquire, after_get_pages, after_dma_map, before_activate,
        /// dereg_before_stop, in_stop, stop_to_release, invalidate_locked).
        point: String,
        /// Milliseconds.
        ms: u32,
    },
    /// Clear counters, violations, faults and delays.
    Reset,
}

#[derive(Parser, Debug)]
struct ScenarioArgs {
    /// Scenario name, or `all`.
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// List scenarios.
    #[arg(long)]
    list: bool,
    /// Iterations of repeated scenarios.
    #[arg(long, default_value_t = 20)]
    iterations: u32,
    /// Threads of parallel scenarios.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// GPU pages (64 KiB) per allocation.
    #[arg(long, default_value_t = 4)]
    pages: u64,
    /// Delay armed at delay points, ms.
    #[arg(long, default_value_t = 1500)]
    delay_ms: u32,
    /// Client module name (unload scenario).
    #[arg(long, default_value = "classic_peer")]
    module: String,
    /// Pass only if this violation is recorded (repeat or `a|b` for alternatives).
    #[arg(long)]
    expect: Vec<String>,
    /// Core hang detector, ms.
    #[arg(long, default_value_t = 8000)]
    hang_timeout_ms: u32,
    /// race-stress, invalidating client: most NVIDIA API window hits (provider dma_map_uaf) per
    /// 100k registrations before the run fails (docs/design.md). A persistent client must have 0.
    #[arg(long, default_value_t = scenario::WINDOW_BOUND_PER_100K)]
    window_bound: f64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// Parses sizes like `4096`, `64K`, `1M`, `2G`.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&s[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&s[..i], 1u64 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&s[..i], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = if let Some(hex) = num.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).map_err(|e| format!("bad size '{s}': {e}"))?
    } else {
        num.parse().map_err(|e| format!("bad size '{s}': {e}"))?
    };
    n.checked_mul(mul)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("bad size '{s}': zero or too large"))
}

/// Runs `nvpeer emu`; returns the exit status.
pub fn run(args: Args) -> u8 {
    match dispatch(args.cmd) {
        Ok(code) => code,
        Err(e @ EmuError::Check(_)) => {
            eprintln!("nvpeer emu: {e}");
            1
        }
        Err(e) => {
            eprintln!("nvpeer emu: {e}");
            2
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| EmuError::Invalid(e.to_string()))?
    );
    Ok(())
}

fn dispatch(cmd: Cmd) -> Result<u8> {
    match cmd {
        Cmd::Gpu(c) => gpu_cmd(c),
        Cmd::Core(c) => core_cmd(c),
        Cmd::Scenario(a) => scenario_cmd(a),
        Cmd::Steps { steps } => steps_cmd(&steps),
        Cmd::Regpath(a) => crate::regpath::run(a),
        Cmd::Calibrate { rounds, iters } => {
            let (median, per_round) = cost_model::calibrate(rounds, iters)?;
            let presets: serde_json::Map<String, serde_json::Value> = cost_model::PRESETS
                .iter()
                .map(|(n, why)| (n.to_string(), serde_json::json!(why)))
                .collect();
            json(&serde_json::json!({
                "workload": "mmap 64 KiB anonymous MAP_POPULATE + munmap",
                "rounds": rounds, "iters": iters,
                "median_ns_per_iter": median, "ns_per_iter_per_round": per_round,
                "cost_model_presets": presets,
            }))?;
            Ok(0)
        }
        Cmd::Sysfs { client } => {
            for (k, v) in crate::sysfs::read(&client)? {
                println!("{k} {v}");
            }
            Ok(0)
        }
    }
}

fn ms_to_ns(v: Option<u64>, cur: u64) -> u64 {
    v.map(|ms| ms * 1_000_000).unwrap_or(cur)
}

fn gpu_cmd(c: GpuCmd) -> Result<u8> {
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
        GpuCmd::List { pins, json: j } => {
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
        }
        GpuCmd::Counters { json: j } => {
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
        }
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
        } => {
            let ops: Vec<u32> = if op == "all" {
                (0..nvp2p::FAULT_OPS as u32).collect()
            } else {
                vec![nvp2p::op_index(&op)?]
            };
            for o in ops {
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
        }
        GpuCmd::Config {
            pt_abi,
            bar1_budget,
            cb_delay_ms,
            cb_after_delay_ms,
            reg_window_delay_ms,
            unmap_delay_ms,
            cost_model,
            dilate,
        } => {
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
        }
        GpuCmd::Reset => gpu.reset()?,
    }
    Ok(0)
}

fn core_cmd(c: CoreCmd) -> Result<u8> {
    let core = Core::open()?;
    match c {
        CoreCmd::Model {
            name,
            stop_notifier_bug,
            strict_sg,
            sysfs,
            hang_timeout_ms,
        } => {
            let mut c = core.config()?;
            if let Some(n) = name {
                c.model = core::model_by_name(&n)?;
            }
            let mut flag = |on: Option<bool>, bit: u32| {
                if let Some(on) = on {
                    if on {
                        c.flags |= bit
                    } else {
                        c.flags &= !bit
                    }
                }
            };
            flag(stop_notifier_bug, core::cfg_flags::STOP_NOTIFIER_BUG);
            flag(strict_sg, core::cfg_flags::STRICT_SG);
            flag(sysfs, core::cfg_flags::SYSFS);
            if let Some(t) = hang_timeout_ms {
                c.hang_timeout_ms = t;
            }
            core.set_config(c)?;
            let c = core.config()?;
            println!(
                "model {} flags {:#x} hang_timeout_ms {} hold_timeout_ms {}",
                core::model_name(c.model),
                c.flags,
                c.hang_timeout_ms,
                c.hold_timeout_ms
            );
        }
        CoreCmd::Register {
            size,
            offset,
            no_inval,
            non_pci,
            mig,
            hold,
        } => {
            let gpu = Gpu::open()?;
            let flags = if mig { nvp2p::alloc_flags::MIG } else { 0 };
            let a = gpu.alloc(size.saturating_add(offset), flags)?;
            let mut p = RegParams::mr(a.va + offset, size);
            if no_inval {
                p.peer_flags = core::peer_flags::ALLOW;
            }
            if non_pci {
                p.device = core::device::NONPCI;
            }
            let mr = core.register(p)?;
            let q = core.query(mr.handle)?;
            println!(
                "mr {} state {} core_context {:#x} client {} nmap {} page_size {:#x}",
                mr.handle,
                core::state::name(q.state),
                q.core_context,
                q.client_index,
                q.nmap,
                q.page_size
            );
            std::thread::sleep(std::time::Duration::from_secs(hold));
            core.deregister(mr.handle, false)?;
            gpu.free(a.va)?;
        }
        CoreCmd::Clients { json: j } => {
            let cl = core.clients()?;
            if j {
                return json(&cl).map(|_| 0);
            }
            for c in cl {
                println!(
                    "{} {} version {:?} {}{}{} usecnt {}",
                    c.index,
                    c.name,
                    c.version,
                    if c.invalidating {
                        "invalidating"
                    } else {
                        "persistent"
                    },
                    if c.ex { " ex" } else { "" },
                    if c.unmaps { " unmaps" } else { "" },
                    c.usecnt
                );
            }
        }
        CoreCmd::Counters { json: j } => {
            let s = core.stats()?;
            if j {
                return json(&s).map(|_| 0);
            }
            let v = serde_json::to_value(s).map_err(|e| EmuError::Invalid(e.to_string()))?;
            if let Some(m) = v.as_object() {
                for (k, x) in m {
                    if !x.is_array() {
                        println!("{k:<20} {x}");
                    }
                }
            }
            for (i, p) in core::DELAY_POINTS.iter().enumerate() {
                if s.delay_hits[i] != 0 {
                    println!("delay_hits.{p:<18} {}", s.delay_hits[i]);
                }
            }
            for (i, p) in core::FAULT_POINTS.iter().enumerate() {
                if s.fault_fired[i] != 0 {
                    println!("fault_fired.{p:<17} {}", s.fault_fired[i]);
                }
            }
        }
        CoreCmd::Violations => {
            let v = core.violations()?;
            for r in &v {
                println!("{} (pid {}): {}", r.rule, r.pid, r.text);
            }
            return Ok(u8::from(!v.is_empty()));
        }
        CoreCmd::Fault {
            point,
            nth,
            times,
            errno,
        } => {
            let p = core::point_index(&core::FAULT_POINTS, &point, "fault point")?;
            core.set_fault(p, errno, nth, times)?;
        }
        CoreCmd::Delay { point, ms } => {
            let p = core::point_index(&core::DELAY_POINTS, &point, "delay point")?;
            core.set_delay(p, ms)?;
        }
        CoreCmd::Reset => core.reset()?,
    }
    Ok(0)
}

fn scenario_cmd(a: ScenarioArgs) -> Result<u8> {
    if a.list {
        for s in scenario::SCENARIOS {
            println!("{:<32} {}", s.name, s.about);
        }
        return Ok(0);
    }
    let name = a.name.unwrap_or_default();
    let list: Vec<&scenario::Scenario> = if name == "all" {
        scenario::SCENARIOS.iter().collect()
    } else {
        vec![scenario::find(&name)
            .ok_or_else(|| EmuError::Invalid(format!("unknown scenario '{name}' (see --list)")))?]
    };
    let opts = scenario::Opts {
        iterations: a.iterations,
        threads: a.threads,
        pages: a.pages.max(1),
        delay_ms: a.delay_ms,
        module: a.module,
        expect: a
            .expect
            .iter()
            .flat_map(|x| x.split('|').map(str::to_string))
            .collect(),
        hang_timeout_ms: a.hang_timeout_ms,
        window_bound: a.window_bound,
    };
    let mut failed = 0;
    for s in list {
        let o = scenario::run(s, opts.clone())?;
        if a.json {
            json(&o)?;
        } else {
            print!("{}", o.log);
            println!("{} {}", if o.pass { "PASS" } else { "FAIL" }, o.message);
        }
        failed += u32::from(!o.pass);
    }
    Ok(u8::from(failed != 0))
}

/// One parsed step of `nvpeer emu steps`.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Alloc(u64),
    Reg(u64, Option<u64>),
    Free,
    Dereg,
    Activate,
    Sleep(u64),
    Show,
}

fn parse_step(s: &str) -> Result<Step> {
    let mut it = s.split(':');
    let bad = || {
        EmuError::Invalid(format!(
            "bad step '{s}' (alloc:SIZE reg[:OFF[:LEN]] free dereg activate sleep:MS show)"
        ))
    };
    let num = |v: Option<&str>| -> Result<Option<u64>> {
        v.map(|x| {
            parse_size(x)
                .or_else(|_| if x == "0" { Ok(0) } else { Err(()) })
                .map_err(|_| bad())
        })
        .transpose()
    };
    Ok(match it.next().unwrap_or("") {
        "alloc" => Step::Alloc(num(it.next())?.unwrap_or(256 << 10)),
        "reg" => Step::Reg(num(it.next())?.unwrap_or(0), num(it.next())?),
        "free" => Step::Free,
        "dereg" => Step::Dereg,
        "activate" => Step::Activate,
        "sleep" => Step::Sleep(num(it.next())?.ok_or_else(bad)?),
        "show" => Step::Show,
        _ => return Err(bad()),
    })
}

fn steps_cmd(steps: &[String]) -> Result<u8> {
    let steps: Vec<Step> = steps.iter().map(|s| parse_step(s)).collect::<Result<_>>()?;
    let gpu = Gpu::open()?;
    let core = Core::open()?;
    let mut allocs = Vec::new();
    let mut mrs = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Alloc(size) => {
                let a = gpu.alloc(*size, 0)?;
                println!("[{i}] alloc va {:#x} size {:#x}", a.va, a.size);
                allocs.push(a);
            }
            Step::Reg(off, len) => {
                let a = *allocs
                    .last()
                    .ok_or_else(|| EmuError::Invalid("reg before alloc".into()))?;
                let len = len.unwrap_or(a.size.saturating_sub(*off));
                match core.register(RegParams::mr(a.va + off, len)) {
                    Ok(mr) => {
                        println!(
                            "[{i}] reg mr {} state {} core_context {:#x}",
                            mr.handle,
                            core::state::name(mr.state),
                            mr.core_context
                        );
                        mrs.push(mr);
                    }
                    Err(e) => println!("[{i}] reg failed: {e}"),
                }
            }
            Step::Free => {
                let a = allocs
                    .pop()
                    .ok_or_else(|| EmuError::Invalid("free without alloc".into()))?;
                println!("[{i}] free va {:#x}: {} callback(s)", a.va, gpu.free(a.va)?);
            }
            Step::Dereg => {
                let mr = mrs
                    .pop()
                    .ok_or_else(|| EmuError::Invalid("dereg without reg".into()))?;
                core.deregister(mr.handle, false)?;
                println!("[{i}] dereg mr {}", mr.handle);
            }
            Step::Activate => {
                core.activate(0, false)?;
                println!("[{i}] activate");
            }
            Step::Sleep(ms) => std::thread::sleep(std::time::Duration::from_millis(*ms)),
            Step::Show => {
                for mr in &mrs {
                    let q = core.query(mr.handle)?;
                    println!(
                        "[{i}] mr {} {} invalidations {} revoked {}",
                        mr.handle,
                        core::state::name(q.state),
                        q.invalidations,
                        q.flags & core::qflags::REVOKED != 0
                    );
                }
                let s = gpu.stats()?;
                println!(
                    "[{i}] provider: live pins {} callbacks {} violations {}",
                    s.live_pins, s.callbacks, s.violations_total
                );
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Top {
        #[command(flatten)]
        a: Args,
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("0x10000").unwrap(), 65536);
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn steps_parse() {
        assert_eq!(parse_step("alloc:1M").unwrap(), Step::Alloc(1 << 20));
        assert_eq!(
            parse_step("reg:0x1000:64K").unwrap(),
            Step::Reg(0x1000, Some(65536))
        );
        assert_eq!(parse_step("reg").unwrap(), Step::Reg(0, None));
        assert_eq!(parse_step("sleep:100").unwrap(), Step::Sleep(100));
        assert!(parse_step("sleep").is_err());
        assert!(parse_step("bogus").is_err());
    }

    #[test]
    fn command_lines_parse() {
        let t = Top::try_parse_from(["emu", "scenario", "basic", "--expect", "sg_entry|sg_nmap"])
            .unwrap();
        assert!(matches!(t.a.cmd, Cmd::Scenario(ref s) if s.expect == ["sg_entry|sg_nmap"]));
        let t = Top::try_parse_from(["emu", "gpu", "faults", "--op", "get_pages", "--err", "-12"])
            .unwrap();
        assert!(matches!(t.a.cmd, Cmd::Gpu(GpuCmd::Faults { err: -12, .. })));
        let t = Top::try_parse_from(["emu", "core", "model", "5.1", "--hang-timeout-ms", "3000"])
            .unwrap();
        assert!(matches!(
            t.a.cmd,
            Cmd::Core(CoreCmd::Model {
                hang_timeout_ms: Some(3000),
                ..
            })
        ));
        assert!(Top::try_parse_from(["emu", "scenario"]).is_err());
        assert!(Top::try_parse_from(["emu", "scenario", "--list"]).is_ok());
    }
}

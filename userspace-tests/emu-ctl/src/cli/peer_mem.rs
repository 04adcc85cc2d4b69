//! `nvpeer emu core ...`: the peer-memory core emulator (/dev/peer_mem_emu).

use super::{json, parse_size};
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, Gpu};
use crate::peer_mem::{self, Core, RegParams};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub(super) enum CoreCmd {
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
        /// Planted lock inversion: invalidate asks the client's acquire for the same range, with
        /// the provider's lock held (lockdep must report it; suite 02-lockdep-canary).
        #[arg(long)]
        acquire_in_invalidate: Option<bool>,
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
        /// Allocate on an emulated MIG instance (persistent FORCE_BAR1 pins fail with ENOTSUPP).
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

pub(super) fn core_cmd(c: CoreCmd) -> Result<u8> {
    let core = Core::open()?;
    match c {
        CoreCmd::Model {
            name,
            stop_notifier_bug,
            strict_sg,
            acquire_in_invalidate,
            sysfs,
            hang_timeout_ms,
        } => {
            let mut c = core.config()?;
            if let Some(n) = name {
                c.model = peer_mem::model_by_name(&n)?;
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
            flag(stop_notifier_bug, peer_mem::cfg_flags::STOP_NOTIFIER_BUG);
            flag(strict_sg, peer_mem::cfg_flags::STRICT_SG);
            flag(acquire_in_invalidate, peer_mem::cfg_flags::ACQUIRE_IN_INVAL);
            flag(sysfs, peer_mem::cfg_flags::SYSFS);
            if let Some(t) = hang_timeout_ms {
                c.hang_timeout_ms = t;
            }
            core.set_config(c)?;
            let c = core.config()?;
            println!(
                "model {} flags {:#x} hang_timeout_ms {} hold_timeout_ms {}",
                peer_mem::model_name(c.model),
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
                p.peer_flags = peer_mem::peer_flags::ALLOW;
            }
            if non_pci {
                p.device = peer_mem::device::NONPCI;
            }
            let mr = core.register(p)?;
            let q = core.query(mr.handle)?;
            println!(
                "mr {} state {} core_context {:#x} client {} nmap {} page_size {:#x}",
                mr.handle,
                peer_mem::state::name(q.state),
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
            for (i, p) in peer_mem::DELAY_POINTS.iter().enumerate() {
                if s.delay_hits[i] != 0 {
                    println!("delay_hits.{p:<18} {}", s.delay_hits[i]);
                }
            }
            for (i, p) in peer_mem::FAULT_POINTS.iter().enumerate() {
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
            let p = peer_mem::point_index(&peer_mem::FAULT_POINTS, &point, "fault point")?;
            core.set_fault(p, errno, nth, times)?;
        }
        CoreCmd::Delay { point, ms } => {
            let p = peer_mem::point_index(&peer_mem::DELAY_POINTS, &point, "delay point")?;
            core.set_delay(p, ms)?;
        }
        CoreCmd::Reset => core.reset()?,
    }
    Ok(0)
}

//! Failures injected into the provider and the core: HW object creation, BAR1 exhaustion, each
//! provider call and errno, each core fault point, every slab and page allocation in turn.

use super::env::Env;
use super::runner::leftovers;
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, GPU_PAGE_SIZE};
use crate::peer_mem::{self, RegParams};

pub(super) fn hw_fail(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.flags = peer_mem::reg_flags::FAIL_HW;
    match e.core.register(p) {
        Ok(mr) => {
            e.core.deregister(mr.handle, false)?;
            return Err(EmuError::Check(
                "registration with failing HW object succeeded".into(),
            ));
        }
        Err(err) => e.note(format!("HW failure reported: {err}")),
    }
    e.gpu.free(a.va)?;
    Ok(())
}

pub(super) fn bar1_exhausted(e: &Env) -> Result<()> {
    let mut cfg = e.gpu.config()?;
    let saved = cfg;
    cfg.bar1_budget = 2 * GPU_PAGE_SIZE;
    e.gpu.set_config(cfg)?;
    let res = (|| -> Result<()> {
        let a = e.gpu.alloc(4 * GPU_PAGE_SIZE, 0)?;
        let r = e.core.register(RegParams::mr(a.va, a.size));
        let small = e.core.register(RegParams::mr(a.va, GPU_PAGE_SIZE));
        e.note(format!(
            "4 pages over a 2-page BAR1: {:?}; 1 page: {:?}",
            r.as_ref().err().map(|x| x.to_string()),
            small.as_ref().map(|m| m.handle)
        ));
        if let Ok(m) = r {
            e.core.deregister(m.handle, false)?;
            return Err(EmuError::Check(
                "registration larger than the BAR1 budget succeeded".into(),
            ));
        }
        let m = small?;
        e.core.deregister(m.handle, false)?;
        e.gpu.free(a.va)?;
        Ok(())
    })();
    e.gpu.set_config(saved)?;
    res
}

pub(super) fn fault_provider(e: &Env) -> Result<()> {
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    let probe = e.alloc()?;
    let inval = {
        let m = e.reg(&probe)?;
        let i = e.invalidating(&m)?;
        e.core.deregister(m.handle, false)?;
        e.gpu.free(probe.va)?;
        i
    };
    // put_pages_persistent only against nvpeer, which tries a failed persistent put once more
    // (src/mr.rs): a client that does not leaves NVIDIA that pin by the API's contract (no callback
    // can end it), which the provider rightly records as a leak.
    // (dma_unmap_pages fails on NULL arguments only: no fault there, nvp2p::real_errnos)
    let ops: &[u32] = match (inval, e.opts.module.as_str()) {
        (true, _) => &[0, 2, 4],
        (false, "nvpeer") => &[1, 3, 4],
        (false, _) => &[1, 4],
    };
    for &op in ops {
        for &err in nvp2p::real_errnos(op) {
            for skip in 0..2u32 {
                let a = e.alloc()?;
                e.gpu.set_fault(op, nvp2p::fault_mode::ONCE, err, 1, skip)?;
                let r = e.reg(&a);
                if let Ok(m) = &r {
                    e.core.deregister(m.handle, false)?;
                }
                e.gpu.free(a.va)?;
                e.gpu.set_fault(op, nvp2p::fault_mode::OFF, 0, 0, 0)?;
                let key = format!(
                    "{}:{}",
                    nvp2p::OPS[op as usize],
                    if r.is_ok() { "ok" } else { "failed" }
                );
                *outcomes.entry(key).or_default() += 1;
                if let Some(m) = leftovers(e)? {
                    return Err(EmuError::Check(format!(
                        "after {} failing with {err} (skip {skip}): {m}",
                        nvp2p::OPS[op as usize]
                    )));
                }
            }
        }
    }
    e.note(format!("outcomes: {outcomes:?}"));
    Ok(())
}

pub(super) fn fault_core(e: &Env) -> Result<()> {
    for (i, name) in peer_mem::FAULT_POINTS.iter().enumerate() {
        if matches!(*name, "client_alloc" | "sysfs") {
            continue; // client registration time only
        }
        for nth in 1..=2u32 {
            let a = e.alloc()?;
            e.core.set_fault(i as u32, 0, nth, 1)?;
            let r = e.reg(&a);
            let r2 = e.reg(&a);
            for m in [&r, &r2].into_iter().flatten() {
                e.core.deregister(m.handle, false)?;
            }
            e.core.set_fault(i as u32, 0, 0, 0)?;
            e.gpu.free(a.va)?;
            e.note(format!("{name} nth {nth}: {} / {}", r.is_ok(), r2.is_ok()));
            if let Some(m) = leftovers(e)? {
                return Err(EmuError::Check(format!(
                    "after core fault {name} (nth {nth}): {m}"
                )));
            }
        }
    }
    Ok(())
}

/// One knob of a fault-injection attribute: (file, armed, the kernel's default).
type Knob = (&'static str, &'static str, &'static str);

/// The kernel's fault-injection attributes the walk arms (debugfs directories), both counted by
/// the task's `fail-nth`: slab allocations (`CONFIG_FAILSLAB`) and page allocations
/// (`CONFIG_FAIL_PAGE_ALLOC`), each with the knobs that keep it from failing what the walk needs
/// failed, as (file, armed, the kernel's default): by default both leave allocations that may
/// sleep alone, and the page allocator's attribute those of order 0 too. User data pages are
/// highmem allocations and stay out (`ignore-gfp-highmem`); a page-table page of the walker's own
/// can still take the injected failure (the kernel retries the fault, or the ioctl's copy fails):
/// a registration failed that way must leave nothing behind all the same.
const FAULT_ATTRS: [(&str, &[Knob]); 2] = [
    (
        "failslab",
        &[
            ("ignore-gfp-wait", "N", "Y"),
            ("verbose", "0", "2"),
            ("times", "1", "1"),
        ],
    ),
    (
        "fail_page_alloc",
        &[
            ("ignore-gfp-wait", "N", "Y"),
            ("min-order", "0", "1"),
            ("ignore-gfp-highmem", "Y", "Y"),
            ("verbose", "0", "2"),
            ("times", "1", "1"),
        ],
    ),
];

/// Entries of one page-sized scatterlist chunk (`SG_MAX_SINGLE_ALLOC` on x86-64: a 4 KiB page of
/// 32-byte entries); `sg_alloc_table` takes a chunk of exactly that many from the page allocator,
/// a shorter one from the slab.
const SG_ENTRIES_PER_PAGE: u64 = 128;

/// Sets the knobs of every attribute this kernel has to their armed values (`arm`) or back to the
/// kernel's defaults; returns the attributes found.
fn arm_fault_attrs(arm: bool) -> Result<Vec<&'static str>> {
    let mut found = Vec::new();
    for (attr, knobs) in FAULT_ATTRS {
        let dir = format!("/sys/kernel/debug/{attr}");
        if !std::path::Path::new(&dir).is_dir() {
            continue;
        }
        for (file, armed, default) in knobs {
            let knob = format!("{dir}/{file}");
            std::fs::write(&knob, if arm { armed } else { default })
                .map_err(|source| EmuError::File { path: knob, source })?;
        }
        found.push(attr);
    }
    Ok(found)
}

/// Fails the n-th allocation (slab or page) of one registration of `pages` GPU pages, for every n
/// until a registration completes with a failure left unconsumed; every failed registration must
/// leave nothing behind. Returns (allocations of one registration, failures injected).
fn walk_allocations(e: &Env, nth: &std::fs::File, pages: u64) -> Result<(u32, u32)> {
    use std::os::unix::fs::FileExt;
    let path = "/proc/thread-self/fail-nth";
    let a = e.gpu.alloc(pages * GPU_PAGE_SIZE, 0)?;
    let mut failed = 0;
    let mut n = 1u32;
    let res = loop {
        if n > 400 {
            break Err(EmuError::Check(format!(
                "a registration of {pages} pages still allocating after 400 failures injected"
            )));
        }
        if let Err(source) = nth.write_at(n.to_string().as_bytes(), 0) {
            break Err(EmuError::File {
                path: path.into(),
                source,
            });
        }
        let r = e.reg(&a);
        let mut buf = [0u8; 16];
        let got = nth.read_at(&mut buf, 0).unwrap_or(0);
        let _ = nth.write_at(b"0", 0);
        let left: u32 = std::str::from_utf8(&buf[..got])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        match &r {
            Ok(m) => {
                if let Err(err) = e.core.deregister(m.handle, false) {
                    break Err(err);
                }
            }
            Err(_) => failed += 1,
        }
        match leftovers(e) {
            Ok(None) => {}
            Ok(Some(m)) => {
                break Err(EmuError::Check(format!(
                    "after failing allocation #{n} of a registration of {pages} pages: {m}"
                )))
            }
            Err(err) => break Err(err),
        }
        if left > 0 && r.is_ok() {
            break Ok((n - left, failed));
        }
        n += 1;
    };
    e.gpu.free(a.va)?;
    res
}

pub(super) fn enomem_walk(e: &Env) -> Result<()> {
    let armed = match arm_fault_attrs(true) {
        Ok(armed) => armed,
        Err(err) => {
            let _ = arm_fault_attrs(false);
            return Err(err);
        }
    };
    let res = (|| -> Result<()> {
        if !armed.contains(&"failslab") {
            return Err(EmuError::Check(
                "no /sys/kernel/debug/failslab: this kernel has no CONFIG_FAILSLAB".into(),
            ));
        }
        let path = "/proc/thread-self/fail-nth";
        // One open file for the whole walk: opening it again would itself allocate (and be failed).
        let nth = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| EmuError::File {
                path: path.into(),
                source,
            })?;
        let kinds = if armed.contains(&"fail_page_alloc") {
            "slab and page"
        } else {
            "slab (no CONFIG_FAIL_PAGE_ALLOC: page allocations not failed)"
        };
        // The scenario's size, then one whose SG table needs a page-backed chunk (and a chain).
        for pages in [e.opts.pages, SG_ENTRIES_PER_PAGE + SG_ENTRIES_PER_PAGE / 2] {
            let (allocs, failed) = walk_allocations(e, &nth, pages)?;
            e.note(format!(
                "{pages} pages: a registration makes about {allocs} {kinds} allocations; {failed} injected failures each failed it cleanly"
            ));
        }
        Ok(())
    })();
    let _ = arm_fault_attrs(false);
    res
}

//! Failures injected into the provider and the core: HW object creation, BAR1 exhaustion, each
//! provider call and errno, each core fault point, every slab allocation in turn.

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

pub(super) fn enomem_walk(e: &Env) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let knob = "/sys/kernel/debug/failslab/ignore-gfp-wait";
    std::fs::write(knob, "N").map_err(|source| EmuError::File {
        path: knob.into(),
        source,
    })?;
    let _ = std::fs::write("/sys/kernel/debug/failslab/verbose", "0");
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
    let a = e.alloc()?;
    let mut failed = 0;
    let mut n = 1u32;
    let res = loop {
        if n > 400 {
            break Err(EmuError::Check(
                "registration still allocating after 400 failures injected".into(),
            ));
        }
        nth.write_at(n.to_string().as_bytes(), 0)
            .map_err(|source| EmuError::File {
                path: path.into(),
                source,
            })?;
        let r = e.reg(&a);
        let mut buf = [0u8; 16];
        let got = nth.read_at(&mut buf, 0).unwrap_or(0);
        let _ = nth.write_at(b"0", 0);
        let left: u32 = std::str::from_utf8(&buf[..got])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        match &r {
            Ok(m) => e.core.deregister(m.handle, false)?,
            Err(_) => failed += 1,
        }
        if let Some(m) = leftovers(e)? {
            break Err(EmuError::Check(format!(
                "after failing slab allocation #{n} of a registration: {m}"
            )));
        }
        if left > 0 && r.is_ok() {
            e.note(format!(
                "a registration makes about {} slab allocations; {failed} injected failures each failed it cleanly",
                n - left
            ));
            break Ok(());
        }
        n += 1;
    };
    let _ = std::fs::write(knob, "Y");
    e.gpu.free(a.va)?;
    res
}

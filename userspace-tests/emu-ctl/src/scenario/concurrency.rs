//! Many threads at once: parallel registration and the register/free race stress with its
//! window figure.

use super::env::{check, finish, Env, WINDOW_MIN_SAMPLE};
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, Alloc};
use std::time::Duration;

pub(super) fn parallel_reg(e: &Env) -> Result<()> {
    let shared = e.alloc()?;
    let n = e.opts.iterations;
    std::thread::scope(|s| -> Result<()> {
        let mut ts = Vec::new();
        for t in 0..e.opts.threads {
            let shared = &shared;
            ts.push(s.spawn(move || -> Result<()> {
                let own = e.alloc()?;
                for i in 0..n {
                    let a = if (t + i) % 2 == 0 { &own } else { shared };
                    let mr = e.reg(a)?;
                    e.core.deregister(mr.handle, false)?;
                }
                e.gpu.free(own.va)?;
                Ok(())
            }));
        }
        for t in ts {
            t.join()
                .map_err(|_| EmuError::Check("worker panicked".into()))??;
        }
        Ok(())
    })?;
    e.gpu.free(shared.va)?;
    let cs = e.core.stats()?;
    let want = u64::from(e.opts.threads) * u64::from(n);
    check(cs.regs_ok == want, || {
        format!("{} registrations succeeded, expected {want}", cs.regs_ok)
    })
}

/// Registrations race frees of the memory they register (the churn thread frees and replaces one
/// of two allocations every few milliseconds); then, with the churn stopped, one more registration
/// must succeed. The churn starts once one registration has succeeded: on a slow guest a
/// registration can outlast the churn period and lose every race, which says nothing about the
/// client, so "some registration succeeded" holds there too.
pub(super) fn race_stress(e: &Env) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let won = AtomicBool::new(false);
    let slots: Vec<std::sync::Mutex<Option<Alloc>>> =
        (0..2).map(|_| std::sync::Mutex::new(None)).collect();
    for s in &slots {
        *s.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.alloc()?);
    }
    let n = e.opts.iterations;
    let (ok, failed) = std::thread::scope(|s| -> Result<(u32, u32)> {
        let churn = s.spawn(|| -> Result<()> {
            while !won.load(Ordering::SeqCst) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let slot = &slots[i % slots.len()];
                let old = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(a) = old {
                    e.gpu.free(a.va)?;
                }
                let a = e.alloc()?;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(a);
                i += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        });
        let mut ws = Vec::new();
        for t in 0..e.opts.threads.max(1) {
            let (slots, won) = (&slots, &won);
            ws.push(s.spawn(move || -> (u32, u32) {
                let (mut ok, mut failed) = (0, 0);
                for i in 0..n {
                    let a = *slots[(t as usize + i as usize) % slots.len()]
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    let Some(a) = a else { continue };
                    match e.reg(&a) {
                        Ok(mr) => {
                            ok += 1;
                            won.store(true, Ordering::SeqCst);
                            let _ = finish(e, mr.handle);
                        }
                        Err(_) => failed += 1,
                    }
                }
                (ok, failed)
            }));
        }
        let mut tot = (0, 0);
        for w in ws {
            let (o, f) = w
                .join()
                .map_err(|_| EmuError::Check("worker panicked".into()))?;
            tot.0 += o;
            tot.1 += f;
        }
        stop.store(true, Ordering::Relaxed);
        churn
            .join()
            .map_err(|_| EmuError::Check("churn thread panicked".into()))??;
        Ok(tot)
    })?;
    e.note(format!(
        "{ok} registrations succeeded, {failed} lost the race to a free"
    ));
    // No free can come now: the client must still register and deregister.
    let after = match *slots[0].lock().unwrap_or_else(|p| p.into_inner()) {
        Some(a) => e.reg(&a).and_then(|mr| {
            let inv = e.invalidating(&mr);
            finish(e, mr.handle)?;
            inv
        }),
        None => Err(EmuError::Check("no allocation left after the churn".into())),
    };

    for s in &slots {
        if let Some(a) = s.lock().unwrap_or_else(|p| p.into_inner()).take() {
            e.gpu.free(a.va)?;
        }
    }
    check(ok > 0, || "no registration succeeded".into())?;
    let invalidating = after
        .map_err(|err| EmuError::Check(format!("registration after the churn failed: {err}")))?;
    window_figure(e, u64::from(ok) + u64::from(failed), invalidating)
}

/// The NVIDIA API's registration window as race-stress met it: every `dma_map_pages` whose table
/// another thread's free callback freed is a `dma_map_uaf` violation of the provider (on a real
/// node, a use-after-free read inside nvidia.ko and, whenever RM still accepts the stale UUID, a
/// use-after-free write: docs/design.md). Notes the figure "window hits per 100k registrations".
/// A persistent client has no callback and must show none; an invalidating client cannot close
/// the window, so its hits are accounted for here (the final check does not count them again)
/// and the run fails only above `window_bound` (from WINDOW_MIN_SAMPLE registrations on).
/// `invalidating`: whether the client claimed the last MR as an invalidating client.
fn window_figure(e: &Env, registrations: u64, invalidating: bool) -> Result<()> {
    let hits = e.gpu.stats()?.violations[nvp2p::V_DMA_MAP_UAF];
    let per100k = if registrations == 0 {
        0.0
    } else {
        hits as f64 * 100_000.0 / registrations as f64
    };
    let bound = e.opts.window_bound;
    e.note(format!(
        "window hits per 100k registrations: {per100k:.0} ({hits} of {registrations}; bound {bound:.0} for an invalidating client, 0 for a persistent one)"
    ));
    // The core's own defect on the same race: an invalidate that waited on mapping_lock while the
    // registration failed and ib_peer_umem_release cleared ib_peer_client (a NULL dereference in
    // every xarray core; docs/emulators.md). Counted by the core emulator as core_bug_hits.
    let core_hits = e.core.stats()?.core_bug_hits;
    let core_per100k = if registrations == 0 {
        0.0
    } else {
        core_hits as f64 * 100_000.0 / registrations as f64
    };
    e.note(format!(
        "core defect hits per 100k registrations (invalidate after ib_peer_umem_release): {core_per100k:.0} ({core_hits} of {registrations})"
    ));
    if !invalidating {
        check(core_hits == 0, || {
            format!(
                "{core_hits} invalidations reached the core after release with a persistent client"
            )
        })?;
        return check(hits == 0, || {
            format!("{hits} dma_map_pages calls met the NVIDIA API window with a persistent client (it has no free callback: there is no window to meet)")
        });
    }
    if registrations >= WINDOW_MIN_SAMPLE && per100k > bound {
        return Err(EmuError::Check(format!(
            "{hits} dma_map_pages calls met the NVIDIA API window in {registrations} registrations: {per100k:.0} per 100k, above the bound of {bound:.0} (each is a use-after-free in nvidia.ko on a real node)"
        )));
    }
    if let Ok(mut a) = e.accounted.lock() {
        a.push(nvp2p::VIOLATIONS[nvp2p::V_DMA_MAP_UAF].0);
    }
    Ok(())
}

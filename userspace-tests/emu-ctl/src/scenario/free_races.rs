//! A free ("cudaFree") racing each step of a registration or a deregistration.

use super::env::{check, finish, wait_until, Env};
use crate::error::{EmuError, Result};
use crate::peer_mem::{self, qflags, state, RegParams};
use std::time::Duration;

pub(super) fn free_then_dereg(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let inval = e.invalidating(&mr)?;
    let cbs = e.gpu.free(a.va)?;
    let q = e.core.query(mr.handle)?;
    e.note(format!(
        "free: {cbs} callback(s); MR now {} (invalidating client: {inval})",
        state::name(q.state)
    ));
    if inval {
        check(cbs == 1, || {
            format!("free ran {cbs} free callbacks for one pinned MR, expected 1")
        })?;
        check(q.state != state::MAPPED, || {
            "MR still mapped after its memory was freed (rule: the callback must invalidate)".into()
        })?;
        check(
            q.flags & qflags::REVOKED != 0 || q.state == state::TORN_DOWN,
            || {
                "no HW revoke before the free returned (rule: DMA stopped before the pages go)"
                    .into()
            },
        )?;
    } else {
        check(cbs == 0, || {
            format!("free ran {cbs} callbacks for a persistent pin")
        })?;
        check(q.state == state::MAPPED, || {
            format!(
                "persistent MR is {} after free, expected still mapped",
                state::name(q.state)
            )
        })?;
        let pinned = e
            .gpu
            .list_pins()?
            .iter()
            .any(|p| p.alloc_handle == a.handle && p.persistent != 0);
        check(pinned, || {
            "persistent pin gone after the free (rule: persistent pins outlive the free until put)"
                .into()
        })?;
    }
    finish(e, mr.handle)?;
    Ok(())
}

pub(super) fn free_during_reg(e: &Env, point: &str) -> Result<()> {
    let a = e.alloc()?;
    let p = e.delay(point)?;
    let before = e.hits(p)?;
    let (reg, cbs) = std::thread::scope(|s| -> Result<_> {
        let t = s.spawn(|| e.reg(&a));
        let hit = e.wait_hit(p, before)?;
        e.note(format!("delay point {point} reached: {hit}"));
        let cbs = e.gpu.free(a.va)?;
        let reg = t
            .join()
            .map_err(|_| EmuError::Check("registration thread panicked".into()))?;
        Ok((reg, cbs))
    })?;
    e.core.set_delay(p, 0)?;
    match reg {
        Ok(mr) => {
            let q = e.core.query(mr.handle)?;
            e.note(format!(
                "registration succeeded, MR {} after free ({cbs} callbacks)",
                state::name(q.state)
            ));
            if q.flags & qflags::INVALIDATING != 0 {
                check(q.state != state::MAPPED || cbs == 0, || {
                    "MR is still mapped although its memory was freed with a callback (rule: invalidate reaches the core)".into()
                })?;
            }
            finish(e, mr.handle)?;
        }
        Err(err) => e.note(format!(
            "registration failed cleanly: {err} ({cbs} callbacks)"
        )),
    }
    Ok(())
}

pub(super) fn hold_free(e: &Env, fail: bool) -> Result<()> {
    let a = e.alloc()?;
    let maps = |e: &Env| -> Result<u64> { Ok(e.gpu.stats()?.calls[4]) };
    let before = maps(e)?;
    let (reg, cbs) = std::thread::scope(|s| -> Result<_> {
        let t = s.spawn(|| {
            let mut p = RegParams::mr(a.va, a.size);
            p.flags = peer_mem::reg_flags::HOLD;
            e.core.register(p)
        });
        wait_until(Duration::from_secs(30), || Ok(maps(e)? > before))?;
        std::thread::sleep(Duration::from_millis(300));
        let f = s.spawn(|| e.gpu.free(a.va));
        std::thread::sleep(Duration::from_millis(u64::from(e.opts.delay_ms)));
        e.note("activating the held registration");
        e.core.activate(0, fail)?;
        let reg = t
            .join()
            .map_err(|_| EmuError::Check("registration thread panicked".into()))?;
        let cbs = f
            .join()
            .map_err(|_| EmuError::Check("free thread panicked".into()))??;
        Ok((reg, cbs))
    })?;
    match (reg, fail) {
        (Ok(mr), false) => {
            let q = e.core.query(mr.handle)?;
            e.note(format!(
                "held MR activated, now {} ({cbs} callbacks)",
                state::name(q.state)
            ));
            finish(e, mr.handle)?;
        }
        (Ok(mr), true) => {
            e.core.deregister(mr.handle, false)?;
            return Err(EmuError::Check(
                "registration succeeded although activation was failed".into(),
            ));
        }
        (Err(err), _) => e.note(format!("registration ended with {err} ({cbs} callbacks)")),
    }
    Ok(())
}

pub(super) fn dereg_vs_free(e: &Env, point: &str) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    if point == "in_stop" && !e.invalidating(&mr)? {
        // Non-invalidating MRs skip the stop-notifier: plain dereg, then free.
        e.note("in_stop does not apply to a non-invalidating MR: dereg then free");
        e.core.deregister(mr.handle, false)?;
        e.gpu.free(a.va)?;
        return Ok(());
    }
    let p = e.delay(point)?;
    let before = e.hits(p)?;
    let cbs = std::thread::scope(|s| -> Result<u32> {
        let t = s.spawn(|| e.core.deregister(mr.handle, false));
        let hit = e.wait_hit(p, before)?;
        e.note(format!("delay point {point} reached: {hit}"));
        let cbs = e.gpu.free(a.va)?;
        t.join()
            .map_err(|_| EmuError::Check("dereg thread panicked".into()))??;
        Ok(cbs)
    })?;
    e.note(format!(
        "free ran {cbs} callback(s) while dereg was at {point}"
    ));
    Ok(())
}

pub(super) fn dereg_vs_free_unmap(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let mut cfg = e.gpu.config()?;
    let saved = cfg;
    cfg.unmap_delay_ns = u64::from(e.opts.delay_ms) * 1_000_000;
    e.gpu.set_config(cfg)?;
    let unmaps = |e: &Env| -> Result<u64> { Ok(e.gpu.stats()?.calls[5]) };
    let before = unmaps(e)?;
    let res = std::thread::scope(|s| -> Result<()> {
        let t = s.spawn(|| e.core.deregister(mr.handle, false));
        let hit = wait_until(Duration::from_secs(30), || Ok(unmaps(e)? > before))?;
        e.note(format!("dma_unmap_pages running: {hit}"));
        let cbs = e.gpu.free(a.va)?;
        e.note(format!("free ran {cbs} callback(s) during dma_unmap_pages"));
        t.join()
            .map_err(|_| EmuError::Check("dereg thread panicked".into()))?
    });
    e.gpu.set_config(saved)?;
    res
}

pub(super) fn free_vs_dereg(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let inval = e.invalidating(&mr)?;
    let p = e.delay("invalidate_locked")?;
    let before = e.hits(p)?;
    std::thread::scope(|s| -> Result<()> {
        let f = s.spawn(|| e.gpu.free(a.va));
        if inval {
            let hit = e.wait_hit(p, before)?;
            e.note(format!("invalidate holds mapping_lock: {hit}"));
        }
        finish(e, mr.handle)?;
        let cbs = f
            .join()
            .map_err(|_| EmuError::Check("free thread panicked".into()))??;
        e.note(format!("free ran {cbs} callback(s)"));
        Ok(())
    })
}

pub(super) fn dereg_then_free(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    e.core.deregister(mr.handle, false)?;
    let cbs = e.gpu.free(a.va)?;
    check(cbs == 0, || {
        format!("free after dereg ran {cbs} callbacks (rule: after put_pages no callback may fire)")
    })
}

//! Other processes and contexts: exit order, process exit under live MRs, a deregistration
//! from another process or a kworker, unloading the client under a live MR.

use super::env::{check, finish, wait_until, Env};
use crate::error::{EmuError, Result};
use crate::nvp2p::{Gpu, GPU_PAGE_SIZE};
use crate::peer_mem::{Core, RegParams};
use std::time::Duration;

/// Runs `f` in a forked child; returns its exit status (0 = ok).
pub(super) fn in_child(f: impl FnOnce() -> Result<()>) -> Result<i32> {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: called from a single-threaded point of the scenario (no other thread of ours is
    // running); the child only makes syscalls through our wrappers and leaves with _exit.
    match unsafe { fork() }.map_err(|errno| EmuError::Ioctl { op: "fork", errno })? {
        ForkResult::Child => {
            let code = match f() {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("child: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
        ForkResult::Parent { child } => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, c)) => Ok(c),
            Ok(other) => Err(EmuError::Check(format!(
                "child ended abnormally: {other:?}"
            ))),
            Err(errno) => Err(EmuError::Ioctl {
                op: "waitpid",
                errno,
            }),
        },
    }
}

pub(super) fn exit_order(e: &Env, gpu_first: bool) -> Result<()> {
    let pages = e.opts.pages;
    // At exit the kernel drops the address space first (the GPU mapping's file reference), then
    // closes descriptors in ascending order: the device opened first is released first.
    let code = in_child(|| {
        let (gpu, core) = if gpu_first {
            let g = Gpu::open()?;
            (g, Core::open()?)
        } else {
            let c = Core::open()?;
            (Gpu::open()?, c)
        };
        let a = gpu.alloc(pages * GPU_PAGE_SIZE, 0)?;
        core.register(RegParams::mr(a.va, a.size))?;
        core.register(RegParams::mr(a.va, GPU_PAGE_SIZE))?;
        // Leave without closing anything: the exit path does it.
        std::mem::forget(gpu);
        std::mem::forget(core);
        Ok(())
    })?;
    check(code == 0, || format!("child failed (exit {code})"))?;
    let cs = e.core.stats()?;
    let ps = e.gpu.stats()?;
    e.note(format!(
        "after child exit: {} live MRs, {} free callbacks, {} invalidate calls",
        cs.live_mrs, ps.callbacks, cs.invalidate_calls
    ));
    Ok(())
}

pub(super) fn process_exit(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let b = e.alloc()?;
    let m1 = e.reg(&a)?;
    let m2 = e.reg(&b)?;
    let inval = e.invalidating(&m1)?;
    let r = e.gpu.destroy_context(0)?;
    e.note(format!(
        "context destroy: {} callbacks, {} allocations",
        r.callbacks, r.allocs
    ));
    check(r.allocs == 2, || {
        format!("context destroy freed {} allocations, expected 2", r.allocs)
    })?;
    if inval {
        check(r.callbacks == 2, || {
            format!("context destroy ran {} callbacks for 2 MRs", r.callbacks)
        })?;
    }
    for m in [m1, m2] {
        finish(e, m.handle)?;
    }
    let a = e.alloc()?;
    let m = e.reg(&a)?;
    let r = e.gpu.process_exit(0)?;
    e.note(format!("simulated exit: {} callbacks", r.callbacks));
    finish(e, m.handle)?;
    Ok(())
}

pub(super) fn dereg_other(e: &Env, kworker: bool) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    if kworker {
        e.core.deregister(mr.handle, true)?;
        // The kworker teardown is asynchronous: wait for it.
        wait_until(
            Duration::from_secs(30),
            || Ok(e.core.stats()?.live_mrs == 0),
        )?;
    } else {
        let h = mr.handle;
        let core = &e.core;
        let code = in_child(|| core.deregister(h, false))?;
        check(code == 0, || {
            format!("dereg in the child failed (exit {code})")
        })?;
    }
    let cbs = e.gpu.free(a.va)?;
    e.note(format!(
        "owner freed the memory after a foreign dereg: {cbs} callback(s)"
    ));
    Ok(())
}

pub(super) fn unload_live(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let name = std::ffi::CString::new(e.opts.module.clone())
        .map_err(|_| EmuError::Invalid("bad module name".into()))?;
    let r = nix::kmod::delete_module(&name, nix::kmod::DeleteModuleFlags::O_NONBLOCK);
    e.note(format!("rmmod {} with a live MR: {r:?}", e.opts.module));
    let refused = matches!(r, Err(nix::errno::Errno::EBUSY | nix::errno::Errno::EAGAIN));
    if r.is_ok() {
        return Err(EmuError::Check(format!(
            "module {} unloaded with a live MR (rule: a client holds a module reference per acquired context)",
            e.opts.module
        )));
    }
    check(refused, || {
        format!("rmmod {} failed oddly: {r:?}", e.opts.module)
    })?;
    e.core.deregister(mr.handle, false)?;
    e.gpu.free(a.va)?;
    Ok(())
}

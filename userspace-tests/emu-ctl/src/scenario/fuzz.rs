//! The fuzzer: seeded random registration sequences against the loaded client, beside the fixed
//! scenarios.
//!
//! Each sequence draws its operations from its own seed: allocate, register a random sub-range
//! (any offset and length, writable or not, with or without invalidation support, now and then a
//! non-PCI DMA device), deregister (from this process, a forked child or a kworker), free under
//! live MRs, bursts of threads registering while the memory they register is freed, a child
//! process that registers and exits without cleaning up, `rmmod` of the client under live MRs or
//! while NVIDIA can still call back into it (after a failed put),
//! and the emulators' fault injection armed at a random provider call or core fault point. The
//! sequence then tears everything down and is held to the invariants every scenario is held to
//! (no violation recorded by either emulator, nothing live at the provider or the core, every
//! acquire released) and to the client's own books (nvpeer's debugfs `stats`: no live
//! registration, nothing pinned, every claim released).
//!
//! A run prints its seed; `--seed S` replays it. Each sequence's seed is derived from the run's
//! and printed on failure with the operations that led there: `--seed <sequence seed>
//! --iterations 1` replays that sequence alone. The operations are a function of the seed and of
//! what each operation returned; thread interleavings in bursts are not (a failure there may need
//! a few replays).

use super::env::{check, finish, wait_until, Env};
use super::processes::in_child;
use super::runner::{leftovers, recorded};
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, fault_mode, Alloc, Gpu, GPU_PAGE_SIZE};
use crate::peer_mem::{self, device, peer_flags, qflags, Core, RegParams};
use nvpeer_uapi::debugfs;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::Path;
use std::time::{Duration, Instant};

/// At most this many live allocations and MRs in a sequence.
const MAX_ALLOCS: usize = 6;
const MAX_MRS: usize = 16;
/// Operations per sequence.
const OPS: std::ops::RangeInclusive<u32> = 12..=48;

/// One MR of the sequence.
struct LiveMr {
    handle: u32,
    /// Gone from the core already (a kworker or a child deregistered it).
    gone: bool,
}

/// What a sequence holds.
struct Seq<'a> {
    e: &'a Env,
    rng: StdRng,
    allocs: Vec<Alloc>,
    mrs: Vec<LiveMr>,
    /// What happened, one line per operation (printed on failure).
    trail: Vec<String>,
}

/// `nvpeer emu scenario fuzz`: sequences until `--seconds` ran out (at least one), or
/// `--iterations` of them when `--seconds` is 0.
pub(super) fn fuzz(e: &Env) -> Result<()> {
    let seed = e.opts.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    e.note(format!("seed {seed} (replay: --seed {seed})"));
    let invalidating = client_invalidates(e)?;
    e.note(format!(
        "the client claims INVAL_SUPP registrations as {}",
        if invalidating {
            "an invalidating client"
        } else {
            "a persistent client"
        }
    ));
    let deadline = Instant::now() + Duration::from_secs(u64::from(e.opts.seconds));
    let mut master = StdRng::seed_from_u64(seed);
    let (mut sequences, mut ops) = (0u32, 0u64);
    loop {
        let seq_seed: u64 = master.random();
        let mut s = Seq {
            e,
            rng: StdRng::seed_from_u64(seq_seed),
            allocs: Vec::new(),
            mrs: Vec::new(),
            trail: Vec::new(),
        };
        let r = s
            .run()
            .and_then(|()| s.teardown())
            .and_then(|()| books(e, invalidating));
        ops += s.trail.len() as u64;
        if let Err(err) = r {
            // Whatever the sequence left, so that the runner's own checks see a clean slate.
            let _ = s.teardown();
            e.note(format!(
                "sequence {sequences} (seed {seq_seed}; replay alone: --seed {seq_seed} --iterations 1 --seconds 0) failed after:"
            ));
            for t in &s.trail {
                e.note(format!("  {t}"));
            }
            return Err(EmuError::Check(format!(
                "fuzz seed {seed}, sequence {sequences} (seed {seq_seed}): {err}"
            )));
        }
        sequences += 1;
        let done = if e.opts.seconds == 0 {
            sequences >= e.opts.iterations.max(1)
        } else {
            Instant::now() >= deadline
        };
        if done {
            break;
        }
    }
    e.note(format!("{sequences} sequences, {ops} operations"));
    Ok(())
}

impl Seq<'_> {
    fn run(&mut self) -> Result<()> {
        let n = self.rng.random_range(OPS);
        for _ in 0..n {
            self.step()?;
        }
        Ok(())
    }

    fn step(&mut self) -> Result<()> {
        let roll = self.rng.random_range(0..100u32);
        match roll {
            0..=14 => self.alloc(),
            15..=44 => self.reg(),
            45..=59 => self.dereg(),
            60..=69 => self.free(),
            70..=74 => self.burst(),
            75..=78 => self.child_exit(),
            79..=81 => self.foreign_dereg(),
            82..=83 => self.kworker_dereg(),
            84..=90 => self.fault_provider(),
            91..=95 => self.fault_core(),
            _ => self.rmmod(),
        }
    }

    fn note(&mut self, s: String) {
        self.trail.push(s);
    }

    fn alloc(&mut self) -> Result<()> {
        if self.allocs.len() >= MAX_ALLOCS {
            return self.free();
        }
        let pages = self.rng.random_range(1..=8u64);
        let a = self.e.gpu.alloc(pages * GPU_PAGE_SIZE, 0)?;
        self.note(format!("alloc {pages} pages at {:#x}", a.va));
        self.allocs.push(a);
        Ok(())
    }

    /// A random registration of part of a live allocation.
    fn params(&mut self, a: &Alloc) -> RegParams {
        let off = self.rng.random_range(0..a.size);
        let len = self.rng.random_range(1..=a.size - off);
        let mut p = RegParams::mr(a.va + off, len);
        if self.rng.random_bool(0.2) {
            p.access = 0;
        }
        if self.rng.random_bool(0.15) {
            p.peer_flags = peer_flags::ALLOW;
        }
        if self.rng.random_bool(0.03) {
            p.device = device::NONPCI;
        }
        p
    }

    fn reg(&mut self) -> Result<()> {
        if self.allocs.is_empty() || self.mrs.len() >= MAX_MRS {
            return self.alloc();
        }
        let a = self.allocs[self.rng.random_range(0..self.allocs.len())];
        let p = self.params(&a);
        let what = format!(
            "reg {:#x}+{:#x} access {} flags {} device {}",
            p.addr, p.length, p.access, p.peer_flags, p.device
        );
        match self.e.core.register(p) {
            Ok(mr) => {
                // Hazard H6: GPU memory through a DMA device that is not a PCI function is
                // refused (nothing can map it for that device).
                if p.device == device::NONPCI && !host_claimed(self.e, mr.handle)? {
                    self.note(format!("{what}: registered ({})", mr.handle));
                    self.mrs.push(LiveMr {
                        handle: mr.handle,
                        gone: false,
                    });
                    return Err(EmuError::Check(
                        "GPU memory registered for a non-PCI DMA device (hazard H6)".into(),
                    ));
                }
                self.note(format!("{what}: mr {}", mr.handle));
                self.mrs.push(LiveMr {
                    handle: mr.handle,
                    gone: false,
                });
            }
            Err(err) => self.note(format!("{what}: refused ({err})")),
        }
        Ok(())
    }

    fn pick_mr(&mut self) -> Option<LiveMr> {
        let live: Vec<usize> = (0..self.mrs.len()).filter(|&i| !self.mrs[i].gone).collect();
        if live.is_empty() {
            return None;
        }
        let i = live[self.rng.random_range(0..live.len())];
        Some(self.mrs.swap_remove(i))
    }

    fn dereg(&mut self) -> Result<()> {
        let Some(m) = self.pick_mr() else {
            return self.reg();
        };
        self.note(format!("dereg mr {}", m.handle));
        finish(self.e, m.handle)
    }

    fn free(&mut self) -> Result<()> {
        if self.allocs.is_empty() {
            return self.alloc();
        }
        let a = self
            .allocs
            .swap_remove(self.rng.random_range(0..self.allocs.len()));
        let callbacks = self.e.gpu.free(a.va)?;
        self.note(format!(
            "free {:#x} under {} live MR(s): {callbacks} callback(s)",
            a.va,
            self.mrs.iter().filter(|m| !m.gone).count()
        ));
        Ok(())
    }

    /// Threads register and deregister parts of the live allocations while this thread frees
    /// one of them (registrations may lose that race; deregistrations must not fail).
    fn burst(&mut self) -> Result<()> {
        if self.allocs.is_empty() {
            return self.alloc();
        }
        let threads = self.rng.random_range(2..=4u32);
        let per = self.rng.random_range(2..=6u32);
        let victim = self.rng.random_range(0..self.allocs.len());
        let plans: Vec<Vec<RegParams>> = (0..threads)
            .map(|_| {
                (0..per)
                    .map(|_| {
                        let a = self.allocs[self.rng.random_range(0..self.allocs.len())];
                        let mut p = self.params(&a);
                        p.device = device::PCI;
                        p
                    })
                    .collect()
            })
            .collect();
        let freed = self.allocs.swap_remove(victim);
        let e = self.e;
        let (ok, lost) = std::thread::scope(|s| -> Result<(u32, u32)> {
            let workers: Vec<_> = plans
                .iter()
                .map(|plan| {
                    s.spawn(move || -> Result<(u32, u32)> {
                        let (mut ok, mut lost) = (0, 0);
                        for p in plan {
                            match e.core.register(*p) {
                                Ok(mr) => {
                                    ok += 1;
                                    finish(e, mr.handle)?;
                                }
                                Err(_) => lost += 1,
                            }
                        }
                        Ok((ok, lost))
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(2));
            e.gpu.free(freed.va)?;
            let mut tot = (0, 0);
            for w in workers {
                let (o, l) = w
                    .join()
                    .map_err(|_| EmuError::Check("burst worker panicked".into()))??;
                tot.0 += o;
                tot.1 += l;
            }
            Ok(tot)
        })?;
        self.note(format!(
            "burst: {threads} threads x {per} registrations while {:#x} was freed: {ok} ok, {lost} lost the race",
            freed.va
        ));
        Ok(())
    }

    /// A child process registers GPU memory of its own and exits without cleaning up (its
    /// registrations may fail where a fault is armed: the emulators' faults are global).
    fn child_exit(&mut self) -> Result<()> {
        let pages = self.rng.random_range(1..=4u64);
        let regs = self.rng.random_range(1..=3u32);
        let code = in_child(|| {
            let gpu = Gpu::open()?;
            let core = Core::open()?;
            let a = gpu.alloc(pages * GPU_PAGE_SIZE, 0)?;
            for i in 0..regs {
                let off = u64::from(i) * GPU_PAGE_SIZE % a.size;
                let _ = core.register(RegParams::mr(a.va + off, a.size - off));
            }
            std::mem::forget(gpu);
            std::mem::forget(core);
            Ok(())
        })?;
        self.note(format!(
            "child: {pages} pages, {regs} MR(s), exit without cleanup: status {code}"
        ));
        check(code == 0, || format!("the child failed (exit {code})"))
    }

    /// A forked child deregisters one of this process's MRs (a put from a foreign process, H5).
    fn foreign_dereg(&mut self) -> Result<()> {
        let Some(m) = self.pick_mr() else {
            return self.reg();
        };
        let core = &self.e.core;
        let code = in_child(|| core.deregister(m.handle, false))?;
        self.note(format!("dereg mr {} from a child: status {code}", m.handle));
        self.mrs.push(LiveMr {
            handle: m.handle,
            gone: code == 0,
        });
        check(code == 0, || {
            format!("the child's dereg of mr {} failed (exit {code})", m.handle)
        })
    }

    /// A kworker deregisters an MR (uverbs disassociate, asynchronous).
    fn kworker_dereg(&mut self) -> Result<()> {
        let Some(m) = self.pick_mr() else {
            return self.reg();
        };
        self.e.core.deregister(m.handle, true)?;
        self.note(format!("dereg mr {} from a kworker", m.handle));
        self.mrs.push(LiveMr {
            handle: m.handle,
            gone: true,
        });
        Ok(())
    }

    fn fault_provider(&mut self) -> Result<()> {
        // Every call that can fail. `put_pages_persistent` only against nvpeer, which tries a
        // failed persistent put once more (src/mr.rs; a fault here fires once): a client that
        // does not leaves NVIDIA that pin by the API's contract (no callback can end it), a leak
        // the provider would rightly record whatever the client did.
        let nvpeer = self.e.opts.module == "nvpeer";
        // (dma_unmap_pages cannot fail on valid arguments: nvp2p::real_errnos)
        let ops: Vec<u32> = (0..nvp2p::FAULT_OPS as u32)
            .filter(|&op| nvpeer || nvp2p::OPS[op as usize] != "put_pages_persistent")
            .filter(|&op| !nvp2p::real_errnos(op).is_empty())
            .collect();
        let op = ops[self.rng.random_range(0..ops.len())];
        let errs = nvp2p::real_errnos(op);
        let err = errs[self.rng.random_range(0..errs.len())];
        let skip = self.rng.random_range(0..3u32);
        self.e.gpu.set_fault(op, fault_mode::ONCE, err, 1, skip)?;
        self.note(format!(
            "fault: provider {} fails with {err} after {skip} call(s)",
            nvp2p::OPS[op as usize]
        ));
        Ok(())
    }

    fn fault_core(&mut self) -> Result<()> {
        // (client_alloc and sysfs fire at client registration only)
        let points: Vec<u32> = (0..peer_mem::FAULT_POINTS.len() as u32)
            .filter(|&i| !matches!(peer_mem::FAULT_POINTS[i as usize], "client_alloc" | "sysfs"))
            .collect();
        let point = points[self.rng.random_range(0..points.len())];
        let nth = self.rng.random_range(1..=3u32);
        self.e.core.set_fault(point, 0, nth, 1)?;
        self.note(format!(
            "fault: core {} fails at its {nth}th use",
            peer_mem::FAULT_POINTS[point as usize]
        ));
        Ok(())
    }

    /// `rmmod` of the client must be refused while MRs are live, and while NVIDIA holds a free
    /// callback into it (a non-persistent pin it has not put: after a failed put NVIDIA keeps the
    /// pin and the callback, and calls it when the memory is freed).
    fn rmmod(&mut self) -> Result<()> {
        // Only an MR a peer client claimed (and has not released: a 4.9 core tears an invalidated
        // MR down inside invalidate) holds its module; with none, unloading would be legal unless
        // NVIDIA can still call back.
        let claimed = self.mrs.iter().filter(|m| !m.gone).any(|m| {
            self.e
                .core
                .query(m.handle)
                .is_ok_and(|q| q.flags & qflags::PEER != 0 && q.state != peer_mem::state::TORN_DOWN)
        });
        let stats = self.e.gpu.stats()?;
        let callbacks = stats.live_pins.saturating_sub(stats.live_persistent_pins);
        if !claimed && callbacks == 0 {
            if self.mrs.iter().all(|m| m.gone) {
                return self.reg();
            }
            return Ok(());
        }
        let name = std::ffi::CString::new(self.e.opts.module.clone())
            .map_err(|_| EmuError::Invalid("bad module name".into()))?;
        let r = nix::kmod::delete_module(&name, nix::kmod::DeleteModuleFlags::O_NONBLOCK);
        self.note(format!(
            "rmmod {} under live MRs ({}) and {callbacks} NVIDIA callback(s) into it: {r:?}",
            self.e.opts.module,
            if claimed { "claimed" } else { "none claimed" }
        ));
        check(
            matches!(r, Err(nix::errno::Errno::EBUSY | nix::errno::Errno::EAGAIN)),
            || {
                format!(
                    "rmmod {} with {callbacks} NVIDIA free callback(s) registered and MRs {}: {r:?} \
                     (rule: a client holds a module reference per acquired context and per pin \
                     NVIDIA can still call back for)",
                    self.e.opts.module,
                    if claimed { "claimed" } else { "not claimed" }
                )
            },
        )
    }

    /// Disarms the faults, deregisters every MR, frees every allocation, waits for the kworkers.
    fn teardown(&mut self) -> Result<()> {
        for op in 0..nvp2p::FAULT_OPS as u32 {
            self.e.gpu.set_fault(op, fault_mode::OFF, 0, 0, 0)?;
        }
        for p in 0..peer_mem::FAULT_POINTS.len() as u32 {
            self.e.core.set_fault(p, 0, 0, 0)?;
        }
        let mut first_err = None;
        for m in std::mem::take(&mut self.mrs) {
            if !m.gone {
                if let Err(err) = finish(self.e, m.handle) {
                    first_err.get_or_insert(format!("dereg of mr {} at teardown: {err}", m.handle));
                }
            }
        }
        for a in std::mem::take(&mut self.allocs) {
            if let Err(err) = self.e.gpu.free(a.va) {
                first_err.get_or_insert(format!("free of {:#x} at teardown: {err}", a.va));
            }
        }
        let settled = wait_until(Duration::from_secs(30), || {
            Ok(self.e.core.stats()?.live_mrs == 0)
        })?;
        if !settled {
            first_err.get_or_insert("MRs still live 30 s after teardown (kworker deregs)".into());
        }
        match first_err {
            Some(m) => Err(EmuError::Check(m)),
            None => Ok(()),
        }
    }
}

/// Whether the loaded client claims an MR that supports invalidation as an invalidating client
/// (then the NVIDIA API's window can be met: [`books`]): one registration, queried and undone.
fn client_invalidates(e: &Env) -> Result<bool> {
    let a = e.gpu.alloc(GPU_PAGE_SIZE, 0)?;
    let r = e.core.register(RegParams::mr(a.va, a.size)).and_then(|mr| {
        let q = e.core.query(mr.handle);
        finish(e, mr.handle)?;
        Ok(q?.flags & qflags::INVALIDATING != 0)
    });
    e.gpu.free(a.va)?;
    r
}

/// Whether the core took the MR through GUP (host memory), not a peer client.
fn host_claimed(e: &Env, handle: u32) -> Result<bool> {
    Ok(e.core.query(handle)?.state == peer_mem::state::HOST)
}

/// After a sequence: nothing recorded by either emulator, nothing live, and the client's books
/// balanced (nvpeer's debugfs counters, where it is the loaded client). With an invalidating
/// client, `dma_map_pages` calls that met the NVIDIA API's own window (a free callback between
/// get_pages and dma_map: docs/design.md, no client can close it) are counted, not failed, as
/// race-stress counts them; a persistent client has no callback and must show none.
fn books(e: &Env, invalidating: bool) -> Result<()> {
    let window = format!("{}: provider:", nvp2p::VIOLATIONS[nvp2p::V_DMA_MAP_UAF].0);
    let found: Vec<String> = recorded(e)?
        .into_iter()
        .filter(|f| !(invalidating && f.starts_with(&window)))
        .collect();
    if invalidating && e.gpu.stats()?.violations[nvp2p::V_DMA_MAP_UAF] != 0 {
        if let Ok(mut a) = e.accounted.lock() {
            if !a.contains(&nvp2p::VIOLATIONS[nvp2p::V_DMA_MAP_UAF].0) {
                a.push(nvp2p::VIOLATIONS[nvp2p::V_DMA_MAP_UAF].0);
            }
        }
    }
    if !found.is_empty() {
        return Err(EmuError::Check(format!(
            "violation recorded: {}",
            found.join("; ")
        )));
    }
    if let Some(m) = leftovers(e)? {
        return Err(EmuError::Check(m));
    }
    if !debugfs::present(Path::new("/")) {
        return Ok(());
    }
    // Pins a foreign put left to the callback go with the memory's free, which came before; a
    // kworker's release may still be on its way.
    let mut last = String::new();
    let balanced = wait_until(Duration::from_secs(30), || {
        let stats = debugfs::read_stats(Path::new("/"))?;
        let get = |k: &str| stats.get(k);
        let (live, pinned) = (get("live_mrs"), get("pinned_bytes"));
        let (claimed, released) = (get("acquire_claimed"), get("release_calls"));
        last = format!(
            "live_mrs={live:?} pinned_bytes={pinned:?} acquire_claimed={claimed:?} release_calls={released:?}"
        );
        Ok(live == Some(0) && pinned == Some(0) && claimed.is_some() && claimed == released)
    })?;
    check(balanced, || {
        format!("nvpeer's books do not balance: {last}")
    })
}

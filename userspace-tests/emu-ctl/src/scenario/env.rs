//! What every scenario works with: its options, both emulators' handles and a step log, and
//! the small checks and waits the bodies share.

use crate::error::{EmuError, Result};
use crate::nvp2p::{Alloc, Gpu, GPU_PAGE_SIZE};
use crate::peer_mem::{self, qflags, state, Core, Mr, RegParams};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Options of a scenario run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Iterations of the repeated scenarios.
    pub iterations: u32,
    /// Threads of the parallel scenarios.
    pub threads: u32,
    /// Size of each allocation, in 64 KiB GPU pages.
    pub pages: u64,
    /// Delay armed at delay points, in ms (long enough for another thread to act in TCG guests).
    pub delay_ms: u32,
    /// Name of the client module (for the unload scenario).
    pub module: String,
    /// Violation(s) that must be recorded (`a|b`: any of them); empty = none may be.
    pub expect: Vec<String>,
    /// Lock waits longer than this are recorded as deadlocks by the core emulator.
    pub hang_timeout_ms: u32,
    /// race-stress with an invalidating client: most `dma_map_uaf` hits (the NVIDIA API's own
    /// window) per 100k registrations before the run fails ([`WINDOW_BOUND_PER_100K`]).
    pub window_bound: f64,
    /// fuzz: the run's seed (`None`: from the clock, printed).
    pub seed: Option<u64>,
    /// fuzz: run sequences for this many seconds (0: `iterations` sequences).
    pub seconds: u32,
}

/// The documented bound on the NVIDIA API window that race-stress tolerates for an invalidating
/// client, in `dma_map_uaf` hits per 100k registrations (docs/design.md, "Registration window").
pub const WINDOW_BOUND_PER_100K: f64 = 20000.0;
/// Registrations below which race-stress reports the window figure but does not hold it to the
/// bound (a handful of registrations says nothing about a rate).
pub const WINDOW_MIN_SAMPLE: u64 = 1000;

impl Default for Opts {
    fn default() -> Self {
        Opts {
            iterations: 20,
            threads: 4,
            pages: 4,
            delay_ms: 1500,
            module: "classic_peer".into(),
            expect: Vec::new(),
            hang_timeout_ms: 8000,
            window_bound: WINDOW_BOUND_PER_100K,
            seed: None,
            seconds: 0,
        }
    }
}

/// Shared state of a run: handles on both emulators and a step log.
pub struct Env {
    /// Provider handle (owns this process's GPU allocations).
    pub gpu: Gpu,
    /// Core handle (owns this process's MRs).
    pub core: Core,
    /// Options.
    pub opts: Opts,
    pub(super) log: std::sync::Mutex<String>,
    /// Provider violations the scenario itself accounted for (checked against its own bound), so
    /// that the final check does not count them again.
    pub(super) accounted: std::sync::Mutex<Vec<&'static str>>,
}

impl Env {
    /// Opens both devices.
    pub fn open(opts: Opts) -> Result<Self> {
        Ok(Env {
            gpu: Gpu::open()?,
            core: Core::open()?,
            opts,
            log: Default::default(),
            accounted: Default::default(),
        })
    }

    /// Appends a line to the step log (printed with the verdict).
    pub fn note(&self, s: impl AsRef<str>) {
        let mut l = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(l, "  {}", s.as_ref());
    }

    pub(super) fn alloc(&self) -> Result<Alloc> {
        self.gpu.alloc(self.opts.pages * GPU_PAGE_SIZE, 0)
    }

    pub(super) fn reg(&self, a: &Alloc) -> Result<Mr> {
        self.core.register(RegParams::mr(a.va, a.size))
    }

    pub(super) fn invalidating(&self, mr: &Mr) -> Result<bool> {
        Ok(self.core.query(mr.handle)?.flags & qflags::INVALIDATING != 0)
    }

    pub(super) fn delay(&self, point: &str) -> Result<u32> {
        let p = peer_mem::point_index(&peer_mem::DELAY_POINTS, point, "delay point")?;
        self.core.set_delay(p, self.opts.delay_ms)?;
        Ok(p)
    }

    pub(super) fn hits(&self, point: u32) -> Result<u64> {
        Ok(self.core.stats()?.delay_hits[point as usize])
    }

    /// Waits until delay point `point` was reached more than `before` times.
    pub(super) fn wait_hit(&self, point: u32, before: u64) -> Result<bool> {
        wait_until(
            Duration::from_millis(u64::from(self.opts.delay_ms) * 4 + 5000),
            || Ok(self.hits(point)? > before),
        )
    }
}

pub(super) fn wait_until(timeout: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<bool> {
    let end = Instant::now() + timeout;
    loop {
        if f()? {
            return Ok(true);
        }
        if Instant::now() > end {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(EmuError::Check(msg()))
    }
}

/// Deregisters an MR. On OFED 4.9 an invalidation deregisters the MR inside the core
/// (state torn-down); a dereg that then finds nothing to do is not an error.
pub(super) fn finish(e: &Env, handle: u32) -> Result<()> {
    match e.core.deregister(handle, false) {
        Ok(()) => Ok(()),
        Err(err) => match e.core.query(handle) {
            Ok(q) if q.state == state::TORN_DOWN => Ok(()),
            Err(_) if e.core.stats()?.live_mrs == 0 => Ok(()),
            _ => Err(err),
        },
    }
}

//! The concurrency scenarios of contracts.md §5.2, run against whatever peer-memory client is
//! loaded (the classic C client, a bad client, or nvpeer).
//!
//! Every scenario runs in one process (threads, and forks where another process is the point),
//! because the provider looks GPU memory up by the calling process. Each one:
//! 1. resets both emulators' counters, faults and delays;
//! 2. drives registrations, frees and deregistrations, checking what the contract says about each
//!    step (states, callback counts) for the kind of client that claimed the MR (invalidating or
//!    persistent);
//! 3. ends with the invariants of §5.1/§5.2: no violation recorded by either emulator, no
//!    deadlock, no live pin, mapping or MR left, every acquire released.
//!
//! With `expect` set (bad clients), the scenario passes only if the named violation was recorded.

use crate::core::{self, qflags, state, Core, Mr, RegParams};
use crate::error::{EmuError, Result};
use crate::nvp2p::{self, Alloc, Gpu, GPU_PAGE_SIZE};
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
    log: std::sync::Mutex<String>,
    /// Provider violations the scenario itself accounted for (checked against its own bound), so
    /// that the final check does not count them again.
    accounted: std::sync::Mutex<Vec<&'static str>>,
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

    fn alloc(&self) -> Result<Alloc> {
        self.gpu.alloc(self.opts.pages * GPU_PAGE_SIZE, 0)
    }

    fn reg(&self, a: &Alloc) -> Result<Mr> {
        self.core.register(RegParams::mr(a.va, a.size))
    }

    fn invalidating(&self, mr: &Mr) -> Result<bool> {
        Ok(self.core.query(mr.handle)?.flags & qflags::INVALIDATING != 0)
    }

    fn delay(&self, point: &str) -> Result<u32> {
        let p = core::point_index(&core::DELAY_POINTS, point, "delay point")?;
        self.core.set_delay(p, self.opts.delay_ms)?;
        Ok(p)
    }

    fn hits(&self, point: u32) -> Result<u64> {
        Ok(self.core.stats()?.delay_hits[point as usize])
    }

    /// Waits until delay point `point` was reached more than `before` times.
    fn wait_hit(&self, point: u32, before: u64) -> Result<bool> {
        wait_until(
            Duration::from_millis(u64::from(self.opts.delay_ms) * 4 + 5000),
            || Ok(self.hits(point)? > before),
        )
    }
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<bool> {
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

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(EmuError::Check(msg()))
    }
}

/// A scenario: name, what it proves, body.
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// One line: what it does and which rule it checks.
    pub about: &'static str,
    run: fn(&Env) -> Result<()>,
}

macro_rules! sc {
    ($name:expr, $about:expr, $f:expr) => {
        Scenario {
            name: $name,
            about: $about,
            run: $f,
        }
    };
}

/// Every scenario, in the order suites run them.
pub static SCENARIOS: &[Scenario] = &[
    sc!(
        "basic",
        "register, check mapping + sysfs counters, deregister, free",
        basic
    ),
    sc!(
        "unaligned",
        "register an unaligned sub-range (client must align to 64 KiB)",
        unaligned
    ),
    sc!(
        "free-then-dereg",
        "free under a live MR: one callback + invalidation (persistent: none)",
        free_then_dereg
    ),
    sc!(
        "free-after-acquire",
        "free while the core sits between acquire and get_pages",
        |e| free_during_reg(e, "after_acquire")
    ),
    sc!(
        "free-after-get-pages",
        "free between get_pages and dma_map (mapping_lock held, H4)",
        |e| free_during_reg(e, "after_get_pages")
    ),
    sc!(
        "free-after-dma-map",
        "free between dma_map and HW object creation",
        |e| free_during_reg(e, "after_dma_map")
    ),
    sc!(
        "free-before-activate",
        "free while activation is pending",
        |e| free_during_reg(e, "before_activate")
    ),
    sc!(
        "hold-free-activate",
        "free while registration holds mapping_lock, then activate",
        |e| hold_free(e, false)
    ),
    sc!(
        "hold-free-fail",
        "free while registration holds mapping_lock, then HW creation fails",
        |e| hold_free(e, true)
    ),
    sc!(
        "hw-fail",
        "HW object creation fails after dma_map: stop-notifier + release",
        hw_fail
    ),
    sc!(
        "dereg-vs-free-before-stop",
        "free while dereg is between HW revoke and stop-notifier",
        |e| dereg_vs_free(e, "dereg_before_stop")
    ),
    sc!(
        "dereg-vs-free-in-stop",
        "free while dereg is inside stop-notifier (before dma_unmap)",
        |e| dereg_vs_free(e, "in_stop")
    ),
    sc!(
        "dereg-vs-free-stop-to-release",
        "free between stop-notifier and release()",
        |e| dereg_vs_free(e, "stop_to_release")
    ),
    sc!(
        "dereg-vs-free-in-unmap",
        "free while dereg's dma_unmap_pages is running (H2)",
        dereg_vs_free_unmap
    ),
    sc!(
        "free-vs-dereg-invalidating",
        "dereg while invalidate holds mapping_lock",
        free_vs_dereg
    ),
    sc!(
        "dereg-then-free",
        "free right after dereg returned",
        dereg_then_free
    ),
    sc!(
        "overlap",
        "three MRs over overlapping ranges of one allocation, one free",
        overlap
    ),
    sc!(
        "parallel-reg",
        "threads registering/deregistering at once (global acquire mutex)",
        parallel_reg
    ),
    sc!(
        "race-stress",
        "register/deregister threads racing a free/alloc thread",
        race_stress
    ),
    sc!(
        "exit-gpu-first",
        "child process exits closing the GPU fd before the RDMA fd",
        |e| exit_order(e, true)
    ),
    sc!(
        "exit-core-first",
        "child process exits closing the RDMA fd before the GPU fd",
        |e| exit_order(e, false)
    ),
    sc!(
        "process-exit",
        "emulated process exit / context destroy under live MRs",
        process_exit
    ),
    sc!(
        "dereg-other-pid",
        "MR deregistered by a forked child (wrong-process put, H5)",
        |e| dereg_other(e, false)
    ),
    sc!(
        "dereg-kworker",
        "MR deregistered from a kworker (uverbs disassociate, H5)",
        |e| dereg_other(e, true)
    ),
    sc!(
        "unload-live",
        "rmmod of the client with a live MR must be refused",
        unload_live
    ),
    sc!(
        "non-pci",
        "dma_device is not a PCI device: refused cleanly (H6)",
        non_pci
    ),
    sc!(
        "host-memory",
        "host memory is left to GUP; with GUP skipped no client claims it",
        host_memory
    ),
    sc!(
        "no-inval-supp",
        "CQ/QP-style registration without INVAL_SUPP",
        no_inval_supp
    ),
    sc!(
        "bar1-exhausted",
        "BAR1 budget too small: registration fails with nothing leaked",
        bar1_exhausted
    ),
    sc!(
        "fault-provider",
        "each provider call fails once with each errno, at each call index",
        fault_provider
    ),
    sc!(
        "fault-core",
        "each core allocation/HW fault point fires",
        fault_core
    ),
    sc!(
        "enomem-walk",
        "fail the n-th slab allocation of a registration, for every n",
        enomem_walk
    ),
];

/// Looks a scenario up by name.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Outcome of one scenario run.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub name: String,
    /// Passed?
    pub pass: bool,
    /// Verdict line (names the broken rule on failure).
    pub message: String,
    /// Step log.
    pub log: String,
}

/// Runs one scenario with the invariant checks (or the `expect` check) around it.
pub fn run(sc: &Scenario, opts: Opts) -> Result<Outcome> {
    let env = Env::open(opts)?;
    env.gpu.reset()?;
    env.core.reset()?;
    let mut cfg = env.core.config()?;
    cfg.hang_timeout_ms = env.opts.hang_timeout_ms;
    env.core.set_config(cfg)?;
    let body = (sc.run)(&env);
    // Disarm everything the body armed, even when it failed half-way.
    for p in 0..core::DELAY_POINTS.len() as u32 {
        let _ = env.core.set_delay(p, 0);
    }
    for op in 0..nvp2p::FAULT_OPS as u32 {
        let _ = env.gpu.set_fault(op, nvp2p::fault_mode::OFF, 0, 0, 0);
    }
    // A pin still live after the body is a leak: have the provider record it by name.
    if env.gpu.stats()?.live_pins != 0 {
        let n = env.gpu.check_leaks()?;
        env.note(format!(
            "{n} pin(s) live after the scenario: leak check run"
        ));
    }
    let accounted = env.accounted.lock().map(|a| a.clone()).unwrap_or_default();
    let found: Vec<String> = recorded(&env)?
        .into_iter()
        .filter(|f| {
            !accounted
                .iter()
                .any(|a| f.starts_with(&format!("{a}: provider:")))
        })
        .collect();
    let log = env.log.lock().map(|l| l.clone()).unwrap_or_default();
    let (pass, message) = if env.opts.expect.is_empty() {
        match (body, found.is_empty()) {
            (Ok(()), true) => match leftovers(&env)? {
                None => (true, format!("{}: ok", sc.name)),
                Some(m) => (false, format!("{}: {m}", sc.name)),
            },
            (Ok(()), false) => (
                false,
                format!("{}: violation recorded: {}", sc.name, found.join("; ")),
            ),
            (Err(e), true) => (false, format!("{}: {e}", sc.name)),
            (Err(e), false) => (
                false,
                format!("{}: {e}; violation recorded: {}", sc.name, found.join("; ")),
            ),
        }
    } else {
        let hit: Vec<&String> = found
            .iter()
            .filter(|f| {
                env.opts
                    .expect
                    .iter()
                    .any(|x| f.starts_with(&format!("{x}:")))
            })
            .collect();
        let body_note = match body {
            Ok(()) => String::new(),
            Err(e) => format!(" (scenario itself: {e})"),
        };
        if hit.is_empty() {
            (
                false,
                format!(
                    "{}: NOT caught: expected violation {} was not recorded{body_note}; recorded: [{}]",
                    sc.name,
                    env.opts.expect.join(" or "),
                    found.join("; ")
                ),
            )
        } else {
            (
                true,
                format!(
                    "{}: caught: {}{body_note}",
                    sc.name,
                    hit.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        }
    };
    Ok(Outcome {
        name: sc.name.into(),
        pass,
        message,
        log,
    })
}

/// Every violation either emulator recorded, as `rule: text`.
pub fn recorded(env: &Env) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let ps = env.gpu.stats()?;
    for (i, (name, what)) in nvp2p::VIOLATIONS.iter().enumerate() {
        if ps.violations[i] != 0 {
            out.push(format!("{name}: provider: {what} (x{})", ps.violations[i]));
        }
    }
    for v in env.core.violations()? {
        out.push(format!("{}: core: {}", v.rule, v.text.trim()));
    }
    let cs = env.core.stats()?;
    if cs.deadlocks != 0 && !out.iter().any(|s| s.starts_with("deadlock:")) {
        out.push(format!(
            "deadlock: core: {} lock wait(s) abandoned by the hang detector",
            cs.deadlocks
        ));
    }
    Ok(out)
}

/// What a clean teardown must leave: nothing.
fn leftovers(env: &Env) -> Result<Option<String>> {
    let ps = env.gpu.stats()?;
    let cs = env.core.stats()?;
    let mut bad = Vec::new();
    if ps.live_pins != 0 {
        bad.push(format!(
            "{} provider pin(s) still live (rule: every get_pages ends in one put or one callback)",
            ps.live_pins
        ));
    }
    if ps.live_mappings != 0 {
        bad.push(format!(
            "{} DMA mapping(s) still live (rule: dma_map is undone)",
            ps.live_mappings
        ));
    }
    if cs.live_mrs != 0 {
        bad.push(format!("{} MR(s) still registered", cs.live_mrs));
    }
    if cs.acquires != cs.releases {
        bad.push(format!(
            "{} acquire(s) but {} release(s) (rule: acquire ends in exactly one release)",
            cs.acquires, cs.releases
        ));
    }
    Ok(if bad.is_empty() {
        None
    } else {
        Some(bad.join("; "))
    })
}

// ---------------------------------------------------------------------------------------------
// Scenario bodies.

/// Deregisters an MR. On OFED 4.9 an invalidation deregisters the MR inside the core
/// (state torn-down); a dereg that then finds nothing to do is not an error.
fn finish(e: &Env, handle: u32) -> Result<()> {
    match e.core.deregister(handle, false) {
        Ok(()) => Ok(()),
        Err(err) => match e.core.query(handle) {
            Ok(q) if q.state == state::TORN_DOWN => Ok(()),
            Err(_) if e.core.stats()?.live_mrs == 0 => Ok(()),
            _ => Err(err),
        },
    }
}

fn basic(e: &Env) -> Result<()> {
    for _ in 0..e.opts.iterations.clamp(1, 5) {
        let a = e.alloc()?;
        let mr = e.reg(&a)?;
        let q = e.core.query(mr.handle)?;
        e.note(format!(
            "registered {:#x}+{:#x}: state {} nmap {} page_size {:#x}",
            a.va,
            a.size,
            state::name(q.state),
            q.nmap,
            q.page_size
        ));
        check(
            q.state == state::MAPPED && q.flags & qflags::PEER != 0,
            || {
                format!(
                    "MR over GPU memory is {} (peer: {}), expected mapped by a peer client",
                    state::name(q.state),
                    q.flags & qflags::PEER != 0
                )
            },
        )?;
        check(q.page_size == GPU_PAGE_SIZE, || {
            format!("get_page_size returned {:#x}, expected 64 KiB", q.page_size)
        })?;
        check(u64::from(q.nmap) == a.size / GPU_PAGE_SIZE, || {
            format!(
                "dma_map reported {} entries for {} GPU pages",
                q.nmap,
                a.size / GPU_PAGE_SIZE
            )
        })?;
        let pins = e.gpu.list_pins()?;
        check(pins.len() == 1, || {
            format!(
                "{} provider pins for one MR (probe pin in acquire must be released)",
                pins.len()
            )
        })?;
        e.core.deregister(mr.handle, false)?;
        let ps = e.gpu.stats()?;
        check(ps.live_pins == 0, || {
            format!(
                "{} pins live after dereg (rule: put_pages after dereg)",
                ps.live_pins
            )
        })?;
        e.gpu.free(a.va)?;
    }
    sysfs_counters(e)
}

/// sysfs counters move as §1.8 says, for the client that claims MRs (skipped without sysfs).
fn sysfs_counters(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    let clients = e.core.clients()?;
    let Some(name) = clients
        .get(mr.client_index as usize)
        .map(|c| c.name.clone())
    else {
        return Err(EmuError::Check(format!(
            "MR claimed by client index {} which the core does not list",
            mr.client_index
        )));
    };
    let dir = format!("{}/{name}", crate::sysfs::ROOT);
    if !std::path::Path::new(&dir).exists() {
        e.note(format!("no {dir}: sysfs counters not checked"));
        e.core.deregister(mr.handle, false)?;
        e.gpu.free(a.va)?;
        return Ok(());
    }
    let before = crate::sysfs::read(&name)?;
    e.core.deregister(mr.handle, false)?;
    let after = crate::sysfs::read(&name)?;
    let d = |k: &str| -> i128 {
        after[k].parse::<i128>().unwrap_or(0) - before[k].parse::<i128>().unwrap_or(0)
    };
    e.note(format!(
        "sysfs {name}: dealloc +{} dereg_bytes +{}",
        d("num_dealloc_mrs"),
        d("num_dereg_bytes")
    ));
    check(d("num_dealloc_mrs") == 1, || {
        format!(
            "num_dealloc_mrs moved by {} on one dereg",
            d("num_dealloc_mrs")
        )
    })?;
    check(d("num_dereg_bytes") == i128::from(a.size), || {
        format!(
            "num_dereg_bytes moved by {} for {} bytes",
            d("num_dereg_bytes"),
            a.size
        )
    })?;
    e.gpu.free(a.va)?;
    Ok(())
}

fn unaligned(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let (addr, len) = (a.va + 0x1234, a.size - 0x3000);
    let mr = e.core.register(RegParams::mr(addr, len)).map_err(|err| {
        EmuError::Check(format!(
            "registration of the unaligned range {addr:#x}+{len:#x} inside GPU memory failed ({err}): \
             rule: the client must cover the range with whole 64 KiB GPU pages before nvidia_p2p_get_pages"
        ))
    })?;
    let q = e.core.query(mr.handle)?;
    e.note(format!(
        "unaligned MR: state {} nmap {} trimmed {}",
        state::name(q.state),
        q.nmap,
        q.flags & qflags::TRIMMED != 0
    ));
    check(q.state == state::MAPPED, || {
        format!("unaligned MR is {}", state::name(q.state))
    })?;
    e.core.deregister(mr.handle, false)?;
    e.gpu.free(a.va)?;
    Ok(())
}

fn free_then_dereg(e: &Env) -> Result<()> {
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

fn free_during_reg(e: &Env, point: &str) -> Result<()> {
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

fn hold_free(e: &Env, fail: bool) -> Result<()> {
    let a = e.alloc()?;
    let maps = |e: &Env| -> Result<u64> { Ok(e.gpu.stats()?.calls[4]) };
    let before = maps(e)?;
    let (reg, cbs) = std::thread::scope(|s| -> Result<_> {
        let t = s.spawn(|| {
            let mut p = RegParams::mr(a.va, a.size);
            p.flags = core::reg_flags::HOLD;
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

fn hw_fail(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.flags = core::reg_flags::FAIL_HW;
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

fn dereg_vs_free(e: &Env, point: &str) -> Result<()> {
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

fn dereg_vs_free_unmap(e: &Env) -> Result<()> {
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

fn free_vs_dereg(e: &Env) -> Result<()> {
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

fn dereg_then_free(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mr = e.reg(&a)?;
    e.core.deregister(mr.handle, false)?;
    let cbs = e.gpu.free(a.va)?;
    check(cbs == 0, || {
        format!("free after dereg ran {cbs} callbacks (rule: after put_pages no callback may fire)")
    })
}

fn overlap(e: &Env) -> Result<()> {
    let a = e.gpu.alloc(4 * GPU_PAGE_SIZE, 0)?;
    let g = GPU_PAGE_SIZE;
    let mrs = [
        e.core.register(RegParams::mr(a.va, 3 * g))?,
        e.core.register(RegParams::mr(a.va + g + 100, 2 * g))?,
        e.core.register(RegParams::mr(a.va, 3 * g))?,
    ];
    let inval = e.invalidating(&mrs[0])?;
    let cbs = e.gpu.free(a.va)?;
    e.note(format!(
        "free of one allocation under 3 MRs: {cbs} callbacks"
    ));
    if inval {
        check(cbs == 3, || {
            format!("{cbs} callbacks for 3 pinned MRs over the freed allocation, expected 3")
        })?;
    }
    for mr in mrs {
        let q = e.core.query(mr.handle)?;
        if inval {
            check(q.state != state::MAPPED, || {
                format!("MR {} still mapped after free", mr.handle)
            })?;
        }
        finish(e, mr.handle)?;
    }
    Ok(())
}

fn parallel_reg(e: &Env) -> Result<()> {
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
fn race_stress(e: &Env) -> Result<()> {
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

/// Runs `f` in a forked child; returns its exit status (0 = ok).
fn in_child(f: impl FnOnce() -> Result<()>) -> Result<i32> {
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

fn exit_order(e: &Env, gpu_first: bool) -> Result<()> {
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

fn process_exit(e: &Env) -> Result<()> {
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

fn dereg_other(e: &Env, kworker: bool) -> Result<()> {
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

fn unload_live(e: &Env) -> Result<()> {
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

fn non_pci(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.device = core::device::NONPCI;
    match e.core.register(p) {
        Ok(mr) => {
            e.core.deregister(mr.handle, false)?;
            e.gpu.free(a.va)?;
            Err(EmuError::Check(
                "MR mapped for a non-PCI dma_device (rule: check dev_is_pci before to_pci_dev)"
                    .into(),
            ))
        }
        Err(err) => {
            e.note(format!("non-PCI dma_device refused: {err}"));
            e.gpu.free(a.va)?;
            Ok(())
        }
    }
}

fn host_memory(e: &Env) -> Result<()> {
    let len = 4 * GPU_PAGE_SIZE as usize;
    let buf = vec![0u8; len + GPU_PAGE_SIZE as usize];
    let addr = (buf.as_ptr() as u64).div_ceil(GPU_PAGE_SIZE) * GPU_PAGE_SIZE;
    let mr = e.core.register(RegParams::mr(addr, len as u64))?;
    let q = e.core.query(mr.handle)?;
    e.note(format!("host memory MR: {}", state::name(q.state)));
    check(q.state == state::HOST, || {
        format!(
            "host memory registered as {} (a client claimed host memory)",
            state::name(q.state)
        )
    })?;
    e.core.deregister(mr.handle, false)?;
    let mut p = RegParams::mr(addr, len as u64);
    p.flags = core::reg_flags::NO_GUP;
    match e.core.register(p) {
        Ok(mr) => {
            e.core.deregister(mr.handle, false)?;
            Err(EmuError::Check("a peer client claimed host memory (rule: acquire returns 0 for memory that is not the provider's)".into()))
        }
        Err(err) => {
            e.note(format!("host memory without GUP: {err}"));
            drop(buf);
            Ok(())
        }
    }
}

fn no_inval_supp(e: &Env) -> Result<()> {
    let a = e.alloc()?;
    let mut p = RegParams::mr(a.va, a.size);
    p.peer_flags = core::peer_flags::ALLOW;
    let clients = e.core.clients()?;
    let any_persistent = clients.iter().any(|c| !c.invalidating);
    match e.core.register(p) {
        Ok(mr) => {
            check(any_persistent, || {
                "an invalidating client served a registration without INVAL_SUPP".into()
            })?;
            let q = e.core.query(mr.handle)?;
            check(q.flags & qflags::INVALIDATING == 0, || {
                "CQ-style buffer served by an invalidating client".into()
            })?;
            e.core.deregister(mr.handle, false)?;
        }
        Err(err) => {
            check(!any_persistent, || {
                format!("CQ-style registration failed with a persistent client loaded: {err}")
            })?;
            e.note(format!("no persistent client: refused ({err})"));
        }
    }
    e.gpu.free(a.va)?;
    Ok(())
}

fn bar1_exhausted(e: &Env) -> Result<()> {
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

/// Errnos the provider returns (§2.5), as negative values.
const PROVIDER_ERRNOS: [i32; 6] = [-22, -12, -5, -524, -16, -19];

fn fault_provider(e: &Env) -> Result<()> {
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    let probe = e.alloc()?;
    let inval = {
        let m = e.reg(&probe)?;
        let i = e.invalidating(&m)?;
        e.core.deregister(m.handle, false)?;
        e.gpu.free(probe.va)?;
        i
    };
    let ops: &[u32] = if inval { &[0, 2, 4, 5] } else { &[1, 4, 5] };
    for &op in ops {
        for err in PROVIDER_ERRNOS {
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

fn fault_core(e: &Env) -> Result<()> {
    for (i, name) in core::FAULT_POINTS.iter().enumerate() {
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

fn enomem_walk(e: &Env) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_unique_and_found() {
        let mut names: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(find("basic").is_some());
        assert!(find("nope").is_none());
    }
}

//! `nvpeer emu regpath`: the registration-path benchmark (issue 8, docs/performance.md).
//!
//! `measure` drives one path in this process and writes its numbers as JSON:
//! - `--via floor`: `/dev/nvpeer_rawfloor` (testbench/bench/rawfloor), the NVIDIA P2P API called
//!   directly: get_pages + dma_map_pages per registration, dma_unmap_pages + put_pages per
//!   deregistration, one syscall each (the 1.0x floor);
//! - `--via core`: `/dev/peer_mem_emu` REGISTER / DEREGISTER, i.e. the emulated OFED core and
//!   whichever client is loaded (the classic C client or nvpeer).
//!
//! Per registration size and thread count it records registration and deregistration latency
//! (median, p99), cycles per second and provider calls per registration (the provider emulator's
//! counters); per size the latency of a free ("cudaFree") under a live MR, which runs the
//! invalidation; kernel slab memory per live MR; and a live-MR scale test. `report` merges the
//! paths' files into one JSON document with ratios to the floor and prints markdown tables.
//!
//! These are benchmark numbers: nothing here asserts a target.

use crate::cli::parse_size;
use crate::core::{Core, RegParams};
use crate::cost_model::CostModel;
use crate::error::{ioctl_res, EmuError, Result};
use crate::nvp2p::{abi, Gpu, OPS};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Control device of rawfloor.ko.
pub const FLOOR_DEVICE: &str = "/dev/nvpeer_rawfloor";

/// Arguments of `nvpeer emu regpath`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Measure one path (the loaded client through the core, or the raw floor) and write JSON.
    Measure(Box<MeasureArgs>),
    /// Merge per-path JSON files, add ratios to the floor, write one document, print tables.
    Report {
        /// Per-path files written by `measure`.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Merged output file.
        #[arg(long)]
        out: PathBuf,
        /// Free text describing the machine, kernel and run (stored in the document).
        #[arg(long, default_value = "")]
        machine: String,
    },
    /// Check a merged document: numbers present, pins per registration (exit 1 otherwise).
    Check {
        /// Merged document.
        file: PathBuf,
        /// PATH=N: every cell of PATH must show N provider pins per registration.
        #[arg(long)]
        pins: Vec<String>,
    },
    /// Print the tables of a merged document written by `report`.
    Table {
        /// Merged document.
        file: PathBuf,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct MeasureArgs {
    /// Label of this path (floor, floor-persistent, classic, nvpeer-inval, nvpeer-persistent).
    #[arg(long)]
    path: String,
    /// `floor` (rawfloor.ko) or `core` (peer_mem_emu REGISTER through the loaded client).
    #[arg(long, value_parser = ["floor", "core"])]
    via: String,
    /// Floor: use the persistent pin API. Core paths: the API of the adjacent floor.
    #[arg(long)]
    persistent: bool,
    /// Core paths: measure a floor cell (rawfloor, same size and threads) with each cell,
    /// interleaved with it in --rounds rounds, and compute that cell's ratios against it, so that
    /// drift of the shared host's load or of the kernel's caches does not enter the ratios.
    #[arg(long)]
    adjacent_floor: bool,
    /// With --adjacent-floor: rounds of floor, then client cycles, per cell.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// The path whose numbers are this one's 1.0x (stored for `report`).
    #[arg(long, default_value = "floor")]
    floor_ref: String,
    /// The classic C client path this one is compared with (stored for `report`).
    #[arg(long, default_value = "classic")]
    classic_ref: String,
    /// Registration sizes (K/M/G suffixes), comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64K,1M")]
    sizes: Vec<u64>,
    /// Thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<u32>,
    /// Registration cycles per cell at 64 KiB (fewer for larger sizes, at least --min-ops).
    #[arg(long, default_value_t = 40)]
    ops: u32,
    /// Fewest cycles per cell.
    #[arg(long, default_value_t = 4)]
    min_ops: u32,
    /// Stop a cell after this many seconds (once every thread made one cycle).
    #[arg(long, default_value_t = 20)]
    cell_budget_s: u64,
    /// Largest size x threads (bytes of emulated GPU memory DMA-mapped at once); cells above it
    /// are skipped and reported as such.
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    max_mapped: u64,
    /// Frees under a live MR per size (invalidation latency); 0 skips.
    #[arg(long, default_value_t = 5)]
    inval_iters: u32,
    /// Live 64 KiB MRs for the slab-memory measurement; 0 skips.
    #[arg(long, default_value_t = 500)]
    mem_mrs: u32,
    /// Measure only the slab memory per live MR (no cells, no invalidation, no scale test): the
    /// first pass of `make bench`, run for every path before any large cell can disturb the
    /// kernel's caches.
    #[arg(long)]
    mem_only: bool,
    /// Take the memory figures from this earlier `--mem-only` file of the same path instead of
    /// measuring them again.
    #[arg(long, conflicts_with = "mem_only")]
    memory_from: Option<PathBuf>,
    /// Live-MR scale test: MRs to hold at once (0 skips).
    #[arg(long, default_value_t = 0)]
    scale: u32,
    /// Scale test stops registering after this many seconds (0 = no limit).
    #[arg(long, default_value_t = 0)]
    scale_budget_s: u64,
    /// Before the memory and scale measurements, wait up to this many seconds for the IOMMU's
    /// IOVA cache to stop draining (left over from large cells); 0: do not wait.
    #[arg(long, default_value_t = 0)]
    settle_s: u64,
    /// Scale test stops early when MemAvailable drops below this (MiB).
    #[arg(long, default_value_t = 384)]
    scale_min_avail_mb: u64,
    /// The provider's RM cost model: a preset of `nvpeer emu calibrate` (pinmaplat-v100,
    /// uniform-250us, none).
    #[arg(long, default_value = "pinmaplat-v100")]
    cost_model: String,
    /// Multiply the model's costs by this factor: the guest's measured software slowdown against
    /// the machine the model was taken from (docs/performance.md).
    #[arg(long, default_value_t = 1.0)]
    dilate: f64,
    /// Where the dilation factor came from (stored in the document).
    #[arg(long, default_value = "")]
    dilate_source: String,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
}

/// Runs `nvpeer emu regpath`.
pub fn run(args: Args) -> Result<u8> {
    match args.cmd {
        Cmd::Measure(m) => {
            let doc = measure(&m)?;
            write_json(&m.out, &doc)?;
            eprintln!("regpath: {} written to {}", m.path, m.out.display());
            Ok(0)
        }
        Cmd::Report {
            inputs,
            out,
            machine,
        } => {
            let paths = inputs.iter().map(read_json).collect::<Result<Vec<_>>>()?;
            let doc = report(paths, &machine);
            write_json(&out, &doc)?;
            print!("{}", tables(&doc));
            Ok(0)
        }
        Cmd::Table { file } => {
            print!("{}", tables(&read_json(&file)?));
            Ok(0)
        }
        Cmd::Check { file, pins } => {
            let problems = check(&read_json(&file)?, &pins);
            for p in &problems {
                println!("{p}");
            }
            if problems.is_empty() {
                println!(
                    "numbers present; pins per registration as expected ({})",
                    pins.join(", ")
                );
                Ok(0)
            } else {
                Ok(1)
            }
        }
    }
}

/// Problems of a merged document: a path without cells, a cell without latencies or rate, a
/// missing free latency or memory figure, and pins per registration (get_pages +
/// get_pages_persistent) other than expected for the paths named in `pins` (`PATH=N`).
fn check(doc: &Value, pins: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    let empty = Vec::new();
    let paths = doc["paths"].as_array().unwrap_or(&empty);
    for p in paths {
        let name = p["path"].as_str().unwrap_or("?");
        let cells = p["cells"].as_array().unwrap_or(&empty);
        if cells.is_empty() {
            bad.push(format!("{name}: no cells"));
        }
        for c in cells {
            for keys in [
                &["reg", "median_ns"][..],
                &["reg", "p99_ns"],
                &["dereg", "median_ns"],
                &["regs_per_s"],
            ] {
                if !num(c, keys).is_some_and(|v| v > 0.0) {
                    bad.push(format!(
                        "{name} size {} threads {}: no {}",
                        c["size"],
                        c["threads"],
                        keys.join(".")
                    ));
                }
            }
            // The time split: every path spends time in the provider; a core path also in its
            // client's callbacks, which include the provider's calls (so client_own >= 0 up to
            // clock granularity, checked loosely).
            let t = &c["time_split_ns_per_cycle"];
            let provider = num(t, &["provider"]).unwrap_or(0.0);
            let mean = num(t, &["mean"]).unwrap_or(0.0);
            if !(provider > 0.0 && provider <= mean) {
                bad.push(format!(
                    "{name} size {} threads {}: provider time {provider} ns not in (0, mean {mean}]",
                    c["size"], c["threads"]
                ));
            }
            if p["via"] == "core" && !num(t, &["client_own"]).is_some_and(|v| v > -0.01 * mean) {
                bad.push(format!(
                    "{name} size {} threads {}: no client time, or less than the provider's ({t})",
                    c["size"], c["threads"]
                ));
            }
        }
        for r in p["invalidation"].as_array().unwrap_or(&empty) {
            if !num(r, &["free_with_live_mr", "median_ns"]).is_some_and(|v| v > 0.0) {
                bad.push(format!("{name} size {}: no free latency", r["size"]));
            }
        }
        if p["memory"].is_object() && !num(&p["memory"], &["mrs"]).is_some_and(|v| v > 0.0) {
            bad.push(format!("{name}: no live MRs for the memory figure"));
        }
    }
    for spec in pins {
        let Some((name, want)) = spec.split_once('=') else {
            bad.push(format!("bad --pins '{spec}' (PATH=N)"));
            continue;
        };
        let want: f64 = want.parse().unwrap_or(f64::NAN);
        let Some(p) = paths.iter().find(|p| p["path"] == name) else {
            bad.push(format!("{name}: not in the document"));
            continue;
        };
        for c in p["cells"].as_array().unwrap_or(&empty) {
            let pc = &c["provider_calls_per_reg"];
            let got = num(pc, &["get_pages"]).unwrap_or(0.0)
                + num(pc, &["get_pages_persistent"]).unwrap_or(0.0);
            if got != want {
                bad.push(format!(
                    "{name} size {} threads {}: {got} pins per registration, expected {want}",
                    c["size"], c["threads"]
                ));
            }
        }
    }
    bad
}

fn read_json(p: &PathBuf) -> Result<Value> {
    let text = std::fs::read_to_string(p).map_err(|source| EmuError::File {
        path: p.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| EmuError::Invalid(format!("{}: {e}", p.display())))
}

fn write_json(path: &PathBuf, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| EmuError::Invalid(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|source| EmuError::File {
        path: path.display().to_string(),
        source,
    })
}

// ---- rawfloor.ko ABI (testbench/bench/rawfloor/rawfloor_ioctl.h) ----

mod rf {
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Reg {
        pub va: u64,
        pub len: u64,
        pub flags: u32,
        pub id: u32,
        pub get_ns: u64,
        pub map_ns: u64,
        pub entries: u32,
        pub pad: u32,
    }
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Dereg {
        pub id: u32,
        pub revoked: u32,
        pub unmap_ns: u64,
        pub put_ns: u64,
    }
    pub const PERSISTENT: u32 = 1;
    const MAGIC: u8 = 0xE9;
    nix::ioctl_readwrite!(reg, MAGIC, 0x01, Reg);
    nix::ioctl_readwrite!(dereg, MAGIC, 0x02, Dereg);
}

/// An open `/dev/nvpeer_rawfloor` (its registrations die with it).
struct Floor {
    file: File,
    persistent: bool,
}

impl Floor {
    fn open(persistent: bool) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(FLOOR_DEVICE)
            .map_err(|source| EmuError::Open {
                path: FLOOR_DEVICE.into(),
                source,
            })?;
        Ok(Floor { file, persistent })
    }

    fn reg(&self, va: u64, len: u64) -> Result<rf::Reg> {
        let mut r = rf::Reg {
            va,
            len,
            flags: if self.persistent { rf::PERSISTENT } else { 0 },
            ..Default::default()
        };
        // SAFETY: `r` is a live #[repr(C)] struct laid out as rawfloor_ioctl.h's struct rf_reg
        // (checked by the size test below); the fd is open.
        ioctl_res("rawfloor REG", unsafe {
            rf::reg(self.file.as_raw_fd(), &mut r)
        })?;
        Ok(r)
    }

    fn dereg(&self, id: u32) -> Result<rf::Dereg> {
        let mut d = rf::Dereg {
            id,
            ..Default::default()
        };
        // SAFETY: as in `reg`, for struct rf_dereg.
        ioctl_res("rawfloor DEREG", unsafe {
            rf::dereg(self.file.as_raw_fd(), &mut d)
        })?;
        Ok(d)
    }
}

/// The registration path under test: one handle, shared by the measuring threads.
enum Path {
    Floor(Floor),
    Core(Core),
}

/// One live registration of either path.
#[derive(Clone, Copy)]
enum Handle {
    Floor(u32),
    Core(u32),
}

impl Path {
    fn reg(&self, va: u64, len: u64) -> Result<Handle> {
        match self {
            Path::Floor(f) => Ok(Handle::Floor(f.reg(va, len)?.id)),
            Path::Core(c) => Ok(Handle::Core(c.register(RegParams::mr(va, len))?.handle)),
        }
    }

    fn dereg(&self, h: Handle) -> Result<()> {
        match (self, h) {
            (Path::Floor(f), Handle::Floor(id)) => f.dereg(id).map(|_| ()),
            (Path::Core(c), Handle::Core(id)) => c.deregister(id, false),
            _ => Err(EmuError::Invalid(
                "registration handle of another path".into(),
            )),
        }
    }

    /// Time spent inside client callbacks so far (the core's counter), for core paths.
    fn client_ns(&self) -> Result<Option<u64>> {
        match self {
            Path::Core(c) => Ok(Some(c.stats()?.client_ns)),
            Path::Floor(_) => Ok(None),
        }
    }

    /// What a free under this live registration left behind (for the invalidation table).
    fn state_after_free(&self, h: Handle) -> String {
        match (self, h) {
            (Path::Core(c), Handle::Core(id)) => match c.query(id) {
                Ok(q) => crate::core::state::name(q.state).to_string(),
                Err(e) => format!("query failed: {e}"),
            },
            _ => "n/a".into(),
        }
    }
}

// ---- statistics ----

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(mut v: Vec<u64>) -> Value {
    v.sort_unstable();
    let mean = if v.is_empty() {
        0
    } else {
        v.iter().sum::<u64>() / v.len() as u64
    };
    json!({"n": v.len(), "median_ns": pct(&v, 50.0), "p99_ns": pct(&v, 99.0), "mean_ns": mean,
           "min_ns": v.first().copied().unwrap_or(0), "max_ns": v.last().copied().unwrap_or(0)})
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Provider calls per registration, from the counters' growth over `regs` registrations.
fn calls_per_reg(grown: &abi::Stats, regs: u64) -> Value {
    let mut m = Map::new();
    let mut total = 0u64;
    for (i, name) in OPS.iter().enumerate().take(6) {
        total += grown.calls[i];
        m.insert(
            (*name).into(),
            json!(grown.calls[i] as f64 / regs.max(1) as f64),
        );
    }
    m.insert("total".into(), json!(total as f64 / regs.max(1) as f64));
    m.insert(
        "failures".into(),
        json!(grown.failures[..6].iter().sum::<u64>()),
    );
    Value::Object(m)
}

// ---- /proc readers ----

fn meminfo_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let rest = l.strip_prefix(key)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse().ok()
            })
        })
        .unwrap_or(0)
}

/// /proc/slabinfo: cache name -> (active objects, object size). Empty if unreadable.
fn slabinfo() -> BTreeMap<String, (i64, i64)> {
    let mut m = BTreeMap::new();
    if let Ok(t) = std::fs::read_to_string("/proc/slabinfo") {
        for l in t.lines().skip(2) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 3 {
                if let (Ok(a), Ok(s)) = (f[1].parse(), f[3].parse()) {
                    m.insert(f[0].to_string(), (a, s));
                }
            }
        }
    }
    m
}

/// Nominal object size of a cache: N for kmalloc-N / kmalloc-cg-N / kmalloc-rcl-N, else its
/// (possibly debug-inflated) object size.
fn nominal(name: &str, objsize: i64) -> i64 {
    name.rsplit('-')
        .next()
        .filter(|_| name.starts_with("kmalloc"))
        .and_then(|n| {
            n.strip_suffix('k')
                .map(|k| k.parse::<i64>().map(|v| v * 1024))
                .unwrap_or_else(|| n.parse())
                .ok()
        })
        .unwrap_or(objsize)
}

/// Slab snapshot: meminfo Slab and SUnreclaim (KiB) and slabinfo.
struct SlabSnap {
    slab_kb: u64,
    unrecl_kb: u64,
    caches: BTreeMap<String, (i64, i64)>,
}

impl SlabSnap {
    fn take() -> Self {
        SlabSnap {
            slab_kb: meminfo_kb("Slab"),
            unrecl_kb: meminfo_kb("SUnreclaim"),
            caches: slabinfo(),
        }
    }

    /// Per-MR growth from `self` to `after` over `n` MRs.
    fn per_mr(&self, after: &SlabSnap, n: u64) -> Value {
        let n = n.max(1) as f64;
        let mut rows: Vec<(String, i64, i64, i64)> = Vec::new();
        for (name, (a, s)) in &after.caches {
            let before = self.caches.get(name).map(|x| x.0).unwrap_or(0);
            let d = a - before;
            if d != 0 {
                rows.push((name.clone(), d, *s, nominal(name, *s)));
            }
        }
        rows.sort_by_key(|r| -(r.1 * r.2).abs());
        // kmemleak tracks every allocation with one object of its own: debug-only memory, but its
        // count is the number of kernel allocations per MR.
        // None on a kernel without kmemleak (a production config): the count is unknown there.
        let kmemleak = after.caches.contains_key("kmemleak_object").then(|| {
            rows.iter()
                .find(|r| r.0 == "kmemleak_object")
                .map_or(0, |r| r.1)
        });
        let bytes: i64 = rows
            .iter()
            .filter(|r| r.0 != "kmemleak_object")
            .map(|r| r.1 * r.2)
            .sum();
        // What a production kernel would allocate: kmalloc objects at their nominal size, plus
        // xarray nodes; other caches (filesystem, debug) are left out as background noise.
        let nominal_bytes: i64 = rows
            .iter()
            .filter(|r| r.0.starts_with("kmalloc") || r.0 == "radix_tree_node")
            .map(|r| r.1 * r.3)
            .sum();
        // The ten largest changes, plus every kmalloc cache that moved by 0.2 objects per MR.
        let top: Vec<Value> = rows
            .iter()
            .enumerate()
            .filter(|(i, r)| *i < 10 || (r.0.starts_with("kmalloc") && (r.1 as f64 / n).abs() >= 0.2))
            .map(|(_, r)| json!({"cache": r.0, "objs_per_mr": r.1 as f64 / n, "objsize": r.2, "nominal": r.3}))
            .collect();
        // Allocation profile: kmalloc caches whose growth is a whole number of objects per MR
        // (within 0.25); a background free or allocation elsewhere rarely lands on a whole
        // number per MR, so this is the least noisy estimate of what an MR keeps allocated.
        let profile: i64 = rows
            .iter()
            .filter(|r| r.0.starts_with("kmalloc"))
            .filter_map(|r| {
                let per = r.1 as f64 / n;
                let whole = per.round();
                (whole >= 1.0 && (per - whole).abs() <= 0.25).then_some(whole as i64 * r.3)
            })
            .sum();
        json!({
            "meminfo_slab_bytes_per_mr": (after.slab_kb as f64 - self.slab_kb as f64) * 1024.0 / n,
            "meminfo_sunreclaim_bytes_per_mr": (after.unrecl_kb as f64 - self.unrecl_kb as f64) * 1024.0 / n,
            "slabinfo_bytes_per_mr": bytes as f64 / n,
            "kmalloc_nominal_bytes_per_mr": nominal_bytes as f64 / n,
            "kernel_allocations_per_mr": kmemleak.map(|k| k as f64 / n),
            "kmalloc_profile_bytes_per_mr": profile,
            "slabinfo_available": !after.caches.is_empty(),
            "top_caches": top,
        })
    }
}

// ---- measurement ----

fn open_path(m: &MeasureArgs) -> Result<Path> {
    Ok(if m.via == "floor" {
        Path::Floor(Floor::open(m.persistent)?)
    } else {
        Path::Core(Core::open()?)
    })
}

/// Cycles for one cell: `ops` at 64 KiB, scaled down with the square root of the size ratio.
fn cell_ops(m: &MeasureArgs, size: u64) -> u32 {
    let ratio = (size as f64 / 65536.0).max(1.0).sqrt();
    ((m.ops as f64 / ratio).round() as u32).max(m.min_ops)
}

/// What some cycles of one path measured: latencies, and the counters' growth over them.
#[derive(Default)]
struct Samples {
    reg: Vec<u64>,
    dereg: Vec<u64>,
    wall: Duration,
    /// Provider counters' growth (calls, failures, api/model/delay ns), as a `Stats` whose every
    /// field is a difference.
    grown: abi::Stats,
    /// Growth of the core's time inside client callbacks (core paths).
    client_ns: Option<u64>,
}

/// Adds the growth of the provider counters from `before` to `after` to `acc`.
fn grow(acc: &mut abi::Stats, before: &abi::Stats, after: &abi::Stats) {
    for i in 0..acc.calls.len() {
        acc.calls[i] += after.calls[i].saturating_sub(before.calls[i]);
        acc.failures[i] += after.failures[i].saturating_sub(before.failures[i]);
    }
    acc.api_ns += after.api_ns.saturating_sub(before.api_ns);
    acc.model_ns += after.model_ns.saturating_sub(before.model_ns);
    acc.delay_ns += after.delay_ns.saturating_sub(before.delay_ns);
}

/// Runs `ops` cycles of `path` (at most `budget`), spread over `threads` threads, and adds what
/// they measured to `acc`.
#[allow(clippy::too_many_arguments)]
fn samples(
    acc: &mut Samples,
    path: &Path,
    gpu: &Gpu,
    va: u64,
    size: u64,
    threads: u32,
    ops: u32,
    budget: Duration,
) -> Result<()> {
    let per_thread = ops.max(threads).div_ceil(threads);
    let before = gpu.stats()?;
    let client_before = path.client_ns()?;
    let start = Instant::now();
    let results: Vec<Result<(Vec<u64>, Vec<u64>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || -> Result<(Vec<u64>, Vec<u64>)> {
                    let (mut reg, mut dereg) = (Vec::new(), Vec::new());
                    for i in 0..per_thread {
                        if i > 0 && start.elapsed() > budget {
                            break;
                        }
                        let t0 = Instant::now();
                        let h = path.reg(va, size)?;
                        let t1 = Instant::now();
                        path.dereg(h)?;
                        reg.push(ns(t1 - t0));
                        dereg.push(ns(t1.elapsed()));
                    }
                    Ok((reg, dereg))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(EmuError::Invalid("thread panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed();
    let after = gpu.stats()?;
    let client_after = path.client_ns()?;
    for r in results {
        let (a, b) = r?;
        acc.reg.extend(a);
        acc.dereg.extend(b);
    }
    acc.wall += wall;
    if let Some(grown) = client_before
        .zip(client_after)
        .map(|(b, a)| a.saturating_sub(b))
    {
        *acc.client_ns.get_or_insert(0) += grown;
    }
    grow(&mut acc.grown, &before, &after);
    Ok(())
}

/// One cell: `path` at `size` and `threads`. With `floor` (a core path's adjacent floor), the
/// cell's cycles are split into `rounds` rounds that alternate floor, client, floor, client...,
/// so that drift (the shared host's load, the IOMMU's IOVA caches, the slab state) lands on both
/// alike; returns the client's cell and the floor's.
fn cell(
    m: &MeasureArgs,
    path: &Path,
    floor: Option<&Path>,
    gpu: &Gpu,
    va: u64,
    size: u64,
    threads: u32,
) -> Result<(Value, Option<Value>)> {
    let ops = cell_ops(m, size).max(threads);
    let budget = Duration::from_secs(m.cell_budget_s);
    let Some(f) = floor else {
        let mut s = Samples::default();
        samples(&mut s, path, gpu, va, size, threads, ops, budget)?;
        return Ok((cell_value(size, threads, s), None));
    };
    let rounds = m.rounds.clamp(1, ops.div_ceil(threads));
    let (per_round, round_budget) = (ops.div_ceil(rounds), budget / rounds);
    let (mut fs, mut cs) = (Samples::default(), Samples::default());
    for _ in 0..rounds {
        samples(&mut fs, f, gpu, va, size, threads, per_round, round_budget)?;
        samples(
            &mut cs,
            path,
            gpu,
            va,
            size,
            threads,
            per_round,
            round_budget,
        )?;
    }
    let mut fv = cell_value(size, threads, fs);
    fv["rounds"] = json!(rounds);
    let mut cv = cell_value(size, threads, cs);
    cv["rounds"] = json!(rounds);
    Ok((cv, Some(fv)))
}

fn cell_value(size: u64, threads: u32, s: Samples) -> Value {
    let Samples {
        reg,
        dereg,
        wall,
        grown,
        client_ns,
    } = s;
    let cycles: Vec<u64> = reg.iter().zip(&dereg).map(|(a, b)| a + b).collect();
    let n = reg.len() as u64;
    let mut split = time_split(&cycles, grown.api_ns, client_ns);
    // Of the provider's time, what the cost model asked for and how far its waits overshot it.
    let per = n.max(1) as f64;
    split["provider_model"] = json!(grown.model_ns as f64 / per);
    split["model_overshoot"] = json!((grown.delay_ns as f64 - grown.model_ns as f64) / per);
    json!({
        "size": size, "threads": threads, "cycles": n, "wall_s": wall.as_secs_f64(),
        "regs_per_s": n as f64 / wall.as_secs_f64().max(1e-9),
        "reg": summary(reg), "dereg": summary(dereg), "cycle": summary(cycles),
        "provider_calls_per_reg": calls_per_reg(&grown, n),
        "time_split_ns_per_cycle": split,
    })
}

/// Where a cell's mean registration + deregistration time went, per cycle: inside the provider's
/// entry points (`provider`: modelled RM cost, real IOMMU work, waits for the RM lock); inside
/// the client's callbacks but not the provider (`client_own`, core paths); and the rest
/// (`rest`: the core's own work and the syscalls for core paths, the syscalls and rawfloor's
/// bookkeeping for the floor). With several threads, lock waits count where they happen.
/// The cell adds `provider_model` and `model_overshoot`: the part of `provider` that the cost
/// model asked for, and how much longer than that its waits took.
fn time_split(cycles: &[u64], provider_ns: u64, client_ns: Option<u64>) -> Value {
    let n = cycles.len().max(1) as f64;
    let mean = cycles.iter().sum::<u64>() as f64 / n;
    let provider = provider_ns as f64 / n;
    match client_ns {
        Some(c) => {
            let client = c as f64 / n;
            json!({"mean": mean, "provider": provider, "client_own": client - provider,
                   "rest": mean - client})
        }
        None => json!({"mean": mean, "provider": provider, "rest": mean - provider}),
    }
}

/// Kernel-side provider times of the floor (rawfloor's own ktime around each NVIDIA call).
fn floor_breakdown(f: &Floor, va: u64, size: u64, n: u32) -> Result<Value> {
    let (mut g, mut mp, mut u, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let r = f.reg(va, size)?;
        let d = f.dereg(r.id)?;
        g.push(r.get_ns);
        mp.push(r.map_ns);
        u.push(d.unmap_ns);
        p.push(d.put_ns);
    }
    Ok(
        json!({"size": size, "get_pages": summary(g), "dma_map_pages": summary(mp),
              "dma_unmap_pages": summary(u), "put_pages": summary(p)}),
    )
}

/// Free ("cudaFree") of a fresh allocation with one live MR on it, then deregistration; and the
/// same free without an MR, for reference.
fn invalidation(m: &MeasureArgs, path: &Path, gpu: &Gpu, size: u64) -> Result<Value> {
    let (mut with, mut without, mut dereg_after) = (Vec::new(), Vec::new(), Vec::new());
    let (mut callbacks, mut states) = (0u64, BTreeMap::<String, u32>::new());
    let iters = if size >= 64 << 20 {
        m.inval_iters.min(3)
    } else {
        m.inval_iters
    };
    for _ in 0..iters {
        let a = gpu.alloc(size, 0)?;
        let t = Instant::now();
        gpu.free(a.va)?;
        without.push(ns(t.elapsed()));

        let a = gpu.alloc(size, 0)?;
        let h = path.reg(a.va, size)?;
        let t = Instant::now();
        callbacks += u64::from(gpu.free(a.va)?);
        with.push(ns(t.elapsed()));
        *states.entry(path.state_after_free(h)).or_default() += 1;
        let t = Instant::now();
        path.dereg(h)?;
        dereg_after.push(ns(t.elapsed()));
    }
    Ok(json!({
        "size": size, "free_with_live_mr": summary(with), "free_without_mr": summary(without),
        "dereg_after_free": summary(dereg_after),
        "callbacks_per_free": callbacks as f64 / f64::from(iters.max(1)),
        "mr_state_after_free": states,
    }))
}

/// Waits (at most `max_s` seconds) until the IOMMU's IOVA cache has stopped shrinking for three
/// seconds. After a burst of mappings (a 1 GiB x 8-thread cell maps 131,072 IOVAs, a scale test
/// 100,000) the kernel drains its per-CPU IOVA magazines a little at a time for a minute or more,
/// and those frees would be subtracted from the next memory measurement.
fn settle(max_s: u64) {
    let iova = || slabinfo().get("iommu_iova").map_or(0, |c| c.0);
    let (mut last, mut still) = (iova(), 0);
    for _ in 0..max_s {
        std::thread::sleep(Duration::from_secs(1));
        let now = iova();
        still = if now == last { still + 1 } else { 0 };
        if still >= 3 {
            return;
        }
        last = now;
    }
}

/// Slab growth over `n` live 64 KiB registrations of one range.
fn memory(path: &Path, gpu: &Gpu, n: u32, settle_s: u64) -> Result<Value> {
    settle(settle_s);
    let a = gpu.alloc(65536, 0)?;
    // One warm-up cycle so that first-use allocations (caches, xarray nodes) are not counted.
    let h = path.reg(a.va, 65536)?;
    path.dereg(h)?;
    let before = SlabSnap::take();
    let mut hs = Vec::with_capacity(n as usize);
    let mut err = None;
    for _ in 0..n {
        match path.reg(a.va, 65536) {
            Ok(h) => hs.push(h),
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
    }
    let after = SlabSnap::take();
    let held = hs.len() as u64;
    for h in hs {
        path.dereg(h)?;
    }
    gpu.free(a.va)?;
    let mut v = before.per_mr(&after, held);
    v["mrs"] = json!(held);
    v["error"] = json!(err);
    if let Some(b) = client_footprint() {
        v["client_own_bytes_per_mr"] = json!(b);
    }
    Ok(v)
}

/// nvpeer's own account of the memory it keeps per live MR (debugfs `config`,
/// `mr_footprint_bytes`, uapi/debugfs.md), when nvpeer is the loaded client.
fn client_footprint() -> Option<u64> {
    parse_footprint(&std::fs::read_to_string("/sys/kernel/debug/nvpeer/config").ok()?)
}

fn parse_footprint(config: &str) -> Option<u64> {
    config.lines().find_map(|l| {
        l.strip_prefix("mr_footprint_bytes ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// As many live 64 KiB MRs as the guest allows (up to `target`), then all freed.
fn scale(m: &MeasureArgs, path: &Path, gpu: &Gpu) -> Result<Value> {
    settle(m.settle_s);
    let a = gpu.alloc(65536, 0)?;
    let before = SlabSnap::take();
    let avail0 = meminfo_kb("MemAvailable");
    let mut hs = Vec::with_capacity(m.scale as usize);
    let mut stopped = String::from("target reached");
    let t = Instant::now();
    for i in 0..m.scale {
        if m.scale_budget_s > 0 && t.elapsed().as_secs() >= m.scale_budget_s {
            stopped = format!("time budget of {} s", m.scale_budget_s);
            break;
        }
        if i % 1024 == 0 && meminfo_kb("MemAvailable") < m.scale_min_avail_mb * 1024 {
            stopped = format!("MemAvailable below {} MiB", m.scale_min_avail_mb);
            break;
        }
        match path.reg(a.va, 65536) {
            Ok(h) => hs.push(h),
            Err(e) => {
                stopped = format!("registration {} failed: {e}", i + 1);
                break;
            }
        }
    }
    let reg_s = t.elapsed().as_secs_f64();
    let after = SlabSnap::take();
    let avail1 = meminfo_kb("MemAvailable");
    let reached = hs.len() as u64;
    let t = Instant::now();
    for h in hs {
        path.dereg(h)?;
    }
    let dereg_s = t.elapsed().as_secs_f64();
    gpu.free(a.va)?;
    let end = SlabSnap::take();
    let mut v = before.per_mr(&after, reached);
    v["target"] = json!(m.scale);
    v["reached"] = json!(reached);
    v["stopped_by"] = json!(stopped);
    v["reg_us_per_mr"] = json!(reg_s * 1e6 / reached.max(1) as f64);
    v["dereg_us_per_mr"] = json!(dereg_s * 1e6 / reached.max(1) as f64);
    v["memavailable_drop_bytes_per_mr"] =
        json!((avail0 as f64 - avail1 as f64) * 1024.0 / reached.max(1) as f64);
    v["slab_kb_left_after_free"] = json!(end.slab_kb as i64 - before.slab_kb as i64);
    Ok(v)
}

fn measure(m: &MeasureArgs) -> Result<Value> {
    let gpu = Gpu::open()?;
    let path = open_path(m)?;
    // Fresh counters, no faults, load-time configuration.
    gpu.reset()?;
    if let Path::Core(c) = &path {
        c.reset()?;
    }
    let orig = gpu.config()?;
    let base = CostModel::preset(&m.cost_model)?;
    let model = base.dilated(m.dilate)?;
    gpu.set_config(model.apply(abi::Config {
        bar1_budget: 0,
        ..orig
    }))?;
    let res = measure_all(m, &path, &gpu);
    gpu.set_config(orig)?;
    let mut doc = res?;
    let st = gpu.stats()?;
    if st.live_pins != 0 || st.live_mappings != 0 {
        return Err(EmuError::Check(format!(
            "{}: {} pins and {} DMA mappings left at the provider after every MR was deregistered",
            m.path, st.live_pins, st.live_mappings
        )));
    }
    doc["cost_model"] = json!({"preset": m.cost_model, "preset_ns": base,
        "dilate": m.dilate, "dilate_source": m.dilate_source, "applied_ns": model});
    Ok(doc)
}

fn measure_all(m: &MeasureArgs, path: &Path, gpu: &Gpu) -> Result<Value> {
    let adj = match path {
        Path::Core(_) if m.adjacent_floor => Some(Path::Floor(Floor::open(m.persistent)?)),
        _ => None,
    };
    let clients = match path {
        Path::Core(c) => c
            .clients()?
            .into_iter()
            .map(|c| {
                json!({"name": c.name, "version": c.version,
            "invalidating": c.invalidating, "unmaps": c.unmaps})
            })
            .collect(),
        Path::Floor(_) => Vec::new(),
    };
    let (mut cells, mut skipped, mut breakdown, mut inval) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // A size or cell that fails (e.g. no memory for the allocation, IOVA space exhausted) is
    // reported under "skipped" with its error; the other sizes still run.
    let fail = |size: u64, t: Option<u32>, what: &str, e: EmuError| {
        eprintln!(
            "regpath: {} size {size} threads {t:?}: {what} failed: {e}",
            m.path
        );
        json!({"size": size, "threads": t, "why": format!("{what}: {e}")})
    };
    let sizes: &[u64] = if m.mem_only { &[] } else { &m.sizes };
    for &size in sizes {
        let a = match gpu.alloc(size, 0) {
            Ok(a) => a,
            Err(e) => {
                skipped.push(fail(size, None, "allocation", e));
                continue;
            }
        };
        for &t in &m.threads {
            if size.saturating_mul(u64::from(t)) > m.max_mapped {
                skipped.push(json!({"size": size, "threads": t,
                    "why": format!("size x threads above --max-mapped {} bytes", m.max_mapped)}));
                continue;
            }
            match cell(m, path, adj.as_ref(), gpu, a.va, size, t) {
                Ok((mut c, adjacent)) => {
                    if let Some(f) = adjacent {
                        c["adjacent_floor"] = f;
                    }
                    eprintln!(
                        "regpath: {} size {} threads {}: {} cycles, reg median {} us",
                        m.path,
                        size,
                        t,
                        c["cycles"],
                        c["reg"]["median_ns"].as_u64().unwrap_or(0) / 1000
                    );
                    cells.push(c);
                }
                Err(e) => skipped.push(fail(size, Some(t), "cell", e)),
            }
        }
        if let Path::Floor(f) = path {
            match floor_breakdown(f, a.va, size, cell_ops(m, size).min(20)) {
                Ok(b) => breakdown.push(b),
                Err(e) => skipped.push(fail(size, Some(1), "floor breakdown", e)),
            }
        }
        gpu.free(a.va)?;
        if m.inval_iters > 0 {
            match invalidation(m, path, gpu, size) {
                Ok(r) => inval.push(r),
                Err(e) => skipped.push(fail(size, Some(1), "invalidation", e)),
            }
        }
    }
    let mem = if let Some(f) = &m.memory_from {
        let earlier = read_json(f)?;
        if earlier["path"] != json!(m.path) {
            return Err(EmuError::Invalid(format!(
                "{} holds the memory of path {}, not {}",
                f.display(),
                earlier["path"],
                m.path
            )));
        }
        let mut v = earlier["memory"].clone();
        v["measured"] = json!("first, in a pass of its own before any cell of any path");
        v
    } else if m.mem_mrs > 0 {
        memory(path, gpu, m.mem_mrs, m.settle_s)?
    } else {
        Value::Null
    };
    let sc = if m.scale > 0 && !m.mem_only {
        // The scale test measures the software cost per MR: the RM cost model is switched off.
        let cfg = gpu.config()?;
        gpu.set_config(CostModel::default().apply(cfg))?;
        let r = scale(m, path, gpu);
        gpu.set_config(cfg)?;
        r?
    } else {
        Value::Null
    };
    Ok(json!({
        "path": m.path, "via": m.via, "persistent_api": m.persistent, "floor_ref": m.floor_ref,
        "classic_ref": m.classic_ref,
        "clients": clients, "cells": cells, "skipped": skipped, "floor_breakdown": breakdown,
        "invalidation": inval, "memory": mem, "scale": sc,
    }))
}

// ---- report ----

fn get<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

fn num(v: &Value, keys: &[&str]) -> Option<f64> {
    get(v, keys).and_then(Value::as_f64)
}

fn find_cell(p: &Value, size: u64, threads: u64) -> Option<&Value> {
    p["cells"]
        .as_array()?
        .iter()
        .find(|c| c["size"].as_u64() == Some(size) && c["threads"].as_u64() == Some(threads))
}

fn find_size<'a>(p: &'a Value, list: &str, size: u64) -> Option<&'a Value> {
    p[list]
        .as_array()?
        .iter()
        .find(|c| c["size"].as_u64() == Some(size))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!((a / b * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

/// A core path's mean cycle over its floor's, taken apart: `ratio` = 1 + `provider` (the
/// provider's time beyond the floor's: lock waits, IOMMU and allocator state; noise around 0) +
/// `core` (the core and syscalls beyond the floor's syscalls and rawfloor: the emulated ib_core and
/// uverbs work that any client pays) + `client` (the client's callbacks, provider calls excluded).
/// `1 + provider + core` is what a client that cost nothing would score through this core.
/// Null for the floor and for cells without a time split.
fn excess_split(cell: &Value, floor: &Value) -> Value {
    let (t, ft) = (
        &cell["time_split_ns_per_cycle"],
        &floor["time_split_ns_per_cycle"],
    );
    let (Some(mean), Some(provider), Some(client)) = (
        num(t, &["mean"]),
        num(t, &["provider"]),
        num(t, &["client_own"]),
    ) else {
        return Value::Null;
    };
    let (Some(fm), Some(fprovider)) = (num(ft, &["mean"]), num(ft, &["provider"])) else {
        return Value::Null;
    };
    if fm <= 0.0 {
        return Value::Null;
    }
    // Outside the provider, the floor spends its time in syscalls and rawfloor; a core path in
    // syscalls, the core and the client.
    let rest = (mean - provider - client) - (fm - fprovider);
    let provider = provider - fprovider;
    let r3 = |v: f64| (v / fm * 1000.0).round() / 1000.0;
    json!({"ratio": r3(mean), "provider": r3(provider), "core": r3(rest), "client": r3(client)})
}

/// Adds `ratios` (to the path's floor) to every cell, invalidation row and memory figure.
fn report(mut paths: Vec<Value>, machine: &str) -> Value {
    let floors: BTreeMap<String, Value> = paths
        .iter()
        .filter(|p| p["via"] == "floor")
        .map(|p| (p["path"].as_str().unwrap_or("").to_string(), p.clone()))
        .collect();
    let all = paths.clone();
    for p in &mut paths {
        let classic = all.iter().find(|k| k["path"] == p["classic_ref"]);
        let Some(fl) = floors
            .get(p["floor_ref"].as_str().unwrap_or("floor"))
            .cloned()
        else {
            continue;
        };
        let via_core = p["via"] == "core";
        if let Some(cells) = p["cells"].as_array_mut() {
            for c in cells {
                let (s, t) = (
                    c["size"].as_u64().unwrap_or(0),
                    c["threads"].as_u64().unwrap_or(0),
                );
                // The floor measured right before this cell if there is one, else the floor path.
                let f = c
                    .get("adjacent_floor")
                    .cloned()
                    .or_else(|| find_cell(&fl, s, t).cloned());
                let f = f.as_ref();
                let k = classic.and_then(|k| find_cell(k, s, t));
                let r = |keys: &[&str]| ratio(num(c, keys), f.and_then(|f| num(f, keys)));
                let cyc = ["cycle", "median_ns"];
                // Against the classic client: each over its own adjacent floor when both have one.
                let vs_classic = match (f, k.and_then(|k| k.get("adjacent_floor"))) {
                    (Some(f), Some(kf)) if c.get("adjacent_floor").is_some() => ratio(
                        num(c, &cyc).zip(num(f, &cyc)).map(|(a, b)| a / b),
                        k.and_then(|k| num(k, &cyc))
                            .zip(num(kf, &cyc))
                            .map(|(a, b)| a / b),
                    ),
                    _ => ratio(num(c, &cyc), k.and_then(|k| num(k, &cyc))),
                };
                let split = f
                    .filter(|_| via_core)
                    .map_or(Value::Null, |f| excess_split(c, f));
                c["ratios"] = json!({
                    "cycle_mean_split": split,
                    "reg_median": r(&["reg", "median_ns"]), "reg_p99": r(&["reg", "p99_ns"]),
                    "dereg_median": r(&["dereg", "median_ns"]), "dereg_p99": r(&["dereg", "p99_ns"]),
                    "cycle_median": r(&["cycle", "median_ns"]), "regs_per_s": r(&["regs_per_s"]),
                    "provider_calls": r(&["provider_calls_per_reg", "total"]),
                    "cycle_median_vs_classic": vs_classic,
                    "against": if c.get("adjacent_floor").is_some() { "adjacent floor cell" } else { "floor path" },
                });
            }
        }
        if let Some(rows) = p["invalidation"].as_array_mut() {
            for row in rows {
                let f = find_size(&fl, "invalidation", row["size"].as_u64().unwrap_or(0));
                let keys = ["free_with_live_mr", "median_ns"];
                row["ratios"] = json!({"free_with_live_mr_median": ratio(num(row, &keys), f.and_then(|f| num(f, &keys)))});
            }
        }
        for sec in ["memory", "scale"] {
            let key = ["meminfo_sunreclaim_bytes_per_mr"];
            let fv = num(&fl[sec], &key);
            let pv = num(&p[sec], &key);
            if p[sec].is_object() {
                p[sec]["ratio_slab_per_mr"] = ratio(pv, fv);
                p[sec]["sunreclaim_bytes_per_mr_above_floor"] =
                    json!(pv.zip(fv).map(|(a, b)| a - b));
                let pk = ["kmalloc_profile_bytes_per_mr"];
                p[sec]["profile_bytes_per_mr_above_floor"] = json!(num(&p[sec], &pk)
                    .zip(num(&fl[sec], &pk))
                    .map(|(a, b)| a - b));
                let nk = ["kmalloc_nominal_bytes_per_mr"];
                p[sec]["nominal_bytes_per_mr_above_floor"] = json!(num(&p[sec], &nk)
                    .zip(num(&fl[sec], &nk))
                    .map(|(a, b)| a - b));
            }
        }
    }
    json!({"benchmark": "regpath", "machine": machine, "paths": paths})
}

fn us(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}", x / 1000.0))
        .unwrap_or_else(|| "-".into())
}

fn x(v: &Value) -> String {
    v.as_f64()
        .map(|r| format!("{r:.2}x"))
        .unwrap_or_else(|| "-".into())
}

fn size_name(s: u64) -> String {
    match s {
        s if s >= 1 << 30 && s % (1 << 30) == 0 => format!("{}G", s >> 30),
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s => format!("{}K", s >> 10),
    }
}

/// One table row's cells: `f` of each path's cell of `size` and `threads` ("-" where none),
/// joined with " | ".
fn cells_row(paths: &[Value], size: u64, threads: u64, f: impl Fn(&Value) -> String) -> String {
    paths
        .iter()
        .map(|p| find_cell(p, size, threads).map_or("-".into(), &f))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The cost model a path was measured with, as applied (dilation included).
fn model_of(cm: &Value) -> Option<CostModel> {
    serde_json::from_value(cm["applied_ns"].clone()).ok()
}

/// Markdown tables of a merged document.
pub fn tables(doc: &Value) -> String {
    let empty = Vec::new();
    let paths = doc["paths"].as_array().unwrap_or(&empty);
    let names: Vec<&str> = paths
        .iter()
        .map(|p| p["path"].as_str().unwrap_or("?"))
        .collect();
    let mut sizes: Vec<u64> = paths
        .iter()
        .flat_map(|p| {
            p["cells"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["size"].as_u64())
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut threads: Vec<u64> = paths
        .iter()
        .flat_map(|p| {
            p["cells"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["threads"].as_u64())
        })
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let mut out = String::new();
    if let Some(cm) = paths
        .first()
        .map(|p| &p["cost_model"])
        .filter(|c| c.is_object())
    {
        out.push_str(&format!(
            "cost model: {} x {:.1} ({}); applied ns: {}\n",
            cm["preset"].as_str().unwrap_or("?"),
            cm["dilate"].as_f64().unwrap_or(1.0),
            cm["dilate_source"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("no dilation"),
            cm["applied_ns"]
        ));
    }
    let model = paths.first().and_then(|p| model_of(&p["cost_model"]));
    let header = |out: &mut String, first: &str| {
        out.push_str(&format!(
            "| {first} | {} |\n|---|{}\n",
            names.join(" | "),
            "---|".repeat(names.len())
        ));
    };
    let metrics: [(&str, &[&str], &str); 5] = [
        (
            "registration, median µs",
            &["reg", "median_ns"],
            "reg_median",
        ),
        ("registration, p99 µs", &["reg", "p99_ns"], "reg_p99"),
        (
            "deregistration, median µs",
            &["dereg", "median_ns"],
            "dereg_median",
        ),
        ("deregistration, p99 µs", &["dereg", "p99_ns"], "dereg_p99"),
        (
            "registration + deregistration, median µs",
            &["cycle", "median_ns"],
            "cycle_median",
        ),
    ];
    for (title, keys, rk) in metrics {
        out.push_str(&format!("\n### {title} (1 thread; ratio to the floor)\n\n"));
        header(&mut out, "size");
        for &s in &sizes {
            let row = cells_row(paths, s, 1, |c| {
                format!("{} ({})", us(num(c, keys)), x(&c["ratios"][rk]))
            });
            out.push_str(&format!("| {} | {row} |\n", size_name(s)));
        }
    }
    if paths
        .iter()
        .any(|p| p["path"].as_str().is_some_and(|n| n.starts_with("classic")))
    {
        out.push_str("\n### registration + deregistration, median, ratio to the classic C client (1 thread)\n\n");
        out.push_str(
            "(model bound: 1 pin against 2 with every cost but the modelled provider's at zero; \
floor bound: the floor path's median cycle against the same plus the classic pattern's modelled \
extra pin and unpin, i.e. with the provider's real work, the IOMMU mapping above all, counted once \
for both: about the best ratio a one-pin client can reach on this bench)\n\n",
        );
        out.push_str(&format!(
            "| size | {} | model bound | floor bound |\n|---|{}\n",
            names.join(" | "),
            "---|".repeat(names.len() + 2)
        ));
        let floor = paths.iter().find(|p| p["path"] == "floor");
        for &s in &sizes {
            let row = cells_row(paths, s, 1, |c| x(&c["ratios"]["cycle_median_vs_classic"]));
            let pages = (s >> 16).max(1);
            let bound = model
                .map(|m| x(&json!(m.cycle_ns(pages, 1) / m.cycle_ns(pages, 2))))
                .unwrap_or_else(|| "-".into());
            let fb = model
                .zip(
                    floor
                        .and_then(|f| find_cell(f, s, 1))
                        .and_then(|c| num(c, &["cycle", "median_ns"])),
                )
                .map(|(m, f)| {
                    x(&json!(
                        f / (f + m.cycle_ns(pages, 2) - m.cycle_ns(pages, 1))
                    ))
                })
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!("| {} | {row} | {bound} | {fb} |\n", size_name(s)));
        }
    }
    out.push_str("\n### where a registration + deregistration went, mean µs (1 thread): provider (of which the cost model) / client's own / rest (core + syscalls; floor: syscalls + rawfloor)\n\n");
    header(&mut out, "size");
    for &s in &sizes {
        let row = cells_row(paths, s, 1, |c| {
            let t = &c["time_split_ns_per_cycle"];
            let client = num(t, &["client_own"]).map_or("-".into(), |v| us(Some(v)));
            format!(
                "{} ({}) / {client} / {}",
                us(num(t, &["provider"])),
                us(num(t, &["provider_model"])),
                us(num(t, &["rest"]))
            )
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
    let core: Vec<&Value> = paths.iter().filter(|p| p["via"] == "core").collect();
    if !core.is_empty() {
        out.push_str("\n### registration + deregistration, mean, ratio to the floor taken apart (1 thread): ratio = 1 + provider beyond the floor + core beyond the floor + client's own (1 + provider + core: what a client costing nothing would score through this core)\n\n");
        let names: Vec<&str> = core
            .iter()
            .map(|p| p["path"].as_str().unwrap_or("?"))
            .collect();
        out.push_str(&format!(
            "| size | {} |\n|---|{}\n",
            names.join(" | "),
            "---|".repeat(names.len())
        ));
        for &s in &sizes {
            let row: Vec<String> = core
                .iter()
                .map(|p| {
                    find_cell(p, s, 1)
                        .map(|c| &c["ratios"]["cycle_mean_split"])
                        .filter(|v| v.is_object())
                        .map_or("-".into(), |v| {
                            let f = |k: &str| num(v, &[k]).unwrap_or(f64::NAN);
                            format!(
                                "{:.3} = 1 {:+.3} {:+.3} {:+.3}",
                                f("ratio"),
                                f("provider"),
                                f("core"),
                                f("client")
                            )
                        })
                })
                .collect();
            out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
        }
    }
    out.push_str("\n### cycles (reg + dereg) per second by threads (ratio to the floor at the same threads)\n\n");
    header(&mut out, "size / threads");
    for &s in &sizes {
        for &t in &threads {
            let row = cells_row(paths, s, t, |c| {
                format!(
                    "{:.1} ({})",
                    num(c, &["regs_per_s"]).unwrap_or(0.0),
                    x(&c["ratios"]["regs_per_s"])
                )
            });
            out.push_str(&format!("| {} / {t} | {row} |\n", size_name(s)));
        }
    }
    out.push_str("\n### provider calls per registration (get_pages + get_pages_persistent; all calls per reg+dereg)\n\n");
    header(&mut out, "size");
    for &s in &sizes {
        let row = cells_row(paths, s, 1, |c| {
            let pc = &c["provider_calls_per_reg"];
            let gets = num(pc, &["get_pages"]).unwrap_or(0.0)
                + num(pc, &["get_pages_persistent"]).unwrap_or(0.0);
            format!(
                "{gets:.2} get; {:.2} all",
                num(pc, &["total"]).unwrap_or(0.0)
            )
        });
        out.push_str(&format!("| {} | {row} |\n", size_name(s)));
    }
    out.push_str("\n### free (cudaFree) under one live MR, median µs (ratio to the floor); callbacks per free; MR state after\n\n");
    header(&mut out, "size");
    for &s in &sizes {
        let row: Vec<String> = paths
            .iter()
            .map(|p| {
                find_size(p, "invalidation", s).map_or("-".into(), |r| {
                    let st: Vec<String> = r["mr_state_after_free"]
                        .as_object()
                        .map(|o| o.keys().cloned().collect())
                        .unwrap_or_default();
                    format!(
                        "{} ({}); cb {}; {}",
                        us(num(r, &["free_with_live_mr", "median_ns"])),
                        x(&r["ratios"]["free_with_live_mr_median"]),
                        num(r, &["callbacks_per_free"]).unwrap_or(0.0),
                        st.join(",")
                    )
                })
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", size_name(s), row.join(" | ")));
    }
    for (sec, title) in [
        ("memory", "kernel slab memory per live 64 KiB MR"),
        ("scale", "live-MR scale test (64 KiB MRs, cost model off)"),
    ] {
        out.push_str(&format!("\n### {title}\n\n"));
        header(&mut out, "figure");
        let rows: [(&str, &str); 15] = [
            ("MRs held", "mrs"),
            ("target / reached", "reached"),
            ("stopped by", "stopped_by"),
            (
                "SUnreclaim bytes per MR (debug-padded on a KASAN kernel)",
                "meminfo_sunreclaim_bytes_per_mr",
            ),
            ("ratio to the floor", "ratio_slab_per_mr"),
            (
                "SUnreclaim bytes per MR above the floor",
                "sunreclaim_bytes_per_mr_above_floor",
            ),
            (
                "kmalloc bytes per MR, nominal sizes",
                "kmalloc_nominal_bytes_per_mr",
            ),
            (
                "kmalloc bytes per MR above the floor, nominal",
                "nominal_bytes_per_mr_above_floor",
            ),
            (
                "kmalloc profile bytes per MR (whole objects)",
                "kmalloc_profile_bytes_per_mr",
            ),
            (
                "kmalloc profile bytes per MR above the floor",
                "profile_bytes_per_mr_above_floor",
            ),
            (
                "kernel allocations per MR (kmemleak objects)",
                "kernel_allocations_per_mr",
            ),
            (
                "client's own bytes per MR (nvpeer debugfs mr_footprint_bytes)",
                "client_own_bytes_per_mr",
            ),
            ("reg µs per MR", "reg_us_per_mr"),
            ("dereg µs per MR", "dereg_us_per_mr"),
            (
                "MemAvailable drop per MR, bytes",
                "memavailable_drop_bytes_per_mr",
            ),
        ];
        for (label, key) in rows {
            if paths.iter().all(|p| p[sec].get(key).is_none()) {
                continue;
            }
            let row: Vec<String> = paths
                .iter()
                .map(|p| match &p[sec][key] {
                    Value::Null => "-".into(),
                    Value::String(s) => s.clone(),
                    v if key == "ratio_slab_per_mr" => x(v),
                    v if key == "reached" => format!("{} / {}", p[sec]["target"], v),
                    v => v.as_f64().map_or(v.to_string(), |f| format!("{f:.0}")),
                })
                .collect();
            out.push_str(&format!("| {label} | {} |\n", row.join(" | ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprint_line() {
        let c = "version 0.1.0\npersistent_api_support 1\nclient nv_mem persistent\nmr_footprint_bytes 576 record 424/512 node 40/64\n";
        assert_eq!(parse_footprint(c), Some(576));
        assert_eq!(parse_footprint("version 0.1.0\n"), None);
    }

    #[test]
    fn rawfloor_abi_sizes() {
        // rawfloor_ioctl.h: struct rf_reg 48 bytes, struct rf_dereg 24 bytes, no padding.
        assert_eq!(std::mem::size_of::<rf::Reg>(), 48);
        assert_eq!(std::mem::size_of::<rf::Dereg>(), 24);
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50.0), 50);
        assert_eq!(pct(&v, 99.0), 99);
        assert_eq!(pct(&[7], 99.0), 7);
        assert_eq!(pct(&[], 50.0), 0);
    }

    #[test]
    fn nominal_sizes() {
        assert_eq!(nominal("kmalloc-192", 400), 192);
        assert_eq!(nominal("kmalloc-cg-1k", 2000), 1024);
        assert_eq!(nominal("kmalloc-rcl-64", 100), 64);
        assert_eq!(nominal("anon_vma", 88), 88);
    }

    #[test]
    fn ratios_against_the_floor() {
        let cell = |ns: u64| json!({"size": 65536, "threads": 1, "reg": {"median_ns": ns}, "cycle": {"median_ns": ns}});
        let floor =
            json!({"path": "floor", "via": "floor", "floor_ref": "floor", "cells": [cell(100)]});
        let nv = json!({"path": "nvpeer-inval", "via": "core", "floor_ref": "floor", "cells": [cell(110)]});
        let doc = report(vec![floor, nv], "test");
        assert_eq!(
            doc["paths"][1]["cells"][0]["ratios"]["reg_median"],
            json!(1.1)
        );
        assert_eq!(
            doc["paths"][0]["cells"][0]["ratios"]["reg_median"],
            json!(1.0)
        );
        assert!(tables(&doc).contains("1.10x"));
    }

    #[test]
    fn adjacent_floor_and_check() {
        let cell = |ns: u64, gets: f64| {
            json!({"size": 65536, "threads": 1, "regs_per_s": 10.0,
                   "reg": {"median_ns": ns, "p99_ns": ns}, "dereg": {"median_ns": ns},
                   "cycle": {"median_ns": ns},
                   "provider_calls_per_reg": {"get_pages": gets, "get_pages_persistent": 0.0},
                   "time_split_ns_per_cycle": time_split(&[ns], ns / 2, Some(ns * 3 / 4))})
        };
        let floor = json!({"path": "floor", "via": "floor", "floor_ref": "floor", "cells": [cell(100, 1.0)]});
        let mut k = cell(400, 2.0);
        k["adjacent_floor"] = cell(200, 1.0);
        let classic = json!({"path": "classic", "via": "core", "floor_ref": "floor", "classic_ref": "classic", "cells": [k]});
        let mut c = cell(150, 1.0);
        c["adjacent_floor"] = cell(100, 1.0);
        let nv = json!({"path": "nvpeer-inval", "via": "core", "floor_ref": "floor", "classic_ref": "classic", "cells": [c]});
        let doc = report(vec![floor, classic, nv], "test");
        let r = &doc["paths"][2]["cells"][0]["ratios"];
        assert_eq!(r["reg_median"], json!(1.5));
        // (150 / 100) / (400 / 200)
        assert_eq!(r["cycle_median_vs_classic"], json!(0.75));
        // Mean 150 over 100: provider 75 - 50, client 112 - 75, core (150 - 75 - 37) - (100 - 50).
        assert_eq!(
            r["cycle_mean_split"],
            json!({"ratio": 1.5, "provider": 0.25, "core": -0.12, "client": 0.37})
        );
        // Taken apart for core paths only (classic: its second pin is the provider's +0.5).
        assert!(doc["paths"][0]["cells"][0]["ratios"]["cycle_mean_split"].is_null());
        assert!(tables(&doc)
            .contains("| 64K | 2.000 = 1 +0.500 +0.000 +0.500 | 1.500 = 1 +0.250 -0.120 +0.370 |"));
        assert!(check(&doc, &["nvpeer-inval=1".into(), "classic=2".into()]).is_empty());
        assert_eq!(check(&doc, &["classic=1".into()]).len(), 1);
        // A cell without the time split, or a core path whose client time is below the
        // provider's, is reported.
        let mut bad = doc.clone();
        bad["paths"][0]["cells"][0]["time_split_ns_per_cycle"] = json!(null);
        bad["paths"][2]["cells"][0]["time_split_ns_per_cycle"] = time_split(&[150], 75, Some(10));
        assert_eq!(check(&bad, &[]).len(), 2);
    }

    #[test]
    fn time_split_parts_add_up() {
        let t = time_split(&[100, 300], 200, Some(300));
        assert_eq!(t["mean"], json!(200.0));
        assert_eq!(t["provider"], json!(100.0));
        assert_eq!(t["client_own"], json!(50.0));
        assert_eq!(t["rest"], json!(50.0));
        assert!(time_split(&[100], 50, None).get("client_own").is_none());
    }
}

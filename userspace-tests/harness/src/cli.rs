//! Command-line arguments of `nvpeer validate` and `nvpeer bench`, and the small value parsers
//! they use (byte sizes with units, GPU selectors).

use clap::ValueEnum;
use std::fmt;

/// Where the test buffers live and how they are registered with the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemKind {
    /// Page-aligned host memory, `ibv_reg_mr` (the baseline every NIC must pass).
    Host,
    /// `cuMemAlloc` GPU memory, `ibv_reg_mr` (the peer-memory path through nv_mem).
    Cuda,
    /// `cuMemAlloc` GPU memory exported as a dma-buf fd, `ibv_reg_dmabuf_mr`.
    CudaDmabuf,
    /// Emulated GPU memory from the bench's `/dev/nvp2p_emu` (registration path only; test bench
    /// builds only: feature `bench`).
    #[cfg(feature = "bench")]
    Emu,
}

impl MemKind {
    /// Whether this is the bench's emulated GPU memory (never, in a build without the bench).
    pub fn is_emu(self) -> bool {
        #[cfg(feature = "bench")]
        return self == MemKind::Emu;
        #[cfg(not(feature = "bench"))]
        false
    }
}

impl fmt::Display for MemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemKind::Host => "host",
            MemKind::Cuda => "cuda",
            MemKind::CudaDmabuf => "cuda-dmabuf",
            #[cfg(feature = "bench")]
            MemKind::Emu => "emu",
        })
    }
}

/// Options shared by `validate` and `bench`: memory, RDMA device, two-node mode.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Memory backend of the test buffers.
    #[arg(long = "mem", value_enum, default_value_t = MemKind::Host)]
    pub mem: MemKind,
    /// GPU to use: a CUDA ordinal (`0`) or a PCI bus id (`0000:3b:00.0`), like perftest's
    /// `--use_cuda` / `--use_cuda_bus_id`.
    #[arg(long = "gpu", default_value = "0")]
    pub gpu: GpuSelector,
    /// RDMA device name (default: the first one with an active port).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// RDMA device port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index, 0-255 (default: a RoCE v2 IPv4-mapped GID if there is one, else index 0).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// Two-node mode: serve `--client`s on the TCP port, one at a time, until stopped.
    #[arg(long, conflicts_with = "client")]
    pub server: bool,
    /// Two-node mode: connect to the `--server` running on HOST.
    #[arg(long, value_name = "HOST")]
    pub client: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How the two-node server listens and whom it serves.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Server: address to listen on (loopback unless told; `0.0.0.0` or `::` for every
    /// interface, which needs `--token` or `--allow-any-peer`).
    #[arg(long = "bind", value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: String,
    /// Shared secret both sides must give; each side proves it to the other without sending it,
    /// and a client with another token is refused (a client given one admits only a server that
    /// proves it). Prefer the environment variable (a command line is visible to every user of
    /// the node).
    #[arg(long = "token", env = "NVPEER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Server: serve peers from any address without a token (trusted networks only).
    #[arg(long = "allow-any-peer")]
    pub allow_any_peer: bool,
    /// Server: exit after the first client is done (the default serves clients until stopped).
    #[arg(long = "once")]
    pub once: bool,
    /// What one peer may make the server take (memory, QPs, time).
    #[command(flatten)]
    pub caps: crate::limits::Caps,
}

impl CommonArgs {
    /// The role of this process.
    pub fn role(&self) -> Role {
        if self.server {
            Role::Server
        } else if let Some(h) = &self.client {
            Role::Client(h.clone())
        } else {
            Role::Loopback
        }
    }
}

/// Loopback (two QPs on one device) or one side of a two-node run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Loopback,
    Server,
    Client(String),
}

/// A GPU chosen by CUDA ordinal or by PCI bus id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSelector {
    Index(u32),
    BusId(String),
}

impl std::str::FromStr for GpuSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty GPU selector".into());
        }
        if let Ok(i) = s.parse::<u32>() {
            return Ok(GpuSelector::Index(i));
        }
        // [domain:]bus:device.function, hex digits.
        let (head, func) = s.rsplit_once('.').ok_or_else(|| bad_bus(s))?;
        let parts: Vec<&str> = head.split(':').collect();
        let hex = |p: &str, max: usize| {
            !p.is_empty() && p.len() <= max && p.chars().all(|c| c.is_ascii_hexdigit())
        };
        let ok = match parts.as_slice() {
            [d, b, dev] => hex(d, 8) && hex(b, 2) && hex(dev, 2),
            [b, dev] => hex(b, 2) && hex(dev, 2),
            _ => false,
        } && func.len() == 1
            && func.chars().all(|c| ('0'..='7').contains(&c));
        if !ok {
            return Err(bad_bus(s));
        }
        Ok(GpuSelector::BusId(s.to_ascii_lowercase()))
    }
}

fn bad_bus(s: &str) -> String {
    format!("'{s}' is neither a CUDA device index nor a PCI bus id like 0000:3b:00.0")
}

impl fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuSelector::Index(i) => write!(f, "{i}"),
            GpuSelector::BusId(b) => f.write_str(b),
        }
    }
}

/// Parses a byte count with binary units (see [`nvpeer_figures::size`]); zero is rejected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    nvpeer_figures::size::parse(s)
}

/// Arguments of `nvpeer validate`.
#[derive(clap::Args, Debug, Clone)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Largest registration in the size matrix.
    #[arg(long = "max-size", default_value = "4M", value_parser = parse_size)]
    pub max_size: u64,
    /// Size of the data-integrity transfers (one message each, at most 2G).
    #[arg(long = "xfer-size", default_value = "64K", value_parser = nvpeer_figures::size::parse_message)]
    pub xfer_size: u64,
    /// Number of MRs held at once in the "many small MRs" case.
    #[arg(long = "small-mrs", default_value_t = 64)]
    pub small_mrs: u32,
    /// Register/deregister cycles in the churn case.
    #[arg(long = "churn", default_value_t = 32)]
    pub churn: u32,
    /// Also run the registration matrix over the dma-buf path when `--mem cuda` is used
    /// (peer-memory and dma-buf side by side).
    #[arg(long = "both-paths")]
    pub both_paths: bool,
    /// Only run cases whose name contains one of these comma-separated words.
    #[arg(long = "only", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Also hold the node to a node profile (a TOML file, or a built-in's name: dgx-h100,
    /// dgx-h200, azure-nd-h100-v5, azure-nd-h200-v5; docs/operations.md): the case
    /// `node.profile`, which `nvpeer doctor --profile` makes its check.
    #[arg(long = "profile", value_name = "FILE|NAME", conflicts_with_all = ["nccl", "server"])]
    pub profile: Option<std::path::PathBuf>,
    /// The kinds of GPU memory to check (comma-separated): with `--mem cuda` or `cuda-dmabuf`,
    /// the `mem.kind[...]` cases (what the CUDA driver says about each, against what is expected
    /// of it); with the bench's `--mem emu`, the `reg.kind[...]` cases (each registered through
    /// the emulated core, as NVIDIA's P2P API treats that kind).
    #[arg(long = "alloc", value_delimiter = ',', default_values_t = crate::mem::cuda::kinds::AllocKind::ALL)]
    pub alloc: Vec<crate::mem::cuda::kinds::AllocKind>,
    /// Seed of the data patterns (default: derived from the time).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write the results as JUnit XML to this file (one test case per validation case).
    #[arg(long = "junit", value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
    /// With --report DIR: render the report of a saved `nvpeer validate --json` document instead
    /// of running the cases (the exit status is that run's).
    #[arg(long = "report-from", value_name = "FILE")]
    pub report_from: Option<std::path::PathBuf>,
    /// With --report DIR: `nvpeer bench --json` documents whose sweeps the report plots and
    /// keeps beside the page (comma-separated or repeated).
    #[arg(long = "report-bench", value_name = "FILE", value_delimiter = ',')]
    pub report_bench: Vec<std::path::PathBuf>,
    /// Run NCCL's own test instead of the verbs cases: nccl-tests' `all_reduce_perf` over the
    /// node's GPUs with NCCL's P2P and SHM transports off, so that their traffic loops through
    /// the NIC; reports its bus bandwidth and which path NCCL took (validate/nccl.rs).
    #[arg(long = "nccl", conflicts_with_all = ["server", "only", "report_from"])]
    pub nccl: bool,
    /// With --nccl: the `all_reduce_perf` binary (default: the one on PATH).
    #[arg(long = "nccl-tests", value_name = "BIN", requires = "nccl")]
    pub nccl_tests: Option<std::path::PathBuf>,
    /// With --nccl: GPUs to run over (`-g`); 0, the default, is every NVIDIA GPU of the node.
    #[arg(long = "nccl-gpus", default_value_t = 0, requires = "nccl")]
    pub nccl_gpus: u32,
    /// With --nccl: the largest message (`-e`).
    #[arg(long = "nccl-max-size", default_value = "128M", value_parser = parse_size, requires = "nccl")]
    pub nccl_max_size: u64,
    /// With --nccl: seconds before the test is killed as hung.
    #[arg(long = "nccl-timeout", default_value_t = 600, requires = "nccl")]
    pub nccl_timeout: u64,
    /// The report's directory: `--report DIR` (an option of `nvpeer validate`'s, shared with
    /// `--fleet`), set by the command that owns it.
    #[arg(skip)]
    pub report: Option<std::path::PathBuf>,
}

/// Which measurement `nvpeer bench` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchTest {
    /// Registration latency per size: reg, dereg, reg+dereg.
    Reg,
    /// RDMA WRITE bandwidth (`ib_write_bw`).
    #[value(name = "write_bw")]
    WriteBw,
    /// RDMA READ bandwidth (`ib_read_bw`).
    #[value(name = "read_bw")]
    ReadBw,
    /// SEND bandwidth (`ib_send_bw`).
    #[value(name = "send_bw")]
    SendBw,
    /// WRITE_WITH_IMM ping-pong latency (`ib_write_lat --write_with_imm`).
    #[value(name = "write_lat")]
    WriteLat,
}

impl BenchTest {
    pub fn name(self) -> &'static str {
        match self {
            BenchTest::Reg => "reg",
            BenchTest::WriteBw => "write_bw",
            BenchTest::ReadBw => "read_bw",
            BenchTest::SendBw => "send_bw",
            BenchTest::WriteLat => "write_lat",
        }
    }
}

/// Parses perftest's `-m`: a path MTU in bytes, one of 256, 512, 1024, 2048, 4096.
pub fn parse_mtu(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': expected an MTU in bytes (256, 512, 1024, 2048 or 4096)"))?;
    crate::verbs::mtu_code(v)
        .map(|_| v)
        .ok_or_else(|| format!("'{s}': the MTU must be one of 256, 512, 1024, 2048, 4096"))
}

/// Parses perftest's `-T`: a traffic class (ToS) byte, 0-255, in decimal or `0x` hex.
pub fn parse_tos(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    }
    .map_err(|_| format!("'{s}': expected a traffic class (ToS) 0-255, e.g. 106 or 0x6a"))?;
    u8::try_from(v).map_err(|_| format!("'{s}': the traffic class (ToS) is one byte, 0-255"))
}

/// Arguments of `nvpeer bench`. Where an option exists in perftest (`ib_write_bw` and friends) it
/// has perftest's letter, long name and default; `--test` picks the measurement (perftest has one
/// binary per test, and its `-t` is the TX depth).
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Tests to run (comma-separated).
    #[arg(
        long = "test",
        value_enum,
        value_delimiter = ',',
        default_value = "reg,write_bw,write_lat"
    )]
    pub tests: Vec<BenchTest>,
    /// Sweep all sizes from 2 bytes to `--max-size` in powers of two (perftest `-a`: 2 .. 2^23).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Message size when not sweeping, at most 2G (the InfiniBand maximum message size). Default
    /// as perftest's per test: 2 for write_lat (`ib_write_lat`), 65536 for the bandwidth tests and
    /// reg (perftest `-s`); one `-s` given applies to every test of the run.
    #[arg(short = 's', long = "size", value_parser = nvpeer_figures::size::parse_message)]
    pub size: Option<u64>,
    /// Largest size of a sweep (perftest: 8 MiB).
    #[arg(long = "max-size", default_value = "8M", value_parser = parse_size)]
    pub max_size: u64,
    /// Iterations per size, at least 5 (perftest `-n`: 5000 for write_bw, 1000 for the others).
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u32).range(5..))]
    pub iters: Option<u32>,
    /// Outstanding work requests of the bandwidth tests (perftest `-t`, `--tx-depth`).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tx_depth: u32,
    /// QP pairs of write_bw and read_bw, posting in turn, `-n` requests each (perftest `-q`).
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub qps: u32,
    /// Run each bandwidth measurement for SECS seconds instead of `-n` iterations (perftest `-D`):
    /// the figures cover the middle `SECS - 2 * margin` seconds, and no peak is measured.
    #[arg(short = 'D', long = "duration", value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..=86400))]
    pub duration: Option<u32>,
    /// Seconds left out at each end of a `-D` run (perftest `-f`, `--margin`, default 2).
    #[arg(short = 'f', long = "margin", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub margin: u32,
    /// Bidirectional bandwidth (perftest `-b`): both sides post at once, each measures its own
    /// requests, and the figures are the sum of both sides' (write_bw, read_bw, send_bw). Two
    /// nodes: give `-b` to the `--server` too; a server and a client that disagree are refused at
    /// the hello (exit 2). Not with `--perftest`.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Do not compute the peak bandwidth (perftest `-N`; it is also skipped above 20000 iterations).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Path MTU in bytes (perftest `-m`; default: the port's active MTU). The smaller of the two
    /// sides' MTUs is used.
    #[arg(short = 'm', long = "mtu", value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// RDMA READs in flight (perftest `-o`, `--outs_num`; default: the device maximum). The far
    /// side's limit also applies.
    #[arg(short = 'o', long = "outs_num", value_parser = clap::value_parser!(u8).range(1..=255))]
    pub out_reads: Option<u8>,
    /// Traffic class (ToS) of this side's QPs, 0-255 (perftest `-T`, `--tos`): the GRH traffic
    /// class of the address vector, which RoCE v2 sends as the IP header's DSCP/ECN byte. Not
    /// carried on a path without a GRH (InfiniBand reached by LID). Default 0.
    #[arg(short = 'T', long = "tos", value_name = "TOS", value_parser = parse_tos)]
    pub tos: Option<u8>,
    /// Report bandwidth in Gb/s instead of MiB/s (perftest `--report_gbits`).
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// Before each size's measured run, post TX-depth requests on every QP and wait for them
    /// (perftest `--perform_warm_up`; write_bw and read_bw, as perftest; other tests ignore it,
    /// as perftest's do).
    #[arg(long = "perform_warm_up", alias = "perform-warm-up")]
    pub perform_warm_up: bool,
    /// Register without PCIe relaxed ordering (perftest `--disable_pcie_relaxed`). By default,
    /// as perftest, every buffer is registered with `IBV_ACCESS_RELAXED_ORDERING`; give it on
    /// both sides, as perftest asks, on a CPU that mishandles relaxed ordering.
    #[arg(long = "disable_pcie_relaxed", alias = "disable-pcie-relaxed")]
    pub disable_pcie_relaxed: bool,
    /// Export GPU memory's dma-bufs with the PCIe mapping type
    /// (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, CUDA 12.8+), as perftest's
    /// `--use_cuda_pcie_mapping`: the NIC reaches the memory through the GPU's BAR, as GPUDirect
    /// RDMA over dma-buf needs on GPUs coherently attached to their CPU. With `--mem cuda-dmabuf`
    /// only.
    #[arg(long = "use_cuda_pcie_mapping", alias = "use-cuda-pcie-mapping")]
    pub use_cuda_pcie_mapping: bool,
    /// Write the report as perftest's `--out_json` does (to `--out_json_file`, default
    /// `perftest_out.json`); one test per run, as a perftest binary measures one.
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// File of `--out_json` (perftest `--out_json_file`); implies `--out_json`.
    #[arg(long = "out_json_file", alias = "out-json-file", value_name = "FILE")]
    pub out_json_file: Option<std::path::PathBuf>,
    /// GPU memory on CUDA device ID (perftest `--use_cuda`): the same as `--mem cuda --gpu ID`.
    #[arg(long = "use_cuda", value_name = "ID", conflicts_with_all = ["mem", "gpu"])]
    pub use_cuda: Option<u32>,
    /// GPU memory on the CUDA device at this PCI bus id (perftest `--use_cuda_bus_id`).
    #[arg(long = "use_cuda_bus_id", value_name = "BUS_ID", conflicts_with_all = ["mem", "gpu", "use_cuda"])]
    pub use_cuda_bus_id: Option<GpuSelector>,
    /// With `--use_cuda`/`--use_cuda_bus_id`: register through dma-buf (perftest
    /// `--use_cuda_dmabuf`), the same as `--mem cuda-dmabuf`.
    #[arg(long = "use_cuda_dmabuf")]
    pub use_cuda_dmabuf: bool,
    /// The far side is perftest (`ib_write_bw` / `ib_read_bw` started as a server with the same
    /// `-s`/`-a`): speak its out-of-band exchange instead of nvpeer's (with `--client`; one
    /// `--test`, write_bw or read_bw). A `--server` recognises perftest clients by itself.
    #[arg(long = "perftest", requires = "client")]
    pub perftest: bool,
    /// Accepted for perftest command lines (perftest `-F`, `--CPU-freq`: no cpufreq warning);
    /// nvpeer times with the monotonic clock, not CPU cycles, and never warns about the governor.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// The port's line rate in Gb/s, one direction (default: the device's,
    /// `/sys/class/infiniband/<dev>/ports/<port>/rate`, speed × width). Giving it makes a
    /// bandwidth test below the threshold fail the run (exit 1).
    #[arg(long = "line-rate", value_name = "GBPS", value_parser = crate::line_rate::parse_gbps)]
    pub line_rate: Option<f64>,
    /// The fraction of the line rate each bandwidth test's BW_average must reach at its largest
    /// size (default 0.9, NVIDIA's ngc_multinode_perf; with `-b` against twice the line rate).
    /// Giving it makes a test below it fail the run (exit 1); without it or `--line-rate` the
    /// verdict is printed as advisory.
    #[arg(long = "bw-threshold", value_name = "FRACTION", value_parser = crate::line_rate::parse_fraction)]
    pub bw_threshold: Option<f64>,
    /// Check the data of the bandwidth tests: the source buffer holds a pattern, and after each
    /// size the destination must hold it (perftest `--data_validation`); a mismatch fails the test.
    #[arg(long = "data-validation", alias = "data_validation")]
    pub data_validation: bool,
    /// Never draw progress bars.
    #[arg(long = "no-progress")]
    pub no_progress: bool,
    /// Also write the results as JUnit XML to this file (one test case per test and size).
    #[arg(long = "junit", value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
}

/// perftest's default message size of its bandwidth tests (`DEF_SIZE_BW` in perftest's
/// `src/perftest_parameters.h`).
pub const DEF_SIZE_BW: u64 = 65536;
/// perftest's default message size of its latency tests (`DEF_SIZE_LAT`).
pub const DEF_SIZE_LAT: u64 = 2;

impl BenchArgs {
    /// Whether this side registers with PCIe relaxed ordering: perftest's default, off with
    /// `--disable_pcie_relaxed`.
    pub fn relaxed_ordering(&self) -> bool {
        !self.disable_pcie_relaxed
    }

    /// The message size of `test` when not sweeping: `-s` if given, else perftest's default for
    /// that kind of test ([`DEF_SIZE_LAT`] for the latency test, [`DEF_SIZE_BW`] for the others;
    /// `reg` keeps the bandwidth default, perftest having no such test).
    pub fn size_for(&self, test: BenchTest) -> u64 {
        self.size.unwrap_or(match test {
            BenchTest::WriteLat => DEF_SIZE_LAT,
            BenchTest::WriteBw | BenchTest::ReadBw | BenchTest::SendBw | BenchTest::Reg => {
                DEF_SIZE_BW
            }
        })
    }

    /// The buffer a `--server` offers perftest clients: the top of the `-a` sweep, else the
    /// message size of the tests it pairs with (`ib_write_bw`/`ib_read_bw`, so perftest's
    /// bandwidth default when `-s` is not given, as those clients' own default).
    pub fn serve_size(&self) -> u64 {
        if self.all {
            self.max_size
        } else {
            self.size_for(BenchTest::WriteBw)
        }
    }

    /// Iterations of `test` (perftest's defaults where `-n` is not given).
    pub fn iters_for(&self, test: BenchTest) -> u32 {
        self.iters.unwrap_or(if test == BenchTest::WriteBw {
            5000
        } else {
            1000
        })
    }

    /// The fraction of the line rate the bandwidth tests are judged at, and whether a failure
    /// fails the run (the user asked for the verdict: `--bw-threshold` or `--line-rate`).
    pub fn threshold(&self) -> (f64, bool) {
        (
            self.bw_threshold
                .unwrap_or(crate::line_rate::DEFAULT_FRACTION),
            self.bw_threshold.is_some() || self.line_rate.is_some(),
        )
    }

    /// `--mem` and `--gpu` with perftest's `--use_cuda*` options applied.
    pub fn memory(&self) -> (MemKind, GpuSelector) {
        let gpu = match (&self.use_cuda, &self.use_cuda_bus_id) {
            (Some(i), _) => Some(GpuSelector::Index(*i)),
            (None, Some(b)) => Some(b.clone()),
            (None, None) => None,
        };
        match gpu {
            Some(g) if self.use_cuda_dmabuf => (MemKind::CudaDmabuf, g),
            Some(g) => (MemKind::Cuda, g),
            None => (self.common.mem, self.common.gpu.clone()),
        }
    }

    /// The file `--out_json` writes, if any.
    pub fn json_file(&self) -> Option<std::path::PathBuf> {
        match &self.out_json_file {
            Some(f) => Some(f.clone()),
            None if self.out_json => Some("perftest_out.json".into()),
            None => None,
        }
    }

    /// Checks the combinations clap cannot express; the message says what to change.
    pub fn check(&self) -> Result<(), String> {
        if let Some(d) = self.duration {
            if d <= 2 * self.margin {
                return Err(format!("-D {d} must be longer than twice the margin (-f {}): nothing would be measured", self.margin));
            }
            if let Some(t) = self
                .tests
                .iter()
                .find(|t| !matches!(t, BenchTest::WriteBw | BenchTest::ReadBw))
            {
                return Err(format!(
                    "-D runs write_bw and read_bw only, not {}",
                    t.name()
                ));
            }
        }
        if self.qps > 1 {
            if self.perftest {
                return Err("--perftest pairs one QP; -q is for runs against nvpeer".into());
            }
            if let Some(t) = self
                .tests
                .iter()
                .find(|t| !matches!(t, BenchTest::WriteBw | BenchTest::ReadBw))
            {
                return Err(format!(
                    "-q runs write_bw and read_bw only, not {}",
                    t.name()
                ));
            }
        }
        if self.bidirectional {
            if self.perftest {
                return Err(
                    "-b with --perftest: bidirectional pairing with perftest is not \
                            implemented; run -b against nvpeer (loopback, or `nvpeer bench \
                            --server -b`)"
                        .into(),
                );
            }
            // A server runs whatever its clients ask: its --test list does not matter.
            if !self.common.server {
                if let Some(t) = self.tests.iter().find(|t| {
                    !matches!(
                        t,
                        BenchTest::WriteBw | BenchTest::ReadBw | BenchTest::SendBw
                    )
                }) {
                    return Err(format!(
                        "-b runs the bandwidth tests (write_bw, read_bw, send_bw) only, not {}: \
                         give --test with those",
                        t.name()
                    ));
                }
            }
        }
        if self.json_file().is_some() && self.tests.len() != 1 {
            return Err(
                "--out_json writes one test's report, as perftest does: give one --test".into(),
            );
        }
        if self.perftest
            && !matches!(
                self.tests.as_slice(),
                [BenchTest::WriteBw] | [BenchTest::ReadBw]
            )
        {
            return Err("--perftest pairs with ib_write_bw or ib_read_bw: give --test write_bw or --test read_bw".into());
        }
        if self.data_validation && self.perftest {
            return Err(
                "--data-validation checks buffers through nvpeer's far side; perftest's \
                        server does not show its buffer: run it against nvpeer"
                    .into(),
            );
        }
        if self.use_cuda_dmabuf && self.use_cuda.is_none() && self.use_cuda_bus_id.is_none() {
            return Err("--use_cuda_dmabuf needs --use_cuda or --use_cuda_bus_id".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_selectors() {
        assert_eq!("0".parse::<GpuSelector>().unwrap(), GpuSelector::Index(0));
        assert_eq!("3".parse::<GpuSelector>().unwrap(), GpuSelector::Index(3));
        assert_eq!(
            "0000:3B:00.0".parse::<GpuSelector>().unwrap(),
            GpuSelector::BusId("0000:3b:00.0".into())
        );
        assert_eq!(
            "3b:00.1".parse::<GpuSelector>().unwrap(),
            GpuSelector::BusId("3b:00.1".into())
        );
        for bad in ["", "gpu0", "3b:00", "0000:3b:00.9", "zz:00.0", "1:2:3:4.0"] {
            assert!(bad.parse::<GpuSelector>().is_err(), "{bad}");
        }
    }

    #[test]
    fn cli_parses_like_perftest() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        let t = T::try_parse_from([
            "x",
            "--mem",
            "cuda-dmabuf",
            "-a",
            "-n",
            "5",
            "--test",
            "write_bw,reg",
            "--client",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!(t.b.common.mem, MemKind::CudaDmabuf);
        assert!(t.b.all);
        assert_eq!(t.b.tests, vec![BenchTest::WriteBw, BenchTest::Reg]);
        assert_eq!(t.b.common.role(), Role::Client("10.0.0.1".into()));
        assert!(T::try_parse_from(["x", "-n", "4"]).is_err());
        assert!(T::try_parse_from(["x", "--server", "--client", "h"]).is_err());
        // perftest's letters and defaults.
        let t = T::try_parse_from([
            "x",
            "-t",
            "64",
            "-m",
            "1024",
            "-D",
            "5",
            "--test",
            "read_bw",
            "--report_gbits",
            "--out_json",
        ])
        .unwrap();
        assert_eq!(
            (t.b.tx_depth, t.b.mtu, t.b.duration, t.b.margin),
            (64, Some(1024), Some(5), 2)
        );
        assert!(t.b.report_gbits && t.b.check().is_ok());
        assert!(
            t.b.relaxed_ordering(),
            "relaxed ordering on by default, as perftest"
        );
        let ro = T::try_parse_from(["x", "--disable_pcie_relaxed"]).unwrap();
        assert!(!ro.b.relaxed_ordering(), "--disable_pcie_relaxed");
        let pm =
            T::try_parse_from(["x", "--mem", "cuda-dmabuf", "--use_cuda_pcie_mapping"]).unwrap();
        assert!(pm.b.use_cuda_pcie_mapping && !t.b.use_cuda_pcie_mapping);
        assert_eq!(t.b.json_file(), Some("perftest_out.json".into()));
        assert_eq!(t.b.iters_for(BenchTest::WriteBw), 5000);
        assert_eq!(t.b.iters_for(BenchTest::ReadBw), 1000);
        assert!(T::try_parse_from(["x", "-t", "write_bw"]).is_err());
        assert!(T::try_parse_from(["x", "-m", "1500"]).is_err());
        let t = T::try_parse_from(["x", "-D", "4", "--test", "write_bw"]).unwrap();
        assert!(t.b.check().is_err());
        let t = T::try_parse_from(["x", "-D", "9", "--test", "write_lat"]).unwrap();
        assert!(t.b.check().is_err());
        let t = T::try_parse_from(["x", "--out_json_file", "f.json"]).unwrap();
        assert!(t.b.check().is_err());
        // --junit takes every test, unlike --out_json.
        let t = T::try_parse_from(["x", "--junit", "b.xml", "--test", "reg,write_bw"]).unwrap();
        assert_eq!(t.b.junit, Some("b.xml".into()));
        assert!(t.b.check().is_ok());
        let t = T::try_parse_from(["x", "--use_cuda", "1", "--use_cuda_dmabuf"]).unwrap();
        assert_eq!(t.b.memory(), (MemKind::CudaDmabuf, GpuSelector::Index(1)));
        assert!(T::try_parse_from(["x", "--use_cuda", "1", "--mem", "host"]).is_err());
        assert!(T::try_parse_from(["x", "--perftest"]).is_err());
        let t = T::try_parse_from(["x", "-q", "4", "--test", "write_bw,read_bw"]).unwrap();
        assert!(t.b.qps == 4 && t.b.check().is_ok());
        let t = T::try_parse_from(["x", "-q", "2", "--test", "write_lat"]).unwrap();
        assert!(t.b.check().is_err());
        assert!(T::try_parse_from(["x", "-q", "0"]).is_err());
        let t = T::try_parse_from([
            "x",
            "--perftest",
            "--client",
            "h",
            "--test",
            "write_bw,read_bw",
        ])
        .unwrap();
        assert!(t.b.check().is_err());
    }

    #[test]
    fn sizes_and_indexes_never_truncate() {
        use clap::Parser;
        #[derive(Parser)]
        struct B {
            #[command(flatten)]
            b: BenchArgs,
        }
        #[derive(Parser)]
        struct V {
            #[command(flatten)]
            v: ValidateArgs,
        }
        // A GID index above 255 or a message above 2 GiB is refused, never wrapped or truncated.
        assert!(B::try_parse_from(["x", "-x", "300"]).is_err());
        assert_eq!(
            B::try_parse_from(["x", "-x", "255"])
                .unwrap()
                .b
                .common
                .gid_index,
            Some(255)
        );
        let e = B::try_parse_from(["x", "-s", "4G"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("one RDMA message"), "{e}");
        assert_eq!(
            B::try_parse_from(["x", "-s", "2G"]).unwrap().b.size,
            Some(1 << 31)
        );
        assert!(V::try_parse_from(["x", "--xfer-size", "4G"]).is_err());
        // Registrations may be larger than one message.
        assert_eq!(
            V::try_parse_from(["x", "--max-size", "4G"])
                .unwrap()
                .v
                .max_size,
            4 << 30
        );
        let v = V::try_parse_from(["x"]).unwrap().v;
        assert_eq!(v.common.serve.bind, "127.0.0.1");
        assert!(!v.common.serve.once && !v.common.serve.allow_any_peer);
        assert_eq!(v.common.serve.caps, crate::limits::Caps::default());
    }

    #[test]
    fn message_size_defaults_per_test_like_perftest() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        // No -s: perftest's DEF_SIZE_LAT for the latency test, DEF_SIZE_BW for the others.
        let b = T::try_parse_from(["x"]).unwrap().b;
        assert_eq!(b.size, None);
        assert_eq!(b.size_for(BenchTest::WriteLat), 2);
        for t in [
            BenchTest::WriteBw,
            BenchTest::ReadBw,
            BenchTest::SendBw,
            BenchTest::Reg,
        ] {
            assert_eq!(b.size_for(t), 65536, "{}", t.name());
        }
        // The server offers perftest's bandwidth clients their own default.
        assert_eq!(b.serve_size(), 65536);
        // A given -s is every test's size, the latency test's too, and the server's buffer.
        let b = T::try_parse_from(["x", "-s", "4K"]).unwrap().b;
        for t in [
            BenchTest::WriteLat,
            BenchTest::WriteBw,
            BenchTest::ReadBw,
            BenchTest::SendBw,
            BenchTest::Reg,
        ] {
            assert_eq!(b.size_for(t), 4096, "{}", t.name());
        }
        assert_eq!(b.serve_size(), 4096);
        // -a: the server offers the top of the sweep whatever -s says.
        let b = T::try_parse_from(["x", "-a", "--max-size", "1M", "-s", "2"])
            .unwrap()
            .b;
        assert_eq!(b.serve_size(), 1 << 20);
        let b = T::try_parse_from(["x", "-a"]).unwrap().b;
        assert_eq!(b.serve_size(), 8 << 20);
    }

    #[test]
    fn bidirectional_is_for_the_bandwidth_tests_against_nvpeer() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        let p = |argv: &[&str]| {
            T::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
                .unwrap()
                .b
        };
        assert!(!p(&[]).bidirectional);
        for argv in [
            &["-b", "--test", "write_bw"][..],
            &["--bidirectional", "--test", "read_bw,send_bw,write_bw"],
            &["-b", "--test", "write_bw", "-q", "2", "-D", "5"],
            &["-b", "--test", "send_bw", "--client", "h"],
            // The server runs what its clients ask, whatever its own --test list says.
            &["-b", "--server"],
        ] {
            let b = p(argv);
            assert!(b.bidirectional, "{argv:?}");
            assert_eq!(b.check(), Ok(()), "{argv:?}");
        }
        // The default --test list has reg and write_lat: refused, naming the first.
        let e = p(&["-b"]).check().unwrap_err();
        assert!(e.contains("-b") && e.contains("not reg"), "{e}");
        let e = p(&["-b", "--test", "write_bw,write_lat"])
            .check()
            .unwrap_err();
        assert!(e.contains("not write_lat"), "{e}");
        // No bidirectional pairing with perftest.
        let e = p(&["-b", "--perftest", "--client", "h", "--test", "write_bw"])
            .check()
            .unwrap_err();
        assert!(
            e.contains("--perftest") && e.contains("not implemented"),
            "{e}"
        );
    }

    #[test]
    fn line_rate_threshold_and_data_validation() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        let p = |argv: &[&str]| {
            T::try_parse_from(std::iter::once("x").chain(argv.iter().copied())).map(|t| t.b)
        };
        // Default: 0.9 of the device's rate, advisory.
        let b = p(&[]).unwrap();
        assert_eq!(
            (b.line_rate, b.bw_threshold, b.data_validation),
            (None, None, false)
        );
        assert_eq!(b.threshold(), (0.9, false));
        // Either option asks for the verdict: a failure fails the run.
        assert_eq!(
            p(&["--bw-threshold", "0.8"]).unwrap().threshold(),
            (0.8, true)
        );
        let b = p(&["--line-rate", "400"]).unwrap();
        assert_eq!((b.line_rate, b.threshold()), (Some(400.0), (0.9, true)));
        for bad in [
            &["--bw-threshold", "0"][..],
            &["--bw-threshold", "1.5"],
            &["--bw-threshold", "90%"],
            &["--line-rate", "0"],
            &["--line-rate", "fast"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        // perftest's spelling too; not against perftest's server.
        assert!(p(&["--data_validation"]).unwrap().data_validation);
        let b = p(&["--data-validation", "--test", "read_bw", "-b"]).unwrap();
        assert_eq!(b.check(), Ok(()));
        let e = p(&[
            "--data-validation",
            "--perftest",
            "--client",
            "h",
            "--test",
            "write_bw",
        ])
        .unwrap()
        .check()
        .unwrap_err();
        assert!(e.contains("--data-validation"), "{e}");
    }

    #[test]
    fn tos_is_one_byte() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        assert_eq!(T::try_parse_from(["x"]).unwrap().b.tos, None);
        assert_eq!(
            T::try_parse_from(["x", "-T", "106"]).unwrap().b.tos,
            Some(106)
        );
        assert_eq!(
            T::try_parse_from(["x", "--tos", "0x6a"]).unwrap().b.tos,
            Some(0x6a)
        );
        assert_eq!(T::try_parse_from(["x", "-T", "0"]).unwrap().b.tos, Some(0));
        assert_eq!(
            T::try_parse_from(["x", "-T", "255"]).unwrap().b.tos,
            Some(255)
        );
        // Out of range or not a number: refused with a message naming the range.
        for bad in ["256", "300", "0x100", "abc", "", "1.5"] {
            let e = T::try_parse_from(["x", "-T", bad])
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("0-255"), "{bad}: {e}");
        }
        assert!(parse_tos("256").unwrap_err().contains("one byte"));
        assert!(parse_tos("-1").unwrap_err().contains("0-255"));
        assert!(parse_tos("99999999999999999999999").is_err());
    }

    proptest::proptest! {
        #[test]
        fn tos_parser_never_panics(s in "\\PC{0,24}") {
            let _ = parse_tos(&s);
        }

        #[test]
        fn tos_round_trips(v in 0u8..=255) {
            proptest::prop_assert_eq!(parse_tos(&v.to_string()), Ok(v));
            proptest::prop_assert_eq!(parse_tos(&format!("0x{v:x}")), Ok(v));
        }

        /// A given `-s` is the size of every test: none falls back to a default.
        #[test]
        fn a_given_size_wins_for_every_test(size in 1u64..=(1 << 31)) {
            use clap::Parser;
            #[derive(Parser)]
            struct T {
                #[command(flatten)]
                b: BenchArgs,
            }
            let b = T::try_parse_from(["x", "-s", &size.to_string()]).unwrap().b;
            for t in [
                BenchTest::WriteLat,
                BenchTest::WriteBw,
                BenchTest::ReadBw,
                BenchTest::SendBw,
                BenchTest::Reg,
            ] {
                proptest::prop_assert_eq!(b.size_for(t), size);
            }
            proptest::prop_assert_eq!(b.serve_size(), size);
        }

        #[test]
        fn gpu_selector_never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<GpuSelector>();
        }

        #[test]
        fn bus_ids_round_trip(d in 0u32..0x10000, b in 0u32..256, dev in 0u32..32, f in 0u32..8) {
            let id = format!("{d:04x}:{b:02x}:{dev:02x}.{f}");
            proptest::prop_assert_eq!(id.parse::<GpuSelector>(), Ok(GpuSelector::BusId(id.clone())));
        }
    }
}

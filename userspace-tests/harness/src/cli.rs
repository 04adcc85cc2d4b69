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
    /// Emulated GPU memory from the bench's `/dev/nvp2p_emu` (registration path only).
    Emu,
}

impl fmt::Display for MemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemKind::Host => "host",
            MemKind::Cuda => "cuda",
            MemKind::CudaDmabuf => "cuda-dmabuf",
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
    /// Shared secret both sides must give; a client with another token is refused. Prefer the
    /// environment variable (a command line is visible to every user of the node).
    #[arg(long = "token", env = "NVPEER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Server: serve peers from any address without a token (trusted networks only).
    #[arg(long = "allow-any-peer")]
    pub allow_any_peer: bool,
    /// Server: exit after the first client is done (the default serves clients until stopped).
    #[arg(long = "once")]
    pub once: bool,
    /// Server: most bytes of test memory one client may hold at once.
    #[arg(long = "server-mem-limit", value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    pub mem_limit: u64,
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

/// Parses a byte count with binary units (see [`figures::size`]); zero is rejected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    figures::size::parse(s)
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
    #[arg(long = "xfer-size", default_value = "64K", value_parser = figures::size::parse_message)]
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
    /// Seed of the data patterns (default: derived from the time).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write the results as JUnit XML to this file (one test case per validation case).
    #[arg(long = "junit", value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
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

/// Arguments of `nvpeer bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Tests to run (comma-separated).
    #[arg(
        short = 't',
        long = "test",
        value_enum,
        value_delimiter = ',',
        default_value = "reg,write_bw,write_lat"
    )]
    pub tests: Vec<BenchTest>,
    /// Sweep all sizes from 2 bytes to `--max-size` in powers of two (like perftest `-a`).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Message size when not sweeping (at most 2G, the InfiniBand maximum message size).
    #[arg(short = 's', long = "size", default_value = "65536", value_parser = figures::size::parse_message)]
    pub size: u64,
    /// Largest size of a sweep (perftest: 8 MiB).
    #[arg(long = "max-size", default_value = "8M", value_parser = parse_size)]
    pub max_size: u64,
    /// Iterations per size (perftest: 1000, at least 5).
    #[arg(short = 'n', long = "iters", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(5..))]
    pub iters: u32,
    /// Outstanding work requests for bandwidth tests (perftest `-t`).
    #[arg(long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tx_depth: u32,
    /// Report bandwidth in Gb/s instead of MiB/s (perftest `--report_gbits`).
    #[arg(long = "report-gbits")]
    pub report_gbits: bool,
    /// Also write the JSON to this file (perftest `--out_json_file`).
    #[arg(long = "out-json-file")]
    pub out_json_file: Option<std::path::PathBuf>,
    /// Never draw progress bars.
    #[arg(long = "no-progress")]
    pub no_progress: bool,
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
            "-t",
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
            1 << 31
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
        assert_eq!(v.common.serve.mem_limit, 4 << 30);
    }

    proptest::proptest! {
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

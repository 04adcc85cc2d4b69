//! `nvpeer bench`: registration latency per size, and bandwidth/latency sweeps with perftest's
//! columns (`ib_write_bw -a`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat --write_with_imm`).
//!
//! Files by test: `registration` (reg / dereg latency), `bandwidth` (write, read and send bandwidth,
//! `-b` included, and against perftest's own server), `bwloop` (their posting loop, also the far
//! half of a two-node `-b` run), `latency` (WRITE_WITH_IMM ping-pong), `reports` (the `--json`
//! document and the `--out_json` file). This file holds what the tests share (the
//! session, its connections, perftest's names) and the entry point that runs them.

mod bandwidth;
mod bwloop;
mod doc;
mod latency;
mod registration;
mod reports;
mod setup_error;

pub(crate) use reports::junit_cases;
use reports::write_reports;
pub use setup_error::SetupError;

pub use bwloop::{
    cq_mod, run_lanes, sum_bidirectional, BwPlan, Lane, Poster, SideResult, PEAK_MAX_ITERS,
};
pub use doc::{
    to_mib, BenchDoc, BenchTestDoc, BwRow, DataValidation, LatRow, PerftestDoc, PerftestInfo,
    RegRow, Row,
};

use crate::cli::{BenchArgs, BenchTest, MemKind, Role};
use crate::mem::{self, Backend};
use crate::peer::{self, Peer, Req, Target};
use crate::perftest_peer;
use crate::reg::{RegPath, Registrar};
use crate::report::{self, TestInfo};
use crate::stats;
use crate::verbs::{self, Device, Endpoint};
use nvpeer_verdict::Verdict;
use std::rc::Rc;
use std::time::Duration;

const POLL: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BenchError(String);

fn be<E: std::fmt::Display>(ctx: &str) -> impl Fn(E) -> BenchError + '_ {
    move |e| BenchError(format!("{ctx}: {e}"))
}

struct Bench {
    args: BenchArgs,
    mem: MemKind,
    backend: Rc<dyn Backend>,
    dev: Option<Rc<Device>>,
    reg: Registrar,
    peer: Option<Peer>,
    /// The port's line rate (`--line-rate`, else sysfs), or why there is none.
    line_rate: Result<crate::line_rate::LineRate, crate::line_rate::NoLineRate>,
    /// The device is rxe or siw (its rate is the netdev's).
    software_device: bool,
    /// A bandwidth test fell below an enforced threshold (`--bw-threshold` / `--line-rate`).
    rate_failed: bool,
}

/// The message sizes a transfer test measures: the `-a` sweep, else the one size of `test`
/// ([`BenchArgs::size_for`]: `-s`, or perftest's default for that test).
fn sizes(a: &BenchArgs, test: BenchTest) -> Vec<u64> {
    if a.all {
        stats::sweep_sizes(a.max_size)
    } else {
        vec![a.size_for(test)]
    }
}

impl Bench {
    fn say(&self, s: &str) {
        if !self.args.common.json {
            report::say(s);
        }
    }

    /// perftest's `test_info` for this run (`ep`: the connected endpoint, for the negotiated MTU
    /// and READ depth; `rx_depth`: perftest's `RX_depth`, where it writes one).
    fn info(
        &self,
        test: &str,
        ep: Option<&Endpoint>,
        cq_mod: Option<u64>,
        reads: Option<bool>,
        rx_depth: Option<u32>,
    ) -> PerftestInfo {
        let dev = self.dev.as_deref();
        let (mtu, out_reads) = ep.map_or((dev.map_or(0, |d| d.mtu as u8), 0), Endpoint::offer);
        PerftestInfo::from(&TestInfo {
            test: test.into(),
            device: dev.map(|d| d.name.clone()).unwrap_or_default(),
            link_layer: dev.map(|d| d.link_layer.clone()).unwrap_or_default(),
            tx_depth: cq_mod.map(|_| self.args.tx_depth),
            rx_depth,
            cq_mod,
            qps: if cq_mod.is_some() { self.args.qps } else { 1 },
            mtu: verbs::mtu_bytes(mtu),
            gid_index: dev.map_or(0, |d| u32::from(d.gid_index)),
            out_reads: reads.filter(|r| *r).map(|_| out_reads),
            mem: self.mem.to_string(),
            cuda_device: matches!(self.mem, MemKind::Cuda | MemKind::CudaDmabuf)
                .then(|| self.args.memory().1.to_string()),
            // The ToS of the test's QPs: none without a QP (reg).
            tos: ep.and(self.args.tos),
            gbits: self.args.report_gbits,
            relaxed_ordering: self.args.relaxed_ordering(),
            ro_noncompliant_cpu: !crate::sysfs::relaxed_ordering_compliant(std::path::Path::new(
                "/",
            )),
        })
    }

    /// A QP connected to the far side's, with `-m` and `-o` applied before the negotiation; `more`:
    /// the far side keeps its earlier QPs (`-q`).
    fn connect(&mut self, depth: u32, more: bool) -> Result<Endpoint, BenchError> {
        let dev = self
            .dev
            .clone()
            .ok_or_else(|| BenchError("no RDMA device".into()))?;
        let mut ep = Endpoint::new(&dev, depth).map_err(be("QP"))?;
        self.limit(&mut ep);
        let p = self
            .peer
            .as_mut()
            .ok_or_else(|| BenchError("no peer".into()))?;
        let info = p
            .connect_more(ep.info(), depth, more)
            .map_err(be("peer connect"))?;
        ep.connect(&info).map_err(be("connect"))?;
        Ok(ep)
    }

    fn limit(&self, ep: &mut Endpoint) {
        if let Some(code) = self.args.mtu.and_then(verbs::mtu_code) {
            ep.limit_mtu(code);
        }
        if let Some(n) = self.args.out_reads {
            ep.limit_out_reads(n);
        }
        if let Some(tc) = self.args.tos {
            ep.set_traffic_class(tc);
        }
    }
}

/// perftest's title of a test's table; `bidirectional` (`-b`) names a bandwidth test as
/// perftest does (`RDMA_Write Bidirectional BW Test`).
fn perftest_title(test: BenchTest, bidirectional: bool) -> String {
    let (verb, kind) = match test {
        BenchTest::ReadBw => ("RDMA_Read", "BW Test"),
        BenchTest::SendBw => ("Send", "BW Test"),
        BenchTest::WriteLat => ("RDMA_Write_imm", "Latency Test"),
        BenchTest::Reg => ("Registration", "Latency Test"),
        BenchTest::WriteBw => ("RDMA_Write", "BW Test"),
    };
    if bidirectional && kind == "BW Test" {
        format!("{verb} Bidirectional {kind}")
    } else {
        format!("{verb} {kind}")
    }
}

/// perftest's `test_info.test` of a test (`RDMA_Write_BW_Test`, with `-b`
/// `RDMA_Write_Bidirectional_BW_Test`, ...).
pub fn perftest_name(test: BenchTest, bidirectional: bool) -> String {
    perftest_title(test, bidirectional).replace(' ', "_")
}

/// Entry point of `nvpeer bench`.
pub fn run(args: BenchArgs) -> Result<Verdict, SetupError> {
    run_tests(args, true).map(|m| m.verdict)
}

/// What a quiet run ([`collect`]) measured: the verdict it would have had, and one document per
/// test as `--json` prints it (`test`, `test_info`, `results` with perftest's keys; `error` for a
/// test that failed).
#[derive(Debug, Clone)]
pub struct Measured {
    pub verdict: Verdict,
    pub tests: Vec<BenchTestDoc>,
}

/// Runs the tests of a client or loopback `nvpeer bench` (not `--server`) without printing the
/// report or writing its files: the measurements come back to the caller (`nvpeer bench
/// --fleet`). Give `--json` and `--no-progress` for a silent run.
pub fn collect(args: BenchArgs) -> Result<Measured, SetupError> {
    if args.common.server {
        return Err(SetupError::Args(
            "a quiet run measures as a client or in loopback, not as --server".into(),
        ));
    }
    run_tests(args, false)
}

/// Runs `nvpeer bench`; `print`: print the report and write its files (`--json`, `--out_json`,
/// `--junit`) as the command does.
fn run_tests(args: BenchArgs, print: bool) -> Result<Measured, SetupError> {
    args.check().map_err(SetupError::Args)?;
    let mut c = args.common.clone();
    // perftest's --use_cuda* choose the memory as --mem/--gpu do.
    (c.mem, c.gpu) = args.memory();
    let path = reg_path(c.mem);
    if c.server {
        return serve(&args, &c, path);
    }
    // A sweep of the transfer tests sends messages of up to --max-size (registrations may be
    // larger).
    if args.all && args.tests.iter().any(|t| *t != BenchTest::Reg) {
        nvpeer_figures::size::check_message(args.max_size)
            .map_err(|e| SetupError::MaxSize(e.to_string()))?;
    }
    let mut b = Bench::open(args, &c, path)?;
    let (out, could_not_run, failed) = b.run_each(&c);
    if !print {
        return Ok(Measured {
            verdict: verdict_of(could_not_run, failed),
            tests: out,
        });
    }
    let written = b.report(&c, &out);
    Ok(Measured {
        verdict: verdict_of(could_not_run || !written, failed),
        tests: out,
    })
}

/// The registration path of `mem`.
fn reg_path(mem: MemKind) -> RegPath {
    match mem {
        MemKind::CudaDmabuf => RegPath::DmaBuf,
        #[cfg(feature = "bench")]
        MemKind::Emu => RegPath::EmuCore,
        _ => RegPath::VaMr,
    }
}

/// `bench --server`: serves clients (nvpeer's, and perftest's) until `--once` is done.
fn serve(
    args: &BenchArgs,
    c: &crate::cli::CommonArgs,
    path: RegPath,
) -> Result<Measured, SetupError> {
    let opts = perftest_peer::ServeOpts {
        size: args.serve_size(),
        gid_given: c.gid_index.is_some(),
        mtu: args.mtu.and_then(verbs::mtu_code),
        traffic_class: args.tos.unwrap_or(0),
        bidirectional: args.bidirectional,
        relaxed_ordering: args.relaxed_ordering(),
        pcie_mapping: args.use_cuda_pcie_mapping,
    };
    peer::run_server(c, path, Some(opts))?;
    Ok(Measured {
        verdict: Verdict::Passed,
        tests: Vec::new(),
    })
}

impl Bench {
    /// Opens the memory, the device, the registrar and the far side of a client run.
    fn open(
        args: BenchArgs,
        c: &crate::cli::CommonArgs,
        path: RegPath,
    ) -> Result<Bench, SetupError> {
        let mem_kind = c.mem;
        let backend: Rc<dyn Backend> =
            Rc::from(mem::open_mapped(c.mem, &c.gpu, args.use_cuda_pcie_mapping)?);
        let dev = match Device::open(c.ib_dev.as_deref(), c.ib_port, c.gid_index) {
            Ok(d) => Some(Rc::new(d)),
            Err(e) if mem_kind.is_emu() && !c.server => {
                if !c.json {
                    eprintln!(
                        "nvpeer bench: {e}; --mem emu measures registration through peer_mem_emu \
                         only"
                    );
                }
                None
            }
            Err(e) => {
                return Err(SetupError::Device {
                    error: e.to_string(),
                    cause: crate::causes::device(&e),
                })
            }
        };
        #[cfg(feature = "bench")]
        let core = if c.mem == MemKind::Emu {
            mem::emu::EmuBackend::open().ok().and_then(|b| b.core())
        } else {
            None
        };
        #[cfg(not(feature = "bench"))]
        let core = None;
        let reg = Registrar {
            pd: dev.as_ref().map(|d| d.pd.clone()),
            core,
            path,
            relaxed: args.relaxed_ordering(),
        };
        let peer = Self::far_side(&args, c, dev.as_ref(), &backend, path)?;
        let root = std::path::Path::new("/");
        let line_rate = match (args.line_rate, &dev) {
            (Some(gbps), _) => Ok(crate::line_rate::LineRate {
                gbps,
                source: "--line-rate".into(),
                text: format!("{gbps} Gb/s"),
            }),
            (None, Some(d)) => crate::line_rate::read(root, &d.name, d.port),
            (None, None) => Err(crate::line_rate::NoLineRate::NoDevice),
        };
        let software_device = dev
            .as_ref()
            .is_some_and(|d| crate::line_rate::software_device(root, &d.name));
        Ok(Bench {
            args,
            mem: mem_kind,
            backend,
            dev,
            reg,
            peer,
            line_rate,
            software_device,
            rate_failed: false,
        })
    }

    /// The far side: the server in two-node mode (none for perftest's server, which speaks only
    /// its own exchange), this node's own target in loopback, none without a device.
    fn far_side(
        args: &BenchArgs,
        c: &crate::cli::CommonArgs,
        dev: Option<&Rc<Device>>,
        backend: &Rc<dyn Backend>,
        path: RegPath,
    ) -> Result<Option<Peer>, SetupError> {
        Ok(match (dev, c.role()) {
            (Some(_), Role::Client(_)) if args.perftest => None,
            (Some(_), Role::Client(h)) => {
                let ch = crate::oob::Channel::connect(&h, c.port, Duration::from_secs(30))
                    .map_err(|e| SetupError::Connect(e.to_string()))?;
                let mut p = Peer::Remote(ch);
                p.greet(c, args.bidirectional)
                    .map_err(|e| SetupError::Hello(e.to_string()))?;
                Some(p)
            }
            // In loopback the far QP is this node's too: it sends with the same -T.
            (Some(d), _) => Some(Peer::Local(Box::new(
                Target::new(d.clone(), backend.clone(), path, c.serve.caps)
                    .with_traffic_class(args.tos.unwrap_or(0))
                    .with_relaxed_ordering(args.relaxed_ordering()),
            ))),
            (None, _) => None,
        })
    }

    /// Runs every test of `--test`: their documents, whether one could not run at all (exit
    /// status 2, not 1) and whether one failed (a below-threshold bandwidth included).
    fn run_each(&mut self, c: &crate::cli::CommonArgs) -> (Vec<BenchTestDoc>, bool, bool) {
        let mut out = Vec::new();
        let mut failed = false;
        let mut could_not_run = false;
        for t in self.args.tests.clone() {
            let r = match (t, c.role()) {
                (t, Role::Client(h)) if self.args.perftest => self.bw_perftest(t, &h),
                (BenchTest::Reg, _) => self.reg(),
                _ if self.peer.is_none() || c.mem.is_emu() => {
                    could_not_run = true;
                    Err(BenchError(
                        "needs an RDMA device and CPU-reachable memory (not available with --mem \
                         emu)"
                            .into(),
                    ))
                }
                (BenchTest::WriteLat, _) => self.lat(),
                (t, _) => self.bw(t),
            };
            match r {
                Ok(v) => out.push(v),
                Err(e) => {
                    failed = true;
                    eprintln!("nvpeer bench: {}: {e}", t.name());
                    out.push(BenchTestDoc::failed(t.name(), e.to_string()));
                }
            }
        }
        if let Some(Peer::Remote(_)) = self.peer.as_ref() {
            let _ = self.peer.as_mut().map(|p| p.unit(Req::Bye));
        }
        // A bandwidth test below an enforced line-rate threshold is a failed test (exit 1).
        (out, could_not_run, failed || self.rate_failed)
    }

    /// Prints the environment and writes the reports of `out`; false when a report could not
    /// be written.
    fn report(&self, c: &crate::cli::CommonArgs, out: &[BenchTestDoc]) -> bool {
        let gpu_bus = self
            .backend
            .facts()
            .into_iter()
            .find(|(k, _)| k == "pci bus id")
            .map(|(_, v)| v);
        let env = crate::environment::collect(
            std::path::Path::new("/"),
            self.dev.as_ref().map(|d| d.name.as_str()),
            gpu_bus.as_deref(),
            crate::environment::ofed_info(),
        );
        self.say(&format!("\n{}", env.text()));
        write_reports(&self.args, c.mem, self.dev.as_deref(), &env, out)
    }
}

/// A run's verdict: could not run wins over failed.
fn verdict_of(could_not_run: bool, failed: bool) -> Verdict {
    if could_not_run {
        Verdict::CouldNotRun
    } else if failed {
        Verdict::Failed
    } else {
        Verdict::Passed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> BenchArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            b: BenchArgs,
        }
        T::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .unwrap()
            .b
    }

    #[test]
    fn each_test_measures_its_own_default_size() {
        let a = parse(&[]);
        assert_eq!(sizes(&a, BenchTest::WriteLat), vec![2]);
        for t in [BenchTest::WriteBw, BenchTest::ReadBw, BenchTest::SendBw] {
            assert_eq!(sizes(&a, t), vec![65536], "{}", t.name());
        }
        let a = parse(&["-s", "64K"]);
        assert_eq!(sizes(&a, BenchTest::WriteLat), vec![65536]);
        // -a is unaffected: the same sweep for every test.
        let a = parse(&["-a", "--max-size", "16"]);
        for t in [BenchTest::WriteLat, BenchTest::WriteBw, BenchTest::ReadBw] {
            assert_eq!(sizes(&a, t), vec![2, 4, 8, 16], "{}", t.name());
        }
    }

    proptest::proptest! {
        /// Whatever the options, a `--server` started with them offers perftest clients a buffer
        /// that holds every message an nvpeer client with the same options sends in the tests
        /// perftest pairs with (write_bw, read_bw), as an `ib_write_bw` with the same `-s`/`-a`.
        #[test]
        fn the_server_buffer_covers_the_client_sizes(
            size in proptest::option::of(1u64..=(1 << 31)),
            all in proptest::bool::ANY,
            max_shift in 1u32..=31,
        ) {
            let max = (1u64 << max_shift).to_string();
            let mut argv = vec!["--max-size", max.as_str()];
            let s = size.map(|s| s.to_string());
            if let Some(s) = &s {
                argv.extend(["-s", s.as_str()]);
            }
            if all {
                argv.push("-a");
            }
            let a = parse(&argv);
            for t in [BenchTest::WriteBw, BenchTest::ReadBw] {
                let top = sizes(&a, t).into_iter().max().unwrap_or(0);
                proptest::prop_assert!(top <= a.serve_size(), "{} {top} > {}", t.name(), a.serve_size());
            }
        }

        #[test]
        fn sweep_never_overflows(max in 0u64..=u64::MAX) {
            let v = stats::sweep_sizes(max);
            proptest::prop_assert!(v.iter().all(|s| *s <= max && s.is_power_of_two()));
            proptest::prop_assert!(v.len() <= 63);
        }
    }
}

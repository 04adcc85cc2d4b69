//! What NCCL itself chose, read from its `NCCL_DEBUG=INFO` output (`nvpeer doctor --nccl-log`):
//! the doctor predicts which GPUDirect RDMA path NCCL takes; this reads NCCL's own answer, the
//! text an admin pastes into a ticket.
//!
//! The lines read, as NVIDIA/nccl prints them (src/transport/net.cc `sendSetup`/`recvSetup`,
//! src/graph/topo.cc `ncclTopoPopulateNics`, src/graph/paths.cc `ncclTopoCheckGdr`, src/init.cc,
//! src/transport/generic.cc; every format from 2.5 to 2.30):
//! - each network connection, `Channel CC/I : R[D] -> R[D] [send|receive] via NET/<net>/<dev>`
//!   with `/GDRDMA` when the NIC reads or writes GPU memory directly, `(PCI)` when the dma-buf is
//!   mapped through PCIe on a C2C node, `/Shared`, and `(<proxy rank>)` for PXN;
//! - each NIC's capability, `NET/<net> : GPU Direct RDMA Enabled|Disabled for HCA <n> '<name>'`
//!   (NCCL_DEBUG_SUBSYS must include NET);
//! - each GPU↔NIC decision up to 2.29, `GPU Direct RDMA Enabled|Disabled for ... (distance ...)`
//!   (a TRACE line since 2.30: release builds no longer print it);
//! - `DMA-BUF is available on GPU device <n>`, the version, `Using network <net>`, the
//!   environment settings that change the path, `Connected all rings, use ring PXN <p> GDR <g>`
//!   and GIN's `Unable to use GIN: ...`.
//!
//! NCCL never logs whether a GDRDMA connection registered its buffers through peer memory or
//! dma-buf: it tries dma-buf first where the GPU offers it (the `DMA-BUF is available` line) and
//! the NIC's kernel accepts it, and falls back to peer memory silently. The reading says so.
//!
//! The log is read line by line; only counts, a few example lines and at most 65,536 process
//! names (each cut to 255 bytes) are kept, so a log of any size takes bounded memory.

use regex::Regex;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::sync::LazyLock;

/// A line longer than this is cut before it is matched (NCCL's own buffer is 1 KiB).
const MAX_LINE: usize = 64 * 1024;
/// Example lines kept per kind.
const MAX_EXAMPLES: usize = 4;
/// Distinct NICs, networks, versions and settings kept (more are counted, not named).
const MAX_NAMES: usize = 256;
/// Distinct processes (host and pid) told apart; more are not counted.
const MAX_PROCESSES: usize = 65_536;
/// A host name is cut to this many bytes before it is kept.
const MAX_HOST: usize = 255;

/// The environment settings NCCL logs that decide whether and how it uses GPUDirect RDMA.
const SETTINGS: [&str; 8] = [
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_GDR_C2C",
    "NCCL_NET_GDR_MLOPART",
    "NCCL_DMABUF_ENABLE",
    "NCCL_IB_DISABLE",
    "NCCL_NET_PLUGIN",
    "NCCL_GIN_TYPE",
];

/// The message of a line NCCL printed: after its `host:pid:tid [dev] NCCL INFO ` prefix, or
/// `host:pid:tid [dev] file:line (function) NCCL WARN ` (launchers and NCCL_DEBUG_TIMESTAMP_LEVELS
/// add prefixes of their own before it; versions up to 2.21 print their version line bare).
static PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:(\S+):(\d+):\d+ )?\[\d+\] (?:\S+:\d+ (?:\(\S+\) )?)?NCCL (INFO|WARN) (.*)$")
        .expect("static regex")
});
static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"NCCL version (\d+\.\d+\.\d+\S*?\+cuda\d+\.\d+)").expect("static regex")
});
/// Every NET connection line, 2.5 ("Ring") to 2.30 ("Channel CC/I ... [dev]").
static NET_CONN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:Ring|Channel) \d+(?:/\d+)? : \d+(?:\[[0-9a-f]+\])? -> \d+(?:\[[0-9a-f]+\])? \[(send|receive)\] via NET/(.+)/(\d+)(?:\((\d+)\))?(/GDRDMA)?(\(PCI\))?(/Shared)?\s*$",
    )
    .expect("static regex")
});
static COLLNET_CONN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^CollNet \d+/\d+ : \d+ \[(send|receive)\] via COLLNET/(.+)/(\d+)(/GDRDMA)?")
        .expect("static regex")
});
/// Intra-node connections (P2P over NVLink or PCIe, shared memory): no NIC involved.
static LOCAL_CONN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:Ring|Channel) \d+(?:/\d+)? : .* via (P2P|SHM)/").expect("static regex")
});
static HCA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^NET/(.+) : GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'( \(no module\))?",
    )
    .expect("static regex")
});
static GPU_NIC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^GPU Direct RDMA (Enabled|Disabled) for (GPU.*)$").expect("static regex")
});
static DMABUF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^DMA-BUF is available on GPU device (\d+)").expect("static regex")
});
static NETWORK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^Using network (.+?)\s*$").expect("static regex"));
static RINGS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^Connected all rings, use ring PXN (\d+) GDR (\d+)").expect("static regex")
});
static SETTING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(NCCL_[A-Z0-9_]+) set by environment to (.+?)\.?\s*$").expect("static regex")
});

/// NET connections of one kind, counted over every rank of the log.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct NetConnections {
    /// With `/GDRDMA`: the NIC reads (send) or writes (receive) GPU memory directly.
    pub gdrdma: u64,
    /// Of those, `(PCI)`: the dma-buf mapped through PCIe on a C2C node.
    pub gdrdma_pci: u64,
    /// Without it: NCCL stages the data through host memory (bounce buffers).
    pub host_staged: u64,
    /// Through another rank's NIC (PXN).
    pub pxn: u64,
}

/// One NIC's capability line, as the last process that printed it said.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NicCapability {
    /// NCCL's name for the network (`IB`, `Socket`, a plugin's name).
    pub net: String,
    /// The NIC (`mlx5_0`; `..._dma` for a Data-Direct function).
    pub name: String,
    /// `Enabled` in any process of the log.
    pub enabled: bool,
    /// `Disabled` in any process (with `enabled`: the processes disagree).
    pub disabled: bool,
}

/// What the log says NCCL chose.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// Every network connection uses GPUDirect RDMA.
    Gdr,
    /// Some network connections use it, others stage through host memory.
    Partial,
    /// Network connections, none with GPUDirect RDMA: the data goes through host memory.
    HostStaged,
    /// No network connection in the log (one node, or a log without NCCL's INIT lines).
    NoNetwork,
}

/// NCCL's own answer, read from its log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NcclLog {
    /// Where it was read from.
    pub source: String,
    /// Lines read, and of those NCCL's.
    pub lines: u64,
    pub nccl_lines: u64,
    /// NCCL versions the log names (`2.28.9+cuda13.0`).
    pub versions: BTreeSet<String>,
    /// The networks NCCL used (`Using network ...`).
    pub networks: BTreeSet<String>,
    /// Processes (host and pid) that printed anything.
    pub processes: u64,
    /// Processes that printed `DMA-BUF is available on GPU device N`, and the lines themselves
    /// (with or without a process prefix).
    pub dmabuf_processes: u64,
    pub dmabuf_lines: u64,
    /// Network connections (`Channel ... via NET/...`).
    pub net: NetConnections,
    /// Connections per NCCL network device (`IB/0`, its NIC index in NCCL's list).
    pub net_by_device: BTreeMap<String, NetConnections>,
    /// CollNet (SHARP) connections with and without GDRDMA.
    pub collnet_gdrdma: u64,
    pub collnet_host_staged: u64,
    /// Intra-node connections (P2P, SHM).
    pub local_connections: u64,
    /// Each NIC's GPUDirect RDMA capability (`NET/... : GPU Direct RDMA ... for HCA`).
    pub nics: Vec<NicCapability>,
    /// GPU↔NIC decisions (up to 2.29): enabled, disabled, and example lines of the disabled.
    pub gpu_nic_enabled: u64,
    pub gpu_nic_disabled: u64,
    pub gpu_nic_disabled_examples: Vec<String>,
    /// `Connected all rings, use ring PXN p GDR g`: communicators with GDR 1 and with GDR 0.
    pub rings_gdr: u64,
    pub rings_no_gdr: u64,
    /// Settings from the environment NCCL logged (those that change the path).
    pub settings: BTreeMap<String, String>,
    /// GIN (GPU-initiated networking) refusals.
    pub gin_refusals: Vec<String>,
    /// NCCL's warnings (examples).
    pub warnings: Vec<String>,
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NcclLogError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error(
        "{0}: no NCCL line in it (run the job with NCCL_DEBUG=INFO, and NCCL_DEBUG_SUBSYS=INIT,NET \
         for the NIC lines; NCCL_DEBUG_FILE=/path/nccl.%h.%p writes one file per process)"
    )]
    NotNccl(String),
}

fn keep(list: &mut Vec<String>, line: &str) {
    if list.len() < MAX_EXAMPLES {
        list.push(line.chars().take(300).collect());
    }
}

impl NetConnections {
    fn add(&mut self, gdr: bool, pci: bool, pxn: bool) {
        if gdr {
            self.gdrdma += 1;
        } else {
            self.host_staged += 1;
        }
        self.gdrdma_pci += u64::from(pci);
        self.pxn += u64::from(pxn);
    }
}

impl NcclLog {
    /// Reads `input` (a file, or standard input under the name `-`) to its end.
    pub fn read(source: &str, mut input: impl BufRead) -> Result<Self, NcclLogError> {
        let mut log = NcclLog {
            source: source.to_string(),
            ..Default::default()
        };
        let mut processes = BTreeSet::new();
        let mut dmabuf = BTreeSet::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = std::io::Read::take(&mut input, MAX_LINE as u64)
                .read_until(b'\n', &mut buf)
                .map_err(|e| NcclLogError::Read(source.to_string(), e))?;
            if n == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') && n == MAX_LINE {
                // (the rest of an overlong line, dropped unread)
                input
                    .skip_until(b'\n')
                    .map_err(|e| NcclLogError::Read(source.to_string(), e))?;
            }
            log.lines += 1;
            let line = String::from_utf8_lossy(&buf);
            log.line(line.trim_end(), &mut processes, &mut dmabuf);
        }
        if log.nccl_lines == 0 {
            return Err(NcclLogError::NotNccl(source.to_string()));
        }
        log.processes = processes.len() as u64;
        log.dmabuf_processes = dmabuf.len() as u64;
        Ok(log)
    }

    fn line(
        &mut self,
        line: &str,
        processes: &mut BTreeSet<(String, u32)>,
        dmabuf: &mut BTreeSet<(String, u32)>,
    ) {
        if let Some(v) = VERSION.captures(line) {
            // (also the bare version line of NCCL up to 2.21)
            self.nccl_lines += u64::from(!PREFIX.is_match(line));
            if self.versions.len() < MAX_NAMES {
                self.versions.insert(v[1].to_string());
            }
        }
        let Some(c) = PREFIX.captures(line) else {
            return;
        };
        self.nccl_lines += 1;
        let process = match (c.get(1), c.get(2).and_then(|p| p.as_str().parse().ok())) {
            (Some(h), Some(pid)) => {
                let host = h.as_str();
                let mut end = host.len().min(MAX_HOST);
                while !host.is_char_boundary(end) {
                    end -= 1;
                }
                Some((host[..end].to_string(), pid))
            }
            _ => None,
        };
        if let Some(p) = &process {
            if processes.len() < MAX_PROCESSES {
                processes.insert(p.clone());
            }
        }
        let msg = c.get(4).map_or("", |m| m.as_str());
        if &c[3] == "WARN" {
            keep(&mut self.warnings, msg);
            if msg.starts_with("Unable to use GIN") {
                keep(&mut self.gin_refusals, msg);
            }
            return;
        }
        if let Some(m) = NET_CONN.captures(msg) {
            let gdr = m.get(5).is_some();
            let pci = m.get(6).is_some();
            let pxn = m.get(4).is_some();
            self.net.add(gdr, pci, pxn);
            let dev = format!("{}/{}", &m[2], &m[3]);
            if self.net_by_device.len() < MAX_NAMES || self.net_by_device.contains_key(&dev) {
                self.net_by_device
                    .entry(dev)
                    .or_default()
                    .add(gdr, pci, pxn);
            }
        } else if let Some(m) = COLLNET_CONN.captures(msg) {
            if m.get(4).is_some() {
                self.collnet_gdrdma += 1;
            } else {
                self.collnet_host_staged += 1;
            }
        } else if LOCAL_CONN.is_match(msg) {
            self.local_connections += 1;
        } else if let Some(m) = HCA.captures(msg) {
            let enabled = &m[2] == "Enabled";
            match self
                .nics
                .iter()
                .position(|n| n.net == m[1] && n.name == m[4])
            {
                Some(i) => {
                    self.nics[i].enabled |= enabled;
                    self.nics[i].disabled |= !enabled;
                }
                None if self.nics.len() < MAX_NAMES => self.nics.push(NicCapability {
                    net: m[1].to_string(),
                    name: m[4].to_string(),
                    enabled,
                    disabled: !enabled,
                }),
                None => {}
            }
        } else if let Some(m) = GPU_NIC.captures(msg) {
            if &m[1] == "Enabled" {
                self.gpu_nic_enabled += 1;
            } else {
                self.gpu_nic_disabled += 1;
                keep(&mut self.gpu_nic_disabled_examples, msg);
            }
        } else if DMABUF.is_match(msg) {
            self.dmabuf_lines += 1;
            if let Some(p) = process.filter(|_| dmabuf.len() < MAX_PROCESSES) {
                dmabuf.insert(p);
            }
        } else if let Some(m) = NETWORK.captures(msg) {
            if self.networks.len() < MAX_NAMES {
                self.networks.insert(m[1].to_string());
            }
        } else if let Some(m) = RINGS.captures(msg) {
            if &m[2] == "1" {
                self.rings_gdr += 1;
            } else {
                self.rings_no_gdr += 1;
            }
        } else if let Some(m) = SETTING.captures(msg) {
            if SETTINGS.contains(&&m[1]) {
                self.settings.insert(m[1].to_string(), m[2].to_string());
            }
        } else if msg.starts_with("Unable to use GIN") {
            keep(&mut self.gin_refusals, msg);
        }
    }

    /// What NCCL chose over the network.
    pub fn choice(&self) -> Choice {
        let gdr = self.net.gdrdma + self.collnet_gdrdma;
        let staged = self.net.host_staged + self.collnet_host_staged;
        match (gdr, staged) {
            (0, 0) => Choice::NoNetwork,
            (_, 0) => Choice::Gdr,
            (0, _) => Choice::HostStaged,
            _ => Choice::Partial,
        }
    }

    /// The reasons the log gives for connections without GPUDirect RDMA, most direct first.
    pub fn reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        let disabled: Vec<&NicCapability> = self
            .nics
            .iter()
            .filter(|n| n.disabled && n.net != "Socket")
            .collect();
        if !disabled.is_empty() {
            out.push(format!(
                "NCCL found no GPUDirect RDMA support on {}: neither a peer-memory module it \
                 detects (nvidia_peermem, nv_peer_mem; NCCL 2.22 and older see nvidia_peermem \
                 only through /sys/kernel/mm/memory_peers) nor dma-buf on that NIC",
                names(&disabled)
            ));
        }
        if self.gpu_nic_disabled > 0 {
            out.push(format!(
                "{} GPU↔NIC pair(s) beyond NCCL's GDR distance (NCCL_NET_GDR_LEVEL), e.g. \"{}\"",
                self.gpu_nic_disabled,
                self.gpu_nic_disabled_examples
                    .first()
                    .map_or("", String::as_str)
            ));
        }
        for (key, value) in &self.settings {
            let off = match key.as_str() {
                "NCCL_NET_GDR_READ" => value == "0",
                "NCCL_NET_GDR_LEVEL" => matches!(value.as_str(), "LOC" | "0"),
                "NCCL_IB_DISABLE" => value == "1",
                _ => false,
            };
            if off {
                out.push(format!(
                    "{key}={value} (set in the environment) turns it off"
                ));
            }
        }
        if self.networks.contains("Socket") {
            out.push(
                "NCCL used its TCP socket transport (no RDMA device it could use, or \
                 NCCL_IB_DISABLE=1): sockets never use GPUDirect RDMA"
                    .to_string(),
            );
        }
        out
    }

    /// How GDRDMA connections registered GPU memory, as far as the log can tell.
    pub fn registration(&self) -> &'static str {
        if self.net.gdrdma + self.collnet_gdrdma == 0 {
            ""
        } else if self
            .settings
            .get("NCCL_DMABUF_ENABLE")
            .is_some_and(|v| v == "0")
        {
            "peer memory (NCCL_DMABUF_ENABLE=0)"
        } else if self.dmabuf_lines > 0 {
            "dma-buf where the NIC's kernel accepts it, else peer memory (the GPU offered dma-buf; \
             NCCL does not log which it used)"
        } else {
            "peer memory (no process logged \"DMA-BUF is available\")"
        }
    }

    /// The reading as text lines, for the doctor's table.
    pub fn render(&self) -> String {
        let mut out = format!("\nWhat NCCL chose (from its log, {}):\n", self.source);
        let mut line = |s: String| {
            out.push_str("  ");
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "NCCL {}; network {}; {} process(es), {} NCCL lines",
            join(&self.versions, "version not in the log"),
            join(&self.networks, "not in the log"),
            self.processes,
            self.nccl_lines
        ));
        let n = &self.net;
        match self.choice() {
            Choice::Gdr => line(format!(
                "✔ GPUDirect RDMA on every network connection ({} GDRDMA{}{}); registered through {}",
                n.gdrdma + self.collnet_gdrdma,
                if n.gdrdma_pci > 0 { format!(", {} of them (PCI)", n.gdrdma_pci) } else { String::new() },
                if n.pxn > 0 { format!(", {} through PXN", n.pxn) } else { String::new() },
                self.registration()
            )),
            Choice::Partial => line(format!(
                "! GPUDirect RDMA on {} network connection(s), host memory staging on {}; GDRDMA ones registered through {}",
                n.gdrdma + self.collnet_gdrdma,
                n.host_staged + self.collnet_host_staged,
                self.registration()
            )),
            Choice::HostStaged => line(format!(
                "✘ no GPUDirect RDMA: {} network connection(s), every one staged through host memory",
                n.host_staged + self.collnet_host_staged
            )),
            Choice::NoNetwork => line(
                "? no network connection in the log: one node, or the log lacks NCCL's INIT lines \
                 (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT)"
                    .to_string(),
            ),
        }
        if self.net_by_device.len() > 1 || self.choice() == Choice::Partial {
            for (dev, c) in &self.net_by_device {
                line(format!(
                    "  NET/{dev}: {} GDRDMA, {} staged through host memory",
                    c.gdrdma, c.host_staged
                ));
            }
        }
        if matches!(self.choice(), Choice::HostStaged | Choice::Partial) {
            let reasons = self.reasons();
            if reasons.is_empty() {
                line("  the log gives no reason: rerun with NCCL_DEBUG_SUBSYS=INIT,NET for NCCL's NIC lines".into());
            }
            for r in reasons {
                line(format!("  ↳ {r}"));
            }
        }
        for (k, v) in &self.settings {
            line(format!("setting: {k}={v}"));
        }
        for g in &self.gin_refusals {
            line(format!("GIN: {g}"));
        }
        out
    }
}

/// Reads the log at `path` (`-`: standard input).
pub fn read_path(path: &std::path::Path) -> Result<NcclLog, NcclLogError> {
    let name = path.display().to_string();
    if name == "-" {
        return NcclLog::read("standard input", std::io::stdin().lock());
    }
    let f = std::fs::File::open(path).map_err(|e| NcclLogError::Read(name.clone(), e))?;
    NcclLog::read(&name, std::io::BufReader::new(f))
}

/// The log's answer beside the doctor's prediction for NCCL (the report's `nccl_log`).
#[derive(Debug, Clone, Serialize)]
pub struct NcclReading {
    #[serde(flatten)]
    pub log: NcclLog,
    /// What NCCL chose over the network.
    pub choice: Choice,
    /// Why connections went without GPUDirect RDMA, as far as the log says.
    pub reasons: Vec<String>,
    /// How GDRDMA connections registered GPU memory, as far as the log says.
    pub registration: String,
    /// Where the log and the doctor's prediction for NCCL disagree (the log may come from
    /// another node or job: the doctor cannot tell).
    pub disagreement: Option<String>,
}

impl NcclReading {
    /// The reading of `log`, compared with the doctor's prediction in `libraries`.
    pub fn new(log: NcclLog, libraries: &[crate::paths::LibraryUse]) -> Self {
        let choice = log.choice();
        let predicted = libraries.iter().find(|l| l.library == "NCCL");
        let disagreement = match (predicted.map(|l| l.path), choice) {
            (Some(Some(p)), Choice::HostStaged) => Some(format!(
                "the doctor expects NCCL to use {} on this node, its log shows none: if the log \
                 is from this node, the reasons above are NCCL's",
                p.title()
            )),
            (Some(None), Choice::Gdr | Choice::Partial) => Some(format!(
                "the log shows GPUDirect RDMA, the doctor expects none on this node ({}): is \
                 the log from this node and this configuration?",
                predicted.map_or("", |l| l.why.as_str())
            )),
            _ => None,
        };
        NcclReading {
            choice,
            reasons: if matches!(choice, Choice::HostStaged | Choice::Partial) {
                log.reasons()
            } else {
                Vec::new()
            },
            registration: log.registration().to_string(),
            disagreement,
            log,
        }
    }

    /// The reading as text, for the doctor's table.
    pub fn render(&self) -> String {
        let mut out = self.log.render();
        if let Some(d) = &self.disagreement {
            out.push_str(&format!("  ! {d}\n"));
        }
        out
    }
}

fn names(nics: &[&NicCapability]) -> String {
    let v: Vec<String> = nics
        .iter()
        .map(|n| format!("{} ({})", n.name, n.net))
        .collect();
    v.join(", ")
}

fn join(set: &BTreeSet<String>, none: &str) -> String {
    if set.is_empty() {
        none.to_string()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> NcclLog {
        NcclLog::read("test", text.as_bytes()).unwrap()
    }

    /// NCCL 2.28.9 (PyTorch 2.11) on one H200 with no RDMA device: the socket transport, no
    /// network connection (the device machine, 2026-12-03; lines as printed).
    const ONE_GPU_NO_NIC: &str = "\
vm:539:539 [0] NCCL INFO cudaDriverVersion 13000
vm:539:539 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:539:539 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
vm:539:539 [0] NCCL INFO NET/IB : No device found.
vm:539:539 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>
vm:539:539 [0] NCCL INFO Failed to initialize NET plugin IB
vm:539:539 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>
vm:539:539 [0] NCCL INFO Initialized NET plugin Socket
vm:539:539 [0] NCCL INFO Using network Socket
vm:539:539 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'
vm:539:539 [0] NCCL INFO Channel 00/64 : 0
vm:539:539 [0] NCCL INFO Ring 00 : 0 -> 0 -> 0
";

    #[test]
    fn one_gpu_without_a_nic_has_no_network_connection() {
        let log = read(ONE_GPU_NO_NIC);
        assert_eq!(log.versions.iter().next().unwrap(), "2.28.9+cuda13.0");
        assert!(log.networks.contains("Socket"));
        assert_eq!(log.processes, 1);
        assert_eq!(log.choice(), Choice::NoNetwork);
        assert_eq!(log.nics.len(), 1);
        assert!(log.nics[0].disabled && log.nics[0].net == "Socket");
        assert!(log.render().contains("no network connection in the log"));
    }

    /// The whole log NCCL 2.28.9 wrote on the lent H200 (bench-results/gpu/README.md).
    #[test]
    fn the_recorded_h200_log() {
        let text = include_str!("../../../bench-results/gpu/h200/nccl-2.28.9-one-gpu.log");
        let log = read(text);
        assert_eq!(log.lines, text.lines().count() as u64);
        assert_eq!(log.nccl_lines, log.lines);
        assert_eq!(log.processes, 1);
        assert!(log.versions.contains("2.28.9+cuda13.0"));
        assert_eq!(log.networks.iter().collect::<Vec<_>>(), ["Socket"]);
        assert_eq!(log.choice(), Choice::NoNetwork);
        assert_eq!(log.local_connections, 0);
        assert!(log.nics.iter().all(|n| n.net == "Socket" && n.disabled));
    }

    /// NVIDIA/nccl#1189 (2.18.3+ format): GDRDMA on every NET connection, P2P inside the node.
    const GDR_EVERYWHERE: &str = "\
H20-GPU-06:4015539:4015652 [0] NCCL INFO Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA
H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 00/0 : 1[1] -> 3[1] [receive] via NET/IB/2/GDRDMA
H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [send] via NET/IB/2/GDRDMA
H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 00/0 : 3[1] -> 2[0] via P2P/CUMEM
H20-GPU-05:1789225:1789736 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM
";

    #[test]
    fn gdrdma_on_every_connection_is_gdr() {
        let log = read(GDR_EVERYWHERE);
        assert_eq!(log.choice(), Choice::Gdr);
        assert_eq!(log.net.gdrdma, 3);
        assert_eq!(log.local_connections, 2);
        assert_eq!(log.processes, 3);
        assert_eq!(log.net_by_device["IB/2"].gdrdma, 2);
        // no "DMA-BUF is available": peer memory
        assert!(
            log.registration().starts_with("peer memory"),
            "{}",
            log.registration()
        );
        let with_dmabuf = format!(
            "{GDR_EVERYWHERE}H20-GPU-06:4015539:4015652 [0] NCCL INFO DMA-BUF is available on GPU device 0\n"
        );
        assert!(read(&with_dmabuf).registration().starts_with("dma-buf"));
    }

    /// NVIDIA/nccl-tests#321 (2.26.5): a plugin name with spaces, PXN, /GDRDMA/Shared.
    #[test]
    fn plugin_names_pxn_and_shared_buffers() {
        let log = read("\
vm-host40:34001:34001 [0] NCCL INFO NCCL version 2.26.5+cuda12.2
vm-host40:34002:34044 [1] NCCL INFO Using network NCCL RDMA Plugin v6
vm-host38:33958:33999 [1] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX
vm-host38:33957:34018 [0] NCCL INFO Channel 01/1 : 1[0] -> 2[1] [receive] via NET/NCCL RDMA Plugin v6/0/GDRDMA/Shared
vm-host38:33958:34017 [1] NCCL INFO Channel 01/1 : 3[0] -> 0[1] [send] via NET/NCCL RDMA Plugin v6/0(2)/GDRDMA/Shared
vm-host38:33957:34018 [0] NCCL INFO Channel 00/1 : 2[1] -> 3[0] via P2P/CUMEM
");
        assert_eq!(log.choice(), Choice::Gdr);
        assert_eq!(log.net.pxn, 1);
        assert_eq!(log.net_by_device["NCCL RDMA Plugin v6/0"].gdrdma, 2);
        assert_eq!(log.settings["NCCL_NET_GDR_LEVEL"], "PIX");
        assert!(log.networks.contains("NCCL RDMA Plugin v6"));
    }

    /// NVIDIA/nccl#1537 and #1676: NCCL sees no peer memory (2.22 and older look for
    /// nvidia_peermem under /sys/kernel/mm/memory_peers only); the connections go without GDRDMA.
    #[test]
    fn no_peer_memory_module_is_host_staging_with_its_reason() {
        let log = read("\
hostname1:25668:27396 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB primaryip:10.10.10.10<0>
hostname1:25668:27396 [0] NCCL INFO Using network IB
hostname1:25668:27396 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
hostname1:25668:27396 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'
hostname1:25668:27396 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
hostname1:25668:27396 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0
");
        assert_eq!(log.choice(), Choice::HostStaged);
        let r = log.reasons();
        assert!(r[0].contains("mlx5_0 (IB), mlx5_1 (IB)"), "{r:?}");
        assert!(log
            .render()
            .contains("✘ no GPUDirect RDMA: 2 network connection(s)"));
        // the doctor expected peer memory through nvpeer: the reading says they disagree
        let predicted = [crate::paths::LibraryUse {
            library: "NCCL",
            path: Some(crate::paths::Path::Nvpeer),
            why: "its probe finds the peer-memory module".into(),
        }];
        let reading = NcclReading::new(log, &predicted);
        assert!(reading
            .disagreement
            .as_deref()
            .unwrap()
            .contains("its log shows none"));
        let json = serde_json::to_value(&reading).unwrap();
        assert_eq!(json["choice"], "host_staged");
        assert_eq!(json["net"]["host_staged"], 2);
    }

    /// The formats before 2.18 (busId in brackets, "Ring" up to 2.6) and the per-GPU distance
    /// line up to 2.20 (NVIDIA/nccl#707, #392, #1151; NVIDIA/DeepLearningExamples#383).
    #[test]
    fn older_formats_and_the_distance_rule() {
        let log = read("\
10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA
 [0] NCCL INFO NCCL version 2.5.7+cuda10.0
 [0] NCCL INFO Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0
 [0] NCCL INFO Ring 00 : 0[1b000] -> 1[1c000] via P2P/IPC
node-1:32726:33054 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance 5 > 4)
node-1:32726:33054 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 86000 / HCA 0 (distance 4 <= 4), read 0
");
        assert_eq!(log.choice(), Choice::Partial);
        assert_eq!((log.net.gdrdma, log.net.host_staged), (1, 1));
        assert_eq!((log.gpu_nic_enabled, log.gpu_nic_disabled), (1, 1));
        assert!(log.versions.contains("2.5.7+cuda10.0"));
        assert_eq!(log.local_connections, 1);
        assert!(log.reasons().iter().any(|r| r.contains("distance 5 > 4")));
    }

    #[test]
    fn c2c_pci_mapping_warnings_gin_and_settings() {
        let log = read("\
gb:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA(PCI)
gb:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1
gb:1:2 [0] NCCL INFO NCCL_DMABUF_ENABLE set by environment to 0.
gb:1:2 [0] NCCL INFO Unable to use GIN: Peermem is not supported, nor DMA-BUF.

gb:1:2 [0] transport/net_ib/gin.cc:40 (ncclGinIbGdrGpuSupport) NCCL WARN Unable to use GIN: Peermem is not supported, and device 0 does not support DMA-BUF.
");
        assert_eq!(log.choice(), Choice::Gdr);
        assert_eq!(log.net.gdrdma_pci, 1);
        assert_eq!(log.rings_gdr, 1);
        assert_eq!(log.settings["NCCL_DMABUF_ENABLE"], "0");
        assert_eq!(log.registration(), "peer memory (NCCL_DMABUF_ENABLE=0)");
        assert_eq!(log.gin_refusals.len(), 2);
        assert_eq!(log.warnings.len(), 1);
    }

    #[test]
    fn a_file_without_nccl_lines_is_refused_and_a_huge_line_is_cut() {
        let e = NcclLog::read("x.log", "hello\nworld\n".as_bytes()).unwrap_err();
        assert!(e.to_string().contains("NCCL_DEBUG=INFO"), "{e}");
        let mut text = "a".repeat(3 * MAX_LINE);
        text.push_str("\nh:1:1 [0] NCCL INFO Using network IB\n");
        let log = read(&text);
        assert_eq!(log.lines, 2);
        assert!(log.networks.contains("IB"));
    }
}

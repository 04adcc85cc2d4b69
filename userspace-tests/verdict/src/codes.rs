//! Fault codes: one per doctor check, validate case family and fleet finding, stable across
//! versions, so that a drained node's reason, a ticket and an alert name the same fault whatever
//! release wrote them.
//!
//! A code is never removed and never given another meaning: a fault that no longer exists keeps
//! its row with `retired: true`, and a new fault takes the next free number of its source. The
//! rows' (code, subject, meaning) are locked in `codes.lock` beside this crate; the tests below
//! fail when a row of the lock is missing here or says something else, and when a row here is not
//! yet in the lock (`NVPEER_CODES_BLESS=1` appends new rows, and only appends). docs/operations.md
//! is the operators' table of the same rows, with each fault's fix.

/// Which tool reports a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// `nvpeer doctor`: one code per check (its id is the subject).
    Doctor,
    /// `nvpeer validate`: one code per case family (the subject, [`family`] of a case's name).
    Validate,
    /// `nvpeer validate|bench --fleet`: one code per kind of finding (a node that is not ready
    /// carries its doctor check's code instead).
    Fleet,
}

impl Source {
    /// The letter after `NVP-` in its codes, and its name in the lock.
    pub const fn letter(self) -> char {
        match self {
            Source::Doctor => 'D',
            Source::Validate => 'V',
            Source::Fleet => 'F',
        }
    }

    /// Its name: the lock's second column.
    pub const fn name(self) -> &'static str {
        match self {
            Source::Doctor => "doctor",
            Source::Validate => "validate",
            Source::Fleet => "fleet",
        }
    }
}

/// One fault code.
#[derive(Debug)]
pub struct FaultCode {
    /// `NVP-` + the source's letter + three digits.
    pub code: &'static str,
    pub source: Source,
    /// The doctor check id, the validate case family or the fleet finding kind it names.
    pub subject: &'static str,
    /// What the fault is, in one sentence; never changed once released.
    pub meaning: &'static str,
    /// No tool reports it any more; the code stays taken.
    pub retired: bool,
}

const fn row(
    code: &'static str,
    source: Source,
    subject: &'static str,
    meaning: &'static str,
) -> FaultCode {
    FaultCode {
        code,
        source,
        subject,
        meaning,
        retired: false,
    }
}

use Source::{Doctor, Fleet, Validate};

/// Every code ever given, in the order they were given (a new code goes last, whatever its
/// source: the lock is appended to).
pub static CODES: &[FaultCode] = &[
    row("NVP-D001", Doctor, "nvidia.driver", "The NVIDIA kernel driver (nvidia.ko) is not loaded or not initialised."),
    row("NVP-D002", Doctor, "nvidia.flavour", "The NVIDIA kernel modules are not the open flavour, which nvpeer and dma-buf export need."),
    row("NVP-D003", Doctor, "nvidia.nouveau", "The nouveau driver is loaded and holds the GPUs."),
    row("NVP-D004", Doctor, "nvidia.p2p_symbols", "NVIDIA's P2P API (nvidia_p2p_*) is missing or exported by a module other than nvidia.ko."),
    row("NVP-D005", Doctor, "gpu.cuda", "CUDA reports a GPU without GPUDirect RDMA or dma-buf support, or CUDA cannot be asked."),
    row("NVP-D006", Doctor, "gpu.bar1", "A GPU's BAR1 is nearly used up or too small: little more GPU memory can be pinned for peers."),
    row("NVP-D007", Doctor, "gpu.mig", "MIG mode is on or pending on a GPU, which narrows what the peer-memory API serves."),
    row("NVP-D008", Doctor, "gpu.mlopart", "CUDA devices are MLOPart partitions, on which NCCL turns GPUDirect RDMA off unless told otherwise."),
    row("NVP-D009", Doctor, "rdma.peer_api", "The running kernel has no OFED peer-memory API (ib_register_peer_memory_client)."),
    row("NVP-D010", Doctor, "rdma.devices", "No RDMA device, or no port of one that is up."),
    row("NVP-D011", Doctor, "rdma.uverbs", "The RDMA user-verbs device files are missing or cannot be opened."),
    row("NVP-D012", Doctor, "kernel.log", "This boot's kernel log holds module-loader errors for nvpeer or the modules it links to."),
    row("NVP-D013", Doctor, "kernel.rust", "The running kernel cannot build or load Rust modules."),
    row("NVP-D014", Doctor, "kernel.dkms", "nvpeer's DKMS build is missing or failed for the running kernel."),
    row("NVP-D015", Doctor, "gpu_operator.driver", "The GPU Operator's driver container does not load nvpeer."),
    row("NVP-D016", Doctor, "nvpeer.module", "nvpeer is not loaded."),
    row("NVP-D017", Doctor, "nvidia.peermem", "NVIDIA's own nvidia-peermem is not loaded where its path is judged."),
    row("NVP-D018", Doctor, "peer.clients", "No peer-memory client serves GPU memory in the RDMA core, or its counters show errors."),
    row("NVP-D019", Doctor, "peer.conflicts", "Another GPU peer-memory provider (nvidia_peermem or nv_peer_mem) is loaded or set to load beside nvpeer."),
    row("NVP-D020", Doctor, "peer.consumers", "A library's own probe does not find the GPUDirect RDMA path this node offers."),
    row("NVP-D021", Doctor, "rdma.dmabuf", "The dma-buf path is incomplete: the kernel's import, the GPU's export or the RDMA provider's import is missing."),
    row("NVP-D022", Doctor, "peer.gpu_initiated", "A GPU-initiated networking backend lacks what it needs (an mlx5 device, peer memory or dma-buf, the driver's PeerMappingOverride)."),
    row("NVP-D023", Doctor, "rdma.nic_paths", "An RDMA device reaches GPU memory by a path of its own driver family, not by peer memory."),
    row("NVP-D024", Doctor, "pci.topology", "A GPU and its nearest NIC are farther apart than NCCL allows GPUDirect RDMA by default."),
    row("NVP-D025", Doctor, "pci.acs", "ACS redirects peer-to-peer traffic between a GPU and a NIC through the root complex."),
    row("NVP-D026", Doctor, "platform.iommu", "The IOMMU translates the GPUs' or NICs' DMA, which slows or breaks peer DMA."),
    row("NVP-D027", Doctor, "pci.link", "A GPU or NIC link runs below its maximum width or speed."),
    row("NVP-D028", Doctor, "pci.relaxed_ordering", "Relaxed ordering is off on a NIC."),
    row("NVP-D029", Doctor, "platform.virtualization", "The node is a virtual machine: ACS, ATS and the IOMMU are the host's to set."),
    row("NVP-D030", Doctor, "platform.memlock", "The locked-memory limit is too low for RDMA registrations."),
    row("NVP-D031", Doctor, "libs.settings", "An NCCL or UCX setting turns GPUDirect RDMA off or narrows it."),
    row("NVP-D032", Doctor, "kernel.config", "The kernel lacks an option GPUDirect RDMA needs."),
    row("NVP-D033", Doctor, "kernel.signing", "Module signing or lockdown refuses nvpeer's module as it is signed."),
    row("NVP-V001", Validate, "cap.memory", "The memory the run asked for (a GPU, CUDA) is not there."),
    row("NVP-V002", Validate, "cap.rdma-device", "No RDMA device could be opened for the run."),
    row("NVP-V003", Validate, "cap.peer-client", "No peer-memory client is registered with the RDMA core."),
    row("NVP-V004", Validate, "cap.dmabuf-import", "The RDMA provider does not import dma-buf."),
    row("NVP-V005", Validate, "mem.alloc-free", "Allocating or freeing the memory under test failed."),
    row("NVP-V006", Validate, "mem.dmabuf-export", "GPU memory could not be exported as a dma-buf."),
    row("NVP-V007", Validate, "mem.kind", "A CUDA allocation kind could not be allocated, pinned for a peer or read back."),
    row("NVP-V008", Validate, "reg.sizes", "Registering GPU memory failed at some size."),
    row("NVP-V009", Validate, "reg.offsets", "Registering GPU memory at an offset into its allocation failed."),
    row("NVP-V010", Validate, "reg.many-small", "Many small registrations at once failed or were not all released."),
    row("NVP-V011", Validate, "reg.churn", "Registering and deregistering in a loop failed or did not release what it took."),
    row("NVP-V012", Validate, "reg.kind", "A registration of an allocation kind through the emulated core failed (the test bench's)."),
    row("NVP-V013", Validate, "xfer.write", "An RDMA write between GPU and host memory failed or landed wrong data."),
    row("NVP-V014", Validate, "xfer.write-imm", "An RDMA write with immediate failed, landed wrong data or raised no receive completion."),
    row("NVP-V015", Validate, "xfer.read", "An RDMA read between GPU and host memory failed or returned wrong data."),
    row("NVP-V016", Validate, "xfer.send-recv", "A send and receive between GPU and host memory failed or delivered wrong data."),
    row("NVP-V017", Validate, "inval.free-idle", "Freeing registered GPU memory did not invalidate its registration as the peer-memory API requires."),
    row("NVP-V018", Validate, "inval.free-inflight", "Freeing registered GPU memory under DMA did not stop the DMA and invalidate the registration."),
    row("NVP-V019", Validate, "oob.connect", "The out-of-band channel to the peer node could not be set up."),
    row("NVP-V020", Validate, "connect", "The RDMA connection to the peer could not be made."),
    row("NVP-V021", Validate, "nccl.all-reduce", "NCCL's all_reduce_perf failed or reported wrong results."),
    row("NVP-V022", Validate, "nccl.gdr", "NCCL did not use GPUDirect RDMA on its network connections."),
    row("NVP-F001", Fleet, "lost.never_joined", "A node never joined the fleet run within the join timeout."),
    row("NVP-F002", Fleet, "lost.died", "A node's connection closed, or it broke the protocol, during the fleet run."),
    row("NVP-F003", Fleet, "lost.hung", "A node stopped answering within the pair timeout and its grace."),
    row("NVP-F004", Fleet, "outlier.link", "A link measured below the fleet's threshold."),
    row("NVP-F005", Fleet, "outlier.node", "Every link of a node measured below the threshold: the node is slow, not one link."),
    row("NVP-F006", Fleet, "failure.link", "A link's test failed: wrong data, an error, or a pair that did not finish."),
    row("NVP-F007", Fleet, "failure.node", "A node's tests failed on its links."),
    row(
        "NVP-D034",
        Doctor,
        "node.profile",
        "The node does not match its node profile (GPU or NIC count, names, rates, BAR1, topology, driver or kernel).",
    ),
    row(
        "NVP-V023",
        Validate,
        "node.profile",
        "The node under test does not match the node profile `validate --profile` names.",
    ),
];

/// The code of `subject` from `source`, if it has one that is not retired.
pub fn lookup(source: Source, subject: &str) -> Option<&'static FaultCode> {
    CODES
        .iter()
        .find(|c| c.source == source && c.subject == subject && !c.retired)
}

/// A doctor check's code.
pub fn doctor(check: &str) -> Option<&'static str> {
    lookup(Doctor, check).map(|c| c.code)
}

/// A validate case's code, by its [`family`].
pub fn validate(case: &str) -> Option<&'static str> {
    lookup(Validate, family(case)).map(|c| c.code)
}

/// A fleet finding's code.
pub fn fleet(kind: &str) -> Option<&'static str> {
    lookup(Fleet, kind).map(|c| c.code)
}

/// The family of a validate case: its name before any `[...]`, cut after its second
/// dot-separated part (`xfer.write.host->cuda[ibv_reg_mr]` is `xfer.write`, `mem.kind[managed]`
/// `mem.kind`, `connect` itself).
pub fn family(case: &str) -> &str {
    let base = case.split('[').next().unwrap_or(case);
    match base.match_indices('.').nth(1) {
        Some((i, _)) => &base[..i],
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const LOCK: &str = include_str!("../codes.lock");

    /// The lock's line of a code: `CODE<TAB>source<TAB>subject<TAB>meaning`.
    fn lock_line(c: &FaultCode) -> String {
        format!(
            "{}\t{}\t{}\t{}",
            c.code,
            c.source.name(),
            c.subject,
            c.meaning
        )
    }

    #[test]
    fn codes_are_well_formed_unique_and_numbered_in_order_per_source() {
        let mut seen = HashSet::new();
        for s in [Doctor, Validate, Fleet] {
            let rows: Vec<_> = CODES.iter().filter(|c| c.source == s).collect();
            for (i, c) in rows.iter().enumerate() {
                assert_eq!(
                    c.code,
                    format!("NVP-{}{:03}", s.letter(), i + 1),
                    "numbering of {}",
                    c.code
                );
                assert!(seen.insert(c.code), "{} given twice", c.code);
                assert!(
                    !c.meaning.is_empty() && c.meaning.ends_with('.'),
                    "{}'s meaning",
                    c.code
                );
                assert!(
                    !c.meaning.contains('\t') && !c.meaning.contains('\n'),
                    "{}'s meaning",
                    c.code
                );
            }
            let live: Vec<_> = rows
                .iter()
                .filter(|c| !c.retired)
                .map(|c| c.subject)
                .collect();
            let unique: HashSet<_> = live.iter().collect();
            assert_eq!(
                unique.len(),
                live.len(),
                "a {} subject with two live codes",
                s.name()
            );
        }
    }

    /// The lock: every code released keeps its subject and meaning; a new code is appended to it
    /// (with `NVPEER_CODES_BLESS=1`, which never rewrites a line).
    #[test]
    fn no_code_is_removed_or_changes_meaning() {
        let ours: Vec<String> = CODES.iter().map(lock_line).collect();
        let locked: Vec<&str> = LOCK
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        for (i, l) in locked.iter().enumerate() {
            let code = l.split('\t').next().unwrap_or_default();
            match ours.iter().find(|o| o.split('\t').next() == Some(code)) {
                None => panic!("{code} was removed: a code stays, marked retired"),
                Some(o) => assert_eq!(
                    o, l,
                    "{code} changed: a released code keeps its subject and meaning"
                ),
            }
            assert_eq!(
                ours.get(i).map(String::as_str),
                Some(*l),
                "the lock's order is the table's"
            );
        }
        let new: Vec<&String> = ours[locked.len().min(ours.len())..].iter().collect();
        if new.is_empty() {
            return;
        }
        if std::env::var_os("NVPEER_CODES_BLESS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/codes.lock");
            let mut text = LOCK.to_string();
            for n in new {
                text.push_str(n);
                text.push('\n');
            }
            std::fs::write(path, text).expect("codes.lock written");
        } else {
            panic!("codes not in codes.lock yet (NVPEER_CODES_BLESS=1 appends them): {new:?}");
        }
    }

    /// docs/operations.md is the operators' table: every live code in it with its subject and
    /// meaning, and no code there that is not here.
    #[test]
    fn the_operators_table_lists_every_code() {
        let doc = include_str!("../../../docs/operations.md");
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `NVP-")).collect();
        for c in CODES.iter().filter(|c| !c.retired) {
            let want = format!("| `{}` | `{}` | {} |", c.code, c.subject, c.meaning);
            assert!(
                rows.iter().any(|r| r.starts_with(&want)),
                "docs/operations.md has no row starting {want}"
            );
        }
        for r in rows {
            let code = r
                .trim_start_matches("| `")
                .split('`')
                .next()
                .unwrap_or_default();
            assert!(
                CODES.iter().any(|c| c.code == code),
                "docs/operations.md names {code}, which is not a code"
            );
        }
    }

    #[test]
    fn families_of_case_names() {
        assert_eq!(family("xfer.write.host->cuda[ibv_reg_mr]"), "xfer.write");
        assert_eq!(
            family("xfer.write-imm.cuda->host[ibv_reg_dmabuf_mr]"),
            "xfer.write-imm"
        );
        assert_eq!(family("mem.kind[managed]"), "mem.kind");
        assert_eq!(family("reg.kind[vmm][peer_mem_emu]"), "reg.kind");
        assert_eq!(family("inval.free-idle[ibv_reg_mr]"), "inval.free-idle");
        assert_eq!(family("reg.sizes[ibv_reg_mr]"), "reg.sizes");
        assert_eq!(family("connect"), "connect");
        assert_eq!(
            validate("xfer.read.cuda->cuda[ibv_reg_mr]"),
            Some("NVP-V015")
        );
        assert_eq!(validate("no.such-case"), None);
        assert_eq!(doctor("pci.acs"), Some("NVP-D025"));
        assert_eq!(fleet("outlier.node"), Some("NVP-F005"));
    }
}

//! Fixture-tree tests: every check and every verdict, on sysfs/procfs trees built in a tempdir.
//!
//! This file holds the fixture (a fake root filesystem, [`Fx`]) and the helpers the tests share; the
//! tests are in tests/ by the area they cover: `verdicts`, `nvidia` (driver, CUDA, BAR1), `rdma`
//! (the RDMA stack and peer clients, what the libraries detect, dma-buf), `platform` (PCIe topology,
//! ACS, IOMMU, link), `kernel` (kernel build and signing), `paths` (one verdict per path and the
//! checks added with them), `props` (property tests of the parsers) and `golden` (the JSON report
//! byte for byte).

use crate::probes::{CudaProbe, DmabufProbe, GpuAttrs, Probes, VerbsProbe};
use crate::report::{Report, Require, Status, Verdict};
use crate::{diagnose, Args};
use std::fs;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

mod golden;
mod gpu_initiated;
mod kernel;
mod nvidia;
mod operator;
mod paths;
mod platform;
mod profile;
mod props;
mod rdma;
mod slurm;
mod topology;
mod verdicts;

const REL: &str = "7.2.12";

/// Ubuntu 26.04's /etc/os-release (the fields the doctor reads).
const UBUNTU_2604: &str = "PRETTY_NAME=\"Ubuntu 26.04 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"26.04\"\nVERSION_CODENAME=resolute\nID=ubuntu\nID_LIKE=debian\n";

/// A fake root filesystem.
struct Fx {
    dir: TempDir,
}

/// Config-space bytes of a PCIe function: header, PCIe capability at 0x40 (DevCtl at 0x48),
/// optionally an ACS extended capability at 0x100 (behind an unrelated one at 0x100 → 0x140).
fn config(devctl: u16, acs: Option<u16>, len: usize) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0..2].copy_from_slice(&0x15b3u16.to_le_bytes());
    c[6] = 0x10; // status: capability list present
    c[0x34] = 0x40;
    c[0x40] = 0x10; // PCIe capability, last in list
    c[0x41] = 0x00;
    c[0x48..0x4a].copy_from_slice(&devctl.to_le_bytes());
    // Extended capabilities: AER (0x0001) at 0x100 → next 0x140.
    let aer: u32 = 0x0001 | (1 << 16) | (0x140 << 20);
    c[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
    if let Some(ctl) = acs {
        let hdr: u32 = 0x000d | (1 << 16);
        c[0x140..0x144].copy_from_slice(&hdr.to_le_bytes());
        c[0x144..0x146].copy_from_slice(&0x005fu16.to_le_bytes());
        c[0x146..0x148].copy_from_slice(&ctl.to_le_bytes());
    }
    c.truncate(len);
    c
}

impl Fx {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn p(&self, abs: &str) -> PathBuf {
        self.dir.path().join(abs.trim_start_matches('/'))
    }

    fn file(&self, abs: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.p(abs);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
        self
    }

    fn rm(&self, abs: &str) -> &Self {
        let p = self.p(abs);
        if p.is_dir() {
            fs::remove_dir_all(p).unwrap();
        } else if p.exists() || p.is_symlink() {
            fs::remove_file(p).unwrap();
        }
        self
    }

    /// A relative symlink `link` → `target` (both absolute inside the fixture).
    fn symlink(&self, link: &str, target: &str) {
        let lp = self.p(link);
        fs::create_dir_all(lp.parent().unwrap()).unwrap();
        let depth = Path::new(link).parent().unwrap().components().count() - 1;
        let rel = format!("{}{}", "../".repeat(depth), target.trim_start_matches('/'));
        let _ = fs::remove_file(&lp);
        std::os::unix::fs::symlink(rel, lp).unwrap();
    }

    /// A PCI function below host bridge `host` at `chain` (root port first, device last).
    fn pci(
        &self,
        host: &str,
        chain: &[&str],
        vendor: u32,
        class: u32,
        numa: i32,
        cfg: Vec<u8>,
    ) -> String {
        let dir = format!("/sys/devices/{host}/{}", chain.join("/"));
        let bdf = chain.last().unwrap();
        self.file(&format!("{dir}/vendor"), format!("{vendor:#06x}\n"));
        self.file(&format!("{dir}/class"), format!("{class:#08x}\n"));
        self.file(&format!("{dir}/numa_node"), format!("{numa}\n"));
        self.file(&format!("{dir}/config"), cfg);
        self.file(&format!("{dir}/current_link_speed"), "32.0 GT/s PCIe\n");
        self.file(&format!("{dir}/max_link_speed"), "32.0 GT/s PCIe\n");
        self.file(&format!("{dir}/current_link_width"), "16\n");
        self.file(&format!("{dir}/max_link_width"), "16\n");
        self.symlink(&format!("/sys/bus/pci/devices/{bdf}"), &dir);
        dir
    }

    fn bridge(&self, host: &str, chain: &[&str], acs: Option<u16>) -> String {
        self.pci(host, chain, 0x10b5, 0x060400, 0, config(0, acs, 4096))
    }

    fn gpu(&self, host: &str, chain: &[&str], numa: i32, bar1: u64) -> String {
        let dir = self.pci(host, chain, 0x10de, 0x030200, numa, config(0, None, 4096));
        let base = 0x2000_0000_0000u64;
        let resource = format!(
            "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n{:#018x} {:#018x} 0x000000000014220c\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n",
            base,
            base + bar1 - 1
        );
        self.file(&format!("{dir}/resource"), resource);
        dir
    }

    fn nic(&self, host: &str, chain: &[&str], numa: i32, name: &str) -> String {
        let dir = self.pci(
            host,
            chain,
            0x15b3,
            0x020700,
            numa,
            config(0x2810 | 0x10, None, 4096),
        );
        self.symlink(&format!("/sys/class/infiniband/{name}/device"), &dir);
        self.file(
            &format!("/sys/class/infiniband/{name}/ports/1/state"),
            "4: ACTIVE\n",
        );
        self.file(
            &format!("/sys/class/infiniband/{name}/ports/1/link_layer"),
            "InfiniBand\n",
        );
        self.file(
            &format!("/sys/class/infiniband/{name}/ports/1/rate"),
            "400 Gb/sec (4X NDR)\n",
        );
        dir
    }

    fn kallsyms(&self, extra: &[(&str, &str)]) -> &Self {
        let mut s = String::from(
            "0000000000000000 T _stext\n0000000000000000 T ib_register_device\t[ib_core]\n",
        );
        for f in crate::checks::nvidia_symbols() {
            s.push_str(&format!("0000000000000000 T {f}\t[nvidia]\n"));
        }
        s.push_str("0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n");
        s.push_str("0000000000000000 T ib_unregister_peer_memory_client\t[ib_core]\n");
        s.push_str("0000000000000000 T ib_umem_dmabuf_get\t[ib_core]\n");
        for (n, m) in extra {
            s.push_str(&format!("0000000000000000 T {n}\t[{m}]\n"));
        }
        self.file("/proc/kallsyms", s)
    }

    fn module(&self, name: &str) -> &Self {
        self.file(&format!("/sys/module/{name}/initstate"), "live\n")
    }

    /// nvpeer loaded under `name` (`nvidia_peermem`, the drop-in, or `nvpeer`), nothing else.
    fn nvpeer_as(&self, name: &str) -> &Self {
        self.rm("/sys/module/nvidia_peermem")
            .rm("/sys/module/nvpeer");
        self.module(name)
            .file(&format!("/sys/module/{name}/version"), "0.1.0\n")
            .file(&format!("/sys/module/{name}/taint"), "O\n")
            .file(
                &format!("/sys/module/{name}/parameters/persistent_api_support"),
                "1\n",
            )
            .file(
                &format!("/sys/module/{name}/parameters/peerdirect_support"),
                "0\n",
            )
    }

    /// NVIDIA's own nvidia_peermem: the driver's version.
    fn nvidia_dropin(&self) -> &Self {
        self.rm("/sys/module/nvidia_peermem");
        self.module("nvidia_peermem")
            .file("/sys/module/nvidia_peermem/version", "580.95.05\n")
    }

    /// nvpeer 0.1.0 registered with DKMS and built for `kernel` only.
    fn dkms_built_for(&self, kernel: &str) -> &Self {
        self.file(
            "/var/lib/dkms/nvpeer/0.1.0/source/dkms.conf",
            "PACKAGE_NAME=nvpeer\n",
        )
        .file(
            &format!("/var/lib/dkms/nvpeer/0.1.0/{kernel}/x86_64/module/nvidia-peermem.ko.xz"),
            "x",
        )
    }

    /// The healthy node's bridges with config space cut to the header (what non-root reads).
    fn bridges_unreadable(&self) -> &Self {
        for b in [
            "0000:00:01.0/0000:01:00.0",
            "0000:00:01.0/0000:01:00.0/0000:02:00.0",
            "0000:00:01.0/0000:01:00.0/0000:02:01.0",
        ] {
            self.file(
                &format!("/sys/devices/pci0000:00/{b}/config"),
                config(0, Some(0x1d), 64),
            );
        }
        self
    }

    /// A core that keeps the client list in sysfs (MLNX_OFED before 24.04, or a kernel exporting
    /// mm_kobj), with `nv_mem` registered.
    fn old_ofed(&self) -> &Self {
        for (k, v) in [
            ("version", "0.1.0"),
            ("num_alloc_mrs", "3"),
            ("num_dealloc_mrs", "1"),
            ("num_free_callbacks", "0"),
        ] {
            self.file(
                &format!("/sys/kernel/mm/memory_peers/nv_mem/{k}"),
                format!("{v}\n"),
            );
        }
        self
    }

    /// A node that passes every gating check: H100-like GPU and ConnectX NIC under one switch,
    /// DOCA-OFED on a kernel without the mm_kobj export (no /sys/kernel/mm/memory_peers), nvpeer
    /// loaded as nvidia_peermem (the drop-in DKMS installs), read without root (no debugfs).
    fn healthy() -> Self {
        let f = Fx::new();
        f.file("/proc/sys/kernel/osrelease", format!("{REL}\n"));
        f.kallsyms(&[]);
        f.file(
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22)\nGCC version:  gcc 12\n",
        );
        f.module("nvidia")
            .file("/sys/module/nvidia/version", "580.95.05\n")
            .file("/sys/module/nvidia/taint", "OE\n");
        f.module("ib_core");
        f.nvpeer_as("nvidia_peermem");
        f.file("/etc/modprobe.d/nvpeer.conf", "blacklist nv_peer_mem\ninstall nv_peer_mem /bin/false\nsoftdep nvidia_peermem pre: nvidia ib_core\n");
        f.file(
            &format!("/boot/config-{REL}"),
            "CONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT=\"rustc 1.97.1 (8bab26f4f 2026-07-14)\"\nCONFIG_INFINIBAND=y\nCONFIG_INFINIBAND_USER_MEM=y\nCONFIG_PCI_P2PDMA=y\n",
        );
        for a in crate::checks::rust_artifacts() {
            f.file(&format!("/lib/modules/{REL}/build/{a}"), "x");
        }
        f.file("/sys/module/module/parameters/sig_enforce", "N\n");
        f.file("/proc/sys/kernel/modules_disabled", "0\n");
        f.file("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme sse2\n");
        f.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n");
        f.file("/proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         unlimited            unlimited            bytes     \n");
        f.file("/dev/infiniband/uverbs0", "");
        f.file(
            "/dev/kmsg",
            "6,100,5000,-;mlx5_core 0000:04:00.0: firmware version: 28.39.1002\n",
        );
        // Root port → switch (USP → 2 DSPs) → GPU and NIC.
        let h = "pci0000:00";
        f.bridge(h, &["0000:00:01.0"], Some(0x001d));
        f.bridge(h, &["0000:00:01.0", "0000:01:00.0"], None);
        f.bridge(
            h,
            &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
            Some(0x0001),
        );
        f.bridge(
            h,
            &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"],
            Some(0x0001),
        );
        f.gpu(
            h,
            &[
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
            ],
            0,
            256 << 30,
        );
        f.nic(
            h,
            &[
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:01.0",
                "0000:04:00.0",
            ],
            0,
            "mlx5_0",
        );
        f
    }

    fn report(&self) -> Report {
        self.report_with(Probes::none())
    }

    fn report_with(&self, probes: Probes) -> Report {
        let args = Args {
            no_probes: true,
            ..Args::new(self.dir.path().to_path_buf(), Require::Nvpeer)
        };
        diagnose(&args, probes)
    }
}

/// kallsyms lines for every nvidia_p2p_* function, owned by `module`.
fn nv_syms(module: &str) -> String {
    crate::checks::nvidia_symbols()
        .iter()
        .map(|s| format!("0000000000000000 T {s}\t[{module}]\n"))
        .collect()
}

fn status(r: &Report, id: &str) -> Status {
    r.get(id).unwrap_or_else(|| panic!("no check {id}")).status
}

fn check<'a>(r: &'a Report, id: &str) -> &'a crate::report::Check {
    r.get(id).unwrap()
}

/// A check's data as the JSON report prints it.
fn data(c: &crate::report::Check) -> serde_json::Value {
    serde_json::to_value(&c.data).expect("check data encodes")
}

fn gpu_ok(bdf: &str) -> GpuAttrs {
    GpuAttrs {
        ordinal: 0,
        bdf: bdf.into(),
        name: "NVIDIA H200".into(),
        gdr_supported: Some(1),
        dmabuf_supported: Some(1),
        gdr_vmm_supported: Some(1),
        total_mem: Some(141 << 30),
    }
}

/// Live probes of a node where dma-buf works end to end.
fn dmabuf_probes() -> Probes {
    let mut p = Probes::none();
    p.cuda = CudaProbe::Ok {
        driver_api: Some(13000),
        gpus: vec![gpu_ok("0000:03:00.0")],
    };
    p.verbs = VerbsProbe::Probed {
        results: vec![DmabufProbe {
            device: "mlx5_0".into(),
            errno: Some(9),
            verdict: "supported",
        }],
    };
    p
}

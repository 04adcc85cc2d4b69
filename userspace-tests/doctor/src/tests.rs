//! Fixture-tree tests: every check and every verdict, on sysfs/procfs trees built in a tempdir.

use crate::probes::{CudaProbe, DmabufProbe, GpuAttrs, Probes, VerbsProbe};
use crate::report::{Report, Require, Status, Verdict};
use crate::{diagnose, Args};
use std::fs;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

mod paths;
mod props;

const REL: &str = "7.2.12";

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
            root: self.dir.path().to_path_buf(),
            json: false,
            verbose: false,
            no_probes: true,
            require: Require::Nvpeer,
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

// ---------------------------------------------------------------- verdicts

#[test]
fn healthy_node_is_ready() {
    let r = Fx::healthy().report();
    for c in &r.checks {
        assert!(c.status != Status::Fail, "{} failed: {}", c.id, c.summary);
    }
    assert_eq!(r.verdict, Verdict::Ready);
    assert_eq!(r.exit_code, 0);
    assert_eq!(status(&r, "pci.topology"), Status::Pass);
    assert_eq!(check(&r, "pci.topology").data["pairs"][0]["class"], "PIX");
    let table = r.render_table(false);
    assert!(table.contains("✔") && table.contains("READY"), "{table}");
}

#[test]
fn any_gating_failure_means_not_ready() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    assert_eq!(status(&r, "nvpeer.module"), Status::Fail);
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(r.exit_code, 1);
    let table = r.render_table(false);
    assert!(
        table.contains("✘") && table.contains("→ Install nvpeer"),
        "{table}"
    );
}

#[test]
fn unreadable_gating_input_means_could_not_check() {
    let f = Fx::healthy();
    f.rm("/proc/kallsyms");
    let r = f.report();
    assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Unknown);
    assert_eq!(status(&r, "rdma.peer_api"), Status::Unknown);
    assert_eq!(r.verdict, Verdict::CouldNotCheck);
    assert_eq!(r.exit_code, 2);
}

#[test]
fn warnings_do_not_change_the_verdict() {
    let f = Fx::healthy();
    f.file("/proc/cpuinfo", "flags\t: fpu hypervisor\n");
    let r = f.report();
    assert_eq!(status(&r, "platform.virtualization"), Status::Warn);
    assert!(check(&r, "platform.virtualization").fix.is_some());
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn json_report_has_every_check() {
    let r = Fx::healthy().report();
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(v["verdict"], "ready");
    assert_eq!(v["exit_code"], 0);
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in [
        "nvidia.driver",
        "nvidia.flavour",
        "rdma.peer_api",
        "peer.clients",
        "pci.acs",
        "kernel.rust",
        "kernel.signing",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
}

#[test]
fn missing_root_is_could_not_check() {
    let args = Args {
        root: "/nonexistent/doctor-root".into(),
        json: true,
        verbose: false,
        no_probes: true,
        require: Require::Any,
    };
    assert_eq!(crate::run(args), 2);
}

#[test]
fn empty_root_fails_cleanly() {
    let f = Fx::new();
    let r = f.report();
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(status(&r, "nvidia.driver"), Status::Fail);
    assert_eq!(status(&r, "pci.topology"), Status::Skip);
    assert_eq!(status(&r, "kernel.rust"), Status::Unknown);
}

#[test]
fn live_system_does_not_panic() {
    // Whatever this machine is, every check must produce a result (probes included).
    let args = Args {
        root: "/".into(),
        json: false,
        verbose: true,
        no_probes: false,
        require: Require::Any,
    };
    let r = diagnose(&args, Probes::run());
    assert_eq!(r.checks.len(), crate::checks::run_all_count());
    assert!(!r.render_table(true).is_empty());
}

// ---------------------------------------------------------------- NVIDIA driver

#[test]
fn nvidia_driver_missing() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia").rm("/proc/driver/nvidia");
    f.file(
        "/proc/kallsyms",
        "0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "nvidia.driver"), Status::Fail);
    assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Fail);
    assert!(check(&r, "nvidia.p2p_symbols")
        .summary
        .contains("nvidia_p2p_get_pages"));
}

#[test]
fn nvidia_driver_version_reported() {
    let r = Fx::healthy().report();
    assert_eq!(status(&r, "nvidia.driver"), Status::Pass);
    assert_eq!(check(&r, "nvidia.driver").data["version"], "580.95.05");
}

#[test]
fn p2p_api_from_an_emulator_is_a_warning() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia").rm("/proc/driver/nvidia");
    let syms = nv_syms("nvp2p_emu");
    f.file(
        "/proc/kallsyms",
        syms + "0000000000000000 T ib_register_peer_memory_client\t[peer_mem_emu]\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "nvidia.driver"), Status::Warn);
    assert_eq!(check(&r, "nvidia.driver").data["p2p_provider"], "nvp2p_emu");
    assert_eq!(status(&r, "nvidia.flavour"), Status::Skip);
    assert_eq!(check(&r, "nvidia.p2p_symbols").data["owner"], "nvp2p_emu");
    assert_eq!(check(&r, "rdma.peer_api").data["owner"], "peer_mem_emu");
}

#[test]
fn proprietary_flavour_fails() {
    let f = Fx::healthy();
    f.file(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n",
    );
    f.file("/sys/module/nvidia/taint", "POE\n");
    let r = f.report();
    assert_eq!(status(&r, "nvidia.flavour"), Status::Fail);
    assert!(check(&r, "nvidia.flavour")
        .fix
        .as_ref()
        .unwrap()
        .contains("open"));
    assert_eq!(r.exit_code, 1);
}

#[test]
fn flavour_from_modinfo_license_when_not_loaded() {
    let f = Fx::healthy();
    f.rm("/proc/driver/nvidia").rm("/sys/module/nvidia/taint");
    let mut p = Probes::none();
    p.nvidia_license = Some("Dual MIT/GPL".into());
    assert_eq!(
        status(&f.report_with(p.clone()), "nvidia.flavour"),
        Status::Pass
    );
    p.nvidia_license = Some("NVIDIA".into());
    assert_eq!(status(&f.report_with(p), "nvidia.flavour"), Status::Fail);
}

#[test]
fn flavour_unknown_is_could_not_check() {
    let f = Fx::healthy();
    f.rm("/proc/driver/nvidia").rm("/sys/module/nvidia/taint");
    let r = f.report();
    assert_eq!(status(&r, "nvidia.flavour"), Status::Unknown);
    assert_eq!(r.verdict, Verdict::CouldNotCheck);
}

#[test]
fn nouveau_loaded_fails() {
    let f = Fx::healthy();
    f.module("nouveau");
    assert_eq!(status(&f.report(), "nvidia.nouveau"), Status::Fail);
    assert_eq!(
        status(&Fx::healthy().report(), "nvidia.nouveau"),
        Status::Pass
    );
}

#[test]
fn old_driver_without_persistent_api_warns() {
    let f = Fx::healthy();
    let syms: String = crate::checks::nvidia_symbols()
        .iter()
        .filter(|s| !s.ends_with("_persistent"))
        .map(|s| format!("0000000000000000 T {s}\t[nvidia]\n"))
        .collect();
    f.file(
        "/proc/kallsyms",
        syms + "0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Warn);
    assert!(check(&r, "nvidia.p2p_symbols")
        .fix
        .as_ref()
        .unwrap()
        .contains("persistent_api_support=0"));
}

#[test]
fn kallsyms_hidden_addresses_still_give_names() {
    let k = crate::kernel::Kallsyms::parse(
        "0000000000000000 T nvidia_p2p_get_pages\t[nvidia]\n0000000000000000 t foo\n",
    );
    assert!(k.addresses_hidden);
    assert_eq!(k.owner("nvidia_p2p_get_pages").as_deref(), Some("nvidia"));
    assert_eq!(k.owner("foo").as_deref(), Some("vmlinux"));
    let k = crate::kernel::Kallsyms::parse(
        "ffffffffc0a01234 T nvidia_p2p_get_pages\t[nvidia]\ngarbage\n",
    );
    assert!(!k.addresses_hidden);
}

#[test]
fn cuda_probe_results() {
    let f = Fx::healthy();
    let mut p = Probes::none();
    assert_eq!(status(&f.report_with(p.clone()), "gpu.cuda"), Status::Skip);
    p.cuda = CudaProbe::LibraryMissing;
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "gpu.cuda"), Status::Unknown);
    assert!(check(&r, "gpu.cuda")
        .summary
        .contains("libcuda.so not found"));
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "a missing libcuda alone must not block"
    );
    p.cuda = CudaProbe::Ok {
        driver_api: Some(13000),
        gpus: vec![gpu_ok("0000:03:00.0")],
    };
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "gpu.cuda"), Status::Pass);
    assert!(check(&r, "gpu.cuda").summary.contains("13.0"));
    assert!(check(&r, "gpu.bar1").summary.contains("framebuffer"));
    let mut geforce = gpu_ok("0000:03:00.0");
    geforce.gdr_supported = Some(0);
    p.cuda = CudaProbe::Ok {
        driver_api: Some(13000),
        gpus: vec![geforce],
    };
    assert_eq!(status(&f.report_with(p.clone()), "gpu.cuda"), Status::Fail);
    p.cuda = CudaProbe::Failed {
        error: "cuInit: CUDA_ERROR_NO_DEVICE".into(),
    };
    assert_eq!(status(&f.report_with(p), "gpu.cuda"), Status::Unknown);
}

#[test]
fn real_cuda_probe_never_panics() {
    // On the build host libcuda is absent; on the GPU machine it is present. Both must be handled.
    match crate::probes::probe_cuda() {
        CudaProbe::LibraryMissing | CudaProbe::Failed { .. } | CudaProbe::Ok { .. } => {}
        CudaProbe::NotRun => panic!("probe_cuda must run"),
    }
    assert!(
        !matches!(crate::probes::probe_verbs(), VerbsProbe::NotRun),
        "probe_verbs must run"
    );
}

#[test]
fn bar1_sizes() {
    let r = Fx::healthy().report();
    assert_eq!(status(&r, "gpu.bar1"), Status::Pass);
    assert_eq!(
        check(&r, "gpu.bar1").data["gpus"][0]["bar1_bytes"],
        256u64 << 30
    );
    let f = Fx::healthy();
    f.gpu(
        "pci0000:00",
        &[
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
        ],
        0,
        256 << 20,
    );
    let r = f.report();
    assert_eq!(status(&r, "gpu.bar1"), Status::Warn);
    assert!(check(&r, "gpu.bar1").summary.contains("below 1 GiB"));
    // 64-bit BAR0 (lines 0-1), BAR1 at index 2: still found.
    let gpu = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
    f.file(
        &format!("{gpu}/resource"),
        "0x00000000f0000000 0x00000000f0ffffff 0x0000000000140204\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n0x0000200000000000 0x0000203fffffffff 0x000000000014220c\n0x0000000000001000 0x000000000000107f 0x0000000000040101\n",
    );
    assert_eq!(
        check(&f.report(), "gpu.bar1").data["gpus"][0]["bar1_bytes"],
        256u64 << 30
    );
    // Only BAR0 and an I/O BAR: no BAR1.
    f.file(&format!("{gpu}/resource"), "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n0x0000000000001000 0x000000000000107f 0x0000000000040101\n");
    assert_eq!(status(&f.report(), "gpu.bar1"), Status::Unknown);
}

// ---------------------------------------------------------------- RDMA stack

#[test]
fn inbox_rdma_without_peer_api_fails() {
    let f = Fx::healthy();
    f.kallsyms(&[]);
    let syms = nv_syms("nvidia");
    f.file(
        "/proc/kallsyms",
        syms + "0 T ib_register_device\t[ib_core]\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "rdma.peer_api"), Status::Fail);
    assert!(check(&r, "rdma.peer_api").summary.contains("inbox"));
    assert!(check(&r, "rdma.peer_api")
        .fix
        .as_ref()
        .unwrap()
        .contains("DOCA-OFED"));
}

#[test]
fn peer_api_in_ofed_symvers_but_not_loaded() {
    let f = Fx::healthy();
    let syms = nv_syms("nvidia");
    f.file("/proc/kallsyms", syms);
    f.file("/usr/src/ofa_kernel/default/Module.symvers", "0x12345678\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n");
    let r = f.report();
    assert_eq!(status(&r, "rdma.peer_api"), Status::Fail);
    assert!(check(&r, "rdma.peer_api")
        .summary
        .contains("/usr/src/ofa_kernel/default/Module.symvers"));
    assert!(check(&r, "rdma.peer_api")
        .fix
        .as_ref()
        .unwrap()
        .contains("openibd"));
}

#[test]
fn rdma_devices_none_or_down() {
    let f = Fx::healthy();
    f.file("/sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    let r = f.report();
    assert_eq!(status(&r, "rdma.devices"), Status::Warn);
    f.rm("/sys/class/infiniband");
    let r = f.report();
    assert_eq!(status(&r, "rdma.devices"), Status::Fail);
    // The ConnectX function is still found on the PCI bus, unbound.
    assert_eq!(
        check(&r, "rdma.devices").data["unbound_nics"][0],
        "0000:04:00.0"
    );
    assert!(check(&r, "rdma.devices")
        .fix
        .as_ref()
        .unwrap()
        .contains("mlx5_ib"));
}

#[test]
fn nvpeer_parameters_listed() {
    let r = Fx::healthy().report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(c.data["module_name"], "nvidia_peermem");
    assert_eq!(c.data["owner"], "nvpeer");
    assert_eq!(c.data["parameters"]["persistent_api_support"], "1");
    assert_eq!(c.data["version"], "0.1.0");
    assert_eq!(
        c.data["parameters_source"],
        "/sys/module/nvidia_peermem/parameters"
    );
    assert!(
        c.summary.contains("as nvidia_peermem (drop-in)"),
        "{}",
        c.summary
    );
    // Linux 7.2 Rust modules: no sysfs parameters, values from debugfs `config`.
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem/parameters");
    f.file(
        "/sys/kernel/debug/nvpeer/config",
        "version 0.1.0\npersistent_api_support 0\npeerdirect_support 0\nclient nv_mem invalidating, INVALIDATE_UNMAPS\nclient nv_mem_nc persistent\n",
    );
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(c.data["parameters"]["persistent_api_support"], "0");
    assert_eq!(
        c.data["parameters_source"],
        "/sys/kernel/debug/nvpeer/config"
    );
    assert_eq!(c.data["clients"][1], "nv_mem_nc persistent");
    assert!(
        c.summary.contains("persistent_api_support=0"),
        "{}",
        c.summary
    );
    // Neither readable (not root): loaded, parameters unknown.
    f.rm("/sys/kernel/debug/nvpeer");
    let r = f.report();
    assert_eq!(status(&r, "nvpeer.module"), Status::Pass);
    assert!(check(&r, "nvpeer.module").data["parameters_source"].is_null());
}

#[test]
fn nvpeer_under_its_own_name() {
    let f = Fx::healthy();
    f.nvpeer_as("nvpeer");
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(c.data["module_name"], "nvpeer");
    assert_eq!(c.data["parameters_source"], "/sys/module/nvpeer/parameters");
    assert!(c.summary.contains("side-by-side"), "{}", c.summary);
    assert!(c.details.iter().any(|d| d.contains("peer.consumers")));
}

#[test]
fn nvpeer_installed_but_not_loaded() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let dep = format!("/lib/modules/{REL}/modules.dep");
    // The drop-in built by DKMS for this kernel.
    f.file(
        &dep,
        "updates/dkms/nvidia-peermem.ko.zst: kernel/drivers/infiniband/core/ib_core.ko\n",
    );
    f.file(
        &format!("/var/lib/dkms/nvpeer/0.1.0/{REL}/x86_64/module/nvidia-peermem.ko.zst"),
        "x",
    );
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(
        c.summary,
        "installed (DKMS, as nvidia-peermem) but not loaded"
    );
    assert!(
        c.fix
            .as_ref()
            .unwrap()
            .starts_with("Run `modprobe nvidia-peermem`"),
        "{:?}",
        c.fix
    );
    assert_eq!(
        c.data["install"]["dropin"],
        "updates/dkms/nvidia-peermem.ko.zst"
    );
    // An nvidia-peermem.ko that DKMS did not build for nvpeer: could be NVIDIA's.
    f.rm("/var/lib/dkms");
    let r = f.report();
    assert!(check(&r, "nvpeer.module")
        .summary
        .contains("modinfo nvidia-peermem"));
    // Only the side-by-side name installed.
    f.file(
        &dep,
        "extra/nvpeer.ko: kernel/drivers/infiniband/core/ib_core.ko\n",
    );
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert!(
        c.summary.starts_with("installed as nvpeer only"),
        "{}",
        c.summary
    );
    assert!(c.fix.as_ref().unwrap().contains("modprobe nvidia-peermem"));
    // Nothing installed.
    f.rm(&dep);
    let r = f.report();
    assert_eq!(
        check(&r, "nvpeer.module").summary,
        "not installed for this kernel"
    );
    assert!(check(&r, "nvpeer.module")
        .fix
        .as_ref()
        .unwrap()
        .contains("make dkms-install"));
}

#[test]
fn nvidia_own_nvidia_peermem() {
    let f = Fx::healthy();
    f.nvidia_dropin();
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.data["module_name"], "nvidia_peermem");
    assert_eq!(c.data["owner"], "nvidia");
    assert_eq!(c.data["nvidia_peermem"]["version"], "580.95.05");
    assert!(
        c.summary.contains("NVIDIA's nvidia_peermem"),
        "{}",
        c.summary
    );
    assert!(c.fix.as_ref().unwrap().contains("docs/install.md"));
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.data["loaded"], serde_json::json!(["nvidia_peermem"]));
    assert!(c
        .fix
        .as_ref()
        .unwrap()
        .contains("modprobe -r nvidia_peermem"));
    assert!(c.fix.as_ref().unwrap().contains("modprobe nvidia-peermem"));
    // The libraries do see peer memory, through NVIDIA's module.
    let c = check(&r, "peer.consumers");
    assert_eq!(c.data["served_by"][0]["owner"], "nvidia");
    assert!(detected(c, "NCCL GIN/GDAKI"));
    assert_eq!(r.exit_code, 1);
    // debugfs nvpeer/ (with no module named nvpeer) says the drop-in is nvpeer's, whatever the version.
    f.file("/sys/kernel/debug/nvpeer/config", "version 0.1.0\n");
    let r = f.report();
    assert_eq!(check(&r, "nvpeer.module").data["owner"], "nvpeer");
    assert_eq!(status(&r, "peer.conflicts"), Status::Pass);
    // No version file at all: not identified, and treated as a rival.
    f.rm("/sys/kernel/debug/nvpeer")
        .rm("/sys/module/nvidia_peermem/version");
    let r = f.report();
    assert_eq!(check(&r, "nvpeer.module").data["owner"], "unknown");
    assert_eq!(status(&r, "peer.conflicts"), Status::Fail);
}

#[test]
fn peer_clients_listed_with_counters() {
    let f = Fx::healthy();
    f.old_ofed();
    let r = f.report();
    let c = check(&r, "peer.clients");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(c.data["clients"][0]["name"], "nv_mem");
    assert_eq!(c.data["clients"][0]["num_alloc_mrs"], "3");
    assert_eq!(c.data["sysfs"], true);
}

#[test]
fn peer_clients_on_a_core_without_memory_peers() {
    // DOCA-OFED on a kernel without the mm_kobj export: no list, the loaded module serves nv_mem.
    let f = Fx::healthy();
    let r = f.report();
    let c = check(&r, "peer.clients");
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert!(
        c.summary.contains("keeps no client list") && c.summary.contains("nvidia_peermem (nvpeer)"),
        "{}",
        c.summary
    );
    assert_eq!(c.data["sysfs"], false);
    assert_eq!(c.data["served_by"][0]["module"], "nvidia_peermem");
    assert_eq!(c.data["served_by"][0]["owner"], "nvpeer");
    f.file(
        "/sys/kernel/debug/nvpeer/config",
        "version 0.1.0\nclient nv_mem persistent\n",
    );
    assert!(check(&f.report(), "peer.clients")
        .details
        .iter()
        .any(|d| d.contains("nv_mem persistent")));
    // Nothing serves peer memory: still a failure.
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let c = check(&r, "peer.clients");
    assert_eq!(c.status, Status::Fail);
    assert!(c.fix.as_ref().unwrap().contains("modprobe nvidia-peermem"));
}

#[test]
fn peer_clients_missing_from_a_listing_core() {
    let f = Fx::healthy();
    f.old_ofed();
    f.rm("/sys/kernel/mm/memory_peers/nv_mem");
    let r = f.report();
    let c = check(&r, "peer.clients");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("no nv_mem client"), "{}", c.summary);
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    assert!(check(&r, "peer.clients")
        .fix
        .as_ref()
        .unwrap()
        .contains("modprobe nvidia-peermem"));
}

#[test]
fn dropin_is_not_a_conflict() {
    let r = Fx::healthy().report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert_eq!(c.data["loaded"], serde_json::json!([]));
    assert_eq!(c.data["nvidia_peermem"]["owner"], "nvpeer");
    assert!(c.summary.contains("nvidia_peermem is nvpeer"));
}

#[test]
fn own_name_beside_another_provider_conflicts() {
    let f = Fx::healthy();
    f.nvpeer_as("nvpeer");
    f.nvidia_dropin();
    let r = f.report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("beside nvpeer"), "{}", c.summary);
    assert!(
        c.fix
            .as_ref()
            .unwrap()
            .contains("modprobe -r nvidia_peermem nvpeer"),
        "{:?}",
        c.fix
    );
    // nvpeer's debugfs belongs to the module named nvpeer here: the version decides.
    f.file("/sys/kernel/debug/nvpeer/config", "version 0.1.0\n");
    assert_eq!(
        check(&f.report(), "peer.conflicts").data["nvidia_peermem"]["owner"],
        "nvidia"
    );
    // Mellanox's nv_peer_mem is a rival under any name.
    let f = Fx::healthy();
    f.module("nv_peer_mem");
    let r = f.report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.data["loaded"], serde_json::json!(["nv_peer_mem"]));
    assert!(c.fix.as_ref().unwrap().contains("modprobe.d/nvpeer.conf"));
    assert_eq!(r.exit_code, 1);
}

#[test]
fn modprobe_rules() {
    let f = Fx::healthy();
    f.rm("/etc/modprobe.d/nvpeer.conf");
    let r = f.report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.data["not_blocked"], serde_json::json!(["nv_peer_mem"]));
    assert!(!c.fix.as_ref().unwrap().contains("nvidia_peermem"));
    assert_eq!(r.exit_code, 0);
    // The dash spelling of the module name also counts.
    f.file(
        "/etc/modprobe.d/x.conf",
        "install nv-peer-mem /usr/bin/false\n",
    );
    assert_eq!(status(&f.report(), "peer.conflicts"), Status::Pass);
    // An old nvpeer.conf that blocks the drop-in name.
    f.file(
        "/etc/modprobe.d/x.conf",
        "install nvidia-peermem /bin/false\ninstall nv_peer_mem /bin/false\n",
    );
    let r = f.report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.data["dropin_blocked"], true);
    assert!(c.fix.as_ref().unwrap().contains("Remove"));
}

/// Whether `library` sees peer memory in a `peer.consumers` result.
fn detected(c: &crate::report::Check, library: &str) -> bool {
    lib(c, library)["detected"].as_bool().unwrap()
}

fn lib<'a>(c: &'a crate::report::Check, library: &str) -> &'a serde_json::Value {
    c.data["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["library"] == library)
        .unwrap_or_else(|| panic!("no row {library}"))
}

/// The libraries whose probe includes a /sys/module file, and those that read only memory_peers.
const MODULE_PROBING: [&str; 5] = [
    "NCCL",
    "NCCL GIN/GDAKI",
    "UCX ≥ 1.18",
    "UCC TL/MLX5 (mcast, alltoall)",
    "NVSHMEM",
];
const MEMORY_PEERS_ONLY: [&str; 4] = [
    "NCCL ≤ 2.22.3",
    "UCX < 1.18",
    "UCC mcast before #1102",
    "Open MPI btl_openib",
];

#[test]
fn consumers_on_doca_with_the_dropin() {
    let r = Fx::healthy().report();
    let c = check(&r, "peer.consumers");
    assert_eq!(c.status, Status::Warn, "{}", c.summary);
    for l in MODULE_PROBING {
        assert!(detected(c, l), "{l}");
        assert_eq!(
            lib(c, l)["via"],
            "/sys/module/nvidia_peermem/version",
            "{l}"
        );
    }
    for l in MEMORY_PEERS_ONLY {
        assert!(!detected(c, l), "{l}");
        assert_eq!(lib(c, l)["structural"], true, "{l}");
        assert!(
            lib(c, l)["why"]
                .as_str()
                .unwrap()
                .contains("no module name can fix that"),
            "{l}"
        );
    }
    assert_eq!(c.data["structural"], true);
    assert_eq!(c.data["memory_peers"], false);
    assert_eq!(c.data["fixable_blind"], serde_json::json!([]));
    assert!(c.summary.contains("structurally blind"), "{}", c.summary);
    assert!(c.fix.as_ref().unwrap().contains("UCX ≥ 1.18"));
    // Each row names the function it follows.
    assert!(lib(c, "NCCL GIN/GDAKI")["source"]
        .as_str()
        .unwrap()
        .contains("ncclIbPeerMemSupport"));
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn consumers_fail_when_nvpeer_keeps_its_own_name() {
    let f = Fx::healthy();
    f.nvpeer_as("nvpeer");
    let r = f.report();
    let c = check(&r, "peer.consumers");
    assert_eq!(c.status, Status::Fail, "{}", c.summary);
    for l in MODULE_PROBING {
        assert!(!detected(c, l), "{l}");
        assert_eq!(lib(c, l)["structural"], false, "{l}");
    }
    assert!(c.summary.contains("loaded as `nvpeer`"), "{}", c.summary);
    let fix = c.fix.as_ref().unwrap();
    assert!(
        fix.contains("install nvpeer as nvidia-peermem (DKMS does: docs/install.md)"),
        "{fix}"
    );
    assert!(fix.contains("modprobe nvidia-peermem"), "{fix}");
    assert_eq!(r.verdict, Verdict::NotReady);
}

#[test]
fn consumers_on_an_old_ofed_with_memory_peers() {
    let f = Fx::healthy();
    f.old_ofed();
    let r = f.report();
    let c = check(&r, "peer.consumers");
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert_eq!(c.data["structural"], false);
    assert_eq!(
        lib(c, "NCCL")["via"],
        "/sys/kernel/mm/memory_peers/nv_mem/version"
    );
    assert!(detected(c, "Open MPI btl_openib") && detected(c, "UCC mcast before #1102"));
    // There nvpeer under its own name is found through nv_mem, except by GDAKI.
    f.nvpeer_as("nvpeer");
    let r = f.report();
    let c = check(&r, "peer.consumers");
    assert!(detected(c, "NCCL") && detected(c, "UCX ≥ 1.18") && detected(c, "NVSHMEM"));
    assert!(!detected(c, "NCCL GIN/GDAKI"));
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.data["fixable_blind"],
        serde_json::json!(["NCCL GIN/GDAKI"])
    );
}

#[test]
fn consumers_with_nothing_loaded() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let c = check(&r, "peer.consumers");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.starts_with("no library"), "{}", c.summary);
    assert!(c.fix.as_ref().unwrap().contains("modprobe nvidia-peermem"));
    assert!(lib(c, "NCCL")["why"]
        .as_str()
        .unwrap()
        .contains("no peer-memory module is loaded"));
}

#[test]
fn dmabuf_verdicts() {
    let f = Fx::healthy();
    let mut p = dmabuf_probes();
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "rdma.dmabuf"), Status::Pass);
    assert!(check(&r, "rdma.dmabuf")
        .summary
        .contains("ahead of peer memory"));
    assert!(check(&r, "rdma.dmabuf")
        .fix
        .as_ref()
        .unwrap()
        .contains("NCCL_DMABUF_ENABLE=0"));
    p.verbs = VerbsProbe::Probed {
        results: vec![DmabufProbe {
            device: "mlx5_0".into(),
            errno: Some(95),
            verdict: "unsupported",
        }],
    };
    let r = f.report_with(p.clone());
    assert!(check(&r, "rdma.dmabuf")
        .summary
        .starts_with("not available"));
    assert_eq!(
        status(&r, "rdma.dmabuf"),
        Status::Fail,
        "no ✔ for a path that does not exist"
    );
    p.verbs = VerbsProbe::NoDevices;
    let r = f.report_with(p);
    assert_eq!(status(&r, "rdma.dmabuf"), Status::Skip);
    assert!(check(&r, "rdma.dmabuf")
        .summary
        .contains("no RDMA provider"));
    // Kernel without dma-buf import.
    let syms = nv_syms("nvidia");
    f.file(
        "/proc/kallsyms",
        syms + "0 T ib_register_peer_memory_client\t[ib_core]\n",
    );
    let r = f.report();
    assert_eq!(check(&r, "rdma.dmabuf").data["kernel"], false);
    assert_eq!(crate::probes::dmabuf_verdict(Some(93)), "unsupported");
    assert_eq!(crate::probes::dmabuf_verdict(Some(22)), "inconclusive");
}

// ---------------------------------------------------------------- PCIe platform

#[test]
fn two_level_switch_is_pxb() {
    let f = Fx::healthy();
    let h = "pci0000:00";
    f.bridge(h, &["0000:00:01.0", "0000:01:00.0", "0000:02:02.0"], None);
    f.bridge(
        h,
        &[
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:02.0",
            "0000:05:00.0",
        ],
        None,
    );
    f.bridge(
        h,
        &[
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:02.0",
            "0000:05:00.0",
            "0000:06:00.0",
        ],
        None,
    );
    f.nic(
        h,
        &[
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:02.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0",
        ],
        0,
        "mlx5_1",
    );
    let r = f.report();
    let pairs = check(&r, "pci.topology").data["pairs"]
        .as_array()
        .unwrap()
        .clone();
    let class = |nic: &str| pairs.iter().find(|p| p["nic"] == nic).unwrap()["class"].clone();
    assert_eq!(class("mlx5_0"), "PIX");
    assert_eq!(class("mlx5_1"), "PXB");
}

#[test]
fn different_root_ports_is_phb() {
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband/mlx5_0")
        .rm("/sys/bus/pci/devices/0000:04:00.0");
    f.bridge("pci0000:00", &["0000:00:02.0"], Some(0x001d));
    f.nic("pci0000:00", &["0000:00:02.0", "0000:08:00.0"], 0, "mlx5_2");
    let r = f.report();
    assert_eq!(check(&r, "pci.topology").data["pairs"][0]["class"], "PHB");
    assert_eq!(status(&r, "pci.topology"), Status::Warn);
    // Root-port ACS does not matter when the path crosses the host bridge anyway.
    assert_eq!(status(&r, "pci.acs"), Status::Pass);
}

#[test]
fn dual_socket_is_sys() {
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband/mlx5_0")
        .rm("/sys/bus/pci/devices/0000:04:00.0");
    // NIC on the second socket's host bridge, NUMA node 1.
    f.bridge("pci0000:80", &["0000:80:01.0"], Some(0));
    f.nic("pci0000:80", &["0000:80:01.0", "0000:81:00.0"], 1, "mlx5_3");
    let r = f.report();
    let c = check(&r, "pci.topology");
    assert_eq!(c.data["pairs"][0]["class"], "SYS");
    assert_eq!(c.status, Status::Warn);
    assert!(c.fix.as_ref().unwrap().contains("NCCL_NET_GDR_LEVEL"));
    assert_eq!(r.verdict, Verdict::Ready, "SYS is slow, not broken");
    // Same topology but both host bridges on one NUMA node → NODE.
    f.file(
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node",
        "0\n",
    );
    assert_eq!(
        check(&f.report(), "pci.topology").data["pairs"][0]["class"],
        "NODE"
    );
    // No common switch: ACS cannot redirect anything the host bridge would not see anyway.
    let r = f.report();
    assert_eq!(
        check(&r, "pci.acs").data["bridges"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert!(check(&r, "pci.acs").summary.contains("host bridge"));
}

#[test]
fn acs_enabled_switch_fails() {
    let f = Fx::healthy();
    // ReqRedir + CmpltRedir + SrcValid on the GPU's downstream port.
    f.file(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/config",
        config(0, Some(0x000d), 4096),
    );
    let r = f.report();
    let c = check(&r, "pci.acs");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("0000:02:00.0"));
    assert!(c
        .details
        .iter()
        .any(|d| d.contains("ReqRedir") && d.contains("CmpltRedir")));
    assert!(c.fix.as_ref().unwrap().contains("setpci"));
    assert_eq!(r.verdict, Verdict::NotReady);
    // The root port above the switch is not between the pair and is not reported.
    assert!(!c.data["bridges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["bridge"] == "0000:00:01.0"));
}

#[test]
fn acs_unreadable_without_root() {
    let f = Fx::healthy();
    for b in [
        "0000:00:01.0/0000:01:00.0",
        "0000:00:01.0/0000:01:00.0/0000:02:00.0",
        "0000:00:01.0/0000:01:00.0/0000:02:01.0",
    ] {
        f.file(
            &format!("/sys/devices/pci0000:00/{b}/config"),
            config(0, Some(0x1d), 64),
        );
    }
    let r = f.report();
    assert_eq!(status(&r, "pci.acs"), Status::Unknown);
    assert!(check(&r, "pci.acs").fix.as_ref().unwrap().contains("sudo"));
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "non-root runs must still give a verdict"
    );
}

#[test]
fn config_space_walk_survives_loops() {
    let mut c = config(0, None, 4096);
    // Extended capability pointing at itself, classic capability pointing at itself.
    let hdr: u32 = 0x0001 | (0x100 << 20);
    c[0x100..0x104].copy_from_slice(&hdr.to_le_bytes());
    c[0x41] = 0x40;
    c[0x40] = 0x05;
    let cs = crate::pci::ConfigSpace(c);
    assert_eq!(cs.acs_control(), Ok(None));
    assert_eq!(cs.devctl(), Ok(None));
    assert_eq!(
        crate::pci::ConfigSpace(vec![0; 4]).devctl(),
        Err(crate::pci::Unreadable)
    );
    assert_eq!(crate::pci::ConfigSpace(vec![0; 64]).devctl(), Ok(None));
}

#[test]
fn iommu_modes() {
    let f = Fx::healthy();
    assert_eq!(
        check(&f.report(), "platform.iommu").summary,
        "no IOMMU active"
    );
    f.file("/sys/class/iommu/dmar0/x", "");
    f.file("/sys/kernel/iommu_groups/7/type", "DMA-FQ\n");
    f.symlink(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/iommu_group",
        "/sys/kernel/iommu_groups/7",
    );
    f.file("/proc/cmdline", "ro intel_iommu=on\n");
    let r = f.report();
    let c = check(&r, "platform.iommu");
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("0000:03:00.0 (DMA-FQ)"));
    assert!(c.fix.as_ref().unwrap().contains("iommu=pt"));
    f.file("/sys/kernel/iommu_groups/7/type", "identity\n");
    assert_eq!(status(&f.report(), "platform.iommu"), Status::Pass);
}

#[test]
fn link_degradation() {
    let f = Fx::healthy();
    let gpu = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
    f.file(&format!("{gpu}/current_link_speed"), "2.5 GT/s PCIe\n");
    let r = f.report();
    assert_eq!(
        status(&r, "pci.link"),
        Status::Pass,
        "an idle GPU's low speed is not an error"
    );
    assert!(check(&r, "pci.link")
        .details
        .iter()
        .any(|d| d.contains("idle")));
    f.file(&format!("{gpu}/current_link_width"), "8\n");
    let r = f.report();
    assert_eq!(status(&r, "pci.link"), Status::Warn);
    assert!(check(&r, "pci.link").summary.contains("0000:03:00.0"));
}

#[test]
fn relaxed_ordering() {
    let r = Fx::healthy().report();
    assert_eq!(status(&r, "pci.relaxed_ordering"), Status::Pass);
    let f = Fx::healthy();
    let nic = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";
    f.file(&format!("{nic}/config"), config(0x2800, None, 4096));
    assert_eq!(status(&f.report(), "pci.relaxed_ordering"), Status::Warn);
    f.file(&format!("{nic}/config"), config(0x2810, None, 64));
    assert_eq!(status(&f.report(), "pci.relaxed_ordering"), Status::Unknown);
}

// ---------------------------------------------------------------- kernel build / signing

#[test]
fn kernel_without_rust_fails() {
    let f = Fx::healthy();
    f.file(
        &format!("/boot/config-{REL}"),
        "CONFIG_INFINIBAND=y\nCONFIG_INFINIBAND_USER_MEM=y\n# CONFIG_RUST is not set\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "kernel.rust"), Status::Fail);
    assert_eq!(r.exit_code, 1);
}

#[test]
fn rust_artifacts_missing_warns() {
    let f = Fx::healthy();
    f.rm(&format!("/lib/modules/{REL}/build/rust"));
    let r = f.report();
    let c = check(&r, "kernel.rust");
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("rust/libkernel.rmeta"));
    assert!(c.fix.as_ref().unwrap().contains("linux-lib-rust"));
}

#[test]
fn config_from_proc_config_gz_and_rustc_match() {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let f = Fx::healthy();
    f.rm(&format!("/boot/config-{REL}"));
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"CONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT=\"rustc 1.97.1 (8bab26f4f 2026-07-14)\"\nCONFIG_INFINIBAND=y\nCONFIG_INFINIBAND_USER_MEM=y\n")
        .unwrap();
    f.file("/proc/config.gz", gz.finish().unwrap());
    let mut p = Probes::none();
    p.rustc = Some("rustc 1.97.1 (8bab26f4f 2026-07-14)".into());
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "kernel.rust"), Status::Pass);
    assert_eq!(check(&r, "kernel.config").data["source"], "/proc/config.gz");
    p.rustc = Some("rustc 1.95.0 (59807616e 2026-04-14)".into());
    let r = f.report_with(p);
    assert_eq!(status(&r, "kernel.rust"), Status::Warn);
    assert!(check(&r, "kernel.rust")
        .fix
        .as_ref()
        .unwrap()
        .contains("E0514"));
}

#[test]
fn no_kernel_config_is_unknown() {
    let f = Fx::healthy();
    f.rm(&format!("/boot/config-{REL}"));
    let r = f.report();
    assert_eq!(status(&r, "kernel.rust"), Status::Unknown);
    assert_eq!(status(&r, "kernel.config"), Status::Unknown);
}

#[test]
fn kernel_without_user_mem_fails() {
    let f = Fx::healthy();
    f.file(
        &format!("/boot/config-{REL}"),
        "CONFIG_RUST=y\nCONFIG_INFINIBAND=y\n",
    );
    assert_eq!(status(&f.report(), "kernel.config"), Status::Fail);
    f.module("mlx_compat");
    assert_eq!(
        status(&f.report(), "kernel.config"),
        Status::Pass,
        "OFED brings its own RDMA core"
    );
}

#[test]
fn secure_boot_and_signing() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "kernel.signing"), Status::Pass);
    f.file(
        "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        [6u8, 0, 0, 0, 1],
    );
    f.file(
        "/sys/kernel/security/lockdown",
        "none [integrity] confidentiality\n",
    );
    f.file("/sys/module/nvidia_peermem/taint", "OE\n");
    let r = f.report();
    let c = check(&r, "kernel.signing");
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.data["secure_boot"], true);
    assert_eq!(c.data["lockdown"], "integrity");
    assert_eq!(c.data["nvpeer_taint"], "OE");
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    assert!(check(&r, "kernel.signing")
        .fix
        .as_ref()
        .unwrap()
        .contains("make sign"));
    f.file("/proc/sys/kernel/modules_disabled", "1\n");
    assert_eq!(status(&f.report(), "kernel.signing"), Status::Fail);
}

#[test]
fn bdf_shapes() {
    assert!(crate::pci::is_bdf("0000:3b:00.0"));
    assert!(!crate::pci::is_bdf("pci0000:00"));
    assert!(!crate::pci::is_bdf("0000:3b:00"));
    assert_eq!(
        crate::pci::acs_flags(0x000d),
        vec!["SrcValid", "ReqRedir", "CmpltRedir"]
    );
}

//! The RDMA stack: the peer-memory API, devices, nvpeer's module under either name, the registered
//! peer clients, rival providers, what each library detects, and the dma-buf path.

use super::*;

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
fn ubuntu_generic_kernel_has_no_inbox_peer_api() {
    let f = Fx::healthy();
    f.file("/etc/os-release", UBUNTU_2604);
    f.file("/proc/sys/kernel/osrelease", "7.0.0-14-generic\n");
    f.file(
        "/proc/kallsyms",
        nv_syms("nvidia") + "0 T ib_register_device\t[ib_core]\n",
    );
    let r = f.report();
    let c = check(&r, "rdma.peer_api");
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.summary.contains("Ubuntu's generic kernels from 6.8 on"),
        "{}",
        c.summary
    );
    let fix = c.fix.as_ref().unwrap();
    for want in [
        "doca-ofed-<version>-dkms",
        "linux-modules-doca-ofed-<version>-generic",
        "modprobe ib_uverbs",
        "dma-buf",
        "linux-nvidia",
    ] {
        assert!(fix.contains(want), "{want} not in {fix}");
    }
    assert_eq!(data(c)["ubuntu_generic_no_inbox_api"], true);
    assert!(r.render_table(false).starts_with(&format!(
        "nvpeer doctor (root {}, Ubuntu 26.04 LTS, 7.0.0-14-generic)",
        f.dir.path().display()
    )));
    // Ubuntu's linux-nvidia flavour keeps the inbox interface: the generic words.
    f.file("/proc/sys/kernel/osrelease", "6.8.0-1010-nvidia\n");
    let r = f.report();
    assert!(!check(&r, "rdma.peer_api").summary.contains("Ubuntu"));
}

#[test]
fn doca_exports_the_api_from_ib_uverbs() {
    let f = Fx::healthy();
    f.file(
        "/proc/kallsyms",
        nv_syms("nvidia")
            + "0 T ib_register_device\t[ib_core]\n0 T ib_register_peer_memory_client\t[ib_uverbs]\n0 T ib_umem_dmabuf_get\t[ib_core]\n",
    );
    let r = f.report();
    let c = check(&r, "rdma.peer_api");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(data(c)["owner"], "ib_uverbs");
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
        data(check(&r, "rdma.devices"))["unbound_nics"][0],
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
    assert_eq!(data(c)["module_name"], "nvidia_peermem");
    assert_eq!(data(c)["owner"], "nvpeer");
    assert_eq!(data(c)["parameters"]["persistent_api_support"], "1");
    assert_eq!(data(c)["version"], "0.1.0");
    assert_eq!(
        data(c)["parameters_source"],
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
    assert_eq!(data(c)["parameters"]["persistent_api_support"], "0");
    assert_eq!(
        data(c)["parameters_source"],
        "/sys/kernel/debug/nvpeer/config"
    );
    assert_eq!(data(c)["clients"][1], "nv_mem_nc persistent");
    assert!(
        c.summary.contains("persistent_api_support=0"),
        "{}",
        c.summary
    );
    // Neither readable (not root): loaded, parameters unknown.
    f.rm("/sys/kernel/debug/nvpeer");
    let r = f.report();
    assert_eq!(status(&r, "nvpeer.module"), Status::Pass);
    assert!(data(check(&r, "nvpeer.module"))["parameters_source"].is_null());
}

#[test]
fn nvpeer_under_its_own_name() {
    let f = Fx::healthy();
    f.nvpeer_as("nvpeer");
    let r = f.report();
    let c = check(&r, "nvpeer.module");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(data(c)["module_name"], "nvpeer");
    assert_eq!(
        data(c)["parameters_source"],
        "/sys/module/nvpeer/parameters"
    );
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
        data(c)["install"]["dropin"],
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
    assert_eq!(data(c)["module_name"], "nvidia_peermem");
    assert_eq!(data(c)["owner"], "nvidia");
    assert_eq!(data(c)["nvidia_peermem"]["version"], "580.95.05");
    assert!(
        c.summary.contains("NVIDIA's nvidia_peermem"),
        "{}",
        c.summary
    );
    assert!(c.fix.as_ref().unwrap().contains("docs/install.md"));
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(data(c)["loaded"], serde_json::json!(["nvidia_peermem"]));
    assert!(c
        .fix
        .as_ref()
        .unwrap()
        .contains("modprobe -r nvidia_peermem"));
    assert!(c.fix.as_ref().unwrap().contains("modprobe nvidia-peermem"));
    // The libraries do see peer memory, through NVIDIA's module.
    let c = check(&r, "peer.consumers");
    assert_eq!(data(c)["served_by"][0]["owner"], "nvidia");
    assert!(detected(c, "NCCL GIN/GDAKI"));
    assert_eq!(r.exit_code, 1);
    // debugfs nvpeer/ (with no module named nvpeer) says the drop-in is nvpeer's, whatever the version.
    f.file("/sys/kernel/debug/nvpeer/config", "version 0.1.0\n");
    let r = f.report();
    assert_eq!(data(check(&r, "nvpeer.module"))["owner"], "nvpeer");
    assert_eq!(status(&r, "peer.conflicts"), Status::Pass);
    // No version file at all: not identified, and treated as a rival.
    f.rm("/sys/kernel/debug/nvpeer")
        .rm("/sys/module/nvidia_peermem/version");
    let r = f.report();
    assert_eq!(data(check(&r, "nvpeer.module"))["owner"], "unknown");
    assert_eq!(status(&r, "peer.conflicts"), Status::Fail);
}

#[test]
fn peer_clients_listed_with_counters() {
    let f = Fx::healthy();
    f.old_ofed();
    let r = f.report();
    let c = check(&r, "peer.clients");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(data(c)["clients"][0]["name"], "nv_mem");
    assert_eq!(data(c)["clients"][0]["num_alloc_mrs"], "3");
    assert_eq!(data(c)["sysfs"], true);
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
    assert_eq!(data(c)["sysfs"], false);
    assert_eq!(data(c)["served_by"][0]["module"], "nvidia_peermem");
    assert_eq!(data(c)["served_by"][0]["owner"], "nvpeer");
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
    assert_eq!(data(c)["loaded"], serde_json::json!([]));
    assert_eq!(data(c)["nvidia_peermem"]["owner"], "nvpeer");
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
        data(check(&f.report(), "peer.conflicts"))["nvidia_peermem"]["owner"],
        "nvidia"
    );
    // Mellanox's nv_peer_mem is a rival under any name.
    let f = Fx::healthy();
    f.module("nv_peer_mem");
    let r = f.report();
    let c = check(&r, "peer.conflicts");
    assert_eq!(c.status, Status::Fail);
    assert_eq!(data(c)["loaded"], serde_json::json!(["nv_peer_mem"]));
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
    assert_eq!(data(c)["not_blocked"], serde_json::json!(["nv_peer_mem"]));
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
    assert_eq!(data(c)["dropin_blocked"], true);
    assert!(c.fix.as_ref().unwrap().contains("Remove"));
}

/// Whether `library` sees peer memory in a `peer.consumers` result.
fn detected(c: &crate::report::Check, library: &str) -> bool {
    lib(c, library)["detected"].as_bool().unwrap()
}

fn lib(c: &crate::report::Check, library: &str) -> serde_json::Value {
    data(c)["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["library"] == library)
        .unwrap_or_else(|| panic!("no row {library}"))
        .clone()
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
    assert_eq!(data(c)["structural"], true);
    assert_eq!(data(c)["memory_peers"], false);
    assert_eq!(data(c)["fixable_blind"], serde_json::json!([]));
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
    assert_eq!(data(c)["structural"], false);
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
        data(c)["fixable_blind"],
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
    assert_eq!(data(check(&r, "rdma.dmabuf"))["kernel"], false);
    assert_eq!(crate::probes::dmabuf_verdict(Some(93)), "unsupported");
    assert_eq!(crate::probes::dmabuf_verdict(Some(22)), "inconclusive");
}

/// An RDMA device `name` of PCI vendor `vendor` beside the healthy node's NIC (its own switch
/// port), with one ACTIVE port.
pub(super) fn vendor_nic(f: &Fx, name: &str, vendor: u32, bdf: &str) -> String {
    let dir = f.pci(
        "pci0000:00",
        &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0", bdf],
        vendor,
        0x020000,
        0,
        config(0x2810 | 0x10, None, 4096),
    );
    f.symlink(&format!("/sys/class/infiniband/{name}/device"), &dir);
    f.file(
        &format!("/sys/class/infiniband/{name}/ports/1/state"),
        "4: ACTIVE\n",
    );
    dir
}

#[test]
fn nic_paths_name_each_device_s_way_for_gpu_memory() {
    let f = Fx::healthy();
    let r = f.report();
    let c = check(&r, "rdma.nic_paths");
    assert_eq!(c.status, Status::Pass);
    assert!(!c.gate);
    assert_eq!(data(c)["devices"][0]["device"], "mlx5_0");
    assert_eq!(data(c)["devices"][0]["peer_memory"], true);
    assert_eq!(data(c)["devices"][0]["dmabuf"], true);
    // A Broadcom NIC and an unknown one beside it: named, not served by peer memory.
    vendor_nic(&f, "bnxt_re0", 0x14e4, "0000:05:00.0");
    vendor_nic(&f, "xyz0", 0x1234, "0000:06:00.0");
    let r = f.report();
    let c = check(&r, "rdma.nic_paths");
    assert_eq!(c.status, Status::Pass);
    assert!(
        c.summary.contains("bnxt_re0") && c.summary.contains("nvpeer does not serve them"),
        "{}",
        c.summary
    );
    let rows = data(c)["devices"].as_array().unwrap().clone();
    let row = |d: &str| rows.iter().find(|x| x["device"] == d).unwrap().clone();
    assert_eq!(row("bnxt_re0")["family"], "Broadcom NetXtreme (bnxt_re)");
    assert_eq!(row("bnxt_re0")["peer_memory"], false);
    assert_eq!(row("bnxt_re0")["dmabuf"], true);
    assert!(row("xyz0")["family"].is_null());
    assert!(
        c.details
            .iter()
            .any(|d| d.starts_with("xyz0: unknown driver family")),
        "{:?}",
        c.details
    );
}

#[test]
fn an_efa_device_s_own_p2p_path_is_read_from_its_sysfs() {
    let f = Fx::healthy();
    let dir = vendor_nic(&f, "efa_0", 0x1d0f, "0000:05:00.0");
    // EFA 2.6 and later: device/p2p names the provider; efa_nv_peermem loaded (open driver).
    f.file(&format!("{dir}/p2p"), "NVIDIA peermem\n");
    f.file("/sys/module/efa_nv_peermem/version", "1.2.3\n");
    let r = f.report();
    let c = check(&r, "rdma.nic_paths");
    assert_eq!(c.status, Status::Pass, "{:?}", c.details);
    let rows = data(c)["devices"].as_array().unwrap().clone();
    let efa = rows.iter().find(|x| x["device"] == "efa_0").unwrap();
    assert_eq!(efa["peer_memory"], false);
    assert_eq!(efa["own_p2p_ready"], true);
    assert_eq!(
        efa["evidence"],
        serde_json::json!(["device/p2p: NVIDIA peermem", "efa_nv_peermem 1.2.3 loaded"])
    );
    assert!(c.summary.contains("efa_0"), "{}", c.summary);
    // No provider: a warning naming efa_nv_peermem and dma-buf; nothing gated.
    f.file(&format!("{dir}/p2p"), "\n");
    let r = f.report();
    let c = check(&r, "rdma.nic_paths");
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.summary
            .contains("efa_0: the EFA driver reports no NVIDIA P2P provider"),
        "{}",
        c.summary
    );
    let fix = c.fix.as_deref().unwrap();
    assert!(
        fix.contains("modprobe efa_nv_peermem") && fix.contains("dma-buf"),
        "{fix}"
    );
    // (the warning gates nothing: the node's verdict is the healthy node's)
    assert_eq!(r.verdict, Fx::healthy().report().verdict);
    // A ConnectX-8 Data Direct function beside the NIC: listed, with what NCCL does with it.
    let dd = f.pci(
        "pci0000:00",
        &[
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:01.0",
            "0000:07:00.0",
        ],
        0x15b3,
        0x020000,
        0,
        config(0x2810 | 0x10, None, 4096),
    );
    f.file(&format!("{dd}/device"), "0x2100\n");
    let r = f.report();
    let c = check(&r, "rdma.nic_paths");
    assert_eq!(data(c)["data_direct"], serde_json::json!(["0000:07:00.0"]));
    assert!(
        c.details.iter().any(|d| d
            .starts_with("Data Direct DMA functions (ConnectX-8, 15b3:2100): 0000:07:00.0")
            && d.contains("never peer memory")),
        "{:?}",
        c.details
    );
    // Before EFA 2.6: device/gdr.
    f.rm(&format!("{dir}/p2p"));
    f.file(&format!("{dir}/gdr"), "1\n");
    let r = f.report();
    assert_eq!(check(&r, "rdma.nic_paths").status, Status::Pass);
}

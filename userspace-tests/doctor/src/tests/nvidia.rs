//! The NVIDIA driver checks: driver, flavour, nouveau, the persistent P2P API, the CUDA probe, BAR1.

use super::*;

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
    assert_eq!(data(check(&r, "nvidia.driver"))["version"], "580.95.05");
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
    assert_eq!(
        data(check(&r, "nvidia.driver"))["p2p_provider"],
        "nvp2p_emu"
    );
    assert_eq!(status(&r, "nvidia.flavour"), Status::Skip);
    assert_eq!(data(check(&r, "nvidia.p2p_symbols"))["owner"], "nvp2p_emu");
    assert_eq!(data(check(&r, "rdma.peer_api"))["owner"], "peer_mem_emu");
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
        data(check(&r, "gpu.bar1"))["gpus"][0]["bar1_bytes"],
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
        data(check(&f.report(), "gpu.bar1"))["gpus"][0]["bar1_bytes"],
        256u64 << 30
    );
    // Only BAR0 and an I/O BAR: no BAR1.
    f.file(&format!("{gpu}/resource"), "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n0x0000000000001000 0x000000000000107f 0x0000000000040101\n");
    assert_eq!(status(&f.report(), "gpu.bar1"), Status::Unknown);
}

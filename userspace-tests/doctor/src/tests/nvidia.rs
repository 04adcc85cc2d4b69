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

/// A node whose nvidia_p2p_* API comes from an emulator, as the bench's: nvidia.ko not loaded.
fn emulator_node() -> Fx {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia").rm("/proc/driver/nvidia");
    let syms = nv_syms("nvp2p_emu");
    f.file(
        "/proc/kallsyms",
        syms + "0000000000000000 T ib_register_peer_memory_client\t[peer_mem_emu]\n",
    );
    f
}

/// Probes whose environment holds `var=value` (as the live probe collects it).
fn probes_with_env(var: &str, value: &str) -> Probes {
    let mut p = Probes::none();
    p.env.push((var.to_string(), value.to_string()));
    p
}

#[test]
fn p2p_api_from_another_module_is_a_failure() {
    let r = emulator_node().report();
    let c = check(&r, "nvidia.driver");
    assert_eq!(c.status, Status::Fail);
    assert!(c.gate);
    assert_eq!(
        c.summary,
        "nvidia.ko not loaded; the nvidia_p2p_* API comes from module `nvp2p_emu`, not NVIDIA's driver"
    );
    assert!(c.fix.as_ref().unwrap().contains("Unload `nvp2p_emu`"));
    assert_eq!(data(c)["p2p_provider"], "nvp2p_emu");
    assert_eq!(data(c)["loaded"], false);
    // The symbols check says the same, as following from the driver's.
    let s = check(&r, "nvidia.p2p_symbols");
    assert_eq!(s.status, Status::Fail);
    assert_eq!(
        s.summary,
        "exported by `nvp2p_emu`, not by NVIDIA's nvidia.ko"
    );
    assert_eq!(s.because_of, Some("nvidia.driver"));
    assert_eq!(data(s)["owner"], "nvp2p_emu");
    assert_eq!(status(&r, "nvidia.flavour"), Status::Skip);
    assert_eq!(data(check(&r, "rdma.peer_api"))["owner"], "peer_mem_emu");
    // Not ready (the report is about the nvpeer path), the driver its root cause, as dma-buf's.
    assert_eq!(r.exit_code, 1);
    for p in [crate::paths::Path::Nvpeer, crate::paths::Path::Dmabuf] {
        assert_eq!(r.path(p).root_cause, Some("nvidia.driver"), "{p:?}");
    }
}

#[test]
fn p2p_api_from_another_module_fails_beside_nvidia_too() {
    // (nvidia.ko loaded, yet the symbols' owner is another module)
    let f = Fx::healthy();
    f.file(
        "/proc/kallsyms",
        nv_syms("lookalike") + "0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "nvidia.driver"), Status::Pass);
    let s = check(&r, "nvidia.p2p_symbols");
    assert_eq!(s.status, Status::Fail);
    assert_eq!(
        s.summary,
        "exported by `lookalike`, not by NVIDIA's nvidia.ko"
    );
    assert_eq!(r.exit_code, 1);
}

/// The bench's declaration of its provider: a warning in bench builds, nothing in the product.
#[test]
fn bench_provider_declared() {
    let var = crate::probes::BENCH_P2P_PROVIDER;
    let r = emulator_node().report_with(probes_with_env(var, "nvp2p_emu"));
    let c = check(&r, "nvidia.driver");
    if cfg!(feature = "bench") {
        assert_eq!(c.status, Status::Warn);
        assert!(!c.gate);
        assert!(
            c.summary
                .starts_with("bench node (NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu)"),
            "{}",
            c.summary
        );
        assert_eq!(data(c)["p2p_provider"], "nvp2p_emu");
        assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Pass);
    } else {
        assert_eq!(c.status, Status::Fail);
        assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Fail);
    }
    // Another module than the one declared fails in every build.
    let r = emulator_node().report_with(probes_with_env(var, "some_other_emu"));
    assert_eq!(status(&r, "nvidia.driver"), Status::Fail);
    assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Fail);
}

/// The product (no `bench` feature) takes no declaration from the environment at all.
#[cfg(not(feature = "bench"))]
#[test]
fn product_ignores_bench_declaration() {
    let r = emulator_node().report_with(probes_with_env(
        crate::probes::BENCH_P2P_PROVIDER,
        "nvp2p_emu",
    ));
    assert_eq!(status(&r, "nvidia.driver"), Status::Fail);
    assert_eq!(r.exit_code, 1);
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

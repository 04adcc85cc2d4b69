//! `peer.gpu_initiated` (GIN, IBGDA, `rc_gda`) and `gpu.mlopart` on fixture nodes: GDAKI ready,
//! the driver option missing and set, the GDAKI trap of a peer-memory module under another name,
//! a node without mlx5, GDRCopy's two backends, MLOPart partitions.

use super::paths::{env, no_dmabuf_probes};
use super::*;

/// The row of `backend` (a prefix of its name) in `peer.gpu_initiated`'s data.
fn backend(r: &Report, prefix: &str) -> serde_json::Value {
    data(check(r, "peer.gpu_initiated"))["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .find(|b| b["backend"].as_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no backend {prefix}"))
        .clone()
}

const PARAMS_UNSET: &str =
    "EnableStreamMemOPs: 0\nRegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\n";
const PARAMS_SET: &str =
    "EnableStreamMemOPs: 0\nRegistryDwords: \"PeerMappingOverride=1;\"\nRegistryDwordsPerDevice: \"\"\n";

#[test]
fn gdaki_is_ready_on_the_healthy_node_with_cpu_doorbells_where_the_option_is_unset() {
    let f = Fx::healthy();
    f.file("/proc/driver/nvidia/params", PARAMS_UNSET);
    let r = f.report();
    let c = check(&r, "peer.gpu_initiated");
    assert!(!c.gate);
    assert_eq!(c.status, Status::Pass, "{:?}", c.details);
    assert!(
        c.summary.starts_with("ready: NCCL GIN, GDAKI backend"),
        "{}",
        c.summary
    );
    let gdaki = backend(&r, "NCCL GIN, GDAKI");
    assert_eq!(gdaki["ready"], true);
    assert_eq!(
        gdaki["memory"],
        "peer memory (/sys/module/nvidia_peermem/version)"
    );
    assert!(
        gdaki["doorbell"]
            .as_str()
            .unwrap()
            .contains("otherwise CPU"),
        "{gdaki}"
    );
    // UCX's rc_gda has no CPU fallback: without the option it is not ready.
    let ucx = backend(&r, "UCX rc_gda");
    assert_eq!(ucx["ready"], false);
    assert!(
        ucx["missing"][0]
            .as_str()
            .unwrap()
            .contains("PeerMappingOverride=1"),
        "{ucx}"
    );
    let fix = c.fix.as_deref().unwrap();
    assert!(
        fix.contains("options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"")
            && fix.contains("driver.kernelModuleConfig.name"),
        "{fix}"
    );
    // A params file without the registry lines is not read either.
    f.file("/proc/driver/nvidia/params", "EnableStreamMemOPs: 0\n");
    let r = f.report();
    assert!(backend(&r, "UCX rc_gda")["ready"].is_null());
    // Not read: undetermined, never "not ready"; selected, the summary says so.
    f.rm("/proc/driver/nvidia/params");
    let mut p = Probes::none();
    p.env = env(&[("UCX_TLS", "rc_gda")]);
    let c = f.report_with(p);
    assert!(
        check(&c, "peer.gpu_initiated")
            .summary
            .ends_with("; selected, undetermined: UCX rc_gda (≥ 1.20)"),
        "{}",
        check(&c, "peer.gpu_initiated").summary
    );
    let r = f.report();
    assert!(backend(&r, "UCX rc_gda")["ready"].is_null());
    assert_eq!(
        data(check(&r, "peer.gpu_initiated"))["peer_mapping_override"]["read"],
        false
    );
}

#[test]
fn a_selected_backend_the_option_blocks_is_a_warning_and_the_option_clears_it() {
    let f = Fx::healthy();
    f.file("/proc/driver/nvidia/params", PARAMS_UNSET);
    let mut p = Probes::none();
    p.env = env(&[("UCX_TLS", "rc_gda,cuda_copy")]);
    let r = f.report_with(p.clone());
    let c = check(&r, "peer.gpu_initiated");
    assert_eq!(c.status, Status::Warn);
    assert_eq!(c.summary, "selected but not ready: UCX rc_gda (≥ 1.20)");
    assert_eq!(
        backend(&r, "UCX rc_gda")["requested"],
        "UCX_TLS=rc_gda,cuda_copy"
    );
    // The warning gates nothing.
    assert_eq!(r.verdict, Fx::healthy().report().verdict);
    f.file("/proc/driver/nvidia/params", PARAMS_SET);
    let r = f.report_with(p);
    let c = check(&r, "peer.gpu_initiated");
    assert_eq!(c.status, Status::Pass, "{:?}", c.details);
    assert!(c.fix.is_none(), "{:?}", c.fix);
    for b in ["NCCL GIN, GDAKI", "NVSHMEM IBGDA, GPU", "UCX rc_gda"] {
        assert_eq!(backend(&r, b)["ready"], true, "{b}");
        assert_eq!(backend(&r, b)["doorbell"], "GPU", "{b}");
    }
    // Set for another GPU only (RegistryDwordsPerDevice): not this node's GPU.
    f.file(
        "/proc/driver/nvidia/params",
        "RegistryDwords: \"\"\nRegistryDwordsPerDevice: \"pci=0000:41:00.0;PeerMappingOverride=1\"\n",
    );
    let r = f.report();
    let c = check(&r, "peer.gpu_initiated");
    assert_eq!(backend(&r, "UCX rc_gda")["ready"], false);
    assert!(
        c.details
            .iter()
            .any(|d| d
                == "PeerMappingOverride: not set (RegistryDwords in /proc/driver/nvidia/params)"),
        "{:?}",
        c.details
    );
}

#[test]
fn gdaki_does_not_count_peer_memory_under_another_name() {
    // nvpeer under its own name: nv_mem is served, /sys/module/nvidia_peermem is absent.
    let f = Fx::healthy();
    f.nvpeer_as("nvpeer").old_ofed();
    let r = f.report_with(no_dmabuf_probes());
    let c = check(&r, "peer.gpu_initiated");
    let gdaki = backend(&r, "NCCL GIN, GDAKI");
    assert_eq!(gdaki["ready"], false);
    assert!(gdaki["memory"].is_null());
    // NCCL's proxy backend and NVSHMEM take nv_mem.
    assert_eq!(
        backend(&r, "NCCL GIN, proxy")["memory"],
        "peer memory (/sys/kernel/mm/memory_peers/nv_mem/version)"
    );
    assert_eq!(backend(&r, "NVSHMEM IBGDA, CPU")["ready"], true);
    assert_eq!(c.status, Status::Warn, "{}", c.summary);
    assert!(
        c.fix
            .as_deref()
            .unwrap()
            .contains("only from /sys/module/nvidia_peermem"),
        "{:?}",
        c.fix
    );
    // Without live probes dma-buf is undetermined: so is GDAKI, never "not ready".
    let r = f.report();
    assert!(backend(&r, "NCCL GIN, GDAKI")["ready"].is_null());
    assert_eq!(
        backend(&r, "NCCL GIN, GDAKI")["missing"],
        serde_json::json!([])
    );
    // dma-buf working instead: GDAKI registers through it.
    let r = f.report_with(dmabuf_probes());
    assert_eq!(backend(&r, "NCCL GIN, GDAKI")["memory"], "dma-buf");
    assert_eq!(backend(&r, "NCCL GIN, GDAKI")["ready"], true);
}

#[test]
fn without_an_mlx5_device_only_nccl_s_proxy_backend_remains() {
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband/mlx5_0");
    super::rdma::vendor_nic(&f, "bnxt_re0", 0x14e4, "0000:05:00.0");
    let r = f.report();
    let c = check(&r, "peer.gpu_initiated");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(
        c.summary,
        "no mlx5 device: GDAKI, IBGDA and rc_gda need one; NCCL's proxy backend: ready"
    );
    assert_eq!(backend(&r, "NCCL GIN, proxy")["ready"], true);
    assert!(backend(&r, "NCCL GIN, GDAKI")["missing"][0]
        .as_str()
        .unwrap()
        .contains("an mlx5 device"));
    // No RDMA device at all: skipped.
    f.rm("/sys/class/infiniband");
    assert_eq!(
        check(&f.report(), "peer.gpu_initiated").status,
        Status::Skip
    );
}

#[test]
fn gdrcopy_s_module_and_its_dma_buf_backend_are_told_apart() {
    let f = Fx::healthy();
    f.file("/usr/lib/x86_64-linux-gnu/libgdrapi.so.2.6", "")
        .file("/usr/lib/x86_64-linux-gnu/libgdrapi.so.2.4", "");
    let mut p = dmabuf_probes();
    let r = f.report_with(p.clone());
    let g = &data(check(&r, "peer.gpu_initiated"))["gdrcopy"];
    assert_eq!(g["version"], "2.6");
    assert_eq!(g["library"], "/usr/lib/x86_64-linux-gnu/libgdrapi.so.2.6");
    assert_eq!(g["gdrdrv"], serde_json::Value::Null);
    // CUDA 13.0's driver: the dma-buf backend needs 13.3.
    assert_eq!(g["dmabuf_backend"], false);
    p.cuda = CudaProbe::Ok {
        driver_api: Some(13030),
        gpus: vec![gpu_ok("0000:03:00.0")],
    };
    let r = f.report_with(p);
    assert_eq!(
        data(check(&r, "peer.gpu_initiated"))["gdrcopy"]["dmabuf_backend"],
        true
    );
    f.file("/sys/module/gdrdrv/version", "2.5\n")
        .file("/dev/gdrdrv", "");
    let r = f.report();
    let c = check(&r, "peer.gpu_initiated");
    assert!(
        c.details
            .iter()
            .any(|d| d.starts_with("GDRCopy: gdrdrv 2.5, /dev/gdrdrv present")),
        "{:?}",
        c.details
    );
}

#[test]
fn mlopart_devices_lose_gdr_in_nccl_unless_its_setting_keeps_it() {
    let f = Fx::healthy();
    assert_eq!(check(&f.report(), "gpu.mlopart").status, Status::Skip);
    let mut p = dmabuf_probes();
    let r = f.report_with(p.clone());
    assert_eq!(check(&r, "gpu.mlopart").status, Status::Pass);
    let mut part = gpu_ok("0000:03:00.0");
    part.name = "NVIDIA GB200 MLOPart 1".into();
    p.cuda = CudaProbe::Ok {
        driver_api: Some(13000),
        gpus: vec![part],
    };
    let r = f.report_with(p.clone());
    let c = check(&r, "gpu.mlopart");
    assert_eq!(c.status, Status::Warn);
    assert!(!c.gate);
    assert_eq!(
        data(c)["partitions"],
        serde_json::json!(["NVIDIA GB200 MLOPart 1 (0000:03:00.0, CUDA 0)"])
    );
    assert!(c.fix.as_deref().unwrap().contains("NCCL_NET_GDR_MLOPART=1"));
    p.env = env(&[("NCCL_NET_GDR_MLOPART", "1")]);
    let r = f.report_with(p);
    let c = check(&r, "gpu.mlopart");
    assert_eq!(c.status, Status::Pass);
    assert_eq!(data(c)["setting"], "1");
}

//! The PCIe platform: GPU-NIC topology (PXB, PHB, SYS, C2C and the dma-buf mapping), ACS, the config-space walk, IOMMU modes, link
//! degradation, relaxed ordering, BDF shapes.

use super::*;

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
    let pairs = data(check(&r, "pci.topology"))["pairs"]
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
    assert_eq!(data(check(&r, "pci.topology"))["pairs"][0]["class"], "PHB");
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
    assert_eq!(data(c)["pairs"][0]["class"], "SYS");
    assert_eq!(c.status, Status::Warn);
    assert!(c.fix.as_ref().unwrap().contains("NCCL_NET_GDR_LEVEL"));
    assert_eq!(r.verdict, Verdict::Ready, "SYS is slow, not broken");
    // Same topology but both host bridges on one NUMA node → NODE.
    f.file(
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node",
        "0\n",
    );
    assert_eq!(
        data(check(&f.report(), "pci.topology"))["pairs"][0]["class"],
        "NODE"
    );
    // No common switch: ACS cannot redirect anything the host bridge would not see anyway.
    let r = f.report();
    assert_eq!(
        data(check(&r, "pci.acs"))["bridges"]
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
    assert!(!data(c)["bridges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["bridge"] == "0000:00:01.0"));
}

#[test]
fn acs_unreadable_without_root() {
    let f = Fx::healthy();
    f.bridges_unreadable();
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

/// A Grace superchip's GPU alone below its own root port on host bridge `host` (how a GH200/GB200
/// GPU shows on PCIe), with `device` as its PCI device id when given.
fn grace_gpu(f: &Fx, host: &str, rp: &str, bdf: &str, numa: i32, device: Option<u32>) -> String {
    f.bridge(host, &[rp], None);
    let dir = f.gpu(host, &[rp, bdf], numa, 256 << 30);
    if let Some(d) = device {
        f.file(&format!("{dir}/device"), format!("{d:#06x}\n"));
    }
    dir
}

/// Healthy's GPU and NIC gone: a GH200-like GPU on host bridge 0009 (NUMA 0), the NIC `mlx5_2` on
/// its own root port of host bridge 0000 (NUMA `nic_numa`).
fn gh200(device: Option<u32>, nic_numa: i32) -> Fx {
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband/mlx5_0")
        .rm("/sys/bus/pci/devices/0000:04:00.0")
        .rm("/sys/bus/pci/devices/0000:03:00.0");
    grace_gpu(&f, "pci0009:00", "0009:00:00.0", "0009:01:00.0", 0, device);
    f.bridge("pci0000:00", &["0000:00:02.0"], None);
    f.nic(
        "pci0000:00",
        &["0000:00:02.0", "0000:08:00.0"],
        nic_numa,
        "mlx5_2",
    );
    f
}

#[test]
fn pcie_only_node_takes_the_default_mapping() {
    let r = Fx::healthy().report();
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["c2c"], false);
    assert_eq!(data(c)["dmabuf_mapping"], "default");
    assert_eq!(data(c)["pairs"][0]["dmabuf_mapping"], "default");
    assert_eq!(data(c)["gpus"][0]["coherent"], false);
    assert_eq!(data(c)["gpus"][0]["decided_by"], "sysfs");
    assert!(c
        .details
        .iter()
        .any(|d| d.contains("no GPU is coherently attached")));
    // An H200 (0x2335) is not a superchip: its id alone makes nothing coherent.
    let f = Fx::healthy();
    f.file(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/device",
        "0x2335\n",
    );
    assert_eq!(data(check(&f.report(), "pci.topology"))["c2c"], false);
}

#[test]
fn grace_hopper_nic_through_the_cpu_is_c2c() {
    // Known by its device id (GH200 120GB) alone.
    let r = gh200(Some(0x2342), 0).report();
    let c = check(&r, "pci.topology");
    let p = &data(c)["pairs"][0];
    assert_eq!(p["class"], "C2C");
    assert_eq!(p["pcie_class"], "NODE");
    assert_eq!(p["dmabuf_mapping"], "default");
    assert_eq!(data(c)["best"][0]["class"], "C2C");
    assert_eq!(data(c)["c2c"], true);
    assert_eq!(data(c)["dmabuf_mapping"], "default");
    assert_eq!(data(c)["gpus"][0]["evidence"][0]["source"], "device_id");
    assert_eq!(data(c)["gpus"][0]["evidence"][0]["model"], "GH200 120GB");
    // Information, not a fault: NCCL's default GDR level on C2C nodes is P2C.
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert!(c.summary.contains("C2C node (0009:01:00.0"));
    assert!(c.summary.contains("default mapping"));
    assert!(c.fix.is_none());
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn driver_numa_status_marks_a_coherent_gpu() {
    // No superchip id (a later SKU), but the driver runs its memory as NUMA node 4.
    let f = gh200(None, 0);
    f.file(
        "/proc/driver/nvidia/gpus/0009:01:00.0/numa_status",
        "Node:      4\nStatus:    online\nAddress:   400000000000\nSize:      1780000000\n",
    );
    let r = f.report();
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["pairs"][0]["class"], "C2C");
    let e = &data(c)["gpus"][0]["evidence"][0];
    assert_eq!(e["source"], "numa_status");
    assert_eq!(e["node"], 4);
    assert_eq!(e["status"], "online");
    assert!(c
        .details
        .iter()
        .any(|d| d.contains("driver NUMA memory node 4 (online)")));
    // Without it the same tree is an ordinary PCIe GPU on another host bridge: NODE, a warning.
    let r = gh200(None, 0).report();
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["pairs"][0]["class"], "NODE");
    assert_eq!(c.status, Status::Warn);
}

#[test]
fn grace_blackwell_nic_under_the_gpu_switch_needs_the_pcie_mapping() {
    // Healthy's GPU and NIC share a switch; a GB200 id makes the GPU coherent. A second NIC hangs
    // off the CPU (another host bridge, same NUMA node): reached over C2C.
    let f = Fx::healthy();
    f.file(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/device",
        "0x2941\n",
    );
    f.bridge("pci0008:00", &["0008:00:00.0"], None);
    f.nic("pci0008:00", &["0008:00:00.0", "0008:01:00.0"], 0, "mlx5_9");
    let r = f.report();
    let c = check(&r, "pci.topology");
    let pair = |nic: &str| {
        data(c)["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["nic"] == nic)
            .unwrap()
            .clone()
    };
    assert_eq!(pair("mlx5_0")["class"], "PIX");
    assert_eq!(pair("mlx5_0")["dmabuf_mapping"], "pcie");
    assert_eq!(pair("mlx5_9")["class"], "C2C");
    assert_eq!(pair("mlx5_9")["dmabuf_mapping"], "default");
    assert_eq!(data(c)["best"][0]["nics"][0], "mlx5_0");
    assert_eq!(data(c)["best"][0]["dmabuf_mapping"], "pcie");
    assert_eq!(data(c)["dmabuf_mapping"], "pcie");
    // The user must act: a warning that names the flag, for whom, and what stays default.
    assert_eq!(c.status, Status::Warn);
    assert!(c
        .summary
        .contains("PCIe mapping for GPU 0000:03:00.0 on mlx5_0"));
    let fix = c.fix.as_ref().unwrap();
    assert!(fix.contains("CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE"));
    assert!(fix.contains("keep the default (flags 0) for GPU 0000:03:00.0 on mlx5_9"));
    assert_eq!(
        r.verdict,
        Verdict::Ready,
        "a mapping to choose is not a failure"
    );
}

#[test]
fn a_mixed_node_says_which_gpus_go_through_the_cpu() {
    // Healthy's PCIe GPU and NIC under one switch, beside a GH200 (known by its id) whose closest
    // NIC hangs off the CPU: the summary must not say that every GPU goes through its CPU.
    let f = Fx::healthy();
    grace_gpu(
        &f,
        "pci0009:00",
        "0009:00:00.0",
        "0009:01:00.0",
        0,
        Some(0x2342),
    );
    f.bridge("pci0008:00", &["0008:00:00.0"], None);
    f.nic("pci0008:00", &["0008:00:00.0", "0008:01:00.0"], 0, "mlx5_9");
    let r = f.report();
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["c2c"], true);
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert!(
        c.summary
            .contains("C2C node (0009:01:00.0 coherently attached)")
            && c.summary.contains("the 1 other GPU(s) within PXB")
            && !c.summary.contains("every GPU"),
        "{}",
        c.summary
    );
}

#[test]
fn c2c_gpu_and_nic_on_another_socket_is_sys() {
    let r = gh200(Some(0x2348), 1).report();
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["pairs"][0]["class"], "SYS");
    assert_eq!(data(c)["pairs"][0]["dmabuf_mapping"], "default");
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("beyond PXB/C2C"));
    assert!(c.details.iter().any(|d| d.contains("libfabric#12864")));
}

#[test]
fn nvml_decides_over_sysfs() {
    use crate::nvml::NvmlC2c;
    let c2c = |links: Result<u32, String>, active: Option<bool>| {
        let mut p = Probes::none();
        p.c2c = vec![NvmlC2c {
            bdf: "0009:01:00.0".into(),
            links,
            link0_active: active,
        }];
        p
    };
    // A superchip id, but NVML reports no C2C link: NCCL would not see C2C, nor does the doctor.
    let f = gh200(Some(0x2342), 0);
    let r = f.report_with(c2c(Ok(0), None));
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["gpus"][0]["coherent"], false);
    assert_eq!(data(c)["gpus"][0]["decided_by"], "nvml");
    assert_eq!(data(c)["gpus"][0]["nvml"], "no C2C links");
    assert_eq!(data(c)["pairs"][0]["class"], "NODE");
    let r = f.report_with(c2c(Ok(2), Some(false)));
    assert_eq!(
        data(check(&r, "pci.topology"))["gpus"][0]["coherent"],
        false
    );
    // NVML without the fields (older driver): sysfs decides.
    let r = f.report_with(c2c(Err("not supported".into()), None));
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["gpus"][0]["coherent"], true);
    assert_eq!(data(c)["gpus"][0]["decided_by"], "sysfs");
    // NVML's active link is enough without any sysfs fact.
    let r = gh200(None, 0).report_with(c2c(Ok(2), Some(true)));
    let c = check(&r, "pci.topology");
    assert_eq!(data(c)["gpus"][0]["decided_by"], "nvml");
    assert_eq!(data(c)["gpus"][0]["evidence"][0]["source"], "nvml");
    assert_eq!(data(c)["gpus"][0]["evidence"][0]["links"], 2);
    assert_eq!(data(c)["pairs"][0]["class"], "C2C");
}

#[test]
fn no_nic_still_says_how_the_gpu_is_attached() {
    let f = gh200(Some(0x2941), 0);
    f.rm("/sys/class/infiniband/mlx5_2")
        .rm("/sys/bus/pci/devices/0000:08:00.0");
    let r = f.report();
    let c = check(&r, "pci.topology");
    assert_eq!(c.status, Status::Skip);
    assert!(c.summary.starts_with("no PCI RDMA NIC"));
    assert!(c
        .summary
        .contains("coherently attached (C2C): 0009:01:00.0"));
    assert_eq!(data(c)["c2c"], true);
    assert_eq!(data(c)["pairs"].as_array().unwrap().len(), 0);
    assert_eq!(data(c)["gpus"][0]["evidence"][0]["model"], "GB200");
    // A PCIe GPU without a NIC: skipped, nothing coherent.
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband/mlx5_0")
        .rm("/sys/bus/pci/devices/0000:04:00.0");
    let c = f.report();
    let c = check(&c, "pci.topology");
    assert_eq!(c.status, Status::Skip);
    assert_eq!(data(c)["c2c"], false);
    assert!(!c.summary.contains("C2C"));
}

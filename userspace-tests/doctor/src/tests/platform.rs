//! The PCIe platform: GPU-NIC topology (PXB, PHB, SYS), ACS, the config-space walk, IOMMU modes, link
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

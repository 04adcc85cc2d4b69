//! The GPU Operator's driver container: which nvidia-peermem its tree holds, nvpeer's hook, the
//! Network Operator's DOCA container, and the fix in the operator's terms.

use super::*;

const DRV: &str = "/run/nvidia/driver";

pub(super) fn ko(nvpeer: bool) -> Vec<u8> {
    let mut b = b"\x7fELF\x02\x01\x01\0license=Dual MIT/GPL\0".to_vec();
    let d = if nvpeer {
        format!("description={}\0", nvpeer_uapi::module::DESCRIPTION)
    } else {
        "description=NVIDIA GPUDirect RDMA peer memory client\0".to_string()
    };
    b.extend_from_slice(d.as_bytes());
    b
}

/// A node whose driver comes from the operator's driver container, with NVIDIA's nvidia-peermem
/// in that container's tree and the Network Operator's DOCA ready.
pub(super) fn operator_node() -> Fx {
    let f = Fx::healthy();
    f.file(
        &format!("{DRV}/lib/modules/{REL}/kernel/drivers/video/nvidia-peermem.ko"),
        ko(false),
    );
    f.file(&format!("{DRV}/lib/modules/{REL}/modules.dep"), "");
    f.file("/run/mellanox/drivers/.driver-ready", "");
    f
}

#[test]
fn not_an_operator_node_is_skipped() {
    let r = Fx::healthy().report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Skip, "{}", c.summary);
    assert_eq!(data(c)["driver_container"], false);
}

#[test]
fn nvidias_module_in_the_driver_container_fails_in_the_operators_words() {
    let f = operator_node();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Fail, "{}", c.summary);
    assert!(
        c.summary
            .contains("is NVIDIA's: driver.rdma.enabled=true loads it, not nvpeer"),
        "{}",
        c.summary
    );
    let fix = c.fix.as_deref().unwrap_or_default();
    for want in [
        "packaging/gpu-operator/Containerfile",
        "driver.repository",
        "driver.rdma.enabled=true",
        "useHostMofed",
    ] {
        assert!(fix.contains(want), "{want} not in {fix}");
    }
    assert!(
        c.details.iter().any(|d| d.contains("DOCA driver is ready")),
        "{:?}",
        c.details
    );
    // nvpeer's own check names this one as its cause, and the nvpeer path is not ready.
    let m = check(&r, "nvpeer.module");
    assert_eq!(m.status, Status::Fail);
    assert_eq!(r.verdict, Verdict::NotReady);
    let table = r.render_table(false);
    assert!(
        table.contains("follows from \"GPU Operator driver container\""),
        "{table}"
    );
}

#[test]
fn nvpeer_serving_now_is_a_warning_until_the_next_pod_start() {
    let r = operator_node().report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Warn, "{}", c.summary);
    assert!(
        c.summary
            .contains("nvpeer serves now; the driver pod's next start replaces it"),
        "{}",
        c.summary
    );
}

#[test]
fn nvpeers_build_in_the_tree_passes() {
    let f = operator_node();
    f.file(
        &format!("{DRV}/lib/modules/{REL}/kernel/drivers/video/nvidia-peermem.ko.nvidia"),
        ko(false),
    );
    f.file(
        &format!("{DRV}/lib/modules/{REL}/kernel/drivers/video/nvidia-peermem.ko"),
        ko(true),
    );
    let r = f.report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Pass, "{}", c.summary);
    assert_eq!(data(c)["peermem_kos"][0]["nvpeer"], true);
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn the_hook_waiting_for_doca_is_a_warning_naming_driver_ready() {
    let f = operator_node();
    f.file(
        &format!("{DRV}/etc/modprobe.d/nvpeer-driver-container.conf"),
        "install nvidia_peermem ...\n",
    );
    f.rm("/run/mellanox/drivers/.driver-ready");
    let r = f.report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Warn, "{}", c.summary);
    assert!(c.summary.contains("hook is in the image"), "{}", c.summary);
    assert!(c
        .fix
        .as_deref()
        .unwrap_or_default()
        .contains("/run/mellanox/drivers/.driver-ready"));
}

#[test]
fn no_module_in_the_tree_names_the_userspace_only_install() {
    let f = operator_node();
    f.rm(&format!("{DRV}/lib/modules/{REL}/kernel"));
    f.rm("/run/mellanox/drivers");
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let c = check(&r, "gpu_operator.driver");
    assert_eq!(c.status, Status::Fail, "{}", c.summary);
    assert!(c.summary.contains("gpu-operator#2619"), "{}", c.summary);
    assert!(
        c.details.iter().any(|d| d.contains("useHostMofed=true")),
        "{:?}",
        c.details
    );
}

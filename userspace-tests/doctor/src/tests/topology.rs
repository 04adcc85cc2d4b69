//! `--topology`: the GPU↔NIC matrix, each GPU's best NIC, the pairs NCCL refuses and the
//! hazards on a pair's path.

use super::Fx;
use crate::pci::PathClass;
use crate::root::SysRoot;
use crate::topology::Matrix;

const GPU0: &str = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
const NIC0: &str = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";

/// The healthy node (GPU0 and mlx5_0 behind one switch, NUMA 0) and a second socket's GPU1 with
/// no NIC of its own, whose IOMMU group translates DMA.
fn two_sockets() -> Fx {
    let f = Fx::healthy();
    f.file(&format!("{GPU0}/local_cpulist"), "0-15\n");
    f.file(&format!("{NIC0}/local_cpulist"), "0-15\n");
    f.symlink(
        &format!("{GPU0}/iommu_group"),
        "/sys/kernel/iommu_groups/12",
    );
    f.file("/sys/kernel/iommu_groups/12/type", "identity\n");
    let h = "pci0000:80";
    f.bridge(h, &["0000:80:01.0"], Some(0x001d));
    let g1 = f.gpu(h, &["0000:80:01.0", "0000:81:00.0"], 1, 128 << 30);
    f.file(&format!("{g1}/local_cpulist"), "16-31\n");
    f.symlink(&format!("{g1}/iommu_group"), "/sys/kernel/iommu_groups/40");
    f.file("/sys/kernel/iommu_groups/40/type", "DMA-FQ\n");
    f
}

fn matrix(f: &Fx) -> Matrix {
    Matrix::of(&SysRoot::new(f.dir.path()), &f.report())
}

#[test]
fn the_matrix_places_every_pair_and_names_each_gpus_best_nic() {
    let m = matrix(&two_sockets());
    let names: Vec<&str> = m.gpus.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["GPU0", "GPU1"]);
    assert_eq!(m.gpus[1].bdf.as_deref(), Some("0000:81:00.0"));
    assert_eq!(m.gpus[1].numa, Some(1));
    assert_eq!(m.gpus[1].cpus.as_deref(), Some("16-31"));
    assert_eq!(m.gpus[0].iommu.as_deref(), Some("12 (identity)"));
    assert_eq!(m.nics[0].name, "mlx5_0");
    assert_eq!(
        m.cells,
        vec![vec![Some(PathClass::PIX)], vec![Some(PathClass::SYS)]]
    );
    assert_eq!(m.best[0].nics, ["mlx5_0"]);
    assert_eq!(m.best[1].class, PathClass::SYS);
    // GPU1's best NIC is across the socket: NCCL would not use GPUDirect RDMA on it.
    assert_eq!(m.refused.len(), 1);
    assert_eq!(
        (m.refused[0].gpu.as_str(), m.refused[0].nic.as_str()),
        ("GPU1", "mlx5_0")
    );
    assert!(m.refused[0].why[0].starts_with("SYS: beyond NCCL_NET_GDR_LEVEL's default (PXB)"));
    // And its IOMMU group translates its DMA.
    assert_eq!(m.hazards.len(), 1);
    assert_eq!(
        m.hazards[0].why,
        ["GPU1's IOMMU group 40 (DMA-FQ) translates its DMA"]
    );
    let text = m.render();
    for want in [
        "GPU0    PIX     0     0-15          12 (identity)  0000:03:00.0",
        "GPU1    SYS     1     16-31         40 (DMA-FQ)    0000:81:00.0",
        "mlx5_0          0     0-15          -              0000:04:00.0",
        "best NIC for GPU1: mlx5_0 (SYS)",
        "NCCL would not use GPUDirect RDMA by default on:\n  GPU1↔mlx5_0: SYS",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
}

#[test]
fn acs_redirection_on_a_pairs_bridge_is_a_hazard_and_a_bare_node_says_so() {
    let f = Fx::healthy();
    // The GPU's downstream port redirects peer requests (ACS RR|CR).
    f.bridge(
        "pci0000:00",
        &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
        Some(0x001d),
    );
    let m = matrix(&f);
    assert!(m.refused.is_empty(), "{:?}", m.refused);
    assert_eq!(
        m.hazards[0].why,
        ["ACS on bridge 0000:02:00.0 redirects peer traffic through the root complex"]
    );
    let bare = Fx::new();
    let m = matrix(&bare);
    assert!(m.gpus.is_empty() && m.nics.is_empty());
    assert!(m.render().contains("no NVIDIA GPU on the PCI bus"));
    let f = Fx::healthy();
    f.rm("/sys/class/infiniband");
    let m = matrix(&f);
    assert_eq!(m.cells, vec![Vec::<Option<PathClass>>::new()]);
    assert!(m
        .render()
        .contains("no RDMA device: no GPU↔NIC pair to place"));
}

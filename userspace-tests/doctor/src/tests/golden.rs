//! The JSON report byte for byte: users' tools and testbench/suites/40-doctor.sh read its keys,
//! so a change to a check's `data` (its keys, their order, a null) shows here. Three nodes pin
//! most check shapes: a healthy node with every live probe answering, a broken one (no peer
//! module, no kallsyms, no RDMA device) and an empty root. After an intended change, rerun with
//! `DOCTOR_BLESS=1` and review the diff of tests/golden/.

use super::operator::operator_node;
use super::paths::{env, nvml_gpu, pinned_stats};
use super::*;

/// The pretty JSON `nvpeer doctor --json` prints for `r`, the fixture's tempdir as `<ROOT>`.
fn json_of(f: &Fx, r: &Report) -> String {
    let json = serde_json::to_string_pretty(r).expect("a report encodes");
    json.replace(&f.dir.path().display().to_string(), "<ROOT>") + "\n"
}

/// Compares `got` with tests/golden/`name`, or writes it there under `DOCTOR_BLESS=1`.
fn pinned(name: &str, want: &str, got: &str) {
    if std::env::var_os("DOCTOR_BLESS").is_some() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/tests/golden")
            .join(name);
        fs::write(p, got).expect("write the golden file");
        return;
    }
    assert!(
        want == got,
        "{name} differs from tests/golden/{name}:\n{got}"
    );
}

#[test]
fn healthy_node_with_live_probes() {
    let f = Fx::healthy();
    pinned_stats(&f, 2 << 30);
    let mut p = dmabuf_probes();
    p.nvml = nvml_gpu(200 << 30, Err("not supported".into()));
    let got = json_of(&f, &f.report_with(p));
    pinned("healthy.json", include_str!("golden/healthy.json"), &got);
}

#[test]
fn broken_node() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem")
        .rm("/proc/kallsyms")
        .rm("/sys/class/infiniband");
    let got = json_of(&f, &f.report());
    pinned("broken.json", include_str!("golden/broken.json"), &got);
}

#[test]
fn empty_root() {
    let f = Fx::new();
    let got = json_of(&f, &f.report());
    pinned("empty.json", include_str!("golden/empty.json"), &got);
}

/// `{ "<id>": data }` of the checks `ids` of `f`'s report with `probes`.
fn data_of(f: &Fx, probes: Probes, ids: &[&str]) -> serde_json::Value {
    let r = f.report_with(probes);
    ids.iter()
        .map(|id| (id.to_string(), data(check(&r, id))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[test]
fn data_variants() {
    let mut all = serde_json::Map::new();
    let mut add = |name: &str, f: &Fx, probes: Probes, ids: &[&str]| {
        let got = data_of(f, probes, ids).to_string();
        all.insert(
            name.into(),
            serde_json::from_str(&got.replace(&f.dir.path().display().to_string(), "<ROOT>"))
                .expect("data is JSON"),
        );
    };
    // The P2P API from an emulator; kernel-log errors; DKMS built for another kernel, failed here.
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia").rm("/proc/driver/nvidia");
    f.rm("/sys/module/nvidia_peermem");
    f.file("/proc/kallsyms", nv_syms("nvp2p_emu"));
    f.file(
        "/dev/kmsg",
        "4,812,90000,-;nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client\n\
         3,813,90001,-;nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -22)\n",
    );
    f.dkms_built_for("7.1.3").file(
        "/var/lib/dkms/nvpeer/0.1.0/build/make.log",
        "error[E0514]\n",
    );
    f.file(&format!("/boot/config-{REL}"), "CONFIG_INFINIBAND=y\n");
    let mut p = Probes::none();
    p.cuda = CudaProbe::Failed {
        error: "CUDA_ERROR_NO_DEVICE".into(),
    };
    p.env = env(&[("NCCL_NET_GDR_LEVEL", "LOC")]);
    add(
        "emulator, loader errors, DKMS elsewhere, no CONFIG_RUST, CUDA failed, NCCL setting",
        &f,
        p,
        &[
            "nvidia.driver",
            "rdma.peer_api",
            "kernel.log",
            "kernel.dkms",
            "kernel.rust",
            "gpu.cuda",
            "libs.settings",
        ],
    );
    // Inbox RDMA core without the peer-memory API; ACS config space unreadable; an old OFED's
    // client list.
    let f = Fx::healthy();
    f.file(
        "/proc/kallsyms",
        nv_syms("nvidia") + "0 T ib_register_device\t[ib_core]\n",
    );
    f.bridges_unreadable().old_ofed();
    add(
        "inbox RDMA, ACS unreadable, old OFED",
        &f,
        Probes::none(),
        &["rdma.peer_api", "pci.acs", "peer.clients"],
    );
    // The peer-memory API in OFED's Module.symvers but not loaded.
    let f = Fx::healthy();
    f.file("/proc/kallsyms", nv_syms("nvidia"));
    f.file(
        "/usr/src/ofa_kernel/default/Module.symvers",
        "0x12345678\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n",
    );
    add(
        "OFED built, not loaded",
        &f,
        Probes::none(),
        &["rdma.peer_api"],
    );
    // A GPU Operator node with NVIDIA's nvidia-peermem in the driver container.
    add(
        "GPU Operator",
        &operator_node(),
        Probes::none(),
        &["gpu_operator.driver"],
    );
    let got = serde_json::to_string_pretty(&all).expect("JSON encodes") + "\n";
    pinned("variants.json", include_str!("golden/variants.json"), &got);
}

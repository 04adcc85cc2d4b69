//! The JSON report byte for byte: users' tools and testbench/suites/40-doctor.sh read its keys,
//! so a change to a check's `data` (its keys, their order, a null) shows here. Three nodes pin
//! most check shapes: a healthy node with every live probe answering, a broken one (no peer
//! module, no kallsyms, no RDMA device) and an empty root. After an intended change, rerun with
//! `DOCTOR_BLESS=1` and review the diff of tests/golden/.

use super::paths::{nvml_gpu, pinned_stats};
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

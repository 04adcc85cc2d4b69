//! `--profile` and `--write-profile`: the node held to a node profile, and a healthy node's own.

use super::{check, dmabuf_probes, Fx};
use crate::profile::{load, of_node, Profile};
use crate::report::{Status, Verdict};
use crate::root::SysRoot;

/// The report of `f`'s node held to `toml`.
fn held(f: &Fx, toml: &str, probes: crate::probes::Probes) -> crate::report::Report {
    let p: Profile = toml::from_str(toml).unwrap();
    let root = SysRoot::new(f.dir.path());
    let mut ctx = crate::checks::Ctx::load(&root, probes);
    ctx.profile = Some(("test.toml".into(), p));
    crate::report_of(&ctx, crate::report::Require::Nvpeer)
}

const H200_NODE: &str = r#"
name = "one H200, one NDR NIC"
[gpu]
count = 1
name_contains = "H200"
[nic]
name_prefix = "mlx5_"
count = 1
link_layer = "InfiniBand"
min_rate_gbps = 400
[topology]
farthest = "PXB"
[software]
min_driver = "580.65.06"
min_kernel = "6.18"
"#;

#[test]
fn a_node_that_matches_its_profile_passes_and_stays_ready() {
    let f = Fx::healthy();
    let r = held(&f, H200_NODE, dmabuf_probes());
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Pass, "{c:?}");
    assert!(
        c.summary
            .starts_with("matches one H200, one NDR NIC (8 items)"),
        "{}",
        c.summary
    );
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn each_mismatch_is_named_and_the_node_is_not_ready() {
    let f = Fx::healthy();
    let wrong = H200_NODE
        .replace("count = 1\nname_contains", "count = 8\nname_contains")
        .replace("min_rate_gbps = 400", "min_rate_gbps = 800")
        .replace("min_driver = \"580.65.06\"", "min_driver = \"595.45.04\"");
    let r = held(&f, &wrong, dmabuf_probes());
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Fail);
    for want in [
        "1 NVIDIA GPU(s), the profile says 8",
        "port(s) below 800 Gb/s: mlx5_0/1 400 Gb/s",
        "NVIDIA driver 580.95.05, the profile's least 595.45.04",
    ] {
        assert!(c.summary.contains(want), "{want} in {}", c.summary);
    }
    assert_eq!(c.code, Some("NVP-D034"));
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(r.root_cause().map(|c| c.id), Some("node.profile"));
}

#[test]
fn what_cannot_be_read_is_unknown_never_a_pass() {
    let f = Fx::healthy();
    // No CUDA or NVML probe: the GPUs' names and BAR1 cannot be read.
    let r = held(
        &f,
        "[gpu]\nname_contains = \"H200\"\nmin_bar1_mib = 1024\n",
        crate::probes::Probes::none(),
    );
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Unknown, "{c:?}");
    assert!(
        c.details
            .iter()
            .any(|d| d.contains("not read: the GPUs' names")),
        "{:?}",
        c.details
    );
    // Without --profile: not applicable, and the node's verdict is its own.
    let r = f.report();
    assert_eq!(check(&r, "node.profile").status, Status::Skip);
}

#[test]
fn profiles_are_strict_toml() {
    assert!(
        toml::from_str::<Profile>("[gpu]\ncont = 8\n").is_err(),
        "a misspelt key must not be ignored"
    );
    assert!(toml::from_str::<Profile>("[topology]\nfarthest = \"FAR\"\n").is_err());
    let dir = tempfile::tempdir().unwrap();
    let e = load(&dir.path().join("none.toml")).unwrap_err();
    assert!(e.to_string().contains("none.toml"), "{e}");
}

#[test]
fn a_recorded_profile_matches_its_own_node_and_round_trips() {
    let f = Fx::healthy();
    let root = SysRoot::new(f.dir.path());
    let ctx = crate::checks::Ctx::load(&root, dmabuf_probes());
    let p = of_node(&ctx);
    assert_eq!(p.gpu.as_ref().and_then(|g| g.count), Some(1));
    assert_eq!(
        p.gpu.as_ref().and_then(|g| g.name_contains.as_deref()),
        Some("NVIDIA H200")
    );
    assert_eq!(p.nic.as_ref().and_then(|n| n.min_rate_gbps), Some(400.0));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.toml");
    crate::profile::write(&p, &file).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let back = load(&file).unwrap();
    assert_eq!(back, p, "{text}");
    let r = held(&f, text.as_str(), dmabuf_probes());
    assert_eq!(check(&r, "node.profile").status, Status::Pass);
    // Never through a planted link.
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    assert!(crate::profile::write(&p, &link).is_err());
    assert!(!dir.path().join("elsewhere").exists());
}

#[test]
fn the_built_in_profiles_parse_cite_their_source_and_need_no_probe() {
    use crate::profile::{resolve, BUILTIN};
    use std::path::Path;
    for (name, text) in BUILTIN {
        let p: Profile = toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.name.is_some(), "{name}");
        assert!(p.source.as_deref().is_some_and(|s| s.len() > 20), "{name}");
        let g = p.gpu.as_ref().unwrap();
        assert_eq!(g.count, Some(8), "{name}");
        // The Slurm health check runs --no-probes: nothing in them needs CUDA or NVML.
        assert!(
            g.name_contains.is_none() && g.min_bar1_mib.is_none(),
            "{name}"
        );
        assert!(g.pci_device_ids.is_some(), "{name}");
        assert_eq!(
            resolve(Path::new(name)).unwrap().0,
            format!("built-in {name}")
        );
    }
    let e = resolve(Path::new("dgx-a100")).unwrap_err();
    assert!(
        e.to_string()
            .contains("nor a built-in profile (dgx-h100, dgx-h200,"),
        "{e}"
    );
    // A file of that name comes first.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dgx-h100");
    std::fs::write(&file, "name = \"mine\"\n").unwrap();
    let (shown, p) = resolve(&file).unwrap();
    assert_eq!(
        (shown, p.name.as_deref()),
        (file.display().to_string(), Some("mine"))
    );
}

/// The compute NICs of a DGX H100 by its user guide's Table 6, GPU 0 to 7.
const DGX_COMPUTE: [&str; 8] = [
    "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11",
];

/// A node laid out as a DGX H100: eight GPUs (10de:2330), each behind one PCIe switch with its
/// compute NIC, and the four storage ports (mlx5_1, 2, 7, 8) on root ports of their own, in
/// Ethernet mode. `far`: GPU 7's NIC on a root port of its own instead (PHB from its GPU).
fn dgx_h100_node(far: bool) -> Fx {
    let f = Fx::healthy(); // GPU 0 (0000:03:00.0) and mlx5_0 behind one switch
    f.file(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/device",
        "0x2330\n",
    );
    let h = "pci0000:00";
    for (i, name) in DGX_COMPUTE.iter().enumerate().skip(1) {
        let b = 0x10 * i;
        let rp = format!("0000:00:{:02x}.0", i + 1);
        let usp = format!("0000:{b:02x}:00.0");
        let (d0, d1) = (
            format!("0000:{:02x}:00.0", b + 1),
            format!("0000:{:02x}:01.0", b + 1),
        );
        f.bridge(h, &[&rp], Some(0x001d));
        f.bridge(h, &[&rp, &usp], None);
        f.bridge(h, &[&rp, &usp, &d0], Some(0x0001));
        f.bridge(h, &[&rp, &usp, &d1], Some(0x0001));
        let gpu = f.gpu(
            h,
            &[&rp, &usp, &d0, &format!("0000:{:02x}:00.0", b + 2)],
            0,
            128 << 30,
        );
        f.file(&format!("{gpu}/device"), "0x2330\n");
        let nic = format!("0000:{:02x}:00.0", b + 3);
        if far && i == 7 {
            f.bridge(h, &["0000:00:0f.0"], Some(0x001d));
            f.nic(h, &["0000:00:0f.0", &nic], 0, name);
        } else {
            f.nic(h, &[&rp, &usp, &d1, &nic], 0, name);
        }
    }
    for (k, nic) in ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"].iter().enumerate() {
        let rp = format!("0000:00:1{k}.0");
        f.bridge(h, &[&rp], Some(0x001d));
        f.nic(h, &[&rp, &format!("0000:{:02x}:00.0", 0xa0 + k)], 1, nic);
        f.file(
            &format!("/sys/class/infiniband/{nic}/ports/1/link_layer"),
            "Ethernet\n",
        );
    }
    f
}

fn builtin(name: &str) -> String {
    crate::profile::BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t.to_string())
        .unwrap()
}

#[test]
fn a_dgx_h100_matches_its_built_in_profile_without_probes() {
    let f = dgx_h100_node(false);
    let r = held(&f, &builtin("dgx-h100"), crate::probes::Probes::none());
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Pass, "{c:?}");
    assert!(
        c.summary.starts_with("matches NVIDIA DGX H100 ("),
        "{}",
        c.summary
    );
    // Its storage ports (Ethernet) are not counted: the compute NICs are named.
    assert!(
        c.details
            .iter()
            .any(|d| d.contains("every port among the 8 named") && d.ends_with("is InfiniBand")),
        "{:?}",
        c.details
    );
}

#[test]
fn a_dgx_h100_with_a_rail_missing_misplaced_or_the_wrong_gpu_fails_naming_it() {
    let f = dgx_h100_node(true);
    f.rm("/sys/class/infiniband/mlx5_9");
    f.file(
        "/sys/bus/pci/devices/0000:22:00.0/device",
        "0x2331
",
    );
    let r = held(&f, &builtin("dgx-h100"), crate::probes::Probes::none());
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Fail, "{c:?}");
    for want in [
        "RDMA device(s) missing: mlx5_9",
        "7 RDMA device(s) among the 8 named, the profile says 8",
        "GPU(s) whose PCI device id is not 0x2330: 0000:22:00.0 0x2331",
        // (GPU 5's own NIC is the missing mlx5_9; GPU 7's is on another root port)
        "GPU(s) whose nearest NIC is farther than PXB: 0000:52:00.0 PHB, 0000:72:00.0 PHB",
    ] {
        assert!(c.summary.contains(want), "{want} in {}", c.summary);
    }
    // The one-GPU bench node is no DGX, and no Azure VM (no mlx5_ib* devices).
    let one = Fx::healthy();
    let r = held(&one, &builtin("dgx-h200"), crate::probes::Probes::none());
    let c = check(&r, "node.profile");
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.summary.contains("1 NVIDIA GPU(s), the profile says 8"),
        "{}",
        c.summary
    );
    let r = held(
        &one,
        &builtin("azure-nd-h200-v5"),
        crate::probes::Probes::none(),
    );
    let c = check(&r, "node.profile");
    assert!(
        c.summary
            .contains("0 RDMA device(s) named mlx5_ib*, the profile says 8"),
        "{}",
        c.summary
    );
}

#[test]
fn a_profile_no_node_could_match_is_refused_when_read() {
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        (
            "[nic]\nname_prefix = \"mlx5_\"\nnames = [\"mlx5_0\", \"ib0\"]\n",
            "names ib0, which its name_prefix \"mlx5_\" leaves out",
        ),
        (
            "[nic]\nnames = [\"mlx5_0\"]\ncount = 2\n",
            "count = 2, more than the 1 names it gives",
        ),
    ] {
        let p = dir.path().join("p.toml");
        std::fs::write(&p, text).unwrap();
        let e = load(&p).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}

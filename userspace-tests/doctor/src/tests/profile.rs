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

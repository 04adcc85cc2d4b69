//! The environment block of a report: what a NIC or GPU developer needs to reproduce a run
//! (host, kernel, NVIDIA driver, OFED, the loaded peer-memory module, NIC driver and firmware, the
//! PCIe paths of the GPU and the NIC, the doctor's verdict, the command line and this tool's
//! version). Read from sysfs/procfs
//! under a root so tests can use a fake tree; a fact that cannot be read is left out, never
//! guessed.

use nvpeer_uapi::{debugfs, module};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One run's environment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Environment {
    pub tool: String,
    pub command_line: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvidia_driver: Option<String>,
    /// `ofed_info -s`, or "inbox" when the kernel's own RDMA stack is loaded without OFED.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ofed: Option<String>,
    /// Loaded peer-memory modules with their versions; a module loaded as `nvidia_peermem` says
    /// whose it is (nvpeer's drop-in or NVIDIA's own) where the tree tells.
    #[serde(default)]
    pub peer_modules: Vec<String>,
    /// The loaded peer client's mode as the module publishes it ([`crate::sysfs::persistent_mode`]):
    /// "persistent" or "invalidating".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_client_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// The NIC's kernel driver (the device's `driver` link) with its module version where sysfs
    /// has one (out-of-tree drivers such as OFED's; in-tree ones usually have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_driver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_firmware: Option<String>,
    /// PCIe path from the root port down to the device (`pci0000:00 > 0000:00:02.0 > ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_pcie_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_pcie_path: Option<String>,
    /// `nvpeer doctor`'s report from its file-based checks ([`doctor_snapshot`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doctor: Option<serde_json::Value>,
}

/// `nvpeer doctor --no-probes` under `root` as JSON: every check it reads from files (the live
/// CUDA and verbs probes are what the run itself exercises), by the doctor's library call.
pub fn doctor_snapshot(root: &Path) -> Option<serde_json::Value> {
    let report = nvpeer_doctor::diagnose_files(root, nvpeer_doctor::report::Require::Any);
    serde_json::to_value(report).ok()
}

fn read(root: &Path, rel: &str) -> Option<String> {
    let s = std::fs::read_to_string(root.join(rel)).ok()?;
    let line = s.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// The PCIe path of the device a sysfs link points at: every path component that is a PCI
/// address or a host bridge, from the root down. `None` for a virtual device (rxe, siw).
pub fn pcie_path(root: &Path, link: &str) -> Option<String> {
    let real = std::fs::canonicalize(root.join(link)).ok()?;
    let parts: Vec<String> = real
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| c.starts_with("pci") || is_pci_address(c))
        .map(str::to_string)
        .collect();
    parts
        .iter()
        .any(|p| is_pci_address(p))
        .then(|| parts.join(" > "))
}

/// `dddd:bb:dd.f`.
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The command line as typed, with the value of `--token` hidden.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let mut out = Vec::new();
    let mut hide = false;
    for a in args {
        if hide {
            out.push("***".to_string());
            hide = false;
        } else if a == "--token" {
            out.push(a);
            hide = true;
        } else if a.starts_with("--token=") {
            out.push("--token=***".into());
        } else if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$\\".contains(c)) {
            out.push(format!("'{}'", a.replace('\'', r"'\''")));
        } else {
            out.push(a);
        }
    }
    out.join(" ")
}

/// `ofed_info -s` when OFED is installed.
pub fn ofed_info() -> Option<String> {
    let o = std::process::Command::new("ofed_info")
        .arg("-s")
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&o.stdout)
        .trim()
        .trim_end_matches(':')
        .to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

/// Whose module is loaded as `nvidia_peermem`: nvpeer's drop-in creates debugfs `nvpeer/` (evidence
/// only while no module named `nvpeer` is loaded) and reports its own version; NVIDIA's reports the
/// driver's version. `None` when the tree does not tell.
fn dropin_owner(root: &Path, version: Option<&str>) -> Option<&'static str> {
    if !module::loaded(root, "nvpeer") && debugfs::present(root) {
        return Some("nvpeer");
    }
    let driver = module::version(root, "nvidia");
    match (version, driver.as_deref()) {
        (Some(v), Some(d)) if v == d => Some("NVIDIA's"),
        (Some(_), Some(_)) => Some("nvpeer"),
        _ => None,
    }
}

/// The driver bound to the device a sysfs link points at, with its module's version when the
/// module publishes one: `mlx5_core 24.10-1.1.4`, `mlx5_core`. `None` without a driver link.
pub fn driver_of(root: &Path, device_link: &str) -> Option<String> {
    let link = root.join(device_link).join("driver");
    let real = std::fs::canonicalize(&link).ok()?;
    let name = real.file_name()?.to_str()?.to_string();
    match read(root, &format!("{device_link}/driver/module/version")) {
        Some(v) => Some(format!("{name} {v}")),
        None => Some(name),
    }
}

/// The root causes a doctor report (its JSON) names for the paths it finds blocked, once each:
/// `nvidia.driver (NVIDIA driver): not loaded`. Empty when the verdict is ready or the report
/// names none.
pub fn doctor_causes(doctor: &serde_json::Value) -> Vec<String> {
    if doctor["verdict"].as_str() == Some("ready") {
        return Vec::new();
    }
    let empty = Vec::new();
    let checks = doctor["checks"].as_array().unwrap_or(&empty);
    let mut out: Vec<String> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for p in doctor["paths"].as_array().unwrap_or(&empty) {
        if !matches!(p["state"].as_str(), Some("not_ready" | "could_not_check")) {
            continue;
        }
        let Some(id) = p["root_cause"].as_str() else {
            continue;
        };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let check = checks.iter().find(|c| c["id"].as_str() == Some(id));
        let title = check.and_then(|c| c["title"].as_str());
        let summary = check.and_then(|c| c["summary"].as_str());
        out.push(match (title, summary) {
            (Some(t), Some(s)) => format!("{id} ({t}): {s}"),
            (Some(t), None) => format!("{id} ({t})"),
            (None, Some(s)) => format!("{id}: {s}"),
            (None, None) => id.to_string(),
        });
    }
    out
}

/// Collects the environment under `root` for the RDMA device `nic` and the GPU at PCI bus id
/// `gpu`; `ofed` is what [`ofed_info`] returned.
pub fn collect(
    root: &Path,
    nic: Option<&str>,
    gpu: Option<&str>,
    ofed: Option<String>,
) -> Environment {
    let peer_modules = ["nvpeer", "nvidia_peermem", "nv_peer_mem"]
        .iter()
        .filter(|m| module::loaded(root, m))
        .map(|m| {
            let version = module::version(root, m);
            let label = match version {
                Some(ref v) => format!("{m} {v}"),
                None => m.to_string(),
            };
            match *m {
                "nvidia_peermem" => match dropin_owner(root, version.as_deref()) {
                    Some(owner) => format!("{label} ({owner})"),
                    None => label,
                },
                _ => label,
            }
        })
        .collect();
    let ofed = ofed.or_else(|| module::loaded(root, "ib_core").then(|| "inbox".to_string()));
    Environment {
        tool: format!("nvpeer {}", env!("CARGO_PKG_VERSION")),
        command_line: command_line(std::env::args()),
        host: read(root, "proc/sys/kernel/hostname"),
        kernel: read(root, "proc/sys/kernel/osrelease"),
        nvidia_driver: module::version(root, "nvidia")
            .or_else(|| read(root, "proc/driver/nvidia/version")),
        ofed,
        peer_modules,
        peer_client_mode: crate::sysfs::persistent_mode(root)
            .map(|p| if p { "persistent" } else { "invalidating" }.to_string()),
        nic: nic.map(str::to_string),
        nic_driver: nic.and_then(|n| driver_of(root, &format!("sys/class/infiniband/{n}/device"))),
        nic_firmware: nic.and_then(|n| read(root, &format!("sys/class/infiniband/{n}/fw_ver"))),
        nic_pcie_path: nic
            .and_then(|n| pcie_path(root, &format!("sys/class/infiniband/{n}/device"))),
        gpu_pcie_path: gpu.and_then(|g| pcie_path(root, &format!("sys/bus/pci/devices/{g}"))),
        // File-based and cheap: every report carries it, the text block its verdict and cause.
        doctor: doctor_snapshot(root),
    }
}

impl Environment {
    /// `(key, value)` pairs in report order (text block, JUnit properties).
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("tool".to_string(), self.tool.clone()),
            ("command line".into(), self.command_line.clone()),
        ];
        let opt = [
            ("host", &self.host),
            ("kernel", &self.kernel),
            ("nvidia driver", &self.nvidia_driver),
            ("ofed", &self.ofed),
            ("nic", &self.nic),
            ("nic driver", &self.nic_driver),
            ("nic firmware", &self.nic_firmware),
            ("nic pcie path", &self.nic_pcie_path),
            ("gpu pcie path", &self.gpu_pcie_path),
        ];
        for (k, val) in opt {
            if let Some(val) = val {
                v.push((k.to_string(), val.clone()));
            }
        }
        if !self.peer_modules.is_empty() {
            v.push(("peer modules".into(), self.peer_modules.join(", ")));
        }
        if let Some(mode) = &self.peer_client_mode {
            v.push(("client mode".into(), mode.clone()));
        }
        if let Some(d) = &self.doctor {
            if let Some(verdict) = d["verdict"].as_str() {
                v.push(("doctor".into(), verdict.to_string()));
            }
            let causes = doctor_causes(d);
            if !causes.is_empty() {
                v.push(("doctor cause".into(), causes.join("; ")));
            }
        }
        v
    }

    /// The text block: one `key: value` line each, indented under `environment:`.
    pub fn text(&self) -> String {
        let mut s = String::from("environment:");
        for (k, v) in self.pairs() {
            s.push_str(&format!("\n  {k:<14} {v}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(root: &Path, rel: &str, s: &str) {
        let f = root.join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    }

    #[test]
    fn facts_from_a_fake_tree() {
        let d = std::env::temp_dir().join(format!("nvpeer-env-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        write(&d, "proc/sys/kernel/hostname", "gpu-node-7\n");
        write(&d, "proc/sys/kernel/osrelease", "6.12.48+deb13-amd64\n");
        write(&d, "sys/module/nvidia/version", "580.82.07\n");
        write(&d, "sys/module/nvpeer/version", "0.1.0\n");
        write(&d, "sys/module/ib_core/refcnt", "1\n");
        let nic_dev = "sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0";
        write(&d, &format!("{nic_dev}/vendor"), "0x15b3\n");
        write(&d, "sys/class/infiniband/mlx5_0/fw_ver", "28.39.1002\n");
        std::os::unix::fs::symlink(
            d.join(nic_dev),
            d.join("sys/class/infiniband/mlx5_0/device"),
        )
        .unwrap();
        // The NIC's driver: bound through the device's driver link, its module's version.
        write(&d, "sys/bus/pci/drivers/mlx5_core/bind", "");
        write(&d, "sys/module/mlx5_core/version", "24.10-1.1.4\n");
        std::os::unix::fs::symlink(
            d.join("sys/bus/pci/drivers/mlx5_core"),
            d.join(format!("{nic_dev}/driver")),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            d.join("sys/module/mlx5_core"),
            d.join("sys/bus/pci/drivers/mlx5_core/module"),
        )
        .unwrap();
        let e = collect(&d, Some("mlx5_0"), Some("0000:3b:00.0"), None);
        assert_eq!(e.nic_driver.as_deref(), Some("mlx5_core 24.10-1.1.4"));
        assert_eq!(e.host.as_deref(), Some("gpu-node-7"));
        assert_eq!(e.kernel.as_deref(), Some("6.12.48+deb13-amd64"));
        assert_eq!(e.nvidia_driver.as_deref(), Some("580.82.07"));
        assert_eq!(e.ofed.as_deref(), Some("inbox"));
        assert_eq!(e.peer_modules, vec!["nvpeer 0.1.0".to_string()]);
        assert_eq!(e.nic_firmware.as_deref(), Some("28.39.1002"));
        assert_eq!(
            e.nic_pcie_path.as_deref(),
            Some("pci0000:00 > 0000:00:02.0 > 0000:01:00.0")
        );
        assert_eq!(e.gpu_pcie_path, None);
        assert!(e.tool.starts_with("nvpeer "));
        let t = e.text();
        assert!(t.starts_with("environment:\n  tool"));
        assert!(t.contains("  nic pcie path  pci0000:00 > 0000:00:02.0 > 0000:01:00.0"));
        assert!(
            t.contains("\n  nic driver     mlx5_core 24.10-1.1.4\n"),
            "{t}"
        );
        // The doctor's snapshot is always collected (file-based): the text block shows its
        // verdict, and the root cause it names when the node is not ready.
        let snap = e.doctor.clone().unwrap();
        let verdict = snap["verdict"].as_str().unwrap();
        assert!(t.contains(&format!("\n  doctor         {verdict}")), "{t}");
        assert_ne!(verdict, "ready", "an empty tree is not ready");
        let causes = doctor_causes(&snap);
        assert!(!causes.is_empty(), "{snap}");
        assert!(
            t.contains(&format!("\n  doctor cause   {}", causes.join("; "))),
            "{t}"
        );
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["nic_firmware"], "28.39.1002");
        assert!(j.get("gpu_pcie_path").is_none());
        // The doctor reads the same tree; an empty node is not ready.
        let snap = doctor_snapshot(&d).unwrap();
        assert!(
            snap["verdict"].is_string() && snap["checks"].is_array(),
            "{snap}"
        );
        let with = Environment {
            doctor: Some(snap),
            ..e
        };
        assert!(with.pairs().iter().any(|(k, _)| k == "doctor"));
        // An in-tree driver publishes no version: the name alone, never a guessed version.
        std::fs::remove_file(d.join("sys/module/mlx5_core/version")).unwrap();
        let e = collect(&d, Some("mlx5_0"), None, None);
        assert_eq!(e.nic_driver.as_deref(), Some("mlx5_core"));
        // No driver link (a virtual device, an unbound one): left out.
        std::fs::remove_file(d.join(format!("{nic_dev}/driver"))).unwrap();
        let e = collect(&d, Some("mlx5_0"), None, None);
        assert_eq!(e.nic_driver, None);
        assert!(!e.text().contains("nic driver"));
        assert!(serde_json::to_value(&e)
            .unwrap()
            .get("nic_driver")
            .is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn doctor_causes_are_named_once() {
        let doc = serde_json::json!({
            "verdict": "not_ready",
            "paths": [
                {"path": "nvpeer", "state": "not_ready", "root_cause": "nvidia.driver"},
                {"path": "nvidia_peermem", "state": "not_ready", "root_cause": "nvidia.driver"},
                {"path": "dmabuf", "state": "could_not_check", "root_cause": "rdma.dmabuf"},
            ],
            "checks": [
                {"id": "nvidia.driver", "title": "NVIDIA driver", "summary": "not loaded"},
                {"id": "rdma.dmabuf", "title": "dma-buf import"},
            ],
        });
        assert_eq!(
            doctor_causes(&doc),
            vec![
                "nvidia.driver (NVIDIA driver): not loaded".to_string(),
                "rdma.dmabuf (dma-buf import)".to_string()
            ]
        );
        let e = Environment {
            doctor: Some(doc),
            ..Default::default()
        };
        let t = e.text();
        assert!(t.contains("\n  doctor         not_ready\n"), "{t}");
        assert!(
            t.contains("\n  doctor cause   nvidia.driver (NVIDIA driver): not loaded; rdma.dmabuf (dma-buf import)"),
            "{t}"
        );
        // A ready node, a not-in-use path, a report without causes: no cause line.
        let ready = serde_json::json!({"verdict": "ready", "paths": [
            {"state": "not_ready", "root_cause": "nvidia.peermem"}]});
        assert!(doctor_causes(&ready).is_empty());
        let unused = serde_json::json!({"verdict": "not_ready", "paths": [
            {"state": "not_in_use", "root_cause": "nvidia.peermem"},
            {"state": "not_ready", "root_cause": null}]});
        assert!(doctor_causes(&unused).is_empty());
        let e = Environment {
            doctor: Some(unused),
            ..Default::default()
        };
        assert!(!e.text().contains("doctor cause"));
        // Malformed documents give no cause and no panic.
        for odd in [
            serde_json::json!(null),
            serde_json::json!({"paths": 3}),
            serde_json::json!([1]),
        ] {
            assert!(doctor_causes(&odd).is_empty());
        }
        // An id without its check is still named.
        let bare = serde_json::json!({"verdict": "not_ready", "paths": [
            {"state": "not_ready", "root_cause": "kernel.log"}]});
        assert_eq!(doctor_causes(&bare), vec!["kernel.log".to_string()]);
    }

    #[test]
    fn whose_nvidia_peermem_and_the_client_mode() {
        let d = std::env::temp_dir().join(format!("nvpeer-env-dropin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        write(&d, "sys/module/nvidia/version", "580.82.07\n");
        // NVIDIA's own module reports the driver's version and publishes its parameter.
        write(&d, "sys/module/nvidia_peermem/version", "580.82.07\n");
        write(
            &d,
            "sys/module/nvidia_peermem/parameters/persistent_api_support",
            "1\n",
        );
        let e = collect(&d, None, None, None);
        assert_eq!(
            e.peer_modules,
            vec!["nvidia_peermem 580.82.07 (NVIDIA's)".to_string()]
        );
        assert_eq!(e.peer_client_mode.as_deref(), Some("persistent"));
        // nvpeer's drop-in: its own version, its debugfs directory, its config's mode.
        let _ = std::fs::remove_dir_all(d.join("sys/module/nvidia_peermem/parameters"));
        write(&d, "sys/module/nvidia_peermem/version", "0.1.0\n");
        write(
            &d,
            "sys/kernel/debug/nvpeer/config",
            "version 0.1.0\npersistent_api_support 0\n",
        );
        let e = collect(&d, None, None, None);
        assert_eq!(
            e.peer_modules,
            vec!["nvidia_peermem 0.1.0 (nvpeer)".to_string()]
        );
        assert_eq!(e.peer_client_mode.as_deref(), Some("invalidating"));
        assert!(e.text().contains("\n  client mode    invalidating"));
        // Without the driver's version or debugfs, the owner is not guessed.
        let _ = std::fs::remove_dir_all(d.join("sys/kernel/debug"));
        let _ = std::fs::remove_dir_all(d.join("sys/module/nvidia"));
        let e = collect(&d, None, None, None);
        assert_eq!(e.peer_modules, vec!["nvidia_peermem 0.1.0".to_string()]);
        assert_eq!(e.peer_client_mode, None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn command_lines_hide_the_token() {
        let a = |v: &[&str]| command_line(v.iter().map(|s| s.to_string()));
        assert_eq!(
            a(&["nvpeer", "validate", "--token", "s3cret", "-d", "mlx5_0"]),
            "nvpeer validate --token *** -d mlx5_0"
        );
        assert_eq!(a(&["nvpeer", "--token=s3cret"]), "nvpeer --token=***");
        assert_eq!(a(&["nvpeer", "--machine", "a b"]), "nvpeer --machine 'a b'");
    }

    proptest! {
        #[test]
        fn pci_address_check_never_panics(s in "\\PC{0,16}") {
            let _ = is_pci_address(&s);
        }

        #[test]
        fn pci_addresses_recognised(d in 0u32..0x10000, b in 0u32..256, dev in 0u32..32, f in 0u32..8) {
            let s = format!("{d:04x}:{b:02x}:{dev:02x}.{f}");
            prop_assert!(is_pci_address(&s));
        }
    }
}

//! The exposition and the labels of fake nodes (nvpeer-uapi's `FakeRoot`): every value equals the
//! fake debugfs's, and the text is well-formed Prometheus text exposition (checked here by a
//! small reader of the format, and by `promtool check metrics` where promtool is installed).

use crate::series::{self, Series};
use crate::{exposition, nfd, Snapshot};
use nvpeer_doctor::nvml::{Bar1, NvmlGpu, NvmlProbe};
use nvpeer_doctor::probes::Probes;
use nvpeer_uapi::debugfs::{self, STATS_KEYS};
use nvpeer_uapi::fake_root::FakeRoot;
use nvpeer_uapi::memory_peers;
use std::collections::BTreeMap;
use std::path::Path;

/// The value the fake module prints for the `i`th key of `stats`: all distinct.
fn fake_value(i: usize) -> u64 {
    (i as u64) * 7 + 3 + if i == 11 { 1 << 40 } else { 0 }
}

/// A node with nvpeer loaded as nvidia_peermem (its debugfs present), registrations in flight,
/// and a core that keeps the client list.
fn loaded_node() -> FakeRoot {
    let r = FakeRoot::new();
    let mut stats: String = STATS_KEYS
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{k} {}\n", fake_value(i)))
        .collect();
    stats.push_str("future_key 9\n");
    r.file(debugfs::STATS, stats)
        .file(
            debugfs::CONFIG,
            "version 0.1.0\npersistent_api_support 1\npeerdirect_support 0\nclient nv_mem persistent\n",
        )
        .file("/sys/module/nvidia_peermem/version", "0.1.0\n")
        .file("/sys/module/nvidia_peermem/initstate", "live\n")
        .file("/sys/module/nvidia/version", "550.163.01\n")
        .file("/sys/module/nvidia/initstate", "live\n");
    let dir = memory_peers::DIR;
    r.file(&format!("{dir}/nv_mem/version"), "0.1.0\n");
    for (i, c) in memory_peers::COUNTERS.iter().enumerate() {
        r.file(&format!("{dir}/nv_mem/{c}"), format!("{}\n", 100 + i));
    }
    r
}

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// What the reader below found in an exposition.
#[derive(Debug, Default)]
struct Parsed {
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Parsed {
    /// The value of the one series `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Every series of `name`.
    fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Reads text exposition format 0.0.4 strictly enough for these tests: `# HELP` and `# TYPE`
/// before a family's samples, valid names, quoted label values, float values, every series once,
/// counters named `_total` and nothing else so.
fn parse(text: &str) -> Result<Parsed, String> {
    let mut p = Parsed::default();
    for (n, line) in text.lines().enumerate() {
        let err = |m: &str| Err(format!("line {}: {m}: {line:?}", n + 1));
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name, arg) = (parts.next(), parts.next(), parts.next());
            let (Some(kw), Some(name), Some(arg)) = (kw, name, arg) else {
                return err("short comment");
            };
            if !is_name(name) {
                return err("bad name");
            }
            match kw {
                "HELP" => {
                    if p.helps.insert(name.into(), arg.into()).is_some() {
                        return err("second HELP");
                    }
                }
                "TYPE" => {
                    if !matches!(arg, "counter" | "gauge") {
                        return err("type");
                    }
                    if arg == "counter" && !name.ends_with("_total") {
                        return err("counter without _total");
                    }
                    if arg != "counter" && name.ends_with("_total") {
                        return err("_total on a non-counter");
                    }
                    if p.types.insert(name.into(), arg.into()).is_some() {
                        return err("second TYPE");
                    }
                }
                _ => return err("unknown comment"),
            }
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => return err("no value"),
        };
        let Ok(value) = value.parse::<f64>() else {
            return err("value");
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let Some(body) = rest.strip_suffix('}') else {
                    return err("labels");
                };
                let mut labels = BTreeMap::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let Some((k, after)) = rest.split_once("=\"") else {
                        return err("label");
                    };
                    let mut v = String::new();
                    let mut chars = after.char_indices();
                    let mut end = None;
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => match chars.next() {
                                Some((_, 'n')) => v.push('\n'),
                                Some((_, e)) => v.push(e),
                                None => return err("escape"),
                            },
                            '"' => {
                                end = Some(i);
                                break;
                            }
                            c => v.push(c),
                        }
                    }
                    let Some(end) = end else {
                        return err("unterminated label value");
                    };
                    if !is_name(k) || labels.insert(k.to_string(), v).is_some() {
                        return err("label name");
                    }
                    rest = after[end + 1..]
                        .strip_prefix(',')
                        .unwrap_or(&after[end + 1..]);
                }
                (name, labels)
            }
        };
        if !p.types.contains_key(name) || !p.helps.contains_key(name) {
            return err("sample before its HELP and TYPE");
        }
        let s = Sample {
            name: name.into(),
            labels,
            value,
        };
        if p.samples
            .iter()
            .any(|o| o.name == s.name && o.labels == s.labels)
        {
            return err("series twice");
        }
        p.samples.push(s);
    }
    Ok(p)
}

fn exposition_of(root: &Path, probes: Probes) -> (Snapshot, String, Parsed) {
    let snap = Snapshot::take(root, probes);
    let text = exposition::encode(&snap).expect("encode");
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (snap, text, parsed)
}

/// The series and labels a `stats` key is exposed as.
fn series_of(key: &str) -> (String, Vec<(&'static str, &'static str)>) {
    match series::of(key) {
        Some(Series::Gauge { name, .. }) => (format!("nvpeer_{name}"), vec![]),
        Some(Series::Counter { name, .. }) => (format!("nvpeer_{name}_total"), vec![]),
        Some(Series::Member { family, value }) => (
            format!("nvpeer_{}_total", family.name()),
            vec![(family.label(), value)],
        ),
        None => panic!("{key} has no series"),
    }
}

#[test]
fn every_counter_equals_debugfs() {
    let r = loaded_node();
    let (_, text, p) = exposition_of(r.path(), Probes::none());
    assert_eq!(p.get("nvpeer_up", &[]), Some(1.0));
    for (i, key) in STATS_KEYS.iter().enumerate() {
        let (name, labels) = series_of(key);
        assert_eq!(
            p.get(&name, &labels),
            Some(fake_value(i) as f64),
            "{key} as {name}{labels:?}\n{text}"
        );
    }
    // Exact in the text too (no float rounding on the way): pinned_bytes is above 2^40.
    let pinned = fake_value(11);
    assert!(
        text.contains(&format!("\nnvpeer_pinned_bytes {pinned}\n")),
        "{text}"
    );
    // The unknown key of a newer module is left out; nothing else appears from stats.
    assert!(!text.contains("future_key"));
    let from_stats = p
        .samples
        .iter()
        .filter(|s| {
            let n = s.name.as_str();
            n.ends_with("_calls_total")
                || n == "nvpeer_errors_total"
                || STATS_KEYS.iter().any(|k| series_of(k).0 == n)
        })
        .count();
    assert_eq!(from_stats, STATS_KEYS.len());
}

#[test]
fn the_core_counters_and_who_serves_nv_mem() {
    let r = loaded_node();
    let (_, _, p) = exposition_of(r.path(), Probes::none());
    for (i, c) in memory_peers::COUNTERS.iter().enumerate() {
        let name = format!("nvpeer_memory_peers_{}_total", &c["num_".len()..]);
        assert_eq!(
            p.get(&name, &[("client", "nv_mem")]),
            Some(100.0 + i as f64),
            "{name}"
        );
    }
    assert_eq!(
        p.get(
            "nvpeer_memory_peers_client_info",
            &[("client", "nv_mem"), ("version", "0.1.0")]
        ),
        Some(1.0)
    );
    assert_eq!(p.get("nvpeer_nv_mem_providers", &[]), Some(1.0));
    assert_eq!(
        p.get(
            "nvpeer_nv_mem_provider_info",
            &[
                ("module", "nvidia_peermem"),
                ("owner", "nvpeer"),
                ("version", "0.1.0")
            ]
        ),
        Some(1.0)
    );
    let tools = p.all("nvpeer_tools_info");
    assert_eq!(tools.len(), 1);
    assert_eq!(
        tools[0].labels.get("version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn one_gauge_per_doctor_check_and_path() {
    let r = loaded_node();
    let (snap, _, p) = exposition_of(r.path(), Probes::none());
    let checks = p.all("nvpeer_doctor_check_passed");
    assert_eq!(checks.len(), snap.report.checks.len());
    assert_eq!(checks.len(), nvpeer_doctor::checks::run_all_count());
    for c in &snap.report.checks {
        let status = exposition::status_name(c.status);
        let want = if status == "pass" { 1.0 } else { 0.0 };
        assert_eq!(
            p.get(
                "nvpeer_doctor_check_passed",
                &[("check", c.id), ("status", status)]
            ),
            Some(want),
            "{}",
            c.id
        );
    }
    // The fake node has no GPU or RDMA device: no path is ready, and the doctor says so.
    assert_eq!(p.all("nvpeer_doctor_path_ready").len(), 3);
    for v in &snap.report.paths {
        let path = exposition::path_name(v.path);
        let state = exposition::state_name(v.state);
        assert_eq!(
            p.get(
                "nvpeer_doctor_path_ready",
                &[("path", path), ("state", state)]
            ),
            Some(if state == "ready" { 1.0 } else { 0.0 })
        );
    }
    assert_eq!(p.get("nvpeer_doctor_ready", &[]), Some(0.0));
    assert_eq!(
        p.get(
            "nvpeer_doctor_check_passed",
            &[("check", "nvpeer.module"), ("status", "pass")]
        ),
        Some(1.0)
    );
}

/// No module, no debugfs: valid output all the same, nvpeer_up 0 and the doctor's gauges.
#[test]
fn a_node_without_nvpeer() {
    let r = FakeRoot::new();
    let (snap, text, p) = exposition_of(r.path(), Probes::none());
    assert!(snap.stats.is_err());
    assert_eq!(p.get("nvpeer_up", &[]), Some(0.0));
    assert_eq!(p.get("nvpeer_nv_mem_providers", &[]), Some(0.0));
    assert!(p.all("nvpeer_live_mrs").is_empty(), "{text}");
    assert!(p.all("nvpeer_errors_total").is_empty());
    assert!(p.all("nvpeer_nv_mem_provider_info").is_empty());
    assert!(p.all("nvpeer_gpu_bar1_size_bytes").is_empty());
    assert_eq!(
        p.all("nvpeer_doctor_check_passed").len(),
        nvpeer_doctor::checks::run_all_count()
    );
    assert_eq!(
        p.get(
            "nvpeer_doctor_check_passed",
            &[("check", "nvpeer.module"), ("status", "fail")]
        ),
        Some(0.0)
    );
    // Its fault series, by code (docs/operations.md); one per check.
    assert_eq!(
        p.get(
            "nvpeer_doctor_fault",
            &[("check", "nvpeer.module"), ("code", "NVP-D016")]
        ),
        Some(1.0)
    );
    assert_eq!(
        p.all("nvpeer_doctor_fault").len(),
        nvpeer_doctor::checks::run_all_count()
    );
    // No path is ready: the NFD label names the root cause's code.
    let fault = get_label(&snap, "gpudirect-rdma.fault").unwrap_or_default();
    assert_eq!(
        Some(fault.as_str()),
        snap.report.root_cause().and_then(|c| c.code)
    );
    assert!(fault.starts_with("NVP-D"), "{fault}");
    let labels = nfd::labels(&snap);
    let get = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("gpudirect-rdma.ready"), Some("false"));
    assert_eq!(get("path.nvpeer"), Some("not_ready"));
    assert_eq!(get("nv_mem.owner"), Some("none"));
    assert_eq!(get("version"), None);
}

/// BAR1 per GPU from the NVML probe; a GPU whose BAR1 NVML could not read has no series.
#[test]
fn bar1_from_nvml() {
    let r = loaded_node();
    let mut probes = Probes::none();
    let gpu = |index: u32, bdf: &str, bar1: Result<Bar1, String>| NvmlGpu {
        index,
        bdf: bdf.into(),
        name: "NVIDIA H100".into(),
        bar1,
        mig: Err("not supported".into()),
    };
    probes.nvml = NvmlProbe::Ok {
        driver: Some("550.163.01".into()),
        gpus: vec![
            gpu(
                0,
                "0000:3b:00.0",
                Ok(Bar1 {
                    total: 128 << 30,
                    used: 3 << 20,
                    free: (128 << 30) - (3 << 20),
                }),
            ),
            gpu(1, "0000:5e:00.0", Err("not supported".into())),
        ],
    };
    let (_, _, p) = exposition_of(r.path(), probes);
    let l = [("gpu", "0"), ("pci_bus_id", "0000:3b:00.0")];
    assert_eq!(
        p.get("nvpeer_gpu_bar1_size_bytes", &l),
        Some((128u64 << 30) as f64)
    );
    assert_eq!(
        p.get("nvpeer_gpu_bar1_used_bytes", &l),
        Some((3u64 << 20) as f64)
    );
    assert_eq!(p.all("nvpeer_gpu_bar1_size_bytes").len(), 1);
    // NVML missing: no BAR1 series, no error.
    let mut missing = Probes::none();
    missing.nvml = NvmlProbe::LibraryMissing;
    let (_, _, p) = exposition_of(r.path(), missing);
    assert!(p.all("nvpeer_gpu_bar1_used_bytes").is_empty());
}

#[test]
fn labels_of_a_node_with_nvpeer() {
    let r = loaded_node();
    let snap = Snapshot::take(r.path(), Probes::none());
    let labels = nfd::labels(&snap);
    let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpudirect-rdma.ready",
            "path.nvpeer",
            "path.nvidia_peermem",
            "path.dmabuf",
            "nv_mem.owner",
            "gpudirect-rdma.fault",
            "version"
        ]
    );
    for (k, v) in &labels {
        let name = format!("nvpeer-{k}");
        assert!(nfd::valid(&name) && nfd::valid(v), "{k}={v}");
    }
    let get = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(get("nv_mem.owner"), Some("nvpeer"));
    assert_eq!(get("version"), Some("0.1.0"));
    // Not ready (no GPU, no NIC): the root cause's fault code.
    assert_eq!(
        get("gpudirect-rdma.fault"),
        snap.report.root_cause().and_then(|c| c.code)
    );
    // nvpeer is the drop-in: NVIDIA's module is not in use here.
    assert_eq!(get("path.nvidia_peermem"), Some("not_in_use"));
    // Without live probes dma-buf cannot be checked; the nvpeer path lacks a GPU and a NIC.
    assert_eq!(get("path.dmabuf"), Some("not_ready"));
}

/// `metrics --textfile DIR --nfd DIR` writes both files; a missing directory fails, or is
/// skipped with --skip-missing-dirs.
#[test]
fn the_two_files() {
    let r = loaded_node();
    let out = tempfile::tempdir().expect("tempdir");
    let args = |textfile: &Path, nfd: &Path, skip: bool| crate::MetricsArgs {
        source: crate::Source {
            root: r.path().to_path_buf(),
            no_probes: true,
        },
        textfile: Some(textfile.to_path_buf()),
        nfd: crate::NfdArgs {
            nfd: Some(nfd.to_path_buf()),
            nfd_expiry: 60,
        },
        skip_missing_dirs: skip,
    };
    crate::metrics(args(out.path(), out.path(), false)).expect("metrics");
    let prom = std::fs::read_to_string(out.path().join(crate::TEXTFILE_NAME)).expect("prom");
    assert!(parse(&prom).is_ok());
    let feat = std::fs::read_to_string(out.path().join(crate::NFD_NAME)).expect("nfd");
    assert!(
        feat.contains("\nfeature.node.kubernetes.io/nvpeer-version=0.1.0\n"),
        "{feat}"
    );
    assert!(feat.contains("\n# +expiry-time="), "{feat}");
    let gone = out.path().join("gone");
    let e = crate::metrics(args(out.path(), &gone, false));
    assert!(matches!(e, Err(crate::Error::NoDir { .. })), "{e:?}");
    assert!(crate::metrics(args(&gone, &gone, true)).is_ok());
    let bad_root = crate::snapshot(&crate::Source {
        root: gone,
        no_probes: true,
    });
    assert!(matches!(bad_root, Err(crate::Error::Root(_))));
}

/// Where promtool is installed (Debian: package `prometheus`), it checks the exposition of both
/// fake nodes, and the alert rules and their unit tests under packaging/prometheus.
#[test]
fn promtool_accepts_the_exposition_and_the_rules() {
    let Some(promtool) = which("promtool") else {
        eprintln!("promtool not installed: not run (apt-get install prometheus)");
        return;
    };
    for r in [loaded_node(), FakeRoot::new()] {
        let (_, text, _) = exposition_of(r.path(), Probes::none());
        let mut child = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(text.as_bytes()).expect("write");
        }
        let out = child.wait_with_output().expect("promtool");
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{said}\n{text}"
        );
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/prometheus");
    for args in [
        vec!["check", "rules", "nvpeer-alerts.yml"],
        vec!["test", "rules", "nvpeer-alerts.test.yml"],
    ] {
        let out = std::process::Command::new(&promtool)
            .args(&args)
            .current_dir(&dir)
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn which(cmd: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

fn get_label(s: &Snapshot, name: &str) -> Option<String> {
    nfd::labels(s)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

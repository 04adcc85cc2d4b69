//! The live CUDA probe against stand-in libcuda builds: one without `cuDriverGetVersion` (the probe
//! reports the API version as unknown), one with only `cuInit` (reported as partial). Each runs in
//! a child process of this test binary, because the dynamic loader reads LD_LIBRARY_PATH at start.

use std::path::Path;
use std::process::Command;

/// Every entry point the probe calls except `cuDriverGetVersion`: initialises, lists no device.
const NO_VERSION: &str = r#"
int cuInit(unsigned f) { (void)f; return 0; }
int cuGetErrorString(int e, const char **s) { (void)e; (void)s; return 1; }
int cuDeviceGetCount(int *n) { *n = 0; return 0; }
int cuDeviceGet(int *d, int o) { (void)d; (void)o; return 101; }
int cuDeviceGetAttribute(int *v, int a, int d) { (void)v; (void)a; (void)d; return 101; }
int cuDeviceGetName(char *n, int l, int d) { (void)n; (void)l; (void)d; return 101; }
int cuDeviceGetPCIBusId(char *n, int l, int d) { (void)n; (void)l; (void)d; return 101; }
int cuDeviceTotalMem_v2(unsigned long *b, int d) { (void)b; (void)d; return 101; }
"#;

/// Only `cuInit`.
const ONLY_INIT: &str = "int cuInit(unsigned f) { (void)f; return 0; }\n";

/// Builds `src` as `dir/libcuda.so` with the C compiler Rust links with.
fn stub(dir: &Path, src: &str) {
    std::fs::write(dir.join("stub.c"), src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(dir.join("stub.c"))
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e} (the C compiler Rust links with)"));
    assert!(st.success(), "{cc} failed");
}

/// Runs the probe in a child with `dir` first on the loader's path; returns its JSON.
fn probe_in(dir: &Path) -> serde_json::Value {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_probe",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LD_LIBRARY_PATH", dir)
        .env("DOCTOR_STUB_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.split_once("PROBE ").map(|(_, j)| j))
        .unwrap_or_else(|| panic!("no probe line in {text}"));
    serde_json::from_str(line).unwrap()
}

#[test]
#[ignore = "run by stub_libcuda_* in a child process"]
fn child_probe() {
    if std::env::var_os("DOCTOR_STUB_CHILD").is_some() {
        println!(
            "PROBE {}",
            serde_json::to_string(&nvpeer_doctor::probes::probe_cuda()).unwrap()
        );
    }
}

#[test]
fn stub_libcuda_without_driver_get_version() {
    let dir = tempfile::tempdir().unwrap();
    stub(dir.path(), NO_VERSION);
    let v = probe_in(dir.path());
    assert_eq!(v["state"], "ok", "{v}");
    assert_eq!(v["driver_api"], serde_json::Value::Null);
    assert_eq!(v["gpus"], serde_json::json!([]));
}

#[test]
fn stub_libcuda_with_only_cu_init() {
    let dir = tempfile::tempdir().unwrap();
    stub(dir.path(), ONLY_INIT);
    let v = probe_in(dir.path());
    assert_eq!(v["state"], "failed", "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("lacks cuGetErrorString") && e.contains("partial or stub"),
        "{e}"
    );
}

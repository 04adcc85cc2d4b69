//! The kernel: Rust support and its build artifacts, the kernel configuration, user memory, Secure
//! Boot and module signing.

use super::*;

#[test]
fn kernel_without_rust_fails() {
    let f = Fx::healthy();
    f.file(
        &format!("/boot/config-{REL}"),
        "CONFIG_INFINIBAND=y\nCONFIG_INFINIBAND_USER_MEM=y\n# CONFIG_RUST is not set\n",
    );
    let r = f.report();
    assert_eq!(status(&r, "kernel.rust"), Status::Fail);
    assert_eq!(r.exit_code, 1);
}

#[test]
fn rust_artifacts_missing_warns() {
    let f = Fx::healthy();
    f.rm(&format!("/lib/modules/{REL}/build/rust"));
    let r = f.report();
    let c = check(&r, "kernel.rust");
    assert_eq!(c.status, Status::Warn);
    assert!(c.summary.contains("rust/libkernel.rmeta"));
    assert!(c.fix.as_ref().unwrap().contains("modules_prepare"));
    // On Ubuntu, the package that ships them for this kernel.
    f.file("/etc/os-release", UBUNTU_2604);
    let r = f.report();
    let c = check(&r, "kernel.rust");
    assert!(c
        .fix
        .as_ref()
        .unwrap()
        .contains(&format!("apt install linux-lib-rust-{REL}")));
    assert!(c
        .details
        .iter()
        .any(|d| d == "distribution: Ubuntu 26.04 LTS"));
}

#[test]
fn config_from_proc_config_gz_and_rustc_match() {
    use flate2::write::GzEncoder;
    use std::io::Write;
    let f = Fx::healthy();
    f.rm(&format!("/boot/config-{REL}"));
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"CONFIG_RUST=y\nCONFIG_RUSTC_VERSION_TEXT=\"rustc 1.97.1 (8bab26f4f 2026-07-14)\"\nCONFIG_INFINIBAND=y\nCONFIG_INFINIBAND_USER_MEM=y\n")
        .unwrap();
    f.file("/proc/config.gz", gz.finish().unwrap());
    let mut p = Probes::none();
    p.rustc = Some("rustc 1.97.1 (8bab26f4f 2026-07-14)".into());
    let r = f.report_with(p.clone());
    assert_eq!(status(&r, "kernel.rust"), Status::Pass);
    assert_eq!(
        data(check(&r, "kernel.config"))["source"],
        "/proc/config.gz"
    );
    p.rustc = Some("rustc 1.95.0 (59807616e 2026-04-14)".into());
    let r = f.report_with(p);
    assert_eq!(status(&r, "kernel.rust"), Status::Warn);
    assert!(check(&r, "kernel.rust")
        .fix
        .as_ref()
        .unwrap()
        .contains("E0514"));
    // Ubuntu names the kernel's compiler by its versioned package; Debian by rustup's toolchain.
    f.file("/etc/os-release", UBUNTU_2604);
    let mut p = Probes::none();
    p.rustc = Some("rustc 1.95.0 (59807616e 2026-04-14)".into());
    let r = f.report_with(p.clone());
    assert!(check(&r, "kernel.rust")
        .fix
        .as_ref()
        .unwrap()
        .contains("apt install rustc-1.97"));
    f.file(
        "/etc/os-release",
        "ID=debian\nPRETTY_NAME=\"Debian GNU/Linux 14 (forky)\"\n",
    );
    let r = f.report_with(p);
    assert!(check(&r, "kernel.rust")
        .fix
        .as_ref()
        .unwrap()
        .contains("rustup toolchain install 1.97.1"));
}

#[test]
fn no_kernel_config_is_unknown() {
    let f = Fx::healthy();
    f.rm(&format!("/boot/config-{REL}"));
    let r = f.report();
    assert_eq!(status(&r, "kernel.rust"), Status::Unknown);
    assert_eq!(status(&r, "kernel.config"), Status::Unknown);
}

#[test]
fn kernel_without_user_mem_fails() {
    let f = Fx::healthy();
    f.file(
        &format!("/boot/config-{REL}"),
        "CONFIG_RUST=y\nCONFIG_INFINIBAND=y\n",
    );
    assert_eq!(status(&f.report(), "kernel.config"), Status::Fail);
    f.module("mlx_compat");
    assert_eq!(
        status(&f.report(), "kernel.config"),
        Status::Pass,
        "OFED brings its own RDMA core"
    );
}

#[test]
fn secure_boot_and_signing() {
    let f = Fx::healthy();
    assert_eq!(status(&f.report(), "kernel.signing"), Status::Pass);
    f.file(
        "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        [6u8, 0, 0, 0, 1],
    );
    f.file(
        "/sys/kernel/security/lockdown",
        "none [integrity] confidentiality\n",
    );
    f.file("/sys/module/nvidia_peermem/taint", "OE\n");
    let r = f.report();
    let c = check(&r, "kernel.signing");
    assert_eq!(c.status, Status::Warn);
    assert_eq!(data(c)["secure_boot"], true);
    assert_eq!(data(c)["lockdown"], "integrity");
    assert_eq!(data(c)["nvpeer_taint"], "OE");
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    assert!(check(&r, "kernel.signing")
        .fix
        .as_ref()
        .unwrap()
        .contains("make sign"));
    f.file("/etc/os-release", UBUNTU_2604);
    let fix = check(&f.report(), "kernel.signing").fix.clone().unwrap();
    assert!(fix.contains("mokutil --import /var/lib/shim-signed/mok/MOK.der"));
    assert!(fix.contains("Key was rejected by service"));
    f.file("/proc/sys/kernel/modules_disabled", "1\n");
    assert_eq!(status(&f.report(), "kernel.signing"), Status::Fail);
}

//! The Rust mirrors of both ioctl ABIs must match the C headers in testbench/emu/include:
//! compile a probe with the host C compiler, compare sizes, key offsets and ioctl numbers.

use nvpeer_emu::{nvp2p::abi as p, peer_mem::abi as c};
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

/// Output of the C probe, compiled and run once per test process (the tests run in parallel and
/// would otherwise race on the same source and binary paths).
fn probe() -> String {
    static OUT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OUT.get_or_init(compile_and_run_probe).clone()
}

fn compile_and_run_probe() -> String {
    // The checkout being tested, read when the test runs: `cargo test` sets it. The compile-time
    // value names the checkout that built this binary, which a target directory shared between
    // checkouts (the bench's cache) may have reused.
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let root = PathBuf::from(manifest).join("../../testbench/emu/include");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("layout_probe.c");
    let bin = dir.join("layout_probe");
    std::fs::write(
        &src,
        r#"
#include <stdio.h>
#include <stddef.h>
#include "nvp2p_emu_ioctl.h"
#include "peer_mem_emu_ioctl.h"
#define S(t) printf(#t " %zu\n", sizeof(struct t));
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f));
#define I(n) printf(#n " %lu\n", (unsigned long)(n));
int main(void) {
  S(nvp2p_emu_alloc) S(nvp2p_emu_free) S(nvp2p_emu_pid_op) S(nvp2p_emu_alloc_info)
  S(nvp2p_emu_pin_info) S(nvp2p_emu_list) S(nvp2p_emu_fault) S(nvp2p_emu_config)
  S(nvp2p_emu_stats) S(nvp2p_emu_client)
  O(nvp2p_emu_stats, violations_total) O(nvp2p_emu_stats, free_calls_in_callback)
  O(nvp2p_emu_client, state) O(nvp2p_emu_config, unmap_delay_ns) O(nvp2p_emu_alloc, handle)
  S(pme_config) S(pme_reg) S(pme_handle_op) S(pme_query) S(pme_fault) S(pme_delay) S(pme_stats)
  S(pme_violation) S(pme_client_info)
  O(pme_reg, core_context) O(pme_query, invalidations) O(pme_stats, fault_fired) O(pme_violation, text)
  O(pme_client_info, version)
  I(NVP2P_EMU_IOC_ALLOC) I(NVP2P_EMU_IOC_STATS) I(NVP2P_EMU_IOC_CLIENT) I(NVP2P_EMU_IOC_CHECK_LEAKS)
  I(PME_IOC_REGISTER) I(PME_IOC_ACTIVATE) I(PME_IOC_GET_STATS) I(PME_IOC_GET_CLIENT) I(PME_IOC_RESET)
  I(NVP2P_EMU_ALLOC_COHERENT) I(NVP2P_EMU_ALLOC_MIG) I(NVP2P_EMU_ALLOC_VGPU)
  I(NVP2P_EMU_ALLOC_NO_P2P) I(NVP2P_EMU_ALLOC_FLAGS_ALL) I(NVP2P_EMU_ALLOC_LIVE) I(NVP2P_EMU_ALLOC_FREED)
  I(NVP2P_EMU_V_COUNT) I(PME_R_COUNT) I(PME_FP_COUNT) I(PME_DP_COUNT) I(NVP2P_EMU_OP_COUNT)
  I(PME_CFG_STOP_NOTIFIER_BUG) I(PME_CFG_SYSFS) I(PME_CFG_DEREG_PAGES_QUIRK) I(PME_CFG_STRICT_SG)
  I(PME_CFG_LOCKDEP_INVAL) I(PME_CFG_ACQUIRE_IN_INVAL) I(PME_CFG_ALL_FLAGS)
  return 0;
}
"#,
    )
    .unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .arg("-I")
        .arg(&root)
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}' (set CC): {e}"));
    assert!(
        st.success(),
        "layout probe did not compile against {}",
        root.display()
    );
    String::from_utf8(Command::new(&bin).output().unwrap().stdout).unwrap()
}

fn get(out: &str, key: &str) -> usize {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("{key} missing from probe output"))
        .parse()
        .unwrap()
}

#[test]
fn structs_match_headers() {
    let out = probe();
    let sizes: &[(&str, usize)] = &[
        ("nvp2p_emu_alloc", size_of::<p::Alloc>()),
        ("nvp2p_emu_free", size_of::<p::Free>()),
        ("nvp2p_emu_pid_op", size_of::<p::PidOp>()),
        ("nvp2p_emu_alloc_info", size_of::<p::AllocInfo>()),
        ("nvp2p_emu_pin_info", size_of::<p::PinInfo>()),
        ("nvp2p_emu_list", size_of::<p::List>()),
        ("nvp2p_emu_fault", size_of::<p::Fault>()),
        ("nvp2p_emu_config", size_of::<p::Config>()),
        ("nvp2p_emu_stats", size_of::<p::Stats>()),
        ("nvp2p_emu_client", size_of::<p::Client>()),
        ("pme_config", size_of::<c::Config>()),
        ("pme_reg", size_of::<c::Reg>()),
        ("pme_handle_op", size_of::<c::HandleOp>()),
        ("pme_query", size_of::<c::Query>()),
        ("pme_fault", size_of::<c::Fault>()),
        ("pme_delay", size_of::<c::Delay>()),
        ("pme_stats", size_of::<c::Stats>()),
        ("pme_violation", size_of::<c::Violation>()),
        ("pme_client_info", size_of::<c::ClientInfo>()),
    ];
    for (name, rust) in sizes {
        assert_eq!(get(&out, name), *rust, "size of struct {name}");
    }
    let offsets: &[(&str, usize)] = &[
        (
            "nvp2p_emu_stats.violations_total",
            offset_of!(p::Stats, violations_total),
        ),
        (
            "nvp2p_emu_stats.free_calls_in_callback",
            offset_of!(p::Stats, free_calls_in_callback),
        ),
        ("nvp2p_emu_client.state", offset_of!(p::Client, state)),
        (
            "nvp2p_emu_config.unmap_delay_ns",
            offset_of!(p::Config, unmap_delay_ns),
        ),
        ("nvp2p_emu_alloc.handle", offset_of!(p::Alloc, handle)),
        ("pme_reg.core_context", offset_of!(c::Reg, core_context)),
        (
            "pme_query.invalidations",
            offset_of!(c::Query, invalidations),
        ),
        ("pme_stats.fault_fired", offset_of!(c::Stats, fault_fired)),
        ("pme_violation.text", offset_of!(c::Violation, text)),
        (
            "pme_client_info.version",
            offset_of!(c::ClientInfo, version),
        ),
    ];
    for (name, rust) in offsets {
        assert_eq!(get(&out, name), *rust, "offset of {name}");
    }
}

/// Each mirrored flag equals its header's, and together they are every flag the header accepts
/// (`all`).
fn flags_match(out: &str, flags: &[(&str, u32)], all: &str) {
    for (name, rust) in flags {
        assert_eq!(get(out, name), *rust as usize, "{name}");
    }
    assert_eq!(
        get(out, all),
        flags.iter().fold(0, |acc, (_, f)| acc | *f) as usize,
        "{all}"
    );
}

#[test]
fn tables_match_headers() {
    let out = probe();
    use nvpeer_emu::nvp2p::alloc_flags as af;
    let flags = [
        ("NVP2P_EMU_ALLOC_COHERENT", af::COHERENT),
        ("NVP2P_EMU_ALLOC_MIG", af::MIG),
        ("NVP2P_EMU_ALLOC_VGPU", af::VGPU),
        ("NVP2P_EMU_ALLOC_NO_P2P", af::NO_P2P),
    ];
    flags_match(&out, &flags, "NVP2P_EMU_ALLOC_FLAGS_ALL");
    use nvpeer_emu::nvp2p::alloc_state;
    assert_eq!(
        get(&out, "NVP2P_EMU_ALLOC_LIVE"),
        alloc_state::LIVE as usize
    );
    assert_eq!(
        get(&out, "NVP2P_EMU_ALLOC_FREED"),
        alloc_state::FREED as usize
    );
    use nvpeer_emu::peer_mem::cfg_flags as cf;
    let cfg = [
        ("PME_CFG_STOP_NOTIFIER_BUG", cf::STOP_NOTIFIER_BUG),
        ("PME_CFG_SYSFS", cf::SYSFS),
        ("PME_CFG_DEREG_PAGES_QUIRK", cf::DEREG_PAGES_QUIRK),
        ("PME_CFG_STRICT_SG", cf::STRICT_SG),
        ("PME_CFG_LOCKDEP_INVAL", cf::LOCKDEP_INVAL),
        ("PME_CFG_ACQUIRE_IN_INVAL", cf::ACQUIRE_IN_INVAL),
    ];
    flags_match(&out, &cfg, "PME_CFG_ALL_FLAGS");
    assert_eq!(
        get(&out, "NVP2P_EMU_V_COUNT"),
        nvpeer_emu::nvp2p::VIOLATIONS.len()
    );
    assert_eq!(
        get(&out, "NVP2P_EMU_OP_COUNT"),
        nvpeer_emu::nvp2p::OPS.len()
    );
    assert_eq!(
        get(&out, "PME_R_COUNT") - 1,
        nvpeer_emu::peer_mem::RULES.len()
    );
    assert_eq!(
        get(&out, "PME_FP_COUNT"),
        nvpeer_emu::peer_mem::FAULT_POINTS.len()
    );
    assert_eq!(
        get(&out, "PME_DP_COUNT"),
        nvpeer_emu::peer_mem::DELAY_POINTS.len()
    );
}

#[test]
fn ioctl_numbers_match_headers() {
    // nix's request_code_* macros compute what _IOWR/_IOW/_IO do; compare with the header.
    let out = probe();
    let rw = |nr: u8, sz: usize| nix::request_code_readwrite!(0xE7, nr, sz) as usize;
    // The core emulator uses magic 0xE8.
    let crw = |nr: u8, sz: usize| nix::request_code_readwrite!(0xE8, nr, sz) as usize;
    let w = |nr: u8, sz: usize| nix::request_code_write!(0xE8, nr, sz) as usize;
    let r = |nr: u8, sz: usize| nix::request_code_read!(0xE8, nr, sz) as usize;
    assert_eq!(
        get(&out, "NVP2P_EMU_IOC_ALLOC"),
        rw(0, size_of::<p::Alloc>())
    );
    assert_eq!(
        get(&out, "NVP2P_EMU_IOC_STATS"),
        rw(9, size_of::<p::Stats>())
    );
    assert_eq!(
        get(&out, "NVP2P_EMU_IOC_CLIENT"),
        rw(0x0b, size_of::<p::Client>())
    );
    assert_eq!(
        get(&out, "NVP2P_EMU_IOC_CHECK_LEAKS"),
        nix::request_code_none!(0xE7, 0x0c) as usize
    );
    assert_eq!(get(&out, "PME_IOC_REGISTER"), crw(1, size_of::<c::Reg>()));
    assert_eq!(
        get(&out, "PME_IOC_ACTIVATE"),
        w(2, size_of::<c::HandleOp>())
    );
    assert_eq!(get(&out, "PME_IOC_GET_STATS"), r(9, size_of::<c::Stats>()));
    assert_eq!(
        get(&out, "PME_IOC_GET_CLIENT"),
        crw(0x0b, size_of::<c::ClientInfo>())
    );
    assert_eq!(
        get(&out, "PME_IOC_RESET"),
        nix::request_code_none!(0xE8, 0x0c) as usize
    );
}

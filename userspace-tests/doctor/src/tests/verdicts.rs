//! The overall verdict: ready, not ready, could not check; the JSON report; roots that are missing,
//! empty or live.

use super::*;

#[test]
fn healthy_node_is_ready() {
    let r = Fx::healthy().report();
    for c in &r.checks {
        assert!(c.status != Status::Fail, "{} failed: {}", c.id, c.summary);
    }
    assert_eq!(r.verdict, Verdict::Ready);
    assert_eq!(r.exit_code, 0);
    assert_eq!(status(&r, "pci.topology"), Status::Pass);
    assert_eq!(data(check(&r, "pci.topology"))["pairs"][0]["class"], "PIX");
    let table = r.render_table(false);
    assert!(table.contains("✔") && table.contains("READY"), "{table}");
}

#[test]
fn any_gating_failure_means_not_ready() {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    assert_eq!(status(&r, "nvpeer.module"), Status::Fail);
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(r.exit_code, 1);
    let table = r.render_table(false);
    assert!(
        table.contains("✘") && table.contains("→ [NVP-D016] Install nvpeer"),
        "{table}"
    );
}

#[test]
fn unreadable_gating_input_means_could_not_check() {
    let f = Fx::healthy();
    f.rm("/proc/kallsyms");
    let r = f.report();
    assert_eq!(status(&r, "nvidia.p2p_symbols"), Status::Unknown);
    assert_eq!(status(&r, "rdma.peer_api"), Status::Unknown);
    assert_eq!(r.verdict, Verdict::CouldNotCheck);
    assert_eq!(r.exit_code, 2);
}

#[test]
fn warnings_do_not_change_the_verdict() {
    let f = Fx::healthy();
    f.file("/proc/cpuinfo", "flags\t: fpu hypervisor\n");
    let r = f.report();
    assert_eq!(status(&r, "platform.virtualization"), Status::Warn);
    assert!(check(&r, "platform.virtualization").fix.is_some());
    assert_eq!(r.verdict, Verdict::Ready);
}

#[test]
fn json_report_has_every_check() {
    let r = Fx::healthy().report();
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(v["verdict"], "ready");
    assert_eq!(v["exit_code"], 0);
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in [
        "nvidia.driver",
        "nvidia.flavour",
        "rdma.peer_api",
        "peer.clients",
        "pci.acs",
        "kernel.rust",
        "kernel.signing",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
}

#[test]
fn missing_root_is_could_not_check() {
    let args = Args {
        json: true,
        no_probes: true,
        ..Args::new("/nonexistent/doctor-root".into(), Require::Any)
    };
    let e = crate::run(args).unwrap_err();
    assert!(matches!(e, crate::DoctorError::NotADirectory(_)));
    assert_eq!(
        e.to_string(),
        "--root /nonexistent/doctor-root: not a directory"
    );
}

#[test]
fn empty_root_fails_cleanly() {
    let f = Fx::new();
    let r = f.report();
    assert_eq!(r.verdict, Verdict::NotReady);
    assert_eq!(status(&r, "nvidia.driver"), Status::Fail);
    assert_eq!(status(&r, "pci.topology"), Status::Skip);
    assert_eq!(status(&r, "kernel.rust"), Status::Unknown);
}

#[test]
fn live_system_does_not_panic() {
    // Whatever this machine is, every check must produce a result (probes included).
    let args = Args {
        verbose: true,
        ..Args::new("/".into(), Require::Any)
    };
    let r = diagnose(&args, Probes::run());
    assert_eq!(r.checks.len(), crate::checks::run_all_count());
    assert!(!r.render_table(true).is_empty());
}

/// `--npd`: node-problem-detector's line says ready with the paths, or the root cause by its
/// fault code and id, in
/// ASCII within NPD's default 80 bytes; the exit status is the verdict's (0, 1, 2 as NPD reads
/// them).
#[test]
fn the_npd_line_names_the_root_cause_within_80_ascii_bytes() {
    let ready = crate::npd::line(&Fx::healthy().report());
    assert!(ready.starts_with("GPUDirect RDMA ready: nvpeer"), "{ready}");
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let line = crate::npd::line(&r);
    assert!(
        line.starts_with("GPUDirect RDMA not ready: NVP-D016 nvpeer.module "),
        "{line}"
    );
    assert_eq!(r.exit_code, 1);
    for l in [&ready, &line] {
        assert!(l.len() <= crate::npd::MAX_LEN && l.is_ascii(), "{l}");
    }
}

/// Every check has its fault code, in the JSON and on the text report's fix line of a check that
/// does not pass (docs/operations.md).
#[test]
fn every_check_carries_its_fault_code() {
    for d in crate::checks::defs::CHECKS {
        assert!(
            nvpeer_verdict::codes::doctor(d.id).is_some(),
            "{} has no fault code in nvpeer_verdict::codes",
            d.id
        );
    }
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let r = f.report();
    let c = r.get("nvpeer.module").unwrap();
    assert_eq!(c.code, Some("NVP-D016"));
    let j = serde_json::to_value(c).unwrap();
    assert_eq!(j["code"], "NVP-D016");
    let text = r.render_table(false);
    assert!(text.contains("→ [NVP-D016] "), "{text}");
}

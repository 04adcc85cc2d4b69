//! `--slurm`: what the health check does to the node, and the Slurm commands it runs (against
//! stand-in `sinfo` and `scontrol` scripts that record their arguments).

use super::Fx;
use crate::slurm::{decide, line, reason, Action, Mode, NodeState, Slurm, SlurmError, PREFIX};
use std::fs;
use std::os::unix::fs::PermissionsExt;

fn node(state: &str, reason: &str) -> NodeState {
    NodeState {
        state: state.into(),
        reason: reason.into(),
    }
}

fn broken() -> crate::report::Report {
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    f.report()
}

#[test]
fn a_node_that_is_not_ready_is_drained_with_its_fault_code() {
    let r = broken();
    let why = reason(&r);
    assert!(why.starts_with("nvpeer: NVP-D016 nvpeer.module: "), "{why}");
    assert!(
        why.len() <= crate::slurm::MAX_REASON && why.is_ascii(),
        "{why}"
    );
    for state in ["idle", "alloc", "mix", "idle*", "maint"] {
        assert_eq!(
            decide(&r, &node(state, "none")),
            Action::Drain(why.clone()),
            "{state}"
        );
    }
    // Drained by nvpeer already: the same fault leaves it, another fault updates the reason.
    assert!(matches!(decide(&r, &node("drain", &why)), Action::Leave(_)));
    let other = format!("{PREFIX} NVP-D001 nvidia.driver: not loaded");
    assert_eq!(decide(&r, &node("drng", &other)), Action::Drain(why));
}

#[test]
fn a_node_drained_or_down_for_another_reason_is_left_alone() {
    let r = broken();
    for (state, why) in [
        ("drain", "disk replaced"),
        ("drng", "NHC: check_fs_mount"),
        ("down*", "Not responding"),
        ("fail", "PSU replaced"),
        ("maint", "firmware update"),
    ] {
        assert!(
            matches!(decide(&r, &node(state, why)), Action::Leave(_)),
            "{state} {why}"
        );
    }
    let ready = Fx::healthy().report();
    assert!(matches!(
        decide(&ready, &node("drain", "disk replaced")),
        Action::Leave(_)
    ));
}

#[test]
fn a_ready_node_is_resumed_only_when_nvpeer_drained_it() {
    let ready = Fx::healthy().report();
    let ours = format!("{PREFIX} NVP-D016 nvpeer.module: not loaded");
    assert_eq!(decide(&ready, &node("drain", &ours)), Action::Resume);
    assert_eq!(decide(&ready, &node("drng", &ours)), Action::Resume);
    assert!(matches!(
        decide(&ready, &node("idle", "none")),
        Action::Leave(_)
    ));
    let l = line(Mode::Health, "gpu1", &ready, &Action::Resume, false);
    assert_eq!(
        l,
        "nvpeer doctor --slurm: node gpu1 ready; resumed (nvpeer had drained it)"
    );
}

#[test]
fn a_prolog_drains_a_node_that_is_not_ready_and_fails_the_job_but_never_resumes() {
    use nvpeer_verdict::Verdict as Exit;
    let ready = Fx::healthy().report();
    let r = broken();
    for mode in [Mode::Prolog, Mode::Epilog] {
        // Ready: nothing asked of slurmctld, exit 0, even on a node nvpeer drained.
        assert_eq!(mode.settled(&ready), Some(Action::Leave("ready".into())));
        assert_eq!(mode.verdict(ready.verdict), Exit::Passed);
        // Not ready: Slurm is asked and the node drained as by the health check, exit 1.
        assert_eq!(mode.settled(&r), None);
        assert_eq!(mode.verdict(r.verdict), Exit::Failed);
        // Could not check: neither drained nor a failed job (slurmctld would drain on exit 1).
        let mut unknown = Fx::healthy().report();
        unknown.verdict = crate::report::Verdict::CouldNotCheck;
        assert!(matches!(mode.settled(&unknown), Some(Action::Leave(_))));
        assert_eq!(mode.verdict(unknown.verdict), Exit::Passed);
    }
    assert_eq!(Mode::Health.settled(&ready), None);
    assert_eq!(Mode::Health.verdict(r.verdict), Exit::Failed);
    let l = line(Mode::Prolog, "gpu1", &r, &Action::Drain(reason(&r)), false);
    assert!(
        l.starts_with(
            "nvpeer doctor --slurm=prolog: node gpu1 not ready; drained: nvpeer: NVP-D016 "
        ) && l.ends_with("; exit 1: the job does not start here"),
        "{l}"
    );
}

#[test]
fn the_slurm_flag_takes_its_hook() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: crate::Args,
    }
    let parse = |v: &[&str]| Cli::try_parse_from([&["doctor"], v].concat()).map(|c| c.a.slurm);
    assert_eq!(parse(&[]).unwrap(), None);
    assert_eq!(parse(&["--slurm"]).unwrap(), Some(Mode::Health));
    assert_eq!(parse(&["--slurm=prolog"]).unwrap(), Some(Mode::Prolog));
    assert_eq!(parse(&["--slurm=epilog"]).unwrap(), Some(Mode::Epilog));
    assert!(parse(&["--slurm=job"]).is_err());
    // Without `=`, what follows is not the hook: `--slurm prolog` is a stray argument.
    assert!(parse(&["--slurm", "prolog"]).is_err());
    assert!(parse(&["--slurm-dry-run"]).is_err());
}

/// Stand-ins for sinfo and scontrol: sinfo prints STATE|REASON, scontrol appends its arguments
/// (one per line, then `--`) to a log.
fn fake_slurm(sinfo_out: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, body: String| {
        let p = d.path().join(name);
        fs::write(&p, body).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    };
    let log = d.path().join("log");
    write(
        "sinfo",
        format!("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >> '{}'\necho -- >> '{}'\nprintf '%s\\n' '{sinfo_out}'\n", log.display(), log.display()),
    );
    write(
        "scontrol",
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >> '{}'\necho -- >> '{}'\n",
            log.display(),
            log.display()
        ),
    );
    d
}

#[test]
fn the_slurm_commands_it_runs() {
    let d = fake_slurm("idle|none");
    let s = Slurm::new(Some(d.path()));
    let st = s.state("gpu1").unwrap();
    assert_eq!(st, node("idle", "none"));
    let r = broken();
    let a = decide(&r, &st);
    s.act("gpu1", &a).unwrap();
    let log = fs::read_to_string(d.path().join("log")).unwrap();
    let calls: Vec<&str> = log.split("--\n").filter(|c| !c.is_empty()).collect();
    assert_eq!(
        calls[0],
        "--noheader\n--Node\n--nodes\ngpu1\n--format\n%t|%E\n"
    );
    assert_eq!(
        calls[1],
        format!(
            "update\nNodeName=gpu1\nState=DRAIN\nReason={}\n",
            reason(&r)
        )
    );
    s.act("gpu1", &Action::Resume).unwrap();
    let log = fs::read_to_string(d.path().join("log")).unwrap();
    assert!(
        log.ends_with("update\nNodeName=gpu1\nState=RESUME\n--\n"),
        "{log}"
    );
    // A reason with spaces and a `|` of an admin's is read whole.
    let d = fake_slurm("drain|disk replaced | ticket 42");
    let st = Slurm::new(Some(d.path())).state("gpu1").unwrap();
    assert_eq!(st, node("drain", "disk replaced | ticket 42"));
}

#[test]
fn a_missing_node_or_a_failing_command_is_an_error() {
    let d = fake_slurm("");
    let e = Slurm::new(Some(d.path())).state("gpu9").unwrap_err();
    assert!(matches!(e, SlurmError::NoSuchNode(_)), "{e}");
    let gone = tempfile::tempdir().unwrap();
    let e = Slurm::new(Some(gone.path())).state("gpu1").unwrap_err();
    assert!(matches!(e, SlurmError::Spawn(..)), "{e}");
    let p = d.path().join("scontrol");
    fs::write(
        &p,
        "#!/bin/sh\necho 'Invalid node name specified' >&2\nexit 1\n",
    )
    .unwrap();
    let e = Slurm::new(Some(d.path()))
        .act("gpu9", &Action::Resume)
        .unwrap_err();
    assert!(e.to_string().contains("Invalid node name specified"), "{e}");
}

#[test]
fn a_hook_fails_a_job_only_for_a_node_that_is_not_ready() {
    use nvpeer_verdict::Verdict as Exit;
    let args = |root: &std::path::Path, mode: Mode| {
        // (nvpeer's path: without live probes the dma-buf path is "could not check")
        let mut a = crate::Args::new(root.to_path_buf(), crate::report::Require::Nvpeer);
        a.slurm = Some(mode);
        a.slurm_node = Some("gpu1".into());
        a
    };
    // Its own arguments unusable (no such root, a profile that is not there): exit 0, nothing
    // drained; the health check says the same as an error (exit 2).
    let gone = std::path::Path::new("/nonexistent-nvpeer-root");
    assert_eq!(crate::run(args(gone, Mode::Prolog)).unwrap(), Exit::Passed);
    assert!(crate::run(args(gone, Mode::Health)).is_err());
    let f = Fx::healthy();
    f.rm("/sys/module/nvidia_peermem");
    let mut a = args(f.dir.path(), Mode::Epilog);
    a.profile = Some("no-such-profile".into());
    assert_eq!(crate::run(a).unwrap(), Exit::Passed);
    // Not ready, and Slurm cannot be asked: the job still fails (slurmctld drains the node).
    let empty = tempfile::tempdir().unwrap();
    let mut a = args(f.dir.path(), Mode::Prolog);
    a.slurm_bin = Some(empty.path().to_path_buf());
    assert_eq!(crate::run(a).unwrap(), Exit::Failed);
    // A dry run changes nothing, slurmctld's own drain on exit 1 included.
    let d = fake_slurm("idle|none");
    let mut a = args(f.dir.path(), Mode::Prolog);
    a.slurm_bin = Some(d.path().to_path_buf());
    a.slurm_dry_run = true;
    assert_eq!(crate::run(a).unwrap(), Exit::Passed);
    assert!(!fs::read_to_string(d.path().join("log"))
        .unwrap()
        .contains("State=DRAIN"));
}

//! The `nvpeer` binary as a user meets it: version, exit statuses of bad arguments, a closed
//! pipe.

use std::process::{Command, Stdio};

fn nvpeer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvpeer"))
}

#[test]
fn reports_its_version() {
    let o = nvpeer().arg("--version").output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("nvpeer {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    for args in [
        &["bench", "-s", "4G"][..],
        &["bench", "-x", "300"],
        &["validate", "--xfer-size", "4G"],
        &["validate", "--max-size", "0"],
        &["validate", "--server", "--bind", "0.0.0.0"],
        // -b: the default tests include reg and write_lat; no bidirectional perftest pairing.
        &["bench", "-b"],
        &["bench", "-b", "--test", "write_bw,write_lat"],
        &[
            "bench",
            "-b",
            "--perftest",
            "--client",
            "127.0.0.1",
            "--test",
            "write_bw",
        ],
    ] {
        let o = nvpeer().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?}");
    }
}

#[test]
fn bidirectional_errors_say_what_to_change() {
    let o = nvpeer().args(["bench", "-b"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("-b runs the bandwidth tests") && err.contains("--test"),
        "{err}"
    );
    let o = nvpeer().args(["bench", "--help"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("-b, --bidirectional"), "{out}");
}

#[test]
fn help_names_the_exit_statuses() {
    let o = nvpeer().args(["validate", "--help"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Exit status:") && out.contains("2  could not run"),
        "{out}"
    );
}

#[test]
fn a_closed_pipe_ends_it_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    // `nvpeer validate --help | head -0`: the reader is gone before the first write.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh from pipe() and owned here exactly once.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let o = nvpeer()
        .args(["validate", "--help"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(o.status.code(), Some(101));
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}", o.status);
}

#[test]
fn validate_report_renders_a_saved_run() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../harness/tests/fixtures");
    let dir = std::env::temp_dir().join(format!("nvpeer-cli-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = nvpeer()
        .args(["validate", "--report"])
        .arg(&dir)
        .arg("--report-from")
        .arg(format!("{fixtures}/validate-emu.json"))
        .arg("--report-bench")
        .arg(format!("{fixtures}/bench-host.json"))
        .output()
        .unwrap();
    // The saved run passed: its status, the page and the files beside it.
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for f in [
        "index.html",
        "validate.json",
        "validate.xml",
        "bench-1.json",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("report: "));
    // Its options without --report, or a bench document given as the run: exit 2, named.
    for (args, says) in [
        (
            vec!["validate", "--report-from", "x.json"],
            "need --report DIR",
        ),
        (
            vec![
                "validate",
                "--report",
                dir.to_str().unwrap(),
                "--report-from",
                &format!("{fixtures}/bench-host.json"),
            ],
            "is not an `nvpeer validate --json` document",
        ),
    ] {
        let o = nvpeer().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{o:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

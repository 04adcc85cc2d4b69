use super::*;
use std::os::unix::fs::symlink;

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(d)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_a_new_file_and_replaces_an_old_one_whole() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("report.json");
    write_file(&p, b"one\n").expect("first");
    write_file(&p, b"two\n").expect("second");
    assert_eq!(fs::read(&p).expect("read"), b"two\n");
    assert_eq!(names(d.path()), ["report.json"]);
    let mode = fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, FILE_MODE);
}

#[test]
fn a_planted_symlink_is_refused_and_its_target_untouched() {
    let d = tempfile::tempdir().expect("tempdir");
    let target = d.path().join("victim");
    fs::write(&target, "precious\n").expect("victim");
    let p = d.path().join("perftest_out.json");
    symlink(&target, &p).expect("plant");
    let e = write_file(&p, b"attacker's choice\n").expect_err("refused");
    assert!(matches!(e, Error::Symlink { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("is a symbolic link") && msg.contains("victim"),
        "{msg}"
    );
    assert_eq!(fs::read_to_string(&target).expect("victim"), "precious\n");
    // (still the link: nothing replaced, no temporary left)
    assert!(fs::symlink_metadata(&p)
        .expect("meta")
        .file_type()
        .is_symlink());
    assert_eq!(names(d.path()), ["perftest_out.json", "victim"]);
}

#[test]
fn a_dangling_symlink_is_refused_and_nothing_is_created() {
    let d = tempfile::tempdir().expect("tempdir");
    let target = d.path().join("would-be-created");
    let p = d.path().join("out.xml");
    symlink(&target, &p).expect("plant");
    assert!(matches!(write_file(&p, b"x"), Err(Error::Symlink { .. })));
    assert!(!target.exists());
}

#[test]
fn a_directory_or_a_missing_parent_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    let p = d.path().join("junit.xml");
    fs::create_dir(&p).expect("plant dir");
    let e = write_file(&p, b"x").expect_err("dir");
    assert!(e.to_string().contains("is a directory"), "{e}");
    let gone = d.path().join("no/such/dir/x.json");
    assert!(matches!(
        write_file(&gone, b"x"),
        Err(Error::NoParent { .. })
    ));
}

#[test]
fn a_report_dir_is_created_or_accepted_when_it_is_ours() {
    let d = tempfile::tempdir().expect("tempdir");
    let r = d.path().join("a/b/nvpeer-fleet");
    report_dir(&r).expect("created");
    assert!(r.is_dir());
    report_dir(&r).expect("ours, again");
    let mode = fs::metadata(&r).expect("meta").permissions().mode() & 0o777;
    // (the umask may take bits away, never add them)
    assert_eq!(mode & !DIR_MODE, 0);
}

#[test]
fn a_report_dir_that_is_a_link_or_a_file_is_refused() {
    let d = tempfile::tempdir().expect("tempdir");
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir(&elsewhere).expect("dir");
    let r = d.path().join("nvpeer-fleet");
    symlink(&elsewhere, &r).expect("plant");
    let e = report_dir(&r).expect_err("link");
    assert!(matches!(e, Error::Symlink { .. }), "{e:?}");
    assert_eq!(names(&elsewhere), Vec::<String>::new());
    let f = d.path().join("file");
    fs::write(&f, "").expect("file");
    assert!(matches!(report_dir(&f), Err(Error::NotDir { .. })));
}

#[test]
fn a_report_dir_of_another_user_is_refused() {
    // Needs root to make a directory owned by someone else (make check's host tests run as root).
    if euid() != 0 {
        return;
    }
    let d = tempfile::tempdir().expect("tempdir");
    let r = d.path().join("nvpeer-fleet");
    fs::create_dir(&r).expect("dir");
    std::os::unix::fs::chown(&r, Some(65534), Some(65534)).expect("chown to nobody");
    let e = report_dir(&r).expect_err("foreign");
    assert!(matches!(e, Error::Foreign { owner: 65534, .. }), "{e:?}");
    assert!(e.to_string().contains("another user's directory"), "{e}");
}

#[test]
fn errors_map_to_io_kinds() {
    let e = Error::IsDir {
        path: PathBuf::from("x"),
    }
    .into_io();
    assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
    let e = Error::Symlink {
        path: PathBuf::from("x"),
        target: "y".into(),
    }
    .into_io();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("symbolic link"));
}

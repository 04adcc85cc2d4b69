//! `nvpeer validate --nccl`: NCCL's own test of the node's network path. It runs nccl-tests'
//! `all_reduce_perf` over the node's GPUs with NCCL's shared-memory and peer-to-peer transports
//! off unless the caller set them (so the traffic between the GPUs crosses the NIC: NCCL's network
//! loopback), reads NCCL's
//! `NCCL_DEBUG=INFO` lines from its output with the doctor's reader (`nvpeer_doctor::nccl_log`:
//! which connections used GPUDirect RDMA, and why the others did not) and the table the test
//! prints (bus bandwidth per size, the `#wrong` counts of its data check).
//!
//! The table's layout is nccl-tests' (NVIDIA/nccl-tests src/util.cu `writeResultHeader`,
//! `writeResultFooter`): per size the columns `size count type redop root`, then out-of-place
//! `time algbw busbw #wrong` and in-place the same (four per-iteration columns after each
//! `#wrong` in its per-iteration layout, whose header says `(+ per-iteration)`; a timestamp
//! column at the end when asked for); `#wrong` is `N/A` without the data check and printed with
//! `%g` (`1e+06`); the footer's `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth :
//! X`. The test exits non-zero when its data check failed.

use crate::report::{self, CaseResult};
use nvpeer_doctor::nccl_log::{Choice, NcclLog};
use nvpeer_verdict::Verdict;
use serde::Serialize;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use wait_timeout::ChildExt;

/// The test's name on PATH.
pub const BINARY: &str = "all_reduce_perf";
/// Output kept per stream; what a run prints beyond it is counted, not kept.
const MAX_OUTPUT: usize = 16 << 20;
/// The test's smallest message (`-b`): a `--nccl-max-size` below it runs no size.
const MIN_BYTES: u64 = 8;
/// Lines of the test's standard error shown when it failed.
const ERR_TAIL: usize = 12;

/// What `--nccl` needs from the command line.
#[derive(Debug, Clone)]
pub struct NcclArgs {
    /// `--nccl-tests`: the binary, else [`BINARY`] on PATH.
    pub binary: Option<PathBuf>,
    /// GPUs to run over (`-g`): 0 means every NVIDIA GPU of the node.
    pub gpus: u32,
    /// Largest message (`-e`), bytes.
    pub max_bytes: u64,
    /// Kill the test after this long.
    pub timeout: Duration,
    /// Print the JSON document instead of text.
    pub json: bool,
}

/// One row of the test's table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerfRow {
    /// Message size, bytes.
    pub size: u64,
    /// Bus bandwidth out of place and in place, GB/s.
    pub busbw_out: f64,
    pub busbw_in: f64,
    /// Wrong elements out of place and in place; `None`: not checked (`N/A`).
    pub wrong_out: Option<u64>,
    pub wrong_in: Option<u64>,
}

/// The test's table and footer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PerfTable {
    /// `# nccl-tests version ...` (2.15 and later), when printed.
    pub version: Option<String>,
    pub rows: Vec<PerfRow>,
    /// `# Out of bounds values : N`.
    pub out_of_bounds: Option<u64>,
    /// `# Avg bus bandwidth : X`, GB/s.
    pub avg_busbw: Option<f64>,
}

/// A `#wrong` count as printed (`%g`: `1e+06` for a million); `None` for `N/A`.
fn wrong(s: &str) -> Option<u64> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v as u64)
}

/// Reads nccl-tests' table out of its output (NCCL's own lines among it are skipped).
pub fn parse_table(text: &str) -> PerfTable {
    let mut t = PerfTable::default();
    let per_iteration = text.contains("(+ per-iteration)");
    // After `#wrong`: four per-iteration columns with -R.
    let group = if per_iteration { 8 } else { 4 };
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix('#') {
            let rest = rest.trim();
            if let Some(v) = rest.strip_prefix("nccl-tests version ") {
                t.version = v.split_whitespace().next().map(str::to_string);
            } else if let Some((k, v)) = rest.split_once(':') {
                let first = v.split_whitespace().next().unwrap_or("");
                match k.trim() {
                    "Out of bounds values" => t.out_of_bounds = first.parse().ok(),
                    "Avg bus bandwidth" => t.avg_busbw = first.parse().ok(),
                    _ => {}
                }
            }
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 5 + 2 * group {
            continue;
        }
        let (Ok(size), Ok(_count)) = (f[0].parse::<u64>(), f[1].parse::<u64>()) else {
            continue;
        };
        let out = 5;
        let inp = 5 + group;
        let (Ok(busbw_out), Ok(busbw_in)) = (f[out + 2].parse::<f64>(), f[inp + 2].parse::<f64>())
        else {
            continue;
        };
        t.rows.push(PerfRow {
            size,
            busbw_out,
            busbw_in,
            wrong_out: wrong(f[out + 3]),
            wrong_in: wrong(f[inp + 3]),
        });
    }
    t
}

/// The NVIDIA GPUs of the node (PCI display controllers of vendor 0x10de), read from sysfs.
fn gpu_count(root: &Path) -> u32 {
    let Ok(dir) = std::fs::read_dir(root.join("sys/bus/pci/devices")) else {
        return 0;
    };
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    dir.flatten()
        .filter(|e| {
            read(e.path().join("vendor")).trim() == "0x10de"
                && read(e.path().join("class")).trim().starts_with("0x03")
        })
        .count() as u32
}

/// `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A child's stream, kept up to [`MAX_OUTPUT`] bytes; the rest counted.
fn drain(mut r: impl Read) -> (String, u64) {
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += (n - room) as u64;
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), dropped)
}

/// What the run did.
#[derive(Debug, Serialize)]
pub struct NcclRun {
    pub tool: &'static str,
    pub command: Vec<String>,
    /// The environment set for it (beside the caller's).
    pub environment: Vec<(String, String)>,
    /// Its exit status; `None`: killed (timeout) or ended by a signal.
    pub exit: Option<i32>,
    pub timed_out: bool,
    /// Output bytes beyond what was kept.
    pub output_dropped: u64,
    /// The last lines of its standard error that are not NCCL's, when a case failed.
    pub stderr_tail: Vec<String>,
    pub table: PerfTable,
    /// NCCL's own reading, when its log lines were in the output.
    pub nccl: Option<NcclLog>,
    pub cases: Vec<CaseResult>,
    pub verdict: Verdict,
}

/// The cases of a finished run: the collective itself, then NCCL's path.
pub fn judge(
    exit: Option<i32>,
    timed_out: bool,
    table: &PerfTable,
    nccl: Option<&NcclLog>,
) -> Vec<CaseResult> {
    let mut cases = Vec::new();
    let wrong: u64 = table
        .rows
        .iter()
        .flat_map(|r| [r.wrong_out, r.wrong_in])
        .flatten()
        .sum();
    let peak = table
        .rows
        .iter()
        .map(|r| r.busbw_out.max(r.busbw_in))
        .fold(0.0_f64, f64::max);
    let figures = format!(
        "{} sizes up to {} B, avg bus bandwidth {} GB/s, peak {peak:.2} GB/s",
        table.rows.len(),
        table.rows.last().map_or(0, |r| r.size),
        table
            .avg_busbw
            .map_or_else(|| "not printed".to_string(), |b| format!("{b:.2}"))
    );
    let a = "nccl.all-reduce";
    let bad_data = wrong > 0 || table.out_of_bounds.is_some_and(|n| n > 0);
    cases.push(if timed_out {
        CaseResult::fail(a, "all_reduce_perf did not finish in time and was killed", "a hang in NCCL's setup or transfer: rerun with NCCL_DEBUG=INFO and read where it stopped; check the NIC's link and `nvpeer doctor`")
    } else if bad_data {
        // (the test exits non-zero for this too: the data check is the finding)
        CaseResult::fail(
            a,
            format!(
                "{wrong} wrong element(s), {} out-of-bounds value(s), exit {exit:?}; {figures}",
                table.out_of_bounds.unwrap_or(0)
            ),
            "data corrupted on the way: the NIC's or the GPU's DMA into GPU memory (run `nvpeer validate --mem cuda` for the RDMA-level cases)",
        )
    } else if exit != Some(0) {
        CaseResult::fail(
            a,
            format!("all_reduce_perf exited with {exit:?}; {figures}"),
            "NCCL, CUDA or the test reported an error: its standard error's last lines (below) and NCCL's WARN lines name it",
        )
    } else if table.rows.is_empty() {
        CaseResult::fail(
            a,
            "all_reduce_perf printed no result table",
            "not nccl-tests' all_reduce_perf, or it stopped before its first size",
        )
    } else {
        CaseResult::pass(a, figures)
    });
    let g = "nccl.gdr";
    cases.push(match nccl {
        None => CaseResult::skip(g, "no NCCL line in the output (NCCL_DEBUG=INFO was overridden?)"),
        Some(log) => match log.choice() {
            Choice::Gdr => CaseResult::pass(
                g,
                format!(
                    "GPUDirect RDMA on every network connection ({}); registered through {}",
                    log.net.gdrdma + log.collnet_gdrdma,
                    log.registration()
                ),
            ),
            Choice::Partial | Choice::HostStaged => {
                let reasons = log.reasons();
                CaseResult::fail(
                    g,
                    format!(
                        "{} network connection(s) staged through host memory, {} with GPUDirect RDMA",
                        log.net.host_staged + log.collnet_host_staged,
                        log.net.gdrdma + log.collnet_gdrdma
                    ),
                    if reasons.is_empty() {
                        "the log gives no reason: run `nvpeer doctor`".to_string()
                    } else {
                        reasons.join("; ")
                    },
                )
            }
            Choice::NoNetwork => CaseResult::skip(
                g,
                "no network connection: one GPU (NCCL needs two to loop through the NIC), or NCCL found no network it could use",
            ),
        },
    });
    cases
}

/// What a run that could not start says: its one case, as text or as the JSON document.
fn could_not_run(json: bool, r: CaseResult) -> Verdict {
    if json {
        report::print_json(&serde_json::json!({
            "tool": "nvpeer validate --nccl",
            "cases": [r],
            "verdict": Verdict::CouldNotRun,
        }));
    } else {
        report::say(&report::case_line(&r));
    }
    Verdict::CouldNotRun
}

/// The last [`ERR_TAIL`] lines of `stderr` that are not NCCL's own (those are read as the log).
fn err_tail(stderr: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains(" NCCL INFO ") && !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(ERR_TAIL)..]
        .iter()
        .map(|l| l.chars().take(300).collect())
        .collect()
}

/// Runs the test and reports it; the verdict is the command's exit status.
pub fn run(a: &NcclArgs) -> Verdict {
    if a.max_bytes < MIN_BYTES {
        return could_not_run(
            a.json,
            CaseResult::fail(
                "nccl.all-reduce",
                format!(
                    "--nccl-max-size {} is below the test's smallest message ({MIN_BYTES} bytes)",
                    a.max_bytes
                ),
                "give --nccl-max-size 8 or more (default 128M)",
            ),
        );
    }
    let Some(binary) = a.binary.clone().or_else(|| on_path(BINARY)) else {
        return could_not_run(
            a.json,
            CaseResult::fail(
                "nccl.all-reduce",
                format!("{BINARY} not found on PATH"),
                "install nccl-tests (NVIDIA/nccl-tests: `make MPI=0 CUDA_HOME=... NCCL_HOME=...`) or pass --nccl-tests PATH",
            ),
        );
    };
    let gpus = if a.gpus == 0 {
        gpu_count(Path::new("/")).max(1)
    } else {
        a.gpus
    };
    let args: Vec<String> = vec![
        "-b".into(),
        MIN_BYTES.to_string(),
        "-e".into(),
        a.max_bytes.to_string(),
        "-f".into(),
        "2".into(),
        "-g".into(),
        gpus.to_string(),
        "-c".into(),
        "1".into(),
    ];
    // NCCL reads the first of these it finds set; what the caller set stays, except the log's
    // destination, which must be this process's output.
    let mut env: Vec<(String, String)> = Vec::new();
    for (k, v) in [
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV"),
        ("NCCL_P2P_DISABLE", "1"),
        ("NCCL_SHM_DISABLE", "1"),
    ] {
        if std::env::var_os(k).is_none() {
            env.push((k.into(), v.into()));
        }
    }
    let mut command = vec![binary.display().to_string()];
    command.extend(args.iter().cloned());
    if !a.json {
        report::say(&format!(
            "nvpeer validate --nccl: {} ({})",
            command.join(" "),
            env.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    // In a process group of its own, so that a timeout ends a wrapper's children too (and with
    // them the pipes the readers below wait on).
    let child = Command::new(&binary)
        .process_group(0)
        .args(&args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("NCCL_DEBUG_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return could_not_run(
                a.json,
                CaseResult::fail(
                    "nccl.all-reduce",
                    format!("starting {}: {e}", binary.display()),
                    "not an executable nccl-tests binary",
                ),
            )
        }
    };
    let out = child
        .stdout
        .take()
        .map(|s| std::thread::spawn(move || drain(s)));
    let err = child
        .stderr
        .take()
        .map(|s| std::thread::spawn(move || drain(s)));
    let (exit, timed_out) = match child.wait_timeout(a.timeout) {
        Ok(Some(status)) => (status.code(), false),
        Ok(None) | Err(_) => {
            if let Ok(pgid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) with a negative pid signals that process group; no memory is
                // passed. The group is the child's own (process_group(0) above).
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            (None, true)
        }
    };
    let join = |h: Option<std::thread::JoinHandle<(String, u64)>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let ((stdout, d1), (stderr, d2)) = (join(out), join(err));
    let text = format!("{stdout}\n{stderr}");
    let table = parse_table(&stdout);
    let nccl = NcclLog::read(BINARY, std::io::Cursor::new(text.as_bytes())).ok();
    let cases = judge(exit, timed_out, &table, nccl.as_ref());
    let stderr_tail = if cases.iter().any(|c| c.status == report::Status::Fail) {
        err_tail(&stderr)
    } else {
        Vec::new()
    };
    let s = report::summarize(&cases);
    let verdict = report::run_verdict(false, &s);
    let doc = NcclRun {
        tool: "nvpeer validate --nccl",
        command,
        environment: env,
        exit,
        timed_out,
        output_dropped: d1 + d2,
        stderr_tail,
        table,
        nccl,
        cases,
        verdict,
    };
    if a.json {
        report::print_json(&doc);
    } else {
        for c in &doc.cases {
            report::say(&report::case_line(c));
        }
        for l in &doc.stderr_tail {
            report::say(&format!("  stderr: {l}"));
        }
        if let Some(n) = &doc.nccl {
            report::say(&n.render());
        }
        if doc.output_dropped > 0 {
            report::say(&format!(
                "(output beyond {MAX_OUTPUT} bytes per stream not read: {} bytes)",
                doc.output_dropped
            ));
        }
        report::say(&report::summary_line(&s));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Status;

    /// nccl-tests 2.19's layout (src/util.cu), two sizes, with NCCL's INFO lines among the rows
    /// as a run with NCCL_DEBUG=INFO prints them.
    const RUN: &str = "\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on      node1 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   4242 on      node1 device  1 [0000:43:00] NVIDIA H100 80GB HBM3
node1:4242:4242 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
node1:4242:4250 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
node1:4242:4251 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)        
           8             2     float     sum      -1    20.11    0.00    0.00      0    19.80    0.00    0.00      0
          16             4     float     sum      -1    20.02    0.00    0.00      0    19.95    0.00    0.00      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.000123 
#
# Collective test concluded: all_reduce_perf
";

    #[test]
    fn the_table_and_footer_are_read_in_nccl_tests_layout() {
        let t = parse_table(RUN);
        assert_eq!(t.version.as_deref(), Some("2.19.6"));
        assert_eq!(t.rows.len(), 2);
        assert_eq!(
            t.rows[1],
            PerfRow {
                size: 16,
                busbw_out: 0.0,
                busbw_in: 0.0,
                wrong_out: Some(0),
                wrong_in: Some(0)
            }
        );
        assert_eq!(t.out_of_bounds, Some(0));
        assert_eq!(t.avg_busbw, Some(0.000123));
        // Without the data check (-c 0): N/A counts nothing; per-iteration columns (-R).
        let r = "#   out-of-place (+ per-iteration)   in-place (+ per-iteration)\n 1048576 262144 float sum -1 50.0 20.97 39.32 N/A 49 52 51 1.2 51.0 20.56 38.55 N/A 50 53 52 1.1\n";
        let t = parse_table(r);
        assert_eq!(t.rows[0].busbw_out, 39.32);
        assert_eq!(t.rows[0].busbw_in, 38.55);
        assert_eq!(t.rows[0].wrong_out, None);
    }

    #[test]
    fn a_clean_run_over_gdrdma_passes_and_wrong_elements_fail() {
        let t = parse_table(RUN);
        let log = NcclLog::read("t", std::io::Cursor::new(RUN)).unwrap();
        let c = judge(Some(0), false, &t, Some(&log));
        assert_eq!(c[0].status, Status::Pass, "{:?}", c[0]);
        assert_eq!(c[1].status, Status::Pass, "{:?}", c[1]);
        let bad = RUN.replace(
            "   16             4     float     sum      -1    20.02    0.00    0.00      0",
            "   16             4     float     sum      -1    20.02    0.00    0.00      3",
        );
        // nccl-tests exits 1 when its data check failed: the wrong elements are the finding.
        let c = judge(Some(1), false, &parse_table(&bad), Some(&log));
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0].cause.as_deref().unwrap().starts_with("data corrupted"));
        // `%g` counts.
        assert_eq!(wrong("1e+06"), Some(1_000_000));
        assert_eq!(wrong("N/A"), None);
        assert!(
            c[0].detail.starts_with("3 wrong element(s)"),
            "{}",
            c[0].detail
        );
        let c = judge(None, true, &t, Some(&log));
        assert_eq!(c[0].status, Status::Fail);
        let c = judge(Some(1), false, &PerfTable::default(), None);
        assert_eq!(c[0].status, Status::Fail);
        assert_eq!(c[1].status, Status::Skip);
    }

    #[test]
    fn host_staged_connections_fail_with_the_log_s_reason() {
        let staged = RUN.replace("/GDRDMA", "").replace(
            "NCCL INFO NCCL version 2.28.9+cuda13.0",
            "NCCL INFO NCCL version 2.28.9+cuda13.0\nnode1:4242:4242 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
        );
        let log = NcclLog::read("t", std::io::Cursor::new(staged.as_str())).unwrap();
        let c = judge(Some(0), false, &parse_table(&staged), Some(&log));
        assert_eq!(c[1].status, Status::Fail);
        assert!(
            c[1].detail.starts_with("2 network connection(s) staged"),
            "{}",
            c[1].detail
        );
        assert!(
            c[1].cause.as_deref().unwrap_or("").contains("mlx5_0"),
            "{:?}",
            c[1].cause
        );
    }

    /// nccl-tests 2.19.6's all_reduce_perf as it ran on the lent H200 (one GPU, NCCL 2.28.9 from
    /// PyTorch's wheel, NCCL_DEBUG=INFO): bench-results/gpu/h200-20261203/.
    #[test]
    fn the_recorded_h200_run() {
        let text =
            include_str!("../../../../bench-results/gpu/h200-20261203/all_reduce_perf-one-gpu.txt");
        let t = parse_table(text);
        assert_eq!(t.version.as_deref(), Some("2.19.6"));
        assert_eq!(t.rows.len(), 24);
        assert_eq!(t.rows[0].size, 8);
        assert_eq!(t.rows[23].size, 64 << 20);
        assert!(t
            .rows
            .iter()
            .all(|r| r.wrong_out == Some(0) && r.wrong_in == Some(0)));
        assert_eq!(t.out_of_bounds, Some(0));
        assert_eq!(t.avg_busbw, Some(0.0));
        let log = NcclLog::read("t", std::io::Cursor::new(text)).unwrap();
        assert!(
            log.versions.contains("2.28.9+cuda13.0"),
            "{:?}",
            log.versions
        );
        let c = judge(Some(0), false, &t, Some(&log));
        assert_eq!(c[0].status, Status::Pass);
        // One rank: nothing crosses a network.
        assert_eq!(c[1].status, Status::Skip);
    }

    #[test]
    fn the_error_tail_leaves_nccl_s_lines_out() {
        let e = "node1:1:1 [0] NCCL INFO ring 0\n\nInvalid number of GPUs: 9 requested but only 1 found.\n";
        assert_eq!(
            err_tail(e),
            vec!["Invalid number of GPUs: 9 requested but only 1 found.".to_string()]
        );
    }

    #[test]
    fn a_stream_is_kept_up_to_its_cap() {
        let big = vec![b'x'; MAX_OUTPUT + 10];
        let (kept, dropped) = drain(&big[..]);
        assert_eq!(kept.len(), MAX_OUTPUT);
        assert_eq!(dropped, 10);
    }
}

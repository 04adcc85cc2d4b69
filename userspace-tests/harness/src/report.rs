//! Output: one line per validation case (text or JSON), and perftest-compatible tables and JSON
//! for benchmarks.

use crate::stats::{mib_to_gbits, BwResult, LatencySummary};
use nvpeer_verdict::Verdict;
use serde::{Deserialize, Serialize};
use std::io::IsTerminal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// Result of one validation case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub name: String,
    pub status: Status,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// A failed case's fault code (`NVP-V013`; nvpeer_verdict::codes, docs/operations.md), by
    /// its family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub duration_ms: u64,
    /// What an `xfer.*` case measured (its one message), for the report's plots (boxed: a case
    /// is the error value of many functions, and few cases carry one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Box<Transfer>>,
}

/// The one message an `xfer.*` case moved and timed: `bytes` from `from` to `to` by `op` on the
/// registration `path`, `micros` from the post to the completion (and, for `write-imm` and
/// `send-recv`, the peer's receive completion). One message at one size: a point, not a
/// benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub op: String,
    pub from: String,
    pub to: String,
    pub path: String,
    pub bytes: u64,
    pub micros: f64,
}

impl CaseResult {
    pub fn pass(name: &str, detail: impl Into<String>) -> Self {
        CaseResult {
            name: name.into(),
            status: Status::Pass,
            detail: detail.into(),
            cause: None,
            code: None,
            duration_ms: 0,
            transfer: None,
        }
    }
    pub fn fail(name: &str, detail: impl Into<String>, cause: impl Into<String>) -> Self {
        CaseResult {
            name: name.into(),
            status: Status::Fail,
            detail: detail.into(),
            cause: Some(cause.into()),
            code: nvpeer_verdict::codes::validate(name).map(str::to_string),
            duration_ms: 0,
            transfer: None,
        }
    }
    pub fn skip(name: &str, why: impl Into<String>) -> Self {
        CaseResult {
            name: name.into(),
            status: Status::Skip,
            detail: why.into(),
            cause: None,
            code: None,
            duration_ms: 0,
            transfer: None,
        }
    }

    /// The case with what it measured.
    pub fn with_transfer(mut self, t: Transfer) -> Self {
        self.transfer = Some(Box::new(t));
        self
    }
}

/// Totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// Cases a failed prerequisite kept from running.
    pub not_run: usize,
}

pub fn summarize(cases: &[CaseResult]) -> Summary {
    let mut s = Summary::default();
    for c in cases {
        match c.status {
            Status::Pass => s.passed += 1,
            Status::Fail => s.failed += 1,
            Status::Skip => s.skipped += 1,
        }
    }
    s
}

/// The text line of one case (and its cause line on failure).
pub fn case_line(c: &CaseResult) -> String {
    let tag = match c.status {
        Status::Pass => "PASS",
        Status::Fail => "FAIL",
        Status::Skip => "SKIP",
    };
    let mut s = format!("{tag:<5}{:<44} {}", c.name, c.detail);
    if let Some(code) = &c.code {
        s.push_str(&format!(" [{code}]"));
    }
    if let Some(cause) = &c.cause {
        s.push_str(&format!("\n     probable cause: {cause}"));
    }
    s
}

/// The closing line, in the form the bench's runners read.
pub fn summary_line(s: &Summary) -> String {
    let mut l = format!(
        "{} passed, {} failed, {} skipped",
        s.passed, s.failed, s.skipped
    );
    if s.not_run > 0 {
        l.push_str(&format!(", {} not run", s.not_run));
    }
    l
}

/// Prints one line on stdout. A reader that went away (`nvpeer validate | head -1`) is not an
/// error of the run: the line is dropped instead of panicking (the CLI also restores the default
/// SIGPIPE action, so it exits quietly there).
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Prints a value as pretty JSON on stdout (see [`say`]).
pub fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => say(&s),
        Err(e) => eprintln!("nvpeer: cannot render the JSON report: {e}"),
    }
}

/// The whole validation report (JSON form): what `--json` prints, and what `--report` writes
/// beside its page and reads back (`--report-from`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidateReport {
    pub tool: String,
    pub version: String,
    pub mem: String,
    pub role: String,
    pub environment: crate::environment::Environment,
    /// The backend's and the device's facts (`cap.*`), as `key: value` strings.
    pub facts: std::collections::BTreeMap<String, String>,
    pub cases: Vec<CaseResult>,
    /// The failed prerequisite that kept `not_run` from running.
    pub blocked_by: Option<String>,
    pub not_run: Vec<String>,
    pub summary: Summary,
}

impl ValidateReport {
    /// The verdict the run had: could not run when a prerequisite failed, failed when a case
    /// failed.
    pub fn verdict(&self) -> Verdict {
        run_verdict(self.blocked_by.is_some(), &self.summary)
    }

    /// The not-run cases with their reason, as the JUnit file lists them.
    pub fn not_run_reasons(&self) -> Vec<(String, String)> {
        let why = match &self.blocked_by {
            Some(b) => format!("not run: {b}"),
            None => "not run".to_string(),
        };
        self.not_run
            .iter()
            .map(|n| (n.clone(), why.clone()))
            .collect()
    }

    /// The JUnit `<properties>`: the environment, then the facts.
    pub fn properties(&self) -> Vec<(String, String)> {
        let mut props = self.environment.pairs();
        props.extend(self.facts.iter().map(|(k, v)| (k.clone(), v.clone())));
        props
    }
}

/// A validation run's verdict: could not run when a prerequisite failed, failed when a case
/// failed.
pub fn run_verdict(blocked: bool, s: &Summary) -> Verdict {
    if blocked {
        Verdict::CouldNotRun
    } else {
        Verdict::failed_if(s.failed > 0)
    }
}

/// A table of `rows` under `header`, laid out by tabled without borders (perftest's look):
/// every column as wide as its widest cell, so long values never shift the next column.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut b = tabled::builder::Builder::default();
    b.push_record(header.iter().cloned());
    for r in rows {
        b.push_record(r.iter().cloned());
    }
    let mut t = b.build();
    t.with(tabled::settings::Style::blank());
    // tabled pads the last column too; trailing blanks help no reader.
    t.to_string()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// perftest's bandwidth columns.
pub fn bw_header(gbits: bool) -> Vec<String> {
    let unit = if gbits { "Gb/sec" } else { "MiB/sec" };
    vec![
        "#bytes".into(),
        "#iterations".into(),
        format!("BW peak[{unit}]"),
        format!("BW average[{unit}]"),
        "MsgRate[Mpps]".into(),
    ]
}

/// One bandwidth row under [`bw_header`].
pub fn bw_row(r: &BwResult, gbits: bool) -> Vec<String> {
    let conv = |v: f64| if gbits { mib_to_gbits(v) } else { v };
    vec![
        r.msg_size.to_string(),
        r.iterations.to_string(),
        format!("{:.2}", conv(r.bw_peak_mib)),
        format!("{:.2}", conv(r.bw_avg_mib)),
        format!("{:.6}", r.msg_rate_mpps),
    ]
}

/// perftest's latency columns (microseconds).
pub fn lat_header() -> Vec<String> {
    [
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]",
    ]
    .map(String::from)
    .to_vec()
}

/// One latency row under [`lat_header`].
pub fn lat_row(size: u64, iters: u64, s: &LatencySummary) -> Vec<String> {
    let mut v = vec![size.to_string(), iters.to_string()];
    v.extend(
        [
            s.t_min,
            s.t_max,
            s.t_typical,
            s.t_avg,
            s.t_stdev,
            s.p99,
            s.p99_9,
        ]
        .map(|x| format!("{x:.2}")),
    );
    v
}

/// What perftest's `test_info` block says about a run, filled from nvpeer's
/// ([`crate::bench::PerftestInfo`] is the block).
#[derive(Debug, Clone, Default)]
pub struct TestInfo {
    /// perftest's test name, e.g. `RDMA_Write_BW_Test`.
    pub test: String,
    pub device: String,
    /// `ibv_port_attr.link_layer` as sideway names it (`Ethernet`, `InfiniBand`).
    pub link_layer: String,
    pub tx_depth: Option<u32>,
    /// perftest's `RX_depth` (it writes one for a send test's receiving side: its server, and
    /// both sides of `-b`).
    pub rx_depth: Option<u32>,
    pub cq_mod: Option<u64>,
    /// QP pairs (perftest's `Number_of_qps`; 0 is read as 1).
    pub qps: u32,
    /// Negotiated path MTU in bytes.
    pub mtu: u32,
    pub gid_index: u32,
    /// READ tests: the READ depth in use (perftest's `Outstand_reads`).
    pub out_reads: Option<u8>,
    /// `--mem` (nvpeer's key `Memory`).
    pub mem: String,
    /// GPU selector when the memory is CUDA memory (perftest's `cuda_device`).
    pub cuda_device: Option<String>,
    /// `-T` when given: the traffic class of the test's QPs (perftest's `TOS`).
    pub tos: Option<u8>,
    pub gbits: bool,
    /// Registered with PCIe relaxed ordering (perftest's `PCIe_relax_order`).
    pub relaxed_ordering: bool,
    /// The host has a root complex that mishandles relaxed ordering (perftest's warning:
    /// [`crate::sysfs::relaxed_ordering_compliant`]).
    pub ro_noncompliant_cpu: bool,
}

/// A progress bar for `len` steps, hidden when stderr is not a terminal or when asked.
pub fn progress(len: u64, msg: &str, hidden: bool) -> indicatif::ProgressBar {
    if hidden || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    if let Ok(st) =
        indicatif::ProgressStyle::with_template("{msg:>14} [{bar:30}] {pos}/{len} {elapsed}")
    {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;

    #[test]
    fn case_lines_and_summary() {
        let cases = vec![
            CaseResult::pass("reg.sizes[ibv_reg_mr]", "14 sizes"),
            CaseResult::fail(
                "reg.offsets",
                "EFAULT at offset 1",
                "peer-memory module not loaded",
            ),
            CaseResult::skip("inval.free-idle", "host memory is not invalidated"),
        ];
        let s = summarize(&cases);
        assert_eq!(
            s,
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1,
                not_run: 0
            }
        );
        assert_eq!(summary_line(&s), "1 passed, 1 failed, 1 skipped");
        let blocked = Summary { not_run: 20, ..s };
        assert_eq!(
            summary_line(&blocked),
            "1 passed, 1 failed, 1 skipped, 20 not run"
        );
        let l = case_line(&cases[1]);
        assert!(l.starts_with("FAIL reg.offsets"));
        assert!(l.contains(" [NVP-V009]\n     probable cause: peer-memory module not loaded"));
        let j = serde_json::to_value(&cases[1]).unwrap();
        assert_eq!(j["code"], "NVP-V009");
        assert!(serde_json::to_value(&cases[0])
            .unwrap()
            .get("code")
            .is_none());
        assert!(!case_line(&cases[0]).contains("cause"));
        let j = serde_json::to_value(&cases[2]).unwrap();
        assert_eq!(j["status"], "skip");
        assert!(j.get("cause").is_none());
    }

    #[test]
    fn perftest_columns_and_keys() {
        assert!(bw_header(false).contains(&"BW peak[MiB/sec]".to_string()));
        assert!(bw_header(true).contains(&"BW average[Gb/sec]".to_string()));
        assert!(lat_header().contains(&"t_typical[usec]".to_string()));
        let r = stats::bandwidth(65536, 1000, 1.0, None);
        let row = bw_row(&r, false);
        assert_eq!(row[0], "65536");
        assert_eq!(row[3], "62.50");
        // perftest's look: header and rows start with one blank, columns line up whatever the
        // width of a value.
        let big = stats::bandwidth(1 << 31, 5, 1e-6, None);
        let t = table(&bw_header(false), &[bw_row(&r, false), bw_row(&big, false)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with(" #bytes "), "{t}");
        assert!(lines[1].starts_with(" 65536 "), "{t}");
        let col = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(col(lines[0], "#iterations"), col(lines[1], "1000"));
        assert_eq!(col(lines[0], "#iterations"), col(lines[2], "5 "));
        assert_eq!(
            col(lines[0], "BW average"),
            lines[1].rfind("62.50").unwrap()
        );
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
        let l = stats::summarize(&[1.0, 2.0, 3.0]).unwrap();
        assert!(lat_row(2, 3, &l).contains(&"2.00".to_string()));
    }
}

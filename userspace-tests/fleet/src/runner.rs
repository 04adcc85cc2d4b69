//! What one pair of ranks runs: the two-node validate cases or bench tests of the harness,
//! server on one rank and client on the other, over the harness's own channel (token, limits and
//! timeouts as in `validate --server` / `--client`). The coordinator drives it through
//! [`PairRunner`], so that its tests run on localhost with a fake runner and no RDMA device.

use crate::auth;
use nvpeer_harness::bench::{BenchTestDoc, Row};
use nvpeer_verdict::Verdict;
use serde::{Deserialize, Serialize};

/// The unit of a measurement, and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bandwidth in GB/s (10^9 bytes per second); higher is better.
    GBps,
    /// Latency in microseconds; lower is better.
    Micros,
    /// Pass or fail only (data integrity).
    PassFail,
}

impl Unit {
    /// The unit's symbol in the report.
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::GBps => "GB/s",
            Unit::Micros => "µs",
            Unit::PassFail => "pass/fail",
        }
    }
}

/// One test's result on one link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// The test (`integrity`, `write_bw`, `read_bw`, `send_bw`, `write_lat`).
    pub test: String,
    pub unit: Unit,
    /// The figure (none for pass/fail tests, or when the test failed before measuring).
    pub value: Option<f64>,
    pub passed: bool,
    /// What failed, or what was measured (one line).
    pub detail: String,
    /// A bandwidth test's minimum by its port's line rate, GB/s: `--bw-threshold` × the line
    /// rate the client judged against (`--line-rate`, else sysfs), when one of those was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_rate_min: Option<f64>,
}

/// What the client side of a pair found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PairOutcome {
    pub measurements: Vec<Measurement>,
}

/// The serving side's job: listen on `bind:port` until one client was served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeJob {
    pub round: u32,
    pub peer: u32,
    pub bind: String,
    pub port: u16,
}

/// The connecting side's job: connect to `host:port` and run the tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectJob {
    pub round: u32,
    pub peer: u32,
    pub host: String,
    pub port: u16,
}

/// Why the serving side of a pair could not serve (what the coordinator reports for the link).
#[derive(Debug, thiserror::Error)]
pub enum ServeFailure {
    #[error("validate server ended: exit {}", .0.exit_status())]
    ValidateEnded(Verdict),
    #[error("validate server: {0}")]
    Validate(#[from] nvpeer_harness::ValidateError),
    #[error("bench server ended: exit {}", .0.exit_status())]
    BenchEnded(Verdict),
    #[error("bench server: {0}")]
    Bench(#[from] nvpeer_harness::SetupError),
}

/// Runs one side of a pair. Both calls block until that side is done; the coordinator bounds
/// them with its pair timeout (a call that never returns makes its rank "hung" for that round).
pub trait PairRunner: Send + Sync {
    /// Serves the one client of `job`; an error is why the server could not run.
    fn serve(&self, job: &ServeJob) -> Result<(), ServeFailure>;
    /// Connects and runs the tests.
    fn connect(&self, job: &ConnectJob) -> PairOutcome;
}

/// MiB/s (perftest's unit, what the harness reports without `--report_gbits`) to GB/s.
pub fn mib_to_gb(mib: f64) -> f64 {
    mib * 1_048_576.0 / 1e9
}

/// The measurements of one bench document (`nvpeer_harness::bench::collect`): a bandwidth test's
/// average bandwidth of its largest size, the latency test's typical (median) latency of its
/// largest size; a test that failed is a failed measurement with its error.
pub fn from_bench_doc(t: &BenchTestDoc) -> Option<Measurement> {
    let test = t.test.clone();
    let unit = match test.as_str() {
        "write_lat" => Unit::Micros,
        "reg" => return None,
        _ => Unit::GBps,
    };
    if let Some(e) = &t.error {
        return Some(Measurement {
            test,
            unit,
            value: None,
            passed: false,
            detail: e.clone(),
            line_rate_min: None,
        });
    }
    let last = t.results.iter().max_by_key(|r| r.msg_size())?;
    let size = last.msg_size();
    let (value, detail) = match (unit, last) {
        (Unit::Micros, Row::Latency(r)) => {
            let v = r.t_typical;
            (v, format!("{size} B: t_typical {v:.2} µs"))
        }
        (Unit::GBps, Row::Bandwidth(r)) => {
            let gbits = t.info().bw_unit.as_deref() == Some("Gb/sec");
            let gb = if gbits {
                r.bw_average / 8.0
            } else {
                mib_to_gb(r.bw_average)
            };
            (gb, format!("{size} B: BW average {gb:.3} GB/s"))
        }
        _ => return None,
    };
    // Only a verdict the command line asked for: sysfs's rate of a software device (rxe, siw) is
    // its netdev's, not what the link can carry.
    let asked = t
        .threshold
        .as_ref()
        .filter(|th| th.enforced && unit == Unit::GBps);
    // Asked for, but this port's line rate is unknown: the link fails, as a single run's would
    // (`Threshold::fails_run`), rather than go unjudged.
    if let Some(th) = asked.filter(|th| th.required_gbps.is_none()) {
        return Some(Measurement {
            test,
            unit,
            value: Some(value),
            passed: false,
            detail: format!(
                "{detail}; --bw-threshold given but no line rate to judge against{}",
                th.note
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
            line_rate_min: None,
        });
    }
    Some(Measurement {
        test,
        unit,
        value: Some(value),
        passed: true,
        detail,
        line_rate_min: asked.and_then(|th| th.required_gbps).map(|gbps| gbps / 8.0),
    })
}

/// The integrity measurement of a validate run: passed when every case that ran passed and no
/// prerequisite failed; the detail names the failed cases.
pub fn from_validate(o: &nvpeer_harness::validate::Outcome) -> Measurement {
    use nvpeer_harness::report::Status;
    let failed: Vec<&str> = o
        .cases
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name.as_str())
        .collect();
    let passed = o.cases.iter().filter(|c| c.status == Status::Pass).count();
    let detail = match (&o.blocked_by, failed.is_empty()) {
        (Some(b), _) => format!("could not run: {b} ({} case(s) not run)", o.not_run.len()),
        (None, true) => format!("{passed} case(s) passed"),
        (None, false) => format!("failed: {}", failed.join(", ")),
    };
    Measurement {
        test: "integrity".into(),
        unit: Unit::PassFail,
        value: None,
        passed: o.blocked_by.is_none() && failed.is_empty(),
        detail,
        line_rate_min: None,
    }
}

/// How long the link's bench client tries to reach the serving rank's bench server.
const LINK_CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The real runner: the harness's two-node mode in this process.
pub enum HarnessRunner {
    /// `validate --fleet`: the validate cases, then a short write_bw for the link's bandwidth
    /// (`link`: its bench arguments).
    Validate {
        args: Box<nvpeer_harness::ValidateArgs>,
        link: Box<nvpeer_harness::BenchArgs>,
    },
    /// `bench --fleet`: the bench tests of the command line.
    Bench {
        args: Box<nvpeer_harness::BenchArgs>,
    },
}

/// The pair's own token: the two-node mode's handshake proves a token of this round, server
/// address and port only ([`auth::pair_token`]), never the fleet token, so that a pair's server
/// admits no client of another pair.
fn pair_token(c: &mut nvpeer_harness::cli::CommonArgs, round: u32, server: &str, port: u16) {
    c.serve.token = c
        .serve
        .token
        .as_deref()
        .and_then(|t| auth::pair_token(t, round, server, port));
}

fn as_server(c: &mut nvpeer_harness::cli::CommonArgs, job: &ServeJob) {
    let (bind, port) = (job.bind.as_str(), job.port);
    pair_token(c, job.round, bind, port);
    c.server = true;
    c.client = None;
    c.port = port;
    c.json = true;
    c.serve.bind = bind.to_string();
    c.serve.once = true;
}

fn as_client(c: &mut nvpeer_harness::cli::CommonArgs, job: &ConnectJob) {
    let (host, port) = (job.host.as_str(), job.port);
    pair_token(c, job.round, host, port);
    c.server = false;
    c.client = Some(host.to_string());
    c.port = port;
    c.json = true;
}

impl HarnessRunner {
    fn bench_serve(args: &nvpeer_harness::BenchArgs, job: &ServeJob) -> Result<(), ServeFailure> {
        let mut a = args.clone();
        as_server(&mut a.common, job);
        match nvpeer_harness::bench(a)? {
            Verdict::Passed => Ok(()),
            v => Err(ServeFailure::BenchEnded(v)),
        }
    }

    fn bench_connect(args: &nvpeer_harness::BenchArgs, job: &ConnectJob) -> Vec<Measurement> {
        let mut a = args.clone();
        as_client(&mut a.common, job);
        a.no_progress = true;
        a.junit = None;
        a.out_json = false;
        a.out_json_file = None;
        // The serving rank listens for this phase only once its validate server has ended: a
        // client that starts at once can meet the old listener as it closes (connected, then
        // reset). A setup error is tried again until the serving side's new listener answers.
        let start = std::time::Instant::now();
        let mut result = nvpeer_harness::bench::collect(a.clone());
        while result.is_err() && start.elapsed() < LINK_CONNECT_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(500));
            result = nvpeer_harness::bench::collect(a.clone());
        }
        match result {
            Ok(m) => m.tests.iter().filter_map(from_bench_doc).collect(),
            Err(e) => a
                .tests
                .iter()
                .filter(|t| **t != nvpeer_harness::cli::BenchTest::Reg)
                .map(|t| Measurement {
                    test: t.name().into(),
                    unit: if *t == nvpeer_harness::cli::BenchTest::WriteLat {
                        Unit::Micros
                    } else {
                        Unit::GBps
                    },
                    value: None,
                    passed: false,
                    detail: e.to_string(),
                    line_rate_min: None,
                })
                .collect(),
        }
    }
}

impl PairRunner for HarnessRunner {
    fn serve(&self, job: &ServeJob) -> Result<(), ServeFailure> {
        match self {
            HarnessRunner::Validate { args, link } => {
                let mut a = (**args).clone();
                as_server(&mut a.common, job);
                match nvpeer_harness::validate(a)? {
                    Verdict::Passed => {}
                    v => return Err(ServeFailure::ValidateEnded(v)),
                }
                Self::bench_serve(link, job)
            }
            HarnessRunner::Bench { args } => Self::bench_serve(args, job),
        }
    }

    fn connect(&self, job: &ConnectJob) -> PairOutcome {
        let measurements = match self {
            HarnessRunner::Validate { args, link } => {
                let mut a = (**args).clone();
                as_client(&mut a.common, job);
                a.junit = None;
                let o = nvpeer_harness::validate::collect(a);
                let mut m = vec![from_validate(&o)];
                m.extend(Self::bench_connect(link, job));
                m
            }
            HarnessRunner::Bench { args } => Self::bench_connect(args, job),
        };
        PairOutcome { measurements }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bench_documents_become_measurements() {
        let doc = |v: serde_json::Value| -> BenchTestDoc { serde_json::from_value(v).unwrap() };
        let bw_row = |size: u64, avg: f64| {
            json!({"MsgSize": size, "n_iterations": 100, "BW_peak": avg, "BW_average": avg,
                   "MsgRate": 0.1})
        };
        let bw = doc(
            json!({"test": "write_bw", "test_info": {"BW_unit": "MiB/sec"},
            "results": [bw_row(4096, 10.0), bw_row(65536, 1000.0)]}),
        );
        let m = from_bench_doc(&bw).unwrap();
        assert_eq!(
            (m.test.as_str(), m.unit, m.passed),
            ("write_bw", Unit::GBps, true)
        );
        assert!((m.value.unwrap() - 1.048576).abs() < 1e-9, "{m:?}");
        let g = doc(
            json!({"test": "read_bw", "test_info": {"BW_unit": "Gb/sec"},
            "results": [bw_row(65536, 80.0)]}),
        );
        assert_eq!(from_bench_doc(&g).unwrap().value, Some(10.0));
        let lat = doc(json!({"test": "write_lat", "test_info": {}, "results": [
            {"MsgSize": 2, "n_iterations": 10, "t_min": 3.0, "t_max": 4.0, "t_typical": 3.5,
             "t_avg": 3.5, "t_stdev": 0.1, "percentile_99": 4.0, "percentile_99.9": 4.0}]}));
        let m = from_bench_doc(&lat).unwrap();
        assert_eq!((m.unit, m.value), (Unit::Micros, Some(3.5)));
        let err = BenchTestDoc::failed("send_bw", "peer connect: refused".into());
        let m = from_bench_doc(&err).unwrap();
        assert!(!m.passed && m.value.is_none() && m.detail.contains("refused"));
        let reg = BenchTestDoc::ran("reg", Default::default(), Vec::new());
        assert!(from_bench_doc(&reg).is_none());
        // The line-rate minimum: only from a verdict the command line asked for.
        let rate = Ok(nvpeer_harness::line_rate::LineRate {
            gbps: 100.0,
            source: "--line-rate".into(),
            text: "100 Gb/sec".into(),
        });
        for (enforced, want) in [(true, Some(90.0 / 8.0)), (false, None)] {
            let mut t = bw.clone();
            t.threshold = Some(nvpeer_harness::line_rate::judge(
                &rate, 0.9, false, 8.4, 65536, enforced,
            ));
            assert_eq!(
                from_bench_doc(&t).unwrap().line_rate_min,
                want,
                "{enforced}"
            );
        }
        // Asked for, with no line rate to judge against: the link fails, its figure kept.
        let mut t = bw.clone();
        t.threshold = Some(nvpeer_harness::line_rate::judge(
            &Err(nvpeer_harness::line_rate::NoLineRate::NoDevice),
            0.9,
            false,
            8.4,
            65536,
            true,
        ));
        let m = from_bench_doc(&t).unwrap();
        assert!(!m.passed && m.value.is_some(), "{m:?}");
        assert!(m.detail.contains("no line rate to judge against"), "{m:?}");
        t.threshold.as_mut().unwrap().enforced = false;
        assert!(from_bench_doc(&t).unwrap().passed);
        // A latency test whose rows are bandwidth rows measured nothing the fleet reads.
        let odd = doc(json!({"test": "write_lat", "results": [bw_row(2, 1.0)]}));
        assert!(from_bench_doc(&odd).is_none());
    }

    #[test]
    fn validate_outcomes_become_integrity() {
        use nvpeer_harness::report::CaseResult;
        let o = nvpeer_harness::validate::Outcome {
            verdict: Verdict::Failed,
            cases: vec![
                CaseResult::pass("cap.memory", ""),
                CaseResult::fail("xfer.write.host->host[ibv_reg_mr]", "mismatch at 12", "x"),
            ],
            not_run: Vec::new(),
            blocked_by: None,
        };
        let m = from_validate(&o);
        assert!(!m.passed && m.detail.contains("xfer.write"), "{m:?}");
        let o = nvpeer_harness::validate::Outcome {
            verdict: Verdict::CouldNotRun,
            cases: vec![CaseResult::fail("oob.connect", "refused", "token")],
            not_run: vec![("reg.sizes".into(), "not run".into())],
            blocked_by: Some("oob.connect failed".into()),
        };
        let m = from_validate(&o);
        assert!(!m.passed && m.detail.contains("oob.connect"), "{m:?}");
    }

    #[test]
    fn a_pair_runs_on_its_own_token() {
        use clap::Parser;
        #[derive(Parser)]
        struct B {
            #[command(flatten)]
            b: nvpeer_harness::BenchArgs,
        }
        let b = B::try_parse_from(["bench", "--token", "fleet-secret"])
            .unwrap()
            .b;
        let (mut s, mut c) = (b.common.clone(), b.common);
        as_server(
            &mut s,
            &ServeJob {
                round: 1,
                peer: 2,
                bind: "10.0.0.4".into(),
                port: 18517,
            },
        );
        as_client(
            &mut c,
            &ConnectJob {
                round: 1,
                peer: 3,
                host: "10.0.0.4".into(),
                port: 18517,
            },
        );
        assert_eq!(s.serve.token, c.serve.token);
        assert_eq!(
            s.serve.token,
            auth::pair_token("fleet-secret", 1, "10.0.0.4", 18517)
        );
        assert!(s
            .serve
            .token
            .as_deref()
            .is_some_and(|t| !t.contains("fleet-secret")));
    }
}

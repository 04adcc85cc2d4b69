//! The bench's output files: the `--json` document (every test, the environment), perftest's
//! `--out_json` document of the one test, and the `--junit` XML (a test case per test and size).

use super::doc::{BenchDoc, BenchTestDoc, PerftestDoc};
use crate::cli::{BenchArgs, MemKind};
use crate::junit;
use crate::line_rate::{RateVerdict, Threshold};
use crate::report::{self, CaseResult};
use crate::verbs::Device;

/// The JUnit cases of a bench run: one per test and size measured, named `test[MsgSize]`, its
/// result row (perftest's keys) as JSON in `system-out`; a test that could not run is one failed
/// case with its error, a test that measured nothing one skipped case.
pub(crate) fn junit_cases(tests: &[BenchTestDoc]) -> Vec<CaseResult> {
    let mut cases = Vec::new();
    for t in tests {
        let name = t.test.as_str();
        if let Some(e) = &t.error {
            cases.push(CaseResult::fail(name, e.clone(), e.clone()));
            continue;
        }
        if t.results.is_empty() {
            cases.push(CaseResult::skip(name, "no size was measured"));
        }
        for r in &t.results {
            let row = serde_json::to_string(r).unwrap_or_default();
            cases.push(CaseResult::pass(&format!("{name}[{}]", r.msg_size()), row));
        }
        if let Some(c) = line_rate_case(name, t) {
            cases.push(c);
        }
    }
    cases
}

/// The JUnit case of a bandwidth test's line-rate verdict (`write_bw.line-rate`): passed, failed
/// when the verdict was enforced, skipped when it was advisory; without a line rate, failed when
/// `--bw-threshold` asked for a verdict, else none.
fn line_rate_case(name: &str, test: &BenchTestDoc) -> Option<CaseResult> {
    let t: &Threshold = test.threshold.as_ref()?;
    let case = format!("{name}.line-rate");
    let line = t.line().trim().to_string();
    Some(match t.verdict {
        RateVerdict::Pass => CaseResult::pass(&case, line),
        RateVerdict::Fail if t.enforced => CaseResult::fail(
            &case,
            line,
            "the bandwidth is below the threshold: check the PCIe link of the NIC and the GPU \
             (width, speed, relaxed ordering, ACS), their NUMA and PCIe distance (nvpeer doctor), \
             the MTU, and -q/-s",
        ),
        RateVerdict::Fail => CaseResult::skip(&case, line),
        RateVerdict::NoThreshold if t.enforced => CaseResult::fail(
            &case,
            line,
            "--bw-threshold needs the port's line rate: the device's sysfs rate was not readable; \
             give --line-rate GBPS",
        ),
        RateVerdict::NoThreshold => return None,
    })
}

/// Prints the `--json` document (nvpeer's: every test, the environment) and writes the
/// `--out_json` file (perftest's document of the one test); false when the file could not be
/// written or its test did not run.
pub(super) fn write_reports(
    args: &BenchArgs,
    mem_kind: MemKind,
    dev: Option<&Device>,
    env: &crate::environment::Environment,
    tests: &[BenchTestDoc],
) -> bool {
    let mut ok = true;
    if args.common.json {
        let doc = BenchDoc {
            tool: "nvpeer bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            mem: mem_kind.to_string(),
            device: dev.map(|d| d.name.clone()),
            environment: Some(env.clone()),
            tests: tests.to_vec(),
        };
        report::say(&serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    if let Some(f) = args.json_file() {
        // One test per file (BenchArgs::check); a failed test leaves no file, as in perftest.
        match tests.first() {
            Some(t) if t.error.is_none() => {
                let doc = PerftestDoc::new(&t.info(), &t.results);
                let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
                if let Err(e) = nvpeer_files::write_file(&f, text.as_bytes()) {
                    eprintln!("nvpeer bench: writing {}: {e}", f.display());
                    ok = false;
                }
            }
            _ => ok = false,
        }
    }
    if let Some(f) = &args.junit {
        let written = junit::render("nvpeer bench", &junit_cases(tests), &[], &env.pairs())
            .and_then(|x| nvpeer_files::write_file(f, &x).map_err(nvpeer_files::Error::into_io));
        if let Err(e) = written {
            eprintln!("nvpeer bench: writing {}: {e}", f.display());
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn doc(v: Value) -> BenchTestDoc {
        serde_json::from_value(v).expect("a bench test document")
    }

    #[test]
    fn junit_has_a_testcase_per_test_and_size() {
        let l = json!({"t_min": 3.0, "t_max": 4.0, "t_typical": 3.5, "t_avg": 3.5, "t_stdev": 0.5,
            "p99": 4.0, "p99_9": 4.0, "samples": 2});
        let tests = [
            json!({"test": "write_bw", "test_info": {}, "results": [
                {"MsgSize": 2, "n_iterations": 5000, "BW_peak": 1.5, "BW_average": 1.25, "MsgRate": 0.6},
                {"MsgSize": 65536, "n_iterations": 5000, "BW_peak": 9000.0, "BW_average": 8800.5, "MsgRate": 0.14},
            ]}),
            json!({"test": "reg", "test_info": {}, "results": [
                {"MsgSize": 4096, "n_iterations": 1000, "reg": l, "dereg": l, "reg_dereg": l},
            ]}),
            json!({"test": "write_lat", "error": "needs an RDMA device <rxe>"}),
            json!({"test": "read_bw", "test_info": {}, "results": []}),
        ]
        .map(doc);
        let env = crate::environment::Environment {
            tool: "nvpeer 0.1.0".into(),
            command_line: "nvpeer bench -a --junit b.xml".into(),
            kernel: Some("6.12.48".into()),
            nic: Some("mlx5_0".into()),
            ..Default::default()
        };
        let cases = junit_cases(&tests);
        let x = junit::render("nvpeer bench", &cases, &[], &env.pairs()).unwrap();
        let x = String::from_utf8(x).unwrap();
        assert!(
            x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
            "{x}"
        );
        assert!(
            x.contains(
                r#"<testsuite name="nvpeer bench" tests="5" failures="1" errors="0" skipped="1""#
            ),
            "{x}"
        );
        assert_eq!(x.matches("<testcase ").count(), 5, "{x}");
        for name in [
            "write_bw[2]",
            "write_bw[65536]",
            "reg[4096]",
            "write_lat",
            "read_bw",
        ] {
            assert!(
                x.contains(&format!(
                    r#"<testcase name="{name}" classname="nvpeer bench""#
                )),
                "{name}: {x}"
            );
        }
        // The row's figures under perftest's keys, escaped.
        assert!(x.contains("&quot;BW_average&quot;:8800.5"), "{x}");
        assert!(
            x.contains(r#"<failure message="needs an RDMA device &lt;rxe&gt;">"#),
            "{x}"
        );
        assert!(
            x.contains(r#"<skipped message="no size was measured"/>"#),
            "{x}"
        );
        // The environment as properties.
        for (k, v) in [
            ("kernel", "6.12.48"),
            ("nic", "mlx5_0"),
            ("command line", "nvpeer bench -a --junit b.xml"),
        ] {
            assert!(
                x.contains(&format!(r#"<property name="{k}" value="{v}"/>"#)),
                "{k}: {x}"
            );
        }
    }

    #[test]
    fn line_rate_verdicts_are_junit_cases() {
        let rate = Ok(crate::line_rate::LineRate {
            gbps: 100.0,
            source: "sysfs".into(),
            text: "100 Gb/sec (4X EDR)".into(),
        });
        let doc = |gbps: f64, enforced: bool| {
            let t = crate::line_rate::judge(&rate, 0.9, false, gbps, 65536, enforced);
            BenchTestDoc {
                threshold: Some(t),
                ..BenchTestDoc::ran("write_bw", Default::default(), Vec::new())
            }
        };
        let cases = junit_cases(&[doc(95.0, true), doc(50.0, true), doc(50.0, false)]);
        let verdicts: Vec<(&str, report::Status)> = cases
            .iter()
            .filter(|c| c.name.ends_with(".line-rate"))
            .map(|c| (c.name.as_str(), c.status))
            .collect();
        assert_eq!(
            verdicts,
            [
                ("write_bw.line-rate", report::Status::Pass),
                ("write_bw.line-rate", report::Status::Fail),
                ("write_bw.line-rate", report::Status::Skip),
            ]
        );
        // No line rate: no case, unless --bw-threshold asked for a verdict.
        let no_rate = |enforced: bool| {
            let t = crate::line_rate::judge(
                &Err(crate::line_rate::NoLineRate::NoDevice),
                0.9,
                false,
                1.0,
                2,
                enforced,
            );
            BenchTestDoc {
                threshold: Some(t),
                ..BenchTestDoc::ran("read_bw", Default::default(), Vec::new())
            }
        };
        assert!(line_rate_case("read_bw", &no_rate(false)).is_none());
        let case = line_rate_case("read_bw", &no_rate(true)).expect("a failed case");
        assert_eq!(case.status, report::Status::Fail);
    }

    #[test]
    fn odd_documents_are_refused_when_read() {
        for odd in [
            json!(null),
            json!({"test": 7, "results": {"MsgSize": 1}}),
            json!({"error": 3}),
            json!({"test": "write_bw", "results": [{"MsgSize": 1}]}),
        ] {
            assert!(
                serde_json::from_value::<BenchTestDoc>(odd.clone()).is_err(),
                "{odd}"
            );
        }
    }
}

use super::analysis::*;
use super::render::TEXT_MAX_NODES;
use super::*;
use crate::coordinator::{Lost, NodeRecord, PairRecord};
use crate::readiness::Readiness;
use crate::runner::Measurement;

fn lv(a: u32, b: u32, value: f64) -> LinkValue {
    LinkValue {
        a,
        b,
        value,
        line_rate_min: None,
    }
}

/// Every pair of `n` nodes at `fast`, except those `slow` names.
fn mesh(n: u32, fast: f64, slow: &[(u32, u32, f64)]) -> Vec<LinkValue> {
    let mut v = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let x = slow
                .iter()
                .find(|s| (s.0, s.1) == (a, b))
                .map_or(fast, |s| s.2);
            v.push(lv(a, b, x));
        }
    }
    v
}

#[test]
fn one_slow_link_is_named() {
    let links = mesh(4, 10.0, &[(1, 2, 2.0)]);
    let (med, th, s) = outliers(&links, Unit::GBps, &Thresholds::default());
    assert_eq!(med, Some(10.0));
    assert_eq!(th, Some(8.0));
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 1,
            b: 2,
            value: 2.0,
            threshold: 8.0
        }]
    );
}

/// ngc_multinode_perf's rule: a link below its share of the port's line rate is slow, even
/// where the fleet's median says nothing (two links) or every link is as slow.
#[test]
fn a_link_below_its_line_rate_is_named() {
    let at = |a, b, value, min| LinkValue {
        a,
        b,
        value,
        line_rate_min: Some(min),
    };
    // One link at 10 GB/s, which the fleet's median rule (0.8 x 12) passes, under its
    // line-rate minimum of 11.25 (0.9 x 12.5 GB/s): named, with the threshold it missed.
    let all = [
        at(0, 1, 10.0, 11.25),
        at(2, 3, 12.0, 11.25),
        at(0, 2, 12.0, 11.25),
        at(1, 3, 12.0, 11.25),
    ];
    let (_, th, s) = outliers(&all, Unit::GBps, &Thresholds::default());
    assert!(th.is_some());
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 0,
            b: 1,
            value: 10.0,
            threshold: 11.25
        }]
    );
    // Two links, no median verdict: the line rate still names the slow one.
    let two = [at(0, 1, 12.0, 11.25), at(0, 2, 5.0, 11.25)];
    let (_, th, s) = outliers(&two, Unit::GBps, &Thresholds::default());
    assert_eq!(th, None);
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 0,
            b: 2,
            value: 5.0,
            threshold: 11.25
        }]
    );
    // Latency has no line rate.
    let (_, _, s) = outliers(&two, Unit::Micros, &Thresholds::default());
    assert!(s.is_empty());
}

#[test]
fn a_node_with_every_link_slow_is_named_as_the_node() {
    let links = mesh(
        5,
        10.0,
        &[(0, 3, 1.0), (1, 3, 1.5), (2, 3, 1.2), (3, 4, 0.9)],
    );
    let (_, _, s) = outliers(&links, Unit::GBps, &Thresholds::default());
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(matches!(&s[0], Suspect::Node { node: 3, values } if values.len() == 4));
    // Plus a slow link elsewhere: the node and that link, nothing else.
    let links = mesh(
        5,
        10.0,
        &[
            (0, 3, 1.0),
            (1, 3, 1.5),
            (2, 3, 1.2),
            (3, 4, 0.9),
            (0, 1, 3.0),
        ],
    );
    let (_, _, s) = outliers(&links, Unit::GBps, &Thresholds::default());
    assert_eq!(s.len(), 2, "{s:?}");
    assert!(s.contains(&Suspect::Link {
        a: 0,
        b: 1,
        value: 3.0,
        // the median of 0.9, 1.0, 1.2, 1.5, 3.0 and five links at 10: 6.5
        threshold: 0.8 * 6.5
    }));
}

#[test]
fn a_node_with_one_link_is_not_a_suspect() {
    // Two nodes: one link; a slow one under --min-bw is the link, not both nodes.
    let th = Thresholds {
        min_bw: Some(5.0),
        fraction: 0.8,
    };
    let (_, _, s) = outliers(&[lv(0, 1, 2.0)], Unit::GBps, &th);
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 0,
            b: 1,
            value: 2.0,
            threshold: 5.0
        }]
    );
    let (_, _, s) = outliers(&[lv(0, 1, 2.0)], Unit::GBps, &Thresholds::default());
    assert!(s.is_empty());
}

/// Two links are not enough for a median verdict: their spread is the measurement's noise
/// (the bench's 59-fleet saw 0.035 against 0.019 GB/s between healthy links under TCG).
#[test]
fn two_links_name_nothing_against_their_median() {
    let two = [lv(0, 1, 0.035), lv(0, 2, 0.019)];
    let (med, th, s) = outliers(&two, Unit::GBps, &Thresholds::default());
    assert!(
        (med.unwrap() - 0.027).abs() < 1e-12 && th.is_none(),
        "{med:?} {th:?}"
    );
    assert!(s.is_empty(), "{s:?}");
    let (_, th, s) = outliers(&two, Unit::Micros, &Thresholds::default());
    assert_eq!(th, None);
    assert!(s.is_empty());
    // --min-bw still applies.
    let th = Thresholds {
        min_bw: Some(0.03),
        fraction: 0.8,
    };
    let (_, limit, s) = outliers(&two, Unit::GBps, &th);
    assert_eq!(limit, Some(0.03));
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 0,
            b: 2,
            value: 0.019,
            threshold: 0.03
        }]
    );
    // Three links: the median is one of them, and the slow one is named.
    let three = [lv(0, 1, 0.035), lv(0, 2, 0.030), lv(1, 2, 0.010)];
    let (_, th, s) = outliers(&three, Unit::GBps, &Thresholds::default());
    assert!((th.unwrap() - 0.024).abs() < 1e-12);
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 1,
            b: 2,
            value: 0.010,
            threshold: 0.8 * 0.030
        }]
    );
}

#[test]
fn latency_is_slow_above_the_median() {
    let links = mesh(4, 3.0, &[(0, 2, 9.0)]);
    let (_, th, s) = outliers(&links, Unit::Micros, &Thresholds::default());
    assert_eq!(th, Some(3.75));
    assert_eq!(
        s,
        vec![Suspect::Link {
            a: 0,
            b: 2,
            value: 9.0,
            threshold: 3.75
        }]
    );
}

fn node(rank: u32, ready: bool) -> NodeRecord {
    NodeRecord {
        rank,
        name: format!("n{rank}"),
        addr: Some(format!("10.0.0.{rank}")),
        readiness: Some(if ready {
            Readiness::assumed()
        } else {
            Readiness {
                ready: false,
                verdict: "not_ready".into(),
                causes: vec![RootCause {
                    check: "peer.clients".into(),
                    summary: "no peer-memory client".into(),
                    fix: Some("modprobe nvidia-peermem".into()),
                }],
            }
        }),
        lost: None,
    }
}

fn bw(v: f64) -> Vec<Measurement> {
    vec![
        Measurement {
            test: "integrity".into(),
            unit: Unit::PassFail,
            value: None,
            passed: true,
            detail: "ok".into(),
            line_rate_min: None,
        },
        Measurement {
            test: "write_bw".into(),
            unit: Unit::GBps,
            value: Some(v),
            passed: true,
            detail: String::new(),
            line_rate_min: None,
        },
    ]
}

fn sample() -> FleetReport {
    let mut nodes: Vec<NodeRecord> = (0..5).map(|r| node(r, r != 3)).collect();
    nodes[4].lost = Some(Lost {
        kind: LostKind::Died,
        round: Some(1),
        why: "peer closed the connection".into(),
    });
    let mut pairs = Vec::new();
    for (a, b, v) in [(0, 1, 10.0), (0, 2, 10.0), (1, 2, 1.0)] {
        pairs.push(PairRecord {
            round: 0,
            server: a,
            client: b,
            status: PairStatus::Ran,
            measurements: bw(v),
        });
    }
    pairs.push(PairRecord {
        round: 1,
        server: 3,
        client: 0,
        status: PairStatus::Skipped {
            why: "rank 3 (n3) is not ready".into(),
        },
        measurements: Vec::new(),
    });
    let run = FleetRun {
        world: 5,
        pairing: Pairing::All,
        rounds: 5,
        nodes,
        pairs,
        elapsed_s: 1.0,
        joined_s: 0.1,
        messages: 40,
    };
    FleetReport::new("nvpeer validate --fleet", run, Thresholds::default())
}

#[test]
fn report_json_has_the_answer_first() {
    let r = sample();
    let v = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "verdict",
        "not_ready",
        "lost",
        "outliers",
        "failures",
        "matrices",
        "run",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    assert_eq!(v["verdict"], "fail");
    assert_eq!(v["not_ready"][0]["nodes"], serde_json::json!(["n3"]));
    assert_eq!(v["not_ready"][0]["cause"]["check"], "peer.clients");
    // Each finding with its fault code (docs/operations.md): a node not ready by its cause's.
    assert_eq!(v["not_ready"][0]["code"], "NVP-D018");
    assert_eq!(v["lost"][0]["node"], "n4");
    assert_eq!(v["lost"][0]["kind"], "died");
    assert_eq!(v["lost"][0]["code"], "NVP-F002");
    assert_eq!(v["outliers"].as_array().unwrap().len(), 1);
    assert_eq!(v["outliers"][0]["kind"], "link");
    assert_eq!(v["outliers"][0]["code"], "NVP-F004");
    assert_eq!(
        (
            v["outliers"][0]["a"].as_str(),
            v["outliers"][0]["b"].as_str()
        ),
        (Some("n1"), Some("n2"))
    );
    let m = &v["matrices"][1];
    assert_eq!(m["test"], "write_bw");
    assert_eq!(m["unit"], "g_bps");
    let cell = |row: u64, col: u64| {
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["row"] == row && c["col"] == col)
            .cloned()
    };
    assert_eq!(cell(1, 2).unwrap()["state"], "value");
    assert_eq!(cell(1, 2).unwrap()["slow"], true);
    assert_eq!(cell(2, 1).unwrap()["slow"], true);
    assert_eq!(cell(0, 3).unwrap()["state"], "skipped");
    // (the diagonal, as every pair without a result, is not listed)
    assert_eq!(cell(0, 0), None);
    assert_eq!(r.verdict(), Verdict::Failed);
    let text = r.text();
    let first = text.lines().next().unwrap();
    assert!(first.contains("1 not ready, 1 lost, 1 outlier"), "{first}");
    assert!(
        text.contains("SLOW LINK  n1 <-> n2: [NVP-F004] write_bw"),
        "{text}"
    );
    assert!(
        text.contains("NOT READY  n3: [NVP-D018] peer.clients"),
        "{text}"
    );
    assert!(text.contains("LOST       n4: [NVP-F002] died"), "{text}");
    assert!(
        text.trim_end().ends_with("5 passed, 1 failed, 2 skipped"),
        "{text}"
    );
}

#[test]
fn the_report_is_not_written_through_a_planted_link() {
    // (a shared working directory where another user made ./nvpeer-fleet a link)
    let d = tempfile::tempdir().unwrap();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let dir = d.path().join("nvpeer-fleet");
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let e = sample().write(&dir).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // and a real directory gets every file, whole
    let ok = d.path().join("real");
    let files = sample().write(&ok).unwrap();
    assert!(files.iter().all(|f| f.is_file()), "{files:?}");
    assert!(ok.join("fleet.json").is_file() && ok.join("fleet.xml").is_file());
}

#[test]
fn junit_has_a_case_per_pair_and_test() {
    let x = String::from_utf8(sample().junit().unwrap()).unwrap();
    assert!(x.contains(r#"name="write_bw n1 &lt;-&gt; n2""#), "{x}");
    assert!(x.contains(r#"name="integrity n0 &lt;-&gt; n1""#), "{x}");
    assert!(x.contains(r#"name="doctor n3""#), "{x}");
    assert!(
        x.contains(r#"type="NVP-D018""#) && x.contains(r#"type="NVP-F004""#),
        "{x}"
    );
    // 5 doctor cases + 3 links × 2 tests ran, 1 pair × 2 tests skipped.
    assert!(x.contains(r#"tests="13""#), "{x}");
}

/// Two links, too few for a fleet threshold, but both held to their ports' line rate: the
/// slow one's JUnit case and the matrix's line say the threshold it missed.
#[test]
fn a_line_rate_outlier_reports_its_own_threshold() {
    let nodes: Vec<NodeRecord> = (0..3).map(|r| node(r, true)).collect();
    let pairs = [(0, 1, 10.0), (0, 2, 5.0)]
        .into_iter()
        .map(|(a, b, v)| PairRecord {
            round: 0,
            server: a,
            client: b,
            status: PairStatus::Ran,
            measurements: bw(v)
                .into_iter()
                .map(|m| Measurement {
                    line_rate_min: m.value.map(|_| 9.0),
                    ..m
                })
                .collect(),
        })
        .collect();
    let run = FleetRun {
        world: 3,
        pairing: Pairing::All,
        rounds: 3,
        nodes,
        pairs,
        elapsed_s: 1.0,
        joined_s: 0.1,
        messages: 12,
    };
    let r = FleetReport::new("nvpeer validate --fleet", run, Thresholds::default());
    let m = r.matrices.iter().find(|m| m.test == "write_bw").unwrap();
    assert_eq!(m.threshold, None);
    assert!(matches!(
        m.cells[0][2],
        Cell::Value {
            slow: true,
            threshold: Some(t),
            ..
        } if t == 9.0
    ));
    let text = r.text();
    assert!(
        text.contains("each link held to its port's line-rate minimum"),
        "{text}"
    );
    let x = String::from_utf8(r.junit().unwrap()).unwrap();
    assert!(x.contains("outlier: threshold 9"), "{x}");
    assert!(!x.contains("threshold 0"), "{x}");
}

#[test]
fn files_are_written() {
    let dir = std::env::temp_dir().join(format!("nvpeer-fleet-report-{}", std::process::id()));
    let files = sample().write(&dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "fleet.json",
            "fleet.xml",
            "matrix-integrity.svg",
            "matrix-write_bw.svg"
        ]
    );
    let svg = std::fs::read_to_string(dir.join("matrix-write_bw.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("n2"), "{svg}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A matrix of `n` nodes with one measured link, 0-1.
fn wide(n: usize) -> Matrix {
    let mut cells = vec![vec![Cell::None; n]; n];
    cells[0][1] = Cell::Pass;
    cells[1][0] = Cell::Pass;
    Matrix {
        test: "integrity".into(),
        unit: crate::runner::Unit::PassFail,
        median: None,
        threshold: None,
        nodes: (0..n).map(|i| format!("n{i}")).collect(),
        cells,
    }
}

#[test]
fn a_wide_matrix_is_not_printed_or_drawn_and_its_json_lists_only_its_links() {
    let small = wide(TEXT_MAX_NODES);
    assert!(
        small.text().lines().count() > TEXT_MAX_NODES,
        "a table up to the cap"
    );
    let big = wide(TEXT_MAX_NODES + 1);
    let t = big.text();
    assert_eq!(t.lines().count(), 2, "{t}");
    assert!(t.contains("not printed above 32 nodes") && t.contains("matrix-integrity.svg"));
    assert!(wide(crate::heatmap::MAX_NODES).pictured());
    let huge = wide(crate::heatmap::MAX_NODES + 1);
    assert!(!huge.pictured());
    assert!(!huge.text().contains(".svg"));
    let v = serde_json::to_value(&huge).unwrap();
    assert_eq!(
        v["cells"],
        serde_json::json!([
            {"row": 0, "col": 1, "state": "pass"},
            {"row": 1, "col": 0, "state": "pass"}
        ])
    );
}

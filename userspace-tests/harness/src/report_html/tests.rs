//! The page's structure (verdict before the cases, every case, escaping, inline SVG, nothing
//! fetched), the files beside it, and the committed fixtures
//! (`userspace-tests/harness/tests/fixtures/`), which are what these builders write: set
//! `NVPEER_WRITE_FIXTURES=1` to write them again after a change of the types.

use super::*;
use crate::environment::Environment;
use crate::report::{summarize, CaseResult, Transfer};
use crate::stats;

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A directory of the test's own, removed when the test ends (pass or fail).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("nvpeer-report-{name}-"))
        .tempdir()
        .expect("a scratch directory")
}

const FIXTURE_NOTE: &str =
    "(a fixture: userspace-tests/harness/tests/fixtures/, written by the harness's own types; not a measurement)";

fn env(mem: &str) -> Environment {
    Environment {
        tool: "nvpeer 0.1.0".into(),
        command_line: format!("nvpeer validate --mem {mem} --report report {FIXTURE_NOTE}"),
        host: Some("fixture".into()),
        kernel: Some("7.2.0-nvpeer-bench".into()),
        ofed: Some("inbox".into()),
        peer_modules: vec!["nvpeer 0.1.0".into()],
        peer_client_mode: Some("invalidating".into()),
        nic: Some("rxe0".into()),
        nic_driver: Some("rdma_rxe".into()),
        ..Default::default()
    }
}

fn doc(
    mem: &str,
    cases: Vec<CaseResult>,
    not_run: Vec<String>,
    blocked: Option<&str>,
) -> ValidateReport {
    let mut summary = summarize(&cases);
    summary.not_run = not_run.len();
    ValidateReport {
        tool: "nvpeer validate".into(),
        version: "0.1.0".into(),
        mem: mem.into(),
        role: "loopback".into(),
        environment: env(mem),
        facts: [
            ("seed".to_string(), "42".to_string()),
            ("rdma device".to_string(), "rxe0".to_string()),
        ]
        .into_iter()
        .collect(),
        cases,
        blocked_by: blocked.map(str::to_string),
        not_run,
        summary,
    }
}

fn timed(mut c: CaseResult, ms: u64) -> CaseResult {
    c.duration_ms = ms;
    c
}

/// What `nvpeer validate --mem emu` reports on the bench (suite 30's case list): the
/// registration and invalidation cases through the core emulator, the transfers skipped.
pub fn fixture_validate_emu() -> ValidateReport {
    let p = "peer_mem_emu";
    let mut cases = vec![
        timed(
            CaseResult::pass(
                "cap.memory",
                "emu: /dev/nvp2p_emu (the bench's provider emulator)",
            ),
            3,
        ),
        timed(
            CaseResult::pass(
                "mem.alloc-free",
                "4194304 bytes allocated, pattern written and read back, freed",
            ),
            41,
        ),
        timed(
            CaseResult::skip(
                "mem.dmabuf-export",
                "emulated GPU memory exports no dma-buf",
            ),
            0,
        ),
        timed(
            CaseResult::pass(
                "cap.rdma-device",
                "rxe0 port 1 ACTIVE, Ethernet, GID index 1, MTU 4096",
            ),
            12,
        ),
        timed(
            CaseResult::skip("cap.dmabuf-import", "the dma-buf path is not under test"),
            0,
        ),
        timed(
            CaseResult::pass(
                "cap.peer-client",
                "nvpeer under /sys/kernel/mm/memory_peers",
            ),
            1,
        ),
        timed(
            CaseResult::pass(
                &format!("reg.sizes[{p}]"),
                "31 sizes from 1 B to 4194304 B; num_alloc_mrs +31, num_dealloc_mrs +31",
            ),
            220,
        ),
        timed(
            CaseResult::pass(&format!("reg.offsets[{p}]"), "21 offset/length pairs"),
            95,
        ),
        timed(
            CaseResult::pass(
                &format!("reg.many-small[{p}]"),
                "64 MRs of 4 KiB held at once, distinct keys",
            ),
            130,
        ),
        timed(
            CaseResult::pass(
                &format!("reg.churn[{p}]"),
                "32 cycles of 512 KiB; alloc and dealloc counters balanced",
            ),
            170,
        ),
    ];
    for (from, to) in [("emu", "emu"), ("emu", "host"), ("host", "emu")] {
        for op in ["write", "write-imm", "read", "send-recv"] {
            cases.push(CaseResult::skip(
                &format!("xfer.{op}.{from}->{to}[{p}]"),
                "rxe cannot DMA emulated GPU pages: registration path only",
            ));
        }
    }
    cases.push(timed(
        CaseResult::pass(
            &format!("inval.free-idle[{p}]"),
            "MR revoked (state INVALIDATED), num_free_callbacks +1, dereg ok",
        ),
        60,
    ));
    cases.push(CaseResult::skip(
        &format!("inval.free-inflight[{p}]"),
        "no data moves on emulated memory",
    ));
    doc("emu", cases, Vec::new(), None)
}

/// Latency samples around `base` microseconds (deterministic).
fn samples(base: f64) -> Vec<f64> {
    (0..200)
        .map(|i| base * (1.0 + f64::from(i % 9) * 0.02))
        .collect()
}

/// `nvpeer bench --json --mem host --test write_bw,write_lat -a --max-size 1M` in the shape the
/// bench writes it, its rows from the writers' own functions.
pub fn fixture_bench_host() -> BenchDoc {
    let sizes: Vec<u64> = (1..=20).map(|k| 1u64 << k).collect();
    let info = |test: &str| {
        crate::bench::PerftestInfo::from(&crate::report::TestInfo {
            test: test.into(),
            device: "rxe0".into(),
            link_layer: "Ethernet".into(),
            tx_depth: Some(128),
            cq_mod: Some(100),
            qps: 1,
            mtu: 4096,
            gid_index: 1,
            mem: "host".into(),
            ..Default::default()
        })
    };
    let bw_rows = sizes
        .iter()
        .map(|&s| {
            // a link of 400 MiB/s with 20 us per message
            let per_msg = 20e-6 + s as f64 / (400.0 * 1_048_576.0);
            let r = stats::bandwidth(s, 5000, per_msg * 5000.0, Some(per_msg * 0.9));
            Row::Bandwidth(crate::bench::BwRow::new(&r, false))
        })
        .collect();
    let lat_rows = sizes
        .iter()
        .map(|&s| {
            let l = stats::summarize(&samples(30.0 + s as f64 / 400.0)).expect("samples");
            Row::Latency(crate::bench::LatRow::new(s, 1000, &l))
        })
        .collect();
    BenchDoc {
        tool: "nvpeer bench".into(),
        version: "0.1.0".into(),
        mem: "host".into(),
        device: Some("rxe0".into()),
        environment: Some(Environment {
            command_line: format!("nvpeer bench --json --mem host --test write_bw,write_lat -a --max-size 1M {FIXTURE_NOTE}"),
            ..env("host")
        }),
        tests: vec![
            BenchTestDoc::ran("write_bw", info("RDMA_Write_BW_Test"), bw_rows),
            BenchTestDoc::ran("write_lat", info("RDMA_Write_imm_Latency_Test"), lat_rows),
        ],
    }
}

/// `nvpeer bench --json --mem emu --test reg -a --max-size 4M` on the bench's emulators.
pub fn fixture_bench_emu_reg() -> BenchDoc {
    let info = crate::bench::PerftestInfo {
        registration_path: Some("peer_mem_emu".into()),
        ..crate::bench::PerftestInfo::from(&crate::report::TestInfo {
            test: "Registration_Latency_Test".into(),
            device: "rxe0".into(),
            link_layer: "Ethernet".into(),
            mem: "emu".into(),
            ..Default::default()
        })
    };
    let rows = (1..=22)
        .map(|k| {
            let s = 1u64 << k;
            let pages = s.div_ceil(65536) as f64;
            let sum = |base: f64| stats::summarize(&samples(base)).expect("samples");
            Row::Registration(crate::bench::RegRow {
                msg_size: s,
                n_iterations: 1000,
                reg: sum(8.0 + 0.6 * pages),
                dereg: sum(5.0 + 0.2 * pages),
                reg_dereg: sum(13.0 + 0.8 * pages),
            })
        })
        .collect();
    BenchDoc {
        tool: "nvpeer bench".into(),
        version: "0.1.0".into(),
        mem: "emu".into(),
        device: Some("rxe0".into()),
        environment: Some(Environment {
            command_line: format!(
                "nvpeer bench --json --mem emu --test reg -a --max-size 4M {FIXTURE_NOTE}"
            ),
            ..env("emu")
        }),
        tests: vec![BenchTestDoc::ran("reg", info, rows)],
    }
}

/// A host run with timed transfers, one failure and strings a browser must not take for markup.
fn hostile_host_doc() -> ValidateReport {
    let t = |op: &str, us: f64| Transfer {
        op: op.into(),
        from: "host".into(),
        to: "host".into(),
        path: "ibv_reg_mr".into(),
        bytes: 65536,
        micros: us,
    };
    let mut d = doc(
        "host",
        vec![
            CaseResult::pass("cap.memory", "host memory"),
            CaseResult::pass("xfer.write.host->host[ibv_reg_mr]", "65536 bytes (80 us)")
                .with_transfer(t("write", 80.0)),
            CaseResult::pass("xfer.read.host->host[ibv_reg_mr]", "65536 bytes (95 us)")
                .with_transfer(t("read", 95.0)),
            CaseResult::fail(
                "xfer.<b>send-recv</b>",
                "<script>alert('x')</script> & \"quoted\"",
                "payload <corrupted> & lost",
            ),
        ],
        vec!["inval.free-idle[ibv_reg_mr]".into()],
        None,
    );
    d.environment.host = Some("<img src=x onerror=alert(1)>".into());
    d
}

fn written_page(
    name: &str,
    d: &ValidateReport,
    benches: &[PathBuf],
) -> (tempfile::TempDir, String) {
    let dir = scratch(name);
    write(dir.path(), d, benches).expect("the report is written");
    let html = std::fs::read_to_string(dir.path().join(PAGE)).expect("index.html");
    (dir, html)
}

/// What in the page could make a browser fetch or run anything: an address anywhere, a
/// stylesheet import, and in the markup's tags (node strings are escaped, so every `<` left
/// opens a real tag) a script, an embedded resource or an attribute that loads one.
fn fetches_or_runs(html: &str) -> Vec<String> {
    let mut found: Vec<String> = ["http://", "https://", "@import", "url("]
        .into_iter()
        .filter(|w| html.contains(w))
        .map(str::to_string)
        .collect();
    for tag in html.split('<').skip(1).filter_map(|t| t.split('>').next()) {
        let name = tag
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let bad_name = [
            "script", "link", "img", "iframe", "object", "embed", "use", "image",
        ]
        .contains(&name.as_str());
        let bad_attr = [" src=", "xlink:href", " on", "href=\"//", "href=\"http"]
            .iter()
            .any(|a| tag.to_ascii_lowercase().contains(a));
        if bad_name || bad_attr {
            found.push(format!("<{tag}>"));
        }
    }
    found
}

#[test]
fn fixtures_are_what_the_types_write() {
    let want = [
        ("validate-emu.json", pretty(&fixture_validate_emu())),
        ("bench-host.json", pretty(&fixture_bench_host())),
        ("bench-emu-reg.json", pretty(&fixture_bench_emu_reg())),
    ];
    for (name, body) in want {
        let path = fixture_path(name);
        if std::env::var_os("NVPEER_WRITE_FIXTURES").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &body).unwrap();
        }
        let have = std::fs::read(&path).unwrap_or_default();
        assert!(
            have == body,
            "{} differs from what the types write: NVPEER_WRITE_FIXTURES=1 cargo test fixtures_are",
            path.display()
        );
    }
    // And they read back through the report's own readers.
    let v = read_validate(&fixture_path("validate-emu.json")).unwrap();
    assert_eq!(v.cases.len(), fixture_validate_emu().cases.len());
    let b = read_bench(&fixture_path("bench-host.json")).unwrap();
    assert!(matches!(b.tests[0].results[0], Row::Bandwidth(_)));
    assert!(matches!(b.tests[1].results[0], Row::Latency(_)));
    let r = read_bench(&fixture_path("bench-emu-reg.json")).unwrap();
    assert!(matches!(r.tests[0].results[0], Row::Registration(_)));
    assert_eq!(
        r.tests[0].info().registration_path.as_deref(),
        Some("peer_mem_emu")
    );
}

#[test]
fn the_verdict_comes_first_then_the_environment_then_every_case() {
    let d = fixture_validate_emu();
    let (_, html) = written_page("order", &d, &[]);
    let at = |w: &str| html.find(w).unwrap_or_else(|| panic!("{w} missing"));
    assert!(at("id=\"verdict\"") < at("id=\"environment\""));
    assert!(at("id=\"environment\"") < at("id=\"cases\""));
    assert!(at("id=\"cases\"") < at("id=\"plots\""));
    assert!(at("nvpeer validate: PASSED") < at("<table>"));
    let s = &d.summary;
    assert!(html.contains(&format!(
        "{} passed, {} failed, {} skipped, 0 not run",
        s.passed, s.failed, s.skipped
    )));
    assert!(html.contains("Exit status <b>0</b>"));
    // Every case once, in a row of the cases table.
    let table = &html[at("id=\"cases\"")..at("id=\"plots\"")];
    for c in &d.cases {
        let cell = format!("<td><code>{}</code></td>", page::escape(&c.name));
        assert_eq!(table.matches(&cell).count(), 1, "{}", c.name);
    }
    assert_eq!(table.matches("<tr class=").count(), d.cases.len());
    // The environment and topology as validate recorded them.
    let envs = &html[at("id=\"environment\"")..at("id=\"cases\"")];
    for v in [
        "7.2.0-nvpeer-bench",
        "rxe0",
        "rdma_rxe",
        "nvpeer 0.1.0",
        "emu",
        "loopback",
    ] {
        assert!(envs.contains(v), "{v}");
    }
    // emu timed no transfer: no plot of validate's, and the page says why.
    assert!(html.contains("This run timed no transfer"));
    assert!(!html.contains("<svg"));
}

#[test]
fn node_strings_are_escaped_and_nothing_is_fetched() {
    let d = hostile_host_doc();
    let (_, html) = written_page("escape", &d, &[]);
    assert_eq!(fetches_or_runs(&html), Vec::<String>::new());
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;")
    );
    assert!(html.contains("<code>xfer.&lt;b&gt;send-recv&lt;/b&gt;</code>"));
    assert!(html.contains("probable cause: payload &lt;corrupted&gt; &amp; lost"));
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    // A failure and a case not run: the verdict says so, the not-run case is in the table.
    assert!(html.contains("nvpeer validate: FAILED") && html.contains("Exit status <b>1</b>"));
    assert!(html.contains("<code>inval.free-idle[ibv_reg_mr]</code></td><td class=\"st\">NOT RUN"));
    let mut blocked = d.clone();
    blocked.blocked_by = Some("cap.rdma-device failed".into());
    assert_eq!(page::escape("<&>\"'"), "&lt;&amp;&gt;&quot;&#39;");
    let (_, html) = written_page("blocked", &blocked, &[]);
    assert!(html.contains("COULD NOT RUN") && html.contains("Exit status <b>2</b>"));
}

#[test]
fn transfers_and_bench_sweeps_are_plotted_inline() {
    let d = hostile_host_doc();
    let dir = scratch("benches-in");
    let (a, b) = (dir.path().join("host.json"), dir.path().join("reg.json"));
    std::fs::write(&a, pretty(&fixture_bench_host())).unwrap();
    std::fs::write(&b, pretty(&fixture_bench_emu_reg())).unwrap();
    let (out, html) = written_page("benches", &d, &[a, b]);
    let out = out.path();
    // validate: bandwidth and time of its two timed messages; bench: bandwidth, latency, reg.
    assert_eq!(html.matches("<svg").count(), 5, "{html}");
    assert_eq!(html.matches("</svg>").count(), 5);
    for t in [
        "validate: one message per case, bandwidth",
        "bench: bandwidth (BW average)",
        "bench: latency (t_typical, the median)",
        "bench: registration cost (median)",
    ] {
        assert!(
            html.contains(&format!("<figcaption>{t}</figcaption>")),
            "{t}"
        );
    }
    assert!(
        html.contains("write host-&gt;host [ibv_reg_mr]"),
        "legend label escaped"
    );
    assert_eq!(fetches_or_runs(&html), Vec::<String>::new());
    // The files beside the page, each readable by its own reader.
    for f in [
        "validate.json",
        "validate.xml",
        "bench-1.json",
        "bench-1.xml",
        "bench-1-write_bw.perftest.json",
        "bench-1-write_lat.perftest.json",
        "bench-2.json",
        "bench-2-reg.perftest.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
        assert!(html.contains(&format!("<a href=\"{f}\">")), "{f} listed");
    }
    let back = read_validate(&out.join("validate.json")).unwrap();
    assert_eq!(back.summary, d.summary);
    assert_eq!(back.cases[1].transfer, d.cases[1].transfer);
    let xml = std::fs::read_to_string(out.join("validate.xml")).unwrap();
    assert_eq!(
        xml.matches("<testcase ").count(),
        d.cases.len() + d.not_run.len()
    );
    let pt = std::fs::read_to_string(out.join("bench-1-write_bw.perftest.json")).unwrap();
    let pt: serde_json::Value = serde_json::from_str(&pt).unwrap();
    assert_eq!(pt["test_info"]["test"], "RDMA_Write_BW_Test");
    assert_eq!(pt["results"].as_array().map(Vec::len), Some(20));
}

#[test]
fn a_single_size_still_makes_an_axis() {
    let figs = series::from_validate(&hostile_host_doc());
    assert_eq!(figs.len(), 2);
    assert_eq!(figs[0].series.len(), 2);
    assert_eq!(figs[0].series[0].points.len(), 1);
    // 65536 bytes in 80 us
    let (x, y) = figs[0].series[0].points[0];
    assert_eq!(x, 65536);
    assert!((y - 65536.0 / 80e-6 / 1_048_576.0).abs() < 1e-9);
    for f in &figs {
        let svg = plots::svg(f).unwrap();
        assert!(svg.starts_with("<svg") && !svg.contains("xmlns"), "{svg}");
    }
    assert_eq!(plots::size_label(4096.0), "4K");
    assert_eq!(plots::size_label(1536.0), "1.5K");
    assert_eq!(plots::size_label(2.0), "2");
}

#[test]
fn wrong_documents_are_named_errors() {
    let dir = scratch("wrong");
    let dir = dir.path();
    let f = dir.join("bench.json");
    std::fs::write(&f, pretty(&fixture_bench_host())).unwrap();
    assert!(matches!(
        read_validate(&f),
        Err(ReportError::NotValidate { .. })
    ));
    let v = dir.join("validate.json");
    std::fs::write(&v, pretty(&fixture_validate_emu())).unwrap();
    assert!(matches!(read_bench(&v), Err(ReportError::NotBench { .. })));
    assert!(matches!(
        read_validate(&dir.join("missing.json")),
        Err(ReportError::Read { .. })
    ));
    let e = write(&dir.join("out"), &fixture_validate_emu(), &[v]).unwrap_err();
    assert!(
        e.to_string()
            .contains("is not an `nvpeer bench --json` document"),
        "{e}"
    );
    // A case without a transfer keeps the JSON it always had.
    let j = serde_json::to_value(CaseResult::pass("cap.memory", "x")).unwrap();
    assert!(j.get("transfer").is_none());
}

/// A bench document is the user's file: its test names never leave the report's directory or
/// overwrite one another, and a test whose every figure is zero is a note, not a lost report.
#[test]
fn hostile_bench_documents_still_make_a_report_inside_its_directory() {
    let mut b = fixture_bench_host();
    let bw = b.tests[0].clone();
    b.tests = [
        "../../escaped",
        "a/b",
        "",
        ".hidden",
        "write_bw",
        "write_bw",
    ]
    .iter()
    .map(|name| BenchTestDoc {
        test: (*name).into(),
        ..bw.clone()
    })
    .collect();
    for row in &mut b.tests[5].results {
        if let Row::Bandwidth(r) = row {
            r.bw_average = 0.0;
            r.bw_peak = 0.0;
        }
    }
    // Only the zeroed test: its plot has nothing to draw.
    let mut zero = b.clone();
    zero.tests.drain(..5);
    let dir = scratch("hostile");
    let (a, z) = (dir.path().join("a.json"), dir.path().join("z.json"));
    std::fs::write(&a, pretty(&b)).unwrap();
    std::fs::write(&z, pretty(&zero)).unwrap();
    let out = dir.path().join("out");
    let w = write(&out, &fixture_validate_emu(), &[a]).expect("the report is written");
    for f in &w.files {
        assert!(
            !f.contains('/') && !f.starts_with('.') && out.join(f).is_file(),
            "{f}"
        );
    }
    let perftest: Vec<&String> = w
        .files
        .iter()
        .filter(|f| f.starts_with("bench-1-"))
        .collect();
    assert_eq!(
        perftest,
        [
            "bench-1-_.._.._escaped.perftest.json",
            "bench-1-a_b.perftest.json",
            "bench-1-_.perftest.json",
            "bench-1-_.hidden.perftest.json",
            "bench-1-write_bw.perftest.json",
            "bench-1-write_bw-2.perftest.json",
        ]
    );
    assert!(!dir.path().join("escaped.perftest.json").exists());
    let out = dir.path().join("zero");
    write(&out, &fixture_validate_emu(), &[z]).expect("the report is written");
    let html = std::fs::read_to_string(out.join(PAGE)).unwrap();
    assert!(
        html.contains("nothing to plot (no figure above zero in the documents)"),
        "{html}"
    );
}

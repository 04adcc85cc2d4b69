//! The page: one HTML file with its style and its plots inline, nothing fetched. The answer
//! first (the verdict, the counts, what the exit status means), then the environment and
//! topology, every case, the plots, and the files it summarises. Every string that comes from
//! the node is escaped.

use crate::report::{Status, ValidateReport};
use nvpeer_verdict::Verdict;

/// What the page shows beside the validate document.
pub struct PageInput<'a> {
    pub doc: &'a ValidateReport,
    /// The bench documents given: (name in the report, file it came from, tests that could not
    /// run as (test, error)).
    pub benches: Vec<BenchLine>,
    /// Each plot's SVG with its figure's title, validate's first.
    pub plots: Vec<Plot>,
    /// Why plots are missing: validate's own, and any figure with nothing to draw.
    pub plot_notes: Vec<String>,
    /// The files beside the page: (file name, what it is).
    pub files: Vec<(String, String)>,
}

pub struct BenchLine {
    pub name: String,
    pub source: String,
    pub tests: Vec<String>,
    pub errors: Vec<(String, String)>,
}

pub struct Plot {
    pub title: String,
    pub svg: String,
}

/// `s` with `& < > " '` escaped: safe in text and in a quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The verdict's word, its CSS class and what its exit status means.
fn verdict(v: Verdict) -> (&'static str, &'static str, &'static str) {
    match v {
        Verdict::Passed => (
            "PASSED",
            "pass",
            "every case that ran passed (skips allowed)",
        ),
        Verdict::Failed => (
            "FAILED",
            "fail",
            "a case failed: the node ran it and got a wrong or failed result",
        ),
        Verdict::CouldNotRun => (
            "COULD NOT RUN",
            "blocked",
            "a prerequisite failed (memory backend, RDMA device, dma-buf import, peer-memory \
             client or the two-node server): the cases behind it did not run",
        ),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}\
h1{margin:0 0 8px 0}h2{margin-top:32px;border-bottom:1px solid #ccc}\
.verdict{padding:16px 20px;border-radius:6px;border:2px solid}\
.verdict.pass{background:#e6f4ea;border-color:#2e7d32}\
.verdict.fail{background:#fdecea;border-color:#c62828}\
.verdict.blocked{background:#fff4e5;border-color:#ef6c00}\
table{border-collapse:collapse;width:100%;font-size:14px}\
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}\
tr.pass td.st{color:#2e7d32;font-weight:bold}tr.fail td.st{color:#c62828;font-weight:bold}\
tr.skip td.st,tr.notrun td.st{color:#777;font-weight:bold}tr.fail{background:#fff6f6}\
.cause{color:#c62828}.note{color:#555;font-size:14px}code{font-size:13px}\
figure{margin:16px 0}figcaption{font-size:13px;color:#555}";

/// A two-column table of `key: value` rows, both escaped.
fn pairs_table<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut t = String::from("<table>\n");
    for (k, v) in rows {
        t.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>\n",
            escape(k),
            escape(v)
        ));
    }
    t.push_str("</table>\n");
    t
}

/// The whole page.
pub fn render(p: &PageInput) -> String {
    let d = p.doc;
    let (word, _, _) = verdict(d.verdict());
    let host = d.environment.host.as_deref().unwrap_or("");
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    // Nothing to fetch and nothing to run: the browser is told so too.
    h.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'\">\n",
    );
    h.push_str(&format!(
        "<title>nvpeer validate: {word} — {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(host)
    ));

    answer(&mut h, d);
    environment(&mut h, d);
    cases(&mut h, d);
    plots(&mut h, p);
    files(&mut h, p);
    h.push_str("</body>\n</html>\n");
    h
}

/// 1. The answer: the verdict, the counts, what blocked the run, the failed cases.
fn answer(h: &mut String, d: &ValidateReport) {
    let status = d.verdict().exit_status();
    let (word, class, meaning) = verdict(d.verdict());
    let host = d.environment.host.as_deref().unwrap_or("");
    let s = &d.summary;
    h.push_str(&format!(
        "<section id=\"verdict\" class=\"verdict {class}\">\n<h1>nvpeer validate: {word}</h1>\n"
    ));
    h.push_str(&format!(
        "<p id=\"counts\"><b>{} passed, {} failed, {} skipped, {} not run</b> — --mem {}, {}{}</p>\n",
        s.passed,
        s.failed,
        s.skipped,
        s.not_run,
        escape(&d.mem),
        escape(&d.role),
        if host.is_empty() {
            String::new()
        } else {
            format!(", host {}", escape(host))
        }
    ));
    h.push_str(&format!(
        "<p>Exit status <b>{status}</b>: {meaning}. (0 every case that ran passed; 1 a case \
         failed; 2 could not run.)</p>\n"
    ));
    if let Some(b) = &d.blocked_by {
        h.push_str(&format!(
            "<p class=\"cause\">{} case(s) not run: {}; fix that first (its probable cause is in \
             the table).</p>\n",
            d.not_run.len(),
            escape(b)
        ));
    }
    let failed: Vec<_> = d
        .cases
        .iter()
        .filter(|c| c.status == Status::Fail)
        .collect();
    if !failed.is_empty() {
        h.push_str("<p>Failed:</p>\n<ul>\n");
        for c in failed {
            h.push_str(&format!(
                "<li><code>{}</code>: {}</li>\n",
                escape(&c.name),
                escape(c.cause.as_deref().unwrap_or(&c.detail))
            ));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");
}

/// 2. The environment and the topology.
fn environment(h: &mut String, d: &ValidateReport) {
    h.push_str("<section id=\"environment\">\n<h2>Environment and topology</h2>\n");
    let mut rows = vec![
        ("memory backend".to_string(), d.mem.clone()),
        ("role".to_string(), d.role.clone()),
        ("report of".to_string(), format!("{} {}", d.tool, d.version)),
    ];
    rows.extend(d.environment.pairs());
    h.push_str(&pairs_table(
        rows.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ));
    if !d.facts.is_empty() {
        h.push_str("<h3>Backend and device facts</h3>\n");
        h.push_str(&pairs_table(
            d.facts.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
    }
    h.push_str("</section>\n");
}

/// 3. Every case, in the order it ran, then the ones not run.
fn cases(h: &mut String, d: &ValidateReport) {
    h.push_str(&format!(
        "<section id=\"cases\">\n<h2>Cases ({})</h2>\n<table>\n<thead><tr><th>case</th>\
         <th>verdict</th><th>duration</th><th>details</th></tr></thead>\n<tbody>\n",
        d.cases.len() + d.not_run.len()
    ));
    for c in &d.cases {
        let (st, cls) = match c.status {
            Status::Pass => ("PASS", "pass"),
            Status::Fail => ("FAIL", "fail"),
            Status::Skip => ("SKIP", "skip"),
        };
        let mut detail = escape(&c.detail);
        if let Some(cause) = &c.cause {
            detail.push_str(&format!(
                "<br><span class=\"cause\">probable cause: {}</span>",
                escape(cause)
            ));
        }
        h.push_str(&format!(
            "<tr class=\"{cls}\"><td><code>{}</code></td><td class=\"st\">{st}</td>\
             <td class=\"num\">{} ms</td><td>{detail}</td></tr>\n",
            escape(&c.name),
            c.duration_ms
        ));
    }
    for (name, why) in d.not_run_reasons() {
        h.push_str(&format!(
            "<tr class=\"notrun\"><td><code>{}</code></td><td class=\"st\">NOT RUN</td>\
             <td class=\"num\">–</td><td>{}</td></tr>\n",
            escape(&name),
            escape(&why)
        ));
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

/// 4. The plots, and the bench documents they come from.
fn plots(h: &mut String, p: &PageInput) {
    h.push_str("<section id=\"plots\">\n<h2>Bandwidth and latency against message size</h2>\n");
    h.push_str(
        "<p class=\"note\">validate is a conformance suite, not a benchmark: each <code>xfer.*</code> \
         case moves one message of <code>--xfer-size</code> and times it from the post to the \
         completion (with the receive, for write-imm and send-recv), so its plots have one point \
         per operation, direction and path, at one size. Sweeps come from <code>nvpeer bench \
         --json</code> documents given with <code>--report-bench</code>.</p>\n",
    );
    for n in &p.plot_notes {
        h.push_str(&format!("<p class=\"note\">{}</p>\n", escape(n)));
    }
    for b in &p.benches {
        h.push_str(&format!(
            "<p class=\"note\">bench document <code>{}</code> (from <code>{}</code>): {}</p>\n",
            escape(&b.name),
            escape(&b.source),
            escape(&b.tests.join(", "))
        ));
        for (t, e) in &b.errors {
            h.push_str(&format!(
                "<p class=\"cause\">bench test <code>{}</code> could not run: {}</p>\n",
                escape(t),
                escape(e)
            ));
        }
    }
    for plot in &p.plots {
        h.push_str(&format!(
            "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
            plot.svg,
            escape(&plot.title)
        ));
    }
    h.push_str("</section>\n");
}

/// 5. The files beside the page.
fn files(h: &mut String, p: &PageInput) {
    h.push_str("<section id=\"files\">\n<h2>Files</h2>\n<ul>\n");
    for (f, what) in &p.files {
        h.push_str(&format!(
            "<li><a href=\"{0}\"><code>{0}</code></a>: {1}</li>\n",
            escape(f),
            escape(what)
        ));
    }
    h.push_str("</ul>\n</section>\n");
}

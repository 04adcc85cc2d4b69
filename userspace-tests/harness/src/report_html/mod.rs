//! `nvpeer validate --report DIR`: one self-contained HTML page (index.html: no script, no
//! fetched style, font or image; the plots inline as SVG) with the verdict first, the
//! environment, every case and the plots of bandwidth and latency against message size, and
//! beside it the files it summarises: validate.json (the `--json` document), validate.xml
//! (JUnit), and for every `--report-bench` document its copy, its JUnit file and one
//! perftest-format file per test (docs/validation.md, "The report").
//!
//! Files by concept: `error` (why a report could not be written), the bench's JSON document
//! (typed in `crate::bench`, which writes it), `series` (what is plotted), `plots` (the SVG), `page` (the HTML).

mod error;
mod page;
mod plots;
mod series;
#[cfg(test)]
mod tests;

pub use crate::bench::{BenchDoc, BenchTestDoc, Row};
pub use error::ReportError;
pub use series::{Figure, Series};

use crate::report::ValidateReport;
use std::path::{Path, PathBuf};

/// The page's file name in DIR.
pub const PAGE: &str = "index.html";

/// What [`write`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub dir: PathBuf,
    pub files: Vec<String>,
}

impl Written {
    /// The line the CLI prints.
    pub fn summary(&self) -> String {
        format!(
            "report: {} ({})",
            self.dir.join(PAGE).display(),
            self.files.join(", ")
        )
    }
}

fn read(path: &Path) -> Result<String, ReportError> {
    std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A saved `nvpeer validate --json` document.
pub fn read_validate(path: &Path) -> Result<ValidateReport, ReportError> {
    serde_json::from_str(&read(path)?).map_err(|source| ReportError::NotValidate {
        path: path.to_path_buf(),
        source,
    })
}

/// A saved `nvpeer bench --json` document.
pub fn read_bench(path: &Path) -> Result<BenchDoc, ReportError> {
    serde_json::from_str(&read(path)?).map_err(|source| ReportError::NotBench {
        path: path.to_path_buf(),
        source,
    })
}

fn put(dir: &Path, name: &str, body: &[u8]) -> Result<(), ReportError> {
    let path = dir.join(name);
    nvpeer_files::write_file(&path, body).map_err(|e| ReportError::Write {
        path,
        source: e.into_io(),
    })
}

fn pretty<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s.into_bytes()
}

/// `test` (a bench document's own string) as part of a file name in the report's directory:
/// letters, digits, `-`, `_` and `.` kept, anything else (`/` among them) as `_`, no leading `.`
/// (so neither `..` nor a hidden file), never empty; `taken` keeps two tests from one file.
fn file_part(test: &str, taken: &mut std::collections::HashSet<String>) -> String {
    let mut base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if base.is_empty() || base.starts_with('.') {
        base.insert(0, '_');
    }
    let mut name = base.clone();
    let mut n = 1;
    while !taken.insert(name.clone()) {
        n += 1;
        name = format!("{base}-{n}");
    }
    name
}

fn junit_error(dir: &Path, name: &str, source: std::io::Error) -> ReportError {
    ReportError::Write {
        path: dir.join(name),
        source,
    }
}

/// Writes the report of `doc` into `dir` (created if missing), with the bench documents of
/// `bench_files` plotted and kept beside it.
pub fn write(
    dir: &Path,
    doc: &ValidateReport,
    bench_files: &[PathBuf],
) -> Result<Written, ReportError> {
    let benches = bench_files
        .iter()
        .map(|f| read_bench(f).map(|d| (f.clone(), d)))
        .collect::<Result<Vec<_>, _>>()?;
    nvpeer_files::report_dir(dir).map_err(|e| ReportError::Write {
        path: dir.to_path_buf(),
        source: e.into_io(),
    })?;
    let mut files: Vec<(String, String)> = Vec::new();

    put(dir, "validate.json", &pretty(doc))?;
    files.push((
        "validate.json".into(),
        "the run as `nvpeer validate --json` prints it".into(),
    ));
    let xml = crate::junit::render(
        "nvpeer validate",
        &doc.cases,
        &doc.not_run_reasons(),
        &doc.properties(),
    )
    .map_err(|e| junit_error(dir, "validate.xml", e))?;
    put(dir, "validate.xml", &xml)?;
    files.push((
        "validate.xml".into(),
        "JUnit XML, as `--junit` writes it".into(),
    ));

    let mut lines = Vec::new();
    let mut named = Vec::new();
    for (i, (src, b)) in benches.iter().enumerate() {
        let name = format!("bench-{}", i + 1);
        put(dir, &format!("{name}.json"), &pretty(b))?;
        files.push((
            format!("{name}.json"),
            format!("`nvpeer bench --json` document, from {}", src.display()),
        ));
        let env = b.environment.clone().unwrap_or_default();
        let xml = crate::junit::render(
            "nvpeer bench",
            &crate::bench::junit_cases(&b.tests),
            &[],
            &env.pairs(),
        )
        .map_err(|e| junit_error(dir, &format!("{name}.xml"), e))?;
        put(dir, &format!("{name}.xml"), &xml)?;
        files.push((format!("{name}.xml"), "its JUnit XML".into()));
        let mut errors = Vec::new();
        let mut taken = std::collections::HashSet::new();
        for t in &b.tests {
            match (&t.error, &t.test_info) {
                (Some(e), _) => errors.push((t.test.clone(), e.clone())),
                (None, Some(info)) if !t.results.is_empty() => {
                    let f = format!("{name}-{}.perftest.json", file_part(&t.test, &mut taken));
                    put(
                        dir,
                        &f,
                        &pretty(&crate::bench::PerftestDoc::new(info, &t.results)),
                    )?;
                    files.push((f, format!("{}: perftest's --out_json document", t.test)));
                }
                _ => {}
            }
        }
        lines.push(page::BenchLine {
            name: format!("{name}.json"),
            source: src.display().to_string(),
            tests: b.tests.iter().map(|t| t.test.clone()).collect(),
            errors,
        });
        named.push(name);
    }

    let mut figures = series::from_validate(doc);
    let mut plot_notes: Vec<String> = figures
        .is_empty()
        .then(|| {
            "This run timed no transfer (no xfer.* case passed: with --mem emu they are skipped, \
             rxe cannot move data into emulated GPU pages), so validate has nothing to plot."
                .to_string()
        })
        .into_iter()
        .collect();
    let bench_named: Vec<series::NamedBench> = benches
        .iter()
        .zip(&named)
        .map(|((_, d), n)| series::NamedBench { name: n, doc: d })
        .collect();
    figures.extend(series::from_bench(&bench_named));
    // A figure whose every value is zero (or missing) is said, not drawn: its axes would be
    // empty, and the rest of the report is still worth writing.
    let (figures, empty): (Vec<_>, Vec<_>) = figures.into_iter().partition(Figure::has_positive);
    plot_notes.extend(empty.into_iter().map(|f| {
        format!(
            "{}: nothing to plot (no figure above zero in the documents)",
            f.title
        )
    }));
    let plots = figures
        .iter()
        .map(|f| {
            plots::svg(f).map(|svg| page::Plot {
                title: f.title.clone(),
                svg,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;

    let html = page::render(&page::PageInput {
        doc,
        benches: lines,
        plots,
        plot_notes,
        files: files.clone(),
    });
    put(dir, PAGE, html.as_bytes())?;
    let mut names = vec![PAGE.to_string()];
    names.extend(files.into_iter().map(|(f, _)| f));
    Ok(Written {
        dir: dir.to_path_buf(),
        files: names,
    })
}

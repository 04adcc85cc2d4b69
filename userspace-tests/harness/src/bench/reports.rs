//! The bench's output files: the `--json` document (every test, the environment) and perftest's
//! `--out_json` document of the one test.

use crate::cli::{BenchArgs, MemKind};
use crate::report;
use crate::verbs::Device;
use serde_json::{json, Value};

/// Prints the `--json` document (nvpeer's: every test, the environment) and writes the
/// `--out_json` file (perftest's document of the one test); false when the file could not be
/// written or its test did not run.
pub(super) fn write_reports(
    args: &BenchArgs,
    mem_kind: MemKind,
    dev: Option<&Device>,
    env: &crate::environment::Environment,
    tests: &[Value],
) -> bool {
    let mut ok = true;
    if args.common.json {
        let doc = json!({
            "tool": "nvpeer bench",
            "version": env!("CARGO_PKG_VERSION"),
            "mem": mem_kind.to_string(),
            "device": dev.map(|d| d.name.clone()),
            "environment": env,
            "tests": tests,
        });
        report::say(&serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    if let Some(f) = args.json_file() {
        // One test per file (BenchArgs::check); a failed test leaves no file, as in perftest.
        match tests.first() {
            Some(t) if t.get("error").is_none() => {
                let rows = t["results"].as_array().cloned().unwrap_or_default();
                let doc = report::perftest_doc(&t["test_info"], &rows);
                if let Err(e) =
                    std::fs::write(&f, serde_json::to_string_pretty(&doc).unwrap_or_default())
                {
                    eprintln!("nvpeer bench: writing {}: {e}", f.display());
                    ok = false;
                }
            }
            _ => ok = false,
        }
    }
    ok
}

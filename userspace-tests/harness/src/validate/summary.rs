//! The suite's closing summary: the text or JSON report, the JUnit file, the exit status.

use super::Suite;
use crate::environment;
use crate::junit;
use crate::report;
use nvpeer_verdict::Verdict;
use std::path::Path;

impl Suite {
    /// Prints the report (text or JSON), writes the JUnit file if asked and keeps the JSON
    /// document for `--report` ([`Suite::document`]); returns the verdict: passed when every case
    /// that ran passed, failed when a case failed, could not run when a prerequisite failed or
    /// the JUnit file could not be written.
    pub(super) fn finish(&mut self) -> Verdict {
        let mut s = report::summarize(&self.results);
        s.not_run = self.not_run.len();
        let mut verdict = report::run_verdict(self.blocker.is_some(), &s);
        if self.quiet {
            return verdict;
        }
        let gpu_bus = self
            .info
            .iter()
            .find(|(k, _)| k == "pci bus id")
            .map(|(_, v)| v.as_str());
        let env = environment::collect(
            Path::new("/"),
            self.dev.as_ref().map(|d| d.name.as_str()),
            gpu_bus,
            environment::ofed_info(),
        );
        if self.args.common.json || self.args.report.is_some() {
            self.document = Some(report::ValidateReport {
                tool: "nvpeer validate".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                mem: self.args.common.mem.to_string(),
                role: format!("{:?}", self.args.common.role()).to_lowercase(),
                environment: env.clone(),
                facts: self.info.iter().cloned().collect(),
                cases: self.results.clone(),
                blocked_by: self.blocker.clone(),
                not_run: self.not_run.iter().map(|(n, _)| n.clone()).collect(),
                summary: s,
            });
        }
        if self.args.common.json {
            if let Some(doc) = &self.document {
                report::print_json(doc);
            }
        } else {
            if let Some(b) = &self.blocker {
                report::say(&format!(
                    "NOT RUN {} case(s): {b}; fix that first (see its probable cause above)",
                    self.not_run.len()
                ));
            }
            report::say(&env.text());
            report::say(&report::summary_line(&s));
        }
        if let Some(f) = &self.args.junit {
            let mut props = env.pairs();
            props.extend(self.info.iter().cloned());
            let written = junit::render("nvpeer validate", &self.results, &self.not_run, &props)
                .and_then(|x| {
                    nvpeer_files::write_file(f, &x).map_err(nvpeer_files::Error::into_io)
                });
            if let Err(e) = written {
                eprintln!("nvpeer validate: writing {}: {e}", f.display());
                verdict = Verdict::CouldNotRun;
            }
        }
        verdict
    }
}

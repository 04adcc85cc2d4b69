//! The suite's closing summary: the text or JSON report, the JUnit file, the exit status.

use super::Suite;
use crate::environment;
use crate::junit;
use crate::report;
use std::path::Path;

impl Suite {
    /// Prints the report (text or JSON), writes the JUnit file if asked; returns the exit status:
    /// 0 all ran cases passed, 1 a case failed, 2 a prerequisite failed (the suite could not run).
    pub(super) fn finish(&self) -> u8 {
        let mut s = report::summarize(&self.results);
        s.not_run = self.not_run.len();
        if self.quiet {
            return if self.blocker.is_some() {
                2
            } else {
                u8::from(s.failed > 0)
            };
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
        let mut code = if self.blocker.is_some() {
            2
        } else {
            u8::from(s.failed > 0)
        };
        if self.args.common.json {
            let r = report::ValidateReport {
                tool: "nvpeer validate",
                version: env!("CARGO_PKG_VERSION"),
                mem: self.args.common.mem.to_string(),
                role: format!("{:?}", self.args.common.role()).to_lowercase(),
                environment: &env,
                facts: self
                    .info
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
                cases: &self.results,
                blocked_by: self.blocker.as_deref(),
                not_run: self.not_run.iter().map(|(n, _)| n.as_str()).collect(),
                summary: s,
            };
            report::print_json(&r);
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
                .and_then(|x| std::fs::write(f, x));
            if let Err(e) = written {
                eprintln!("nvpeer validate: writing {}: {e}", f.display());
                code = 2;
            }
        }
        code
    }
}

//! `nvpeer emu regpath check`: what a merged document must hold.

use super::document::{LiveMrRow, Report, Via};
use super::inval_scale;
use serde_json::Value;

/// Problems of a merged document: a path without cells, a cell without latencies or rate, a
/// missing free latency or memory figure, and pins per registration (get_pages +
/// get_pages_persistent) other than expected for the paths named in `pins` (`PATH=N`).
pub(super) fn check(doc: &Report, pins: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    for p in &doc.paths {
        let name = &p.path;
        if p.cells.is_empty() {
            bad.push(format!("{name}: no cells"));
        }
        for c in &p.cells {
            let figures = [
                ("reg.median_ns", c.reg.median_ns as f64),
                ("reg.p99_ns", c.reg.p99_ns as f64),
                ("dereg.median_ns", c.dereg.median_ns as f64),
                ("regs_per_s", c.regs_per_s),
            ];
            for (figure, v) in figures {
                if v <= 0.0 {
                    bad.push(format!(
                        "{name} size {} threads {}: no {figure}",
                        c.size, c.threads
                    ));
                }
            }
            // The time split: every path spends time in the provider; a core path also in its
            // client's callbacks, which include the provider's calls (so client_own >= 0 up to
            // clock granularity, checked loosely).
            let t = c.time_split_ns_per_cycle.as_ref();
            let provider = t.map_or(0.0, |t| t.provider);
            let mean = t.map_or(0.0, |t| t.mean);
            if !(provider > 0.0 && provider <= mean) {
                bad.push(format!(
                    "{name} size {} threads {}: provider time {provider} ns not in (0, mean {mean}]",
                    c.size, c.threads
                ));
            }
            let client = t.and_then(|t| t.client_own);
            if p.via == Via::Core && !client.is_some_and(|v| v > -0.01 * mean) {
                // The split as the document holds it.
                let t = serde_json::to_value(t).unwrap_or(Value::Null);
                bad.push(format!(
                    "{name} size {} threads {}: no client time, or less than the provider's ({t})",
                    c.size, c.threads
                ));
            }
        }
        for r in &p.invalidation {
            if r.free_with_live_mr.median_ns == 0 {
                bad.push(format!("{name} size {}: no free latency", r.size));
            }
        }
        if p.memory
            .as_ref()
            .is_some_and(|m| m.mrs.is_none_or(|n| n == 0))
        {
            bad.push(format!("{name}: no live MRs for the memory figure"));
        }
        // Invalidation at scale: one callback per MR for the invalidating API, none for the
        // persistent one; a series that could not run is a problem, not a gap.
        if let Some(s) = p.inval_scale() {
            bad.extend(inval_scale::check(name, p.persistent_api, s));
        }
        for r in p.live_rows() {
            // (a row the guest's memory stopped says so, and is not a missing figure)
            if let LiveMrRow::Measured(c) = r {
                if c.reg.median_ns == 0 {
                    let live = c.live_mrs.map_or("null".into(), |l| l.to_string());
                    bad.push(format!(
                        "{name} with {live} live MRs: no registration latency"
                    ));
                }
            }
        }
        for s in &p.skipped {
            if s.why.starts_with("invalidation at scale") || s.why.starts_with("live-MR series") {
                // (quoted, as JSON)
                bad.push(format!("{name}: {}", Value::from(s.why.as_str())));
            }
        }
    }
    for spec in pins {
        let Some((name, want)) = spec.split_once('=') else {
            bad.push(format!("bad --pins '{spec}' (PATH=N)"));
            continue;
        };
        let want: f64 = want.parse().unwrap_or(f64::NAN);
        let Some(p) = doc.paths.iter().find(|p| p.path == name) else {
            bad.push(format!("{name}: not in the document"));
            continue;
        };
        for c in &p.cells {
            let got = c.provider_calls_per_reg.pins();
            if got != want {
                bad.push(format!(
                    "{name} size {} threads {}: {got} pins per registration, expected {want}",
                    c.size, c.threads
                ));
            }
        }
    }
    bad
}

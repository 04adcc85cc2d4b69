//! `nvpeer emu regpath check`: what a merged document must hold.

use super::inval_scale::{self, InvalScale};
use super::query::num;
use serde_json::Value;

/// Problems of a merged document: a path without cells, a cell without latencies or rate, a
/// missing free latency or memory figure, and pins per registration (get_pages +
/// get_pages_persistent) other than expected for the paths named in `pins` (`PATH=N`).
pub(super) fn check(doc: &Value, pins: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    let empty = Vec::new();
    let paths = doc["paths"].as_array().unwrap_or(&empty);
    for p in paths {
        let name = p["path"].as_str().unwrap_or("?");
        let cells = p["cells"].as_array().unwrap_or(&empty);
        if cells.is_empty() {
            bad.push(format!("{name}: no cells"));
        }
        for c in cells {
            for keys in [
                &["reg", "median_ns"][..],
                &["reg", "p99_ns"],
                &["dereg", "median_ns"],
                &["regs_per_s"],
            ] {
                if !num(c, keys).is_some_and(|v| v > 0.0) {
                    bad.push(format!(
                        "{name} size {} threads {}: no {}",
                        c["size"],
                        c["threads"],
                        keys.join(".")
                    ));
                }
            }
            // The time split: every path spends time in the provider; a core path also in its
            // client's callbacks, which include the provider's calls (so client_own >= 0 up to
            // clock granularity, checked loosely).
            let t = &c["time_split_ns_per_cycle"];
            let provider = num(t, &["provider"]).unwrap_or(0.0);
            let mean = num(t, &["mean"]).unwrap_or(0.0);
            if !(provider > 0.0 && provider <= mean) {
                bad.push(format!(
                    "{name} size {} threads {}: provider time {provider} ns not in (0, mean {mean}]",
                    c["size"], c["threads"]
                ));
            }
            if p["via"] == "core" && !num(t, &["client_own"]).is_some_and(|v| v > -0.01 * mean) {
                bad.push(format!(
                    "{name} size {} threads {}: no client time, or less than the provider's ({t})",
                    c["size"], c["threads"]
                ));
            }
        }
        for r in p["invalidation"].as_array().unwrap_or(&empty) {
            if !num(r, &["free_with_live_mr", "median_ns"]).is_some_and(|v| v > 0.0) {
                bad.push(format!("{name} size {}: no free latency", r["size"]));
            }
        }
        if p["memory"].is_object() && !num(&p["memory"], &["mrs"]).is_some_and(|v| v > 0.0) {
            bad.push(format!("{name}: no live MRs for the memory figure"));
        }
        // Invalidation at scale: one callback per MR for the invalidating API, none for the
        // persistent one; a series that could not run is a problem, not a gap.
        if !p["inval_scale"].is_null() {
            match serde_json::from_value::<InvalScale>(p["inval_scale"].clone()) {
                Ok(s) => bad.extend(inval_scale::check(
                    name,
                    p["persistent_api"].as_bool().unwrap_or(false),
                    &s,
                )),
                Err(e) => bad.push(format!("{name}: inval_scale is not a series: {e}")),
            }
        }
        for r in p["live_mrs"].as_array().unwrap_or(&empty) {
            // (a row the guest's memory stopped says so, and is not a missing figure)
            if r["stopped_by"].is_null() && !num(r, &["reg", "median_ns"]).is_some_and(|v| v > 0.0)
            {
                bad.push(format!(
                    "{name} with {} live MRs: no registration latency",
                    r["live_mrs"]
                ));
            }
        }
        for s in p["skipped"].as_array().unwrap_or(&empty) {
            if s["why"].as_str().is_some_and(|w| {
                w.starts_with("invalidation at scale") || w.starts_with("live-MR series")
            }) {
                bad.push(format!("{name}: {}", s["why"]));
            }
        }
    }
    for spec in pins {
        let Some((name, want)) = spec.split_once('=') else {
            bad.push(format!("bad --pins '{spec}' (PATH=N)"));
            continue;
        };
        let want: f64 = want.parse().unwrap_or(f64::NAN);
        let Some(p) = paths.iter().find(|p| p["path"] == name) else {
            bad.push(format!("{name}: not in the document"));
            continue;
        };
        for c in p["cells"].as_array().unwrap_or(&empty) {
            let pc = &c["provider_calls_per_reg"];
            let got = num(pc, &["get_pages"]).unwrap_or(0.0)
                + num(pc, &["get_pages_persistent"]).unwrap_or(0.0);
            if got != want {
                bad.push(format!(
                    "{name} size {} threads {}: {got} pins per registration, expected {want}",
                    c["size"], c["threads"]
                ));
            }
        }
    }
    bad
}

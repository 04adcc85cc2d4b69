//! `nvpeer doctor --npd`: the doctor as a Kubernetes node-problem-detector custom plugin. NPD's
//! protocol (kubernetes/node-problem-detector pkg/custompluginmonitor/plugin/plugin.go): the
//! plugin's exit status 0 is OK, 1 is a problem, any other Unknown; its standard output, trimmed,
//! is the condition's message, cut after `max_output_length` bytes (80 by default,
//! pkg/custompluginmonitor/types/config.go). The doctor's statuses are the same three
//! (nvpeer-verdict), so only the message is NPD's own: one ASCII line of at most [`MAX_LEN`]
//! bytes that names the root cause, the line a node's condition shows in `kubectl describe
//! node`. packaging/kubernetes/npd-nvpeer-gdr.json is a monitor configuration that runs it.

use crate::paths::State;
use crate::report::{Report, Verdict};

/// NPD's default `max_output_length`: the line never needs cutting.
pub const MAX_LEN: usize = 80;

/// The one line for NPD.
pub fn line(r: &Report) -> String {
    let ready: Vec<&str> = r
        .paths
        .iter()
        .filter(|v| v.state == State::Ready)
        .map(|v| match v.path {
            crate::paths::Path::Nvpeer => "nvpeer",
            crate::paths::Path::NvidiaPeermem => "nvidia-peermem",
            crate::paths::Path::Dmabuf => "dma-buf",
        })
        .collect();
    let text = match r.verdict {
        Verdict::Ready => format!("GPUDirect RDMA ready: {}", ready.join(", ")),
        Verdict::NotReady | Verdict::CouldNotCheck => {
            let word = if r.verdict == Verdict::NotReady {
                "not ready"
            } else {
                "could not check"
            };
            match r.root_cause() {
                Some(c) => match c.code {
                    Some(code) => format!("GPUDirect RDMA {word}: {code} {} {}", c.id, c.summary),
                    None => format!("GPUDirect RDMA {word}: {} {}", c.id, c.summary),
                },
                None => format!("GPUDirect RDMA {word}: run nvpeer doctor for the causes"),
            }
        }
    };
    ascii_within(&text, MAX_LEN)
}

/// `s` with every character outside printable ASCII as `?`, cut to `max` bytes (NPD cuts at a
/// byte, which could split a UTF-8 character).
fn ascii_within(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\u{2190}'..='\u{21ff}' => '>',
            _ => '?',
        })
        .collect();
    if out.len() > max {
        out.truncate(max.saturating_sub(3));
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_ascii_and_within_npds_default_length() {
        let s = ascii_within(
            "GPUDirect RDMA not ready: nvpeer.module ✘ nvpeer → load it",
            80,
        );
        assert_eq!(
            s,
            "GPUDirect RDMA not ready: nvpeer.module ? nvpeer > load it"
        );
        let long = ascii_within(&"x".repeat(200), MAX_LEN);
        assert_eq!(long.len(), MAX_LEN);
        assert!(long.ends_with("..."));
    }

    /// The sample monitor configuration is one NPD accepts (its Validate: plugin "custom", every
    /// permanent rule's condition among the default conditions, no rule timeout above the global
    /// one) and runs the CLI where the package installs it.
    #[test]
    fn the_sample_npd_configuration_is_valid() {
        let text = include_str!("../../../packaging/kubernetes/npd-nvpeer-gdr.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["plugin"], "custom");
        let secs = |s: &serde_json::Value| -> u64 {
            s.as_str().unwrap().trim_end_matches('s').parse().unwrap()
        };
        let global = secs(&v["pluginConfig"]["timeout"]);
        assert!(v["pluginConfig"]["max_output_length"].as_u64().unwrap() >= MAX_LEN as u64);
        let conditions: Vec<&str> = v["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        for rule in v["rules"].as_array().unwrap() {
            if rule["type"] == "permanent" {
                assert!(conditions.contains(&rule["condition"].as_str().unwrap()));
            }
            assert!(secs(&rule["timeout"]) <= global);
            assert_eq!(rule["path"], "/usr/bin/nvpeer");
            assert_eq!(rule["args"][0], "doctor");
            assert!(rule["args"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "--npd"));
        }
    }
}

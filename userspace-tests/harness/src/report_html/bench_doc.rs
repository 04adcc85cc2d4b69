//! The `nvpeer bench --json` document as the report reads it: every test with its rows in
//! perftest's keys (bandwidth, latency, or nvpeer's registration rows), typed.

use crate::environment::Environment;
use crate::stats::LatencySummary;
use serde::{Deserialize, Serialize};

/// nvpeer's multi-test document (docs/validation.md, "Output formats").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchDoc {
    pub tool: String,
    pub version: String,
    pub mem: String,
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    pub tests: Vec<BenchTestDoc>,
}

/// One test of the document: its rows, or why it could not run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchTestDoc {
    /// `reg`, `write_bw`, `read_bw`, `send_bw`, `write_lat`.
    pub test: String,
    /// perftest's `test_info`, kept whole: the perftest-format file beside the report carries it
    /// as the bench wrote it; [`BenchTestDoc::info`] reads what the report shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_info: Option<serde_json::Value>,
    #[serde(default)]
    pub results: Vec<Row>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the report reads of `test_info`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BenchInfo {
    #[serde(rename = "Device", default)]
    pub device: String,
    /// `--mem` of the run.
    #[serde(rename = "Memory", default)]
    pub memory: String,
    /// `MiB/sec`, or `Gb/sec` with `--report_gbits`.
    #[serde(rename = "BW_unit", default)]
    pub bw_unit: Option<String>,
    #[serde(rename = "Registration_path", default)]
    pub registration_path: Option<String>,
}

impl BenchTestDoc {
    /// The typed part of `test_info` (defaults where a key is missing).
    pub fn info(&self) -> BenchInfo {
        self.test_info
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }
}

/// One result row: which kind is told by its keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Row {
    Bandwidth(BwRow),
    Latency(LatRow),
    Registration(RegRow),
}

impl Row {
    pub fn msg_size(&self) -> u64 {
        match self {
            Row::Bandwidth(r) => r.msg_size,
            Row::Latency(r) => r.msg_size,
            Row::Registration(r) => r.msg_size,
        }
    }
}

/// perftest's bandwidth row (`--out_json` keys; the unit is the test's `BW_unit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwRow {
    #[serde(rename = "MsgSize")]
    pub msg_size: u64,
    pub n_iterations: u64,
    #[serde(rename = "BW_peak")]
    pub bw_peak: f64,
    #[serde(rename = "BW_average")]
    pub bw_average: f64,
    #[serde(rename = "MsgRate")]
    pub msg_rate: f64,
}

/// perftest's latency row, microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatRow {
    #[serde(rename = "MsgSize")]
    pub msg_size: u64,
    pub n_iterations: u64,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub percentile_99: f64,
    #[serde(rename = "percentile_99.9")]
    pub percentile_99_9: f64,
}

/// nvpeer's registration row: registration, deregistration and both, each summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegRow {
    #[serde(rename = "MsgSize")]
    pub msg_size: u64,
    pub n_iterations: u64,
    pub reg: LatencySummary,
    pub dereg: LatencySummary,
    pub reg_dereg: LatencySummary,
}

/// perftest's Gb/sec (10^9 bits) back to MiB/sec.
pub fn to_mib(value: f64, unit: Option<&str>) -> f64 {
    match unit {
        Some("Gb/sec") => value * 1e9 / (8.0 * 1_048_576.0),
        _ => value,
    }
}

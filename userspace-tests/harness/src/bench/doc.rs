//! The documents `nvpeer bench` writes, typed: `--json` (every test, the environment), perftest's
//! `--out_json` document of one test, and the rows and `test_info` block both carry in perftest's
//! keys. The bench writes them with these types; `validate --report` and `nvpeer bench --fleet`
//! read them back with the same ones.

use crate::environment::Environment;
use crate::line_rate::Threshold;
use crate::report::TestInfo;
use crate::stats::BwResult;
use crate::stats::LatencySummary;
use serde::{Deserialize, Serialize};

/// nvpeer's multi-test document (`--json`; docs/validation.md, "Output formats").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchDoc {
    /// `nvpeer bench`.
    pub tool: String,
    pub version: String,
    /// `--mem` of the run.
    pub mem: String,
    #[serde(default)]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    pub tests: Vec<BenchTestDoc>,
}

/// One test of the document: its rows, or why it could not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchTestDoc {
    /// `reg`, `write_bw`, `read_bw`, `send_bw`, `write_lat`.
    pub test: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_info: Option<PerftestInfo>,
    /// One row per size measured (empty for a test that could not run: always written, so that
    /// a test that ran and measured nothing still says so).
    #[serde(default)]
    pub results: Vec<Row>,
    /// A bandwidth test's line-rate verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
    /// What `--data-validation` checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_validation: Option<DataValidation>,
    /// Why the test could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl BenchTestDoc {
    /// A test that ran: its `test_info` and rows.
    pub fn ran(test: &str, info: PerftestInfo, results: Vec<Row>) -> Self {
        Self {
            test: test.into(),
            test_info: Some(info),
            results,
            threshold: None,
            data_validation: None,
            error: None,
        }
    }

    /// A test that could not run, and why.
    pub fn failed(test: &str, error: String) -> Self {
        Self {
            test: test.into(),
            test_info: None,
            results: Vec::new(),
            threshold: None,
            data_validation: None,
            error: Some(error),
        }
    }

    /// The test's `test_info` (defaults where the document has none).
    pub fn info(&self) -> PerftestInfo {
        self.test_info.clone().unwrap_or_default()
    }
}

/// What `--data-validation` checked in one test (`data_validation` in the `--json` document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataValidation {
    /// Sizes whose destination held the source's pattern after the run.
    pub sizes: u64,
    /// Which buffer was checked, in words.
    pub checked: String,
}

/// perftest's `test_info` block, in perftest's keys and order (`write_test_info_to_file`);
/// `Memory`, `BW_unit` and `Registration_path` are nvpeer's. Every key is optional when read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PerftestInfo {
    /// perftest's test name, e.g. `RDMA_Write_BW_Test`.
    pub test: String,
    #[serde(rename = "Dual_port")]
    pub dual_port: String,
    #[serde(rename = "Device")]
    pub device: String,
    #[serde(rename = "Number_of_qps")]
    pub number_of_qps: u32,
    #[serde(rename = "Transport_type")]
    pub transport_type: String,
    #[serde(rename = "Connection_type")]
    pub connection_type: String,
    #[serde(rename = "Using_SRQ")]
    pub using_srq: String,
    #[serde(rename = "PCIe_relax_order")]
    pub pcie_relax_order: String,
    /// perftest's two warnings when relaxed ordering is on and the host's root complex is one
    /// that mishandles it.
    #[serde(rename = "WARNING1", skip_serializing_if = "Option::is_none")]
    pub warning1: Option<String>,
    #[serde(rename = "WARNING2", skip_serializing_if = "Option::is_none")]
    pub warning2: Option<String>,
    #[serde(rename = "ibv_wr_API")]
    pub ibv_wr_api: String,
    #[serde(rename = "TX_depth", skip_serializing_if = "Option::is_none")]
    pub tx_depth: Option<u32>,
    /// perftest writes one for a send test's receiving side (its server, both sides of `-b`).
    #[serde(rename = "RX_depth", skip_serializing_if = "Option::is_none")]
    pub rx_depth: Option<u32>,
    #[serde(rename = "CQ_Moderation", skip_serializing_if = "Option::is_none")]
    pub cq_moderation: Option<u64>,
    /// Negotiated path MTU in bytes.
    #[serde(rename = "Mtu")]
    pub mtu: u32,
    /// `IB` or the port's link layer (`Ethernet`).
    #[serde(rename = "Link_type")]
    pub link_type: String,
    #[serde(rename = "GID_index")]
    pub gid_index: u32,
    /// READ tests: the READ depth in use; other tests have `Max_inline_data` instead.
    #[serde(rename = "Outstand_reads", skip_serializing_if = "Option::is_none")]
    pub outstand_reads: Option<u8>,
    #[serde(rename = "Max_inline_data", skip_serializing_if = "Option::is_none")]
    pub max_inline_data: Option<u32>,
    #[serde(rename = "rdma_cm_QPs")]
    pub rdma_cm_qps: String,
    /// The GPU selector when the memory is CUDA memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_device: Option<String>,
    #[serde(rename = "Use_ROCm_memory")]
    pub use_rocm_memory: String,
    #[serde(rename = "Data_ex_method")]
    pub data_ex_method: String,
    /// `-T`: the traffic class of the test's QPs. perftest writes `TOS` after `Data_ex_method`
    /// when a ToS was set (only on rdma_cm QPs; nvpeer sets it on every QP).
    #[serde(rename = "TOS", skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// `--mem` of the run.
    #[serde(rename = "Memory")]
    pub memory: String,
    /// `MiB/sec`, or `Gb/sec` with `--report_gbits`.
    #[serde(rename = "BW_unit", skip_serializing_if = "Option::is_none")]
    pub bw_unit: Option<String>,
    /// The registration test's path (`ibv_reg_mr`, ...).
    #[serde(rename = "Registration_path", skip_serializing_if = "Option::is_none")]
    pub registration_path: Option<String>,
}

impl From<&TestInfo> for PerftestInfo {
    fn from(t: &TestInfo) -> Self {
        let off = || "OFF".to_string();
        Self {
            test: t.test.clone(),
            dual_port: off(),
            device: t.device.clone(),
            number_of_qps: t.qps.max(1),
            transport_type: "IB".into(),
            connection_type: "RC".into(),
            using_srq: off(),
            pcie_relax_order: if t.relaxed_ordering {
                "ON".into()
            } else {
                off()
            },
            warning1: (t.relaxed_ordering && t.ro_noncompliant_cpu)
                .then(|| "CPU is not PCIe relaxed ordering compliant".into()),
            warning2: (t.relaxed_ordering && t.ro_noncompliant_cpu).then(|| {
                "You should disable PCIe RO with --disable_pcie_relaxed for both server and client"
                    .into()
            }),
            ibv_wr_api: "ON".into(),
            tx_depth: t.tx_depth,
            rx_depth: t.rx_depth,
            cq_moderation: t.cq_mod,
            mtu: t.mtu,
            link_type: if t.link_layer == "InfiniBand" {
                "IB".into()
            } else {
                t.link_layer.clone()
            },
            gid_index: t.gid_index,
            outstand_reads: t.out_reads,
            max_inline_data: t.out_reads.is_none().then_some(0),
            rdma_cm_qps: off(),
            cuda_device: t.cuda_device.clone(),
            use_rocm_memory: off(),
            data_ex_method: "Ethernet".into(),
            tos: t.tos,
            memory: t.mem.clone(),
            bw_unit: Some(if t.gbits { "Gb/sec" } else { "MiB/sec" }.into()),
            registration_path: None,
        }
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

impl BwRow {
    /// A measured size, in MiB/sec or with `gbits` in Gb/sec (as perftest's `--report_gbits`).
    pub fn new(r: &BwResult, gbits: bool) -> Self {
        let conv = |v: f64| {
            if gbits {
                crate::stats::mib_to_gbits(v)
            } else {
                v
            }
        };
        Self {
            msg_size: r.msg_size,
            n_iterations: r.iterations,
            bw_peak: conv(r.bw_peak_mib),
            bw_average: conv(r.bw_avg_mib),
            msg_rate: r.msg_rate_mpps,
        }
    }
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

impl LatRow {
    /// A measured size: `iters` samples summarised in `s`.
    pub fn new(size: u64, iters: u64, s: &LatencySummary) -> Self {
        Self {
            msg_size: size,
            n_iterations: iters,
            t_min: s.t_min,
            t_max: s.t_max,
            t_typical: s.t_typical,
            t_avg: s.t_avg,
            t_stdev: s.t_stdev,
            percentile_99: s.p99,
            percentile_99_9: s.p99_9,
        }
    }
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

/// perftest's `--out_json` document: `test_info` and `results`, the one result row as an object
/// (as perftest writes it); a sweep's rows as an array (perftest rewrites the file per size and
/// keeps only the last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerftestDoc {
    pub test_info: PerftestInfo,
    pub results: PerftestResults,
}

/// One row, or a sweep's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerftestResults {
    One(Row),
    Many(Vec<Row>),
}

impl PerftestDoc {
    pub fn new(info: &PerftestInfo, rows: &[Row]) -> Self {
        Self {
            test_info: info.clone(),
            results: match rows {
                [one] => PerftestResults::One(one.clone()),
                many => PerftestResults::Many(many.to_vec()),
            },
        }
    }
}

/// perftest's Gb/sec (10^9 bits) back to MiB/sec.
pub fn to_mib(value: f64, unit: Option<&str>) -> f64 {
    match unit {
        Some("Gb/sec") => value * 1e9 / (8.0 * 1_048_576.0),
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats;
    use serde_json::{json, Value};

    fn info_json(t: &TestInfo) -> Value {
        serde_json::to_value(PerftestInfo::from(t)).unwrap()
    }

    #[test]
    fn rows_and_documents_have_perftests_keys() {
        let r = stats::bandwidth(65536, 1000, 1.0, None);
        let j = serde_json::to_value(BwRow::new(&r, false)).unwrap();
        let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 5);
        for k in [
            "MsgSize",
            "n_iterations",
            "BW_peak",
            "BW_average",
            "MsgRate",
        ] {
            assert!(j.get(k).is_some(), "{k}");
        }
        let l = stats::summarize(&[1.0, 2.0, 3.0]).unwrap();
        let j = serde_json::to_value(LatRow::new(2, 3, &l)).unwrap();
        for k in [
            "t_min",
            "t_max",
            "t_typical",
            "t_avg",
            "t_stdev",
            "percentile_99",
            "percentile_99.9",
        ] {
            assert!(j.get(k).is_some(), "{k}");
        }
        // The document: test_info + results, one row as an object, a sweep as an array.
        let t = TestInfo {
            test: "RDMA_Write_BW_Test".into(),
            link_layer: "InfiniBand".into(),
            mtu: 4096,
            ..Default::default()
        };
        let info = info_json(&t);
        assert_eq!(info["Link_type"], "IB");
        // Relaxed ordering as perftest says it: ON unless --disable_pcie_relaxed; its two
        // warnings when ON on a root port that mishandles it.
        assert_eq!(info["PCIe_relax_order"], "OFF");
        let ro = info_json(&TestInfo {
            relaxed_ordering: true,
            ..t.clone()
        });
        assert_eq!(ro["PCIe_relax_order"], "ON");
        assert!(ro.get("WARNING1").is_none(), "{ro}");
        let warned = info_json(&TestInfo {
            relaxed_ordering: true,
            ro_noncompliant_cpu: true,
            ..t.clone()
        });
        assert_eq!(
            warned["WARNING1"],
            "CPU is not PCIe relaxed ordering compliant"
        );
        assert!(warned["WARNING2"]
            .as_str()
            .unwrap()
            .contains("--disable_pcie_relaxed"));
        assert_eq!(info["Max_inline_data"], 0);
        assert_eq!(info["Number_of_qps"], 1);
        // No -T, no TOS key (as perftest, which writes it only when a ToS was set); no RX_depth
        // unless given (perftest writes it for a send test's receiving side).
        assert!(info.get("TOS").is_none(), "{info}");
        assert!(info.get("RX_depth").is_none(), "{info}");
        // perftest's order (`write_test_info_to_file`), then nvpeer's keys.
        let text = serde_json::to_string(&PerftestInfo::from(&TestInfo {
            tos: Some(1),
            ..t.clone()
        }))
        .unwrap();
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap_or(usize::MAX);
        let keys = [
            "test",
            "Dual_port",
            "Device",
            "Number_of_qps",
            "Mtu",
            "Data_ex_method",
        ];
        let keys = [&keys[..], &["TOS", "Memory", "BW_unit"]].concat();
        assert!(keys.windows(2).all(|w| at(w[0]) < at(w[1])), "{text}");
        let send = info_json(&TestInfo {
            test: "Send_Bidirectional_BW_Test".into(),
            tx_depth: Some(128),
            rx_depth: Some(1000),
            out_reads: Some(16),
            ..Default::default()
        });
        assert_eq!(
            (send["TX_depth"].as_u64(), send["RX_depth"].as_u64()),
            (Some(128), Some(1000))
        );
        assert_eq!(send["Outstand_reads"], 16);
        assert!(send.get("Max_inline_data").is_none(), "{send}");
        let pinfo = PerftestInfo::from(&t);
        let one = Row::Bandwidth(BwRow::new(&r, false));
        let d = serde_json::to_value(PerftestDoc::new(&pinfo, std::slice::from_ref(&one))).unwrap();
        assert_eq!(d["results"]["MsgSize"], 65536);
        assert_eq!(d["test_info"]["test"], "RDMA_Write_BW_Test");
        let two = [one.clone(), Row::Bandwidth(BwRow::new(&r, true))];
        let d = serde_json::to_value(PerftestDoc::new(&pinfo, &two)).unwrap();
        assert_eq!(d["results"].as_array().unwrap().len(), 2);
        // And back: what the bench wrote reads as the same document.
        let back: PerftestDoc = serde_json::from_value(d).unwrap();
        assert_eq!(back, PerftestDoc::new(&pinfo, &two));
    }

    #[test]
    fn test_info_carries_the_tos_under_perftests_key() {
        for tos in [0u8, 106, 255] {
            let t = TestInfo {
                test: "RDMA_Write_BW_Test".into(),
                tos: Some(tos),
                ..Default::default()
            };
            let info = info_json(&t);
            // perftest's spelling, a JSON number, and in the --out_json document too.
            assert_eq!(info["TOS"], json!(tos), "{info}");
            assert!(info.get("tos").is_none() && info.get("ToS").is_none());
            let d = serde_json::to_value(PerftestDoc::new(&PerftestInfo::from(&t), &[])).unwrap();
            assert_eq!(d["test_info"]["TOS"], u64::from(tos));
        }
    }

    #[test]
    fn a_test_document_round_trips_and_reads_older_ones() {
        let l = stats::summarize(&[1.0, 2.0, 3.0]).unwrap();
        let reg = BenchTestDoc::ran(
            "reg",
            PerftestInfo {
                registration_path: Some("ibv_reg_mr".into()),
                ..PerftestInfo::default()
            },
            vec![Row::Registration(RegRow {
                msg_size: 4096,
                n_iterations: 3,
                reg: l,
                dereg: l,
                reg_dereg: l,
            })],
        );
        let failed = BenchTestDoc::failed("write_lat", "needs an RDMA device".into());
        for d in [&reg, &failed] {
            let v = serde_json::to_value(d).unwrap();
            assert_eq!(&serde_json::from_value::<BenchTestDoc>(v).unwrap(), d);
        }
        let v = serde_json::to_value(&failed).unwrap();
        assert!(
            v["results"] == json!([]) && v.get("test_info").is_none(),
            "{v}"
        );
        // A test that ran and measured nothing says so: empty results, no error.
        let none = serde_json::to_value(BenchTestDoc::ran("write_bw", Default::default(), vec![]))
            .unwrap();
        assert!(
            none["results"] == json!([]) && none.get("error").is_none(),
            "{none}"
        );
        // A document with only some of perftest's keys (an older nvpeer's, or hand-made).
        let old: BenchTestDoc = serde_json::from_value(json!({"test": "write_bw",
            "test_info": {"BW_unit": "Gb/sec"},
            "results": [{"MsgSize": 1, "n_iterations": 1, "BW_peak": 1.0, "BW_average": 1.0, "MsgRate": 0.1}]}))
        .unwrap();
        assert_eq!(old.info().bw_unit.as_deref(), Some("Gb/sec"));
        assert!(matches!(old.results[0], Row::Bandwidth(_)));
    }
}

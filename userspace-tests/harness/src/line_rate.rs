//! The port's line rate and the bandwidth verdict against it (issue 37, item 3).
//!
//! The line rate is the kernel's `/sys/class/infiniband/<dev>/ports/<port>/rate`: the active
//! speed times the active width, written by ib_core's `rate_show` (drivers/infiniband/core/
//! sysfs.c) as `"%d%s Gb/sec (%dX%s)"` (`100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`, `56 Gb/sec
//! (4X FDR)`, `400 Gb/sec (4X NDR)`), or `--line-rate GBPS`.
//!
//! The verdict follows NVIDIA's qualification scripts, Mellanox/ngc_multinode_perf
//! (`common.sh`, `run_perftest_clients`): a bandwidth test passes when perftest's `BW_average`
//! in Gb/s reaches `multiplier × 0.9 × port_rate`, where the multiplier is 2 for its default
//! bidirectional runs (`-b`, the sum of both directions) and 1 with `--unidir`. Here the fraction
//! is `--bw-threshold` (default 0.9), the multiplier is 2 with `-b` and 1 without, and the figure
//! is the test's largest message size (the one size without `-a`; ngc_multinode_perf judges its
//! one `-s` size, 65536 by default).

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The fraction of the line rate a bandwidth test must reach when `--bw-threshold` is not given
/// (ngc_multinode_perf's 0.9).
pub const DEFAULT_FRACTION: f64 = 0.9;

/// A port's line rate and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineRate {
    /// Gb/s (10^9 bits per second), one direction.
    pub gbps: f64,
    /// `sysfs` or `--line-rate`.
    pub source: String,
    /// The sysfs text (`100 Gb/sec (4X EDR)`), or the option's value.
    pub text: String,
}

/// The number of a sysfs `rate` text (`100 Gb/sec (4X EDR)` → 100, `2.5 Gb/sec (1X SDR)` →
/// 2.5); `None` for anything else (an empty file, a rate of 0, a unit other than Gb/sec).
pub fn parse_rate(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    let v: f64 = words.next()?.parse().ok()?;
    let unit = words.next()?;
    (unit.eq_ignore_ascii_case("Gb/sec") && v.is_finite() && v > 0.0).then_some(v)
}

/// The sysfs file of `dev`'s `port`.
pub fn rate_path(dev: &str, port: u8) -> String {
    format!("/sys/class/infiniband/{dev}/ports/{port}/rate")
}

/// Why a port has no line rate to judge against.
#[derive(Debug, thiserror::Error)]
pub enum NoLineRate {
    #[error("no RDMA device")]
    NoDevice,
    #[error("{path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a rate: {text:?}")]
    NotARate { path: String, text: String },
}

/// Reads `dev`'s `port` rate under `root`; `Err` says why there is none.
pub fn read(root: &Path, dev: &str, port: u8) -> Result<LineRate, NoLineRate> {
    let path = rate_path(dev, port);
    let text =
        std::fs::read_to_string(root.join(path.trim_start_matches('/'))).map_err(|source| {
            NoLineRate::Unreadable {
                path: path.clone(),
                source,
            }
        })?;
    let text = text.trim().to_string();
    match parse_rate(&text) {
        Some(gbps) => Ok(LineRate {
            gbps,
            source: "sysfs".into(),
            text,
        }),
        None => Err(NoLineRate::NotARate { path, text }),
    }
}

/// Whether `dev` is a software RDMA device (rxe, siw: they publish the netdev they run on as
/// `parent`): its rate is derived from the netdev's speed, not a NIC's line rate.
pub fn software_device(root: &Path, dev: &str) -> bool {
    root.join(format!("sys/class/infiniband/{dev}/parent"))
        .exists()
}

/// Parses `--line-rate` (Gb/s, one direction).
pub fn parse_gbps(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': expected a line rate in Gb/s, e.g. 100 or 400"))?;
    if v.is_finite() && v > 0.0 && v <= 100_000.0 {
        Ok(v)
    } else {
        Err(format!(
            "'{s}': a line rate is above 0 and at most 100000 Gb/s"
        ))
    }
}

/// Parses `--bw-threshold`: a fraction above 0, at most 1.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': expected a fraction of the line rate, e.g. 0.9"))?;
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("'{s}': the fraction is above 0 and at most 1"))
    }
}

/// A bandwidth test's verdict against the line rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateVerdict {
    Pass,
    Fail,
    /// No line rate known (the reason is in [`Threshold::reason`]).
    NoThreshold,
}

/// The verdict of one bandwidth test, as the `--json` document carries it (`threshold`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub verdict: RateVerdict,
    /// The line rate judged against, one direction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_rate: Option<LineRate>,
    /// `--bw-threshold`.
    pub fraction: f64,
    /// 2 for a bidirectional (`-b`) test, whose figure is the sum of both directions; else 1.
    pub directions: u32,
    /// `directions × fraction × line rate`, Gb/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_gbps: Option<f64>,
    /// The judged figure: BW_average of `msg_size`, Gb/s.
    pub measured_gbps: f64,
    /// The measured share of `directions × line rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    pub msg_size: u64,
    /// Whether a failure fails the run (exit 1): `--bw-threshold` or `--line-rate` was given.
    pub enforced: bool,
    /// Why there is no threshold, or what to know about it (a software device).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Judges `measured_gbps` (BW_average at `msg_size`) against `rate`.
pub fn judge(
    rate: &Result<LineRate, NoLineRate>,
    fraction: f64,
    bidirectional: bool,
    measured_gbps: f64,
    msg_size: u64,
    enforced: bool,
) -> Threshold {
    let directions = if bidirectional { 2 } else { 1 };
    match rate {
        Ok(r) => {
            let full = f64::from(directions) * r.gbps;
            let required = fraction * full;
            Threshold {
                verdict: if measured_gbps >= required {
                    RateVerdict::Pass
                } else {
                    RateVerdict::Fail
                },
                line_rate: Some(r.clone()),
                fraction,
                directions,
                required_gbps: Some(required),
                measured_gbps,
                share: Some(measured_gbps / full),
                msg_size,
                enforced,
                note: None,
            }
        }
        Err(why) => Threshold {
            verdict: RateVerdict::NoThreshold,
            line_rate: None,
            fraction,
            directions,
            required_gbps: None,
            measured_gbps,
            share: None,
            msg_size,
            enforced,
            note: Some(format!("no line rate: {why}; give --line-rate GBPS")),
        },
    }
}

impl Threshold {
    /// Whether this verdict fails the run: a figure below an enforced threshold, or an enforced
    /// threshold with no line rate to judge against (`--bw-threshold` asked for a verdict that
    /// cannot be given; `--line-rate` always supplies one).
    pub fn fails_run(&self) -> bool {
        self.enforced && self.verdict != RateVerdict::Pass
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        let note = self
            .note
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let (Some(r), Some(req), Some(share)) = (&self.line_rate, self.required_gbps, self.share)
        else {
            let verdict = if self.enforced {
                "FAIL: --bw-threshold given but NO LINE RATE to judge against"
            } else {
                "NO THRESHOLD"
            };
            return format!(
                " line rate: {verdict}: BW_average {:.2} Gb/s at {} B{note}",
                self.measured_gbps, self.msg_size
            );
        };
        let both = if self.directions == 2 {
            format!("2 × {} Gb/s (both directions)", fmt_gbps(r.gbps))
        } else {
            format!("{} Gb/s", fmt_gbps(r.gbps))
        };
        let verdict = match (self.verdict, self.enforced) {
            (RateVerdict::Pass, _) => "PASS".to_string(),
            (_, true) => "FAIL".to_string(),
            _ => "BELOW (advisory: give --bw-threshold or --line-rate to fail the run on it)"
                .to_string(),
        };
        format!(
            " line rate: {verdict}: BW_average {:.2} Gb/s at {} B is {:.3} of {both}, threshold {} \
             ({:.2} Gb/s); line rate from {} ({}){note}",
            self.measured_gbps,
            self.msg_size,
            share,
            self.fraction,
            req,
            r.source,
            r.text
        )
    }
}

fn fmt_gbps(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvpeer_uapi::fake_root::FakeRoot;

    /// What ib_core's rate_show writes for real ports (speed × width), and rxe's (derived from
    /// the netdev's speed by ib_get_eth_speed).
    #[test]
    fn kernel_rate_texts() {
        for (text, gbps) in [
            ("100 Gb/sec (4X EDR)\n", 100.0),
            ("400 Gb/sec (4X NDR)", 400.0),
            ("25 Gb/sec (1X EDR)", 25.0),
            ("200 Gb/sec (4X HDR)", 200.0),
            ("56 Gb/sec (4X FDR)", 56.0),
            ("800 Gb/sec (4X XDR)", 800.0),
            ("300 Gb/sec (12X EDR)", 300.0),
            ("2.5 Gb/sec (1X SDR)", 2.5),
            ("10 Gb/sec (1X QDR)", 10.0),
            ("40 Gb/sec (4X FDR10)", 40.0),
            ("  100   Gb/sec (4X EDR)  ", 100.0),
        ] {
            assert_eq!(parse_rate(text), Some(gbps), "{text:?}");
        }
        for bad in [
            "",
            "Gb/sec",
            "0 Gb/sec (1X SDR)",
            "-5 Gb/sec",
            "100 Mb/sec",
            "NaN Gb/sec",
            "inf Gb/sec",
            "100",
            "fast",
        ] {
            assert_eq!(parse_rate(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn read_from_sysfs_and_software_devices() {
        let r = FakeRoot::new();
        assert!(read(r.path(), "mlx5_0", 1)
            .unwrap_err()
            .to_string()
            .contains("/sys/class/infiniband/mlx5_0/ports/1/rate"));
        r.file(&rate_path("mlx5_0", 1), "100 Gb/sec (4X EDR)\n");
        let rate = read(r.path(), "mlx5_0", 1).unwrap();
        assert_eq!(rate.gbps, 100.0);
        assert_eq!(rate.text, "100 Gb/sec (4X EDR)");
        assert_eq!(rate.source, "sysfs");
        r.file(&rate_path("mlx5_0", 2), "garbage\n");
        assert!(matches!(
            read(r.path(), "mlx5_0", 2),
            Err(NoLineRate::NotARate { .. })
        ));
        assert!(!software_device(r.path(), "mlx5_0"));
        r.file("/sys/class/infiniband/rxe0/parent", "veth0\n");
        assert!(software_device(r.path(), "rxe0"));
    }

    #[test]
    fn options() {
        assert_eq!(parse_gbps("400"), Ok(400.0));
        assert_eq!(parse_gbps(" 2.5 "), Ok(2.5));
        for bad in ["0", "-1", "nan", "inf", "x", "", "1e9"] {
            assert!(parse_gbps(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_fraction("0.9"), Ok(0.9));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        for bad in ["0", "1.1", "-0.5", "nan", "90%", ""] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
    }

    fn rate(gbps: f64) -> Result<LineRate, NoLineRate> {
        Ok(LineRate {
            gbps,
            source: "sysfs".into(),
            text: format!("{gbps} Gb/sec (4X EDR)"),
        })
    }

    /// ngc_multinode_perf: pass at 0.9 × port rate × 2 for a bidirectional run, × 1 for --unidir.
    #[test]
    fn verdicts_like_ngc_multinode_perf() {
        // Unidirectional 100 Gb/s port: 90 passes, 89.9 fails.
        let t = judge(&rate(100.0), 0.9, false, 90.0, 65536, false);
        assert_eq!(
            (t.verdict, t.required_gbps, t.directions),
            (RateVerdict::Pass, Some(90.0), 1)
        );
        let t = judge(&rate(100.0), 0.9, false, 89.9, 65536, false);
        assert_eq!(t.verdict, RateVerdict::Fail);
        assert!(!t.fails_run(), "not enforced: advisory");
        assert!(t.line().contains("BELOW (advisory"), "{}", t.line());
        let t = judge(&rate(100.0), 0.9, false, 89.9, 65536, true);
        assert!(t.fails_run());
        assert!(t.line().starts_with(" line rate: FAIL: BW_average 89.90 Gb/s at 65536 B is 0.899 of 100 Gb/s, threshold 0.9 (90.00 Gb/s)"), "{}", t.line());
        // Bidirectional: the sum of both directions against twice the line rate.
        let t = judge(&rate(100.0), 0.9, true, 150.0, 65536, true);
        assert_eq!(
            (t.verdict, t.required_gbps),
            (RateVerdict::Fail, Some(180.0))
        );
        assert!(
            t.line().contains("of 2 × 100 Gb/s (both directions)"),
            "{}",
            t.line()
        );
        let t = judge(&rate(100.0), 0.9, true, 181.0, 65536, true);
        assert_eq!(t.verdict, RateVerdict::Pass);
        // No line rate: no verdict; advisory, it fails nothing.
        let t = judge(&Err(NoLineRate::NoDevice), 0.9, false, 1.0, 2, false);
        assert_eq!(t.verdict, RateVerdict::NoThreshold);
        assert!(!t.fails_run());
        assert!(t.line().contains("NO THRESHOLD") && t.line().contains("--line-rate"));
        // ... but --bw-threshold asked for a verdict: the run fails, saying why and what to give.
        let t = judge(&Err(NoLineRate::NoDevice), 0.9, false, 1.0, 2, true);
        assert_eq!(t.verdict, RateVerdict::NoThreshold);
        assert!(t.fails_run());
        assert!(
            t.line()
                .contains("FAIL: --bw-threshold given but NO LINE RATE")
                && t.line()
                    .contains("no line rate: no RDMA device; give --line-rate GBPS"),
            "{}",
            t.line()
        );
        // The JSON is typed and round-trips.
        let t = judge(&rate(400.0), 0.9, true, 730.0, 1 << 20, true);
        let j = serde_json::to_value(&t).unwrap();
        assert_eq!(j["verdict"], "pass");
        assert_eq!(j["line_rate"]["gbps"], 400.0);
        assert_eq!(serde_json::from_value::<Threshold>(j).unwrap(), t);
    }
}

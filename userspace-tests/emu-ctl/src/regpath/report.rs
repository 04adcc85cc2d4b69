//! `nvpeer emu regpath report`: the paths' files merged, with ratios to each path's floor.

use super::document::{
    CellDoc, CellRatios, ExcessSplit, InvalRatios, InvalRow, PathDoc, Report, SlabFigures, Via,
};
use super::query::ratio;
use std::collections::BTreeMap;

/// A core path's mean cycle over its floor's, taken apart: `ratio` = 1 + `provider` (the
/// provider's time beyond the floor's: lock waits, IOMMU and allocator state; noise around 0) +
/// `core` (the core and syscalls beyond the floor's syscalls and rawfloor: the emulated ib_core and
/// uverbs work that any client pays) + `client` (the client's callbacks, provider calls excluded).
/// `1 + provider + core` is what a client that cost nothing would score through this core.
/// None for the floor and for cells without a time split.
fn excess_split(cell: &CellDoc, floor: &CellDoc) -> Option<ExcessSplit> {
    let t = cell.time_split_ns_per_cycle.as_ref()?;
    let ft = floor.time_split_ns_per_cycle.as_ref()?;
    let (mean, provider, client) = (t.mean, t.provider, t.client_own?);
    let (fm, fprovider) = (ft.mean, ft.provider);
    if fm <= 0.0 {
        return None;
    }
    // Outside the provider, the floor spends its time in syscalls and rawfloor; a core path in
    // syscalls, the core and the client.
    let rest = (mean - provider - client) - (fm - fprovider);
    let provider = provider - fprovider;
    let r3 = |v: f64| (v / fm * 1000.0).round() / 1000.0;
    Some(ExcessSplit {
        ratio: r3(mean),
        provider: r3(provider),
        core: r3(rest),
        client: r3(client),
    })
}

/// A cell's ratios: to `floor` (the floor cell measured right before it, else the floor path's
/// cell of its size and threads), and its cycle to the classic client's cell `classic`.
fn cell_ratios(
    c: &CellDoc,
    floor: Option<&CellDoc>,
    classic: Option<&CellDoc>,
    via: Via,
) -> CellRatios {
    let r = |v: fn(&CellDoc) -> f64| ratio(Some(v(c)), floor.map(v));
    let cycle = |c: &CellDoc| c.cycle.median_ns as f64;
    // Against the classic client: each over its own adjacent floor when both have one.
    let vs_classic = match (floor, classic.and_then(|k| k.adjacent_floor.as_deref())) {
        (Some(f), Some(kf)) if c.adjacent_floor.is_some() => ratio(
            Some(cycle(c) / cycle(f)),
            classic.map(|k| cycle(k) / cycle(kf)),
        ),
        _ => ratio(Some(cycle(c)), classic.map(cycle)),
    };
    CellRatios {
        cycle_mean_split: floor
            .filter(|_| via == Via::Core)
            .and_then(|f| excess_split(c, f)),
        reg_median: r(|c| c.reg.median_ns as f64),
        reg_p99: r(|c| c.reg.p99_ns as f64),
        dereg_median: r(|c| c.dereg.median_ns as f64),
        dereg_p99: r(|c| c.dereg.p99_ns as f64),
        cycle_median: r(cycle),
        regs_per_s: r(|c| c.regs_per_s),
        provider_calls: r(|c| c.provider_calls_per_reg.total),
        cycle_median_vs_classic: vs_classic,
        against: Some(
            if c.adjacent_floor.is_some() {
                "adjacent floor cell"
            } else {
                "floor path"
            }
            .into(),
        ),
    }
}

/// Adds the memory figures against the floor's to `s`: the ratio of SUnreclaim per MR and the
/// bytes per MR above the floor's (null where either lacks the figure).
fn slab_against_floor(s: &mut SlabFigures, floor: Option<&SlabFigures>) {
    let above =
        |v: fn(&SlabFigures) -> Option<f64>| Some(v(s).zip(floor.and_then(v)).map(|(a, b)| a - b));
    let sunreclaim = |f: &SlabFigures| Some(f.meminfo_sunreclaim_bytes_per_mr);
    let ratio_slab = Some(ratio(sunreclaim(s), floor.and_then(sunreclaim)));
    let sunreclaim_above = above(sunreclaim);
    let profile_above = above(|f| f.kmalloc_profile_bytes_per_mr.map(|b| b as f64));
    let nominal_above = above(|f| f.kmalloc_nominal_bytes_per_mr);
    s.ratio_slab_per_mr = ratio_slab;
    s.sunreclaim_bytes_per_mr_above_floor = sunreclaim_above;
    s.profile_bytes_per_mr_above_floor = profile_above;
    s.nominal_bytes_per_mr_above_floor = nominal_above;
}

/// Adds `ratios` (to the path's floor) to every cell, invalidation row and memory figure; a path
/// whose floor is not among `paths` is left as it is.
pub(super) fn report(mut paths: Vec<PathDoc>, machine: &str) -> Report {
    let floors: BTreeMap<String, PathDoc> = paths
        .iter()
        .filter(|p| p.via == Via::Floor)
        .map(|p| (p.path.clone(), p.clone()))
        .collect();
    let all = paths.clone();
    for p in &mut paths {
        let classic = all.iter().find(|k| k.path == p.classic_ref);
        let Some(fl) = floors.get(&p.floor_ref) else {
            continue;
        };
        for c in &mut p.cells {
            let f = c
                .adjacent_floor
                .as_deref()
                .or_else(|| fl.cell(c.size, c.threads));
            let k = classic.and_then(|k| k.cell(c.size, c.threads));
            c.ratios = Some(cell_ratios(c, f, k, p.via));
        }
        for row in &mut p.invalidation {
            let median = |r: &InvalRow| r.free_with_live_mr.median_ns as f64;
            row.ratios = Some(InvalRatios {
                free_with_live_mr_median: ratio(
                    Some(median(row)),
                    fl.invalidation_of(row.size).map(median),
                ),
            });
        }
        if let Some(s) = &mut p.memory {
            slab_against_floor(s, fl.memory.as_ref());
        }
        if let Some(s) = &mut p.scale {
            slab_against_floor(s, fl.scale.as_ref());
        }
    }
    Report {
        benchmark: "regpath".into(),
        machine: machine.into(),
        paths,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regpath::cell::time_split;
    use crate::regpath::check::check;
    use crate::regpath::document::{Latency, LiveMrRow, NotReached, ProviderCalls, TimeSplit};
    use crate::regpath::tables::tables;

    fn latency(ns: u64) -> Latency {
        Latency {
            n: 1,
            median_ns: ns,
            p99_ns: ns,
            mean_ns: ns,
            min_ns: ns,
            max_ns: ns,
        }
    }

    /// A 64 KiB 1-thread cell whose every latency is `ns`, with `pins` pins per registration.
    fn cell(ns: u64, pins: f64) -> CellDoc {
        CellDoc {
            size: 65536,
            threads: 1,
            cycles: 1,
            wall_s: 0.1,
            regs_per_s: 10.0,
            reg: latency(ns),
            dereg: latency(ns),
            cycle: latency(ns),
            provider_calls_per_reg: ProviderCalls {
                get_pages: pins,
                total: 2.0 * pins,
                ..ProviderCalls::default()
            },
            time_split_ns_per_cycle: Some(time_split(&[ns], ns / 2, Some(ns * 3 / 4))),
            rounds: None,
            adjacent_floor: None,
            live_mrs: None,
            ratios: None,
        }
    }

    fn path(name: &str, via: Via, cells: Vec<CellDoc>) -> PathDoc {
        PathDoc {
            path: name.into(),
            via,
            persistent_api: false,
            floor_ref: "floor".into(),
            classic_ref: "classic".into(),
            clients: Vec::new(),
            cells,
            skipped: Vec::new(),
            floor_breakdown: Vec::new(),
            invalidation: Vec::new(),
            inval_scale: None,
            live_mrs: None,
            memory: None,
            scale: None,
            cost_model: None,
        }
    }

    fn ratios(doc: &Report, path: usize) -> &CellRatios {
        doc.paths[path].cells[0].ratios.as_ref().expect("ratios")
    }

    #[test]
    fn ratios_against_the_floor() {
        let floor = path("floor", Via::Floor, vec![cell(100, 1.0)]);
        let nv = path("nvpeer-inval", Via::Core, vec![cell(110, 1.0)]);
        let doc = report(vec![floor, nv], "test");
        assert_eq!(ratios(&doc, 1).reg_median, Some(1.1));
        assert_eq!(ratios(&doc, 0).reg_median, Some(1.0));
        assert!(tables(&doc).contains("1.10x"));
    }

    #[test]
    fn live_mr_rows_are_tabled_and_checked() {
        let row = |l: u32, ns: u64| {
            LiveMrRow::Measured(Box::new(CellDoc {
                live_mrs: Some(l),
                cycle: latency(2 * ns),
                time_split_ns_per_cycle: Some(TimeSplit {
                    mean: 2.0 * ns as f64,
                    provider: ns as f64,
                    client_own: Some(1500.0),
                    rest: 0.0,
                    provider_model: None,
                    model_overshoot: None,
                }),
                ..cell(ns, 1.0)
            }))
        };
        let stopped = LiveMrRow::NotReached(NotReached {
            live_mrs: 100_000,
            not_reached: 5000,
            stopped_by: "MemAvailable below 384 MiB".into(),
        });
        let mut nv = path("nvpeer-inval", Via::Core, vec![cell(10, 1.0)]);
        nv.live_mrs = Some(vec![row(0, 10_000), row(1000, 15_000), stopped]);
        let doc = report(vec![nv], "test");
        let t = tables(&doc);
        assert!(t.contains("| 0 | 20 (1.00x); client 1.5 |"), "{t}");
        assert!(t.contains("| 1000 | 30 (1.50x); client 1.5 |"), "{t}");
        assert!(
            t.contains("| 100000 | not reached (5000 held): MemAvailable below 384 MiB |"),
            "{t}"
        );
        assert!(!check(&doc, &[]).iter().any(|p| p.contains("live MRs")));
        let mut bad = doc.clone();
        if let Some(LiveMrRow::Measured(c)) = bad.paths[0].live_mrs.iter_mut().flatten().nth(1) {
            c.reg.median_ns = 0;
        }
        assert!(check(&bad, &[])
            .iter()
            .any(|p| p.contains("with 1000 live MRs: no registration latency")));
    }

    #[test]
    fn adjacent_floor_and_check() {
        let floor = path("floor", Via::Floor, vec![cell(100, 1.0)]);
        // A core cell of `ns` measured with an adjacent floor cell of `floor_ns`.
        let with_floor = |ns: u64, floor_ns: u64, pins: f64| CellDoc {
            adjacent_floor: Some(Box::new(cell(floor_ns, 1.0))),
            ..cell(ns, pins)
        };
        let classic = path("classic", Via::Core, vec![with_floor(400, 200, 2.0)]);
        let nv = path("nvpeer-inval", Via::Core, vec![with_floor(150, 100, 1.0)]);
        let doc = report(vec![floor, classic, nv], "test");
        let r = ratios(&doc, 2);
        assert_eq!(r.reg_median, Some(1.5));
        // (150 / 100) / (400 / 200)
        assert_eq!(r.cycle_median_vs_classic, Some(0.75));
        // Mean 150 over 100: provider 75 - 50, client 112 - 75, core (150 - 75 - 37) - (100 - 50).
        assert_eq!(
            r.cycle_mean_split,
            Some(ExcessSplit {
                ratio: 1.5,
                provider: 0.25,
                core: -0.12,
                client: 0.37
            })
        );
        // Taken apart for core paths only (classic: its second pin is the provider's +0.5).
        assert_eq!(ratios(&doc, 0).cycle_mean_split, None);
        assert!(tables(&doc)
            .contains("| 64K | 2.000 = 1 +0.500 +0.000 +0.500 | 1.500 = 1 +0.250 -0.120 +0.370 |"));
        assert!(check(&doc, &["nvpeer-inval=1".into(), "classic=2".into()]).is_empty());
        assert_eq!(check(&doc, &["classic=1".into()]).len(), 1);
        // A cell without the time split, or a core path whose client time is below the
        // provider's, is reported.
        let mut bad = doc.clone();
        bad.paths[0].cells[0].time_split_ns_per_cycle = None;
        bad.paths[2].cells[0].time_split_ns_per_cycle = Some(time_split(&[150], 75, Some(10)));
        assert_eq!(check(&bad, &[]).len(), 2);
    }

    #[test]
    fn malformed_documents_name_the_field() {
        let doc = path("p", Via::Core, vec![cell(1, 1.0)]);
        let mut v = serde_json::to_value(&doc).expect("serializes");
        if let Some(c) = v["cells"][0].as_object_mut() {
            c.remove("reg");
        }
        let e = serde_json::from_value::<PathDoc>(v)
            .expect_err("no reg")
            .to_string();
        assert!(e.contains("missing field `reg`"), "{e}");
        for text in [
            "5",
            r#"{"path": "p", "cells": [1]}"#,
            r#"{"invalidation": {}}"#,
        ] {
            assert!(serde_json::from_str::<PathDoc>(text).is_err(), "{text}");
        }
    }
}

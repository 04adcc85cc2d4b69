//! `nvpeer emu regpath report`: the paths' files merged, with ratios to each path's floor.

use super::query::{find_cell, find_size, num, ratio};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A core path's mean cycle over its floor's, taken apart: `ratio` = 1 + `provider` (the
/// provider's time beyond the floor's: lock waits, IOMMU and allocator state; noise around 0) +
/// `core` (the core and syscalls beyond the floor's syscalls and rawfloor: the emulated ib_core and
/// uverbs work that any client pays) + `client` (the client's callbacks, provider calls excluded).
/// `1 + provider + core` is what a client that cost nothing would score through this core.
/// Null for the floor and for cells without a time split.
fn excess_split(cell: &Value, floor: &Value) -> Value {
    let (t, ft) = (
        &cell["time_split_ns_per_cycle"],
        &floor["time_split_ns_per_cycle"],
    );
    let (Some(mean), Some(provider), Some(client)) = (
        num(t, &["mean"]),
        num(t, &["provider"]),
        num(t, &["client_own"]),
    ) else {
        return Value::Null;
    };
    let (Some(fm), Some(fprovider)) = (num(ft, &["mean"]), num(ft, &["provider"])) else {
        return Value::Null;
    };
    if fm <= 0.0 {
        return Value::Null;
    }
    // Outside the provider, the floor spends its time in syscalls and rawfloor; a core path in
    // syscalls, the core and the client.
    let rest = (mean - provider - client) - (fm - fprovider);
    let provider = provider - fprovider;
    let r3 = |v: f64| (v / fm * 1000.0).round() / 1000.0;
    json!({"ratio": r3(mean), "provider": r3(provider), "core": r3(rest), "client": r3(client)})
}

/// Why a document read from disk is not a path's `measure` output, if it is not: a JSON object
/// whose `cells` and `invalidation`, when present, are arrays of objects.
pub(super) fn malformed(doc: &Value) -> Option<String> {
    if !doc.is_object() {
        return Some("not a JSON object".into());
    }
    for key in ["cells", "invalidation"] {
        match &doc[key] {
            Value::Null => {}
            Value::Array(rows) if rows.iter().all(Value::is_object) => {}
            _ => return Some(format!("'{key}' is not a list of objects")),
        }
    }
    None
}

/// Adds `ratios` (to the path's floor) to every cell, invalidation row and memory figure.
/// Documents that are not objects are left out, and rows that are not objects left as they are
/// (the CLI refuses such files first, with [`malformed`]).
pub(super) fn report(mut paths: Vec<Value>, machine: &str) -> Value {
    paths.retain(Value::is_object);
    let floors: BTreeMap<String, Value> = paths
        .iter()
        .filter(|p| p["via"] == "floor")
        .map(|p| (p["path"].as_str().unwrap_or("").to_string(), p.clone()))
        .collect();
    let all = paths.clone();
    for p in &mut paths {
        let classic = all.iter().find(|k| k["path"] == p["classic_ref"]);
        let Some(fl) = floors
            .get(p["floor_ref"].as_str().unwrap_or("floor"))
            .cloned()
        else {
            continue;
        };
        let via_core = p["via"] == "core";
        if let Some(cells) = p["cells"].as_array_mut() {
            for c in cells.iter_mut().filter(|c| c.is_object()) {
                let (s, t) = (
                    c["size"].as_u64().unwrap_or(0),
                    c["threads"].as_u64().unwrap_or(0),
                );
                // The floor measured right before this cell if there is one, else the floor path.
                let f = c
                    .get("adjacent_floor")
                    .cloned()
                    .or_else(|| find_cell(&fl, s, t).cloned());
                let f = f.as_ref();
                let k = classic.and_then(|k| find_cell(k, s, t));
                let r = |keys: &[&str]| ratio(num(c, keys), f.and_then(|f| num(f, keys)));
                let cyc = ["cycle", "median_ns"];
                // Against the classic client: each over its own adjacent floor when both have one.
                let vs_classic = match (f, k.and_then(|k| k.get("adjacent_floor"))) {
                    (Some(f), Some(kf)) if c.get("adjacent_floor").is_some() => ratio(
                        num(c, &cyc).zip(num(f, &cyc)).map(|(a, b)| a / b),
                        k.and_then(|k| num(k, &cyc))
                            .zip(num(kf, &cyc))
                            .map(|(a, b)| a / b),
                    ),
                    _ => ratio(num(c, &cyc), k.and_then(|k| num(k, &cyc))),
                };
                let split = f
                    .filter(|_| via_core)
                    .map_or(Value::Null, |f| excess_split(c, f));
                c["ratios"] = json!({
                    "cycle_mean_split": split,
                    "reg_median": r(&["reg", "median_ns"]), "reg_p99": r(&["reg", "p99_ns"]),
                    "dereg_median": r(&["dereg", "median_ns"]), "dereg_p99": r(&["dereg", "p99_ns"]),
                    "cycle_median": r(&["cycle", "median_ns"]), "regs_per_s": r(&["regs_per_s"]),
                    "provider_calls": r(&["provider_calls_per_reg", "total"]),
                    "cycle_median_vs_classic": vs_classic,
                    "against": if c.get("adjacent_floor").is_some() { "adjacent floor cell" } else { "floor path" },
                });
            }
        }
        if let Some(rows) = p["invalidation"].as_array_mut() {
            for row in rows.iter_mut().filter(|r| r.is_object()) {
                let f = find_size(&fl, "invalidation", row["size"].as_u64().unwrap_or(0));
                let keys = ["free_with_live_mr", "median_ns"];
                row["ratios"] = json!({"free_with_live_mr_median": ratio(num(row, &keys), f.and_then(|f| num(f, &keys)))});
            }
        }
        for sec in ["memory", "scale"] {
            let key = ["meminfo_sunreclaim_bytes_per_mr"];
            let fv = num(&fl[sec], &key);
            let pv = num(&p[sec], &key);
            if p[sec].is_object() {
                p[sec]["ratio_slab_per_mr"] = ratio(pv, fv);
                p[sec]["sunreclaim_bytes_per_mr_above_floor"] =
                    json!(pv.zip(fv).map(|(a, b)| a - b));
                let pk = ["kmalloc_profile_bytes_per_mr"];
                p[sec]["profile_bytes_per_mr_above_floor"] = json!(num(&p[sec], &pk)
                    .zip(num(&fl[sec], &pk))
                    .map(|(a, b)| a - b));
                let nk = ["kmalloc_nominal_bytes_per_mr"];
                p[sec]["nominal_bytes_per_mr_above_floor"] = json!(num(&p[sec], &nk)
                    .zip(num(&fl[sec], &nk))
                    .map(|(a, b)| a - b));
            }
        }
    }
    json!({"benchmark": "regpath", "machine": machine, "paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regpath::cell::time_split;
    use crate::regpath::check::check;
    use crate::regpath::tables::tables;

    #[test]
    fn ratios_against_the_floor() {
        let cell = |ns: u64| json!({"size": 65536, "threads": 1, "reg": {"median_ns": ns}, "cycle": {"median_ns": ns}});
        let floor =
            json!({"path": "floor", "via": "floor", "floor_ref": "floor", "cells": [cell(100)]});
        let nv = json!({"path": "nvpeer-inval", "via": "core", "floor_ref": "floor", "cells": [cell(110)]});
        let doc = report(vec![floor, nv], "test");
        assert_eq!(
            doc["paths"][1]["cells"][0]["ratios"]["reg_median"],
            json!(1.1)
        );
        assert_eq!(
            doc["paths"][0]["cells"][0]["ratios"]["reg_median"],
            json!(1.0)
        );
        assert!(tables(&doc).contains("1.10x"));
    }

    #[test]
    fn live_mr_rows_are_tabled_and_checked() {
        let row = |l: u64, ns: u64| {
            json!({"live_mrs": l, "reg": {"median_ns": ns}, "cycle": {"median_ns": 2 * ns},
                   "time_split_ns_per_cycle": {"mean": 2 * ns, "provider": ns, "client_own": 1500.0}})
        };
        let nv = json!({"path": "nvpeer-inval", "via": "core", "floor_ref": "floor",
                        "live_mrs": [row(0, 10_000), row(1000, 15_000)]});
        let doc = report(vec![nv], "test");
        let t = tables(&doc);
        assert!(t.contains("| 0 | 20 (1.00x); client 1.5 |"), "{t}");
        assert!(t.contains("| 1000 | 30 (1.50x); client 1.5 |"), "{t}");
        assert!(!check(&doc, &[]).iter().any(|p| p.contains("live MRs")));
        let mut bad = doc.clone();
        bad["paths"][0]["live_mrs"][1]["reg"]["median_ns"] = json!(0);
        assert!(check(&bad, &[])
            .iter()
            .any(|p| p.contains("with 1000 live MRs: no registration latency")));
    }

    #[test]
    fn adjacent_floor_and_check() {
        let cell = |ns: u64, gets: f64| {
            json!({"size": 65536, "threads": 1, "regs_per_s": 10.0,
                   "reg": {"median_ns": ns, "p99_ns": ns}, "dereg": {"median_ns": ns},
                   "cycle": {"median_ns": ns},
                   "provider_calls_per_reg": {"get_pages": gets, "get_pages_persistent": 0.0},
                   "time_split_ns_per_cycle": time_split(&[ns], ns / 2, Some(ns * 3 / 4))})
        };
        let floor = json!({"path": "floor", "via": "floor", "floor_ref": "floor", "cells": [cell(100, 1.0)]});
        let mut k = cell(400, 2.0);
        k["adjacent_floor"] = cell(200, 1.0);
        let classic = json!({"path": "classic", "via": "core", "floor_ref": "floor", "classic_ref": "classic", "cells": [k]});
        let mut c = cell(150, 1.0);
        c["adjacent_floor"] = cell(100, 1.0);
        let nv = json!({"path": "nvpeer-inval", "via": "core", "floor_ref": "floor", "classic_ref": "classic", "cells": [c]});
        let doc = report(vec![floor, classic, nv], "test");
        let r = &doc["paths"][2]["cells"][0]["ratios"];
        assert_eq!(r["reg_median"], json!(1.5));
        // (150 / 100) / (400 / 200)
        assert_eq!(r["cycle_median_vs_classic"], json!(0.75));
        // Mean 150 over 100: provider 75 - 50, client 112 - 75, core (150 - 75 - 37) - (100 - 50).
        assert_eq!(
            r["cycle_mean_split"],
            json!({"ratio": 1.5, "provider": 0.25, "core": -0.12, "client": 0.37})
        );
        // Taken apart for core paths only (classic: its second pin is the provider's +0.5).
        assert!(doc["paths"][0]["cells"][0]["ratios"]["cycle_mean_split"].is_null());
        assert!(tables(&doc)
            .contains("| 64K | 2.000 = 1 +0.500 +0.000 +0.500 | 1.500 = 1 +0.250 -0.120 +0.370 |"));
        assert!(check(&doc, &["nvpeer-inval=1".into(), "classic=2".into()]).is_empty());
        assert_eq!(check(&doc, &["classic=1".into()]).len(), 1);
        // A cell without the time split, or a core path whose client time is below the
        // provider's, is reported.
        let mut bad = doc.clone();
        bad["paths"][0]["cells"][0]["time_split_ns_per_cycle"] = json!(null);
        bad["paths"][2]["cells"][0]["time_split_ns_per_cycle"] = time_split(&[150], 75, Some(10));
        assert_eq!(check(&bad, &[]).len(), 2);
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            prop_oneof![Just("floor"), Just("core"), Just("p"), Just("x")].prop_map(Value::from),
        ];
        let key = prop_oneof![
            Just("path"),
            Just("via"),
            Just("cells"),
            Just("invalidation"),
            Just("memory"),
            Just("scale"),
            Just("size"),
            Just("threads"),
            Just("floor_ref"),
            Just("classic_ref"),
            Just("adjacent_floor"),
            Just("time_split_ns_per_cycle"),
            Just("mean"),
            Just("provider"),
            Just("client_own"),
        ];
        leaf.prop_recursive(4, 64, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever files `report` is given, it, `tables` and `check` answer without panicking.
        #[test]
        fn any_document_is_handled(docs in proptest::collection::vec(any_json(), 0..4)) {
            let _ = docs.iter().map(malformed).count();
            let doc = report(docs, "m");
            let _ = tables(&doc);
            let _ = check(&doc, &["p=1".to_string(), "bad".to_string()]);
        }
    }

    #[test]
    fn malformed_documents_are_named() {
        assert!(malformed(&json!(5)).unwrap().contains("object"));
        assert!(malformed(&json!({"cells": [1]})).unwrap().contains("cells"));
        assert!(malformed(&json!({"invalidation": {}}))
            .unwrap()
            .contains("invalidation"));
        assert_eq!(malformed(&json!({"path": "p", "cells": [{}]})), None);
    }
}

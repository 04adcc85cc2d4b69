//! `report`, `table` and `check` on a small committed run (tests/fixtures/regpath), against what
//! they print for it (as they printed it when they read the documents untyped); and the same run
//! as documents of earlier versions, without the fields those did not write.

use super::check::check;
use super::document::{PathDoc, Report};
use super::report::report;
use super::tables::tables;
use serde_json::Value;

const PATHS: [&str; 3] = [
    include_str!("../../tests/fixtures/regpath/floor.json"),
    include_str!("../../tests/fixtures/regpath/classic.json"),
    include_str!("../../tests/fixtures/regpath/nvpeer-inval.json"),
];
const TABLES: &str = include_str!("../../tests/fixtures/regpath/tables.md");
const TABLES_OLD: &str = include_str!("../../tests/fixtures/regpath/tables-old.md");
const CHECK_OLD: &str = include_str!("../../tests/fixtures/regpath/check-old.txt");
const MACHINE: &str = "test fixture: three paths of a smoke run";

/// Fields that documents of earlier versions lack (the series, the time split, the adjacent
/// floor, the cost model, the later memory figures).
const LATER: [&str; 10] = [
    "time_split_ns_per_cycle",
    "adjacent_floor",
    "rounds",
    "live_mrs",
    "inval_scale",
    "kernel_allocations_per_mr",
    "kmalloc_profile_bytes_per_mr",
    "measured",
    "kmalloc_nominal_bytes_per_mr",
    "cost_model",
];

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

/// `v` without `keys`, at any depth.
fn without(mut v: Value, keys: &[&str]) -> Value {
    fn strip(v: &mut Value, keys: &[&str]) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !keys.contains(&k.as_str()));
                m.values_mut().for_each(|v| strip(v, keys));
            }
            Value::Array(a) => a.iter_mut().for_each(|v| strip(v, keys)),
            _ => {}
        }
    }
    strip(&mut v, keys);
    v
}

fn merged(docs: Vec<Value>) -> Report {
    let paths = docs
        .into_iter()
        .map(|v| serde_json::from_value::<PathDoc>(v).expect("a measure output"))
        .collect();
    report(paths, MACHINE)
}

#[test]
fn tables_as_printed_before() {
    let doc = merged(PATHS.map(fixture).to_vec());
    assert_eq!(tables(&doc), TABLES);
    assert!(check(&doc, &["floor=1".into(), "classic=2".into()]).is_empty());
    // As `table` reads the merged file back.
    let text = serde_json::to_string(&doc).expect("serializes");
    let back: Report = serde_json::from_str(&text).expect("reads back");
    assert_eq!(tables(&back), TABLES);
}

#[test]
fn a_measure_output_is_written_as_read() {
    for text in PATHS {
        let doc: PathDoc = serde_json::from_str(text).expect("a measure output");
        assert_eq!(
            serde_json::to_value(&doc).expect("serializes"),
            fixture(text)
        );
    }
}

#[test]
fn earlier_documents_as_printed_before() {
    let doc = merged(PATHS.map(|t| without(fixture(t), &LATER)).to_vec());
    assert_eq!(tables(&doc), TABLES_OLD);
    let problems: Vec<String> = CHECK_OLD.lines().map(String::from).collect();
    assert_eq!(check(&doc, &[]), problems);
}

proptest::proptest! {
    /// Whichever of the later fields the documents lack, they read, and `report`, `tables` and
    /// `check` answer.
    #[test]
    fn any_earlier_shape_reads(keys in proptest::sample::subsequence(LATER.to_vec(), 0..=LATER.len())) {
        let doc = merged(PATHS.map(|t| without(fixture(t), &keys)).to_vec());
        proptest::prop_assert!(tables(&doc).contains("| 64K |"));
        let _ = check(&doc, &["floor=1".into(), "bad".into()]);
    }
}

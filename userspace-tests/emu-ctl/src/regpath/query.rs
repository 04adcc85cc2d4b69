//! Lookups in a benchmark document.

use serde_json::{json, Value};

pub(super) fn get<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

pub(super) fn num(v: &Value, keys: &[&str]) -> Option<f64> {
    get(v, keys).and_then(Value::as_f64)
}

pub(super) fn find_cell(p: &Value, size: u64, threads: u64) -> Option<&Value> {
    p["cells"]
        .as_array()?
        .iter()
        .find(|c| c["size"].as_u64() == Some(size) && c["threads"].as_u64() == Some(threads))
}

pub(super) fn find_size<'a>(p: &'a Value, list: &str, size: u64) -> Option<&'a Value> {
    p[list]
        .as_array()?
        .iter()
        .find(|c| c["size"].as_u64() == Some(size))
}

pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!((a / b * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

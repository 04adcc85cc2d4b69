//! Kernel memory as /proc shows it: meminfo, slabinfo and the slab growth per live MR.

use super::document::{SlabFigures, TopCache};
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) fn meminfo_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let rest = l.strip_prefix(key)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse().ok()
            })
        })
        .unwrap_or(0)
}

/// /proc/slabinfo: cache name -> (active objects, object size). Empty if unreadable.
fn slabinfo() -> BTreeMap<String, (i64, i64)> {
    let mut m = BTreeMap::new();
    if let Ok(t) = std::fs::read_to_string("/proc/slabinfo") {
        for l in t.lines().skip(2) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 3 {
                if let (Ok(a), Ok(s)) = (f[1].parse(), f[3].parse()) {
                    m.insert(f[0].to_string(), (a, s));
                }
            }
        }
    }
    m
}

/// Nominal object size of a cache: N for kmalloc-N / kmalloc-cg-N / kmalloc-rcl-N, else its
/// (possibly debug-inflated) object size.
pub(super) fn nominal(name: &str, objsize: i64) -> i64 {
    name.rsplit('-')
        .next()
        .filter(|_| name.starts_with("kmalloc"))
        .and_then(|n| match n.strip_suffix('k') {
            Some(k) => k.parse::<i64>().ok()?.checked_mul(1024),
            None => n.parse().ok(),
        })
        .unwrap_or(objsize)
}

/// Slab snapshot: meminfo Slab and SUnreclaim (KiB) and slabinfo.
pub(super) struct SlabSnap {
    pub(super) slab_kb: u64,
    unrecl_kb: u64,
    caches: BTreeMap<String, (i64, i64)>,
}

impl SlabSnap {
    pub(super) fn take() -> Self {
        SlabSnap {
            slab_kb: meminfo_kb("Slab"),
            unrecl_kb: meminfo_kb("SUnreclaim"),
            caches: slabinfo(),
        }
    }

    /// Per-MR growth from `self` to `after` over `n` MRs.
    pub(super) fn per_mr(&self, after: &SlabSnap, n: u64) -> SlabFigures {
        let n = n.max(1) as f64;
        let mut rows: Vec<(String, i64, i64, i64)> = Vec::new();
        for (name, (a, s)) in &after.caches {
            let before = self.caches.get(name).map(|x| x.0).unwrap_or(0);
            let d = a - before;
            if d != 0 {
                rows.push((name.clone(), d, *s, nominal(name, *s)));
            }
        }
        rows.sort_by_key(|r| -(r.1 * r.2).abs());
        // kmemleak tracks every allocation with one object of its own: debug-only memory, but its
        // count is the number of kernel allocations per MR.
        // None on a kernel without kmemleak (a production config): the count is unknown there.
        let kmemleak = after.caches.contains_key("kmemleak_object").then(|| {
            rows.iter()
                .find(|r| r.0 == "kmemleak_object")
                .map_or(0, |r| r.1)
        });
        let bytes: i64 = rows
            .iter()
            .filter(|r| r.0 != "kmemleak_object")
            .map(|r| r.1 * r.2)
            .sum();
        // What a production kernel would allocate: kmalloc objects at their nominal size, plus
        // xarray nodes; other caches (filesystem, debug) are left out as background noise.
        let nominal_bytes: i64 = rows
            .iter()
            .filter(|r| r.0.starts_with("kmalloc") || r.0 == "radix_tree_node")
            .map(|r| r.1 * r.3)
            .sum();
        // The ten largest changes, plus every kmalloc cache that moved by 0.2 objects per MR.
        let top = rows
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                *i < 10 || (r.0.starts_with("kmalloc") && (r.1 as f64 / n).abs() >= 0.2)
            })
            .map(|(_, r)| TopCache {
                cache: r.0.clone(),
                objs_per_mr: r.1 as f64 / n,
                objsize: r.2,
                nominal: r.3,
            })
            .collect();
        // Allocation profile: kmalloc caches whose growth is a whole number of objects per MR
        // (within 0.25); a background free or allocation elsewhere rarely lands on a whole
        // number per MR, so this is the least noisy estimate of what an MR keeps allocated.
        let profile: i64 = rows
            .iter()
            .filter(|r| r.0.starts_with("kmalloc"))
            .filter_map(|r| {
                let per = r.1 as f64 / n;
                let whole = per.round();
                (whole >= 1.0 && (per - whole).abs() <= 0.25).then_some(whole as i64 * r.3)
            })
            .sum();
        SlabFigures {
            meminfo_slab_bytes_per_mr: (after.slab_kb as f64 - self.slab_kb as f64) * 1024.0 / n,
            meminfo_sunreclaim_bytes_per_mr: (after.unrecl_kb as f64 - self.unrecl_kb as f64)
                * 1024.0
                / n,
            slabinfo_bytes_per_mr: bytes as f64 / n,
            slabinfo_available: !after.caches.is_empty(),
            top_caches: top,
            kmalloc_nominal_bytes_per_mr: Some(nominal_bytes as f64 / n),
            kernel_allocations_per_mr: Some(kmemleak.map(|k| k as f64 / n)),
            kmalloc_profile_bytes_per_mr: Some(profile),
            ..SlabFigures::default()
        }
    }
}

/// Waits (at most `max_s` seconds) until the IOMMU's IOVA cache has stopped shrinking for three
/// seconds. After a burst of mappings (a 1 GiB x 8-thread cell maps 131,072 IOVAs, a scale test
/// 100,000) the kernel drains its per-CPU IOVA magazines a little at a time for a minute or more,
/// and those frees would be subtracted from the next memory measurement.
pub(super) fn settle(max_s: u64) {
    let iova = || slabinfo().get("iommu_iova").map_or(0, |c| c.0);
    let (mut last, mut still) = (iova(), 0);
    for _ in 0..max_s {
        std::thread::sleep(Duration::from_secs(1));
        let now = iova();
        still = if now == last { still + 1 } else { 0 };
        if still >= 3 {
            return;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_sizes() {
        assert_eq!(nominal("kmalloc-192", 400), 192);
        assert_eq!(nominal("kmalloc-cg-1k", 2000), 1024);
        assert_eq!(nominal("kmalloc-rcl-64", 100), 64);
        assert_eq!(nominal("anon_vma", 88), 88);
    }
}

//! How each counter of nvpeer's debugfs `stats` (uapi/debugfs.md) becomes a Prometheus series:
//! the two gauges and the counters that stand alone keep their key as their name; the calls into
//! nvpeer, the calls into NVIDIA's P2P API and the errors are three labelled counter families.

/// A labelled counter family of several `stats` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `<op>_calls`: the peer-memory core's calls into nvpeer, label `op`.
    CoreCalls,
    /// `provider_<function>`: nvpeer's calls of `nvidia_p2p_<function>`, label `function`.
    ProviderCalls,
    /// `err_<cause>`: failed or refused operations, label `cause`.
    Errors,
}

impl Family {
    /// Every family, in the order they are written.
    pub const ALL: [Family; 3] = [Family::CoreCalls, Family::ProviderCalls, Family::Errors];

    /// The counter's name without the `nvpeer_` prefix and the `_total` suffix.
    pub fn name(self) -> &'static str {
        match self {
            Family::CoreCalls => "core_calls",
            Family::ProviderCalls => "provider_calls",
            Family::Errors => "errors",
        }
    }

    /// The label that tells its series apart.
    pub fn label(self) -> &'static str {
        match self {
            Family::CoreCalls => "op",
            Family::ProviderCalls => "function",
            Family::Errors => "cause",
        }
    }

    /// HELP text.
    pub fn help(self) -> &'static str {
        match self {
            Family::CoreCalls => "Calls of the peer-memory core into nvpeer, by operation (debugfs stats <op>_calls)",
            Family::ProviderCalls => "Calls of nvpeer into the NVIDIA P2P API nvidia_p2p_<function> (debugfs stats provider_<function>)",
            Family::Errors => "Failed or refused operations, by cause (debugfs stats err_<cause>): pin = pin calls that failed (host ranges probed by acquire included), dma_map = nvidia_p2p_dma_map_pages failures, nomem = allocation failures, revoked = refused after NVIDIA revoked the pin, order = core calls out of order; uapi/debugfs.md lists every cause",
        }
    }
}

/// How one `stats` key is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// A gauge of its own, `nvpeer_<name>`.
    Gauge {
        /// Name without the prefix.
        name: &'static str,
        /// HELP text.
        help: &'static str,
    },
    /// A counter of its own, `nvpeer_<name>_total`.
    Counter {
        /// Name without the prefix and suffix.
        name: &'static str,
        /// HELP text.
        help: &'static str,
    },
    /// One series of a family, its label set to `value`.
    Member {
        /// The family.
        family: Family,
        /// The label's value.
        value: &'static str,
    },
}

use Family::{CoreCalls, Errors, ProviderCalls};

const fn gauge(name: &'static str, help: &'static str) -> Series {
    Series::Gauge { name, help }
}
const fn counter(name: &'static str, help: &'static str) -> Series {
    Series::Counter { name, help }
}
const fn member(family: Family, value: &'static str) -> Series {
    Series::Member { family, value }
}

/// Every documented key of `stats` with its series, in the module's order.
pub const SERIES: [(&str, Series); 44] = [
    ("acquire_calls", member(CoreCalls, "acquire")),
    ("acquire_claimed", counter("acquire_claimed", "acquire() calls that claimed the range: GPU memory of the caller, now pinned (debugfs stats acquire_claimed)")),
    ("acquire_declined", counter("acquire_declined", "acquire() calls that declined the range: not GPU memory of the caller (host memory, unknown VA), pin failed, or module unloading (debugfs stats acquire_declined)")),
    ("get_pages_calls", member(CoreCalls, "get_pages")),
    ("dma_map_calls", member(CoreCalls, "dma_map")),
    ("dma_unmap_calls", member(CoreCalls, "dma_unmap")),
    ("put_pages_calls", member(CoreCalls, "put_pages")),
    ("get_page_size_calls", member(CoreCalls, "get_page_size")),
    ("release_calls", member(CoreCalls, "release")),
    ("registrations", counter("registrations", "Successful dma_map(): memory regions handed to the HCA (debugfs stats registrations)")),
    ("live_mrs", gauge("live_mrs", "Registration objects alive now: held by the core, or pins left to NVIDIA's free callback (debugfs stats live_mrs)")),
    ("pinned_bytes", gauge("pinned_bytes", "Bytes of GPU memory pinned through NVIDIA now, in 64 KiB granules, all GPUs together (debugfs stats pinned_bytes)")),
    ("pinned_bytes_total", counter("pinned_bytes", "Bytes of GPU memory ever pinned through NVIDIA (debugfs stats pinned_bytes_total)")),
    ("repins", counter("repins", "get_pages() calls that asked for another range than acquire(): the pin was replaced (debugfs stats repins)")),
    ("callbacks", counter("callbacks", "NVIDIA free callbacks received: GPU memory freed under a live pin (debugfs stats callbacks)")),
    ("invalidations", counter("invalidations", "Free callbacks that made the core revoke a mapped memory region (debugfs stats invalidations)")),
    ("callbacks_unmapped", counter("callbacks_unmapped", "Free callbacks on a registration that was not mapped: no invalidation needed (debugfs stats callbacks_unmapped)")),
    ("callbacks_stale", counter("callbacks_stale", "Free callbacks whose ticket matched no live pin, ignored (debugfs stats callbacks_stale)")),
    ("orphaned_pins", counter("orphaned_pins", "Non-persistent pins released from another process and left to NVIDIA's free callback (debugfs stats orphaned_pins)")),
    ("provider_get_pages", member(ProviderCalls, "get_pages")),
    ("provider_get_pages_persistent", member(ProviderCalls, "get_pages_persistent")),
    ("provider_put_pages", member(ProviderCalls, "put_pages")),
    ("provider_put_pages_persistent", member(ProviderCalls, "put_pages_persistent")),
    ("provider_dma_map_pages", member(ProviderCalls, "dma_map_pages")),
    ("provider_dma_unmap_pages", member(ProviderCalls, "dma_unmap_pages")),
    ("provider_free_page_table", member(ProviderCalls, "free_page_table")),
    ("provider_free_dma_mapping", member(ProviderCalls, "free_dma_mapping")),
    ("err_pin", member(Errors, "pin")),
    ("err_range", member(Errors, "range")),
    ("err_page_table_version", member(Errors, "page_table_version")),
    ("err_page_size", member(Errors, "page_size")),
    ("err_entries", member(Errors, "entries")),
    ("err_not_pci", member(Errors, "not_pci")),
    ("err_dma_map", member(Errors, "dma_map")),
    ("err_dma_mapping_version", member(Errors, "dma_mapping_version")),
    ("err_nomem", member(Errors, "nomem")),
    ("err_sgl", member(Errors, "sgl")),
    ("err_put", member(Errors, "put")),
    ("err_unmap", member(Errors, "unmap")),
    ("err_revoked", member(Errors, "revoked")),
    ("err_order", member(Errors, "order")),
    ("err_sg_mismatch", member(Errors, "sg_mismatch")),
    ("overtaken_calls", counter("overtaken_calls", "Free callbacks that found a put_pages or dma_map_pages of nvpeer's in flight on the pin's table (debugfs stats overtaken_calls)")),
    ("pin_waits", counter("pin_waits", "Pins that waited until every such call in flight had returned (debugfs stats pin_waits)")),
];

/// The series of `stats` key `key`; `None` for a key this release does not know (a newer module
/// appended it: it is left out of the exposition).
pub fn of(key: &str) -> Option<Series> {
    SERIES.iter().find(|(k, _)| *k == key).map(|(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvpeer_uapi::debugfs::STATS_KEYS;
    use std::collections::BTreeSet;

    /// Every key the module prints has a series, in the module's order: a key added to the
    /// module fails here until it is given one.
    #[test]
    fn every_stats_key_has_a_series() {
        let keys: Vec<&str> = SERIES.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, STATS_KEYS);
    }

    /// The gauges of debugfs are gauges here, and only they.
    #[test]
    fn gauges_are_the_modules_gauges() {
        for (k, s) in SERIES {
            let gauge = nvpeer_uapi::debugfs::GAUGES.contains(&k);
            assert_eq!(matches!(s, Series::Gauge { .. }), gauge, "{k}");
        }
    }

    /// No two keys end up as the same series.
    #[test]
    fn series_are_distinct() {
        let mut seen = BTreeSet::new();
        for (k, s) in SERIES {
            let id = match s {
                Series::Gauge { name, .. } => name.to_string(),
                Series::Counter { name, .. } => format!("{name}_total"),
                Series::Member { family, value } => format!("{}{{{value}}}", family.name()),
            };
            assert!(seen.insert(id.clone()), "{k}: {id} twice");
        }
    }

    /// Members keep the key's own words: the prefix or suffix of their family stripped.
    #[test]
    fn member_values_come_from_the_key() {
        for (k, s) in SERIES {
            if let Series::Member { family, value } = s {
                let want = match family {
                    CoreCalls => format!("{value}_calls"),
                    ProviderCalls => format!("provider_{value}"),
                    Errors => format!("err_{value}"),
                };
                assert_eq!(k, want);
            }
        }
        assert_eq!(of("err_nomem"), Some(member(Errors, "nomem")));
        assert_eq!(of("future_key"), None);
    }
}

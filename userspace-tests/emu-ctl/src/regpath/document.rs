//! The benchmark's JSON documents, typed: what `regpath measure` writes for one path
//! ([`PathDoc`]) and the document `regpath report` merges them into ([`Report`]). The writers build
//! these types and `report`, `table` and `check` read them back with the same ones.
//!
//! Documents of earlier versions still read. A field every version of `measure` wrote is required:
//! a document without it is not a benchmark document, and reading it fails with serde's message,
//! which names the field. A field that came later is an `Option`, left out again when a document
//! read without it is written (`report`); where a writer puts `null` for an unknown figure and the
//! tables tell that apart from a missing key, `Option<Option<_>>` (outer: the key, inner: null).
//! Fields this version does not know are ignored.

use crate::cost_model::CostModel;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Reads a key that may hold `null` as `Some(None)`, so that a missing key (`None`, with
/// `#[serde(default)]`) stays apart from an unknown figure.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// How a path registers: rawfloor.ko's NVIDIA P2P calls, or the core and its loaded client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(super) enum Via {
    /// `/dev/nvpeer_rawfloor` (the 1.0x floor).
    Floor,
    /// `/dev/peer_mem_emu` REGISTER through the loaded client.
    Core,
}

/// The merged document of `regpath report`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Report {
    /// `regpath`.
    pub(super) benchmark: String,
    /// The machine, kernel and run, in words (`--machine`).
    pub(super) machine: String,
    pub(super) paths: Vec<PathDoc>,
}

/// One path's document, as `measure` writes it; `report` adds the ratios.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PathDoc {
    pub(super) path: String,
    pub(super) via: Via,
    pub(super) persistent_api: bool,
    /// The path whose numbers are this one's 1.0x.
    pub(super) floor_ref: String,
    /// The classic C client path this one is compared with.
    pub(super) classic_ref: String,
    /// The clients registered with the core (core paths).
    pub(super) clients: Vec<ClientDoc>,
    pub(super) cells: Vec<CellDoc>,
    /// Sizes and cells that could not be measured, and why.
    pub(super) skipped: Vec<Skipped>,
    /// The floor's kernel-side provider times, per size (floor paths).
    pub(super) floor_breakdown: Vec<FloorBreakdown>,
    /// The free of an allocation under one live MR, per size.
    pub(super) invalidation: Vec<InvalRow>,
    /// Null when not asked for or when it failed (`skipped` says why).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) inval_scale: Option<Option<InvalScale>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) live_mrs: Option<Vec<LiveMrRow>>,
    /// Slab memory per live MR; null when not measured.
    pub(super) memory: Option<SlabFigures>,
    /// The live-MR scale test; null when not run.
    pub(super) scale: Option<SlabFigures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) cost_model: Option<CostModelDoc>,
}

/// A client registered with the core.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ClientDoc {
    pub(super) name: String,
    pub(super) version: String,
    pub(super) invalidating: bool,
    pub(super) unmaps: bool,
}

/// A size or cell that was not measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Skipped {
    pub(super) size: u64,
    /// Null for what does not depend on threads (the size's allocation).
    pub(super) threads: Option<u32>,
    pub(super) why: String,
}

/// The provider's RM cost model the path ran with. Every field is optional: the first documents
/// held `call_cost_ns` and `page_cost_ns` instead.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CostModelDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) preset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) preset_ns: Option<CostModel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dilate: Option<f64>,
    /// Empty without dilation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dilate_source: Option<String>,
    /// The preset's costs times `dilate`, as the provider applied them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) applied_ns: Option<CostModel>,
}

/// Latency statistics of a sample set in whole nanoseconds ([`super::stats::summary`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct Latency {
    pub(super) n: u64,
    pub(super) median_ns: u64,
    pub(super) p99_ns: u64,
    pub(super) mean_ns: u64,
    pub(super) min_ns: u64,
    pub(super) max_ns: u64,
}

/// Provider calls per registration over a cell (failures: their count).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub(super) struct ProviderCalls {
    pub(super) get_pages: f64,
    pub(super) get_pages_persistent: f64,
    pub(super) put_pages: f64,
    pub(super) put_pages_persistent: f64,
    pub(super) dma_map_pages: f64,
    pub(super) dma_unmap_pages: f64,
    pub(super) total: f64,
    pub(super) failures: u64,
}

impl ProviderCalls {
    /// Pins per registration: `get_pages` + `get_pages_persistent`.
    pub(super) fn pins(&self) -> f64 {
        self.get_pages + self.get_pages_persistent
    }
}

/// One cell: a path at one registration size and thread count ([`super::cell`]); a row of the
/// live-MR series is one too, with `live_mrs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CellDoc {
    pub(super) size: u64,
    pub(super) threads: u32,
    pub(super) cycles: u64,
    pub(super) wall_s: f64,
    pub(super) regs_per_s: f64,
    pub(super) reg: Latency,
    pub(super) dereg: Latency,
    /// Registration + deregistration.
    pub(super) cycle: Latency,
    pub(super) provider_calls_per_reg: ProviderCalls,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) time_split_ns_per_cycle: Option<TimeSplit>,
    /// Rounds of floor, then client cycles (cells with an adjacent floor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) rounds: Option<u32>,
    /// The floor cell measured interleaved with this one (core paths, `--adjacent-floor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) adjacent_floor: Option<Box<CellDoc>>,
    /// Other MRs live during the cell (rows of the live-MR series).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) live_mrs: Option<u32>,
    /// Added by `report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ratios: Option<CellRatios>,
}

/// Where a cell's mean cycle went, ns per cycle ([`super::cell::time_split`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct TimeSplit {
    pub(super) mean: f64,
    pub(super) provider: f64,
    /// Core paths: in the client's callbacks, the provider's calls excluded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) client_own: Option<f64>,
    pub(super) rest: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) provider_model: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) model_overshoot: Option<f64>,
}

/// A cell's ratios to its floor (null where either figure is missing), added by `report`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct CellRatios {
    pub(super) cycle_mean_split: Option<ExcessSplit>,
    pub(super) reg_median: Option<f64>,
    pub(super) reg_p99: Option<f64>,
    pub(super) dereg_median: Option<f64>,
    pub(super) dereg_p99: Option<f64>,
    pub(super) cycle_median: Option<f64>,
    pub(super) regs_per_s: Option<f64>,
    pub(super) provider_calls: Option<f64>,
    pub(super) cycle_median_vs_classic: Option<f64>,
    /// `adjacent floor cell` or `floor path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) against: Option<String>,
}

/// A core cell's mean ratio to its floor taken apart ([`super::report`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct ExcessSplit {
    pub(super) ratio: f64,
    pub(super) provider: f64,
    pub(super) core: f64,
    pub(super) client: f64,
}

/// The floor's kernel-side times of one size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FloorBreakdown {
    pub(super) size: u64,
    pub(super) get_pages: Latency,
    pub(super) dma_map_pages: Latency,
    pub(super) dma_unmap_pages: Latency,
    pub(super) put_pages: Latency,
}

/// Frees ("cudaFree") of one size under one live MR ([`super::invalidation`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct InvalRow {
    pub(super) size: u64,
    pub(super) free_with_live_mr: Latency,
    pub(super) free_without_mr: Latency,
    pub(super) dereg_after_free: Latency,
    pub(super) callbacks_per_free: f64,
    /// The core's state of the MR after each free, counted.
    pub(super) mr_state_after_free: BTreeMap<String, u32>,
    /// Added by `report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ratios: Option<InvalRatios>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct InvalRatios {
    pub(super) free_with_live_mr_median: Option<f64>,
}

/// One free of an allocation carrying `mrs` live MRs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct OneFree {
    pub(super) mrs: u32,
    /// Until the free returned (its callbacks included).
    pub(super) free_ns: u64,
    pub(super) free_ns_per_mr: f64,
    /// Free callbacks the provider ran for it.
    pub(super) callbacks: u32,
    /// Deregistering the N MRs afterwards.
    pub(super) dereg_after_ns: u64,
    /// The core's state of each MR after the free, counted (core paths).
    pub(super) mr_state_after_free: BTreeMap<String, u32>,
}

/// `threads` frees at once, each of an allocation carrying `mrs_each` MRs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct ConcurrentFrees {
    pub(super) threads: u32,
    pub(super) mrs_each: u32,
    /// Each free's time until it returned, in thread order.
    pub(super) free_ns: Vec<u64>,
    pub(super) callbacks: u32,
}

/// The invalidation-at-scale series of one path ([`super::inval_scale`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct InvalScale {
    pub(super) frees: Vec<OneFree>,
    #[serde(default)]
    pub(super) concurrent: Option<ConcurrentFrees>,
}

/// A row of the live-MR series ([`super::live_mrs`]): the cell measured with `live_mrs` other MRs
/// live, or the number the guest's memory stopped at.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(super) enum LiveMrRow {
    NotReached(NotReached),
    Measured(Box<CellDoc>),
}

/// A number of live MRs the series did not reach.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct NotReached {
    pub(super) live_mrs: u32,
    /// MRs held when it stopped.
    pub(super) not_reached: u64,
    pub(super) stopped_by: String,
}

impl<'de> Deserialize<'de> for LiveMrRow {
    /// A row with a `stopped_by` is one not reached, any other a cell (whose errors name the
    /// cell's fields, not an untagged enum's "no variant matched").
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        if v.get("stopped_by").is_some_and(|s| !s.is_null()) {
            serde_json::from_value(v).map(Self::NotReached)
        } else {
            serde_json::from_value(v).map(|c| Self::Measured(Box::new(c)))
        }
        .map_err(D::Error::custom)
    }
}

impl LiveMrRow {
    /// The number of other live MRs the row is about.
    pub(super) fn live_mrs(&self) -> Option<u32> {
        match self {
            Self::NotReached(r) => Some(r.live_mrs),
            Self::Measured(c) => c.live_mrs,
        }
    }
}

/// One of the cache rows of [`SlabFigures::top_caches`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TopCache {
    pub(super) cache: String,
    pub(super) objs_per_mr: f64,
    pub(super) objsize: i64,
    pub(super) nominal: i64,
}

/// Kernel memory per live 64 KiB MR: the memory pass (`memory`) or the live-MR scale test
/// (`scale`, whose own fields the memory pass lacks), with what `report` adds against the floor.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct SlabFigures {
    pub(super) meminfo_slab_bytes_per_mr: f64,
    pub(super) meminfo_sunreclaim_bytes_per_mr: f64,
    pub(super) slabinfo_bytes_per_mr: f64,
    pub(super) slabinfo_available: bool,
    pub(super) top_caches: Vec<TopCache>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) kmalloc_nominal_bytes_per_mr: Option<f64>,
    /// Null on a kernel without kmemleak.
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) kernel_allocations_per_mr: Option<Option<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) kmalloc_profile_bytes_per_mr: Option<i64>,
    /// nvpeer's debugfs `mr_footprint_bytes` (documents of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) client_own_bytes_per_mr: Option<f64>,
    /// Memory pass: MRs held, and the registration error that stopped it (null: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) mrs: Option<u64>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) error: Option<Option<String>>,
    /// Memory taken from the pass of its own (`--memory-from`): when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) measured: Option<String>,
    /// Scale test: MRs asked for, reached, and what stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) target: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reached: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stopped_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reg_us_per_mr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dereg_us_per_mr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) memavailable_drop_bytes_per_mr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) slab_kb_left_after_free: Option<i64>,
    /// Added by `report` (null where the floor lacks the figure).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) ratio_slab_per_mr: Option<Option<f64>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) sunreclaim_bytes_per_mr_above_floor: Option<Option<f64>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) profile_bytes_per_mr_above_floor: Option<Option<f64>>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) nominal_bytes_per_mr_above_floor: Option<Option<f64>>,
}

//! The provider emulator's RM cost model (`nvp2p_emu_config`), its named presets, time dilation,
//! and the calibration workload that measures how much slower the bench guest runs software
//! than the host (docs/performance.md, "The provider cost model").
//!
//! A preset gives each RM call of the emulated driver a cost per call and per 64 KiB page, spent
//! with the emulated RM lock held. The bench guest is QEMU TCG with a debug kernel: software runs
//! many times slower than on a real machine, while a modelled cost is wall-clock time. Dilating
//! the model by the guest's measured slowdown keeps the ratio between the provider's time and
//! the software's time as on the machine the model was taken from.

use crate::error::{EmuError, Result};
use crate::nvp2p::abi;
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::time::Instant;

/// Modelled RM time per call and per 64 KiB page of each call kind, in ns.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct CostModel {
    /// `get_pages`, `get_pages_persistent`: per call.
    pub get_ns: f64,
    /// ... plus per page pinned.
    pub get_page_ns: f64,
    /// `dma_map_pages`: per call (the real IOMMU mapping of every page comes on top).
    pub map_ns: f64,
    /// ... plus per page mapped.
    pub map_page_ns: f64,
    /// `put_pages`, `put_pages_persistent`: per call.
    pub put_ns: f64,
    /// ... plus per page released.
    pub put_page_ns: f64,
}

/// The presets, by name, with where their numbers come from.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "pinmaplat-v100",
        "least-squares fit of gdrcopy's pinmaplat on a Tesla V100-PCIE-16GB (NVIDIA/gdrcopy pull \
         request 129, 64 KiB to 16 MiB): pin 68 us + 0.200 us per 64 KiB, unpin 37.3 us + 0.100 us \
         per 64 KiB; dma_map_pages 10 us per call (our assumption: no public figure), the IOMMU \
         mapping of every page done for real",
    ),
    (
        "uniform-250us",
        "250 us per get/map/put call, 1 us per 64 KiB page of get_pages and dma_map_pages (the \
         model of the first published runs: a flat cost below gdrcopy's README figures)",
    ),
    ("none", "no modelled cost"),
];

impl CostModel {
    /// The preset called `name` (see [`PRESETS`]).
    pub fn preset(name: &str) -> Result<Self> {
        let us = 1000.0;
        match name {
            "pinmaplat-v100" => Ok(Self {
                get_ns: 68.0 * us,
                get_page_ns: 200.0,
                map_ns: 10.0 * us,
                map_page_ns: 0.0,
                put_ns: 37.3 * us,
                put_page_ns: 100.0,
            }),
            "uniform-250us" => Ok(Self {
                get_ns: 250.0 * us,
                get_page_ns: 1000.0,
                map_ns: 250.0 * us,
                map_page_ns: 1000.0,
                put_ns: 250.0 * us,
                put_page_ns: 0.0,
            }),
            "none" => Ok(Self::default()),
            _ => Err(EmuError::Invalid(format!(
                "unknown cost model {name:?}; known: {}",
                PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Every cost multiplied by `factor` (> 0).
    pub fn dilated(self, factor: f64) -> Result<Self> {
        if !(factor.is_finite() && factor > 0.0) {
            return Err(EmuError::Invalid(format!(
                "dilation factor {factor} is not > 0"
            )));
        }
        Ok(Self {
            get_ns: self.get_ns * factor,
            get_page_ns: self.get_page_ns * factor,
            map_ns: self.map_ns * factor,
            map_page_ns: self.map_page_ns * factor,
            put_ns: self.put_ns * factor,
            put_page_ns: self.put_page_ns * factor,
        })
    }

    /// `cfg` with this model's costs (rounded to whole ns).
    pub fn apply(&self, cfg: abi::Config) -> abi::Config {
        let ns = |v: f64| v.round() as u64;
        abi::Config {
            get_cost_ns: ns(self.get_ns),
            get_page_cost_ns: ns(self.get_page_ns),
            map_cost_ns: ns(self.map_ns),
            map_page_cost_ns: ns(self.map_page_ns),
            put_cost_ns: ns(self.put_ns),
            put_page_cost_ns: ns(self.put_page_ns),
            ..cfg
        }
    }

    /// The modelled provider time of one registration + deregistration of `pages` 64 KiB pages
    /// with `pins` get_pages (and as many put_pages) and one dma_map_pages: what a path would
    /// cost if everything but the provider were free.
    pub fn cycle_ns(&self, pages: u64, pins: u64) -> f64 {
        let p = pages as f64;
        let pin = self.get_ns + self.get_page_ns * p + self.put_ns + self.put_page_ns * p;
        pin * pins as f64 + self.map_ns + self.map_page_ns * p
    }
}

/// The calibration workload: `rounds` rounds of `iters` iterations of mapping 64 KiB of anonymous
/// memory populated (a VMA and 16 page allocations from the slab and page allocators, page-table
/// updates, the mm locks) and unmapping it. Kernel work of the same kind as a registration's
/// (allocations, locks, list and tree updates), run the same way on the host and in the guest.
/// Returns the median ns per iteration over the rounds, and every round's figure.
pub fn calibrate(rounds: u32, iters: u32) -> Result<(f64, Vec<f64>)> {
    if rounds == 0 || iters == 0 {
        return Err(EmuError::Invalid(
            "calibration needs rounds and iterations > 0".into(),
        ));
    }
    let len = NonZeroUsize::new(64 << 10).expect("64 KiB is not zero");
    let mut per_round = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: a fresh private anonymous mapping, unmapped right after; no reference into
            // it is kept or handed out.
            let p = unsafe {
                mmap_anonymous(
                    None,
                    len,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
                )
            }
            .map_err(|e| EmuError::Invalid(format!("calibration mmap: {e}")))?;
            // SAFETY: `p` is the mapping of `len` bytes made above, and nothing refers to it.
            unsafe { munmap(p, len.get()) }
                .map_err(|e| EmuError::Invalid(format!("calibration munmap: {e}")))?;
        }
        per_round.push(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    let mut sorted = per_round.clone();
    sorted.sort_by(f64::total_cmp);
    // The median of every nvpeer tool (`nvpeer_figures::stats`: the mean of the two middle rounds for
    // an even count); `rounds > 0` was checked above, so there is one.
    let median = nvpeer_figures::stats::median_sorted(&sorted)
        .ok_or_else(|| EmuError::Invalid("calibration produced no rounds".into()))?;
    Ok((median, per_round))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_unknown_is_an_error() {
        for (name, _) in PRESETS {
            CostModel::preset(name).unwrap();
        }
        assert!(CostModel::preset("v100").is_err());
    }

    #[test]
    fn dilation_scales_every_cost_and_rejects_nonsense() {
        let m = CostModel::preset("pinmaplat-v100").unwrap();
        let d = m.dilated(10.0).unwrap();
        assert_eq!(d.get_ns, m.get_ns * 10.0);
        assert_eq!(d.put_page_ns, m.put_page_ns * 10.0);
        assert_eq!(d.cycle_ns(16, 1), m.cycle_ns(16, 1) * 10.0);
        for f in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(m.dilated(f).is_err(), "{f}");
        }
    }

    #[test]
    fn cycle_counts_pins_and_one_map() {
        let m = CostModel {
            get_ns: 100.0,
            get_page_ns: 1.0,
            map_ns: 10.0,
            map_page_ns: 2.0,
            put_ns: 50.0,
            put_page_ns: 0.5,
        };
        // 4 pages: pin+unpin = 100 + 4 + 50 + 2 = 156; map = 10 + 8 = 18.
        assert_eq!(m.cycle_ns(4, 1), 174.0);
        assert_eq!(m.cycle_ns(4, 2), 330.0);
    }

    #[test]
    fn apply_sets_the_six_costs() {
        let m = CostModel::preset("pinmaplat-v100").unwrap();
        let c = m.apply(abi::Config {
            pt_abi: 2,
            ..Default::default()
        });
        assert_eq!(
            (c.pt_abi, c.get_cost_ns, c.get_page_cost_ns),
            (2, 68_000, 200)
        );
        assert_eq!(
            (c.map_cost_ns, c.put_cost_ns, c.put_page_cost_ns),
            (10_000, 37_300, 100)
        );
    }

    #[test]
    fn calibration_runs() {
        let (med, rounds) = calibrate(3, 20).unwrap();
        assert_eq!(rounds.len(), 3);
        assert!(med > 0.0);
        assert!(calibrate(0, 1).is_err());
    }

    #[test]
    fn calibration_median_is_the_shared_definition() {
        // An even number of rounds: the shared median is the mean of the two middle rounds
        // (the old `sorted[len / 2]` took the upper one), and it lies between them.
        let (med, rounds) = calibrate(4, 5).unwrap();
        let mut sorted = rounds.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(Some(med), nvpeer_figures::stats::median_sorted(&sorted));
        assert!(sorted[1] <= med && med <= sorted[2], "{med} {sorted:?}");
        // An odd number: the middle round itself.
        let (med, rounds) = calibrate(3, 5).unwrap();
        let mut sorted = rounds;
        sorted.sort_by(f64::total_cmp);
        assert_eq!(med, sorted[1]);
    }
}

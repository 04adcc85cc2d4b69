//! Lookups in a benchmark document: a path's cell or invalidation row, and the ratios `report`
//! adds.

use super::document::{CellDoc, InvalRow, InvalScale, LiveMrRow, PathDoc};

impl PathDoc {
    /// The cell of `size` and `threads`.
    pub(super) fn cell(&self, size: u64, threads: u32) -> Option<&CellDoc> {
        self.cells
            .iter()
            .find(|c| c.size == size && c.threads == threads)
    }

    /// The invalidation row of `size`.
    pub(super) fn invalidation_of(&self, size: u64) -> Option<&InvalRow> {
        self.invalidation.iter().find(|r| r.size == size)
    }

    /// The live-MR row of `live` other MRs.
    pub(super) fn live_row(&self, live: u32) -> Option<&LiveMrRow> {
        self.live_rows().find(|r| r.live_mrs() == Some(live))
    }

    /// The rows of the live-MR series (none in documents from before it).
    pub(super) fn live_rows(&self) -> impl Iterator<Item = &LiveMrRow> {
        self.live_mrs.iter().flatten()
    }

    /// The invalidation-at-scale series, if measured.
    pub(super) fn inval_scale(&self) -> Option<&InvalScale> {
        self.inval_scale.as_ref().and_then(Option::as_ref)
    }
}

/// `a / b` to three decimals; none without both or when `b` is not positive, or when the quotient
/// is not finite (which a JSON document cannot hold: it was written as null).
pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            Some((a / b * 1000.0).round() / 1000.0).filter(|r| r.is_finite())
        }
        _ => None,
    }
}

//! Rank 0's report, the answer first: the nodes that are not ready and why (each doctor root
//! cause once, with the nodes it holds back), the nodes lost during the run, the outliers (a slow
//! link, or a node all of whose links are slow, named as the suspect instead of each link), the
//! failed links; then a node × node matrix per test. Written as text (stdout), JSON, JUnit XML
//! (one test case per pair and test) and an SVG heat map per test ([`crate::heatmap`]).

mod analysis;
mod model;
mod render;
#[cfg(test)]
mod tests;

pub use analysis::{
    labels, median, outliers, LinkValue, Suspect, Thresholds, MIN_LINKS_FOR_MEDIAN,
};
pub use model::{Cell, Failure, FleetReport, LostNode, Matrix, NotReady, Outlier};
pub use render::fmt;

use crate::coordinator::{FleetRun, LostKind, PairStatus};
use crate::readiness::RootCause;
use crate::runner::Unit;
use crate::schedule::Pairing;
use nvpeer_verdict::Verdict;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

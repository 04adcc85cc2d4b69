//! Validation harness and benchmarks: `nvpeer validate` and `nvpeer bench`.
//!
//! Files by concept: `mem/` (memory backends), `reg` (registration paths), `verbs` (RDMA
//! transport), `oob` (TCP out-of-band exchange), `peer` (the far side of transfers), `perftest_wire` /
//! `perftest_peer` (perftest's exchange, pairing with `ib_write_bw` / `ib_read_bw`), `server` /
//! `limits` (the two-node server: admission, and what a client may ask for), `validate`
//! (conformance cases), `bench` (measurements), `report` / `stats` / `junit` / `environment`
//! (output), `report_html` (`validate --report DIR`: the page, its plots and the files beside it), `causes` / `sysfs` (failure analysis). Sizes and statistics come from the `figures`
//! crate shared with emu-ctl.

pub mod auth;
pub mod bench;
pub mod causes;
pub mod cli;
pub mod environment;
pub mod junit;
pub mod limits;
pub mod line_rate;
pub mod mem;
pub mod oob;
pub mod pattern;
pub mod peer;
pub mod perftest_peer;
pub mod perftest_wire;
pub mod reg;
pub mod report;
pub mod report_html;
pub mod server;
pub mod stats;
pub mod sysfs;
pub mod validate;
pub mod verbs;

pub use bench::SetupError;
pub use cli::{BenchArgs, ValidateArgs};
use nvpeer_verdict::Verdict;
pub use report_html::ReportError;
pub use validate::ValidateError;

// Sizes are u64 end to end; a buffer length becomes a `usize` only at the allocator and the
// copy calls, which is lossless on the 64-bit targets this tool is built for.
const _: () = assert!(usize::BITS == 64, "nvpeer's harness needs a 64-bit target");

/// Runs `nvpeer validate`; an error is why its `--report` could not be written.
pub fn validate(args: ValidateArgs) -> Result<Verdict, validate::ValidateError> {
    validate::run(args)
}

/// Runs `nvpeer bench`; an error is why it could not run.
pub fn bench(args: BenchArgs) -> Result<Verdict, SetupError> {
    bench::run(args)
}

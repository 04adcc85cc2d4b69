//! The concurrency scenarios (docs/emulators.md, "Scenarios"), run against whatever peer-memory client is
//! loaded (the classic C client, a bad client, or nvpeer).
//!
//! Every scenario runs in one process (threads, and forks where another process is the point),
//! because the provider looks GPU memory up by the calling process. Each one:
//! 1. resets both emulators' counters, faults and delays;
//! 2. drives registrations, frees and deregistrations, checking what the contract says about each
//!    step (states, callback counts) for the kind of client that claimed the MR (invalidating or
//!    persistent);
//! 3. ends with the invariants of §5.1/§5.2: no violation recorded by either emulator, no
//!    deadlock, no live pin, mapping or MR left, every acquire released.
//!
//! With `expect` set (bad clients), the scenario passes only if the named violation was recorded.

mod claims;
mod concurrency;
mod env;
mod faults;
mod free_races;
mod fuzz;
mod lifecycle;
mod processes;
mod runner;

pub use env::{Env, Opts, WINDOW_BOUND_PER_100K, WINDOW_MIN_SAMPLE};
pub use runner::{recorded, run, Outcome};

use crate::error::Result;
use claims::{host_memory, no_inval_supp, non_pci};
use concurrency::{parallel_reg, race_stress};
use faults::{bar1_exhausted, enomem_walk, fault_core, fault_provider, hw_fail};
use free_races::{
    dereg_then_free, dereg_vs_free, dereg_vs_free_unmap, free_during_reg, free_then_dereg,
    free_vs_dereg, hold_free,
};
use lifecycle::{basic, overlap, unaligned};
use processes::{dereg_other, exit_order, process_exit, unload_live};

/// A scenario: name, what it proves, body.
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// One line: what it does and which rule it checks.
    pub about: &'static str,
    run: fn(&Env) -> Result<()>,
}

macro_rules! sc {
    ($name:expr, $about:expr, $f:expr) => {
        Scenario {
            name: $name,
            about: $about,
            run: $f,
        }
    };
}

/// Every scenario, in the order suites run them.
pub static SCENARIOS: &[Scenario] = &[
    sc!(
        "basic",
        "register, check mapping + sysfs counters, deregister, free",
        basic
    ),
    sc!(
        "unaligned",
        "register an unaligned sub-range (client must align to 64 KiB)",
        unaligned
    ),
    sc!(
        "free-then-dereg",
        "free under a live MR: one callback + invalidation (persistent: none)",
        free_then_dereg
    ),
    sc!(
        "free-after-acquire",
        "free while the core sits between acquire and get_pages",
        |e| free_during_reg(e, "after_acquire")
    ),
    sc!(
        "free-after-get-pages",
        "free between get_pages and dma_map (mapping_lock held, H4)",
        |e| free_during_reg(e, "after_get_pages")
    ),
    sc!(
        "free-after-dma-map",
        "free between dma_map and HW object creation",
        |e| free_during_reg(e, "after_dma_map")
    ),
    sc!(
        "free-before-activate",
        "free while activation is pending",
        |e| free_during_reg(e, "before_activate")
    ),
    sc!(
        "hold-free-activate",
        "free while registration holds mapping_lock, then activate",
        |e| hold_free(e, false)
    ),
    sc!(
        "hold-free-fail",
        "free while registration holds mapping_lock, then HW creation fails",
        |e| hold_free(e, true)
    ),
    sc!(
        "hw-fail",
        "HW object creation fails after dma_map: stop-notifier + release",
        hw_fail
    ),
    sc!(
        "dereg-vs-free-before-stop",
        "free while dereg is between HW revoke and stop-notifier",
        |e| dereg_vs_free(e, "dereg_before_stop")
    ),
    sc!(
        "dereg-vs-free-in-stop",
        "free while dereg is inside stop-notifier (before dma_unmap)",
        |e| dereg_vs_free(e, "in_stop")
    ),
    sc!(
        "dereg-vs-free-stop-to-release",
        "free between stop-notifier and release()",
        |e| dereg_vs_free(e, "stop_to_release")
    ),
    sc!(
        "dereg-vs-free-in-unmap",
        "free while dereg's dma_unmap_pages is running (H2)",
        dereg_vs_free_unmap
    ),
    sc!(
        "free-vs-dereg-invalidating",
        "dereg while invalidate holds mapping_lock",
        free_vs_dereg
    ),
    sc!(
        "dereg-then-free",
        "free right after dereg returned",
        dereg_then_free
    ),
    sc!(
        "overlap",
        "three MRs over overlapping ranges of one allocation, one free",
        overlap
    ),
    sc!(
        "parallel-reg",
        "threads registering/deregistering at once (global acquire mutex)",
        parallel_reg
    ),
    sc!(
        "race-stress",
        "register/deregister threads racing a free/alloc thread",
        race_stress
    ),
    sc!(
        "exit-gpu-first",
        "child process exits closing the GPU fd before the RDMA fd",
        |e| exit_order(e, true)
    ),
    sc!(
        "exit-core-first",
        "child process exits closing the RDMA fd before the GPU fd",
        |e| exit_order(e, false)
    ),
    sc!(
        "process-exit",
        "emulated process exit / context destroy under live MRs",
        process_exit
    ),
    sc!(
        "dereg-other-pid",
        "MR deregistered by a forked child (wrong-process put, H5)",
        |e| dereg_other(e, false)
    ),
    sc!(
        "dereg-kworker",
        "MR deregistered from a kworker (uverbs disassociate, H5)",
        |e| dereg_other(e, true)
    ),
    sc!(
        "unload-live",
        "rmmod of the client with a live MR must be refused",
        unload_live
    ),
    sc!(
        "non-pci",
        "dma_device is not a PCI device: refused cleanly (H6)",
        non_pci
    ),
    sc!(
        "host-memory",
        "host memory is left to GUP; with GUP skipped no client claims it",
        host_memory
    ),
    sc!(
        "no-inval-supp",
        "CQ/QP-style registration without INVAL_SUPP",
        no_inval_supp
    ),
    sc!(
        "bar1-exhausted",
        "BAR1 budget too small: registration fails with nothing leaked",
        bar1_exhausted
    ),
    sc!(
        "fault-provider",
        "each provider call fails once with each errno, at each call index",
        fault_provider
    ),
    sc!(
        "fault-core",
        "each core allocation/HW fault point fires",
        fault_core
    ),
    sc!(
        "enomem-walk",
        "fail the n-th slab or page allocation of a registration, for every n",
        enomem_walk
    ),
];

/// The fuzzer (`scenario/fuzz.rs`): not among [`SCENARIOS`] (`all` and the suites' matrices run
/// those), run by name with its seed and time.
pub static FUZZ: Scenario = sc!(
    "fuzz",
    "seeded random registration sequences (--seed, --seconds), held to every invariant",
    fuzz::fuzz
);

/// Looks a scenario up by name (the fuzzer too).
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .or_else(|| (name == FUZZ.name).then_some(&FUZZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_unique_and_found() {
        let mut names: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(find("basic").is_some());
        assert!(find("fuzz").is_some());
        assert!(!SCENARIOS.iter().any(|s| s.name == "fuzz"));
        assert!(find("nope").is_none());
    }
}

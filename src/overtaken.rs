// SPDX-License-Identifier: GPL-2.0

//! Provider calls a free callback overtook, and what keeps them from reaching a pin of ours
//! (docs/design.md: the put window and H4).
//!
//! `nvidia_p2p_put_pages` and `nvidia_p2p_dma_map_pages` run with our lock dropped (H3) and wait
//! for NVIDIA's lock. If NVIDIA's free callback for the same pin runs first, it finds the call in
//! flight and returns, NVIDIA frees the page table, and the call, once it runs, names freed
//! memory. NVIDIA finds nothing there, unless a new pin got the freed table's memory meanwhile:
//! then the put releases that pin (NVIDIA looks it up by process, address and table pointer), or
//! the map maps it.
//!
//! The put: every non-persistent put and every non-persistent pin of this module runs under one
//! gate ([`gated`], lock `P`). A put that a callback overtook before it took the gate is not made
//! at all (NVIDIA already gave the pin back); one the callback overtakes while it waits for
//! NVIDIA's lock holds the gate until it returned, so no pin of ours can be handed the freed
//! table's memory before the stale put found nothing. What stays open of the put window: pins
//! that other users of NVIDIA's P2P API make in the same process.
//!
//! The map (H4): from the moment a callback finds it ([`Overtaken::new`]) until it returned (the
//! [`Overtaken`] dropped), no pin of this module starts ([`wait_before_pin`]). What stays open: a
//! pin that passed that check an instant before the callback counted the call, and the map's own
//! read of the freed table.
//!
//! The wait is a dependency, and lockdep sees it (a lockdep map in the shim): every call a
//! callback can overtake runs [`overtakable`] (holding the map, shared), and the wait before a pin
//! takes the map exclusively. A pin made from inside a free callback (which holds NVIDIA's lock,
//! which the overtaken call needs) would wait forever; lockdep reports it as a cycle through
//! `nvpeer_overtaken_wait` the first time one is made, whether a call was in flight then or not
//! (the bench plants one: suite 00-lockdep-canary). No core pins from its invalidate, and nvpeer's
//! callback pins nothing; NVIDIA refuses such a pin anyway (its lock is not recursive: `-EIO`).
//! The gate is a kernel mutex, which lockdep sees as it is.

use crate::ffi;
use crate::stats::STATS;
use kernel::prelude::*;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` from module init, before any client is registered.
    unsafe(uninit) static GATE: Mutex<()> = ();
}
// Lock `P` of the lock order (docs/design.md, "Locking"): taken under the core's locks (`G`,
// `M`) and no lock of ours, before NVIDIA's `R` (inside the gated call) and a registration's `L`;
// held only across one non-persistent `get_pages` or `put_pages`, never by the free callback.

/// Initialises the gate.
///
/// # Safety
///
/// Called exactly once, from module init, before any client is registered.
pub(crate) unsafe fn init() {
    // SAFETY: called once, before first use (function contract).
    unsafe { GATE.init() };
}

/// Runs `call` (one non-persistent `get_pages` or `put_pages`, with no lock of ours held) under
/// the gate: no other such call of this module runs beside it.
pub(crate) fn gated<T>(call: impl FnOnce() -> T) -> T {
    let _gate = GATE.lock();
    call()
}

/// Runs `call`, a provider call a free callback can overtake (a non-persistent put, a map), as
/// lockdep's model of the wait needs: holding the wait's lockdep map, shared (no-op without
/// lockdep).
pub(crate) fn overtakable<T>(call: impl FnOnce() -> T) -> T {
    // SAFETY: no arguments; the map is a static of the shim.
    unsafe { ffi::nvpeer_shim_overtakable_enter() };
    let r = call();
    // SAFETY: entered just above, on this thread.
    unsafe { ffi::nvpeer_shim_overtakable_exit() };
    r
}

/// A provider call of ours that a free callback overtook and that has not returned yet.
///
/// # Invariants
///
/// Counted once in the shim's count of overtaken calls from creation until drop.
pub(crate) struct Overtaken(());

impl Overtaken {
    /// Counts a call the calling free callback found in flight; call before the callback returns
    /// (NVIDIA frees the table after that).
    pub(crate) fn new() -> Self {
        STATS.overtaken_calls.inc();
        // SAFETY: no arguments; the count is a static of the shim.
        unsafe { ffi::nvpeer_shim_overtaken_begin() };
        // INVARIANT: counted just above.
        Self(())
    }
}

impl Drop for Overtaken {
    fn drop(&mut self) {
        // SAFETY: counted once by `new` (type invariant), uncounted once here.
        unsafe { ffi::nvpeer_shim_overtaken_end() };
    }
}

/// Waits until no overtaken call is in flight; call before asking NVIDIA for a pin, with no lock
/// held (an overtaken call returns only once NVIDIA's lock is free). Errors only on a fatal signal
/// (`ERESTARTSYS`).
pub(crate) fn wait_before_pin() -> Result {
    // SAFETY: no arguments; may sleep, and the caller holds no lock.
    let ret = unsafe { ffi::nvpeer_shim_overtaken_wait() };
    if ret < 0 {
        return Err(Error::from_errno(ret));
    }
    if ret > 0 {
        STATS.pin_waits.inc();
    }
    Ok(())
}

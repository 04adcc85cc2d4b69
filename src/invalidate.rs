// SPDX-License-Identifier: GPL-2.0

//! The core's invalidate entry point, for the invalidating client.
//!
//! The core writes its `invalidate_peer_memory` function into [`slot`] during the registration
//! of the invalidating client; the registration then [`publish`]es its handle. A free callback
//! calls [`invalidate`], which finds both through the handle; `acquire` of the invalidating
//! client declines until they are [`published`] (a registration it claimed could not be
//! invalidated).

use crate::compat::AtomicPtr;
use crate::ffi::InvalidateFn;
use core::cell::UnsafeCell;
use core::ptr::{null_mut, NonNull};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Release};

/// The invalidating client's link with the core: the entry point the core stores, and the
/// registration's handle, published after the call that stored it.
///
/// The core's store is a plain C store made inside `ib_register_peer_memory_client`, with no
/// ordering of its own. Every read of `entry` is ordered after it: on the registering thread by
/// program order (in [`Link::publish`], after the call returned), on every other thread by
/// `handle`'s Release store in [`Link::publish`] and the Acquire load in [`Link::current`] that
/// found it set.
///
/// # Invariants
///
/// - `entry` is written by the core only, and only inside the registration call that was given
///   [`Link::entry_ptr`]; no code of ours writes it.
/// - `handle` is non-null only between a [`Link::publish`] (made after that call returned, with
///   `entry` then set) and the [`Link::withdraw`] that follows the client's unregistration: while
///   it is non-null, `entry` holds the core's function and is written no more.
struct Link {
    entry: UnsafeCell<Option<InvalidateFn>>,
    handle: AtomicPtr<c_void>,
}

// SAFETY: `entry` is read only in the ways the type's invariants order after the core's one store
// (a `Sync` argument over a happens-before chain, not over the core's locks); `handle` is atomic.
unsafe impl Sync for Link {}

impl Link {
    const fn new() -> Self {
        Self {
            entry: UnsafeCell::new(None),
            handle: AtomicPtr::null(),
        }
    }

    /// The storage handed to `ib_register_peer_memory_client` (module-lifetime: the core writes
    /// it during the call, so it must not be a local copied afterwards).
    fn entry_ptr(&self) -> *mut Option<InvalidateFn> {
        self.entry.get()
    }

    /// Publishes `handle` if the core stored an entry point; false (nothing published) if not.
    ///
    /// # Safety
    ///
    /// Called on the thread that made the registration call given [`Link::entry_ptr`], after it
    /// returned `handle`, once.
    unsafe fn publish(&self, handle: NonNull<c_void>) -> bool {
        // SAFETY: the core's store happened inside the call that returned on this thread (the
        // caller's contract), and nothing writes `entry` since (the type's invariant).
        let entry = unsafe { *self.entry.get() };
        if entry.is_none() {
            return false;
        }
        // ORDERING: Release, so that whoever loads the handle with Acquire sees `entry`.
        // INVARIANT: published after the call, with `entry` set.
        self.handle.store(handle.as_ptr(), Release);
        true
    }

    /// Withdraws the handle (the client was unregistered).
    fn withdraw(&self) {
        self.handle.store(null_mut(), Release);
    }

    /// Whether a handle is published.
    fn published(&self) -> bool {
        !self.handle.load(Acquire).is_null()
    }

    /// The core's entry point and the handle, while published.
    fn current(&self) -> Option<(InvalidateFn, NonNull<c_void>)> {
        // ORDERING: Acquire pairs with `publish`'s Release: the core's store to `entry` is seen.
        let handle = NonNull::new(self.handle.load(Acquire))?;
        // SAFETY: the handle was published, so `entry` was set before the Release store this
        // load synchronised with and is written no more (the type's invariants).
        let entry = unsafe { *self.entry.get() }?;
        Some((entry, handle))
    }
}

/// The one invalidating client's link (one registration per module load).
static LINK: Link = Link::new();

/// The storage handed to `ib_register_peer_memory_client` for the invalidating client.
pub(crate) fn slot() -> *mut Option<InvalidateFn> {
    LINK.entry_ptr()
}

/// Makes `handle` (the invalidating client's registration) the one [`invalidate`] uses, if the
/// core gave an entry point during the registration; false (nothing published) if it did not.
///
/// # Safety
///
/// Called on the thread that registered the invalidating client with [`slot`], after the call
/// returned `handle`, once per registration.
pub(crate) unsafe fn publish(handle: NonNull<c_void>) -> bool {
    // SAFETY: the caller's contract is `Link::publish`'s.
    unsafe { LINK.publish(handle) }
}

/// Withdraws the handle (the client was unregistered).
pub(crate) fn withdraw() {
    LINK.withdraw()
}

/// Whether an invalidating client is registered with an entry point.
pub(crate) fn published() -> bool {
    LINK.published()
}

/// Tells the core that the registration with `core_context` lost its pages; returns once the
/// HCA no longer accesses them.
pub(crate) fn invalidate(core_context: Option<u64>) {
    match (LINK.current(), core_context) {
        (Some((entry, handle)), Some(core_context)) => {
            // SAFETY: `entry` is the core's invalidate entry point and `handle` its handle for
            // our invalidating client, registered until module exit (and module exit cannot run
            // while a registration holds a module reference); `core_context` came from the
            // core's get_pages.
            unsafe { entry(handle.as_ptr(), core_context) };
        }
        _ => {
            pr_err!("free callback without an invalidating registration; HCA access not revoked\n")
        }
    }
}

// SPDX-License-Identifier: GPL-2.0

//! The core's invalidate entry point, for the invalidating client.
//!
//! The core writes its `invalidate_peer_memory` function into [`slot`] during the registration
//! of the invalidating client; the registration then [`publish`]es its handle. A free callback
//! calls [`invalidate`] with both; `acquire` of the invalidating client declines until they are
//! [`published`] (a registration it claimed could not be invalidated).

use crate::compat::AtomicPtr;
use crate::ffi::{self, InvalidateSlot};
use core::ptr::{null_mut, NonNull};
use kernel::ffi::c_void;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Release};

/// Where the core stores its invalidate entry point (written during registration).
static ENTRY: InvalidateSlot = InvalidateSlot::new();
/// Registration handle of the invalidating client (null when not registered).
static HANDLE: AtomicPtr<c_void> = AtomicPtr::null();

/// The storage handed to `ib_register_peer_memory_client` for the invalidating client.
pub(crate) fn slot() -> *mut Option<ffi::InvalidateFn> {
    ENTRY.as_ptr()
}

/// Whether the core gave an entry point during the registration.
pub(crate) fn has_entry() -> bool {
    ENTRY.get().is_some()
}

/// Makes `handle` (the invalidating client's registration) the one [`invalidate`] uses.
pub(crate) fn publish(handle: NonNull<c_void>) {
    HANDLE.store(handle.as_ptr(), Release);
}

/// Withdraws the handle (the client was unregistered).
pub(crate) fn withdraw() {
    HANDLE.store(null_mut(), Release);
}

/// Whether an invalidating client is registered with an entry point.
pub(crate) fn published() -> bool {
    !HANDLE.load(Acquire).is_null()
}

/// Tells the core that the registration with `core_context` lost its pages; returns once the
/// HCA no longer accesses them.
pub(crate) fn invalidate(core_context: Option<u64>) {
    let handle = HANDLE.load(Acquire);
    match (ENTRY.get(), core_context) {
        (Some(entry), Some(core_context)) if !handle.is_null() => {
            // SAFETY: `entry` is the core's invalidate entry point and `handle` its handle for
            // our invalidating client, registered until module exit (and module exit cannot run
            // while a registration holds a module reference); `core_context` came from the
            // core's get_pages.
            unsafe { entry(handle, core_context) };
        }
        _ => {
            pr_err!("free callback without an invalidating registration; HCA access not revoked\n")
        }
    }
}

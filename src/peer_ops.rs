// SPDX-License-Identifier: GPL-2.0

//! The operations of nvpeer's peer-memory clients: C-ABI trampolines the core calls.
//!
//! Each converts the core's raw arguments and forwards to [`Mr`]; none panics, and every error
//! becomes a negative errno the core may hand to user space. The core calls them with the
//! `client_context` that `acquire` returned, until `release`. They are private: the only way to
//! reach them is the table [`client_table`] builds.

use crate::ffi::{PeerMemoryClient, PEER_NAME_MAX, PEER_VER_MAX};
use crate::invalidate;
use crate::logic::errno;
use crate::logic::range::GPU_PAGE_SIZE;
use crate::mr::Mr;
use crate::p2p::PciDev;
use crate::sg::CoreSgt;
use crate::stats::STATS;
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Release};
use kernel::sync::Arc;
use kernel::types::ForeignOwnable;

/// A client table named `name` and versioned `version` whose operations are the trampolines
/// below (an `invalidates` client's `acquire` claims non-persistent pins).
pub(crate) const fn client_table(
    name: [c_char; PEER_NAME_MAX],
    version: [c_char; PEER_VER_MAX],
    invalidates: bool,
) -> PeerMemoryClient {
    PeerMemoryClient {
        name,
        version,
        acquire: Some(if invalidates {
            acquire::<false>
        } else {
            acquire::<true>
        }),
        get_pages: Some(get_pages),
        dma_map: Some(dma_map),
        dma_unmap: Some(dma_unmap),
        put_pages: Some(put_pages),
        get_page_size: Some(get_page_size),
        release: Some(release),
    }
}

/// Whether `acquire` may claim registrations: set once every client is registered, cleared
/// before the first is unregistered. A module whose init fails part-way therefore never holds
/// a registration (nor a pin) that the failed load would leave behind.
static SERVING: crate::compat::Flag = crate::compat::Flag::new(false);

/// Starts claiming registrations (the end of module init).
pub(crate) fn start_serving() {
    SERVING.store(true, Release);
}

/// Stops claiming registrations (the start of module exit); registrations already claimed
/// are served until the core releases them.
pub(crate) fn stop_serving() {
    SERVING.store(false, Release);
}

/// Converts an error into the errno handed to the core, which passes it on to user space
/// (`ibv_reg_mr`): no kernel-internal code such as NVIDIA's 524 (see [`errno::user_errno`]).
fn core_errno(e: Error) -> c_int {
    -errno::user_errno(-e.to_errno())
}

/// Borrows the registration behind a `client_context`.
///
/// # Safety
///
/// `ctx` is null, or came from `acquire` and `release` has not been called for it.
unsafe fn registration<'a>(ctx: *mut c_void) -> Option<<Arc<Mr> as ForeignOwnable>::Borrowed<'a>> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: per the function contract `ctx` is a live `Arc<Mr>` foreign pointer.
    Some(unsafe { <Arc<Mr> as ForeignOwnable>::borrow(ctx) })
}

/// acquire: claim (and pin) the range if it is GPU memory of the calling process.
///
/// # Safety
///
/// Called by the core only, with a valid (or null) `client_context` out-pointer.
unsafe extern "C" fn acquire<const PERSISTENT: bool>(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    if client_context.is_null() || !SERVING.load(Acquire) {
        return 0;
    }
    // An invalidating registration can only be claimed once the core's invalidate entry point
    // and the client's handle are known (a callback needs both).
    if !PERSISTENT && !invalidate::published() {
        return 0;
    }
    match Mr::acquire(addr as u64, size as u64, PERSISTENT) {
        Some(mr) => {
            // SAFETY: the core passes a valid out-pointer (checked non-null above).
            unsafe { *client_context = mr.into_foreign() };
            1
        }
        None => 0,
    }
}

/// get_pages: adopt the pin `acquire` made.
///
/// # Safety
///
/// Called by the core only, with the `client_context` acquire returned, before release.
unsafe extern "C" fn get_pages(
    addr: c_ulong,
    size: usize,
    _write: c_int,
    _force: c_int,
    _sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    core_context: u64,
) -> c_int {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { registration(client_context) }) else {
        return EINVAL.to_errno();
    };
    match mr.core_get_pages(addr as u64, size as u64, core_context) {
        Ok(()) => 0,
        Err(e) => core_errno(e),
    }
}

/// dma_map: map the pages for `dma_device` and fill the core's `sg_head`.
///
/// # Safety
///
/// Called by the core only, with the `client_context` acquire returned, before release, and
/// `sg_head` and `nmap` valid for the call.
unsafe extern "C" fn dma_map(
    sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    dma_device: *mut bindings::device,
    _dmasync: c_int,
    nmap: *mut c_int,
) -> c_int {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { registration(client_context) }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: the core's sg_head is valid for this call and used by no one else meanwhile.
    let Some(mut sgt) = (unsafe { CoreSgt::from_raw(sg_head) }) else {
        return EINVAL.to_errno();
    };
    if nmap.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: the core's `dma_device` (or null) is referenced by its `ib_device` for the call.
    let dma_device = unsafe { PciDev::from_dma_device(dma_device) };
    match mr.core_dma_map(&mut sgt, dma_device) {
        Ok(n) => {
            // SAFETY: checked non-null; the core passes a valid out-pointer.
            unsafe { *nmap = n };
            0
        }
        Err(e) => core_errno(e),
    }
}

/// dma_unmap: unmap unless NVIDIA revoked the pages.
///
/// # Safety
///
/// Called by the core only, with the `client_context` acquire returned, before release.
unsafe extern "C" fn dma_unmap(
    _sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    _dma_device: *mut bindings::device,
) -> c_int {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { registration(client_context) }) else {
        return EINVAL.to_errno();
    };
    mr.core_dma_unmap();
    0
}

/// put_pages: free the SG table and give the pin back.
///
/// # Safety
///
/// Called by the core only, with the `client_context` acquire returned, before release, and
/// `sg_head` null or valid for the call.
unsafe extern "C" fn put_pages(sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { registration(client_context) }) else {
        return;
    };
    // SAFETY: the core's sg_head (or null) is valid for this call.
    let mut sgt = unsafe { CoreSgt::from_raw(sg_head) };
    mr.core_put_pages(sgt.as_mut());
}

/// get_page_size: the granule of the SG entries (64 KiB, the only page size accepted).
///
/// # Safety
///
/// Called by the core only; the context is not used.
unsafe extern "C" fn get_page_size(_client_context: *mut c_void) -> c_ulong {
    STATS.get_page_size_calls.inc();
    GPU_PAGE_SIZE as c_ulong
}

/// release: the core is done with the registration.
///
/// # Safety
///
/// Called by the core only, exactly once per successful acquire, with its `client_context`.
unsafe extern "C" fn release(client_context: *mut c_void) {
    if client_context.is_null() {
        return;
    }
    // SAFETY: the core calls release exactly once per successful acquire, with its context;
    // this takes back the reference `acquire` gave away.
    let mr = unsafe { <Arc<Mr> as ForeignOwnable>::from_foreign(client_context) };
    Mr::core_release(mr);
}

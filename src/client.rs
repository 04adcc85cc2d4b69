// SPDX-License-Identifier: GPL-2.0

//! The peer-memory client tables handed to the core, and their C-ABI trampolines.
//!
//! Each table is a `static`, fully built in `const` (the core keeps a pointer to it until
//! unregistration returns, and nothing mutates it). Trampolines convert the core's raw arguments
//! and forward to [`Mr`]; they never panic and turn every error into a negative errno.
//!
//! Client names: the core shows each client under `/sys/kernel/mm/memory_peers/<name>/`. NCCL,
//! NVSHMEM and UCC enable GPUDirect RDMA when `.../nv_mem/version` (or `nv_mem_nc`) exists, so
//! nvpeer registers the same names as nvidia-peermem even though the module is called `nvpeer`.

use crate::ffi::{self, InvalidateSlot, PeerMemoryClient, PeerMemoryClientEx, PEER_NAME_MAX, PEER_VER_MAX};
use crate::logic::errno;
use crate::logic::params::Layout;
use crate::logic::range::GPU_PAGE_SIZE;
use crate::mr::Mr;
use crate::p2p::PciDev;
use crate::sg::CoreSgt;
use core::ptr::{null_mut, NonNull};
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Release};
use kernel::sync::Arc;
use kernel::types::ForeignOwnable;

/// Version string of the module (modinfo `version=`, sysfs `version` of each client).
/// At most 14 characters: byte 15 of the client's version field is the "extended" marker.
pub(crate) const VERSION: &str = "0.1.0";
const _: () = assert!(VERSION.len() <= PEER_VER_MAX - 2);

const fn c_array<const N: usize>(s: &str, marker: bool) -> [c_char; N] {
    let b = s.as_bytes();
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < b.len() && i < N - 1 {
        out[i] = b[i] as c_char;
        i += 1;
    }
    if marker {
        out[N - 1] = 1;
    }
    out
}

const fn table(name: &str, persistent: bool, marker: bool) -> PeerMemoryClient {
    PeerMemoryClient {
        name: c_array::<PEER_NAME_MAX>(name, false),
        version: c_array::<PEER_VER_MAX>(VERSION, marker),
        acquire: Some(if persistent { acquire::<true> } else { acquire::<false> }),
        get_pages: Some(get_pages),
        dma_map: Some(dma_map),
        dma_unmap: Some(dma_unmap),
        put_pages: Some(put_pages),
        get_page_size: Some(get_page_size),
        release: Some(release),
    }
}

/// Persistent client, default name. `ex_size`/`flags` stay zero: it never invalidates, and a
/// MLNX_OFED 4.x core reads those words as private-data hooks that must be NULL.
static NV_MEM_PERSISTENT: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table("nv_mem", true, false),
    ex_size: 0,
    flags: 0,
};

/// Persistent client next to an invalidating `nv_mem` (`persistent_api_support=0`).
static NV_MEM_NC: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table("nv_mem_nc", true, false),
    ex_size: 0,
    flags: 0,
};

/// Invalidating extended client: the core does not unmap inside invalidate.
static NV_MEM_INVALIDATING: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table("nv_mem", false, true),
    ex_size: core::mem::size_of::<PeerMemoryClientEx>(),
    flags: ffi::PEER_MEM_INVALIDATE_UNMAPS,
};

/// Invalidating client in the MLNX_OFED 4.x layout (`peerdirect_support=1`).
static NV_MEM_INVALIDATING_LEGACY: PeerMemoryClientEx = PeerMemoryClientEx {
    client: table("nv_mem", false, false),
    ex_size: 0,
    flags: 0,
};

/// Where the core stores its invalidate entry point (written during registration).
static INVALIDATE: InvalidateSlot = InvalidateSlot::new();
/// Registration handle of the invalidating client (null when not registered).
static INVALIDATING_HANDLE: Atomic<*mut c_void> = Atomic::new(null_mut());

/// The free callback handed to `nvidia_p2p_get_pages`.
pub(crate) const FREE_CALLBACK: ffi::FreeCallbackFn = free_callback;

/// Which client to register.
#[derive(Clone, Copy)]
pub(crate) enum Which {
    /// Persistent, named `nv_mem` or `nv_mem_nc`.
    Persistent {
        /// Register as `nv_mem_nc`.
        nc: bool,
    },
    /// Invalidating `nv_mem` with this layout.
    Invalidating(Layout),
}

impl Which {
    fn table(self) -> &'static PeerMemoryClientEx {
        match self {
            Which::Persistent { nc: false } => &NV_MEM_PERSISTENT,
            Which::Persistent { nc: true } => &NV_MEM_NC,
            Which::Invalidating(Layout::Extended) => &NV_MEM_INVALIDATING,
            Which::Invalidating(Layout::Legacy) => &NV_MEM_INVALIDATING_LEGACY,
        }
    }

    /// The client's name (as NUL-terminated bytes for C, and as text).
    pub(crate) fn name(self) -> (&'static CStr, &'static str) {
        match self {
            Which::Persistent { nc: true } => (c"nv_mem_nc", "nv_mem_nc"),
            _ => (c"nv_mem", "nv_mem"),
        }
    }

    /// Short description for logs and debugfs.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Which::Persistent { .. } => "persistent",
            Which::Invalidating(Layout::Extended) => "invalidating, INVALIDATE_UNMAPS",
            Which::Invalidating(Layout::Legacy) => "invalidating, MLNX_OFED 4.x layout",
        }
    }
}

/// Refuses to serve `nv_mem` beside another module that does: NVIDIA's `nvidia_peermem` or
/// Mellanox's `nv_peer_mem`. The DOCA-OFED core on kernels without the `mm_kobj` export accepts
/// two clients of one name and gives every registration to the first, so the check reads
/// `/sys/module` (see the shim), not the core's `memory_peers` directory.
pub(crate) fn refuse_other_nv_mem_module() -> Result {
    // SAFETY: the shim returns null or a static NUL-terminated string.
    let other = unsafe { ffi::nvpeer_shim_other_nv_mem_module() };
    if other.is_null() {
        return Ok(());
    }
    // SAFETY: non-null, static and NUL-terminated (above); same for the module name.
    let (other, own) = unsafe {
        (
            CStr::from_char_ptr(other),
            CStr::from_char_ptr(ffi::nvpeer_shim_module_name()),
        )
    };
    pr_err!(
        "{} is loaded and serves the nv_mem peer-memory client; two clients of one name cannot both serve registrations: unload it first ('rmmod {}'), or install nvpeer as nvidia-peermem (docs/install.md); not loading {}\n",
        other.to_str().unwrap_or("another peer-memory module"),
        other.to_str().unwrap_or("nvidia_peermem"),
        own.to_str().unwrap_or("nvpeer")
    );
    Err(EBUSY)
}

/// A registered client; unregistered on drop (which waits until the core released every
/// registration acquired through it).
///
/// # Invariants
///
/// `handle` is the non-null handle `ib_register_peer_memory_client` returned for `which`'s table.
pub(crate) struct Registration {
    handle: NonNull<c_void>,
    which: Which,
}

// SAFETY: the handle is an opaque token the core accepts from any thread.
unsafe impl Send for Registration {}
// SAFETY: `&Registration` exposes nothing but plain data.
unsafe impl Sync for Registration {}

impl Registration {
    /// Registers `which` with the core. Errors are logged in one line naming the fix.
    pub(crate) fn register(which: Which) -> Result<Self> {
        let (cname, name) = which.name();
        // SAFETY: `cname` is a NUL-terminated string.
        if unsafe { ffi::nvpeer_shim_peer_client_visible(cname.as_char_ptr()) } {
            pr_err!(
                "a peer-memory client named '{}' is already registered (nvidia_peermem or nv_peer_mem loaded?): unload it first, e.g. 'rmmod nvidia_peermem'\n",
                name
            );
            return Err(EBUSY);
        }
        let invalidating = matches!(which, Which::Invalidating(_));
        let inv = if invalidating { INVALIDATE.as_ptr() } else { null_mut() };
        // SAFETY: the table is a `static` that outlives the registration; `inv` is null or
        // module-lifetime storage the core may write during the call.
        let h = unsafe { ffi::ib_register_peer_memory_client(&which.table().client, inv) };
        let Some(handle) = NonNull::new(h) else {
            pr_err!(
                "ib_register_peer_memory_client('{}') failed: the peer-memory core refused the client (see the ib_core message above; out of memory or a name collision)\n",
                name
            );
            return Err(EINVAL);
        };
        if invalidating {
            if INVALIDATE.get().is_none() {
                pr_err!("the peer-memory core returned no invalidate entry point for '{}'; use persistent_api_support=1\n", name);
                // SAFETY: `h` was just returned by the core and is not used again.
                unsafe { ffi::ib_unregister_peer_memory_client(h) };
                return Err(EINVAL);
            }
            INVALIDATING_HANDLE.store(h, Release);
        }
        // INVARIANT: non-null handle for `which`.
        Ok(Self { handle, which })
    }

    /// What was registered.
    pub(crate) fn which(&self) -> Which {
        self.which
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful registration (type invariant) and is
        // unregistered once; not called from a client callback.
        unsafe { ffi::ib_unregister_peer_memory_client(self.handle.as_ptr()) };
        if matches!(self.which, Which::Invalidating(_)) {
            INVALIDATING_HANDLE.store(null_mut(), Release);
        }
    }
}

/// Tells the core that the registration with `core_context` lost its pages; returns once the
/// HCA no longer accesses them.
pub(crate) fn invalidate(core_context: Option<u64>) {
    let h = INVALIDATING_HANDLE.load(Acquire);
    match (INVALIDATE.get(), core_context) {
        (Some(f), Some(cc)) if !h.is_null() => {
            // SAFETY: `f` is the core's invalidate entry point and `h` its handle for our
            // invalidating client, registered until module exit (and module exit cannot run
            // while a registration holds a module reference); `cc` came from get_pages.
            unsafe { f(h, cc) };
        }
        _ => pr_err!("free callback without an invalidating registration; HCA access not revoked\n"),
    }
}

/// acquire: claim (and pin) the range if it is GPU memory of the calling process.
unsafe extern "C" fn acquire<const PERSISTENT: bool>(
    addr: c_ulong,
    size: usize,
    _peer_mem_private_data: *mut c_void,
    _peer_mem_name: *mut c_char,
    client_context: *mut *mut c_void,
) -> c_int {
    if client_context.is_null() {
        return 0;
    }
    // An invalidating registration can only be claimed once its handle is known (a callback
    // needs it); until ib_register_peer_memory_client returned, decline.
    if !PERSISTENT && INVALIDATING_HANDLE.load(Acquire).is_null() {
        return 0;
    }
    match Mr::acquire(addr as u64, size as u64, PERSISTENT) {
        Some(mr) => {
            // SAFETY: the core passes a valid out-pointer.
            unsafe { *client_context = mr.into_foreign() };
            1
        }
        None => 0,
    }
}

/// The errno handed to the core, which passes it on to user space (`ibv_reg_mr`): no
/// kernel-internal code such as NVIDIA's 524 (see [`errno::user_errno`]).
fn core_errno(e: Error) -> c_int {
    -errno::user_errno(-e.to_errno())
}

/// Borrows the registration behind a `client_context`.
///
/// # Safety
///
/// `ctx` came from `acquire` and `release` has not been called for it.
unsafe fn mr<'a>(ctx: *mut c_void) -> Option<<Arc<Mr> as ForeignOwnable>::Borrowed<'a>> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: per the function contract `ctx` is a live `Arc<Mr>` foreign pointer.
    Some(unsafe { <Arc<Mr> as ForeignOwnable>::borrow(ctx) })
}

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
    let Some(mr) = (unsafe { mr(client_context) }) else {
        return EINVAL.to_errno();
    };
    match mr.core_get_pages(addr as u64, size as u64, core_context) {
        Ok(()) => 0,
        Err(e) => core_errno(e),
    }
}

unsafe extern "C" fn dma_map(
    sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    dma_device: *mut bindings::device,
    _dmasync: c_int,
    nmap: *mut c_int,
) -> c_int {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { mr(client_context) }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: the core's sg_head is valid for this call.
    let Some(sgt) = (unsafe { CoreSgt::from_raw(sg_head) }) else {
        return EINVAL.to_errno();
    };
    if nmap.is_null() {
        return EINVAL.to_errno();
    }
    match mr.core_dma_map(&sgt, PciDev::from_dma_device(dma_device)) {
        Ok(n) => {
            // SAFETY: checked non-null; the core passes a valid out-pointer.
            unsafe { *nmap = n as c_int };
            0
        }
        Err(e) => core_errno(e),
    }
}

unsafe extern "C" fn dma_unmap(
    _sg_head: *mut bindings::sg_table,
    client_context: *mut c_void,
    _dma_device: *mut bindings::device,
) -> c_int {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { mr(client_context) }) else {
        return EINVAL.to_errno();
    };
    mr.core_dma_unmap();
    0
}

unsafe extern "C" fn put_pages(sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
    // SAFETY: the core passes the context acquire returned, before release.
    let Some(mr) = (unsafe { mr(client_context) }) else {
        return;
    };
    // SAFETY: the core's sg_head (or null) is valid for this call.
    let sgt = unsafe { CoreSgt::from_raw(sg_head) };
    mr.core_put_pages(sgt.as_ref());
}

unsafe extern "C" fn get_page_size(_client_context: *mut c_void) -> c_ulong {
    crate::stats::STATS.get_page_size_calls.inc();
    // Only 64 KiB page tables are accepted (checked when pinning).
    GPU_PAGE_SIZE as c_ulong
}

unsafe extern "C" fn release(client_context: *mut c_void) {
    if client_context.is_null() {
        return;
    }
    // SAFETY: the core calls release exactly once per successful acquire, with its context;
    // this takes back the reference `acquire` gave away.
    let mr = unsafe { <Arc<Mr> as ForeignOwnable>::from_foreign(client_context) };
    Mr::core_release(mr);
}

unsafe extern "C" fn free_callback(data: *mut c_void) {
    // `data` is a ticket, not a pointer: it is never dereferenced.
    Mr::on_free_callback(data as usize as u64);
}

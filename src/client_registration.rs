// SPDX-License-Identifier: GPL-2.0

//! A client registered with the peer-memory core, and the checks that come before.

use crate::client_tables::{self, ClientKind};
use crate::ffi;
use crate::invalidate;
use core::ptr::{null_mut, NonNull};
use kernel::ffi::c_void;
use kernel::prelude::*;

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
    let other = other.to_str().unwrap_or("nvidia_peermem");
    pr_err!(
        "{} is loaded and serves the nv_mem peer-memory client; two clients of one name cannot \
         both serve registrations: unload it first ('rmmod {}'), or install nvpeer as \
         nvidia-peermem (docs/install.md); not loading {}\n",
        other,
        other,
        own.to_str().unwrap_or("nvpeer")
    );
    Err(EBUSY)
}

/// A registered client; unregistered on drop (which waits until the core released every
/// registration acquired through it).
///
/// # Invariants
///
/// `handle` is the handle `ib_register_peer_memory_client` returned for `kind`'s table.
pub(crate) struct ClientRegistration {
    handle: NonNull<c_void>,
    kind: ClientKind,
}

// SAFETY: the handle is an opaque token the core accepts from any thread.
unsafe impl Send for ClientRegistration {}
// SAFETY: `&ClientRegistration` exposes nothing but plain data.
unsafe impl Sync for ClientRegistration {}

impl ClientRegistration {
    /// Registers `kind` with the core. Errors are logged in one line naming the fix.
    pub(crate) fn register(kind: ClientKind) -> Result<Self> {
        let name = kind.name();
        // SAFETY: a NUL-terminated static string.
        if unsafe {
            ffi::nvpeer_shim_peer_client_visible(client_tables::c_name(kind).as_char_ptr())
        } {
            pr_err!(
                "a peer-memory client named '{}' is already registered (nvidia_peermem or \
                 nv_peer_mem loaded?): unload it first, e.g. 'rmmod nvidia_peermem'\n",
                name
            );
            return Err(EBUSY);
        }
        let slot = if kind.invalidates() {
            invalidate::slot()
        } else {
            null_mut()
        };
        // SAFETY: the table is a `static` that outlives the registration; `slot` is null or
        // module-lifetime storage the core may write during the call.
        let h = unsafe {
            ffi::ib_register_peer_memory_client(&client_tables::table_of(kind).client, slot)
        };
        let Some(handle) = NonNull::new(h) else {
            pr_err!(
                "ib_register_peer_memory_client('{}') failed: the peer-memory core refused the \
                 client (see the ib_core message above; out of memory or a name collision)\n",
                name
            );
            return Err(EINVAL);
        };
        if kind.invalidates() {
            // SAFETY: this thread made the registration call with `slot`, which returned
            // `handle`; one registration per kind and load.
            let published = unsafe { invalidate::publish(handle) };
            if !published {
                pr_err!(
                    "the peer-memory core returned no invalidate entry point for '{}'; use \
                     persistent_api_support=1\n",
                    name
                );
                // SAFETY: `h` was just returned by the core and is not used again.
                unsafe { ffi::ib_unregister_peer_memory_client(h) };
                return Err(EINVAL);
            }
        }
        // INVARIANT: the handle the core returned for `kind`.
        Ok(Self { handle, kind })
    }

    /// What was registered.
    pub(crate) fn kind(&self) -> ClientKind {
        self.kind
    }
}

impl Drop for ClientRegistration {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful registration (type invariant) and is
        // unregistered once; not called from a client callback.
        unsafe { ffi::ib_unregister_peer_memory_client(self.handle.as_ptr()) };
        if self.kind.invalidates() {
            invalidate::withdraw();
        }
    }
}

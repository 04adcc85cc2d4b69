// SPDX-License-Identifier: GPL-2.0

//! One module reference per live registration.
//!
//! A registration can outlive the core's use of it (a pin orphaned to NVIDIA's callback, hazard
//! H5), and NVIDIA then still holds a pointer to our callback code; so `rmmod` must be refused
//! while any registration exists, not only while the core holds contexts.

use crate::ffi;

/// A reference on this module, dropped with the value.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference; `None` while the module is being unloaded.
    pub(crate) fn get() -> Option<Self> {
        // SAFETY: `try_module_get(THIS_MODULE)` in the shim; no preconditions.
        unsafe { ffi::nvpeer_shim_module_get() }.then_some(Self(()))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: balances the successful `try_module_get` of `get`.
        unsafe { ffi::nvpeer_shim_module_put() };
    }
}

// SPDX-License-Identifier: GPL-2.0

//! One module reference per live registration.
//!
//! A registration can outlive the core's use of it (a pin orphaned to NVIDIA's callback, hazard
//! H5), and NVIDIA then still holds a pointer to our callback code; so `rmmod` must be refused
//! while any registration exists, not only while the core holds contexts.

use kernel::bindings;

/// A reference on this module, dropped with the value.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference; `None` while the module is being unloaded.
    pub(crate) fn get() -> Option<Self> {
        // SAFETY: this module's own `struct module`, live while any of its code runs.
        unsafe { bindings::try_module_get(crate::THIS_MODULE.as_ptr()) }.then_some(Self(()))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: balances the successful `try_module_get` of `get`.
        unsafe { bindings::module_put(crate::THIS_MODULE.as_ptr()) };
    }
}

// SPDX-License-Identifier: GPL-2.0

//! Differences between the Rust kernel APIs of the kernels nvpeer builds for, in one place.
//!
//! Each difference is a cfg that `src/compat-probe.sh` sets (through `rustflags-y` in Kbuild)
//! after reading the target kernel's own `rust/kernel` sources, so a new kernel needs a probe
//! there and at most a function here; nothing selects code by kernel version.

use kernel::module_param::ModuleParamAccess;

/// The value of an integer module parameter.
///
/// `ModuleParamAccess::value` returns a reference in some kernels (Linux 7.2) and, for `Copy`
/// types, the value itself in others (7.3, which added `value_ref` for the reference): cfg
/// `nvpeer_param_value_copy`.
#[cfg(nvpeer_param_value_copy)]
pub(crate) fn param_value(param: &ModuleParamAccess<i32>) -> i32 {
    param.value()
}

/// The value of an integer module parameter (see the other definition).
#[cfg(not(nvpeer_param_value_copy))]
pub(crate) fn param_value(param: &ModuleParamAccess<i32>) -> i32 {
    *param.value()
}

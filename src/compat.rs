// SPDX-License-Identifier: GPL-2.0

//! Differences between the Rust kernel APIs of the kernels nvpeer builds for (6.18 LTS to 7.3),
//! in one place.
//!
//! Each difference is a cfg `nvpeer_has_NAME` that `scripts/compat-probe.sh` sets (through
//! `rustflags-y` in Kbuild) when the target kernel's own `rust/` sources have the abstraction;
//! without it, the fallback here is compiled. Nothing selects code by kernel version. The
//! "oldest API" build (`NVPEER_COMPAT=oldest`) sets none, so every fallback is compiled and tested
//! on the kernels the bench can boot.
//!
//! | cfg | first kernel | fallback |
//! |---|---|---|
//! | `nvpeer_has_module_params` | 6.19 | the C shim declares the parameters (`module_param`) |
//! | `nvpeer_has_core_cstr` | 6.19 | [`cstr!`] builds the kernel's own `CStr` from the literal |
//! | `nvpeer_has_pr_once` | 7.0 | [`err_once!`], [`warn_once!`]: a static flag per call site |
//! | `nvpeer_has_atomic_bool` | 7.0 | [`Flag`] over `Atomic<i32>` |
//! | `nvpeer_has_atomic_ptr` | 7.1 | [`AtomicPtr`] over `Atomic<usize>` |
//! | `nvpeer_has_fetch_sub` | 7.1 | [`fetch_sub`] adds the two's complement |
//! | `nvpeer_has_param_value_copy` | 7.3 | `*value()` (the reference) before 7.3 |

use kernel::sync::atomic::{ordering, Atomic};

/// A C string literal (`c"..."`) as the target kernel's `&CStr`.
///
/// From 6.19 the kernel's `CStr` is `core::ffi::CStr`, the literal's own type; before, a newtype
/// built from the literal's bytes (checked at compile time).
#[cfg(nvpeer_has_core_cstr)]
macro_rules! cstr {
    ($lit:literal) => {
        $lit
    };
}

/// A C string literal (`c"..."`) as the target kernel's `&CStr` (see the other definition).
#[cfg(not(nvpeer_has_core_cstr))]
macro_rules! cstr {
    ($lit:literal) => {{
        const C: &::kernel::str::CStr =
            match ::kernel::str::CStr::from_bytes_with_nul($lit.to_bytes_with_nul()) {
                Ok(c) => c,
                // (a const: an interior NUL fails the build, never the running module)
                Err(_) => ::kernel::build_error!("a C string literal with an interior NUL"),
            };
        C
    }};
}

/// `pr_err!` once per call site (the kernel's `pr_err_once!` from 7.0).
#[cfg(nvpeer_has_pr_once)]
macro_rules! err_once {
    ($($arg:tt)*) => {
        ::kernel::pr_err_once!($($arg)*)
    };
}

/// `pr_err!` once per call site (see the other definition).
#[cfg(not(nvpeer_has_pr_once))]
macro_rules! err_once {
    ($($arg:tt)*) => {
        print_once!(pr_err, $($arg)*)
    };
}

/// `pr_warn!` once per call site (the kernel's `pr_warn_once!` from 7.0).
#[cfg(nvpeer_has_pr_once)]
macro_rules! warn_once {
    ($($arg:tt)*) => {
        ::kernel::pr_warn_once!($($arg)*)
    };
}

/// `pr_warn!` once per call site (see the other definition).
#[cfg(not(nvpeer_has_pr_once))]
macro_rules! warn_once {
    ($($arg:tt)*) => {
        print_once!(pr_warn, $($arg)*)
    };
}

/// `kernel::$print!` once per call site: a static flag of its own (the `*_once!` fallbacks).
#[cfg(not(nvpeer_has_pr_once))]
macro_rules! print_once {
    ($print:ident, $($arg:tt)*) => {{
        // (in .data..once, as the kernel's own once-flags: `clear_warn_once` resets them)
        #[link_section = ".data..once"]
        static ONCE: $crate::compat::Once = $crate::compat::Once::new();
        if ONCE.first() {
            ::kernel::$print!($($arg)*);
        }
    }};
}

/// Whether a call site already printed (the `*_once!` fallbacks).
#[cfg(not(nvpeer_has_pr_once))]
pub(crate) struct Once(Atomic<i32>);

#[cfg(not(nvpeer_has_pr_once))]
impl Once {
    /// Not printed yet.
    pub(crate) const fn new() -> Self {
        Self(Atomic::new(0))
    }

    /// True for the first caller only (after the first, a plain load answers).
    pub(crate) fn first(&self) -> bool {
        use kernel::sync::atomic::Relaxed;
        // ORDERING: a flag with no data behind it; Relaxed, as the kernel's DO_ONCE_LITE.
        self.0.load(Relaxed) == 0 && self.0.xchg(1, Relaxed) == 0
    }
}

/// An atomic boolean.
#[cfg(nvpeer_has_atomic_bool)]
pub(crate) struct Flag(Atomic<bool>);

/// An atomic boolean (0 or 1 in an `Atomic<i32>`: the kernel's `Atomic<bool>` is from 7.0).
#[cfg(not(nvpeer_has_atomic_bool))]
pub(crate) struct Flag(Atomic<i32>);

impl Flag {
    /// A flag holding `v`.
    pub(crate) const fn new(v: bool) -> Self {
        #[cfg(nvpeer_has_atomic_bool)]
        let r = Self(Atomic::new(v));
        #[cfg(not(nvpeer_has_atomic_bool))]
        let r = Self(Atomic::new(v as i32));
        r
    }

    /// The value.
    pub(crate) fn load<O: ordering::AcquireOrRelaxed>(&self, o: O) -> bool {
        #[cfg(nvpeer_has_atomic_bool)]
        let v = self.0.load(o);
        #[cfg(not(nvpeer_has_atomic_bool))]
        let v = self.0.load(o) != 0;
        v
    }

    /// Sets the value.
    pub(crate) fn store<O: ordering::ReleaseOrRelaxed>(&self, v: bool, o: O) {
        #[cfg(nvpeer_has_atomic_bool)]
        self.0.store(v, o);
        #[cfg(not(nvpeer_has_atomic_bool))]
        self.0.store(i32::from(v), o);
    }
}

/// An atomic raw pointer, never dereferenced here (the kernel's `Atomic<*mut T>` from 7.1, else
/// the address in an `Atomic<usize>`).
pub(crate) struct AtomicPtr<T> {
    #[cfg(nvpeer_has_atomic_ptr)]
    inner: Atomic<*mut T>,
    #[cfg(not(nvpeer_has_atomic_ptr))]
    inner: Atomic<usize>,
    // (`fn() -> *mut T`: the type without its auto traits, so that the fallback is Send and
    // Sync exactly as the kernel's `Atomic<*mut T>`)
    #[cfg(not(nvpeer_has_atomic_ptr))]
    _type: core::marker::PhantomData<fn() -> *mut T>,
}

impl<T> AtomicPtr<T> {
    /// A null pointer.
    pub(crate) const fn null() -> Self {
        Self {
            #[cfg(nvpeer_has_atomic_ptr)]
            inner: Atomic::new(core::ptr::null_mut()),
            #[cfg(not(nvpeer_has_atomic_ptr))]
            inner: Atomic::new(0),
            #[cfg(not(nvpeer_has_atomic_ptr))]
            _type: core::marker::PhantomData,
        }
    }

    /// The pointer.
    pub(crate) fn load<O: ordering::AcquireOrRelaxed>(&self, o: O) -> *mut T {
        #[cfg(nvpeer_has_atomic_ptr)]
        let p = self.inner.load(o);
        #[cfg(not(nvpeer_has_atomic_ptr))]
        let p = self.inner.load(o) as *mut T;
        p
    }

    /// Sets the pointer.
    pub(crate) fn store<O: ordering::ReleaseOrRelaxed>(&self, p: *mut T, o: O) {
        #[cfg(nvpeer_has_atomic_ptr)]
        self.inner.store(p, o);
        #[cfg(not(nvpeer_has_atomic_ptr))]
        self.inner.store(p as usize, o);
    }
}

/// `a.fetch_sub(n, o)`: subtracts `n` (wrapping), returns the previous value.
pub(crate) fn fetch_sub<O: ordering::Ordering>(a: &Atomic<u64>, n: u64, o: O) -> u64 {
    #[cfg(nvpeer_has_fetch_sub)]
    let v = a.fetch_sub(n, o);
    #[cfg(not(nvpeer_has_fetch_sub))]
    let v = a.fetch_add(n.wrapping_neg(), o);
    v
}

/// nvpeer's module parameters: (`persistent_api_support`, `peerdirect_support`).
#[cfg(nvpeer_has_module_params)]
pub(crate) fn params() -> (i32, i32) {
    use crate::module_parameters::{peerdirect_support, persistent_api_support};
    (
        param_value(&persistent_api_support),
        param_value(&peerdirect_support),
    )
}

/// nvpeer's module parameters, declared by the C shim where `module!` takes none (see the other
/// definition).
#[cfg(not(nvpeer_has_module_params))]
pub(crate) fn params() -> (i32, i32) {
    (
        crate::ffi::shim_param(crate::ffi::Param::PersistentApiSupport),
        crate::ffi::shim_param(crate::ffi::Param::PeerdirectSupport),
    )
}

/// The value of an integer module parameter: by copy from 7.3 (`value_ref` gives the
/// reference there), by reference before.
#[cfg(all(nvpeer_has_module_params, nvpeer_has_param_value_copy))]
fn param_value(param: &kernel::module_param::ModuleParamAccess<i32>) -> i32 {
    param.value()
}

/// The value of an integer module parameter (see the other definition).
#[cfg(all(nvpeer_has_module_params, not(nvpeer_has_param_value_copy)))]
fn param_value(param: &kernel::module_param::ModuleParamAccess<i32>) -> i32 {
    *param.value()
}

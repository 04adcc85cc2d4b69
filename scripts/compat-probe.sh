#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# compat-probe.sh SRCTREE rust|c: the flags selecting nvpeer's side of each Rust kernel API
# difference between the kernels it builds for (6.18 LTS to 7.3; src/compat.rs has both sides of
# each), read from the target kernel's own rust/ sources (Kbuild passes $(srctree)), never from
# its version number. `rust` prints `--cfg nvpeer_has_NAME` for each abstraction the target has
# (rustflags), `c` prints `-DNVPEER_HAS_NAME` for the same (ccflags: the C shim provides what an
# older kernel lacks, and records the sides taken in modinfo's `compat` tag). (No --check-cfg: it
# would switch on rustc's cfg checking for the kernel's own cfgs too, which kbuild does not
# declare.)
#
# NVPEER_COMPAT=oldest reports none of them: every fallback is compiled, the "oldest API" build
# that make check builds and tests on the kernels the bench has (7.2, 7.3), since older kernels
# cannot be booted here.
#
#   NAME              first in  the target has it when
#   module_params     6.19      rust/kernel/module_param.rs defines ModuleParamAccess
#   core_cstr         6.19      rust/ffi.rs re-exports core::ffi::CStr (c"..." is a &CStr)
#   pr_once           7.0       rust/kernel/print.rs defines pr_warn_once!
#   atomic_bool       7.0       Atomic<bool> (rust/kernel/sync/atomic/predefine.rs)
#   atomic_ptr        7.1       Atomic<*mut T> (same file)
#   fetch_sub         7.1       Atomic::fetch_sub (rust/kernel/sync/atomic.rs)
#   param_value_copy  7.3       ModuleParamAccess has value_ref() (value() returns T from then)
# A new difference is one line here, one in NAMES below and its two sides in src/compat.rs.
srctree=$1
mode=${2:-rust}
rust=$srctree/rust
NAMES="module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub param_value_copy"

case $mode in rust | c) ;; *) echo "compat-probe: mode must be rust or c" >&2; exit 2 ;; esac
if [ ! -f "$rust/kernel/lib.rs" ]; then
    echo "compat-probe: no $rust/kernel/lib.rs: the target kernel's Rust sources are needed" >&2
    exit 1
fi

has() { # NAME: whether the target kernel has abstraction NAME
    case $1 in
    module_params) grep -qs 'pub struct ModuleParamAccess' "$rust/kernel/module_param.rs" ;;
    core_cstr) grep -qsE '^pub use core::ffi::CStr;' "$rust/ffi.rs" ;;
    pr_once) grep -qs 'macro_rules! pr_warn_once' "$rust/kernel/print.rs" ;;
    atomic_bool) grep -qsE 'AtomicType for bool\b' "$rust/kernel/sync/atomic/predefine.rs" ;;
    atomic_ptr) grep -qsE 'AtomicType for \*mut T\b' "$rust/kernel/sync/atomic/predefine.rs" ;;
    fetch_sub) grep -qs 'pub fn fetch_sub' "$rust/kernel/sync/atomic.rs" ;;
    param_value_copy) grep -qs 'pub fn value_ref' "$rust/kernel/module_param.rs" ;;
    *) echo "compat-probe: unknown abstraction $1" >&2; exit 2 ;;
    esac
}

out=""
for name in $NAMES; do
    [ "${NVPEER_COMPAT:-}" = oldest ] && continue
    has "$name" || continue
    case $mode in
    rust) out="$out --cfg nvpeer_has_$name" ;;
    c) out="$out -DNVPEER_HAS_$(echo "$name" | tr a-z A-Z)" ;;
    *) echo "compat-probe: mode must be rust or c" >&2; exit 2 ;;
    esac
done
echo "$out"

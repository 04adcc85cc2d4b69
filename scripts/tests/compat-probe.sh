#!/bin/bash
# Tests of scripts/compat-probe.sh against the facts of each kernel nvpeer builds for: a fixture rust/
# tree per version, 6.18 LTS to 7.3, holding the lines the probe looks for as that version's
# sources have them (docs/compatibility.md, "Rust kernel API": which abstraction arrived when),
# and the probe's cfgs for each; then the real trees the bench has (7.2, and 7.3 where fetched).
# Run by make check (preflight tests stage) in the toolchain root; by hand:
#   testbench/tb chroot bash /src/scripts/tests/compat-probe.sh
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
probe=$here/scripts/compat-probe.sh
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pass=0 failed=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1: $2"; }

# tree VERSION: a fixture rust/ tree of that version under $t/VERSION (prints the srctree).
tree() {
    local v=$1 r=$t/$1/rust
    mkdir -p "$r/kernel/sync/atomic"
    echo '//! The kernel crate.' >"$r/kernel/lib.rs"
    # Every version has these files; what they hold grows.
    echo 'pub type c_int = i32;' >"$r/ffi.rs"
    echo 'macro_rules! pr_warn (' >"$r/kernel/print.rs"
    printf 'unsafe impl super::AtomicType for i32 {\nunsafe impl super::AtomicType for i64 {\nunsafe impl super::AtomicType for u64 {\n' \
        >"$r/kernel/sync/atomic/predefine.rs"
    echo '    pub fn fetch_add<Rhs, Ordering: ordering::Ordering>(&self, v: Rhs, _: Ordering) -> T' >"$r/kernel/sync/atomic.rs"
    if ge "$v" 6.19; then
        printf 'pub struct ModuleParamAccess<T> {\n    pub fn value(&self) -> &T {\n' >"$r/kernel/module_param.rs"
        echo 'pub use core::ffi::CStr;' >>"$r/ffi.rs"
    fi
    if ge "$v" 7.0; then
        echo 'macro_rules! pr_warn_once (' >>"$r/kernel/print.rs"
        echo 'unsafe impl super::AtomicType for bool {' >>"$r/kernel/sync/atomic/predefine.rs"
    fi
    if ge "$v" 7.1; then
        echo 'unsafe impl<T: Sized> super::AtomicType for *mut T {' >>"$r/kernel/sync/atomic/predefine.rs"
        echo '    pub fn fetch_sub<Rhs, Ordering: ordering::Ordering>(&self, v: Rhs, _: Ordering) -> T' >>"$r/kernel/sync/atomic.rs"
    fi
    if ge "$v" 7.3; then
        printf 'pub struct ModuleParamAccess<T> {\n    pub fn value(&self) -> T {\n    pub fn value_ref(&self) -> &T {\n' >"$r/kernel/module_param.rs"
    fi
    echo "$t/$v"
}
# ge A B: version A >= version B.
ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }

# expect NAME SRCTREE ENTRIES...: the probe's rust and c output name exactly ENTRIES; the oldest-API
# build (NVPEER_COMPAT=oldest) names none.
expect() {
    local name=$1 src=$2 want got c want_c e
    shift 2
    want="" want_c=""
    for e in "$@"; do want="$want --cfg nvpeer_has_$e"; want_c="$want_c -DNVPEER_HAS_$(echo "$e" | tr a-z A-Z)"; done
    got=$(sh "$probe" "$src" rust) || { bad "$name" "the probe failed"; return; }
    c=$(sh "$probe" "$src" c) || { bad "$name" "the probe failed (c)"; return; }
    if [ "$got" = "$want" ] && [ "$c" = "$want_c" ]; then ok "$name:${want:- none}"
    else bad "$name" "got '$got' / '$c', want '$want' / '$want_c'"; fi
    got=$(NVPEER_COMPAT=oldest sh "$probe" "$src" rust) || { bad "${name}[oldest]" "the probe failed"; return; }
    [ -z "$got" ] || bad "${name}[oldest]" "NVPEER_COMPAT=oldest still selects '$got'"
}

expect "6.18" "$(tree 6.18)"
expect "6.19" "$(tree 6.19)" module_params core_cstr
expect "7.0" "$(tree 7.0)" module_params core_cstr pr_once atomic_bool
expect "7.1" "$(tree 7.1)" module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub
expect "7.2" "$(tree 7.2)" module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub
expect "7.3" "$(tree 7.3)" module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub param_value_copy

# A tree without the Rust sources: refused (the preflight says so with one line).
mkdir -p "$t/headers-only/rust"
if sh "$probe" "$t/headers-only" rust 2>"$t/err"; then bad "no-rust-sources" "the probe passed"
else grep -q "rust/kernel/lib.rs" "$t/err" && ok "no-rust-sources: refused" || bad "no-rust-sources" "$(cat "$t/err")"; fi

# Kbuild's reading of NVPEER_COMPAT: the oldest-API build only from the make command line (also
# through a parent make, as kbuild's sub-makes get it), with a warning line; from the environment
# ignored, with a warning line; any other value refused. Kbuild is read as kbuild's build pass
# reads it (a scripts/Makefile.build that includes it), against the 7.3 fixture tree.
kb=$t/kbuild/scripts
mkdir -p "$kb"
printf 'include $(src)/Kbuild\nshow:\n\t@echo "rust=$(rustflags-y)"\n' >"$kb/Makefile.build"
printf 'all:\n\t@$(MAKE) -s -f %s show\n' "$kb/Makefile.build" >"$t/kbuild/outer.mk"
kb73=$(tree 7.3)
all73="--cfg nvpeer_has_module_params --cfg nvpeer_has_core_cstr --cfg nvpeer_has_pr_once --cfg nvpeer_has_atomic_bool --cfg nvpeer_has_atomic_ptr --cfg nvpeer_has_fetch_sub --cfg nvpeer_has_param_value_copy"
# kbuild_case NAME WANT_RC WANT_RUSTFLAGS WANT_LINE [ENV...] -- [MAKE ARGS...]: the build pass's
# rustflags (WANT_RUSTFLAGS "-" when it fails) and a warning/error line matching WANT_LINE
# ("" for none from nvpeer).
kbuild_case() {
    local name=$1 want_rc=$2 want_flags=$3 want_line=$4 rc=0 out env=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    out=$(env -u NVPEER_COMPAT "${env[@]}" make -s --no-print-directory src="$here" srctree="$kb73" NVPEER_BENCH=1 \
        "$@" 2>"$t/kbuild/err") || rc=$?
    local flags
    flags=$(echo "$out" | sed -n 's/^rust= *//p' | tr -s ' ' | sed 's/ *$//')
    if [ "$rc" != "$want_rc" ]; then bad "$name" "exit $rc, want $want_rc: $(cat "$t/kbuild/err")"; return; fi
    if [ "$want_flags" != - ] && [ "$flags" != "$want_flags" ]; then bad "$name" "rustflags '$flags', want '$want_flags'"; return; fi
    if [ -n "$want_line" ]; then
        grep -q "$want_line" "$t/kbuild/err" || { bad "$name" "no line '$want_line' in: $(cat "$t/kbuild/err")"; return; }
    elif grep -q 'nvpeer:' "$t/kbuild/err"; then
        bad "$name" "unexpected line: $(cat "$t/kbuild/err")"; return
    fi
    ok "$name"
}
kbuild_case "kbuild[probed]" 0 "$all73" "" -- -f "$kb/Makefile.build" show
kbuild_case "kbuild[oldest: command line]" 0 "" "nvpeer: NVPEER_COMPAT=oldest: the oldest-API build" -- \
    -f "$kb/Makefile.build" NVPEER_COMPAT=oldest show
kbuild_case "kbuild[oldest: command line, sub-make]" 0 "" "nvpeer: NVPEER_COMPAT=oldest: the oldest-API build" -- \
    -f "$t/kbuild/outer.mk" NVPEER_COMPAT=oldest
kbuild_case "kbuild[oldest: environment ignored]" 0 "$all73" "comes from the environment and is ignored" \
    NVPEER_COMPAT=oldest -- -f "$kb/Makefile.build" show
kbuild_case "kbuild[oldest: environment, sub-make]" 0 "$all73" "comes from the environment and is ignored" \
    NVPEER_COMPAT=oldest -- -f "$t/kbuild/outer.mk"
kbuild_case "kbuild[bad value refused]" 2 - "nvpeer: NVPEER_COMPAT=newest: the only value is oldest" -- \
    -f "$kb/Makefile.build" NVPEER_COMPAT=newest show
# NVPEER_BENCH: the bench's headers and symbols only for the value 1; any other value is a node's
# build, which needs the real headers' locations (the preflight passes them) and stops without.
kbuild_case "kbuild[NVPEER_BENCH=0: a node's build, OFED_DIR required]" 2 - "nvpeer: OFED_DIR is not set" -- \
    -f "$kb/Makefile.build" NVPEER_BENCH=0 show
kbuild_case "kbuild[NVPEER_BENCH=yes: a node's build, OFED_DIR required]" 2 - "nvpeer: OFED_DIR is not set" -- \
    -f "$kb/Makefile.build" NVPEER_BENCH=yes show

# The real trees: the bench kernel's 7.2 source (/kernel/src in the toolchain root) and, where a
# run has fetched it, Debian's 7.3 (its stock build dir: testbench/stock-kernels.list).
if [ -f /kernel/src/rust/kernel/lib.rs ]; then
    expect "7.2[real: /kernel/src]" /kernel/src module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub
fi
for d in ${NVPEER_73_SRC:-}; do
    if [ -f "$d/rust/kernel/lib.rs" ]; then
        expect "7.3[real: $d]" "$d" module_params core_cstr pr_once atomic_bool atomic_ptr fetch_sub param_value_copy
    else
        bad "7.3[real: $d]" "NVPEER_73_SRC names a tree without rust/kernel/lib.rs"
    fi
done

echo "compat-probe tests: $pass passed, $failed failed"
[ $failed = 0 ]

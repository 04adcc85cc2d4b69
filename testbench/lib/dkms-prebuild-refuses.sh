# shellcheck shell=bash
# dkms_prebuild_refuses VERSION SOURCETREE: with nvpeer added to DKMS, a kernel with CONFIG_RUST but
# without its Rust artifacts makes the PRE_BUILD preflight stop the build with one line; a kernel
# without CONFIG_RUST is skipped by BUILD_EXCLUSIVE_CONFIG (exit 77, what `dkms autoinstall`
# expects). The fake kernels go under /lib/modules, which must be a scratch tmpfs. Sourced by
# 50-dkms (in the guest) and testbench/lib/dkms-build.sh (in the toolchain root): it needs no
# booted kernel.
dkms_prebuild_refuses() {
    local ver=$1 srctree=$2 k=9.9.9-norust rc=0
    local log=/var/lib/dkms/nvpeer/$ver/build/make.log kd=/lib/modules/9.9.9-norust/build
    mkdir -p "$kd/include/config" || return 1
    printf 'CONFIG_RUST=y\nCONFIG_INFINIBAND=y\n' >"$kd/.config"
    echo "$k" >"$kd/include/config/kernel.release"
    dkms --sourcetree "$srctree" build -m nvpeer -v "$ver" -k "$k" >/tmp/dkms-norust.out 2>&1 || rc=$?
    cat /tmp/dkms-norust.out
    [ "$rc" != 0 ] || { echo "dkms built nvpeer for a kernel without Rust artifacts"; return 1; }
    grep "nvpeer preflight:" "$log" || { echo "no preflight line in $log"; return 1; }
    grep -q "lacks the Rust artifacts" "$log" || return 1
    printf 'CONFIG_INFINIBAND=y\n' >"$kd/.config"
    rc=0
    dkms --sourcetree "$srctree" build -m nvpeer -v "$ver" -k "$k" >/dev/null 2>&1 || rc=$?
    rm -rf "/lib/modules/$k"
    [ "$rc" = 77 ] || { echo "dkms build for a kernel without CONFIG_RUST: exit $rc, want 77"; return 1; }
    echo "kernel without CONFIG_RUST skipped (exit 77)"
}

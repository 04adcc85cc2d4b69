#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# nvpeer build preflight. Checks, in order, everything the module build needs and stops at the
# first missing prerequisite with ONE line saying what is missing and how to fix it.
#
#   preflight.sh               check and print "nvpeer preflight: ok (...)"
#   preflight.sh --make-args   check, then print the arguments for 'make -C $KDIR M=...'
#
# Inputs (environment): KDIR, OFED_DIR, NVIDIA_SRC, OFED_SYMVERS, NVIDIA_SYMVERS, RUSTC,
# BENCH=1 (build against the test bench's emulator headers and symbols).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-check}
KDIR=${KDIR:-/lib/modules/$(uname -r)/build}
RUSTC=${RUSTC:-rustc}

fail() { echo "nvpeer preflight: $*" >&2; exit 1; }

# ---- kernel tree --------------------------------------------------------------------------
[ -f "$KDIR/.config" ] ||
    fail "no kernel build tree at KDIR=$KDIR: install the headers of the target kernel (e.g. linux-headers-$(uname -r)) or pass KDIR=<build dir>"
kcfg() { grep -q "^$1=y" "$KDIR/.config"; }
kver=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || echo unknown)
kcfg CONFIG_RUST ||
    fail "kernel $kver at $KDIR is built without CONFIG_RUST=y: nvpeer is a Rust module and needs a Rust-enabled kernel"

# ---- Rust artifacts (not shipped by most distro headers packages) -------------------------
missing=""
for f in rust/libcore.rmeta rust/libkernel.rmeta rust/libbindings.rmeta rust/libpin_init.rmeta \
         rust/libcompiler_builtins.rmeta rust/libffi.rmeta rust/libmacros.so scripts/target.json; do
    [ -e "$KDIR/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] ||
    fail "kernel $kver has CONFIG_RUST but its build tree lacks the Rust artifacts ($missing ): install linux-lib-rust-$kver (Ubuntu) or regenerate them with 'make modules_prepare' in the matching kernel source (docs/install.md)"

# ---- rustc must be the one that built the kernel (version read from libcore.rmeta) --------
len=$(od -An -tu1 -j16 -N1 "$KDIR/rust/libcore.rmeta" | tr -d ' ')
kernel_rustc=$(dd if="$KDIR/rust/libcore.rmeta" bs=1 skip=17 count="${len:-0}" 2>/dev/null)
case $kernel_rustc in rustc\ *) ;; *) kernel_rustc=$(grep -a -o -m1 'rustc [0-9][0-9.]* ([^)]*)' "$KDIR/rust/libcore.rmeta" | head -n1) ;; esac
command -v "$RUSTC" >/dev/null 2>&1 ||
    fail "no rustc in PATH: install '$kernel_rustc' (the compiler that built kernel $kver) or pass RUSTC="
our_rustc=$("$RUSTC" --version 2>/dev/null | head -n1)
[ "${our_rustc%% (*}" = "${kernel_rustc%% (*}" ] ||
    fail "rustc mismatch: the kernel's Rust crates were built by '$kernel_rustc' but '$RUSTC' is '$our_rustc' (E0514 otherwise): install that exact version or pass RUSTC=<path>"

modversions=n
kcfg CONFIG_MODVERSIONS && modversions=y
mkdir -p "$root/build"

# ---- peer-memory core (MLNX_OFED / DOCA-OFED ib_core) -------------------------------------
symvers_has() { [ -f "$1" ] && grep -q "[[:space:]]$2[[:space:]]" "$1"; }
ofed_syms=""
if [ "${BENCH:-0}" = 1 ]; then
    OFED_DIR=""
    NVIDIA_SRC=""
    for d in peer_mem nvp2p; do
        [ -f "$root/testbench/emu/$d/Module.symvers" ] ||
            fail "BENCH=1 but testbench/emu/$d is not built: run 'testbench/tb kbuild testbench/emu/$d' first"
    done
    extra="$root/testbench/emu/peer_mem/Module.symvers $root/testbench/emu/nvp2p/Module.symvers"
else
    if [ -z "${OFED_DIR:-}" ]; then
        arch=$(uname -m)
        for d in /usr/src/ofa_kernel/"$arch"/"$kver" /usr/src/ofa_kernel/"$kver" /usr/src/ofa_kernel/default \
                 /usr/src/ofa_kernel-dkms /var/lib/dkms/mlnx-ofed-kernel/*/build; do
            if [ -f "$d/include/rdma/peer_mem.h" ]; then OFED_DIR=$d; break; fi
        done
    fi
    if [ -z "${OFED_DIR:-}" ] && { [ -f "$KDIR/include/rdma/peer_mem.h" ] || [ -f "$KDIR/source/include/rdma/peer_mem.h" ]; } &&
        symvers_has "$KDIR/Module.symvers" ib_register_peer_memory_client; then
        OFED_DIR=kernel   # the peer-memory core is part of this kernel (e.g. Ubuntu 20.04)
    fi
    [ -n "${OFED_DIR:-}" ] ||
        fail "no OFED peer-memory API (rdma/peer_mem.h, ib_register_peer_memory_client): install MLNX_OFED / DOCA-OFED (mlnx-ofed-kernel-dkms) or pass OFED_DIR=<dir with include/rdma/peer_mem.h>; upstream RDMA has no peer-memory core"
    if [ "$OFED_DIR" != kernel ]; then
        [ -f "$OFED_DIR/include/rdma/peer_mem.h" ] || fail "OFED_DIR=$OFED_DIR has no include/rdma/peer_mem.h"
        OFED_SYMVERS=${OFED_SYMVERS:-$OFED_DIR/Module.symvers}
        if symvers_has "$OFED_SYMVERS" ib_register_peer_memory_client; then
            ofed_syms=$OFED_SYMVERS
        elif [ $modversions = n ]; then
            ofed_syms=generate
        else
            fail "kernel has MODVERSIONS but $OFED_SYMVERS does not export ib_register_peer_memory_client: rebuild/reinstall the OFED kernel modules for $kver or pass OFED_SYMVERS="
        fi
    fi

    # ---- NVIDIA open kernel modules (nv-p2p.h + Module.symvers) ---------------------------
    if [ -z "${NVIDIA_SRC:-}" ]; then
        want=$(modinfo -F version nvidia 2>/dev/null || true)
        for d in ${want:+/usr/src/nvidia-$want} $(ls -d /usr/src/nvidia-* 2>/dev/null | sort -rV); do
            if [ -f "$d/nvidia/nv-p2p.h" ]; then NVIDIA_SRC=$d; break; fi
        done
    fi
    [ -n "${NVIDIA_SRC:-}" ] && [ -f "$NVIDIA_SRC/nvidia/nv-p2p.h" ] ||
        fail "no NVIDIA driver source with nvidia/nv-p2p.h: install the open kernel modules' source (e.g. nvidia-kernel-open-dkms / nvidia-open) or pass NVIDIA_SRC=<dir with nvidia/nv-p2p.h>"
    NVIDIA_SYMVERS=${NVIDIA_SYMVERS:-$NVIDIA_SRC/Module.symvers}
    nv_syms=""
    if symvers_has "$NVIDIA_SYMVERS" nvidia_p2p_get_pages; then
        nv_syms=$NVIDIA_SYMVERS
    elif [ $modversions = n ]; then
        nv_syms=generate
    else
        fail "kernel has MODVERSIONS but no Module.symvers with nvidia_p2p_get_pages at $NVIDIA_SYMVERS: build the NVIDIA modules for $kver first or pass NVIDIA_SYMVERS="
    fi

    gen=""
    extra=""
    [ "$ofed_syms" = generate ] && gen="$gen ofed"
    [ -n "$ofed_syms" ] && [ "$ofed_syms" != generate ] && extra="$extra $ofed_syms"
    [ "$nv_syms" = generate ] && gen="$gen nvidia"
    [ "$nv_syms" != generate ] && extra="$extra $nv_syms"
    if [ -n "$gen" ]; then
        # shellcheck disable=SC2086
        "$root/src/gen-symvers.sh" "$root/build/generated.symvers" $gen
        extra="$extra $root/build/generated.symvers"
    fi
fi

llvm=""
kcfg CONFIG_CC_IS_CLANG && llvm="LLVM=1"

case $mode in
--make-args)
    printf '%s OFED_DIR=%q NVIDIA_SRC=%q KBUILD_EXTRA_SYMBOLS=%q\n' "$llvm" "${OFED_DIR:-}" "${NVIDIA_SRC:-}" "${extra# }" ;;
*)
    echo "nvpeer preflight: ok (kernel $kver, $kernel_rustc, OFED ${OFED_DIR:-bench emulator}, NVIDIA ${NVIDIA_SRC:-bench emulator}, MODVERSIONS=$modversions)" ;;
esac

#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# nvpeer build preflight. Checks, in order, everything the module build needs and stops at the
# first missing prerequisite with ONE line saying what is missing and how to fix it.
#
#   preflight.sh               check and print "nvpeer preflight: ok (...)"
#   preflight.sh --make-args   check, then print the arguments for 'make -C $KDIR M=...'
#
# Inputs (environment): KDIR, OFED_DIR, NVIDIA_SRC, OFED_SYMVERS, NVIDIA_SYMVERS, RUSTC (default:
# found, see below), BENCH=1 (build against the test bench's emulator headers and symbols: the only
# way to get them), NVPEER_SYSROOT (a root other than / to search for OFED, NVIDIA and installed
# modules; for tests).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-check}
KDIR=${KDIR:-/lib/modules/$(uname -r)/build}
sysroot=${NVPEER_SYSROOT:-}

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
# The kernel's Rust sources: scripts/compat-probe.sh reads them (through Kbuild's srctree: the build
# tree's `source` link where there is one) to pick nvpeer's side of each Rust API difference.
ksrc=$KDIR
[ -d "$KDIR/source" ] && ksrc=$KDIR/source
[ -f "$ksrc/rust/kernel/lib.rs" ] ||
    fail "kernel $kver's tree at $ksrc has no Rust sources (rust/kernel/lib.rs), which nvpeer reads to match the kernel's Rust API (scripts/compat-probe.sh): install the kernel's full source tree or headers that carry rust/ (docs/compatibility.md)"

# ---- rustc must be the one that built the kernel --------------------------------------------
# The kernel's .rmeta files load only in the exact compiler that wrote them (E0514 otherwise). Its
# version: the build tree's auto.conf (CONFIG_RUSTC_VERSION_TEXT), else libcore.rmeta's header.
# Not given RUSTC=, the preflight looks for that version where distributions and rustup put
# versioned compilers, so DKMS autoinstall after a kernel upgrade finds the new kernel's compiler
# (or says which one to install). bindgen is not used by a module build: the kernel's bindings
# ship generated in its build tree.
kernel_rustc=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$KDIR/include/config/auto.conf" 2>/dev/null | head -n1)
if [ -z "$kernel_rustc" ]; then
    len=$(od -An -tu1 -j16 -N1 "$KDIR/rust/libcore.rmeta" | tr -d ' ')
    kernel_rustc=$(dd if="$KDIR/rust/libcore.rmeta" bs=1 skip=17 count="${len:-0}" 2>/dev/null)
    case $kernel_rustc in rustc\ *) ;; *) kernel_rustc=$(grep -a -o -m1 'rustc [0-9][0-9.]* ([^)]*)' "$KDIR/rust/libcore.rmeta" | head -n1) ;; esac
fi
kernel_rustc_ver=${kernel_rustc#rustc }; kernel_rustc_ver=${kernel_rustc_ver%% *}
[ -n "$kernel_rustc_ver" ] ||
    fail "cannot tell which rustc built kernel $kver (no CONFIG_RUSTC_VERSION_TEXT in $KDIR/include/config/auto.conf, unreadable rust/libcore.rmeta): regenerate the build tree with 'make modules_prepare'"
rustc_ver() { "$1" --version 2>/dev/null | head -n1 | awk '{ print $2 }'; }
if [ -n "${RUSTC:-}" ]; then
    command -v "$RUSTC" >/dev/null 2>&1 ||
        fail "RUSTC=$RUSTC not found: install '$kernel_rustc' (the compiler that built kernel $kver) or fix RUSTC="
    [ "$(rustc_ver "$RUSTC")" = "$kernel_rustc_ver" ] ||
        fail "rustc mismatch: kernel $kver was built by '$kernel_rustc' but RUSTC=$RUSTC is '$("$RUSTC" --version 2>/dev/null | head -n1)' (E0514 otherwise): point RUSTC= at rustc $kernel_rustc_ver"
else
    mm=${kernel_rustc_ver%.*}
    tried=""
    for c in rustc "rustc-$mm" "$sysroot/usr/lib/rust-$mm/bin/rustc" \
             "${HOME:-/root}"/.rustup/toolchains/"$kernel_rustc_ver"-*/bin/rustc \
             /root/.rustup/toolchains/"$kernel_rustc_ver"-*/bin/rustc \
             "${HOME:-/root}"/.rustup/toolchains/"$mm"-*/bin/rustc; do
        p=$(command -v "$c" 2>/dev/null) || continue
        v=$(rustc_ver "$p")
        tried="$tried $p($v)"
        if [ "$v" = "$kernel_rustc_ver" ]; then RUSTC=$p; break; fi
    done
    [ -n "${RUSTC:-}" ] ||
        fail "no rustc $kernel_rustc_ver, the compiler that built kernel $kver (found:${tried:- none}): install it (Debian/Ubuntu: rustc-$mm; rustup: 'rustup toolchain install $kernel_rustc_ver') or set RUSTC=<path> (DKMS: NVPEER_MAKE_ARGS=\"RUSTC=<path>\" in /etc/dkms/nvpeer.conf)"
fi

modversions=n
kcfg CONFIG_MODVERSIONS && modversions=y
mkdir -p "$root/build"

# ---- peer-memory core (MLNX_OFED / DOCA-OFED) -----------------------------------------------
# The module that exports the API is found by the symbol, whatever it is named: ib_uverbs in OFED
# 24.07 and later (DOCA-OFED 3.x: mlnx-ofa_kernel's drivers/infiniband/core/Makefile links
# peer_mem.o into ib_uverbs), ib_core before, another name in other vendors' cores.
symvers_has() { [ -f "$1" ] && grep -q "[[:space:]]$2[[:space:]]" "$1"; }
# installed_ko NAME: the file of module NAME installed for the target kernel (not the running one).
installed_ko() { modinfo ${sysroot:+-b "$sysroot"} -k "$kver" -n "$1" 2>/dev/null; }
# CRCs read from an installed module (scripts/gen-symvers.sh PROVIDER=KO): its one-line error on failure.
from_ko() { # PROVIDER KO
    local err
    err=$("$root/scripts/gen-symvers.sh" "$root/build/$1.symvers" "$1=$2" 2>&1) || { echo "${err#gen-symvers: }"; return 1; }
}
# exporters SYMBOL: the installed modules (files) for the target kernel that may export SYMBOL, best
# first: the one depmod's modules.symbols names ("alias symbol:SYMBOL MODULE"), then ib_uverbs and
# ib_core (a tree depmod has not indexed yet).
exporters() {
    local ko seen=""
    for ko in "$(installed_ko "symbol:$1")" "$(installed_ko ib_uverbs)" "$(installed_ko ib_core)"; do
        [ -n "$ko" ] && [ -f "$ko" ] || continue
        case " $seen " in *" $ko "*) continue ;; esac
        seen="$seen $ko"
        echo "$ko"
    done
}
# ofed_module_name: the module name a CRC-less entry names (no MODVERSIONS, no Module.symvers), for
# nvpeer's depends=: the exporter depmod indexed, else the module OFED's own core Makefile links
# peer_mem.o into, else ib_core.
ofed_module_name() {
    local ko mk
    ko=$(installed_ko symbol:ib_register_peer_memory_client)
    if [ -n "$ko" ]; then basename "$ko" | sed 's/\.ko.*//; s/-/_/g'; return; fi
    for mk in "$OFED_DIR/drivers/infiniband/core/Makefile" "$OFED_DIR/../drivers/infiniband/core/Makefile"; do
        [ -f "$mk" ] || continue
        grep -qE '^ib_uverbs-.*peer_mem\.o' "$mk" && { echo ib_uverbs; return; }
        grep -qE '^ib_core-.*peer_mem\.o' "$mk" && { echo ib_core; return; }
    done
    echo ib_core
}
ofed_syms=""
ofed_note=""
nv_syms=""
nv_ver=""
nv_note=""
nv_crc_from=""
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
        for d in "$sysroot"/usr/src/ofa_kernel/"$arch"/"$kver" "$sysroot"/usr/src/ofa_kernel/"$kver" \
                 "$sysroot"/usr/src/ofa_kernel/default "$sysroot"/usr/src/ofa_kernel-dkms \
                 "$sysroot"/var/lib/dkms/mlnx-ofed-kernel/*/build; do
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
            ofed_note="OFED CRCs: $OFED_SYMVERS"
        elif [ $modversions = n ]; then
            ofed_syms=generate
            ofed_mod=$(ofed_module_name)
            ofed_note="OFED API from $ofed_mod, no CRC needed"
        else
            # OFED's Module.symvers is gone (prebuilt signed modules keep none): the CRCs are
            # read from the installed module that exports the API for this kernel.
            why="" kos=$(exporters ib_register_peer_memory_client)
            while IFS= read -r ko; do
                [ -n "$ko" ] || continue
                if w=$(from_ko ofed "$ko"); then ofed_syms=$root/build/ofed.symvers; break; fi
                why="${why:+$why; }$w"
            done <<<"$kos"
            [ -n "$kos" ] ||
                fail "kernel $kver has MODVERSIONS but $OFED_SYMVERS does not export ib_register_peer_memory_client and no installed module for $kver exports it (neither modules.symbols, ib_uverbs nor ib_core): install the OFED kernel modules for $kver (DOCA-OFED: doca-ofed DKMS or the prebuilt linux-modules-doca-ofed package) or pass OFED_SYMVERS="
            [ -n "$ofed_syms" ] ||
                fail "kernel $kver has MODVERSIONS, $OFED_SYMVERS does not export ib_register_peer_memory_client and $why: reinstall the OFED kernel modules for $kver or pass OFED_SYMVERS="
            ofed_note="OFED CRCs: $ko"
        fi
    fi

    # ---- NVIDIA open kernel modules (nv-p2p.h + symbol CRCs) ------------------------------
    # The driver version of the TARGET kernel (DKMS builds for kernels not running yet): its
    # installed nvidia.ko, else the NVIDIA DKMS package built for it.
    nv_ver=$(modinfo ${sysroot:+-b "$sysroot"} -k "$kver" -F version nvidia 2>/dev/null | head -n1 || true)
    if [ -z "$nv_ver" ]; then
        for d in "$sysroot"/var/lib/dkms/nvidia*/*/"$kver"; do
            [ -d "$d" ] && { nv_ver=$(basename "$(dirname "$d")"); break; }
        done
    fi
    if [ -z "${NVIDIA_SRC:-}" ]; then
        # That version's source first (/usr/src/nvidia-<ver>, Debian's nvidia-current-<ver>), else the newest.
        for d in ${nv_ver:+"$sysroot"/usr/src/nvidia-"$nv_ver" "$sysroot"/usr/src/nvidia-*-"$nv_ver"} \
                 $(ls -d "$sysroot"/usr/src/nvidia-* 2>/dev/null | sort -rV); do
            if [ -f "$d/nvidia/nv-p2p.h" ]; then NVIDIA_SRC=$d; break; fi
        done
        case ${NVIDIA_SRC:-} in *"$nv_ver") ;; *) [ -z "$nv_ver" ] || nv_note=" (no source of $nv_ver, the driver for $kver)" ;; esac
    fi
    [ -n "${NVIDIA_SRC:-}" ] && [ -f "$NVIDIA_SRC/nvidia/nv-p2p.h" ] ||
        fail "no NVIDIA driver source with nvidia/nv-p2p.h${nv_ver:+ (driver $nv_ver for $kver)}: install the open kernel modules' source (e.g. nvidia-kernel-open-dkms / nvidia-open) or pass NVIDIA_SRC=<dir with nvidia/nv-p2p.h>"
    NVIDIA_SYMVERS=${NVIDIA_SYMVERS:-$NVIDIA_SRC/Module.symvers}
    if symvers_has "$NVIDIA_SYMVERS" nvidia_p2p_get_pages; then
        nv_syms=$NVIDIA_SYMVERS
    elif [ $modversions = n ]; then
        nv_syms=generate
    else
        # A MODVERSIONS kernel: the CRCs of the module installed for it that exports the P2P API
        # (a .run install or a package keeps no Module.symvers): found by the symbol in depmod's
        # index, else nvidia.ko; else a DKMS build of the driver for it.
        why="no nvidia.ko is installed for $kver"
        for ko in "$(installed_ko symbol:nvidia_p2p_get_pages)" "$(installed_ko nvidia)"; do
            [ -n "$ko" ] || continue
            if w=$(from_ko nvidia "$ko"); then nv_syms=$root/build/nvidia.symvers; nv_crc_from=$ko; break; fi
            why=$w
        done
        if [ -z "$nv_syms" ]; then
            for d in "$sysroot"/var/lib/dkms/nvidia*/"${nv_ver:-*}"/build; do
                grep -qs "for kernel $kver " "$d/make.log" && symvers_has "$d/Module.symvers" nvidia_p2p_get_pages &&
                    { nv_syms=$d/Module.symvers; break; }
            done
        fi
        [ -n "$nv_syms" ] ||
            fail "kernel $kver has MODVERSIONS but NVIDIA's symbol CRCs were not found ($NVIDIA_SYMVERS lacks nvidia_p2p_get_pages; $why): install the NVIDIA driver for $kver first or pass NVIDIA_SYMVERS=<its Module.symvers>"
    fi

    gen=""
    extra=""
    [ "$ofed_syms" = generate ] && gen="$gen ofed:$ofed_mod"
    [ -n "$ofed_syms" ] && [ "$ofed_syms" != generate ] && extra="$extra $ofed_syms"
    [ "$nv_syms" = generate ] && gen="$gen nvidia"
    [ "$nv_syms" != generate ] && extra="$extra $nv_syms"
    if [ -n "$gen" ]; then
        # shellcheck disable=SC2086
        "$root/scripts/gen-symvers.sh" "$root/build/generated.symvers" $gen
        extra="$extra $root/build/generated.symvers"
    fi
fi

# The kernel's own C compiler for the shim: LLVM=1 for clang kernels; for gcc kernels the compiler
# named in the build tree (Debian's x86_64-linux-gnu-gcc-16) when it is installed, else kbuild's
# default (which warns when it differs).
llvm=""
if kcfg CONFIG_CC_IS_CLANG; then
    llvm="LLVM=1"
else
    kcc=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\{0,1\}\([^ "]*\).*/\1/p' "$KDIR/include/config/auto.conf" 2>/dev/null | head -n1)
    [ -n "$kcc" ] && command -v "$kcc" >/dev/null 2>&1 && llvm="CC=$kcc"
fi

case $mode in
--make-args)
    bench=""
    [ "${BENCH:-0}" = 1 ] && bench=NVPEER_BENCH=1
    printf '%s %s RUSTC=%q OFED_DIR=%q NVIDIA_SRC=%q KBUILD_EXTRA_SYMBOLS=%q\n' "$llvm" "$bench" "$RUSTC" \
        "${OFED_DIR:-}" "${NVIDIA_SRC:-}" "${extra# }" ;;
*)
    echo "nvpeer preflight: ok (kernel $kver, $kernel_rustc at $RUSTC, OFED ${OFED_DIR:-bench emulator}, NVIDIA ${NVIDIA_SRC:-bench emulator}${nv_ver:+ for driver $nv_ver}$nv_note, MODVERSIONS=$modversions${ofed_note:+, $ofed_note}${nv_syms:+, NVIDIA CRCs: ${nv_crc_from:-${nv_syms/generate/none needed}}})" ;;
esac

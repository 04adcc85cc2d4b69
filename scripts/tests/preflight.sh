#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Tests of the build preflight (scripts/preflight.sh) and of the CRC extraction (scripts/gen-symvers.sh)
# on a node laid out in a scratch directory: a fake kernel build tree with MODVERSIONS, OFED's
# and NVIDIA's /usr/src trees, an installed nvidia.ko for the target kernel, fake rustc binaries.
# No kernel is built or booted. Needs as, ld, readelf, xz, modinfo, depmod (the bench's toolchain
# root has them: `testbench/tb chroot bash /src/scripts/tests/preflight.sh`; make check runs it there).
#
# The nvidia.ko is synthetic: an object assembled here with the export CRC records modpost writes
# for a MODVERSIONS kernel (6.3 and later: a `__crc_<sym>` label on a 4-byte value in a
# `___kcrctab+<sym>` section, merged into __kcrctab by the rule of the kernel's scripts/module.lds;
# before 6.3: an absolute `__crc_<sym>` symbol), not a module built by kbuild: neither bench kernel
# has CONFIG_MODVERSIONS. The CRC values are arbitrary; the test checks they come back exactly.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
t=$(mktemp -d /tmp/nvpeer-preflight-test.XXXXXX)
trap 'rm -rf "$t"' EXIT
pass=0; failed=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1: $2"; }

nv_syms="nvidia_p2p_get_pages nvidia_p2p_get_pages_persistent nvidia_p2p_put_pages
         nvidia_p2p_put_pages_persistent nvidia_p2p_dma_map_pages nvidia_p2p_dma_unmap_pages
         nvidia_p2p_free_page_table nvidia_p2p_free_dma_mapping"
crc_of() { printf '0x%08x' $(( (0x5eed0000 + $(echo "$1" | cksum | cut -d' ' -f1)) & 0xffffffff )); }

# fixture_ko OUT STYLE VERSION [SKIP]: a synthetic nvidia.ko (its module name from OUT's file
# name) exporting nv_syms (except SKIP) with CRCs crc_of(sym); STYLE kcrctab (6.3+) or abs (older);
# the export strings depmod indexes; a .modinfo with version= for modinfo.
fixture_ko() {
    local out=$1 style=$2 ver=$3 skip=${4:-} s
    {
        echo ".text"
        for s in $nv_syms; do
            [ "$s" = "$skip" ] && continue
            echo ".globl $s"; echo "$s: ret"
            if [ "$style" = abs ]; then
                echo ".globl __crc_$s"; echo ".set __crc_$s, $(crc_of "$s")"
            else
                echo ".section \"___kcrctab+$s\",\"a\""; echo ".globl __crc_$s"
                echo "__crc_$s:"; echo ".long $(crc_of "$s")"; echo ".previous"
            fi
        done
        # (the export strings depmod indexes, modules.symbols)
        echo ".section __ksymtab_strings,\"a\""
        for s in $nv_syms; do [ "$s" = "$skip" ] || echo ".asciz \"$s\""; done
        echo ".section .modinfo,\"a\""
        echo ".asciz \"version=$ver\""; echo ".asciz \"license=Dual MIT/GPL\""
        echo ".asciz \"name=$(basename "$out" .ko | tr - _)\""
    } >"$t/fx.S"
    printf 'SECTIONS {\n\t__kcrctab 0 : ALIGN(4) { *(SORT(___kcrctab+*)) }\n}\n' >"$t/module.lds"
    as "$t/fx.S" -o "$t/fx.o" && ld -r -T "$t/module.lds" "$t/fx.o" -o "$out"
}

ofed_syms="ib_register_peer_memory_client ib_unregister_peer_memory_client"
# ofed_ko OUT NAME [EXPORTS]: a synthetic OFED module NAME exporting EXPORTS (default: the
# peer-memory API; "" for a module that exports something else) with CRCs crc_of(sym), the
# __ksymtab_strings depmod indexes exports by (modules.symbols), and a .modinfo.
ofed_ko() {
    local out=$1 name=$2 exports=${3-$ofed_syms} s
    [ -n "$exports" ] || exports=${name}_other_export
    {
        echo ".text"
        for s in $exports; do
            echo ".globl $s"; echo "$s: ret"
            echo ".section \"___kcrctab+$s\",\"a\""; echo ".globl __crc_$s"
            echo "__crc_$s:"; echo ".long $(crc_of "$s")"; echo ".previous"
        done
        echo ".section __ksymtab_strings,\"a\""
        for s in $exports; do echo ".asciz \"$s\""; done
        echo ".section .modinfo,\"a\""
        echo ".asciz \"license=Dual BSD/GPL\""; echo ".asciz \"name=$name\""
    } >"$t/ofx.S"
    printf 'SECTIONS {\n\t__kcrctab 0 : ALIGN(4) { *(SORT(___kcrctab+*)) }\n}\n' >"$t/module.lds"
    as "$t/ofx.S" -o "$t/ofx.o" && ld -r -T "$t/module.lds" "$t/ofx.o" -o "$out"
}

# ---- CRC extraction --------------------------------------------------------------------------
check_crcs() { # NAME SYMVERS [MODULE, default nvidia]
    local s want got all=1
    for s in $nv_syms; do
        want=$(crc_of "$s")
        got=$(awk -v s="$s" -v m="${3:-nvidia}" '$2 == s && $3 == m { print $1 }' "$2")
        [ "$got" = "$want" ] || { bad "$1" "$s: got '${got}', want $want"; all=0; break; }
    done
    [ $all = 1 ] && ok "$1"
}
for style in kcrctab abs; do
    # (the module column is the file's module name: nvidia)
    mkdir -p "$t/$style"
    fixture_ko "$t/$style/nvidia.ko" $style 550.163.01 || { bad "fixture[$style]" "as/ld failed"; continue; }
    xz -k "$t/$style/nvidia.ko"
    if "$here/scripts/gen-symvers.sh" "$t/$style.symvers" "nvidia=$t/$style/nvidia.ko.xz" 2>"$t/err"; then
        check_crcs "crc-extraction[$style, .ko.xz]" "$t/$style.symvers"
    else
        bad "crc-extraction[$style, .ko.xz]" "$(cat "$t/err")"
    fi
done
fixture_ko "$t/partial.ko" kcrctab 550.163.01 nvidia_p2p_free_dma_mapping
if "$here/scripts/gen-symvers.sh" "$t/p.symvers" "nvidia=$t/partial.ko" 2>"$t/err"; then
    bad "crc-extraction[missing symbol]" "succeeded without nvidia_p2p_free_dma_mapping"
elif [ "$(wc -l <"$t/err")" = 1 ] && grep -q "exports no CRC for nvidia_p2p_free_dma_mapping" "$t/err"; then
    ok "crc-extraction[missing symbol]: $(cat "$t/err")"
else
    bad "crc-extraction[missing symbol]" "want one line naming the symbol, got: $(cat "$t/err")"
fi

# ---- the node: kernel build tree, OFED, NVIDIA, rustc ----------------------------------------
kver=9.9.0-test
sys=$t/root
kdir=$t/kbuild
mkdir -p "$kdir/include/config" "$kdir/rust" "$kdir/scripts" "$t/bin"
printf 'CONFIG_RUST=y\nCONFIG_MODVERSIONS=y\nCONFIG_INFINIBAND=y\n' >"$kdir/.config"
echo "$kver" >"$kdir/include/config/kernel.release"
echo 'CONFIG_RUSTC_VERSION_TEXT="rustc 1.97.1 (8bab26f4f 2026-07-14)"' >"$kdir/include/config/auto.conf"
for f in libcore.rmeta libkernel.rmeta libbindings.rmeta libpin_init.rmeta libcompiler_builtins.rmeta \
         libffi.rmeta libmacros.so; do : >"$kdir/rust/$f"; done
: >"$kdir/scripts/target.json"
# (no rust/ sources yet: the first case below wants the preflight's line about them)
fake_rustc() { printf '#!/bin/sh\necho "rustc %s (0000000 2026-01-01)"\n' "$2" >"$t/bin/$1"; chmod +x "$t/bin/$1"; }
ofed=$sys/usr/src/ofa_kernel/default
mkdir -p "$ofed/include/rdma"
: >"$ofed/include/rdma/peer_mem.h"
printf '0x0badc0de\tib_register_peer_memory_client\tib_core\tEXPORT_SYMBOL\t\n0x0badc0df\tib_unregister_peer_memory_client\tib_core\tEXPORT_SYMBOL\t\n' \
    >"$ofed/Module.symvers"
for v in 550.163.01 560.35.03; do mkdir -p "$sys/usr/src/nvidia-$v/nvidia"; : >"$sys/usr/src/nvidia-$v/nvidia/nv-p2p.h"; done
mkdir -p "$sys/lib/modules/$kver/updates/dkms"
fixture_ko "$sys/lib/modules/$kver/updates/dkms/nvidia.ko" kcrctab 550.163.01
xz "$sys/lib/modules/$kver/updates/dkms/nvidia.ko"
depmod -b "$sys" "$kver" 2>/dev/null

# A scratch copy of the repository's build scripts: the preflight writes build/ beside them.
repo=$t/repo
mkdir -p "$repo/scripts" && cp "$here/scripts/preflight.sh" "$here/scripts/gen-symvers.sh" "$repo/scripts/"
# shellcheck disable=SC2120 # (its callers pass environment assignments, or nothing)
preflight() { env -i PATH="$t/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME="$t/home" KDIR="$kdir" \
    NVPEER_SYSROOT="$sys" "$@" bash "$repo/scripts/preflight.sh" --make-args; }
# refused NAME REGEX: the preflight must fail with exactly one line, matching REGEX.
refused() {
    local out
    if out=$(preflight 2>&1); then bad "$1" "preflight passed: $out"
    elif [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "$2"; then ok "$1: one line naming the fix"
    else bad "$1" "$out"; fi
}

# The kernel's Rust sources, which scripts/compat-probe.sh reads: missing, then present.
refused "rust-sources[missing]" "has no Rust sources (rust/kernel/lib.rs).*scripts/compat-probe.sh"
mkdir -p "$kdir/rust/kernel" && : >"$kdir/rust/kernel/lib.rs"
# rustc: the PATH one is another version; rustc-1.97 (Debian/Ubuntu's versioned name) is the kernel's.
fake_rustc rustc 1.96.0
refused "rustc[none matches]" "no rustc 1.97.1.*install it (Debian/Ubuntu: rustc-1.97"
fake_rustc rustc-1.97 1.97.1
if out=$(preflight 2>&1); then
    if echo "$out" | grep -q "RUSTC=$t/bin/rustc-1.97 "; then ok "rustc[versioned rustc-1.97 found]"
    else bad "rustc[versioned rustc-1.97 found]" "$out"; fi
    # NVIDIA: the target kernel's driver (550, from its installed nvidia.ko), not the newest source.
    if echo "$out" | grep -q "NVIDIA_SRC=$sys/usr/src/nvidia-550.163.01 "; then ok "nvidia-version[target kernel's driver]"
    else bad "nvidia-version[target kernel's driver]" "$out"; fi
    # CRCs from that nvidia.ko.xz (no Module.symvers in the source tree); OFED's from its Module.symvers.
    if echo "$out" | grep -q "KBUILD_EXTRA_SYMBOLS=$ofed/Module.symvers\\\\ $repo/build/nvidia.symvers"; then
        check_crcs "modversions[CRCs from the installed nvidia.ko]" "$repo/build/nvidia.symvers"
    else
        bad "modversions[CRCs from the installed nvidia.ko]" "$out"
    fi
    echo "$out" | grep -q NVPEER_BENCH && bad "no-bench" "a real-node build got NVPEER_BENCH" || ok "no-bench[real node: no NVPEER_BENCH]"
else
    bad "preflight[node with MODVERSIONS]" "$out"
fi

# ---- OFED's CRCs from the installed module that exports the API, whatever its name -----------
# check_ofed NAME SYMVERS MODULE: both API symbols with their fixture CRCs, exported by MODULE.
check_ofed() {
    local s want got
    for s in $ofed_syms; do
        want=$(crc_of "$s")
        got=$(awk -v s="$s" -v m="$3" '$2 == s && $3 == m { print $1 }' "$2")
        [ "$got" = "$want" ] || { bad "$1" "$s: got '${got}' for module $3, want $want ($(cat "$2" 2>/dev/null | tr '\t\n' ' '))"; return; }
    done
    ok "$1"
}
# A DOCA-OFED 3.x node with prebuilt modules: no Module.symvers, ib_uverbs exports the API and
# ib_core does not.
mv "$ofed/Module.symvers" "$t/ofed.symvers.away"
odir=$sys/lib/modules/$kver/updates/dkms
ofed_ko "$odir/ib_uverbs.ko" ib_uverbs && ofed_ko "$odir/ib_core.ko" ib_core "" && xz "$odir/ib_uverbs.ko" \
    || bad "fixture[ofed]" "as/ld failed"
depmod -b "$sys" "$kver" 2>/dev/null
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/ofed.symvers"; then
    check_ofed "ofed-crcs[ib_uverbs exports, DOCA 3.x]" "$repo/build/ofed.symvers" ib_uverbs
else
    bad "ofed-crcs[ib_uverbs exports, DOCA 3.x]" "$out"
fi
# The same without depmod's index (a tree laid down but not indexed): ib_uverbs is tried first.
mv "$sys/lib/modules/$kver/modules.symbols" "$t/modules.symbols.away"
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/ofed.symvers"; then
    check_ofed "ofed-crcs[no modules.symbols: ib_uverbs tried]" "$repo/build/ofed.symvers" ib_uverbs
else
    bad "ofed-crcs[no modules.symbols: ib_uverbs tried]" "$out"
fi
# An older OFED: ib_core exports the API, ib_uverbs does not.
rm -f "$odir/ib_uverbs.ko.xz" "$odir/ib_core.ko"
ofed_ko "$odir/ib_uverbs.ko" ib_uverbs "" && ofed_ko "$odir/ib_core.ko" ib_core || bad "fixture[ofed]" "as/ld failed"
depmod -b "$sys" "$kver" 2>/dev/null
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/ofed.symvers"; then
    check_ofed "ofed-crcs[ib_core exports, OFED before 24.07]" "$repo/build/ofed.symvers" ib_core
else
    bad "ofed-crcs[ib_core exports, OFED before 24.07]" "$out"
fi
# No installed module exports it: one line naming the fix.
rm -f "$odir/ib_core.ko"
ofed_ko "$odir/ib_core.ko" ib_core "" || bad "fixture[ofed]" "as/ld failed"
depmod -b "$sys" "$kver" 2>/dev/null
refused "ofed-crcs[no installed module exports it]" "ib_uverbs.ko exports no CRC for ib_register_peer_memory_client.*ib_core.ko exports no CRC.*OFED_SYMVERS="
rm -f "$odir"/ib_*.ko*
depmod -b "$sys" "$kver" 2>/dev/null
refused "ofed-crcs[no OFED module installed]" "no installed module for $kver exports it.*OFED_SYMVERS="
# Without MODVERSIONS the generated entries name the exporter depmod indexed (nvpeer's depends=).
ofed_ko "$odir/ib_uverbs.ko" ib_uverbs || bad "fixture[ofed]" "as/ld failed"
depmod -b "$sys" "$kver" 2>/dev/null
sed -i '/MODVERSIONS/d' "$kdir/.config"
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/generated.symvers" &&
    [ "$(awk '$2 == "ib_register_peer_memory_client" { print $1, $3 }' "$repo/build/generated.symvers")" = "0x00000000 ib_uverbs" ]; then
    ok "no-modversions[generated entries name ib_uverbs, the exporter]"
else
    bad "no-modversions[generated entries name ib_uverbs, the exporter]" "$out; $(tr '\t\n' ' ' <"$repo/build/generated.symvers" 2>/dev/null)"
fi
echo 'CONFIG_MODVERSIONS=y' >>"$kdir/.config"
rm -f "$odir"/ib_*.ko*
mv "$t/ofed.symvers.away" "$ofed/Module.symvers"
mv -f "$t/modules.symbols.away" "$sys/lib/modules/$kver/modules.symbols" 2>/dev/null
depmod -b "$sys" "$kver" 2>/dev/null

# The P2P API exported by a module of another name (found by the symbol in modules.symbols).
mv "$sys/lib/modules/$kver/updates/dkms/nvidia.ko.xz" "$t/"
fixture_ko "$sys/lib/modules/$kver/updates/dkms/nvidia-p2p.ko" kcrctab 550.163.01
depmod -b "$sys" "$kver" 2>/dev/null
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/nvidia.symvers"; then
    check_crcs "modversions[CRCs from the module exporting the P2P API, by symbol]" "$repo/build/nvidia.symvers" nvidia_p2p
else
    bad "modversions[CRCs from the module exporting the P2P API, by symbol]" "$out"
fi
rm -f "$sys/lib/modules/$kver/updates/dkms/nvidia-p2p.ko"
mv "$t/nvidia.ko.xz" "$sys/lib/modules/$kver/updates/dkms/"
depmod -b "$sys" "$kver" 2>/dev/null

# MODVERSIONS and no nvidia.ko for the target kernel: one line naming the fix.
mv "$sys/lib/modules/$kver/updates/dkms/nvidia.ko.xz" "$t/"
depmod -b "$sys" "$kver" 2>/dev/null
refused "modversions[no nvidia.ko]" "NVIDIA's symbol CRCs were not found.*no nvidia.ko is installed for $kver.*NVIDIA_SYMVERS="
# Without MODVERSIONS no CRC is needed: generated entries (CRC 0).
sed -i '/MODVERSIONS/d' "$kdir/.config"
if out=$(preflight 2>&1) && echo "$out" | grep -q "$repo/build/generated.symvers"; then
    ok "no-modversions[generated entries]"
else
    bad "no-modversions[generated entries]" "$out"
fi
# No OFED: one line naming OFED_DIR, never the emulators' header.
rm -rf "$sys/usr/src/ofa_kernel"
refused "no-ofed" "no OFED peer-memory API.*OFED_DIR="

echo "preflight tests: $pass passed, $failed failed"
[ $failed = 0 ]

#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Write Module.symvers entries for the symbols nvpeer imports from the peer-memory core and from
# nvidia.ko, for modpost (KBUILD_EXTRA_SYMBOLS).
#
#   gen-symvers.sh OUT PROVIDER[:MODULE][=KO]...      PROVIDER: ofed | nvidia
#
# The module column (what modpost writes into nvpeer's `depends=`, so what modprobe loads first)
# is the module that exports the symbols: KO's name when KO is given, else MODULE, else the
# provider's historical home (ofed: ib_core, nvidia: nvidia). OFED 24.07 and later, DOCA-OFED 3.x
# included, export the peer-memory API from ib_uverbs, not ib_core (their
# drivers/infiniband/core/Makefile links peer_mem.o into ib_uverbs).
# No KO: CRC 0, only valid for kernels built without CONFIG_MODVERSIONS (modpost needs
# to know the symbols exist; the loader checks no CRC).
# PROVIDER=KO: the CRCs the installed module KO (.ko, .ko.xz, .ko.zst, .ko.gz) exports, read from
# its symbol table: each export's `__crc_<symbol>` is either an absolute symbol whose value is the
# CRC (kernels before 6.3) or a label on the 4-byte CRC in its __kcrctab section (6.3 and later).
# This is where a MODVERSIONS node has NVIDIA's CRCs when the driver's Module.symvers is gone
# (a .run install or a distribution package keeps only the .ko). Needs readelf (binutils or LLVM).
set -eu
out=$1; shift

fail() { echo "gen-symvers: $*" >&2; exit 1; }

# ko_plain KO TMP: an uncompressed copy of KO in TMP (or KO itself); prints its path.
ko_plain() {
    case $1 in
    *.xz) xz -dc "$1" >"$2" || fail "cannot decompress $1 (xz)" ;;
    *.zst) zstd -qdc "$1" >"$2" || fail "cannot decompress $1 (zstd)" ;;
    *.gz) gzip -dc "$1" >"$2" || fail "cannot decompress $1 (gzip)" ;;
    *) echo "$1"; return ;;
    esac
    echo "$2"
}

# ko_crcs KO SYMBOL...: "CRC SYMBOL" lines (CRC as 0x%08x); fails naming the first symbol KO does
# not export with a CRC.
ko_crcs() {
    ko=$1; shift
    [ -r "$ko" ] || fail "cannot read $ko"
    readelf=$(command -v readelf || command -v llvm-readelf || true)
    [ -n "$readelf" ] || fail "no readelf to read CRCs from $ko: install binutils (or llvm)"
    tmp=$(mktemp)
    plain=$(ko_plain "$ko" "$tmp")
    "$readelf" -h "$plain" 2>/dev/null | grep -q "little endian" ||
        { rm -f "$tmp"; fail "$ko is not a little-endian ELF object"; }
    # Section index -> file offset ("[Nr] Name Type Address Off ..."; the brackets may hold spaces).
    secs=$("$readelf" -SW "$plain" | sed -n 's/^ *\[ *\([0-9][0-9]*\)\] */\1 /p' | awk '{ print $1, $5 }')
    syms=$("$readelf" -sW "$plain" | awk '$8 ~ /^__crc_/ { print substr($8, 7), $2, $7 }')
    for s in "$@"; do
        line=$(echo "$syms" | awk -v s="$s" '$1 == s { print $2, $3; exit }')
        [ -n "$line" ] || { rm -f "$tmp"; fail "$ko exports no CRC for $s (built without MODVERSIONS, or not the module that exports it)"; }
        value=${line% *}
        ndx=${line#* }
        if [ "$ndx" = ABS ]; then
            crc=$(printf '0x%08x' $((0x$value & 0xffffffff)))
        else
            off=$(echo "$secs" | awk -v n="$ndx" '$1 == n { print $2; exit }')
            [ -n "$off" ] || { rm -f "$tmp"; fail "$ko: __crc_$s is in section $ndx, which has no file offset"; }
            crc=0x$(od -An -tx4 -j $((0x$off + 0x$value)) -N4 "$plain" | tr -d ' \n')
            [ ${#crc} = 10 ] || { rm -f "$tmp"; fail "$ko: cannot read the CRC of $s"; }
        fi
        echo "$crc $s"
    done
    rm -f "$tmp"
}

: >"$out"
# ko_name KO: the module name of KO: its .modinfo `name=` (kbuild writes it), else its file name
# without .ko and a compression suffix.
ko_name() {
    n=$(modinfo -F name "$1" 2>/dev/null | head -n1)
    [ -z "$n" ] || { echo "$n"; return; }
    n=$(basename "$1")
    n=${n%.xz}; n=${n%.zst}; n=${n%.gz}
    echo "${n%.ko}" | tr - _
}

for what in "$@"; do
    ko="" name=""
    case $what in *=*) ko=${what#*=}; what=${what%%=*} ;; esac
    case $what in *:*) name=${what#*:}; what=${what%%:*} ;; esac
    case $what in
    ofed)
        mod=ib_core
        syms="ib_register_peer_memory_client ib_unregister_peer_memory_client" ;;
    nvidia)
        mod=nvidia
        syms="nvidia_p2p_get_pages nvidia_p2p_get_pages_persistent nvidia_p2p_put_pages
              nvidia_p2p_put_pages_persistent nvidia_p2p_dma_map_pages nvidia_p2p_dma_unmap_pages
              nvidia_p2p_free_page_table nvidia_p2p_free_dma_mapping" ;;
    *) echo "gen-symvers.sh: unknown provider $what" >&2; exit 2 ;;
    esac
    [ -z "$name" ] || mod=$name
    [ -z "$ko" ] || mod=$(ko_name "$ko")
    if [ -n "$ko" ]; then
        # shellcheck disable=SC2086
        crcs=$(ko_crcs "$ko" $syms) || exit 1
        echo "$crcs" | while read -r crc s; do
            printf '%s\t%s\t%s\tEXPORT_SYMBOL\t\n' "$crc" "$s" "$mod" >>"$out"
        done
    else
        for s in $syms; do
            printf '0x00000000\t%s\t%s\tEXPORT_SYMBOL\t\n' "$s" "$mod" >>"$out"
        done
    fi
done

#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Write Module.symvers entries (CRC 0) for the symbols nvpeer imports from the peer-memory core
# and from nvidia.ko. Only valid for kernels built without CONFIG_MODVERSIONS, where modpost
# needs to know the symbols exist but the loader checks no CRCs.
#   gen-symvers.sh OUT ofed|nvidia...
set -eu
out=$1; shift
: >"$out"
for what in "$@"; do
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
    for s in $syms; do
        printf '0x00000000\t%s\t%s\tEXPORT_SYMBOL\t\n' "$s" "$mod" >>"$out"
    done
done

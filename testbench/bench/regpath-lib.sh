# Registration-path benchmark, guest side (issue 8; docs/performance.md). Sourced by
# testbench/suites/60-regpath-bench.sh (short smoke run, part of `make check`) and
# testbench/suites/regpath-full.sh (the `make bench` run). Not a suite itself.
#
# Every path runs in this one boot, one after the other, with the same provider cost model, so the
# ratios between paths hold even though the TCG+KASAN guest's absolute times mean nothing; each
# client cell is also preceded by a floor cell of the same size and threads (--adjacent-floor),
# and its ratios are taken against that one:
#   floor               rawfloor.ko: nvidia_p2p_get_pages + dma_map_pages / dma_unmap_pages + put_pages
#   floor-persistent    the same with the persistent pin API
#   classic             classic_peer.ko persistent_api_support=0 (invalidating nv_mem) through the core
#   classic-persistent  classic_peer.ko persistent_api_support=1
#   nvpeer-inval        nvpeer.ko persistent_api_support=0
#   nvpeer-persistent   nvpeer.ko persistent_api_support=1
#   nvidia-peermem      NVIDIA's own nvidia-peermem.c (550, from Debian's nvidia-open-kernel-source,
#                       built unchanged: nvidia-peermem-real.ko, testbench/lib/nvidia-peermem-tree.sh):
#                       its invalidating nv_mem, the only client the core gives an MR that supports
#                       invalidation (550 has no persistent_api_support; its nv_mem_nc serves only
#                       registrations without IB_PEER_MEM_INVAL_SUPP)
# Knobs (environment): RP_OUT (result dir), RP_PATHS, RP_SCALE_PATHS, RP_MAX_MEM_MB,
# RP_MEMORY_FIRST (1: measure every path's slab memory first, in a pass of its own),
# RP_MEMORY_ONLY (1: that pass and nothing else),
# RP_ARGS (extra `nvpeer emu regpath measure` options: sizes, threads, iterations, cost model) and
# RP_HOST_CALIBRATION (the host's `nvpeer emu calibrate` JSON: when set, rp_dilation dilates the
# cost model by the guest's measured slowdown).
# shellcheck shell=bash

RP_OUT=${RP_OUT:-/bench/bench-results}
RP_PATHS=${RP_PATHS:-"floor floor-persistent classic classic-persistent nvidia-peermem nvpeer-inval nvpeer-persistent"}
RP_SCALE_PATHS=${RP_SCALE_PATHS:-""}
RP_SCALE=${RP_SCALE:-0}
RP_MAX_MEM_MB=${RP_MAX_MEM_MB:-1100}
RP_HOST_CALIBRATION=${RP_HOST_CALIBRATION:-}
RP_DILATE=()

# rp_dilation: time the calibration workload here, divide by the host's figure, and have every
# path's cost model multiplied by that factor (docs/performance.md, "Time dilation").
rp_dilation() {
    [ -n "$RP_HOST_CALIBRATION" ] || return 0
    [ -f "$RP_HOST_CALIBRATION" ] || { echo "no host calibration at $RP_HOST_CALIBRATION"; return 1; }
    mkdir -p "$RP_OUT"
    $NVPEER emu calibrate >"$RP_OUT/guest-calibration.json" || return 1
    cp "$RP_HOST_CALIBRATION" "$RP_OUT/host-calibration.json"
    local line
    line=$(python3 - "$RP_OUT/host-calibration.json" "$RP_OUT/guest-calibration.json" <<'PY'
import json, sys
host, guest = (json.load(open(f))["median_ns_per_iter"] for f in sys.argv[1:3])
print(f"{guest / host:.2f} guest {guest:.0f} ns / host {host:.0f} ns per calibration iteration")
PY
) || return 1
    echo "time dilation: ${line}"
    RP_DILATE=(--dilate "${line%% *}" --dilate-source "${line#* }")
}

rp_down() {
    local m
    for m in nvpeer classic_peer nvidia_peermem_real rawfloor peer_mem_emu nvp2p_emu; do rmmod "$m" 2>/dev/null; done
    true
}

# rp_up: provider (no BAR1 budget, room for the largest size), core (OFED 5.5 model), floor module.
rp_up() {
    rp_down
    modprobe nvp2p_emu max_mem_mb="$RP_MAX_MEM_MB" bar1_budget_mb=0 || return 1
    modprobe peer_mem_emu model=5.5 || return 1
    modprobe rawfloor || return 1
}

# rp_path NAME [PHASE]: load NAME's client, measure it, unload it; then both emulators must be
# clean. PHASE: all (default); memory (only the slab memory per live MR, into NAME.memory.json);
# rest (everything else; memory is taken from NAME.memory.json when that pass wrote it).
rp_path() {
    local name=$1 phase=${2:-all} via=core mod="" params="" extra=() out="$RP_OUT/$1.json"
    case "$name" in
        floor) via=floor ;;
        floor-persistent) via=floor
            extra=(--persistent --floor-ref floor-persistent --classic-ref classic-persistent) ;;
        classic) mod=classic_peer; params=persistent_api_support=0; extra=(--adjacent-floor) ;;
        classic-persistent) mod=classic_peer; params=persistent_api_support=1
            extra=(--adjacent-floor --persistent --floor-ref floor-persistent --classic-ref classic-persistent) ;;
        nvidia-peermem) mod=nvidia_peermem_real; extra=(--adjacent-floor) ;;
        nvpeer-inval) mod=nvpeer; params=persistent_api_support=0; extra=(--adjacent-floor) ;;
        nvpeer-persistent) mod=nvpeer; params=persistent_api_support=1
            extra=(--adjacent-floor --persistent --floor-ref floor-persistent --classic-ref classic-persistent) ;;
        *) echo "unknown path $name"; return 1 ;;
    esac
    case " $RP_SCALE_PATHS " in *" $name "*) extra+=(--scale "$RP_SCALE") ;; esac
    case "$phase" in
        all) ;;
        memory) extra+=(--mem-only); out="$RP_OUT/$name.memory.json" ;;
        # Without a memory file (its pass failed, and said so), measure memory here after all.
        rest) [ -f "$RP_OUT/$name.memory.json" ] && extra+=(--memory-from "$RP_OUT/$name.memory.json") ;;
        *) echo "unknown phase $phase"; return 1 ;;
    esac
    if [ -n "$mod" ]; then
        # shellcheck disable=SC2086
        modprobe "$mod" $params || { echo "modprobe $mod $params failed"; return 1; }
    fi
    local rc=0
    # measure resets both emulators' counters first and fails if a pin or mapping is left.
    # shellcheck disable=SC2086
    $NVPEER emu regpath measure --path "$name" --via "$via" "${extra[@]}" "${RP_DILATE[@]}" $RP_ARGS \
        --out "$out" || rc=1
    if [ -n "$mod" ]; then rmmod "$mod" || { echo "rmmod $mod failed"; rc=1; }; fi
    $NVPEER emu gpu violations >/dev/null || { $NVPEER emu gpu violations; rc=1; }
    $NVPEER emu core violations >/dev/null || { $NVPEER emu core violations; rc=1; }
    return $rc
}

# rp_report OUT MACHINE: merge every measured path into OUT and print the tables.
rp_report() {
    local out=$1 machine=$2 files=() p
    for p in $RP_PATHS; do [ -f "$RP_OUT/$p.json" ] && files+=("$RP_OUT/$p.json"); done
    [ ${#files[@]} -gt 0 ] || { echo "no path produced results"; return 1; }
    $NVPEER emu regpath report "${files[@]}" --out "$out" --machine "$machine"
}

# rp_kasan: whether this kernel is the KASAN bench kernel (not a production config).
rp_kasan() { grep -q ' kasan_report$' /proc/kallsyms 2>/dev/null; }

# rp_mem_mrs: live MRs for the memory figures. A production kernel's slab counters are coarse
# (SLUB counts per-CPU slabs whole; no kmemleak), so it holds ten times as many, which it
# registers in about the time the KASAN kernel takes for 1000.
rp_mem_mrs() { if rp_kasan; then echo 1000; else echo 10000; fi; }

rp_machine() {
    local debug=()
    rp_kasan && debug+=(KASAN)
    [ -e /proc/lockdep ] && debug+=(lockdep)
    [ -e /sys/kernel/debug/kmemleak ] && debug+=(kmemleak)
    local kind="production config: no KASAN, lockdep or kmemleak"
    if [ ${#debug[@]} -gt 0 ]; then kind="${debug[*]}"; kind=${kind// /, }; fi
    printf 'bench VM: QEMU TCG (no KVM), %s vCPUs, %s MiB, intel-iommu (%s), edu DMA peer; kernel %s (%s)' \
        "$(nproc)" "$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))" "$(rp_iommu_domain)" \
        "$(uname -r)" "$kind"
}

# rp_iommu_domain: the DMA domain of the edu peer's IOMMU group, in words.
rp_iommu_domain() {
    local t
    t=$(cat "$(tb_edu_dev)/iommu_group/type" 2>/dev/null || echo unknown)
    case "$t" in
        identity) echo "passthrough: identity domain" ;;
        DMA) echo "translated, strict IOTLB flushing" ;;
        DMA-FQ) echo "translated, lazy IOTLB flushing" ;;
        *) echo "domain $t" ;;
    esac
}

# rp_run_all MERGED LABEL: load, measure every path of RP_PATHS (one tb_case each), merge into
# MERGED (tb_case "report", tables in the suite log), unload. Returns 1 if nothing could load.
rp_run_all() {
    local merged=$1 label=$2 p
    mkdir -p "$RP_OUT"
    if ! rp_up; then
        tb_result load fail "could not load nvp2p_emu, peer_mem_emu and rawfloor"
        rp_down
        return 1
    fi
    if [ -n "$RP_HOST_CALIBRATION" ]; then
        # tb_case runs rp_dilation in this shell, so RP_DILATE is set here when it passed.
        tb_case time-dilation rp_dilation
        [ ${#RP_DILATE[@]} -gt 0 ] || { rp_down; return 1; }
    fi
    if [ "${RP_MEMORY_ONLY:-0}" = 1 ]; then
        # Only the memory pass; its files are the paths' results.
        for p in $RP_PATHS; do
            tb_case "memory/$p" rp_path "$p" memory
            [ -f "$RP_OUT/$p.memory.json" ] && cp "$RP_OUT/$p.memory.json" "$RP_OUT/$p.json"
        done
    elif [ "${RP_MEMORY_FIRST:-0}" = 1 ]; then
        # The slab figures of every path first, in a quiet kernel: large cells and the scale test
        # leave caches (IOVA magazines, slabs) draining for minutes, which a later path's
        # before/after counters would pick up (docs/performance.md).
        for p in $RP_PATHS; do tb_case "memory/$p" rp_path "$p" memory; done
        for p in $RP_PATHS; do tb_case "measure/$p" rp_path "$p" rest; done
    else
        for p in $RP_PATHS; do tb_case "measure/$p" rp_path "$p"; done
    fi
    rp_down
    tb_case report rp_report "$merged" "$(rp_machine)${label:+ ($label)}"
}

# Registration-path benchmark, guest side (issue 8; docs/performance.md). Sourced by
# testbench/suites/60-regpath-bench.sh (short smoke run, part of `make check`) and
# testbench/suites/regpath-full.sh (the `make bench` run). Not a suite itself.
#
# Every path runs in this one boot, one after the other, with the same provider cost model, so the
# ratios between paths hold even though the TCG+KASAN guest's absolute times mean nothing:
#   floor               rawfloor.ko: nvidia_p2p_get_pages + dma_map_pages / dma_unmap_pages + put_pages
#   floor-persistent    the same with the persistent pin API
#   classic             classic_peer.ko persistent_api_support=0 (invalidating nv_mem) through the core
#   classic-persistent  classic_peer.ko persistent_api_support=1
#   nvpeer-inval        nvpeer.ko persistent_api_support=0
#   nvpeer-persistent   nvpeer.ko persistent_api_support=1
# Knobs (environment): RP_OUT (result dir), RP_PATHS, RP_SCALE_PATHS, RP_MAX_MEM_MB and
# RP_ARGS (extra `nvpeer emu regpath measure` options: sizes, threads, iterations, cost model).
# shellcheck shell=bash

RP_OUT=${RP_OUT:-/bench/bench-results}
RP_PATHS=${RP_PATHS:-"floor floor-persistent classic classic-persistent nvpeer-inval nvpeer-persistent"}
RP_SCALE_PATHS=${RP_SCALE_PATHS:-""}
RP_SCALE=${RP_SCALE:-0}
RP_MAX_MEM_MB=${RP_MAX_MEM_MB:-1100}

rp_down() {
    local m
    for m in nvpeer classic_peer rawfloor peer_mem_emu nvp2p_emu; do rmmod "$m" 2>/dev/null; done
    true
}

# rp_up: provider (no BAR1 budget, room for the largest size), core (OFED 5.5 model), floor module.
rp_up() {
    rp_down
    modprobe nvp2p_emu max_mem_mb="$RP_MAX_MEM_MB" bar1_budget_mb=0 || return 1
    modprobe peer_mem_emu model=5.5 || return 1
    modprobe rawfloor || return 1
}

# rp_path NAME: load NAME's client, measure it, unload it; then both emulators must be clean.
rp_path() {
    local name=$1 via=core mod="" params="" extra=()
    case "$name" in
        floor) via=floor ;;
        floor-persistent) via=floor; extra=(--persistent --floor-ref floor-persistent) ;;
        classic) mod=classic_peer; params=persistent_api_support=0 ;;
        classic-persistent) mod=classic_peer; params=persistent_api_support=1
            extra=(--floor-ref floor-persistent --classic-ref classic-persistent) ;;
        nvpeer-inval) mod=nvpeer; params=persistent_api_support=0 ;;
        nvpeer-persistent) mod=nvpeer; params=persistent_api_support=1
            extra=(--floor-ref floor-persistent --classic-ref classic-persistent) ;;
        *) echo "unknown path $name"; return 1 ;;
    esac
    case " $RP_SCALE_PATHS " in *" $name "*) extra+=(--scale "$RP_SCALE") ;; esac
    if [ -n "$mod" ]; then
        # shellcheck disable=SC2086
        modprobe "$mod" $params || { echo "modprobe $mod $params failed"; return 1; }
    fi
    $NVPEER emu gpu reset >/dev/null && $NVPEER emu core reset >/dev/null || return 1
    local rc=0
    # shellcheck disable=SC2086
    $NVPEER emu regpath measure --path "$name" --via "$via" "${extra[@]}" $RP_ARGS \
        --out "$RP_OUT/$name.json" || rc=1
    if [ -n "$mod" ]; then rmmod "$mod" || { echo "rmmod $mod failed"; rc=1; }; fi
    $NVPEER emu gpu violations >/dev/null || { $NVPEER emu gpu violations; rc=1; }
    $NVPEER emu core violations >/dev/null || { $NVPEER emu core violations; rc=1; }
    $NVPEER emu gpu check-leaks >/dev/null || { echo "pins left at the provider"; rc=1; }
    return $rc
}

# rp_report OUT MACHINE: merge every measured path into OUT and print the tables.
rp_report() {
    local out=$1 machine=$2 files=() p
    for p in $RP_PATHS; do [ -f "$RP_OUT/$p.json" ] && files+=("$RP_OUT/$p.json"); done
    [ ${#files[@]} -gt 0 ] || { echo "no path produced results"; return 1; }
    $NVPEER emu regpath report "${files[@]}" --out "$out" --machine "$machine"
}

# rp_get_pages_per_reg FILE PATH: "min max" of pins (get_pages + get_pages_persistent) per
# registration over every cell of PATH in the merged document FILE.
rp_get_pages_per_reg() {
    python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
p = next(p for p in doc["paths"] if p["path"] == sys.argv[2])
v = [c["provider_calls_per_reg"]["get_pages"] + c["provider_calls_per_reg"]["get_pages_persistent"]
     for c in p["cells"]]
print(min(v), max(v)) if v else print("none none")
PY
}

# rp_numbers_present FILE: every path has cells with cycles, latencies and rates > 0, and the
# memory figure when it was asked for.
rp_numbers_present() {
    python3 - "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
bad = []
for p in doc["paths"]:
    if not p["cells"]:
        bad.append(f'{p["path"]}: no cells')
    for c in p["cells"]:
        for k in (("reg", "median_ns"), ("reg", "p99_ns"), ("dereg", "median_ns"), ("regs_per_s",)):
            v = c
            for kk in k:
                v = v[kk]
            if not v or v <= 0:
                bad.append(f'{p["path"]} size {c["size"]} threads {c["threads"]}: {"/".join(k)} = {v}')
    for r in p["invalidation"]:
        if r["free_with_live_mr"]["median_ns"] <= 0:
            bad.append(f'{p["path"]}: no free latency at {r["size"]}')
    if p["memory"] is not None and not p["memory"].get("mrs"):
        bad.append(f'{p["path"]}: no live MRs for the memory figure')
print("\n".join(bad) if bad else f'{len(doc["paths"])} paths, numbers present')
sys.exit(1 if bad else 0)
PY
}

rp_machine() {
    printf 'bench VM: QEMU TCG (no KVM), %s vCPUs, %s MiB, intel-iommu, edu DMA peer; kernel %s (KASAN, lockdep, kmemleak)' \
        "$(nproc)" "$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))" "$(uname -r)"
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
    for p in $RP_PATHS; do tb_case "measure/$p" rp_path "$p"; done
    rp_down
    tb_case report rp_report "$merged" "$(rp_machine)${label:+ ($label)}"
}

# Demo (used by `make demo` through testbench/demo): load the emulators and nvpeer, allocate
# emulated GPU memory, register it as an MR, free it under the live registration, and say at each
# step what the peer-memory core (/sys/kernel/mm/memory_peers/nv_mem/*) and nvpeer
# (/sys/kernel/debug/nvpeer/) report. Also recorded as a result, so `make check` keeps it working.
# bench: check-kernel stock
# bench: budget stock 10 10
# bench: budget-full - 30 30
. /src/testbench/suites/nvpeer-lib.sh.inc

say() { printf '\n=== %s\n' "$*"; }
peer() { # the core's counters for nv_mem, one line
    local d=$NP_PEERS/nv_mem f out=""
    [ -d $d ] || { echo "    (no $d: core sysfs off)"; return; }
    for f in version num_alloc_mrs num_dealloc_mrs num_reg_pages num_reg_bytes num_dereg_bytes num_free_callbacks; do
        out="$out $f=$(cat $d/$f)"
    done
    echo "    core sysfs:$out"
}
ours() { # nvpeer's view
    echo "    nvpeer: live_mrs=$(np_stat live_mrs) pinned_bytes=$(np_stat pinned_bytes) registrations=$(np_stat registrations)" \
         "pins(get_pages)=$(np_stat provider_get_pages) callbacks=$(np_stat callbacks) invalidations=$(np_stat invalidations)" \
         "puts=$(np_stat provider_put_pages)"
    if grep -q . $NP_DBG/mrs; then sed 's/^/    MR: /' $NP_DBG/mrs; else echo "    MR: (none)"; fi
}

demo() {
    say "1. Load the emulated NVIDIA driver (nvp2p_emu), the emulated OFED core (peer_mem_emu) and nvpeer"
    echo "    nvpeer with persistent_api_support=0: the invalidating client nv_mem, so a free can revoke an MR"
    np_up 5.5 2 persistent_api_support=0 || return 1
    sed 's/^/    debugfs config: /' $NP_DBG/config
    $NVPEER emu core clients | sed 's/^/    core sees client: /'
    peer; ours

    say "2. A process allocates 1 MiB of GPU memory and registers it (ibv_reg_mr); it keeps the MR for a while"
    $NVPEER emu steps alloc:1M reg show sleep:600000 >/tmp/demo-owner.log 2>&1 &
    local owner=$!
    # The owner prints step [2] once its MR is registered (the guest may be slow: wait up to 5 min).
    for _ in $(seq 300); do grep -q '^\[2\]' /tmp/demo-owner.log && break; sleep 1; done
    sed 's/^/    owner: /' /tmp/demo-owner.log
    echo "    -> nvpeer pinned the range once (one nvidia_p2p_get_pages), mapped 16 x 64 KiB pages for the HCA"
    peer; ours

    say "3. The owner frees the GPU memory while the MR is still registered (cudaFree under a live MR)"
    $NVPEER emu gpu free --tgid "$owner" | sed 's/^/    /'
    echo "    -> NVIDIA called nvpeer's free callback; nvpeer told the core to invalidate the MR before returning"
    peer; ours

    say "4. The owner exits; closing its RDMA file deregisters the (invalidated) MR"
    kill "$owner"; wait "$owner" 2>/dev/null
    for _ in $(seq 120); do [ "$(np_stat live_mrs)" = 0 ] && break; sleep 1; done
    peer; ours
    np_clean || return 1
    $NVPEER emu gpu violations >/dev/null && $NVPEER emu core violations >/dev/null || { echo "violations recorded"; return 1; }
    echo "    -> no pins, no mappings, no MRs left; no contract violation recorded by either emulator"
    [ "$(np_stat invalidations)" = 1 ] && [ "$(np_stat provider_get_pages)" = 1 ] || return 1
    np_down
}
# Run in the foreground so `make demo` (vm run --show) streams every step, then record the verdict.
start=$(date +%s)
demo 2>&1 | tee /tmp/demo.out
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then st=pass; else st=fail; fi
tb_result demo-register-free-under-live-mr "$st" "$(tail -n 3 /tmp/demo.out)" "$(( $(date +%s) - start ))"

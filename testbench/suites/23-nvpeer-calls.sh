# nvpeer-specific guarantees, read from nvpeer's debugfs and the provider emulator's counters:
# exactly one nvidia_p2p_get_pages* per registration (no probe pin), host ranges fall through,
# a free under a live MR takes the callback path once, rmmod with live MRs is refused, a foreign
# process release leaves the pin to the callback (H5), so does a put NVIDIA refused (and rmmod waits
# for that callback), non-PCI DMA devices are refused (H6).
# Fault injection and the race stress run in 25-nvpeer-faults-stress.
# bench: budget - 150 150
# bench: budget-full - 150 150
. /src/testbench/suites/nvpeer-lib.sh.inc

gpu_calls() { # OP: provider emulator call count
    $NVPEER emu gpu counters --json | python3 -S -c "import json,sys; print(json.load(sys.stdin)['calls']['$1']['calls'])"
}

one_pin_per_registration() { # MODE(persistent|invalidating) N
    local mode=$1 n=$2 op steps=()
    if [ "$mode" = invalidating ]; then
        np_up 5.5 2 persistent_api_support=0 || return 1; op=get_pages
    else
        np_up 5.5 2 || return 1; op=get_pages_persistent
    fi
    $NVPEER emu gpu reset >/dev/null || return 1
    steps=(alloc:1M)
    for _ in $(seq "$n"); do steps+=(reg:0x1234:300K dereg); done
    $NVPEER emu steps "${steps[@]}" >/tmp/np-steps.log || { cat /tmp/np-steps.log; return 1; }
    local emu_get emu_other ours
    emu_get=$(gpu_calls "$op")
    emu_other=$(gpu_calls "$([ "$op" = get_pages ] && echo get_pages_persistent || echo get_pages)")
    ours=$(np_stat "provider_$op")
    echo "$n registrations ($mode): provider $op calls $emu_get, other pin API $emu_other, nvpeer counted $ours, repins $(np_stat repins)"
    [ "$emu_get" = "$n" ] && [ "$emu_other" = 0 ] && [ "$ours" = "$n" ] || return 1
    [ "$(np_stat acquire_claimed)" = "$n" ] || { grep acquire $NP_DBG/stats; return 1; }
    np_clean
}
tb_case one-get-pages-per-registration-persistent one_pin_per_registration persistent 5
tb_case one-get-pages-per-registration-invalidating one_pin_per_registration invalidating 5

host_fallthrough() {
    np_up 5.5 2 persistent_api_support=0 || return 1
    $NVPEER emu scenario host-memory --module nvpeer || return 1
    echo "acquire_calls $(np_stat acquire_calls) acquire_declined $(np_stat acquire_declined) err_pin $(np_stat err_pin)"
    [ "$(np_stat acquire_claimed)" = 0 ] || return 1
    [ "$(np_stat pinned_bytes)" = 0 ] || return 1
    np_clean
}
tb_case host-range-falls-through host_fallthrough

# A pin NVIDIA refuses in acquire (here ENOTSUPP, which nvidia_p2p_get_pages_persistent returns
# for FORCE_BAR1 or MIG refusals, injected once) is said in the kernel log with the cause and the
# fix, not only counted; the registration fails cleanly.
pin_refusal_logged() {
    np_up 5.5 2 || return 1
    tb_log_mark || return 1
    $NVPEER emu gpu faults --op get_pages_persistent --err -524 >/dev/null || return 1
    if $NVPEER emu core register --size 256K >/tmp/np-refusal.log 2>&1; then
        cat /tmp/np-refusal.log; echo "registration with a refused pin succeeded"; return 1
    fi
    echo "registration: $(tail -n 1 /tmp/np-refusal.log)"
    local line
    line=$(tb_log_since | grep 'nvpeer: nvidia_p2p_get_pages_persistent refused to pin' | head -n 1)
    [ -n "$line" ] || { echo "no kernel-log line"; tb_log_since | tail -n 5; return 1; }
    echo "$line"
    echo "$line" | grep -qE "(ENOTSUPP|524).*not supported for this GPU or memory" || return 1
    [ "$(np_stat err_pin)" -ge 1 ] || return 1
    np_clean
}
tb_case pin-refusal-logged pin_refusal_logged

free_under_live_mr() {
    np_up 5.5 2 persistent_api_support=0 || return 1
    $NVPEER emu steps alloc:512K reg show free show dereg | tee /tmp/np-free.log || return 1
    grep -qE 'invalidated|torn' /tmp/np-free.log || { echo "MR not invalidated by the free"; return 1; }
    echo "callbacks $(np_stat callbacks) invalidations $(np_stat invalidations) stale $(np_stat callbacks_stale)"
    [ "$(np_stat callbacks)" = 1 ] && [ "$(np_stat invalidations)" = 1 ] || return 1
    [ "$(np_stat provider_put_pages)" = 0 ] || { echo "put_pages after the callback revoked the pin"; return 1; }
    [ "$(np_stat provider_free_page_table)" = 1 ] || return 1
    if [ -r $NP_PEERS/nv_mem/num_free_callbacks ]; then
        [ "$(cat $NP_PEERS/nv_mem/num_free_callbacks)" = 1 ] || return 1
    fi
    np_clean
}
tb_case free-under-live-mr-callback-path free_under_live_mr

rmmod_refused() {
    np_up 5.5 2 || return 1
    $NVPEER emu core register --size 256K --hold 8 >/tmp/np-hold.log 2>&1 &
    local pid=$!
    for _ in $(seq 600); do grep -q state=mapped $NP_DBG/mrs && break; sleep 0.1; done
    cat $NP_DBG/mrs
    grep -q 'state=mapped' $NP_DBG/mrs || { kill $pid; return 1; }
    if rmmod nvpeer 2>/tmp/np-rmmod.err; then echo "rmmod succeeded with a live MR"; return 1; fi
    echo "rmmod refused: $(cat /tmp/np-rmmod.err)"
    wait $pid || { cat /tmp/np-hold.log; return 1; }
    np_clean || return 1
    rmmod nvpeer || return 1
    echo "rmmod after the MR went away: ok"
}
tb_case rmmod-with-live-mr-refused rmmod_refused
# A non-persistent put NVIDIA refuses leaves it the pin and the free callback (nv-p2p.c frees the
# table only when RM released the pin): the registration stays listed, still counted, and rmmod
# stays refused until the callback came, or NVIDIA would call into unloaded code at the free.
failed_put_holds_module() {
    np_up 5.5 2 persistent_api_support=0 || return 1
    $NVPEER emu gpu faults --op put_pages --err -12 >/dev/null || return 1
    $NVPEER emu steps alloc:512K reg dereg sleep:8000 free >/tmp/np-putfail.log 2>&1 &
    local pid=$! line
    for _ in $(seq 600); do [ "$(np_stat err_put)" = 1 ] && break; sleep 0.1; done
    line=$(cat $NP_DBG/mrs)
    echo "after the failed put: err_put $(np_stat err_put) live_mrs $(np_stat live_mrs) pinned_bytes $(np_stat pinned_bytes)"
    echo "$line"
    local held=1
    echo "$line" | grep -q 'state=orphaned .*core=released' || { echo "the registration is not kept for NVIDIA's callback"; held=0; }
    [ "$(np_stat pinned_bytes)" != 0 ] || { echo "the pin NVIDIA kept is not counted"; held=0; }
    if [ "$held" = 1 ]; then
        if rmmod nvpeer 2>/tmp/np-rmmod.err; then
            echo "rmmod succeeded while NVIDIA holds a callback into nvpeer"; wait $pid; return 1
        fi
        echo "rmmod refused while NVIDIA holds the callback: $(cat /tmp/np-rmmod.err)"
    fi
    wait $pid || { cat /tmp/np-putfail.log; return 1; }
    [ "$held" = 1 ] || return 1
    echo "after the free: callbacks $(np_stat callbacks) callbacks_unmapped $(np_stat callbacks_unmapped) live_mrs $(np_stat live_mrs)"
    [ "$(np_stat callbacks_unmapped)" = 1 ] || return 1
    np_unload_clean || return 1
    echo "rmmod after NVIDIA's callback: ok"
}
tb_case failed-put-keeps-module-until-callback failed_put_holds_module
# debugfs `mrs` read while the kernel fails the reader's Nth slab or page allocation (failslab's
# and fail_page_alloc's fail-nth, counted from the read: the file is opened first and the buffer
# read into is touched before), for N = 1..12 with two MRs live: each read returns every line, the
# documented "# out of memory" line, or ENOMEM, and nothing is left behind (the snapshot's
# references: the books balance after; KASAN and kmemleak judge the boot).
# fail_attrs armed|default: failslab's and fail_page_alloc's knobs as the walk needs them (failing
# allocations that may sleep, page allocations of every order; user data pages, which are highmem
# allocations, stay out), or back to the kernel's defaults (verbose 2, times 1). The debug kernel
# has both (testbench/kernel.config).
fail_attrs() {
    local d=/sys/kernel/debug a
    for a in failslab fail_page_alloc; do
        [ -d $d/$a ] || continue
        if [ "$1" = armed ]; then
            echo N >$d/$a/ignore-gfp-wait; echo 0 >$d/$a/verbose
            [ $a = failslab ] || { echo 0 >$d/$a/min-order; echo Y >$d/$a/ignore-gfp-highmem; }
        else
            echo Y >$d/$a/ignore-gfp-wait; echo 2 >$d/$a/verbose; echo 1 >$d/$a/times
            [ $a = failslab ] || echo 1 >$d/$a/min-order
        fi
    done
}
debugfs_enomem() {
    np_up 5.5 2 || return 1
    $NVPEER emu steps alloc:1M reg:0:256K reg:0x40000:256K sleep:20000 dereg dereg free >/tmp/np-dbg.log 2>&1 &
    local pid=$! out
    for _ in $(seq 600); do [ "$(np_stat live_mrs)" = 2 ] && break; sleep 0.1; done
    [ "$(np_stat live_mrs)" = 2 ] || { kill $pid; cat /tmp/np-dbg.log; return 1; }
    fail_attrs armed
    out=$(python3 -S - "$NP_DBG/mrs" <<'PY'
import errno, os, sys
seen = {"full": 0, "oom line": 0, "ENOMEM": 0}
buf = bytearray(1 << 16)
for n in range(1, 13):
    fd = os.open(sys.argv[1], os.O_RDONLY)
    nth = os.open("/proc/thread-self/fail-nth", os.O_WRONLY)
    os.write(nth, str(n).encode())
    try:
        got = os.readv(fd, [buf])
        os.write(nth, b"0")
        text = buf[:got].decode()
        lines = [l for l in text.splitlines() if l]
        if lines == ["# out of memory"]:
            seen["oom line"] += 1
        elif len(lines) == 2 and all(l.startswith("id=") for l in lines):
            seen["full"] += 1
        else:
            print(f"fail-nth {n}: unexpected output {text!r}")
            sys.exit(1)
    except OSError as e:
        os.write(nth, b"0")
        if e.errno != errno.ENOMEM:
            print(f"fail-nth {n}: {e}")
            sys.exit(1)
        seen["ENOMEM"] += 1
    os.close(nth)
    os.close(fd)
print("reads under fail-nth 1..12:", ", ".join(f"{k} {v}" for k, v in seen.items()))
PY
) || { echo "$out"; fail_attrs default; kill $pid; return 1; }
    fail_attrs default
    echo "$out"
    [ "$(grep -c '^id=' $NP_DBG/mrs)" = 2 ] || { echo "the MRs changed under the failed reads"; kill $pid; return 1; }
    wait $pid || { cat /tmp/np-dbg.log; return 1; }
    np_clean
}
[ -e /sys/kernel/debug/failslab ] && tb_case debugfs-mrs-under-enomem debugfs_enomem

unload_live() { np_up 5.5 2 persistent_api_support=0 && np_scenario unload-live; }
tb_case rmmod-scenario-unload-live unload_live

foreign_release() {
    np_up 5.5 2 persistent_api_support=0 || return 1
    $NVPEER emu scenario dereg-other-pid --module nvpeer || return 1
    echo "orphaned_pins $(np_stat orphaned_pins) callbacks $(np_stat callbacks) invalidations $(np_stat invalidations)"
    [ "$(np_stat orphaned_pins)" = 1 ] || return 1
    # The orphaned pin ended in the callback, without telling the core (its id was stale).
    [ "$(np_stat callbacks_unmapped)" = 1 ] && [ "$(np_stat invalidations)" = 0 ] || return 1
    np_clean
}
tb_case foreign-process-release-orphans-pin foreign_release

non_pci() {
    np_up 5.5 2 || return 1
    # (21-nvpeer-scenarios ran the same scenario earlier in this boot: only this load's line counts)
    tb_log_mark || return 1
    np_scenario non-pci || return 1
    [ "$(np_stat err_not_pci)" -ge 1 ] || return 1
    tb_log_since | grep -q 'nvpeer: dma_map for a DMA device that is not a PCI function' || return 1
    echo "non-PCI dma_device refused: err_not_pci $(np_stat err_not_pci)"
}
tb_case non-pci-dma-device-refused non_pci

np_down

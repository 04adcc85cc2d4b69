# Proves that lockdep sees nvpeer's wait for overtaken provider calls (src/overtaken.rs, the
# lockdep map nvpeer_overtaken_wait in src/nvpeer_shim.c): a planted lock inversion must be
# reported with that map in its cycle. The core emulator plants it (PME_CFG_ACQUIRE_IN_INVAL):
# from inside invalidate, which nvpeer's free callback calls with the provider's lock held, it
# asks nvpeer's acquire for the same range, so nvpeer's pin waits for calls that need the lock
# held above it. Only lockdep can tell: nothing was in flight, the provider refuses the pin (-EIO)
# and nothing is left behind. A lockdep report turns lockdep off for the rest of the boot, so the
# suite runs with the other report-expecting suites at the end of its boot, and before them (a
# KASAN report turns lockdep off too).
# bench: expect-dmesg WARNING: possible circular locking dependency detected
# bench: budget - 15 15
# bench: budget-full - 15 15

. /src/testbench/suites/nvpeer-lib.sh.inc

planted_inversion() {
    [ -e /proc/lockdep ] || { echo "this kernel has no lockdep"; return 1; }
    grep -q '^ *debug_locks: *1' /proc/lockdep_stats ||
        { echo "lockdep is already off in this boot (debug_locks 0): the suite must run first"; return 1; }
    np_up 5.5 2 persistent_api_support=0 || return 1
    tb_log_mark
    # a registration first: its map (nvpeer_overtaken_wait, shared) before the provider's lock
    $NVPEER emu steps alloc:512K reg dereg free >/tmp/np-canary-first.log 2>&1 ||
        { cat /tmp/np-canary-first.log; return 1; }
    $NVPEER emu core model --acquire-in-invalidate true >/dev/null || return 1
    # (the provider records the pin asked from inside its callback, and refuses it)
    tb_expect_begin 'nvp2p_emu: VIOLATION call-in-callback'
    $NVPEER emu steps alloc:512K reg free dereg >/tmp/np-canary.log 2>&1 ||
        { tb_expect_end; cat /tmp/np-canary.log; return 1; }
    tb_expect_end
    $NVPEER emu core model --acquire-in-invalidate false >/dev/null || return 1
    local log
    log=$(tb_log_since) || return 1
    echo "$log" | grep -q 'peer_mem_emu: planted acquire from invalidate: client nv_mem' ||
        { echo "the core emulator did not plant the acquire"; echo "$log" | tail -n 5; return 1; }
    echo "$log" | grep -q 'WARNING: possible circular locking dependency detected' ||
        { echo "lockdep reported no cycle for the planted inversion"; echo "$log" | tail -n 20; return 1; }
    echo "$log" | grep -q 'nvpeer_overtaken_wait' ||
        { echo "lockdep's report does not name nvpeer_overtaken_wait"; echo "$log" | grep -A30 'circular locking' | head -n 40; return 1; }
    echo "lockdep: $(echo "$log" | grep -m1 -B1 -A0 'nvpeer_overtaken_wait' | tr -s ' ' | paste -sd ' ' -)"
    # the provider refused the planted pin; nothing of it is left, and nvpeer and the emulators
    # unload (the KASAN suites after this one load clients of their own under the name nv_mem)
    $NVPEER emu gpu reset >/dev/null || return 1
    np_unload_clean
}
tb_case planted-inversion-through-the-overtaken-wait-is-reported planted_inversion
# (whatever the case left on a failure: the plant off, nvpeer and the emulators unloaded; the
# KASAN suites after this one load clients of their own under the name nv_mem)
[ ! -e /sys/module/peer_mem_emu ] || $NVPEER emu core model --acquire-in-invalidate false >/dev/null 2>&1
np_down

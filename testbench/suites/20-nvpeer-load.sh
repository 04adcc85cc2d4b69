# nvpeer.ko load/unload in every parameter combination, against the emulators (nvp2p_emu,
# peer_mem_emu): client registration as the core sees it, load-time diagnostics, version strings,
# debugfs formats (uapi/), KUnit suite, refusal of a second nv_mem provider. It runs in the debug
# kernel's shared boot (the KUnit case needs CONFIG_KUNIT) and unloads everything it loaded.
# bench: budget - 75 75
# bench: budget-full - 40 40

PEERS=/sys/kernel/mm/memory_peers
DBG=/sys/kernel/debug/nvpeer

np_unload() { rmmod nvpeer 2>/dev/null; rmmod classic_peer 2>/dev/null; true; }
np_emus() { modprobe nvp2p_emu && modprobe peer_mem_emu; }

load_default() {
    np_emus || return 1
    modprobe nvpeer || return 1
    grep -q '^client nv_mem persistent$' $DBG/config || { cat $DBG/config; return 1; }
    grep -q '^persistent_api_support 1$' $DBG/config || return 1
    [ "$(cat /sys/module/nvpeer/version)" = "0.1.0" ] || { echo "module version: $(cat /sys/module/nvpeer/version)"; return 1; }
    if [ -d $PEERS ]; then
        [ "$(cat $PEERS/nv_mem/version)" = "0.1.0" ] || { echo "nv_mem/version: $(cat $PEERS/nv_mem/version)"; return 1; }
        [ ! -e $PEERS/nv_mem_nc ] || { echo "unexpected nv_mem_nc"; return 1; }
    fi
    $NVPEER emu core clients
    dmesg | grep -q 'nvpeer: registered peer-memory client nv_mem (persistent), version 0.1.0' || { echo "no load line"; return 1; }
    np_unload
    [ ! -e $PEERS/nv_mem ] || { echo "nv_mem still in sysfs after rmmod"; return 1; }
    echo "default: one persistent nv_mem, version 0.1.0, unloaded cleanly"
}
tb_case load-default load_default

load_pair() { # PEERDIRECT EXPECTED_DESCRIPTION
    modprobe nvpeer persistent_api_support=0 peerdirect_support="$1" || return 1
    grep -q "^client nv_mem $2\$" $DBG/config || { cat $DBG/config; return 1; }
    grep -q '^client nv_mem_nc persistent$' $DBG/config || { cat $DBG/config; return 1; }
    # Registration order: invalidating nv_mem first (probed first by the core), then nv_mem_nc.
    local order
    order=$(sed -n 's/^client \([a-z_]*\) .*/\1/p' $DBG/config | tr '\n' ' ')
    [ "$order" = "nv_mem nv_mem_nc " ] || { echo "order: $order"; return 1; }
    $NVPEER emu core clients
    if [ -d $PEERS ]; then
        [ -e $PEERS/nv_mem/version ] && [ -e $PEERS/nv_mem_nc/version ] || { ls $PEERS; return 1; }
    fi
    np_unload
    echo "persistent_api_support=0 peerdirect_support=$1: nv_mem ($2) + nv_mem_nc"
}
tb_case load-invalidating-extended load_pair 0 "invalidating, INVALIDATE_UNMAPS"
tb_case load-invalidating-ofed49 load_pair 1 "invalidating, MLNX_OFED 4.x layout"

load_default_peerdirect() {
    modprobe nvpeer peerdirect_support=1 || return 1
    grep -q '^client nv_mem persistent$' $DBG/config || return 1
    np_unload
    echo "peerdirect_support=1 alone: persistent nv_mem (flag only affects the invalidating client)"
}
tb_case load-peerdirect-only load_default_peerdirect

bad_param() { # PARAM VALUE
    local out
    tb_log_mark || return 1
    if modprobe nvpeer "$1=$2" 2>/tmp/np-modprobe.err; then
        np_unload; echo "$1=$2 was accepted"; return 1
    fi
    out=$(tb_log_since | grep 'nvpeer:')
    echo "$out" | grep -q "nvpeer: invalid $1 value $2 (allowed: 0 or 1)" || { echo "message: $out"; return 1; }
    [ ! -d /sys/module/nvpeer ] || { echo "module stayed loaded"; return 1; }
    echo "$1=$2 refused: $out"
}
tb_case reject-persistent-2 bad_param persistent_api_support 2
tb_case reject-peerdirect-neg bad_param peerdirect_support -1

# A second nv_mem provider. On the default core model (DOCA-OFED 3.x on this kernel) the core keeps
# no memory_peers directory and accepts a second "nv_mem", so nvpeer finds the other provider by
# its module name in /sys/module: nv_peer_mem here (the classic client under that name).
duplicate_nv_mem() {
    modprobe nv_peer_mem || { echo "nv_peer_mem fixture not available"; return 1; }
    tb_log_mark || return 1
    if modprobe nvpeer 2>/dev/null; then rmmod nvpeer nv_peer_mem; echo "nvpeer loaded beside nv_peer_mem"; return 1; fi
    local out
    out=$(tb_log_since | grep 'nvpeer:' | head -n 3)
    rmmod nv_peer_mem || return 1
    echo "$out" | grep -q "nv_peer_mem is loaded and serves the nv_mem peer-memory client.*rmmod nv_peer_mem" ||
        { echo "message: $out"; return 1; }
    [ ! -e /sys/module/nvpeer ] || { echo "nvpeer half-loaded"; return 1; }
    echo "refused with: $out"
}
tb_case refuse-duplicate-nv_mem duplicate_nv_mem

formats() {
    modprobe nvpeer || return 1
    # stats keys are exactly the documented ones, in order.
    local want have
    want=$(sed -n '/NVPEER_STATS_KEYS/,/^$/p' /src/uapi/nvpeer.h | grep -o '"[a-z0-9_]*"' | tr -d '"' | tr '\n' ' ')
    have=$(cut -d' ' -f1 $DBG/stats | tr '\n' ' ')
    [ "$want" = "$have" ] || { echo "uapi: $want"; echo "debugfs: $have"; np_unload; return 1; }
    # every value is a decimal number, all zero except nothing happened yet
    awk 'NF != 2 || $2 !~ /^[0-9]+$/ { bad = 1; print "bad line: " $0 } END { exit bad }' $DBG/stats || { np_unload; return 1; }
    [ -z "$(cat $DBG/mrs)" ] || { cat $DBG/mrs; np_unload; return 1; }
    np_unload
    echo "stats has the $(echo "$have" | wc -w) documented keys; mrs empty"
}
tb_case debugfs-formats-match-uapi formats

# The KUnit suite lives in a test module of its own (testbench/kunit); nvpeer.ko carries none.
kunit() {
    tb_log_mark || return 1
    modprobe nvpeer_logic_kunit || return 1
    rmmod nvpeer_logic_kunit || return 1
    local k n
    k=$(tb_log_since | sed -n '/# Subtest: nvpeer_logic/,/ok [0-9]* nvpeer_logic/p')
    [ -n "$k" ] || { echo "no KUnit output for nvpeer_logic"; tb_log_since | tail -n 20; return 1; }
    echo "$k" | grep -q 'not ok' && { echo "$k"; return 1; }
    echo "$k" | grep -qE '(^|[^t] )ok [0-9]+ nvpeer_logic' || { echo "$k"; return 1; }
    n=$(echo "$k" | grep -E ' ok [0-9]+ [a-z0-9_]+$' | grep -vc 'nvpeer_logic$')
    [ "$n" -ge 6 ] || { echo "$k"; return 1; }
    tb_log_mark || return 1
    modprobe nvpeer || return 1
    k=$(tb_log_since) || { np_unload; return 1; }
    echo "$k" | grep -q 'nvpeer_logic' && { echo "nvpeer.ko ran KUnit tests"; np_unload; return 1; }
    np_unload
    echo "KUnit nvpeer_logic (nvpeer_logic_kunit.ko): $n test(s), all ok; nvpeer.ko runs none"
}
tb_case kunit-nvpeer_logic kunit

np_unload
rmmod peer_mem_emu nvp2p_emu 2>/dev/null
true

# Bad clients whose bug is a memory-safety error: KASAN must report it (the boot runs with
# kasan_multi_shot, so each case gets its own report). It runs at the end of the shared boot, after
# every suite that expects no report (testbench/vm): a KASAN report turns lockdep off for the rest
# of a boot.
# bench: expect-dmesg BUG: KASAN: (double-free|slab-use-after-free|use-after-free|invalid-free)
# bench: budget - 20 20
# bench: budget-full - 15 15

BAD=bad_peer

# kasan_case BUG KIND MODEL PEERDIRECT SCENARIO REGEX RULE
kasan_case() {
    local bug=$1 kind=$2 model=$3 pd=$4 sc=$5 re=$6 rule=$7 p=1 n0 n1
    [ "$kind" = inval ] && p=0
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    $NVPEER emu core model "$model" --stop-notifier-bug false >/dev/null || return 1
    n0=$(dmesg | grep -cE "$re")
    modprobe $BAD bug="$bug" persistent_api_support=$p peerdirect_support="$pd" || return 1
    $NVPEER emu scenario "$sc" --module $BAD --iterations 1 || true
    sleep 1
    n1=$(dmesg | grep -cE "$re")
    rmmod $BAD 2>/dev/null; rmmod peer_mem_emu 2>/dev/null; rmmod nvp2p_emu 2>/dev/null
    [ "$n1" -gt "$n0" ] || { echo "bug=$bug NOT caught: no KASAN report matching '$re' (rule: $rule)"; return 1; }
    echo "bug=$bug caught by KASAN: $(dmesg | grep -E "$re" | tail -n 1) (rule: $rule)"
}

tb_expect_begin 'VIOLATION|peer_mem_emu|nvp2p_emu|bad_peer'
# sg_table freed in put_pages (the core's table) and again in release (the client's copy).
tb_case double_sg_free kasan_case double_sg_free inval 5.5 0 basic \
    'BUG: KASAN: (double-free|invalid-free)' 'the sg_table handed to the core is freed exactly once'
# OFED 4.9: release() runs inside invalidate; the callback then writes its freed context (H1).
tb_case write_after_release kasan_case write_after_release inval 4.9 1 free-then-dereg \
    'BUG: KASAN: (slab-)?use-after-free' 'no client memory is touched after invalidate returns unless a reference is held'
tb_expect_end

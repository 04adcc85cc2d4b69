# Provider emulator (nvp2p_emu.ko): /dev/nvp2p_emu alloc/free/list, the exported API driven by the
# emulator's in-kernel test client, fault injection, and each strictness check provoked on purpose.
# Cases live in testbench/emu/nvp2p/test_nvp2p.py; they run in one Python process per group
# (Python starts slowly in the TCG+KASAN guest) and each prints "RESULT case status secs details".
# bench: check-kernel stock
# bench: budget stock 25 25
# bench: budget-full - 45 45

NVP2P_TEST=/src/testbench/emu/nvp2p/test_nvp2p.py

nvp2p_load() {
    # modprobe when depmod worked in the guest; else the built module the runner copied.
    modprobe nvp2p_emu 2>/dev/null || insmod /bench/modules/nvp2p_emu.ko || return 1
    [ -c /dev/nvp2p_emu ] || { echo "no /dev/nvp2p_emu"; return 1; }
    for f in violations stats pins allocs; do
        [ -r /sys/kernel/debug/nvp2p_emu/$f ] || { echo "no debugfs $f"; return 1; }
    done
    dmesg | grep -q 'nvp2p_emu: loaded: page table ABI 0x00020000' || { echo "no load message"; return 1; }
    # Every nvidia_p2p_* function of the 595 API is exported by the module.
    local s missing=0
    for s in init_mapping destroy_mapping get_pages get_pages_persistent dma_map_pages \
             dma_unmap_pages put_pages put_pages_persistent free_page_table free_dma_mapping \
             register_rsync_driver unregister_rsync_driver get_rsync_registers put_rsync_registers; do
        grep -qE "\snvidia_p2p_${s}\s+\[nvp2p_emu\]" /proc/kallsyms || { echo "missing nvidia_p2p_$s"; missing=1; }
    done
    return $missing
}

# nvp2p_group CASE...: one Python process; one tb_result per RESULT line.
nvp2p_group() {
    local out line name status secs details seen=0
    out=$(mktemp)
    python3 -S "$NVP2P_TEST" "$@" >"$out" 2>&1
    while IFS= read -r line; do
        case "$line" in
            RESULT\ *)
                read -r _ name status secs details <<<"$line"
                tb_result "$name" "$status" "$details" "$secs"
                seen=$((seen + 1)) ;;
        esac
    done <"$out"
    cat "$out" >>"/bench/results/$TB_SUITE.log"
    if [ "$seen" != $# ]; then
        tb_result "group-$1" fail "test program ended after $seen of $# cases: $(tail -n 15 "$out")"
    fi
    rm -f "$out"
}

tb_case load nvp2p_load
if [ -c /dev/nvp2p_emu ]; then
    nvp2p_group abi-sizes alloc-list-free gup-fails pin-map-unmap-put get-pages-validation \
        free-runs-callback persistent-outlives-free pt-abi-and-flags bar1-budget fault-injection \
        put-blocks-behind-callback free-in-registration-window rm-cost-model process-exit gpu-teardown token-lookup \
        no-p2p-registration bad-ioctl-input \
        failed-pin-out-params unmap-in-callback-legal put-on-persistent-table persistent-odd-flags

    # Violations provoked on purpose: their kernel log lines are expected. The last three are the
    # real driver's own failure modes (docs/emulators.md): a dma_map_pages whose table another
    # thread's free callback freed, put_pages_persistent on a table of get_pages, and the dangling
    # *page_table of a failed get_pages passed back.
    tb_expect_begin 'nvp2p_emu: VIOLATION'
    nvp2p_group violation-put-in-callback violation-put-wrong-va violation-freed-table dma-map-uaf-after-address-reuse \
        violation-double-put violation-wrong-peer-and-stale-mapping \
        violation-wrong-process-put violation-leak-check violation-dma-map-uaf \
        violation-put-persistent-on-nonpersistent violation-dangling-out-param
    tb_expect_end
fi

nvp2p_unload() {
    local st
    st=$(cat /sys/kernel/debug/nvp2p_emu/stats) || return 1
    echo "$st" | grep -qx 'live_pins 0' || { echo "live pins before unload: $st"; return 1; }
    echo "$st" | grep -qx 'live_allocs 0' || { echo "live allocations before unload"; return 1; }
    rmmod nvp2p_emu || return 1
    [ ! -e /dev/nvp2p_emu ] || { echo "device still present"; return 1; }
    dmesg | grep -q 'nvp2p_emu: unloaded' || { echo "no unload message"; return 1; }
}
tb_case unload nvp2p_unload

# Bad client that deadlocks on an OFED 5.1-5.4 core (#2696789): a legacy client unpins
# (nvidia_p2p_put_pages, RM lock) from dereg while dereg holds mapping_lock, and its free callback
# holds the RM lock while invalidate waits for mapping_lock. The core emulator's hang detector
# abandons the wait and records a "deadlock" violation; lockdep reports the inversion. Own boot:
# lockdep reports once per boot.
# bench: own-boot
# bench: expect-dmesg VIOLATION deadlock|possible circular locking dependency

tb_expect_begin 'VIOLATION|peer_mem_emu|nvp2p_emu|bad_peer'
legacy_deadlock() {
    local out rc=0
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    $NVPEER emu core model 5.1 --stop-notifier-bug false || return 1
    modprobe bad_peer bug=legacy_deadlock persistent_api_support=0 || return 1
    out=$(timeout 120 $NVPEER emu scenario dereg-vs-free-in-stop --module bad_peer --delay-ms 1500 \
        --hang-timeout-ms 4000 --expect deadlock 2>&1) || rc=$?
    echo "$out"
    if [ $rc = 124 ]; then
        echo "bug=legacy_deadlock caught as a hang (scenario did not finish in 120 s)"
        return 0
    fi
    rmmod bad_peer; rmmod peer_mem_emu; rmmod nvp2p_emu
    [ $rc = 0 ] || { echo "bug=legacy_deadlock NOT caught (rule: never unpin while the free callback is in flight; OFED #2696789)"; return 1; }
    echo "bug=legacy_deadlock caught: $(echo "$out" | grep -o 'caught: .*' | head -n 1)"
}
tb_case legacy_deadlock legacy_deadlock
tb_expect_end

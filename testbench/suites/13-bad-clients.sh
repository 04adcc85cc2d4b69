# Proof that the emulators are strict: bad_peer.ko is classic_peer with exactly one rule broken
# (bug=NAME). Each case loads it, runs the scenario that exercises the broken rule, and passes only
# if the named violation was recorded (or, for rules the real stack answers with an error, if that
# error surfaced with a message naming the rule). The emulators' VIOLATION log lines are expected
# inside each case. Bugs that only KASAN catches run in the own-boot suite 13-bad-clients-kasan.sh.
# The OFED 5.1-5.4 lock inversion is caught by the core emulator's hang detector (it waits for
# mapping_lock in a trylock loop that lockdep does not see, and records "deadlock" after
# --hang-timeout-ms instead of hanging the machine).
# bench: check-kernel stock
# bench: budget stock 30 30
# bench: budget-full - 105 105

BAD=bad_peer

bad_reload_emus() {
    rmmod $BAD 2>/dev/null
    rmmod peer_mem_emu 2>/dev/null
    rmmod nvp2p_emu 2>/dev/null
    modprobe nvp2p_emu && modprobe peer_mem_emu
}

# bad_case BUG KIND(inval|persist) MODEL PEERDIRECT SCENARIO EXPECT
# Passes when `nvpeer emu scenario SCENARIO --expect EXPECT` reports "caught".
bad_case() {
    local bug=$1 kind=$2 model=$3 pd=$4 sc=$5 expect=$6 p=1 out rc=0
    [ "$kind" = inval ] && p=0
    bad_reload_emus || return 1
    $NVPEER emu core model "$model" --stop-notifier-bug false >/dev/null || return 1
    modprobe $BAD bug="$bug" persistent_api_support=$p peerdirect_support="$pd" || {
        echo "cannot load $BAD bug=$bug"; return 1; }
    out=$($NVPEER emu scenario "$sc" --module $BAD --iterations 2 --delay-ms 1200 \
        --hang-timeout-ms 4000 --expect "$expect" 2>&1) || rc=$?
    echo "$out"
    bad_reload_emus >/dev/null 2>&1
    [ $rc = 0 ] || { echo "bug=$bug NOT caught by scenario $sc (expected rule: $expect)"; return 1; }
    echo "bug=$bug caught: $(echo "$out" | grep -o 'caught: .*' | head -n1)"
}

# The client hands get_pages a range that is not whole 64 KiB GPU pages: the provider answers
# -EINVAL (as NVIDIA does), so an unaligned registration fails. The scenario must fail and name
# the rule.
bad_unaligned() {
    local out rc=0
    bad_reload_emus || return 1
    modprobe $BAD bug=unaligned persistent_api_support=0 || return 1
    out=$($NVPEER emu scenario unaligned --module $BAD 2>&1) || rc=$?
    echo "$out"
    bad_reload_emus >/dev/null 2>&1
    [ $rc != 0 ] || { echo "bug=unaligned NOT caught: unaligned registration succeeded"; return 1; }
    echo "$out" | grep -q '64 KiB' || { echo "failure message does not name the 64 KiB rule"; return 1; }
    echo "bug=unaligned caught: registration refused, message names the 64 KiB alignment rule"
}

# A client missing a mandatory op must be refused at registration (module load fails).
bad_missing_op() {
    local before after
    bad_reload_emus || return 1
    before=$($NVPEER emu core counters --json | python3 -S -c 'import json,sys; print(json.load(sys.stdin)["rejected_clients"])')
    if modprobe $BAD bug=missing_op persistent_api_support=1 2>/dev/null; then
        rmmod $BAD; echo "bug=missing_op NOT caught: client without dma_map registered"; return 1
    fi
    after=$($NVPEER emu core counters --json | python3 -S -c 'import json,sys; print(json.load(sys.stdin)["rejected_clients"])')
    [ "$after" -gt "$before" ] || { echo "core did not count a rejected client"; return 1; }
    dmesg | tail -n 50 | grep -i 'mandatory' | tail -n 1
    echo "bug=missing_op caught: registration refused (rule: acquire/get_pages/put_pages/dma_map/dma_unmap are mandatory)"
}

# to_pci_dev() on a faux (non-PCI) dma_device: the registration must be refused. A provider peer
# check (violation) catches it when present; otherwise the scenario itself sees an MR mapped for
# a non-PCI device and fails naming the dev_is_pci rule.
bad_no_pci() {
    local out rc=0
    bad_reload_emus || return 1
    modprobe $BAD bug=no_pci_check persistent_api_support=0 || return 1
    out=$($NVPEER emu scenario non-pci --module $BAD 2>&1) || rc=$?
    echo "$out"
    bad_reload_emus >/dev/null 2>&1
    [ $rc != 0 ] || { echo "bug=no_pci_check NOT caught: non-PCI dma_device accepted silently"; return 1; }
    echo "$out" | grep -qE 'dev_is_pci|not_pci|wrong_peer' || {
        echo "failure message does not name the dev_is_pci rule"; return 1; }
    echo "bug=no_pci_check caught: $(echo "$out" | grep -oE '(FAIL|caught).*' | head -n 1)"
}

tb_expect_begin 'VIOLATION|peer_mem_emu|nvp2p_emu|bad_peer|WARNING:.*dma'
tb_case put_in_callback        bad_case put_in_callback    inval   5.5 0 free-then-dereg        call_in_callback
tb_case unmap_in_callback      bad_case unmap_in_callback  inval   5.5 0 free-then-dereg        'call_in_callback'
tb_case unmap_unserialized     bad_case unmap_unserialized inval   5.5 0 dereg-vs-free-in-unmap 'unmap_races_teardown|freed_table|stale_mapping'
tb_case wrong_process_put      bad_case wrong_process_put  inval   5.5 0 dereg-other-pid        wrong_process_put
tb_case leaked_pin             bad_case leaked_pin         persist 5.5 0 basic                  leaked_pin
tb_case mutate_client          bad_case mutate_client      inval   5.5 0 basic                  client_modified
tb_case bad_sg_len             bad_case bad_sg_len         inval   5.5 0 basic                  sg_entry
tb_case bad_nmap               bad_case bad_nmap           persist 5.5 0 basic                  sg_nmap
# The fake HCA reads every SG entry against the provider's DMA mapping of the range.
tb_case sg_off_by_page         bad_case sg_off_by_page     persist 5.5 0 basic                  sg_dma
# The provider's DMA-stopped probe (peer_mem_emu_dma_stopped, looked up after each free callback).
tb_case no_invalidate          bad_case no_invalidate      inval   5.5 0 free-then-dereg        dma_not_stopped
tb_case no_pci_check           bad_no_pci
tb_case legacy_deadlock        bad_case legacy_deadlock    inval   5.1 0 dereg-vs-free-in-stop  deadlock
tb_case unaligned              bad_unaligned
tb_case missing_op             bad_missing_op
rmmod peer_mem_emu 2>/dev/null; rmmod nvp2p_emu 2>/dev/null
tb_expect_end

# Validation harness (nvpeer validate / nvpeer bench) run for real over soft-RoCE: rxe on a veth
# pair whose ends live in two network namespaces (set up in this suite, as 00-smoke does), loopback on one device
# and two-node mode across the namespaces; then the emulated-GPU registration path through
# nvp2p_emu + peer_mem_emu + a peer client, with the allocation matrix (validate's reg.kind cases:
# each --alloc kind as the provider emulator models it, in both client modes). Sizes and iteration
# counts are small: the guest moves about 1 MiB/s over rxe.
# bench: check-kernel stock
# bench: budget stock 145 145
# bench: budget-full - 150 150

HV_A=10.99.0.1
HV_B=10.99.0.2
OUT=/bench/harness
mkdir -p "$OUT"

hv_rxe_up() {
    modprobe rdma_rxe || return 1
    mkdir -p /run/netns
    ip netns add hva && ip netns add hvb || return 1
    ip link add hveth-a type veth peer name hveth-b || return 1
    ip link set hveth-a netns hva && ip link set hveth-b netns hvb || return 1
    ip -n hva addr add $HV_A/24 dev hveth-a && ip -n hvb addr add $HV_B/24 dev hveth-b || return 1
    ip -n hva link set hveth-a up && ip -n hvb link set hveth-b up && ip -n hva link set lo up && ip -n hvb link set lo up
    ip netns exec hva rdma link add rxea type rxe netdev hveth-a || return 1
    ip netns exec hvb rdma link add rxeb type rxe netdev hveth-b || return 1
    # Wait for both ports to become ACTIVE and get their IPv4-mapped GIDs.

    for _ in $(seq 1 30); do
        if grep -qi active /sys/class/infiniband/rxea/ports/1/state 2>/dev/null &&
           grep -qi active /sys/class/infiniband/rxeb/ports/1/state 2>/dev/null; then
            rdma link show; return 0
        fi
        sleep 1
    done
    echo "rxe ports did not become ACTIVE"; rdma link show; return 1
}

hv_rxe_down() {
    ip netns exec hva rdma link delete rxea 2>/dev/null
    ip netns exec hvb rdma link delete rxeb 2>/dev/null
    ip netns del hva 2>/dev/null; ip netns del hvb 2>/dev/null
    tb_rdma_unload
    true
}

# Every case prints the harness output; success = exit 0 and a closing "N passed, 0 failed" line.
hv_validate_loopback() {
    ip netns exec hva "$NVPEER" validate --mem host -d rxea --max-size 256K --xfer-size 16K \
        --small-mrs 16 --churn 8 --junit "$OUT/validate-loopback.xml" | tee "$OUT/validate-loopback.txt"
    local rc=${PIPESTATUS[0]}
    grep -q '^[1-9][0-9]* passed, 0 failed' "$OUT/validate-loopback.txt" || return 1
    # The environment block names the NIC, and the JUnit file has one test case per case.
    grep -qE '^  nic +rxea$' "$OUT/validate-loopback.txt" || { echo "no environment block"; return 1; }
    python3 -S - "$OUT/validate-loopback.xml" "$OUT/validate-loopback.txt" <<'PY' || return 1
import sys
import xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot().find("testsuite")
cases = s.findall("testcase")
text = open(sys.argv[2]).read()
ran = sum(text.count("\n" + t + " ") for t in ("PASS", "FAIL", "SKIP"))
assert len(cases) == ran == int(s.get("tests")), (len(cases), ran, s.get("tests"))
assert s.get("failures") == "0", s.get("failures")
props = {p.get("name"): p.get("value") for p in s.find("properties")}
assert props.get("nic") == "rxea" and "kernel" in props, props
print("junit ok:", len(cases), "cases")
PY
    # Every operation must have run and passed.
    local op
    for op in write write-imm read send-recv; do
        grep -q "^PASS xfer\.$op\.host->host" "$OUT/validate-loopback.txt" || { echo "xfer.$op did not pass"; return 1; }
    done
    return "$rc"
}

# The server listens on the link's address (loopback is its default) and serves clients until
# stopped: a client with a wrong token is refused (exit 2, the server keeps serving), then the
# real client runs, then the server is stopped.
hv_validate_two_node() {
    NVPEER_TOKEN=hv-secret ip netns exec hva "$NVPEER" validate --server --bind $HV_A -d rxea -p 18601 \
        >"$OUT/validate-server.txt" 2>&1 &
    local srv=$!
    local bad
    bad=$(NVPEER_TOKEN=wrong ip netns exec hvb "$NVPEER" validate --client $HV_A -p 18601 --mem host -d rxeb \
        --only reg.sizes 2>&1)
    local brc=$?
    echo "$bad" | grep -q 'FAIL oob.connect' && [ "$brc" = 2 ] || { echo "wrong token: rc $brc: $bad"; kill $srv; return 1; }
    NVPEER_TOKEN=hv-secret ip netns exec hvb "$NVPEER" validate --client $HV_A -p 18601 --mem host -d rxeb \
        --max-size 64K --xfer-size 16K --small-mrs 8 --churn 4 | tee "$OUT/validate-client.txt"
    local rc=${PIPESTATUS[0]}
    kill $srv; wait $srv
    echo "client exit $rc"; cat "$OUT/validate-server.txt"
    # (the client checks the server's proof first, and leaves: another token)
    echo "$bad" | grep -q 'the server did not prove the shared token' || { echo "wrong token: the client did not say why: $bad"; return 1; }
    grep -q 'the client left at the challenge' "$OUT/validate-server.txt" || { echo "the wrong token's client not logged"; return 1; }
    grep -q 'said bye after' "$OUT/validate-server.txt" || { echo "client not logged"; return 1; }
    [ "$rc" = 0 ] && grep -q '^PASS xfer\.read\.host->host' "$OUT/validate-client.txt"
}

hv_validate_json() {
    ip netns exec hva "$NVPEER" validate --mem host -d rxea --json --only reg.sizes,cap. --max-size 64K \
        >"$OUT/validate.json" || return 1
    python3 -S - "$OUT/validate.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = [c["name"] for c in d["cases"]]
assert d["summary"]["failed"] == 0, d["summary"]
assert "reg.sizes[ibv_reg_mr]" in names and "cap.rdma-device" in names, names
assert all(c["status"] in ("pass", "skip") for c in d["cases"])
print("json ok:", d["summary"])
PY
}

hv_bench_two_node() {
    # All five tests against the server, -m 1024 negotiated down from nothing higher; the JSON
    # document carries perftest's test_info + results per test.
    NVPEER_TOKEN=hv-secret ip netns exec hva "$NVPEER" bench --server --bind $HV_A --once -d rxea -p 18602 \
        >"$OUT/bench-server.txt" 2>&1 &
    local srv=$!
    NVPEER_TOKEN=hv-secret ip netns exec hvb "$NVPEER" bench --client $HV_A -p 18602 --mem host -d rxeb \
        --test reg,write_bw,read_bw,send_bw,write_lat -s 4096 -n 20 -t 8 -m 1024 --no-progress \
        --json >"$OUT/bench.json"
    local rc=$?
    wait $srv; local src=$?
    [ "$rc" = 0 ] && [ "$src" = 0 ] || { echo "client $rc server $src"; cat "$OUT/bench-server.txt"; return 1; }
    python3 -S - "$OUT/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["test"]: x for x in d["tests"]}
for k in ("reg", "write_bw", "read_bw", "send_bw", "write_lat"):
    assert k in t and "error" not in t[k], (k, t.get(k))
for k, name in (("write_bw", "RDMA_Write_BW_Test"), ("read_bw", "RDMA_Read_BW_Test"), ("send_bw", "Send_BW_Test")):
    r = t[k]["results"][0]
    assert r["MsgSize"] == 4096 and r["n_iterations"] == 20 and r["BW_average"] > 0, r
    assert set(r) == {"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}, r
    i = t[k]["test_info"]
    assert i["test"] == name and i["Mtu"] == 1024 and i["TX_depth"] == 8 and i["Link_type"] == "Ethernet", i
    # Registered with relaxed ordering, as perftest by default (rxe takes the optional flag).
    assert i["PCIe_relax_order"] == "ON", i
assert t["read_bw"]["test_info"]["Outstand_reads"] >= 1
lat = t["write_lat"]["results"][0]
assert lat["t_typical"] > 0 and "percentile_99.9" in lat, lat
print("bench json ok")
PY
}

hv_bench_sweep() {
    ip netns exec hva "$NVPEER" bench --mem host -d rxea --test write_bw -a --max-size 16K -n 5 --no-progress |
        tee "$OUT/bench-sweep.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || return 1
    grep -q 'BW peak\[MiB/sec\]' "$OUT/bench-sweep.txt" || return 1
    # 2 .. 16384: 14 rows.
    [ "$(grep -cE '^ [0-9]+ +5 ' "$OUT/bench-sweep.txt")" = 14 ]
}

hv_bench_duration() {
    # perftest's -D: a timed run (no margin here), no peak, iterations counted; two QP pairs (-q).
    ip netns exec hva "$NVPEER" bench --mem host -d rxea --test read_bw -D 2 -f 0 -t 16 -o 4 -q 2 \
        --no-progress --json >"$OUT/bench-duration.json" || return 1
    python3 -S - "$OUT/bench-duration.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["tests"][0]
r = t["results"][0]
assert r["BW_peak"] == 0 and r["n_iterations"] > 0 and r["BW_average"] > 0, r
assert t["test_info"]["Outstand_reads"] <= 4 and t["test_info"]["Number_of_qps"] == 2, t["test_info"]
print("duration run:", r)
PY
}

hv_bench_bidirectional() {
    # perftest's -b, loopback (both sides' QPs in one process) and two-node (the server, started
    # with -b, runs its half when asked): every bandwidth test, perftest's bidirectional names, the
    # figures of this side's -n; then a client without -b refused by a -b server (exit 2). The
    # two-node run warms up (--perform_warm_up: the client's plan carries it, the server's half
    # warms up too; send_bw ignores it, as perftest's does), and its figures stay those of -n.
    ip netns exec hva "$NVPEER" bench --mem host -d rxea -b --test write_bw,read_bw,send_bw -s 4096 \
        -n 20 -t 8 --no-progress --json >"$OUT/bench-bidir-loopback.json" || { echo "loopback -b failed"; return 1; }
    NVPEER_TOKEN=hv-secret ip netns exec hva "$NVPEER" bench --server -b --bind $HV_A --once -d rxea -p 18603 \
        >"$OUT/bench-bidir-server.txt" 2>&1 &
    local srv=$!
    NVPEER_TOKEN=hv-secret ip netns exec hvb "$NVPEER" bench --client $HV_A -p 18603 --mem host -d rxeb -b \
        --test write_bw,read_bw,send_bw -s 4096 -n 20 -t 8 --perform_warm_up --no-progress --json >"$OUT/bench-bidir.json"
    local rc=$?
    wait $srv; local src=$?
    [ "$rc" = 0 ] && [ "$src" = 0 ] || { echo "client $rc server $src"; cat "$OUT/bench-bidir-server.txt"; return 1; }
    grep -q "running this side's half" "$OUT/bench-bidir-server.txt" || { echo "the server ran no half"; return 1; }
    python3 -S - "$OUT/bench-bidir-loopback.json" "$OUT/bench-bidir.json" <<'PY' || return 1
import json, sys
for f in sys.argv[1:]:
    t = {x["test"]: x for x in json.load(open(f))["tests"]}
    for k, name in (("write_bw", "RDMA_Write_Bidirectional_BW_Test"),
                    ("read_bw", "RDMA_Read_Bidirectional_BW_Test"),
                    ("send_bw", "Send_Bidirectional_BW_Test")):
        assert k in t and "error" not in t[k], (f, k, t.get(k))
        r, i = t[k]["results"][0], t[k]["test_info"]
        assert r["MsgSize"] == 4096 and r["n_iterations"] == 20 and r["BW_average"] > 0, (f, r)
        assert i["test"] == name, (f, i)
    assert t["send_bw"]["test_info"]["RX_depth"] == 20, (f, t["send_bw"]["test_info"])
print("bidirectional json ok")
PY
    # A mismatch is refused at the hello: the client exits 2 and says what to change; the server
    # (--once counts only a served client) is stopped here.
    NVPEER_TOKEN=hv-secret ip netns exec hva "$NVPEER" bench --server -b --bind $HV_A --once -d rxea -p 18604 \
        >"$OUT/bench-bidir-mismatch-server.txt" 2>&1 &
    srv=$!
    local out
    out=$(NVPEER_TOKEN=hv-secret ip netns exec hvb "$NVPEER" bench --client $HV_A -p 18604 --mem host -d rxeb \
        --test write_bw -s 4096 -n 20 --no-progress 2>&1); rc=$?
    kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
    [ "$rc" = 2 ] && echo "$out" | grep -q "started with -b" || { echo "mismatch: exit $rc: $out"; return 1; }
    grep -q 'refused: this server was started with -b' "$OUT/bench-bidir-mismatch-server.txt" ||
        { echo "refusal not logged"; cat "$OUT/bench-bidir-mismatch-server.txt"; return 1; }
    echo "mismatch refused: $out"
}

hv_bad_input() {
    local out rc
    out=$("$NVPEER" validate --max-size 0 2>&1) && { echo "accepted --max-size 0"; return 1; }
    echo "$out" | grep -q 'at least 1 byte' || { echo "$out"; return 1; }
    out=$("$NVPEER" bench --gpu zz:00 2>&1) && { echo "accepted --gpu zz:00"; return 1; }
    echo "$out" | grep -q 'PCI bus id' || { echo "$out"; return 1; }
    # -t is perftest's TX depth now; the tests are --test.
    out=$("$NVPEER" bench -t write_bw 2>&1) && { echo "accepted -t write_bw"; return 1; }
    echo "$out" | grep -q "invalid value .write_bw. for .--tx-depth" || { echo "$out"; return 1; }
    out=$("$NVPEER" bench -m 1500 2>&1) && { echo "accepted -m 1500"; return 1; }
    echo "$out" | grep -q "256, 512, 1024, 2048, 4096" || { echo "$out"; return 1; }
    out=$("$NVPEER" validate --mem host -d nosuchdev 2>&1); rc=$?
    [ "$rc" = 2 ] || { echo "missing device: exit $rc, expected 2 (could not run)"; return 1; }
    echo "$out" | grep -q "not found" || { echo "$out"; return 1; }
    # Its fault code (docs/operations.md) on the failed case's line.
    echo "$out" | grep -qE '^FAIL cap\.rdma-device .*\[NVP-V002\]$' || { echo "no fault code: $out"; return 1; }
    # One missing prerequisite is named once; the cases it blocks are counted, not failed.
    [ "$(echo "$out" | grep -c '^FAIL')" = 1 ] && echo "$out" | grep -qE '^NOT RUN [0-9]+ case' ||
        { echo "$out"; return 1; }
    # Sizes and indexes are refused, never truncated.
    local a
    for a in "bench -s 4G" "bench -x 300" "validate --xfer-size 4G" "bench -a --max-size 4G --test write_bw"; do
        # shellcheck disable=SC2086
        out=$("$NVPEER" $a 2>&1); rc=$?
        [ "$rc" = 2 ] || { echo "$a: exit $rc: $out"; return 1; }
    done
    # A server bound to the network needs a token (or --allow-any-peer).
    out=$("$NVPEER" validate --server --bind 0.0.0.0 2>&1); rc=$?
    [ "$rc" = 2 ] && echo "$out" | grep -q -- '--token' || { echo "unprotected bind: $rc $out"; return 1; }
    # A closed pipe ends the CLI quietly (no panic, no exit 101).
    out=$( { "$NVPEER" validate --mem host -d nosuchdev | head -c 1 >/dev/null; } 2>&1)
    echo "$out" | grep -q panicked && { echo "$out"; return 1; }
    echo "bad input rejected cleanly"
}

# ---- emulated GPU memory: registration through peer_mem_emu and the loaded peer client
# The client is nvpeer; NVPEER_HARNESS_CLIENT=classic_peer runs the same cases on the bench's C
# baseline by hand (never a fallback: an nvpeer that does not load fails emu-setup).
HV_CLIENT=${NVPEER_HARNESS_CLIENT:-nvpeer}
hv_emu_up() {
    case "$HV_CLIENT" in nvpeer | classic_peer) ;; *) echo "NVPEER_HARNESS_CLIENT=$HV_CLIENT: nvpeer or classic_peer"; return 1 ;; esac
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    modprobe "$HV_CLIENT" || { echo "the peer client $HV_CLIENT could not be loaded"; return 1; }
    echo "peer client: $HV_CLIENT"; "$NVPEER" emu core clients
}

# hv_mode_source FILE MODE: the PASS line of inval.free-idle says where the harness took the client
# mode from: nvpeer's debugfs config (persistent_api_support=MODE); classic_peer's parameter is
# not one the harness reads (it reads nvpeer's and NVIDIA's), so from the emulated core.
hv_mode_source() {
    local line
    line=$(grep '^PASS inval.free-idle\[peer_mem_emu\]' "$1")
    if [ "$HV_CLIENT" = nvpeer ]; then
        echo "$line" | grep -q "client mode from the loaded module: persistent_api_support=$2" ||
            { echo "the client mode ($2) was not read from nvpeer's config: $line"; return 1; }
        grep -qE "^  client mode +$([ "$2" = 1 ] && echo persistent || echo invalidating)\$" "$1" ||
            { echo "no client mode in the environment block"; return 1; }
    else
        echo "$line" | grep -q 'client mode not published .*: taken from the emulated core' ||
            { echo "classic_peer: the client mode should come from the emulated core: $line"; return 1; }
    fi
}

hv_emu_no_client() {
    # Without a client the registration must fail with an explanation, not crash.
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    local out
    out=$("$NVPEER" validate --mem emu --only reg.sizes --max-size 64K 2>&1)
    local rc=$?
    echo "$out"
    rmmod peer_mem_emu nvp2p_emu
    # A missing client is a missing prerequisite: named once, exit 2 (could not run).
    [ "$rc" = 2 ] && echo "$out" | grep -q 'probable cause: .*peer' 
}

hv_validate_emu() {
    "$NVPEER" validate --mem emu --max-size 1M --small-mrs 16 --churn 8 | tee "$OUT/validate-emu.txt"
    local rc=${PIPESTATUS[0]}
    grep -q '^PASS inval.free-idle\[peer_mem_emu\]' "$OUT/validate-emu.txt" || { echo "invalidation case did not pass"; return 1; }
    # The real detection path: the case's expectation came from what nvpeer publishes (its debugfs
    # config), as on a node, and the environment block names the mode.
    hv_mode_source "$OUT/validate-emu.txt" 1 || return 1
    grep -q '^PASS reg.offsets\[peer_mem_emu\]' "$OUT/validate-emu.txt" || return 1
    hv_kind_matrix "$OUT/validate-emu.txt" || return 1
    return "$rc"
}

# hv_kind_matrix FILE: the allocation matrix on the emulator (validate's reg.kind cases, every
# --alloc kind): the kinds NVIDIA's P2P API pins registered through the peer client, the others
# refused by the provider's get_pages; each a PASS that says which.
hv_kind_matrix() {
    local k line
    for k in mem-alloc vmm-rdma pool vmm managed host-pinned; do
        line=$(grep "^PASS reg.kind\[$k\]\[peer_mem_emu\]" "$1") || { echo "no PASS reg.kind[$k]: $(grep "reg.kind\[$k\]" "$1")"; return 1; }
        case $k in
            mem-alloc | vmm-rdma) echo "$line" | grep -q 'registered through the peer client, mapped' ;;
            *) echo "$line" | grep -q 'refused, as NVIDIA.s driver refuses it: .*get_pages failed in the provider [1-9]' ;;
        esac || { echo "reg.kind[$k]: not the expected outcome: $line"; return 1; }
    done
    echo "allocation matrix on the emulator: 2 kinds registered, 4 refused by get_pages"
}

hv_validate_emu_invalidating() {
    # With persistent_api_support=0 the client registers an invalidating nv_mem: freeing the
    # emulated GPU memory must revoke the MR through the core's invalidate (counted by the core per
    # MR; the default doca3 core keeps no num_free_callbacks in sysfs).
    rmmod "$HV_CLIENT" && modprobe "$HV_CLIENT" persistent_api_support=0 || return 1
    "$NVPEER" validate --mem emu --only inval,reg.sizes,reg.kind --max-size 256K | tee "$OUT/validate-emu-inval.txt"
    local rc=${PIPESTATUS[0]}
    hv_kind_matrix "$OUT/validate-emu-inval.txt" || return 1
    grep '^PASS inval.free-idle\[peer_mem_emu\]' "$OUT/validate-emu-inval.txt" | grep -v 'persistent client' |
        grep -qE 'state (invalidated|unmapped|torn-down), [1-9][0-9]* invalidation' || { echo "no revoke seen"; return 1; }
    hv_mode_source "$OUT/validate-emu-inval.txt" 0 || return 1
    return "$rc"
}

hv_bench_emu() {
    "$NVPEER" bench --mem emu --test reg -a --max-size 1M -n 10 --no-progress | tee "$OUT/bench-emu.txt"
    [ "${PIPESTATUS[0]}" = 0 ] && grep -q '^ 1048576 ' "$OUT/bench-emu.txt"
}

hv_emu_down() {
    rmmod "$HV_CLIENT" && rmmod peer_mem_emu && rmmod nvp2p_emu
}

tb_case emu-no-client hv_emu_no_client
if hv_rxe_up >"$OUT/rxe-setup.txt" 2>&1; then
    tb_result rxe-setup pass "rxea/rxeb over veth in netns hva/hvb"
    tb_case bad-input hv_bad_input
    tb_case validate-host-loopback hv_validate_loopback
    tb_case validate-host-two-node hv_validate_two_node
    tb_case validate-host-json hv_validate_json
    tb_case bench-host-two-node hv_bench_two_node
    tb_case bench-host-sweep hv_bench_sweep
    tb_case bench-host-duration hv_bench_duration
    tb_case bench-host-bidirectional hv_bench_bidirectional
else
    tb_result rxe-setup fail "$(tail -n 5 "$OUT/rxe-setup.txt")"
fi
hv_rxe_down
if hv_emu_up >"$OUT/emu-setup.txt" 2>&1; then
    tb_result emu-setup pass "$(tail -n 2 "$OUT/emu-setup.txt" | tr '\n' ' ')"
    tb_case validate-emu hv_validate_emu
    tb_case bench-emu-reg hv_bench_emu
    tb_case validate-emu-invalidating hv_validate_emu_invalidating
    tb_case emu-unload hv_emu_down
else
    tb_result emu-setup fail "$(tail -n 5 "$OUT/emu-setup.txt")"
    rmmod nvpeer classic_peer peer_mem_emu nvp2p_emu 2>/dev/null
fi
true

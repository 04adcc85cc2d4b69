#!/bin/bash
# `nvpeer bench` paired with Debian's perftest over rxe, in both roles: nvpeer as the client of
# ib_write_bw / ib_read_bw servers (--perftest), and ib_write_bw / ib_read_bw clients against
# `nvpeer bench --server`. Each pairing must finish on both sides with a figure, and perftest's
# --out_json and nvpeer's must have the same result keys, and a perftest server must have received
# nvpeer's report. Runs inside the bench VM as root; needs
# rdma_rxe, iproute2, perftest, python3.
#
#   perftest-interop.sh [SIZE] [ITERS] [OUT_DIR]    defaults: 65536 100 /bench/harness
set -u
SIZE=${1:-65536}
ITERS=${2:-100}
OUT=${3:-/bench/harness}
NVPEER=${NVPEER:-/bench/bin/nvpeer}
A=10.99.2.1
mkdir -p "$OUT"
. "$(dirname "$0")/rxe-pair.inc"
trap 'rxe_pair_down pia pib' EXIT
rxe_pair_up pia pib $A 10.99.2.2 || { echo "perftest-interop: rxe setup failed"; exit 1; }

fails=0
# check NAME CLIENT_RC SERVER_RC: both sides must have exited 0.
check() {
    if [ "$2" = 0 ] && [ "$3" = 0 ]; then
        echo "ok   $1"
    else
        echo "FAIL $1 (client exit $2, server exit $3)"
        tail -n 15 "$OUT/interop-$1".*.txt
        fails=$((fails + 1))
    fi
}

# nvpeer client, perftest server.
for tool in ib_write_bw ib_read_bw; do
    test=${tool#ib_}
    name="nvpeer-to-$tool"
    ip netns exec pia "$tool" -d rxepia -s "$SIZE" -F -p 18711 --out_json \
        --out_json_file "$OUT/interop-$name.perftest.json" >"$OUT/interop-$name.server.txt" 2>&1 &
    srv=$!
    ip netns exec pib "$NVPEER" bench --client $A --perftest -p 18711 -d rxepib --test "$test" \
        -s "$SIZE" -n "$ITERS" --no-progress --out_json_file "$OUT/interop-$name.json" \
        >"$OUT/interop-$name.client.txt" 2>&1
    rc=$?
    wait $srv
    check "$name" $rc $?
done

# listening NETNS PORT: waits up to 20 s for a TCP listener (perftest's client connects once).
listening() {

    for _ in $(seq 1 100); do
        ip netns exec "$1" ss -ltnH "sport = :$2" 2>/dev/null | grep -q . && return 0
        sleep 0.2
    done
    return 1
}

# perftest client, nvpeer server.
for tool in ib_write_bw ib_read_bw; do
    name="$tool-to-nvpeer"
    # perftest sends no token: the server admits any peer, and serves one client (--once).
    ip netns exec pia "$NVPEER" bench --server --bind $A --allow-any-peer --once -d rxepia -s "$SIZE" -p 18712 \
        >"$OUT/interop-$name.server.txt" 2>&1 &
    srv=$!
    listening pia 18712 || echo "perftest-interop: the nvpeer server is not listening on 18712"
    ip netns exec pib "$tool" -d rxepib -s "$SIZE" -n "$ITERS" -F -p 18712 --out_json \
        --out_json_file "$OUT/interop-$name.perftest.json" $A >"$OUT/interop-$name.client.txt" 2>&1
    rc=$?
    wait $srv
    check "$name" $rc $?
    grep -q 'perftest client finished' "$OUT/interop-$name.server.txt" ||
        { echo "FAIL $name: the nvpeer server printed no client report"; fails=$((fails + 1)); }
done

# Every pairing's JSON: a figure, and perftest's result keys are nvpeer's.
python3 -S - "$OUT" "$SIZE" "$ITERS" <<'PY' || fails=$((fails + 1))
import json, sys
out, size, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(n):
    return json.load(open(f"{out}/interop-{n}"))
for tool in ("ib_write_bw", "ib_read_bw"):
    ours = load(f"nvpeer-to-{tool}.json")
    theirs = load(f"{tool}-to-nvpeer.perftest.json")
    for d, who in ((ours, "nvpeer"), (theirs, tool)):
        r = d["results"]
        assert r["MsgSize"] == size and r["BW_average"] > 0, (who, r)
    assert ours["results"]["n_iterations"] == iters, ours
    # The perftest server printed the report nvpeer handed it at the end.
    seen = load(f"nvpeer-to-{tool}.perftest.json")["results"]
    assert abs(seen["BW_average"] - ours["results"]["BW_average"]) < 0.01, (seen, ours["results"])
    assert set(ours["results"]) == set(theirs["results"]), (set(ours["results"]), set(theirs["results"]))
    missing = set(theirs["test_info"]) - set(ours["test_info"])
    assert ours["test_info"]["test"] == theirs["test_info"]["test"], (ours["test_info"], theirs["test_info"])
    print(f"{tool}: nvpeer client {ours['results']['BW_average']:.2f}, perftest client "
          f"{theirs['results']['BW_average']:.2f} MiB/s average; test_info keys perftest has and nvpeer "
          f"lacks: {sorted(missing) or 'none'}")
    # perftest's --out_json shape: every test_info key it writes, nvpeer writes too.
    assert not missing, (tool, sorted(missing))
PY
[ "$fails" = 0 ] && echo "perftest interop: 4 pairings passed"
exit "$fails"

#!/bin/bash
# Host-memory RDMA WRITE bandwidth of `nvpeer bench` against `ib_write_bw`, over the same rxe link in
# the same VM, in one run (a benchmark: it prints both figures and their ratio; it asserts nothing
# about the ratio). Runs inside the bench VM as root; needs rdma_rxe, iproute2, perftest.
#
#   bw-vs-perftest.sh [SIZE] [ITERS] [OUT_DIR] [ROUNDS]    defaults: 65536 200 /bench/harness 5
set -u
SIZE=${1:-65536}
ITERS=${2:-200}
OUT=${3:-/bench/harness}
ROUNDS=${4:-5}
NVPEER=${NVPEER:-/bench/bin/nvpeer}
A=10.99.1.1
mkdir -p "$OUT"

. "$(dirname "$0")/rxe-pair.inc"
down() { rxe_pair_down bwa bwb; }
trap down EXIT

rxe_pair_up bwa bwb $A 10.99.1.2 || { echo "bw-vs-perftest: rxe setup failed"; exit 1; }

# One measurement of each tool; both print "<figure>" (BW average, MiB/s) or nothing.
perftest_once() { # round
    ip netns exec bwa ib_write_bw -d rxebwa -s "$SIZE" -n "$ITERS" -F -p 18701 >"$OUT/perftest-server.$1.txt" 2>&1 &
    local srv=$!
    sleep 2
    ip netns exec bwb ib_write_bw -d rxebwb -s "$SIZE" -n "$ITERS" -F -p 18701 $A >"$OUT/perftest-client.$1.txt" 2>&1
    local rc=$?
    wait $srv
    [ $rc = 0 ] || { echo "ib_write_bw exited $rc (round $1)" >&2; return 1; }
    # Result row: "<bytes> <iters> <peak> <avg> <msgrate>".
    awk -v s="$SIZE" '$1 == s && NF >= 5 { print $4 }' "$OUT/perftest-client.$1.txt" | tail -n 1
}
nvpeer_once() { # round
    # The server listens on the link's address, for one client holding the shared token.
    NVPEER_TOKEN=bw-vs-perftest ip netns exec bwa "$NVPEER" bench --server --bind $A --once -d rxebwa -p 18702 \
        >"$OUT/nvpeer-server.$1.txt" 2>&1 &
    local srv=$!
    NVPEER_TOKEN=bw-vs-perftest ip netns exec bwb "$NVPEER" bench --client $A -p 18702 -d rxebwb --mem host --test write_bw -s "$SIZE" -n "$ITERS" \
        --no-progress --out_json_file "$OUT/nvpeer-bw.$1.json" >"$OUT/nvpeer-client.$1.txt" 2>&1
    local rc=$?
    wait $srv
    [ $rc = 0 ] || { echo "nvpeer bench exited $rc (round $1)" >&2; return 1; }
    python3 -S -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f" % float(d["results"]["BW_average"]))' \
        "$OUT/nvpeer-bw.$1.json"
}

# The link is emulated (rxe over veth in a TCG guest on a shared host): one sample of each tool
# differs by 10% from run to run. Alternate the tools ROUNDS times, the order flipping each round,
# and compare medians.
pts=() nvs=()
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
        p=$(perftest_once "$r") && n=$(nvpeer_once "$r")
    else
        n=$(nvpeer_once "$r") && p=$(perftest_once "$r")
    fi || { cat "$OUT"/perftest-client.*.txt "$OUT"/nvpeer-client.*.txt 2>/dev/null | tail -n 40; exit 1; }
    [ -n "$p" ] && [ -n "$n" ] || { echo "bw-vs-perftest: round $r produced no figure"; exit 1; }
    echo "round $r: ib_write_bw $p MiB/s, nvpeer bench $n MiB/s"
    pts+=("$p") nvs+=("$n")
done
echo "size=$SIZE iterations=$ITERS rounds=$ROUNDS (figures: BW average, MiB/s)"
python3 -S - "${pts[*]}" "${nvs[*]}" <<'PY'
import sys
p = [float(x) for x in sys.argv[1].split()]
n = [float(x) for x in sys.argv[2].split()]
med = lambda v: sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
print(f"ib_write_bw   BW average [MiB/s]: median {med(p):.2f} (min {min(p):.2f}, max {max(p):.2f})")
print(f"nvpeer bench  BW average [MiB/s]: median {med(n):.2f} (min {min(n):.2f}, max {max(n):.2f})")
print(f"ratio nvpeer/ib_write_bw: {med(n) / med(p):.3f} (of medians; per round: "
      + ", ".join(f"{b / a:.3f}" for a, b in zip(p, n)) + ")")
PY

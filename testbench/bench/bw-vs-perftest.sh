#!/bin/bash
# Host-memory RDMA WRITE bandwidth of `nvpeer bench` against `ib_write_bw`, over the same rxe link in
# the same VM, in one run (a benchmark: it prints both figures and their ratio; it asserts nothing
# about the ratio). Runs inside the bench VM as root; needs rdma_rxe, iproute2, perftest.
#
#   bw-vs-perftest.sh [SIZE] [ITERS] [OUT_DIR]      defaults: 65536 200 /bench/harness
set -u
SIZE=${1:-65536}
ITERS=${2:-200}
OUT=${3:-/bench/harness}
NVPEER=${NVPEER:-/bench/bin/nvpeer}
A=10.99.1.1
mkdir -p "$OUT" /run/netns

up() {
    modprobe rdma_rxe || return 1
    ip netns add bwa && ip netns add bwb || return 1
    ip link add bweth-a type veth peer name bweth-b || return 1
    ip link set bweth-a netns bwa && ip link set bweth-b netns bwb
    ip -n bwa addr add $A/24 dev bweth-a && ip -n bwb addr add 10.99.1.2/24 dev bweth-b
    ip -n bwa link set bweth-a up && ip -n bwb link set bweth-b up
    ip netns exec bwa rdma link add rxebwa type rxe netdev bweth-a || return 1
    ip netns exec bwb rdma link add rxebwb type rxe netdev bweth-b || return 1
    local i
    for i in $(seq 1 30); do
        grep -qi active /sys/class/infiniband/rxebwa/ports/1/state 2>/dev/null &&
            grep -qi active /sys/class/infiniband/rxebwb/ports/1/state 2>/dev/null && return 0
        sleep 1
    done
    return 1
}
down() {
    ip netns exec bwa rdma link delete rxebwa 2>/dev/null
    ip netns exec bwb rdma link delete rxebwb 2>/dev/null
    ip netns del bwa 2>/dev/null; ip netns del bwb 2>/dev/null
    true
}
trap down EXIT

up || { echo "bw-vs-perftest: rxe setup failed"; exit 1; }

# perftest: server in bwa, client in bwb; the client prints the result row.
ip netns exec bwa ib_write_bw -d rxebwa -s "$SIZE" -n "$ITERS" -F -p 18701 >"$OUT/perftest-server.txt" 2>&1 &
srv=$!
sleep 2
ip netns exec bwb ib_write_bw -d rxebwb -s "$SIZE" -n "$ITERS" -F -p 18701 $A >"$OUT/perftest-client.txt" 2>&1
prc=$?
wait $srv
# Result row: "<bytes> <iters> <peak> <avg> <msgrate>".
pt=$(awk -v s="$SIZE" '$1 == s && NF >= 5 { print $4 }' "$OUT/perftest-client.txt" | tail -n 1)

# nvpeer: same shape.
ip netns exec bwa "$NVPEER" bench --server -d rxebwa -p 18702 >"$OUT/nvpeer-server.txt" 2>&1 &
srv=$!
ip netns exec bwb "$NVPEER" bench --client $A -p 18702 -d rxebwb --mem host -t write_bw -s "$SIZE" -n "$ITERS" \
    --no-progress --out-json-file "$OUT/nvpeer-bw.json" >"$OUT/nvpeer-client.txt" 2>&1
nrc=$?
wait $srv
nv=$(python3 -S -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["tests"][0]["results"][0]["BW_average"])' \
    "$OUT/nvpeer-bw.json" 2>/dev/null)

echo "size=$SIZE iterations=$ITERS"
echo "ib_write_bw   BW average [MiB/s]: ${pt:-n/a} (exit $prc)"
echo "nvpeer bench  BW average [MiB/s]: ${nv:-n/a} (exit $nrc)"
if [ -n "$pt" ] && [ -n "$nv" ]; then
    python3 -S -c "import sys; p,n=float(sys.argv[1]),float(sys.argv[2]); print(f'ratio nvpeer/ib_write_bw: {n/p:.3f}' if p > 0 else 'ratio: n/a')" "$pt" "$nv"
    exit 0
fi
echo "bw-vs-perftest: one of the two runs produced no figure"; cat "$OUT/perftest-client.txt" "$OUT/nvpeer-client.txt"
exit 1

# A real consumer: Debian trixie's UCX 1.18.1 (testbench/lib/ucx-fetch.sh, bound at /ucx by
# testbench/vm when NVPEER_UCX is set) runs its own GPUDirect RDMA check on an rxe device, as a job
# launched with UCX does on every node: uct_ib_md_open_common (openucx/ucx src/uct/ib/base/ib_md.c)
# tests /sys/kernel/mm/memory_peers/nv_mem/version, /sys/module/nvidia_peermem/version and
# /sys/module/nv_peer_mem/version (the strings in the package's libuct_ib.so.0), and `ucx_info -d`
# lists `cuda` among the rxe memory domain's memory types when one exists. The check needs no CUDA
# support in UCX (trixie's is built without it). On the default core model (DOCA-OFED 3.x: no
# memory_peers):
#   - nothing loaded, or nvpeer under its own name: no cuda memory type;
#   - nvpeer as nvidia-peermem (the drop-in): cuda, and UCX's debug log names the file it found;
#   - UCX_IB_GPU_DIRECT_RDMA=yes with no peer module: UCX refuses the device with its own message;
#   - UCX_IB_GPU_DIRECT_RDMA=no beside the drop-in: no cuda (UCX's switch, the control).
# Run by hand: NVPEER_UCX=$(testbench/lib/ucx-fetch.sh) NVPEER_VM_KERNEL=stock testbench/vm run --suite 27-ucx
# bench: check-kernel stock
# bench: budget stock 15 15
# bench: budget-full - 60 60
. /src/testbench/suites/nvpeer-lib.sh.inc

UCX=/ucx
UCX_NS=ucxa
UCX_DEV=rxeucx
LIB=$(ls -d $UCX/usr/lib/*-linux-gnu 2>/dev/null | head -n1)

# ucx CMD...: a UCX tool from /ucx in the device's namespace, its libraries from /ucx (UCX loads
# its transport modules from the ucx/ directory beside libucs.so).
ucx() { ip netns exec $UCX_NS env LD_LIBRARY_PATH="$LIB" UCX_NET_DEVICES=$UCX_DEV:1 "$@"; }

ucx_present() {
    [ -x $UCX/usr/bin/ucx_info ] && [ -n "$LIB" ] ||
        { echo "no UCX at $UCX: run with NVPEER_UCX=\$(testbench/lib/ucx-fetch.sh) (make check does)"; return 1; }
    local v
    v=$(LD_LIBRARY_PATH="$LIB" $UCX/usr/bin/ucx_info -v | sed -n 's/^# Library version: //p')
    case $v in 1.1[89].* | 1.[2-9][0-9].*) ;; *) echo "UCX $v: the GPUDirect check of this suite needs >= 1.18"; return 1 ;; esac
    strings "$LIB/ucx/libuct_ib.so.0" | grep -q '^/sys/module/nvidia_peermem/version$' ||
        { echo "libuct_ib.so.0 does not test /sys/module/nvidia_peermem/version"; return 1; }
    echo "UCX $v from $UCX; libuct_ib.so.0 tests: $(strings "$LIB/ucx/libuct_ib.so.0" | grep -E '^/sys/(module|kernel/mm)/.*version$' | tr '\n' ' ')"
}

ucx_rxe_up() {
    modprobe rdma_rxe || return 1
    mkdir -p /run/netns
    ip netns add $UCX_NS || return 1
    ip link add ucxveth-a type veth peer name ucxveth-b || return 1
    ip link set ucxveth-a netns $UCX_NS && ip link set ucxveth-b up || return 1
    ip -n $UCX_NS addr add 10.99.7.1/24 dev ucxveth-a && ip -n $UCX_NS link set ucxveth-a up && ip -n $UCX_NS link set lo up || return 1
    ip netns exec $UCX_NS rdma link add $UCX_DEV type rxe netdev ucxveth-a || return 1

    for _ in $(seq 1 30); do
        grep -qi active /sys/class/infiniband/$UCX_DEV/ports/1/state 2>/dev/null && { rdma link show; return 0; }
        sleep 1
    done
    echo "$UCX_DEV did not become ACTIVE"; rdma link show; return 1
}

ucx_rxe_down() {
    ip netns exec $UCX_NS rdma link delete $UCX_DEV 2>/dev/null
    ip link delete ucxveth-b 2>/dev/null
    ip netns del $UCX_NS 2>/dev/null
    tb_rdma_unload
    true
}

# md_types [ENV...]: the memory-types line of the rxe memory domain in `ucx_info -d` (empty when
# the domain is missing); UCX's stderr in /tmp/ucx.err.
md_types() {
    ucx env "$@" $UCX/usr/bin/ucx_info -d >/tmp/ucx.out 2>/tmp/ucx.err
    awk -v d="$UCX_DEV" '/^# Memory domain:/ { md = ($4 == d) } md && /memory types:/ { sub(/^#[ \t]*memory types:[ \t]*/, ""); print; exit }' /tmp/ucx.out
}

# sees WANT [ENV...]: UCX's verdict on this node, WANT "cuda" or "host-only".
sees() {
    local want=$1 types
    shift
    types=$(md_types "$@")
    if [ -z "$types" ]; then
        echo "no memory domain $UCX_DEV in ucx_info -d:"; head -n 40 /tmp/ucx.out; tail -n 5 /tmp/ucx.err; return 1
    fi
    case "$want:$types" in
        cuda:*cuda*) echo "$UCX_DEV memory types: $types" ;;
        host-only:*cuda*) echo "UCX sees GPUDirect RDMA where it should not: $types"; return 1 ;;
        host-only:*) echo "$UCX_DEV memory types: $types (no cuda)" ;;
        *) echo "UCX does not see GPUDirect RDMA: $types"; tail -n 5 /tmp/ucx.err; return 1 ;;
    esac
}

# The file UCX's own check found (its debug log line "GPUDirect RDMA is detected by checking ...").
found_by() {
    sees cuda UCX_LOG_LEVEL=debug || return 1
    local line
    line=$(grep -h "GPUDirect RDMA is detected by checking" /tmp/ucx.out /tmp/ucx.err | head -n1)
    echo "$line" | grep -q "/sys/module/nvidia_peermem/version" || { echo "UCX's log: ${line:-no detection line}"; return 1; }
    echo "UCX: $(echo "$line" | sed 's/.*\(GPUDirect RDMA is\)/\1/')"
}

# UCX_IB_GPU_DIRECT_RDMA=yes and no peer module: UCX refuses the device with its own message.
required_refused() {
    md_types UCX_IB_GPU_DIRECT_RDMA=yes UCX_LOG_LEVEL=error >/dev/null
    local msg
    msg=$(grep -h "Couldn't enable GPUDirect RDMA" /tmp/ucx.out /tmp/ucx.err | head -n1)
    [ -n "$msg" ] || { echo "no refusal from UCX with UCX_IB_GPU_DIRECT_RDMA=yes:"; tail -n 10 /tmp/ucx.err; return 1; }
    echo "UCX: ${msg#*ERROR }"
}

ucx_down() { rmmod nvidia_peermem nvpeer 2>/dev/null; np_down; rmmod peer_mem_emu nvp2p_emu 2>/dev/null; true; }

tb_case ucx-present ucx_present
tb_case rxe-up ucx_rxe_up
# (tb_case records a verdict and returns 0: what follows needs both to have worked)
if [ -x $UCX/usr/bin/ucx_info ] && [ -e /sys/class/infiniband/$UCX_DEV ]; then
    ucx_down
    if modprobe nvp2p_emu && modprobe peer_mem_emu; then
        [ ! -e /sys/kernel/mm/memory_peers ] || tb_result doca3-model fail "memory_peers exists: not the default doca3 core model"
        tb_case nothing-loaded/host-only sees host-only
        tb_case nothing-loaded/gpu-direct-required-refused required_refused
        if modprobe nvpeer; then
            tb_case nvpeer-own-name/host-only sees host-only
            rmmod nvpeer
        else
            tb_result nvpeer-own-name/load fail "modprobe nvpeer failed: $(dmesg | tail -n 3 | tr '\n' ' ')"
        fi
        if modprobe nvidia-peermem; then
            tb_case dropin/cuda found_by
            tb_case dropin/gpu-direct-off-control sees host-only UCX_IB_GPU_DIRECT_RDMA=no
            rmmod nvidia_peermem
        else
            tb_result dropin/load fail "modprobe nvidia-peermem failed: $(dmesg | tail -n 3 | tr '\n' ' ')"
        fi
    else
        tb_result emulators fail "could not load the emulators"
    fi
    ucx_down
fi
ucx_rxe_down
true

# Detection: what the libraries that use GPUDirect RDMA conclude on this node, on the default core
# model (DOCA-OFED 3.x on a 7.x kernel: no /sys/kernel/mm/memory_peers, no name check). Each
# library decides from the files it tests (PROBES below; docs/compatibility.md, "Which library
# sees which path", cites each function): it sees peer memory when one of them exists.
#   - nvpeer as nvidia-peermem (the drop-in DKMS installs) passes every probe that a module can
#     pass on such a core (NCCL, its GIN/GDAKI path, UCX >= 1.18, UCC's TL/MLX5, NVSHMEM); the
#     memory_peers-only probes (older NCCL, UCX and UCC, Open MPI's openib) fail whatever module
#     is loaded, and the suite says so.
#   - nvpeer under its own name fails them all: the reason the drop-in exists.
#   - a second nv_mem provider (NVIDIA's nvidia_peermem, nv_peer_mem) is refused by nvpeer from
#     /sys/module, since this core accepts a second "nv_mem" and gives every registration to the
#     first.
# bench: check-kernel stock
# bench: budget stock 20 20
# bench: budget stock+oldest 15 15
# bench: budget stock-7.3 15 15
# bench: budget-full - 50 50
# bench: budget-full stock-7.3 10 10
# bench: budget-full stock+oldest 15 15
. /src/testbench/suites/nvpeer-lib.sh.inc

DROPIN=nvidia-peermem
SYSMOD=/sys/module/nvidia_peermem
# LIBRARY|FUNCTION (SOURCE FILE)|FILES it tests, in its order. The library names are the doctor's
# (`nvpeer doctor` -> peer.consumers), which dropin/doctor-agrees compares with these probes.
MP=/sys/kernel/mm/memory_peers
PROBES=(
    "NCCL|ncclIbGdrSupport (NVIDIA/nccl src/transport/net_ib/gdr.cc)|$MP/nv_mem/version $MP/nv_mem_nc/version /sys/module/nvidia_peermem/version"
    "NCCL GIN/GDAKI|ncclIbPeerMemSupport (NVIDIA/nccl src/transport/net_ib/gdr.cc, from gin.cc)|/sys/module/nvidia_peermem/version"
    "NCCL ≤ 2.22.3|ncclIbGdrSupport (NVIDIA/nccl v2.22.3-1 src/transport/net_ib.cc)|$MP/nv_mem/version $MP/nv_mem_nc/version"
    "UCX ≥ 1.18|uct_ib_md_open_common (openucx/ucx src/uct/ib/base/ib_md.c, PR 10123)|$MP/nv_mem/version /sys/module/nvidia_peermem/version /sys/module/nv_peer_mem/version"
    "UCX < 1.18|uct_ib_md_open_common (openucx/ucx src/uct/ib/base/ib_md.c, before PR 10123)|$MP/nv_mem/version"
    "UCC TL/MLX5 (mcast, alltoall)|ucc_tl_mlx5_check_gpudirect_driver_cuda (openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c, PR 1102)|$MP/nv_mem/version /sys/module/nvidia_peermem/version /sys/module/nv_peer_mem/version"
    "UCC mcast before #1102|ucc_tl_mlx5_check_gpudirect_driver (openucx/ucc src/components/tl/mlx5/mcast/tl_mlx5_mcast_team.c)|$MP/nv_mem/version"
    "NVSHMEM|nvshmemt_ib_common_nv_peer_mem_available (NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp)|$MP/nv_mem/version $MP/nvidia-peermem/version /sys/module/nvidia_peermem/version"
    "Open MPI btl_openib|btl_openib_register_mca_params (open-mpi/ompi opal/mca/btl/openib/btl_openib_mca.c)|$MP/nv_mem/version"
)

det_down() { rmmod nvidia_peermem nvpeer nv_peer_mem 2>/dev/null; np_down; }

det_emus() {
    det_down
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    dmesg | grep 'peer_mem_emu: loaded' | tail -n 1 | grep -q 'model doca3' || { echo "the core emulator's default model is not doca3"; return 1; }
}

# probe LIBRARY_ENTRY: prints the file that made the library see peer memory; fails if none.
probe() {
    local f
    for f in ${1##*|}; do
        [ -e "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# structural ENTRY: the probe reads only memory_peers, which no module can create on this core.
structural() { local f; for f in ${1##*|}; do [ "${f#"$MP"/}" != "$f" ] || return 1; done; }

# probes_case LABEL WANT: one result per library; WANT "seen" (every non-structural library sees
# peer memory) or "blind" (none does).
probes_case() {
    local label=$1 want=$2 e lib via fn
    [ ! -e /sys/kernel/mm/memory_peers ] || { tb_result "$label/no-memory_peers" fail "memory_peers exists in the doca3 model"; return; }
    for e in "${PROBES[@]}"; do
        lib=${e%%|*}; fn=${e#*|}; fn=${fn%%|*}
        if via=$(probe "$e"); then
            if [ "$want" = seen ] && ! structural "$e"; then
                tb_result "$label/$lib" pass "sees peer memory via $via ($fn)"
            else
                tb_result "$label/$lib" fail "sees peer memory via $via, expected blind"
            fi
        else
            if [ "$want" = seen ] && ! structural "$e"; then
                tb_result "$label/$lib" fail "blind: none of ${e##*|} exists"
            elif structural "$e"; then
                tb_result "$label/$lib" pass "blind, whatever the module: it reads only memory_peers, which this core does not create"
            else
                tb_result "$label/$lib" pass "blind: none of ${e##*|} exists"
            fi
        fi
    done
}

dropin_identity() {
    local v d
    v=$(cat $SYSMOD/version) || { echo "no $SYSMOD/version"; return 1; }
    [ "$v" = 0.1.0 ] || { echo "$SYSMOD/version is '$v', not nvpeer's 0.1.0"; return 1; }
    d=$(modinfo -F description $DROPIN) || return 1
    [ "$d" = "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)" ] || { echo "modinfo $DROPIN: '$d'"; return 1; }
    grep -q '^client nv_mem persistent$' $NP_DBG/config || { cat $NP_DBG/config; return 1; }
    [ ! -e /sys/module/nvpeer ] || { echo "also loaded as nvpeer"; return 1; }
    [ "$($NVPEER emu core clients | grep -c ' nv_mem version')" = 1 ] || { $NVPEER emu core clients; return 1; }
    echo "$SYSMOD/version $v; modinfo: $d; debugfs $NP_DBG present"
}

# The doctor's peer.consumers verdict per library equals the probes above, and it names the owner.
doctor_agrees() {
    local want="" e
    for e in "${PROBES[@]}"; do
        if probe "$e" >/dev/null; then want+="${e%%|*}=1;"; else want+="${e%%|*}=0;"; fi
    done
    "$NVPEER" doctor --json >/tmp/det-doctor.json 2>/tmp/det-doctor.err
    python3 -S - /tmp/det-doctor.json "$want" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = {x["id"]: x for x in r["checks"]}
want = dict(kv.split("=") for kv in sys.argv[2].split(";") if kv)
got = {l["library"]: "1" if l["detected"] else "0" for l in c["peer.consumers"]["data"]["libraries"]}
owner = c["nvpeer.module"]["data"].get("owner")
print("doctor:", got, "owner:", owner)
bad = [k for k in set(want) | set(got) if want.get(k) != got.get(k)]
if bad or owner != "nvpeer":
    print("differs for", bad, "or owner is not nvpeer")
    sys.exit(1)
PY
}

# A registration and a refused unload through the drop-in, nvpeer's books balanced after each.
dropin_registers() {
    $NVPEER emu scenario basic --module nvidia_peermem --delay-ms "${NP_DELAY_MS:-400}" || return 1
    np_clean || return 1
    $NVPEER emu scenario unload-live --module nvidia_peermem --delay-ms "${NP_DELAY_MS:-400}" || return 1
    np_clean
}

# With the drop-in loaded, nvpeer under its own name is refused: two nv_mem servers.
refused_beside_dropin() {
    if modprobe nvpeer 2>/dev/null; then rmmod nvpeer; echo "nvpeer loaded beside nvidia_peermem"; return 1; fi
    dmesg | tail -n 20 | grep -q "nvpeer: nvidia_peermem is loaded and serves the nv_mem peer-memory client.*rmmod nvidia_peermem" ||
        { echo "no clear message"; dmesg | tail -n 5; return 1; }
    [ ! -e /sys/module/nvpeer ] || return 1
    [ "$($NVPEER emu core clients | grep -c ' nv_mem version')" = 1 ] || { $NVPEER emu core clients; return 1; }
    echo "refused: $(dmesg | grep 'nvpeer: nvidia_peermem is loaded' | tail -n 1)"
}

# The drop-in refuses to load beside Mellanox's nv_peer_mem (the classic client under that name).
dropin_refused_beside_nv_peer_mem() {
    rmmod nvidia_peermem || return 1
    modprobe nv_peer_mem || return 1
    if modprobe $DROPIN 2>/dev/null; then rmmod nvidia_peermem nv_peer_mem; echo "drop-in loaded beside nv_peer_mem"; return 1; fi
    rmmod nv_peer_mem || return 1
    dmesg | tail -n 20 | grep -q "nvpeer: nv_peer_mem is loaded and serves the nv_mem peer-memory client" ||
        { echo "no clear message"; dmesg | tail -n 5; return 1; }
    [ ! -e $SYSMOD ] || { echo "nvidia_peermem half-loaded"; return 1; }
    echo "refused beside nv_peer_mem"
}

if det_emus; then
    if modprobe $DROPIN; then
        tb_case dropin/identity dropin_identity
        probes_case dropin seen
        tb_case dropin/doctor-agrees doctor_agrees
        tb_case dropin/registers dropin_registers
        tb_case dropin/refuses-nvpeer-beside-it refused_beside_dropin
        tb_case dropin/refused-beside-nv_peer_mem dropin_refused_beside_nv_peer_mem
    else
        tb_result dropin/load fail "modprobe $DROPIN failed: $(dmesg | tail -n 3 | tr '\n' ' ')"
    fi
    rmmod nvidia_peermem 2>/dev/null
    if modprobe nvpeer; then
        probes_case nvpeer-name blind
        rmmod nvpeer
    else
        tb_result nvpeer-name/load fail "modprobe nvpeer failed"
    fi
else
    tb_result emulators fail "could not load the emulators in the default model"
fi
unload_clean() {
    det_down
    ! grep -E '^(nvidia_peermem|nvpeer|nv_peer_mem|peer_mem_emu|nvp2p_emu) ' /proc/modules
}
tb_case unload-clean unload_clean

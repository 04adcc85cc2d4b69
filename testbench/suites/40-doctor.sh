# `nvpeer doctor` run for real in the bench VM: baseline (nothing loaded), with the provider and
# core emulators (default core model doca3: DOCA-OFED 3.x on a kernel without the mm_kobj export,
# so no /sys/kernel/mm/memory_peers), with nvpeer loaded as nvidia_peermem (the drop-in: owner,
# parameters, who serves nv_mem, every /sys/module-probing library sees it) and once under its own
# name (the library check fails with the fix), on the pre-24.04 core model that keeps the client
# list in sysfs (clients and counters), with an rxe device (RDMA device listing,
# ibv_reg_dmabuf_mr(fd=-1) probe through sideway), the vIOMMU, the table output and --root on
# fixture trees; one verdict per GPUDirect RDMA path (nvpeer, NVIDIA's nvidia-peermem, dma-buf):
# with the emulators, nvpeer as nvidia_peermem and an rxe device the nvpeer path is ready (exit 0
# with --require nvpeer) once the bench declares its provider emulator (NVPEER_BENCH_P2P_PROVIDER:
# without it a P2P API from another module than nvidia.ko fails), NVIDIA's is not in use, and
# rxe's missing dma-buf import is no pass.
# Assertions are on the JSON it prints.
# Boot group "system" (this, then 50-dkms): the baseline needs a machine where none of our
# modules was loaded yet; 50-dkms, which installs nvpeer into the module tree, comes last.
# bench: boot system
# bench: check-kernel stock
# bench: budget stock 70 70
# bench: budget-full - 150 150

DOC_JSON=/bench/doctor.json

# doc_run [ARGS...]: runs `nvpeer doctor --json ARGS`, keeps the JSON, prints the exit status.
doc_run() {
    local rc=0
    "$NVPEER" doctor --json "$@" >"$DOC_JSON" 2>/bench/doctor.err || rc=$?
    echo "$rc"
}

# want EXPR VALUE [EXPR VALUE]...: each Python expression over the last report (`r`; `c(id)` is a
# check by id) must evaluate to its VALUE (strings as they are, anything else as JSON). One Python
# start for all of them: each start costs seconds in the TCG+KASAN guest.
want() {
    python3 -S - "$DOC_JSON" "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def c(i):
    return next(x for x in r["checks"] if x["id"] == i)
args, bad = sys.argv[2:], 0
for expr, want in zip(args[0::2], args[1::2]):
    try:
        v = eval(expr)
        got = v if isinstance(v, str) else json.dumps(v)
    except Exception as e:
        got = f"<{type(e).__name__}: {e}>"
    if got == want:
        print(f"{expr} = {got}")
    else:
        print(f"{expr}: got '{got}', want '{want}'")
        bad = 1
sys.exit(bad)
PY
}

if [ ! -x "$NVPEER" ]; then
    tb_result binary fail "no nvpeer binary at $NVPEER (cargo build --release in userspace-tests)"
    return 0
fi

baseline() {
    local rc
    rc=$(doc_run)
    [ "$rc" = 1 ] || { echo "exit $rc, want 1 (not ready)"; cat /bench/doctor.err; return 1; }
    want 'r["verdict"]' not_ready \
         'r["exit_code"]' 1 \
         'len(r["checks"])' 34 \
         '[p["state"] for p in r["paths"]]' '["not_ready", "not_ready", "not_ready"]' \
         'c("rdma.dmabuf")["status"] != "pass"' true \
         'c("nvidia.p2p_symbols")["status"]' fail \
         'c("rdma.peer_api")["status"]' fail \
         'c("nvpeer.module")["data"]["loaded"]' false \
         'c("peer.clients")["status"]' fail \
         'c("peer.consumers")["status"]' fail || return 1
    # The bench kernel is built with Rust and the fixture-free live probes ran.
    want 'c("gpu.cuda")["data"]["state"]' library_missing \
         'all(x.get("fix") for x in r["checks"] if x["status"] == "fail")' true || return 1
}
tb_case baseline baseline

# The P2P API from the provider emulator, not nvidia.ko: a failure, as on any node whose
# nvidia_p2p_* come from another module; only with the bench's own declaration
# (NVPEER_BENCH_P2P_PROVIDER, honoured by the bench build of the CLI alone) a warning that says
# it is the bench.
with_emulators() {
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    doc_run >/dev/null
    want 'c("nvidia.p2p_symbols")["data"]["owner"]' nvp2p_emu \
         'c("nvidia.p2p_symbols")["status"]' fail \
         'c("nvidia.p2p_symbols")["because_of"]' nvidia.driver \
         'c("nvidia.driver")["status"]' fail \
         'c("nvidia.driver")["gate"]' true \
         'c("nvidia.driver")["summary"]' 'nvidia.ko not loaded; the nvidia_p2p_* API comes from module `nvp2p_emu`, not NVIDIA'"'"'s driver' \
         'c("nvidia.driver")["data"]["p2p_provider"]' nvp2p_emu \
         'c("rdma.peer_api")["data"]["owner"]' peer_mem_emu \
         'c("rdma.peer_api")["status"]' pass || return 1
    NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run >/dev/null
    want 'c("nvidia.driver")["status"]' warn \
         'c("nvidia.driver")["summary"].startswith("bench node (NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu)")' true \
         'c("nvidia.driver")["data"]["p2p_provider"]' nvp2p_emu \
         'c("nvidia.p2p_symbols")["status"]' pass || return 1
}
tb_case emulators with_emulators

# Python over the last report: the libraries whose probe includes a /sys/module file and that do
# not see peer memory, and those that are blind for another reason than a core without memory_peers.
MISSED_MODULE_PROBES='[l["library"] for l in c("peer.consumers")["data"]["libraries"] if any(p.startswith("/sys/module/") for p in l["paths"]) and not l["detected"]]'
FIXABLE_BLIND='[l["library"] for l in c("peer.consumers")["data"]["libraries"] if not l["detected"] and not l["structural"]]'

with_nvpeer() {
    modinfo nvidia-peermem >/dev/null 2>&1 || { echo "nvidia-peermem.ko (nvpeer's drop-in build) not installed"; return 77; }
    modprobe nvidia-peermem || { dmesg | tail -n 5; return 1; }
    doc_run >/dev/null
    want 'c("nvpeer.module")["status"]' pass \
         'c("nvpeer.module")["data"]["module_name"]' nvidia_peermem \
         'c("nvpeer.module")["data"]["owner"]' nvpeer \
         'c("nvpeer.module")["data"]["version"] == open("/sys/module/nvidia_peermem/version").read().strip()' true \
         '"persistent_api_support" in c("nvpeer.module")["data"]["parameters"]' true \
         'c("nvpeer.module")["data"]["parameters"]["persistent_api_support"]' 1 \
         '[x.split()[0] for x in c("nvpeer.module")["data"]["clients"]]' '["nv_mem"]' \
         'c("peer.clients")["status"]' pass \
         'c("peer.clients")["data"]["sysfs"]' false \
         '[[x["module"], x["owner"]] for x in c("peer.clients")["data"]["served_by"]]' '[["nvidia_peermem", "nvpeer"]]' \
         'c("peer.conflicts")["data"]["loaded"]' '[]' \
         'c("peer.conflicts")["data"]["nvidia_peermem"]["owner"]' nvpeer \
         "$MISSED_MODULE_PROBES" '[]' \
         "$FIXABLE_BLIND" '[]' \
         'all(l["via"] == "/sys/module/nvidia_peermem/version" for l in c("peer.consumers")["data"]["libraries"] if l["detected"])' true \
         'c("peer.consumers")["data"]["memory_peers"]' false \
         'c("peer.consumers")["data"]["structural"]' true \
         'c("peer.consumers")["status"]' warn \
         'c("nvidia.peermem")["status"]' skip \
         'r["paths"][1]["state"]' not_in_use || return 1
    # With persistent_api_support=0 nvpeer registers the two legacy clients (debugfs config: this
    # core keeps no list in sysfs).
    modprobe -r nvidia_peermem || return 1
    modprobe nvidia-peermem persistent_api_support=0 || return 1
    doc_run >/dev/null
    want '[x.split()[0] for x in c("nvpeer.module")["data"]["clients"]]' '["nv_mem", "nv_mem_nc"]' \
         'c("nvpeer.module")["data"]["parameters"]["persistent_api_support"]' 0 || return 1
    modprobe -r nvidia_peermem || return 1
    # Under its own name the /sys/module probes miss it: the library check fails with the fix.
    modprobe nvpeer || { dmesg | tail -n 5; return 1; }
    doc_run >/dev/null
    want 'c("nvpeer.module")["data"]["module_name"]' nvpeer \
         'c("nvpeer.module")["data"]["owner"]' nvpeer \
         'c("peer.consumers")["status"]' fail \
         '"install nvpeer as nvidia-peermem (DKMS does: docs/install.md)" in c("peer.consumers")["fix"]' true \
         '[l["library"] for l in c("peer.consumers")["data"]["libraries"] if l["detected"]]' '[]' \
         'c("peer.conflicts")["data"]["loaded"]' '[]' || return 1
    modprobe -r nvpeer
}
tb_case nvpeer-loaded with_nvpeer

# The pre-24.04 core model keeps the client list in /sys/kernel/mm/memory_peers: the clients and
# their counters are listed, and every library probe (memory_peers-only ones included) sees nv_mem.
with_listing_core() {
    modinfo nvidia-peermem >/dev/null 2>&1 || return 77
    modprobe -r peer_mem_emu || return 1
    modprobe peer_mem_emu model=5.5 || return 1
    local rc=0
    if modprobe nvidia-peermem; then
        doc_run >/dev/null
        want 'c("peer.clients")["status"]' pass \
             'c("peer.clients")["data"]["sysfs"]' true \
             '[x["name"] for x in c("peer.clients")["data"]["clients"]]' '["nv_mem"]' \
             '"num_alloc_mrs" in c("peer.clients")["data"]["clients"][0]' true \
             'c("peer.consumers")["data"]["memory_peers"]' true \
             '[l["library"] for l in c("peer.consumers")["data"]["libraries"] if not l["detected"]]' '[]' \
             'c("peer.consumers")["status"]' pass || rc=1
        modprobe -r nvidia_peermem || rc=1
    else
        dmesg | tail -n 5; rc=1
    fi
    # Back to the default model for the cases after this one.
    modprobe -r peer_mem_emu && modprobe peer_mem_emu || rc=1
    return $rc
}
tb_case listing-core with_listing_core

with_rxe() {
    modprobe rdma_rxe || return 1
    ip link add dtest0 type dummy && ip link set dtest0 up || return 1
    rdma link add rxe_doc type rxe netdev dtest0 || return 1
    doc_run >/dev/null
    rdma link delete rxe_doc; ip link delete dtest0
    want '"rxe_doc" in c("rdma.devices")["data"]["devices"]' true \
         'c("rdma.dmabuf")["data"]["verbs"]["state"]' probed \
         '[x["device"] for x in c("rdma.dmabuf")["data"]["verbs"]["results"]]' '["rxe_doc"]' || return 1
    # rxe has no dma-buf import: anything but a clean errno (or a crash) would be a doctor bug.
    want 'c("rdma.dmabuf")["data"]["verbs"]["results"][0]["errno"] is not None' true || return 1
    # rxe is not a PCI function: no GPU↔NIC pair to classify.
    want 'c("pci.topology")["status"]' skip || return 1
}
tb_case rxe with_rxe

# Emulators, nvpeer as nvidia_peermem and an rxe device: every check the nvpeer path needs passes
# in the VM once the bench declares its provider emulator (NVPEER_BENCH_P2P_PROVIDER), so
# `--require nvpeer` exits 0; without the declaration the node is not ready (the P2P API is not
# NVIDIA's driver's); rxe imports no dma-buf, so that path is not ready, and the libraries that
# probe /sys/module take nvpeer.
ready_path() {
    modinfo nvidia-peermem >/dev/null 2>&1 || return 77
    modprobe rdma_rxe && modprobe ib_uverbs || return 1
    ip link add dtest1 type dummy && ip link set dtest1 up || return 1
    rdma link add rxe_rdy type rxe netdev dtest1 || return 1
    local rc=0 got
    if modprobe nvidia-peermem; then
        got=$(doc_run --require nvpeer)
        [ "$got" = 1 ] || { echo "--require nvpeer without the bench's declaration: exit $got, want 1"; rc=1; }
        want '[[p["path"], p["root_cause"]] for p in r["paths"] if p["path"] == "nvpeer"]' '[["nvpeer", "nvidia.driver"]]' || rc=1
        got=$(NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run --require nvpeer)
        [ "$got" = 0 ] || { echo "--require nvpeer: exit $got, want 0"; rc=1; }
        want 'r["require"]' nvpeer \
             '[[p["path"], p["state"]] for p in r["paths"]]' '[["nvpeer", "ready"], ["nvidia_peermem", "not_in_use"], ["dmabuf", "not_ready"]]' \
             'c("rdma.dmabuf")["status"] in ("fail", "unknown")' true \
             'c("rdma.uverbs")["status"]' pass \
             'next(l for l in r["libraries"] if l["library"] == "NCCL")["path"]' nvpeer || rc=1
        [ $rc = 0 ] || python3 -S -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(c["id"], c["status"], c["summary"]) for c in r["checks"] if c["status"] in ("fail","unknown")]' "$DOC_JSON"
        # Node profiles (docs/operations.md): this node's own, recorded by --write-profile, holds it;
        # one that wants eight GPUs and eight NICs fails node.profile with its code, and that is
        # the nvpeer path's root cause.
        got=$(NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run --require nvpeer --write-profile /bench/node.toml)
        [ "$got" = 0 ] && [ -s /bench/node.toml ] || { echo "--write-profile: exit $got"; rc=1; }
        got=$(NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run --require nvpeer --profile /bench/node.toml)
        [ "$got" = 0 ] || { echo "--profile of its own: exit $got, want 0"; cat /bench/node.toml; rc=1; }
        want 'c("node.profile")["status"]' pass || rc=1
        sed 's/^count = .*/count = 8/' /bench/node.toml >/bench/node8.toml
        got=$(NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run --require nvpeer --profile /bench/node8.toml)
        [ "$got" = 1 ] || { echo "--profile wanting 8 GPUs: exit $got, want 1"; rc=1; }
        want 'c("node.profile")["status"]' fail \
             'c("node.profile")["code"]' NVP-D034 \
             '"the profile says 8" in c("node.profile")["summary"]' true \
             '[p["root_cause"] for p in r["paths"] if p["path"] == "nvpeer"]' '["node.profile"]' || { cat /bench/node.toml; rc=1; }
        # A built-in profile by its name (no file of that name here): the bench node is no DGX.
        got=$(cd /bench && NVPEER_BENCH_P2P_PROVIDER=nvp2p_emu doc_run --require nvpeer --profile dgx-h100)
        [ "$got" = 1 ] || { echo "--profile dgx-h100: exit $got, want 1"; rc=1; }
        want '"does not match NVIDIA DGX H100 (built-in dgx-h100)" in c("node.profile")["summary"]' true \
             '"RDMA device(s) missing: mlx5_0" in c("node.profile")["summary"]' true || rc=1
    else
        dmesg | tail -n 5; rc=1
    fi
    rdma link delete rxe_rdy; ip link delete dtest1
    # Only the module itself (docs/install.md: `modprobe -r` also tries its dependencies, and
    # fails on one that another module holds, ib_core here, as on a node).
    tb_rdma_unload
    if [ -e /sys/module/nvidia_peermem ]; then rmmod nvidia_peermem || rc=1; fi
    return $rc
}
tb_case ready-path ready_path

viommu() {
    doc_run >/dev/null
    want '"dmar0" in c("platform.iommu")["data"]["units"]' true \
         'c("platform.virtualization")["data"]["hypervisor"]' true || return 1
}
tb_case viommu viommu

table_output() {
    local rc=0 out
    out=$("$NVPEER" doctor 2>&1) || rc=$?
    echo "$out" | tail -n 3
    echo "$out" | grep -q '^ ✘  ' || { echo "no ✘ line"; return 1; }
    echo "$out" | grep -q '^ ✔  ' || { echo "no ✔ line"; return 1; }
    echo "$out" | grep -q '→ ' || { echo "no fix sentence"; return 1; }
    echo "$out" | grep -q '^verdict: NOT READY' || { echo "no verdict line"; return 1; }
    [ "$rc" = 1 ] || { echo "table run exit $rc, want 1"; return 1; }
}
tb_case table table_output

fixture_roots() {
    local fx=/bench/doctor-fx rc
    rm -rf "$fx"; mkdir -p "$fx"
    rc=$(doc_run --root "$fx")
    [ "$rc" = 1 ] || { echo "empty root: exit $rc, want 1"; return 1; }
    want 'c("gpu.cuda")["status"]' skip || return 1
    rc=$(doc_run --root /bench/does-not-exist)
    [ "$rc" = 2 ] || { echo "missing root: exit $rc, want 2"; return 1; }
    # Only kallsyms unreadable and nothing failing would be exit 2; a tree with a rival loaded is 1.
    mkdir -p "$fx/sys/module/nvidia_peermem" && echo live >"$fx/sys/module/nvidia_peermem/initstate"
    doc_run --root "$fx" >/dev/null
    want 'c("peer.conflicts")["status"]' fail \
         'c("peer.conflicts")["data"]["loaded"]' '["nvidia_peermem"]' || return 1
    # Whose nvidia_peermem: the NVIDIA driver's version is NVIDIA's module, another one nvpeer's.
    mkdir -p "$fx/sys/module/nvidia" && echo 580.95.05 >"$fx/sys/module/nvidia/version"
    echo 580.95.05 >"$fx/sys/module/nvidia_peermem/version"
    doc_run --root "$fx" >/dev/null
    want 'c("nvpeer.module")["data"]["owner"]' nvidia \
         'c("nvpeer.module")["status"]' fail \
         'c("peer.conflicts")["data"]["loaded"]' '["nvidia_peermem"]' || return 1
    echo 0.1.0 >"$fx/sys/module/nvidia_peermem/version"
    doc_run --root "$fx" >/dev/null
    want 'c("nvpeer.module")["data"]["owner"]' nvpeer \
         'c("nvpeer.module")["data"]["module_name"]' nvidia_peermem \
         'c("peer.conflicts")["data"]["loaded"]' '[]' || return 1
}
tb_case fixture-roots fixture_roots

tb_rdma_unload
modprobe -r peer_mem_emu nvp2p_emu 2>/dev/null || true

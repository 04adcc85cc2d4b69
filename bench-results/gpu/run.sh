#!/bin/bash
# Runs the doctor's and the harness's CUDA-side cases on a GPU node and writes one file per
# command into DIR (bench-results/gpu/README.md says where they ran and what they show).
#
#   bench-results/gpu/run.sh NVPEER DIR
#
# NVPEER: the `nvpeer` CLI (a release build of userspace-tests); DIR: where the outputs go. Every
# command's output is kept verbatim, with the command line first and its exit status last; nothing
# here needs an RDMA device, and a missing one is part of what is recorded.
set -u
bin=${1:?usage: run.sh NVPEER DIR}
out=${2:?usage: run.sh NVPEER DIR}
mkdir -p "$out"

# rec NAME CMD...: runs CMD, output to DIR/NAME.
rec() {
    local name=$1; shift
    {
        echo "\$ $*"
        "$@"
        echo "(exit $?)"
    } >"$out/$name" 2>&1
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "nvpeer: $("$bin" --version 2>&1)"
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id,mig.mode.current --format=csv,noheader 2>&1
    echo "modules_disabled: $(cat /proc/sys/kernel/modules_disabled 2>&1)"
    echo "/dev/infiniband: $(ls /dev/infiniband 2>&1 | tr '\n' ' ')"
    echo "memlock: $(ulimit -l)"
    # What NVML's BAR1 figures are compared with.
    nvidia-smi -q -d MEMORY 2>&1 | sed -n '/BAR1 Memory Usage/,/Free/p'
} >"$out/host.txt" 2>&1

# The driver's options as it prints them (the doctor reads RegistryDwords there: crate::nvreg).
rec nvidia-params.txt cat /proc/driver/nvidia/params

# The doctor: default verdict (any path), the strict answer, JSON, and as an unprivileged user.
rec doctor.txt "$bin" doctor -v
rec doctor-require-nvpeer.txt "$bin" doctor --require nvpeer
"$bin" doctor --json >"$out/doctor.json"
echo "$?" >"$out/doctor.json.exit"
rec doctor-nobody.txt setpriv --reuid=65534 --regid=65534 --clear-groups "$bin" doctor
# A libcuda that lacks the entry points (libm stands in): reported, not a crash.
stub=$(mktemp -d)
ln -s "$(ldconfig -p | awk '/libm.so.6 .*x86-64/ {print $NF; exit}')" "$stub/libcuda.so"
rec doctor-stub-libcuda.txt env LD_LIBRARY_PATH="$stub" "$bin" doctor --require dmabuf
rm -rf "$stub"

# GPU-initiated networking selected in the environment (peer.gpu_initiated's "requested").
rec doctor-gin-selected.txt env NCCL_GIN_TYPE=3 NVSHMEM_IB_ENABLE_IBGDA=1 UCX_TLS=rc_gda "$bin" doctor -v

# The GPU↔NIC matrix (issue 55), text and JSON; a built-in node profile the machine is not.
rec topology.txt "$bin" doctor --topology
"$bin" doctor --topology --json >"$out/topology.json"
echo "$?" >"$out/topology.json.exit"
rec doctor-profile-dgx-h200.txt "$bin" doctor --profile dgx-h200

# The harness's CUDA side.
rec validate-cuda.txt "$bin" validate --mem cuda --max-size 64M
rec validate-cuda-dmabuf.txt "$bin" validate --mem cuda-dmabuf --max-size 64M
rec validate-cuda-dmabuf-json.txt "$bin" validate --mem cuda-dmabuf --json --only cap.memory,mem.
rec validate-bad-gpu.txt "$bin" validate --mem cuda --gpu 7 --only cap.memory
rec validate-profile-dgx-h200.txt "$bin" validate --mem cuda --profile dgx-h200 --only cap.memory,node.profile
exit 0

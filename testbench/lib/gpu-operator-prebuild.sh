#!/bin/bash
# Runs INSIDE the toolchain root (tb chroot: the bench kernel at /kernel, Debian's stock kernel's
# directory at /stock, the repo at /src, NVIDIA's source at /nvidia-src, an output directory at
# /out): packaging/gpu-operator/nvpeer-driver-container.sh, natively, on the driver container
# 58-gpu-operator lays out in its guest (testbench/lib/gpu-operator-root.sh.inc), so that make
# check runs that suite without compiling nvpeer under TCG (minutes there, seconds here).
#   1. Debian's stock kernel (the guest's): `nvpeer-driver-container prepare` builds nvpeer as the
#      script does in the driver container; what it keeps in its state directory (the build, its
#      log; on a node /run/nvidia/nvpeer/<kernel>, on the host's /run/nvidia) is packed as
#      /out/gpu-operator-prebuilt.tar; the guest unpacks it there and the script installs and
#      loads from it (the path a driver pod restarted without a reboot takes).
#   2. The bench kernel's variant with MODVERSIONS (make check-full's; neither make check's bench
#      kernel nor the stock one has them): an OFED upgrade that changed
#      the CRC of ib_register_peer_memory_client in DOCA's module (NVIDIA/gpu-operator#2868),
#      staged as 57-rehearsal-ubuntu stages it: the build is found stale and rebuilt against the
#      new CRC; run again, nothing is rebuilt. (Loading needs a kernel: the loader's refusal of the
#      stale build is 57's case.)
# Usage: gpu-operator-prebuild.sh stock|bench (one half: make check runs the stock half before the
# bench kernel is ready, the bench half after it).
set -euo pipefail
part=${1:-}
[ "$part" = stock ] || [ "$part" = bench ] || { echo "usage: gpu-operator-prebuild.sh stock|bench" >&2; exit 2; }
. /src/testbench/lib/native-node.sh.inc
. /src/testbench/lib/gpu-operator-root.sh.inc
tool=/usr/local/bin/nvpeer-driver-container
# in_ctr KREL ARG...: the script in the node's root for kernel KREL (this root runs the host's
# kernel, which uname -r would name; no apt: the bench is offline).
in_ctr() { local k=$1; shift; in_node /usr/bin/env KERNEL_VERSION="$k" NVPEER_APT=0 "$tool" "$@"; }

# ---- 1. the stock kernel --------------------------------------------------------------------
if [ "$part" = stock ]; then
krel=$(cat /stock/release)
native_node_up /tmp/gpuop-stock /stock /kernel
mkdir -p "$R/run/mellanox/drivers" "$R/run/nvidia"
gpuop_image "$R"
gpuop_full_install "$R" "$krel" /stock/obj "/stock/vm/modules/lib/modules/$krel" /stock/vm/mods /nvidia-src
gpuop_doca "$R/run/mellanox/drivers" "$krel" /stock/vm/mods
if ! in_ctr "$krel" prepare >"$N/prepare.log" 2>&1; then
    cat "$N/prepare.log"; tail -n 40 "$R/run/nvidia/nvpeer/$krel/build.log" 2>/dev/null || true
    echo "gpu-operator-prebuild: prepare failed for $krel" >&2
    exit 1
fi
cat "$N/prepare.log"
grep -q "^nvpeer-driver-container: installed /lib/modules/$krel/updates/nvpeer/nvidia-peermem.ko" "$N/prepare.log" ||
    { echo "gpu-operator-prebuild: prepare did not install nvpeer for $krel" >&2; exit 1; }
tar -C "$R/run/nvidia" -cf /out/gpu-operator-prebuilt.tar --exclude=lock "nvpeer/$krel"
echo "gpu-operator-prebuild: packed the driver container's build of nvpeer for $krel"
exit 0
fi

# ---- 2. the bench kernel (make check-full's variant, MODVERSIONS): an OFED upgrade that changed a CRC
kb=$(cat /kernel/release)
grep -q '^CONFIG_MODVERSIONS=y' /kernel/obj/.config || { echo "gpu-operator-prebuild: the bench kernel has no MODVERSIONS (its variant that has them: NVPEER_BENCH_MODVERSIONS=1)" >&2; exit 1; }
native_node_up /tmp/gpuop-bench /kernel
mods=$N/mods
mkdir -p "$mods" "$R/run/mellanox/drivers" "$R/run/nvidia"
cp /src/testbench/emu/nvp2p/nvp2p_emu.ko /src/testbench/emu/peer_mem/peer_mem_emu.ko /src/build/nvidia-peermem-real/nvidia-peermem-real.ko "$mods/"
gpuop_image "$R"
gpuop_full_install "$R" "$kb" /kernel/obj "/kernel/modules/lib/modules/$kb" "$mods" /nvidia-src
doca=$R/run/mellanox/drivers
gpuop_doca "$doca" "$kb" "$mods"
ko=$R/run/nvidia/nvpeer/$kb/nvidia-peermem.ko
doca_ko=$doca/lib/modules/$kb/updates/peer_mem_emu.ko
imported() {
    local c
    c=$(modprobe --dump-modversions "$ko" | awk '$2 == "ib_register_peer_memory_client" { print $1 }')
    printf '0x%08x\n' "$((${c:-0} & 0xffffffff))"
}
# step NAME: prepare, its output in $N/NAME.log (shown).
step() {
    local rc=0
    in_ctr "$kb" prepare >"$N/$1.log" 2>&1 || rc=$?
    sed "s/^/[$1] /" "$N/$1.log"
    return $rc
}
step first || { tail -n 40 "$R/run/nvidia/nvpeer/$kb/build.log"; exit 1; }
off=$(gpuop_crc_offset "$doca_ko" ib_register_peer_memory_client) ||
    { echo "gpu-operator-prebuild: no __crc_ib_register_peer_memory_client in DOCA's module" >&2; exit 1; }
before=$(od -An -tx4 -j "$off" -N4 "$doca_ko" | tr -d ' ')
[ "$(imported)" = "0x$before" ] || { echo "gpu-operator-prebuild: the build imports $(imported), DOCA exports 0x$before" >&2; exit 1; }
step again
if grep -q "building nvpeer" "$N/again.log"; then echo "gpu-operator-prebuild: rebuilt with nothing changed" >&2; exit 1; fi
# The upgrade: DOCA's module with another CRC for the symbol.
printf '\xef\xbe\xad\xde' | dd of="$doca_ko" bs=1 seek="$off" conv=notrunc status=none
depmod -b "$doca" -a "$kb" 2>/dev/null
step upgrade || { tail -n 40 "$R/run/nvidia/nvpeer/$kb/build.log"; exit 1; }
grep -q "no longer fits: DOCA's CRC of ib_register_peer_memory_client is now 0xdeadbeef, the build has 0x$before (an OFED upgrade); rebuilding" "$N/upgrade.log" ||
    { echo "gpu-operator-prebuild: the OFED upgrade was not seen" >&2; exit 1; }
[ "$(imported)" = 0xdeadbeef ] || { echo "gpu-operator-prebuild: the rebuild imports $(imported), not 0xdeadbeef" >&2; exit 1; }
step after
if grep -q "building nvpeer" "$N/after.log"; then echo "gpu-operator-prebuild: rebuilt again after the upgrade" >&2; exit 1; fi
echo "gpu-operator-prebuild: ofed-upgrade ok: $kb (MODVERSIONS): DOCA's CRC 0x$before -> 0xdeadbeef, the build found stale and rebuilt against it; nothing rebuilt before or after"
# (the node's mounts go with tb chroot's mount namespace)

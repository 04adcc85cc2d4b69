# nvpeer in the GPU Operator's driver container (docs/install.md, "GPU Operator";
# packaging/gpu-operator/nvpeer-driver-container.sh), on Debian's production kernel, in a root laid
# out as the driver container's (testbench/lib/gpu-operator-root.sh.inc): the image's files, what
# the driver container's full install leaves (the kernel's tree, NVIDIA's modules under
# kernel/drivers/video with NVIDIA's own nvidia-peermem.ko, NVIDIA's source in /usr/src), and the
# Network Operator's DOCA container's root at /run/mellanox/drivers (the core emulator as DOCA's
# module, its peer_mem.h, .driver-ready). The root is bind-mounted at /run/nvidia/driver without
# /sys, as the driver container's _mount_rootfs does (NVIDIA/gpu-driver-container
# ubuntu24.04/nvidia-driver), and /run/nvidia inside it is the guest's (a hostPath on a node).
# Then the sidecar's own commands (nvidia-peermem-ctr: reload_nvidia_peermem; the validator:
# NVIDIA/gpu-operator cmd/nvidia-validator):
#   [ -f /run/mellanox/drivers/.driver-ready ]; chroot /run/nvidia/driver modprobe nvidia-peermem;
#   [ -f /sys/module/nvidia_peermem/refcnt ]; lsmod | grep -E '^nvidia_peermem\s'
# and the situations users hit (NVIDIA/gpu-operator#2619, #2844, #2868, cloud-native-docs#372,
# Mellanox/doca-driver-build#481): a driver pod restarted without a reboot, with the module still
# loaded and, after DOCA unloaded it, with no module tree in the new pod (the userspace-only
# path); the unload order; DOCA reloaded under nvpeer; DOCA's core not loaded; a build that
# cannot be made (one line, not rebuilt while nothing changes).
# This kernel has no MODVERSIONS: an OFED upgrade that changes a CRC cannot be staged here. make
# check-full runs it natively against its bench kernel, the variant with them (testbench/lib/
# gpu-operator-prebuild.sh: the build found stale and rebuilt against DOCA's new CRC); the
# loader's refusal of a stale build is 57-rehearsal-ubuntu's case on that kernel.
# In make check the script's build ran natively in the toolchain root on the same layout
# (gpu-operator-prebuild.sh): its state directory arrives as /bench/gpu-operator-prebuilt.tar and
# is unpacked where the script keeps it (/run/nvidia/nvpeer), and the script installs from it.
# Without that file (make check-full, this suite by hand) the script compiles nvpeer in the guest.
# Run by hand: NVPEER_VM_KERNEL=stock testbench/vm run --suite 58-gpu-operator
# bench: kernel stock
# bench: budget stock 170 170
# bench: budget-full stock 700 700

O=/tmp/gpu-operator
KREL=$(uname -r)
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
. /src/testbench/lib/gpu-operator-root.sh.inc
R=$O/root
CTR=/run/nvidia/driver
DOCA=/run/mellanox/drivers
MODS=/lib/modules/$KREL/extra
STATE=/run/nvidia/nvpeer/$KREL
DST=/lib/modules/$KREL/updates/nvpeer/nvidia-peermem.ko

unload_all() {
    tb_rdma_unload
    modprobe -r nvidia-peermem nvpeer nv_peer_mem classic_peer nvidia_peermem_real peer_mem_emu nvp2p_emu 2>/dev/null
    return 0
}
ctr_down() {
    umount -R "$CTR" 2>/dev/null
    umount -R "$R" 2>/dev/null
    return 0
}
# ctr_up N: driver pod number N: a fresh container root (overlay of the guest's root, upper layer
# $O/upper-N) with the image's files, /run/nvidia and /run/mellanox/drivers mounted as the pod's
# hostPaths, and /run/nvidia/driver the container's root without /sys (_mount_rootfs).
ctr_up() {
    mkdir -p "$O/upper-$1" "$O/work-$1" "$R" "$CTR" "$DOCA" || return 1
    mount -t overlay overlay -o "lowerdir=/,upperdir=$O/upper-$1,workdir=$O/work-$1" "$R" || return 1
    mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && mount -t tmpfs tmpfs "$R/tmp" &&
        mount -t tmpfs tmpfs "$R/run" || return 1
    mkdir -p "$R/run/nvidia" "$R$DOCA" && mount --bind /run/nvidia "$R/run/nvidia" && mount --bind "$DOCA" "$R$DOCA" || return 1
    # (the guest's own module tree stays out: the image has none for the node's kernel)
    rm -rf "${R:?}/lib/modules/$KREL"
    gpuop_image "$R" >/dev/null
}
ctr_mount_rootfs() { mount --rbind "$R" "$CTR"; }
# sidecar: nvidia-peermem-ctr's steps after its wait; output in $O/sidecar.log (shown).
sidecar() {
    local rc=0
    [ -f "$DOCA/.driver-ready" ] || { echo "no $DOCA/.driver-ready"; return 1; }
    if [ -f /sys/module/nvidia_peermem/refcnt ]; then
        echo "nvidia-peermem module already loaded, skipping modprobe (the sidecar's own check)"
        return 0
    fi
    chroot "$CTR" modprobe nvidia-peermem >"$O/sidecar.log" 2>&1 || rc=$?
    cat "$O/sidecar.log"
    [ $rc = 0 ] && [ -f /sys/module/nvidia_peermem/refcnt ] || { echo "modprobe exited $rc; the sidecar reports: failed to load nvidia-peermem module"; return 1; }
}
validator() { lsmod | grep -E '^nvidia_peermem\s'; }
is_nvpeer() { [ "$(cat /sys/module/nvidia_peermem/version 2>/dev/null)" = "$VER" ] || { echo "/sys/module/nvidia_peermem/version is not nvpeer's $VER"; return 1; }; }
# fail_line PATTERN: the script's last line in the sidecar's output matches PATTERN and is the only
# line that does (the failure, one line; the lines before it say what the script found).
fail_line() {
    grep '^nvpeer-driver-container: ' "$O/sidecar.log" | tail -n 1 | grep -q -- "$1" &&
        [ "$(grep -c -- "$1" "$O/sidecar.log")" = 1 ]
}
# doca_load: DOCA's container loads its modules (the core emulator from its own root).
doca_load() { insmod "$DOCA/lib/modules/$KREL/updates/peer_mem_emu.ko"; }

setup() {
    [ -f /stock/obj/.config ] || { echo "no kernel build tree at /stock/obj (testbench/vm binds the stock kernel's)"; return 1; }
    [ -f /nvidia-src/nvidia/nv-p2p.h ] || { echo "no NVIDIA source at /nvidia-src (testbench/vm binds tb nvidia-src)"; return 1; }
    for m in nvp2p_emu peer_mem_emu nvidia-peermem-real; do [ -f "$MODS/$m.ko" ] || { echo "no $MODS/$m.ko"; return 1; }; done
    unload_all
    modprobe overlay || return 1
    mkdir -p /run/nvidia "$DOCA" || return 1
    # (private: the container's root, mounted below it, must not propagate into its own bind)
    mount --bind /run/nvidia /run/nvidia && mount --make-private /run/nvidia || return 1
    gpuop_doca "$DOCA" "$KREL" "$MODS" || return 1
    ctr_up 1 || return 1
    gpuop_full_install "$R" "$KREL" /stock/obj "/lib/modules/$KREL" "$MODS" /nvidia-src || return 1
    echo "driver container root at $R: $(chroot "$R" modinfo -k "$KREL" -n nvidia-peermem) (NVIDIA's), $(cat "$R/etc/modprobe.d/nvpeer-driver-container.conf" | tail -n 1)"
    : >"$O/setup-ok"
}
tb_case driver-container-setup setup
[ -f "$O/setup-ok" ] || { ctr_down; unload_all; umount /run/nvidia 2>/dev/null; return 0; }

# The driver container's start: its _load_driver runs `modprobe nvidia-peermem` in its own root
# (GPU_DIRECT_RDMA_ENABLED and a Mellanox device); the script's build there is `prepare`.
start() {
    local rc=0
    if [ -f /bench/gpu-operator-prebuilt.tar ]; then
        echo "the script's build ran in the toolchain root (gpu-operator-prebuild stage); unpacking its state directory"
        tar -C /run/nvidia -xf /bench/gpu-operator-prebuilt.tar || return 1
    fi
    chroot "$R" /usr/bin/env NVPEER_APT=0 /usr/local/bin/nvpeer-driver-container prepare >"$O/prepare.log" 2>&1 || rc=$?
    cat "$O/prepare.log"
    [ $rc = 0 ] || { tail -n 30 "$STATE/build.log" 2>/dev/null; return 1; }
    [ "$(chroot "$R" modinfo -k "$KREL" -n nvidia-peermem)" = "$DST" ] || { echo "nvidia-peermem does not resolve to $DST"; return 1; }
    [ -f "$R/lib/modules/$KREL/kernel/drivers/video/nvidia-peermem.ko.nvidia" ] || { echo "NVIDIA's copy was not set aside"; return 1; }
    : >"$O/prepared"
}
tb_case driver-container-start start
[ -f "$O/prepared" ] || { ctr_down; unload_all; umount /run/nvidia 2>/dev/null; return 0; }

# The sidecar, once DOCA and the driver are ready: nvidia (the provider emulator) loaded by the
# driver container, DOCA's core by DOCA's container.
sidecar_load() {
    ctr_mount_rootfs || return 1
    modprobe nvp2p_emu && doca_load || return 1
    sidecar || return 1
    is_nvpeer || return 1
    grep -q "^nvpeer-driver-container: loaded nvpeer $VER as nvidia_peermem" "$O/sidecar.log" || { echo "the modprobe did not go through the script's hook"; return 1; }
}
tb_case sidecar-chroot-modprobe sidecar_load

tb_case validator-lsmod validator

# A driver pod deleted and recreated without a reboot, nvidia_peermem still loaded (the fast path,
# NVIDIA/cloud-native-docs#372, #2844): the new pod's sidecar skips its modprobe; the validator
# still passes; nothing was reloaded.
restart_loaded() {
    local before
    before=$(grep '^nvidia_peermem ' /proc/modules)
    ctr_down; ctr_up 2 && ctr_mount_rootfs || return 1
    sidecar || return 1
    validator || return 1
    [ "$(grep '^nvidia_peermem ' /proc/modules)" = "$before" ] || { echo "nvidia_peermem was reloaded"; return 1; }
}
tb_case pod-restart-module-loaded restart_loaded

# The unload order: nvpeer holds the NVIDIA driver and DOCA's core (its symbol dependencies), so
# neither goes while it is loaded; NVIDIA's _unload_driver removes nvidia-peermem before nvidia in
# one rmmod, DOCA's restart removes nvidia_peermem before its core (Mellanox/doca-driver-build#481).
unload_order() {
    local out
    out=$(rmmod nvp2p_emu 2>&1) && { echo "the NVIDIA driver unloaded under nvpeer"; return 1; }
    echo "rmmod nvidia (nvp2p_emu) first: $out"
    out=$(rmmod peer_mem_emu 2>&1) && { echo "DOCA's core unloaded under nvpeer"; return 1; }
    echo "rmmod DOCA's core first: $out"
    rmmod nvidia-peermem peer_mem_emu || return 1
    echo "rmmod nvidia-peermem peer_mem_emu: ok"
    grep -qE '^(nvidia_peermem|peer_mem_emu) ' /proc/modules && { echo "still loaded"; return 1; }
    return 0
}
tb_case unload-order unload_order

# DOCA's core not loaded (its driver pod restarting) while .driver-ready is still there: one line,
# and nothing of the container's tree is loaded in its place.
doca_missing() {
    local rc=0
    sidecar || rc=$?
    [ $rc != 0 ] || { echo "loaded without DOCA's core"; return 1; }
    fail_line "no loaded module exports ib_register_peer_memory_client" ||
        { echo "want one line naming DOCA's missing core"; return 1; }
    ! grep -qE '^(nvidia_peermem|peer_mem_emu) ' /proc/modules || { echo "something was loaded"; return 1; }
}
tb_case doca-core-not-loaded doca_missing

# DOCA reloaded (its pod restarted; an OFED upgrade without a CRC on this kernel): the sidecar's
# next start loads nvpeer again; the build still fits, nothing is compiled.
doca_reloaded() {
    doca_load || return 1
    sidecar || return 1
    is_nvpeer && validator || return 1
    grep -q "still fits" "$O/sidecar.log" || { echo "the stored build was not reused"; return 1; }
    ! grep -q "building nvpeer" "$O/sidecar.log" || { echo "rebuilt"; return 1; }
}
tb_case doca-reloaded doca_reloaded

# A driver pod recreated after DOCA unloaded nvidia_peermem (NVIDIA/gpu-operator#2619): the new
# pod took the userspace-only path, which leaves no module tree for the kernel and no headers;
# the script installs the build it kept in /run/nvidia/nvpeer and the sidecar loads it.
restart_unloaded() {
    rmmod nvidia-peermem || return 1
    ctr_down; ctr_up 3 && ctr_mount_rootfs || return 1
    [ ! -e "$R/lib/modules/$KREL" ] || { echo "the new pod has a module tree"; return 1; }
    sidecar || return 1
    is_nvpeer && validator || return 1
    grep -q "installed $DST" "$O/sidecar.log" || { echo "not installed from the stored build"; return 1; }
}
tb_case pod-restart-module-unloaded restart_unloaded

# A build that cannot be made: a new pod on the userspace-only path whose stored build is gone
# (a node where it never ran): one line naming the cause; the next retry prints it again without
# rebuilding, as long as nothing changed.
cannot_build() {
    local first
    rmmod nvidia-peermem || return 1
    rm -rf "$STATE"
    ctr_down; ctr_up 4 && ctr_mount_rootfs || return 1
    sidecar && { echo "loaded without a build"; return 1; }
    fail_line "no kernel headers for $KREL in this container" || { echo "want one line naming the headers"; return 1; }
    first=$(grep '^nvpeer-driver-container: ' "$O/sidecar.log")
    sidecar && return 1
    fail_line "nothing changed since, not rebuilt" && grep -qF "${first#nvpeer-driver-container: } (as at " "$O/sidecar.log" ||
        { echo "the retry did not repeat the recorded line"; return 1; }
}
tb_case build-impossible-one-line cannot_build

ctr_down
unload_all
rm -rf /run/nvidia/nvpeer
umount /run/nvidia 2>/dev/null

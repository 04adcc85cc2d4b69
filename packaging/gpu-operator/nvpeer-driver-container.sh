#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# nvpeer in the NVIDIA GPU Operator's driver container (docs/install.md, "GPU Operator").
#
# The operator loads nvidia-peermem from the driver container's own module tree, never from the
# host's DKMS: with driver.rdma.enabled=true the driver pod's nvidia-driver-ctr runs `modprobe
# nvidia-peermem` in _load_driver, and its sidecar nvidia-peermem-ctr, whose image is the driver
# image (transformPeerMemoryContainer, NVIDIA/gpu-operator controllers/object_controls.go), waits
# for /run/mellanox/drivers/.driver-ready (useHostMofed: mlx5_core in lsmod) and runs `chroot
# /run/nvidia/driver modprobe nvidia-peermem`, where /run/nvidia/driver is the driver container's
# root bind-mounted by _mount_rootfs (NVIDIA/gpu-driver-container ubuntu24.04/nvidia-driver:
# reload_nvidia_peermem). That script offers no hook of its own; both paths go through modprobe,
# so this script is wired in as modprobe's `install` command for nvidia_peermem
# (/etc/modprobe.d/nvpeer-driver-container.conf, written by `install-hook` when the image is
# built): whoever runs `modprobe nvidia-peermem` in the container's root runs
# `nvpeer-driver-container modprobe-hook`, which
#   1. returns at once when nvpeer is loaded as nvidia_peermem (a driver pod restarted without a
#      reboot); fails when the loaded nvidia_peermem is NVIDIA's own;
#   2. makes sure the container's tree holds an nvpeer build that matches the running kernel, the
#      NVIDIA driver's and DOCA's symbol CRCs: the build kept in $NVPEER_STATE_DIR (default
#      /run/nvidia/nvpeer, on the host's /run/nvidia, so it outlives the pod but not a reboot) when
#      it still matches, else a new build from /usr/src/nvpeer-<version> against the kernel
#      headers the driver container installed, NVIDIA's source in /usr/src/nvidia-<version> and
#      DOCA's ofa_kernel headers (the Network Operator's, /run/mellanox/drivers/usr/src/ofa_kernel,
#      or the host's for useHostMofed), through nvpeer's preflight (scripts/preflight.sh);
#      installed as /lib/modules/<kernel>/updates/nvpeer/nvidia-peermem.ko with NVIDIA's own copy
#      set aside (renamed *.nvidia, which depmod does not index), then depmod; a failure there
#      puts the tree back as it was (install_ko);
#   3. checks that the peer-memory API is exported by a loaded module (DOCA's), so that modprobe
#      never pulls the container's inbox ib_core/ib_uverbs, which have no peer-memory API;
#   4. runs `modprobe --ignore-install nvidia-peermem` with the caller's options.
# Every failure is one line starting "nvpeer-driver-container: " and exit status 1; modprobe then
# fails and nvidia-peermem-ctr exits 1 ("failed to load nvidia-peermem module"): kubelet restarts
# it with its back-off (at most every 5 minutes). A failed build is recorded with its inputs
# ($NVPEER_STATE_DIR/<kernel>/failed): while they are unchanged a restart prints the same line
# again without rebuilding; an input that changes (DOCA upgraded or reloaded, new headers, new
# driver, new nvpeer) starts one new build.
#
#   nvpeer-driver-container install-hook     write the modprobe.d file (image build time)
#   nvpeer-driver-container modprobe-hook [OPTION=VALUE...]   what modprobe runs (above)
#   nvpeer-driver-container prepare          step 2 alone: build or reuse, install, depmod
#
# Environment (also read from /etc/nvpeer/driver-container.env, for values baked into the image:
# the sidecar's environment is not the driver container's): KERNEL_VERSION (default: uname -r),
# NVPEER_STATE_DIR, NVPEER_DOCA_ROOT (default /run/mellanox/drivers: the Network Operator's DOCA
# driver container's root), NVPEER_OFED_DIR, NVPEER_NVIDIA_SRC (override the searches),
# NVPEER_APT (1, the default: install linux-lib-rust-<kernel> and the kernel's rustc-<x.y> with
# apt-get when missing, as the driver container installs the kernel headers; 0: never).
set -uo pipefail

ME=nvpeer-driver-container
# (values baked into the image; the environment wins)
if [ -f /etc/nvpeer/driver-container.env ]; then
    _saved=$(export -p)
    # shellcheck disable=SC1091
    . /etc/nvpeer/driver-container.env
    eval "$_saved"
    unset _saved
fi
K=${KERNEL_VERSION:-$(uname -r)}
STATE=${NVPEER_STATE_DIR:-/run/nvidia/nvpeer}/$K
DOCA=${NVPEER_DOCA_ROOT:-/run/mellanox/drivers}
MODDIR=/lib/modules/$K
DST=$MODDIR/updates/nvpeer/nvidia-peermem.ko
OFED_SYMS="ib_register_peer_memory_client ib_unregister_peer_memory_client"
NV_SYMS="nvidia_p2p_get_pages nvidia_p2p_put_pages nvidia_p2p_dma_map_pages nvidia_p2p_dma_unmap_pages"
DESCRIPTION="GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)"

say() { echo "$ME: $*" >&2; }
die() { echo "$ME: $*" >&2; exit 1; }

# nvpeer's source tree: what `make dkms-source` packs, at /usr/src/nvpeer-<version>.
SRC=${NVPEER_SRC:-$(ls -d /usr/src/nvpeer-* 2>/dev/null | sort -V | tail -n 1)}
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$SRC/dkms.conf" 2>/dev/null)

# ---- what the build depends on, found where the driver container and DOCA put it ------------
# ofed_dir: the OFED source tree with include/rdma/peer_mem.h: the Network Operator's DOCA
# container exposes its /usr/src at /run/mellanox/drivers/usr/src (the driver pod mounts it;
# NVIDIA's _link_ofa_kernel links it to /usr/src/ofa_kernel), per kernel under <arch>/<kernel>.
ofed_dir() {
    local b d arch
    arch=$(uname -m)
    if [ -n "${NVPEER_OFED_DIR:-}" ]; then echo "$NVPEER_OFED_DIR"; return; fi
    for b in "$DOCA/usr/src/ofa_kernel" /usr/src/ofa_kernel; do
        for d in "$b/$arch/$K" "$b/$K" "$b/default"; do
            [ -f "$d/include/rdma/peer_mem.h" ] && { echo "$d"; return; }
        done
    done
}
# nvidia_src: NVIDIA's open kernel module source with nvidia/nv-p2p.h: nvidia-installer puts it
# in /usr/src/nvidia-<version>; the driver container's userspace-only path moves the .run's
# kernel-open/ there (_move_kernel_module_sources).
nvidia_src() {
    local top d
    if [ -n "${NVPEER_NVIDIA_SRC:-}" ]; then echo "$NVPEER_NVIDIA_SRC"; return; fi
    for top in ${DRIVER_VERSION:+/usr/src/nvidia-"$DRIVER_VERSION"} $(ls -d /usr/src/nvidia-* 2>/dev/null | sort -rV); do
        for d in "$top" "$top/kernel-open"; do
            [ -f "$d/nvidia/nv-p2p.h" ] && { echo "$d"; return; }
        done
    done
}
# doca_ko: DOCA's module file that exports the peer-memory API (ib_uverbs in DOCA-OFED 3.x), in
# the DOCA container's root as depmod indexed it, else by name.
doca_ko() {
    local m ko
    [ -d "$DOCA/lib/modules/$K" ] || return 0
    for m in symbol:ib_register_peer_memory_client ib_uverbs ib_core; do
        ko=$(modinfo -b "$DOCA" -k "$K" -n "$m" 2>/dev/null | head -n 1)
        [ -n "$ko" ] && [ -f "$DOCA$ko" ] && { echo "$DOCA$ko"; return; }
        [ -n "$ko" ] && [ -f "$ko" ] && { echo "$ko"; return; }
    done
}
# norm: "CRC SYMBOL" lines, CRC as 0x%08x, sorted.
norm() { while read -r c s _; do [ -n "$s" ] && printf '0x%08x %s\n' "$((c & 0xffffffff))" "$s"; done | sort; }
# symvers_crcs FILE SYM...: the CRCs a Module.symvers gives.
symvers_crcs() {
    local f=$1; shift
    [ -f "$f" ] || return 0
    awk -v want=" $* " 'index(want, " " $2 " ") { print $1, $2 }' "$f" | norm
}
# ko_exports KO PROVIDER: the CRCs KO exports for PROVIDER's symbols (empty without MODVERSIONS).
ko_exports() {
    local t
    t=$(mktemp) || return 0
    "$SRC/scripts/gen-symvers.sh" "$t" "$2=$1" 2>/dev/null && awk '{ print $1, $2 }' "$t" | norm
    rm -f "$t"
}
# ko_imports KO SYM...: the CRCs nvpeer's build KO was linked against (its __versions).
ko_imports() {
    local ko=$1; shift
    modprobe --dump-modversions "$ko" 2>/dev/null | awk -v want=" $* " 'index(want, " " $2 " ") { print $1, $2 }' | norm
}
# doca_crcs: the CRCs DOCA exports now: its Module.symvers, else its installed module.
doca_crcs() {
    local d ko out
    d=$(ofed_dir)
    out=$( [ -z "$d" ] || symvers_crcs "$d/Module.symvers" $OFED_SYMS )
    if [ -z "$out" ] && ko=$(doca_ko) && [ -n "$ko" ]; then out=$(ko_exports "$ko" ofed); fi
    echo "$out"
}
# nvidia_crcs: the CRCs the NVIDIA module in the container's tree exports (none on the
# userspace-only path, which installs no module: the loaded one is the one the build matched).
nvidia_crcs() {
    local ko
    ko=$(modinfo -k "$K" -n symbol:nvidia_p2p_get_pages 2>/dev/null | head -n 1)
    [ -z "$ko" ] || case $ko in "$DST"|*/nvidia-peermem.ko*) ;; *) ko_exports "$ko" nvidia | grep -E " ($(echo "$NV_SYMS" | tr ' ' '|'))\$" ;; esac
}

# stale KO: why nvpeer's build KO does not fit this node now (nothing when it fits).
stale() {
    local ko=$1 have want
    [ "$(modinfo -F vermagic "$ko" 2>/dev/null | awk '{ print $1 }')" = "$K" ] || { echo "it was built for another kernel"; return; }
    [ "$(modinfo -F version "$ko" 2>/dev/null)" = "$VER" ] || { echo "it is not nvpeer $VER"; return; }
    # shellcheck disable=SC2086
    have=$(ko_imports "$ko" $OFED_SYMS)
    want=$(doca_crcs)
    if [ -n "$have" ] && [ -n "$want" ] && [ "$have" != "$want" ]; then
        echo "DOCA's CRC of ib_register_peer_memory_client is now $(echo "$want" | awk '$2 == "ib_register_peer_memory_client" { print $1 }'), the build has $(echo "$have" | awk '$2 == "ib_register_peer_memory_client" { print $1 }') (an OFED upgrade)"
        return
    fi
    # shellcheck disable=SC2086
    have=$(ko_imports "$ko" $NV_SYMS)
    want=$(nvidia_crcs)
    if [ -n "$have" ] && [ -n "$want" ] && [ "$have" != "$want" ]; then
        echo "the NVIDIA driver's CRCs changed (a driver upgrade)"
    fi
}

# inputs: what a build depends on; a failed build is not retried while these are unchanged.
inputs() {
    printf '%s\n' "kernel $K" "nvpeer $VER" "headers $(cat "$MODDIR/build/include/config/kernel.release" 2>/dev/null)" \
        "rust $(ls "$MODDIR/build/rust/libcore.rmeta" 2>/dev/null)" "ofed $(ofed_dir)" "nvidia $(nvidia_src)"
    doca_crcs
    nvidia_crcs
    # (a reloaded core has a new address)
    grep -E '^(ib_uverbs|ib_core) ' /proc/modules 2>/dev/null | awk '{ print $1, $6 }'
}

# ensure_toolchain KDIR: the kernel's Rust artifacts and rustc from the distribution's archive
# when missing (Ubuntu: linux-lib-rust-<kernel>, rustc-<x.y>); the preflight names what is still
# missing afterwards.
ensure_toolchain() {
    local kdir=$1 rv mm pkgs=""
    [ "${NVPEER_APT:-1}" = 1 ] && command -v apt-get >/dev/null 2>&1 || return 0
    [ -e "$kdir/rust/libcore.rmeta" ] || pkgs="linux-lib-rust-$K"
    rv=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="rustc \([0-9.]*\).*/\1/p' "$kdir/include/config/auto.conf" 2>/dev/null)
    mm=${rv%.*}
    if [ -n "$rv" ] && ! { rustc --version 2>/dev/null; "rustc-$mm" --version 2>/dev/null; } | grep -q "^rustc $rv "; then
        pkgs="$pkgs rustc-$mm"
    fi
    [ -n "$pkgs" ] || return 0
    say "installing$pkgs with apt-get (the kernel's Rust artifacts and compiler)"
    # shellcheck disable=SC2086
    { apt-get -qq update && apt-get install -y --no-install-recommends $pkgs; } >>"$STATE/build.log" 2>&1 ||
        say "apt-get could not install$pkgs (see $STATE/build.log); the preflight says what is missing"
}

# build_failed LINE: record the failure with its inputs; exit 1 with LINE.
build_failed() {
    { inputs; echo "line $1"; } >"$STATE/failed"
    die "$1"
}

build() {
    local kdir=$MODDIR/build odir nvsrc ofed_symvers="" ko b line
    : >"$STATE/build.log"
    [ -f "$kdir/.config" ] ||
        build_failed "no kernel headers for $K in this container ($kdir) and no build of nvpeer that fits: the driver container installs them on its full install path; restart the driver pod with FORCE_REINSTALL=true (NVIDIA/cloud-native-docs#372) or give it the headers"
    nvsrc=$(nvidia_src)
    [ -n "$nvsrc" ] ||
        build_failed "no NVIDIA open kernel module source with nvidia/nv-p2p.h under /usr/src/nvidia-*: the driver container installs it with the driver; nvpeer needs the open modules (ClusterPolicy driver.kernelModuleType=open)"
    [ "$(modinfo -k "$K" -F license nvidia 2>/dev/null | head -n 1)" != NVIDIA ] ||
        build_failed "the NVIDIA driver in this container is the proprietary flavour: nvpeer (GPL) needs the open kernel modules (ClusterPolicy driver.kernelModuleType=open)"
    odir=$(ofed_dir)
    [ -n "$odir" ] ||
        build_failed "no OFED peer-memory headers (include/rdma/peer_mem.h) under $DOCA/usr/src/ofa_kernel (the Network Operator's DOCA driver container) or /usr/src/ofa_kernel (useHostMofed=true: docs/install.md, 'GPU Operator'); upstream RDMA has no peer-memory API"
    # DOCA's CRCs: its Module.symvers, else its module file (gen-symvers.sh; without MODVERSIONS
    # only the module name, for depends=).
    if [ -z "$(symvers_crcs "$odir/Module.symvers" $OFED_SYMS)" ] && ko=$(doca_ko) && [ -n "$ko" ]; then
        ofed_symvers=$STATE/ofed.symvers
        if ! "$SRC/scripts/gen-symvers.sh" "$ofed_symvers" "ofed=$ko" 2>/dev/null; then
            grep -q '^CONFIG_MODVERSIONS=y' "$kdir/.config" &&
                build_failed "DOCA's $ko exports no CRC for ib_register_peer_memory_client on this MODVERSIONS kernel: reinstall DOCA's driver for $K"
            "$SRC/scripts/gen-symvers.sh" "$ofed_symvers" "ofed:$(modinfo -F name "$ko" 2>/dev/null || basename "${ko%%.ko*}")" || ofed_symvers=""
        fi
    fi
    ensure_toolchain "$kdir"
    b=$(mktemp -d /tmp/nvpeer-build.XXXXXX) || build_failed "cannot create a build directory under /tmp"
    cp -a "$SRC/." "$b/" || build_failed "cannot copy $SRC to $b"
    say "building nvpeer $VER for $K against $nvsrc and $odir (log: $STATE/build.log)"
    if ! { make -s -C "$b" KDIR="$kdir" OFED_DIR="$odir" NVIDIA_SRC="$nvsrc" ${ofed_symvers:+OFED_SYMVERS="$ofed_symvers"} preflight &&
        make -C "$b" KDIR="$kdir" NVPEER_MODULE=nvidia-peermem OFED_DIR="$odir" NVIDIA_SRC="$nvsrc" \
            ${ofed_symvers:+OFED_SYMVERS="$ofed_symvers"} modules; } >>"$STATE/build.log" 2>&1; then
        line=$(grep -h '^nvpeer preflight: ' "$STATE/build.log" | tail -n 1)
        [ -n "$line" ] || line="the build of nvpeer for $K failed: $(grep -m1 -E 'error(\[E[0-9]+\])?:|Error [0-9]' "$STATE/build.log" | cut -c1-200) (log: $STATE/build.log)"
        rm -rf "$b"
        build_failed "$line"
    fi
    grep -h '^nvpeer preflight: ok' "$STATE/build.log" | tail -n 1 | sed "s/^/$ME: /" >&2
    install -m 0644 "$b/nvidia-peermem.ko" "$STATE/nvidia-peermem.ko" || build_failed "cannot store the build in $STATE"
    rm -rf "$b" "$STATE/failed"
}

# install_ko: nvpeer's build into the container's tree, NVIDIA's nvidia-peermem.ko set aside.
# All or nothing: every rename and copy is checked, and on any failure (a rename, depmod, the
# check that nvidia-peermem resolves to nvpeer's file, a signal) the EXIT trap puts back exactly
# what this run changed: nvpeer's file removed (or the copy it replaced back), each of NVIDIA's
# files back under its own name, the directories it created gone, and depmod's index files as
# they were (saved before depmod ran): the tree is as it was before the call.
INSTALL_RENAMED=()   # FROM TO pairs, in the order done
INSTALL_DIRS=()      # directories created, children first
INSTALL_SAVED=""     # depmod's index files as they were, and a copy of the nvpeer file replaced
INSTALL_ACTIVE=0

install_undo() {
    local i f
    [ "$INSTALL_ACTIVE" = 1 ] || return 0
    INSTALL_ACTIVE=0
    # (the file this run installed goes first: a copy it replaced is among the renames)
    rm -f "$DST"
    for ((i = ${#INSTALL_RENAMED[@]} - 2; i >= 0; i -= 2)); do
        mv -f -T -- "${INSTALL_RENAMED[i + 1]}" "${INSTALL_RENAMED[i]}" ||
            echo "$ME: cannot move ${INSTALL_RENAMED[i + 1]} back to ${INSTALL_RENAMED[i]}: do it by hand" >&2
    done
    for f in "$MODDIR"/modules.*; do
        [ -e "$f" ] || continue
        [ -e "$INSTALL_SAVED/index/${f##*/}" ] || rm -f "$f"
    done
    for f in "$INSTALL_SAVED"/index/modules.*; do
        [ -e "$f" ] || continue
        cp -p "$f" "$MODDIR/" || echo "$ME: cannot restore depmod's $MODDIR/${f##*/}: run depmod -a $K" >&2
    done
    for f in "${INSTALL_DIRS[@]}"; do rmdir "$f" 2>/dev/null; done
    rm -rf "$INSTALL_SAVED"
    echo "$ME: the container's module tree for $K is as it was (nvpeer not installed)" >&2
}
install_trap() { local rc=$?; [ $rc = 0 ] || install_undo; }

# install_mv FROM TO: a checked, recorded rename.
install_mv() {
    mv -f -T -- "$1" "$2" || die "cannot rename $1 to $2"
    INSTALL_RENAMED+=("$1" "$2")
}

install_ko() {
    local f d got
    INSTALL_RENAMED=() INSTALL_DIRS=()
    INSTALL_SAVED=$(mktemp -d "$STATE/install.XXXXXX") || die "cannot create a directory under $STATE"
    INSTALL_ACTIVE=1
    trap install_trap EXIT
    trap 'exit 1' INT TERM HUP
    mkdir -p "$INSTALL_SAVED/index" || die "cannot save depmod's index files in $INSTALL_SAVED"
    for f in "$MODDIR"/modules.*; do
        [ -e "$f" ] || continue
        cp -p "$f" "$INSTALL_SAVED/index/" || die "cannot save $f before depmod"
    done
    d=${DST%/*}
    while [ ! -d "$d" ]; do INSTALL_DIRS+=("$d"); d=${d%/*}; done
    mkdir -p "${DST%/*}" || die "cannot create ${DST%/*}"
    [ ! -e "$DST" ] || install_mv "$DST" "$INSTALL_SAVED/previous.ko"
    install -m 0644 "$STATE/nvidia-peermem.ko" "$DST" || die "cannot install nvpeer into $DST"
    while IFS= read -r f; do
        [ "$f" = "$DST" ] && continue
        install_mv "$f" "$f.nvidia"
        say "NVIDIA's $f set aside as $f.nvidia"
    done < <(find "$MODDIR" \( -name 'nvidia-peermem.ko' -o -name 'nvidia-peermem.ko.[gxz]*' \) ! -name '*.nvidia' 2>/dev/null)
    depmod -a "$K" 2>>"$STATE/build.log" || die "depmod -a $K failed (see $STATE/build.log)"
    got=$(modinfo -k "$K" -n nvidia-peermem 2>/dev/null)
    [ "$got" = "$DST" ] && [ "$(modinfo -k "$K" -F description nvidia-peermem)" = "$DESCRIPTION" ] ||
        die "after depmod, nvidia-peermem for $K resolves to ${got:-nothing}, not nvpeer's $DST"
    INSTALL_ACTIVE=0
    trap - EXIT INT TERM HUP
    rm -rf "$INSTALL_SAVED"
}

prepare() {
    local why line
    [ -n "$VER" ] || die "no nvpeer source tree in /usr/src (nvpeer-<version>/dkms.conf): the image is not built from packaging/gpu-operator/Containerfile"
    mkdir -p "$STATE" || die "cannot create $STATE"
    exec 9>"$STATE/lock" && flock 9 || die "cannot lock $STATE/lock"
    if [ -f "$STATE/failed" ] && [ "$(inputs)" = "$(grep -v '^line ' "$STATE/failed")" ]; then
        line=$(sed -n 's/^line //p' "$STATE/failed")
        die "$line (as at $(date -r "$STATE/failed" '+%F %T'); nothing changed since, not rebuilt)"
    fi
    if [ -f "$STATE/nvidia-peermem.ko" ]; then
        why=$(stale "$STATE/nvidia-peermem.ko")
        if [ -z "$why" ]; then
            say "nvpeer $VER for $K: the build of $(date -r "$STATE/nvidia-peermem.ko" '+%F %T') still fits (kernel, DOCA's and NVIDIA's CRCs)"
        else
            say "nvpeer $VER for $K: the stored build no longer fits: $why; rebuilding"
            build
        fi
    else
        build
    fi
    if [ -f "$DST" ] && cmp -s "$DST" "$STATE/nvidia-peermem.ko" && [ "$(modinfo -k "$K" -n nvidia-peermem 2>/dev/null)" = "$DST" ]; then
        return 0
    fi
    install_ko
    say "installed $DST (nvpeer $VER) for $K"
}

# loaded_is_nvpeer: the loaded nvidia_peermem is nvpeer's build: its functions are in the
# kernel's symbol table under that module (names are listed even where kptr_restrict hides the
# addresses), and nvpeer's C shim defines nvpeer_shim_* functions, which NVIDIA's nvidia-peermem.c
# does not. (/sys/module/nvidia_peermem/version would tell too, but the sidecar's chroot into the
# driver container's root has no /sys.)
loaded_is_nvpeer() {
    grep -qE '[[:space:]]nvpeer_shim_[a-z_]+[[:space:]]+\[nvidia_peermem\]' /proc/kallsyms 2>/dev/null
}

hook() {
    local out rc=0 log v
    if grep -q '^nvidia_peermem ' /proc/modules; then
        if ! [ -r /proc/kallsyms ]; then
            die "nvidia_peermem is loaded, and /proc/kallsyms is not readable to tell whether it is nvpeer's: nothing done"
        fi
        if ! loaded_is_nvpeer; then
            v=$(cat /sys/module/nvidia_peermem/version 2>/dev/null)
            die "nvidia_peermem is loaded but it is not nvpeer's${v:+ (version $v)}: NVIDIA's own nvidia-peermem is in place of nvpeer; unload it ('rmmod nvidia_peermem', no MR may be live) and run 'modprobe nvidia-peermem' again"
        fi
        say "nvidia_peermem is already loaded and it is nvpeer's: nothing to do"
        return 0
    fi
    prepare || exit 1
    grep -qE '[[:space:]]ib_register_peer_memory_client([[:space:]]|$)' /proc/kallsyms ||
        die "no loaded module exports ib_register_peer_memory_client: DOCA's ib_uverbs is not loaded (Network Operator: its DOCA driver pod on this node is not ready; useHostMofed=true: load the host's DOCA-OFED, openibd); the container's inbox RDMA modules have no peer-memory API"
    out=$(modprobe --ignore-install nvidia-peermem "$@" 2>&1) || rc=$?
    [ $rc = 0 ] && { say "loaded nvpeer $VER as nvidia_peermem"; return 0; }
    log=$(dmesg 2>/dev/null | grep 'nvidia_peermem: ' | tail -n 4)
    case $log in
    *"disagrees about version of symbol ib_"*)
        die "the loaded OFED core exports $(echo "$log" | sed -n 's/.*disagrees about version of symbol \(ib_[a-z_]*\).*/\1/p' | tail -n 1) with another CRC than DOCA's files that nvpeer was built against (DOCA upgraded on disk but not reloaded, or the reverse; NVIDIA/gpu-operator#2868): restart the Network Operator's DOCA driver pod on this node; nvidia-peermem-ctr then rebuilds and loads nvpeer by itself" ;;
    *"disagrees about version of symbol nvidia_"*)
        die "the loaded NVIDIA driver exports the P2P API with other CRCs than the one in this container's tree: delete the driver pod so that it reinstalls the driver" ;;
    *)
        die "modprobe nvidia-peermem failed: $(echo "$out" | tail -n 1)${log:+; kernel: $(echo "$log" | tail -n 1 | sed 's/^\[[^]]*\] *//')}" ;;
    esac
}

case ${1:-} in
install-hook)
    self=$(readlink -f "$0")
    mkdir -p /etc/modprobe.d &&
        printf '%s\n' "# nvpeer: modprobe nvidia-peermem builds (or reuses) and loads nvpeer ($self)" \
            "install nvidia_peermem $self modprobe-hook \$CMDLINE_OPTS" >/etc/modprobe.d/nvpeer-driver-container.conf ||
        die "cannot write /etc/modprobe.d/nvpeer-driver-container.conf" ;;
modprobe-hook) shift; hook "$@" ;;
prepare) prepare ;;
*) echo "usage: $ME install-hook | modprobe-hook [OPTION=VALUE...] | prepare" >&2; exit 2 ;;
esac

# Packaging for real: `make dkms-install` (dkms add/build/install of nvpeer against the bench
# kernel, through the PRE_BUILD preflight and the emulators' symbols, BENCH=1) under the drop-in
# module name nvidia-peermem, then `modprobe nvidia-peermem` resolving its dependencies from
# modules.dep, `modprobe -r`, a reinstall, the modprobe.d rules (nothing blocks the name nvpeer
# loads under; Mellanox's nv_peer_mem is kept out), and a second nv_mem provider refused with
# nvpeer's one-line message. The guest root is read-only 9p: the DKMS source tree goes to
# tmpfs (--sourcetree); /var/lib/dkms and /lib/modules are tmpfs already (guest init), and the
# modprobe.d file goes to /run/modprobe.d.
# In make check, `make dkms-install` itself ran natively in the same toolchain root against the same
# kernel build tree (testbench/lib/dkms-build.sh, the "dkms-build" stage): its output arrives as
# /bench/dkms-prebuilt.tar and is unpacked where it was written, and every later case runs on it in
# this guest. Without that file (make check-full, this suite run by hand) the guest compiles it
# under TCG (300-700 s).
# bench: boot system
# bench: check-kernel stock
# bench: budget stock 25 25
# bench: budget-full - 540 540

KREL=$(uname -r)
SRCTREE=/tmp/nvpeer-dkms-src
export NVPEER_MAKE_ARGS="BENCH=1"
MAKE_ARGS=(-C /src "DKMS_SOURCE_TREE=$SRCTREE" NVPEER_MAKE_ARGS=BENCH=1
           MODPROBE_DIR=/run/modprobe.d SYSTEMD_DIR=/run/systemd/system DKMS_FORCE_DIR=/run/dkms-force)
# The module name DKMS installs (dkms.conf).
MOD=nvidia-peermem; SYSMOD=/sys/module/nvidia_peermem
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
DK=(dkms --sourcetree "$SRCTREE")

have() { command -v "$1" >/dev/null || { echo "$1 not in the guest root"; return 77; }; }

# The RDMA modules earlier suites left (tb_rdma_unload), then ours.
unload_all() {
    tb_rdma_unload
    modprobe -r nvidia-peermem nvpeer classic_peer nv_peer_mem peer_mem_emu nvp2p_emu 2>/dev/null
    return 0
}

dkms_install() {
    have dkms || return $?
    unload_all
    # The guest init installed the host-built nvpeer.ko and nvidia-peermem.ko; take them away so
    # only DKMS's copy exists.
    rm -f "/lib/modules/$KREL/extra/nvpeer.ko" "/lib/modules/$KREL/extra/nvidia-peermem.ko" && depmod -a || return 1
    local rc=0
    if [ -f /bench/dkms-prebuilt.tar ]; then
        echo "make dkms-install ran in the toolchain root (dkms-build stage); unpacking its output"
        tar -C / -xf /bench/dkms-prebuilt.tar && depmod -a || return 1
        # The preflight check below reads dkms's own make.log, which the tree carries.
        : >/tmp/dkms-install.log
    else
        if [ "${NVPEER_SIG_ENFORCE:-0}" = 1 ]; then
            # The kernel refuses unsigned modules (module.sig_enforce=1, testbench/vm): DKMS signs
            # with the machine owner key the kernel trusts, where Debian's DKMS looks for it.
            install -m 600 /kernel/mok/mok.key /var/lib/dkms/mok.key &&
                install -m 644 /kernel/mok/mok.der /var/lib/dkms/mok.pub || return 1
        fi
        make "${MAKE_ARGS[@]}" dkms-install >/tmp/dkms-install.log 2>&1 || rc=$?
        cat /tmp/dkms-install.log
        if [ "$rc" = 0 ] && [ "${NVPEER_SIG_ENFORCE:-0}" = 1 ]; then
            local signer
            signer=$(modinfo -F signer "$MOD")
            echo "signed by: ${signer:-nobody}"
            [ "$signer" = "nvpeer bench MOK" ] || { echo "DKMS did not sign $MOD with the MOK"; return 1; }
        fi
    fi
    # dkms keeps the PRE_BUILD and make output in make.log (build/ while building, log/ after).
    local logs
    logs=$(find /var/lib/dkms/nvpeer -name make.log 2>/dev/null)
    if [ "$rc" != 0 ]; then
        # (a failed dkms-install undoes itself, dkms's tree included: the build's log is the copy
        # it keeps and names, packaging/dkms-install.sh)
        # shellcheck disable=SC2086
        [ -n "$logs" ] && tail -n 40 $logs
        tail -n 40 "${TMPDIR:-/tmp}"/nvpeer-dkms-build-"$VER"-*.log 2>/dev/null
        return 1
    fi
    # The PRE_BUILD hook ran the build preflight, and it passed.
    # shellcheck disable=SC2086
    grep -q "nvpeer preflight: ok" $logs /tmp/dkms-install.log || { echo "PRE_BUILD preflight did not run"; return 1; }
    "${DK[@]}" status -m nvpeer
    "${DK[@]}" status -m nvpeer -v "$VER" -k "$KREL" | grep -q "installed" || { echo "dkms status is not 'installed'"; return 1; }
    local ko desc
    ko=$(modinfo -n $MOD) || return 1
    echo "modinfo -n $MOD: $ko"
    # Debian's dkms installs in updates/dkms, which depmod searches before kernel/ (where NVIDIA's
    # installer puts its own nvidia-peermem.ko).
    case $ko in */updates/dkms/$MOD.ko*) ;; *) echo "unexpected install path $ko"; return 1 ;; esac
    desc=$(modinfo -F description $MOD)
    echo "modinfo -F description $MOD: $desc"
    [ "$desc" = "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)" ] || { echo "modinfo does not say nvpeer"; return 1; }
    modinfo -n nvpeer >/dev/null 2>&1 && { echo "DKMS also installed the plain nvpeer name"; return 1; }
    [ -f /run/modprobe.d/nvpeer.conf ] || { echo "modprobe.d file not installed"; return 1; }
    # DKMS's own format (force_installation: "<package>_version-override"), so that NVIDIA's higher
    # module version does not stop the install. The bench root is read-only: the file goes to /run
    # here, and dkms (which reads /usr/share/dkms/modules_to_force_install) never sees it.
    [ "$(cat /run/dkms-force/nvpeer)" = nvpeer_version-override ] || { echo "no dkms version-override entry"; return 1; }
}
tb_case dkms-add-build-install dkms_install

# The PRE_BUILD preflight refuses a kernel without Rust artifacts; BUILD_EXCLUSIVE skips one without
# CONFIG_RUST. A build-time check: in make check the dkms-build stage ran it natively.
. /src/testbench/lib/dkms-prebuild-refuses.sh
if [ ! -f /bench/dkms-prebuilt.tar ]; then
    tb_case prebuild-refuses dkms_prebuild_refuses "$VER" "$SRCTREE"
fi

# The core's client list, as the default model (DOCA-OFED 3.x: no memory_peers in sysfs) keeps it.
core_has_nv_mem() { $NVPEER emu core clients | grep -qE '^[0-9]+ nv_mem version'; }

modprobe_deps() {
    unload_all
    modinfo -F depends $MOD
    modprobe $MOD || { dmesg | tail -n 5; return 1; }
    for m in nvidia_peermem nvp2p_emu peer_mem_emu; do
        [ -e "/sys/module/$m" ] || { echo "$m not loaded by 'modprobe $MOD'"; return 1; }
    done
    core_has_nv_mem || { echo "no nv_mem client in the core"; $NVPEER emu core clients; return 1; }
    # What NCCL, UCX and NVSHMEM read on a kernel without memory_peers.
    [ "$(cat $SYSMOD/version)" = "$VER" ] || { echo "$SYSMOD/version differs from $VER"; return 1; }
    echo "$SYSMOD/version: $(cat $SYSMOD/version)"
}
tb_case modprobe-resolves-deps modprobe_deps

modprobe_remove() {
    # ib_core, where it is a module (Debian's kernel) and loaded, is no dependency of nvpeer's
    # here (the core emulator provides the peer-memory API): modprobe -r must leave it alone.
    local ib_core=0
    [ -e /sys/module/ib_core/refcnt ] && ib_core=1
    modprobe -r $MOD || return 1
    [ ! -e $SYSMOD ] || { echo "nvidia_peermem still loaded"; return 1; }
    # modprobe -r also drops the dependencies nobody else uses.
    [ ! -e /sys/module/nvp2p_emu ] || { echo "nvp2p_emu still loaded"; return 1; }
    if [ $ib_core = 1 ]; then
        [ -e /sys/module/ib_core ] || { echo "modprobe -r $MOD removed ib_core"; return 1; }
        echo "ib_core (a module here) left loaded"
    fi
}
tb_case modprobe-r modprobe_remove

reinstall() {
    "${DK[@]}" uninstall -m nvpeer -v "$VER" -k "$KREL" || return 1
    modinfo -n $MOD 2>/dev/null && { echo "module still resolvable after dkms uninstall"; return 1; }
    "${DK[@]}" install -m nvpeer -v "$VER" -k "$KREL" || return 1
    modprobe $MOD || return 1
    [ -r $SYSMOD/version ] || return 1
    modprobe -r $MOD
}
tb_case reinstall reinstall

modprobe_config() {
    local out rc=0
    # Nothing blocks the name nvpeer loads under: modprobe resolves it to DKMS's file.
    out=$(modprobe -n -v $MOD 2>&1) || rc=$?
    echo "modprobe -n -v $MOD: $out (rc $rc)"
    [ "$rc" = 0 ] && echo "$out" | grep -q "updates/dkms/$MOD.ko" || { echo "$MOD does not resolve to DKMS's module"; return 1; }
    echo "$out" | grep -q "/bin/false" && { echo "$MOD is blocked"; return 1; }
    out=$(modprobe -n -v nv_peer_mem 2>&1)
    echo "$out" | grep -q "install /bin/false" || { echo "nv_peer_mem not blocked"; return 1; }
    # No soft dependency: `modprobe -r` of nvpeer must not reach for the NVIDIA driver or ib_core.
    out=$(modprobe --showconfig | grep -E "^softdep (nvidia_peermem|nvpeer) ")
    [ -z "$out" ] || { echo "softdep configured: $out"; return 1; }
    out=$(modinfo -F softdep $MOD)
    [ -z "$out" ] || { echo "modinfo softdep: $out"; return 1; }
}
tb_case modprobe-config modprobe_config

# nvpeer refuses to load beside another nv_mem provider, found by module name (the default core
# model keeps no memory_peers and accepts a second nv_mem): nv_peer_mem is the classic client built
# under Mellanox's module name (the modprobe.d rule is bypassed with insmod, as a driver container
# would).
second_nv_mem_refused() {
    unload_all
    modprobe nvp2p_emu && modprobe peer_mem_emu || return 1
    insmod "/lib/modules/$KREL/extra/nv_peer_mem.ko" || return 1
    tb_kmsg "expect: nvpeer refuses a second nv_mem provider"
    if modprobe $MOD 2>/tmp/nvpeer-modprobe.err; then
        echo "nvpeer loaded beside nv_peer_mem"
        return 1
    fi
    cat /tmp/nvpeer-modprobe.err
    dmesg | tail -n 20 | grep "nvpeer: nv_peer_mem is loaded and serves the nv_mem peer-memory client" ||
        { echo "no clear message in the kernel log"; dmesg | tail -n 5; return 1; }
    [ ! -e $SYSMOD ] || { echo "nvidia_peermem half-loaded"; return 1; }
    rmmod nv_peer_mem || return 1
    modprobe $MOD || return 1
    modprobe -r $MOD
}
tb_case second-nv_mem-refused second_nv_mem_refused

dkms_remove() {
    make "${MAKE_ARGS[@]}" dkms-uninstall || return 1
    "${DK[@]}" status -m nvpeer | grep -q . && { echo "dkms still lists nvpeer"; return 1; }
    [ ! -e "$SRCTREE/nvpeer-$VER" ] || { echo "source copy left"; return 1; }
    [ ! -e /run/modprobe.d/nvpeer.conf ] || { echo "modprobe.d file left"; return 1; }
    ! modinfo $MOD >/dev/null 2>&1 || { echo "module still installed"; return 1; }
    [ ! -e /run/dkms-force/nvpeer ] || { echo "dkms version-override entry left"; return 1; }
}
tb_case dkms-remove dkms_remove

unload_all

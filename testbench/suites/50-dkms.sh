# Packaging for real: `make dkms-install` (dkms add/build/install of nvpeer against the bench
# kernel, through the PRE_BUILD preflight and the emulators' symbols, BENCH=1), then
# `modprobe nvpeer` resolving its dependencies from modules.dep, `modprobe -r`, a reinstall,
# the modprobe.d rules that keep the stock clients out, and a second `nv_mem` client being refused
# with nvpeer's one-line message. The guest root is read-only 9p: the DKMS source tree goes to
# tmpfs (--sourcetree); /var/lib/dkms and /lib/modules are tmpfs already (guest init), and the
# modprobe.d file goes to /run/modprobe.d.
# In make check, `make dkms-install` itself ran natively in the same toolchain root against the same
# kernel build tree (testbench/lib/dkms-build.sh, the "dkms-build" stage): its output arrives as
# /bench/dkms-prebuilt.tar and is unpacked where it was written, and every later case runs on it in
# this guest. Without that file (make check-full, this suite run by hand) the guest compiles it
# under TCG (300-700 s).
# bench: boot system

KREL=$(uname -r)
SRCTREE=/tmp/nvpeer-dkms-src
export NVPEER_MAKE_ARGS="BENCH=1"
MAKE_ARGS=(-C /src DKMS_SOURCE_TREE=$SRCTREE NVPEER_MAKE_ARGS=BENCH=1
           MODPROBE_DIR=/run/modprobe.d SYSTEMD_DIR=/run/systemd/system)
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
DK=(dkms --sourcetree "$SRCTREE")

have() { command -v "$1" >/dev/null || { echo "$1 not in the guest root"; return 77; }; }

unload_all() { modprobe -r nvpeer classic_peer peer_mem_emu nvp2p_emu 2>/dev/null; return 0; }

dkms_install() {
    have dkms || return $?
    unload_all
    # The guest init installed the host-built nvpeer.ko; take it away so only DKMS's copy exists.
    rm -f "/lib/modules/$KREL/extra/nvpeer.ko" && depmod -a || return 1
    local rc=0
    if [ -f /bench/dkms-prebuilt.tar ]; then
        echo "make dkms-install ran in the toolchain root (dkms-build stage); unpacking its output"
        tar -C / -xf /bench/dkms-prebuilt.tar && depmod -a || return 1
        # The preflight check below reads dkms's own make.log, which the tree carries.
        : >/tmp/dkms-install.log
    else
        make "${MAKE_ARGS[@]}" dkms-install >/tmp/dkms-install.log 2>&1 || rc=$?
        cat /tmp/dkms-install.log
    fi
    # dkms keeps the PRE_BUILD and make output in make.log (build/ while building, log/ after).
    local logs
    logs=$(find /var/lib/dkms/nvpeer -name make.log 2>/dev/null)
    if [ "$rc" != 0 ]; then
        # shellcheck disable=SC2086
        [ -n "$logs" ] && tail -n 40 $logs
        return 1
    fi
    # The PRE_BUILD hook ran the build preflight, and it passed.
    # shellcheck disable=SC2086
    grep -q "nvpeer preflight: ok" $logs /tmp/dkms-install.log || { echo "PRE_BUILD preflight did not run"; return 1; }
    "${DK[@]}" status -m nvpeer
    "${DK[@]}" status -m nvpeer -v "$VER" -k "$KREL" | grep -q "installed" || { echo "dkms status is not 'installed'"; return 1; }
    local ko
    ko=$(modinfo -n nvpeer) || return 1
    echo "modinfo -n nvpeer: $ko"
    case $ko in */extra/nvpeer.ko*|*/updates/*nvpeer.ko*) ;; *) echo "unexpected install path $ko"; return 1 ;; esac
    [ -f /run/modprobe.d/nvpeer.conf ] || { echo "modprobe.d file not installed"; return 1; }
}
tb_case dkms-add-build-install dkms_install

# The PRE_BUILD preflight refuses a kernel without Rust artifacts; BUILD_EXCLUSIVE skips one without
# CONFIG_RUST. A build-time check: in make check the dkms-build stage ran it natively.
. /src/testbench/lib/dkms-prebuild-refuses.sh
if [ ! -f /bench/dkms-prebuilt.tar ]; then
    tb_case prebuild-refuses dkms_prebuild_refuses "$VER" "$SRCTREE"
fi

modprobe_deps() {
    unload_all
    modinfo -F depends nvpeer
    modprobe nvpeer || { dmesg | tail -n 5; return 1; }
    for m in nvpeer nvp2p_emu peer_mem_emu; do
        [ -e "/sys/module/$m" ] || { echo "$m not loaded by 'modprobe nvpeer'"; return 1; }
    done
    [ -r /sys/kernel/mm/memory_peers/nv_mem/version ] || { echo "no nv_mem client"; return 1; }
    echo "nv_mem version $(cat /sys/kernel/mm/memory_peers/nv_mem/version)"
    [ "$(cat /sys/module/nvpeer/version)" = "$VER" ] || { echo "loaded version differs from $VER"; return 1; }
}
tb_case modprobe-resolves-deps modprobe_deps

modprobe_remove() {
    modprobe -r nvpeer || return 1
    [ ! -e /sys/module/nvpeer ] || { echo "nvpeer still loaded"; return 1; }
    [ ! -e /sys/kernel/mm/memory_peers/nv_mem ] || { echo "nv_mem left behind"; return 1; }
    # modprobe -r also drops the dependencies nobody else uses.
    [ ! -e /sys/module/nvp2p_emu ] || { echo "nvp2p_emu still loaded"; return 1; }
}
tb_case modprobe-r modprobe_remove

reinstall() {
    "${DK[@]}" uninstall -m nvpeer -v "$VER" -k "$KREL" || return 1
    modinfo -n nvpeer 2>/dev/null && { echo "module still resolvable after dkms uninstall"; return 1; }
    "${DK[@]}" install -m nvpeer -v "$VER" -k "$KREL" || return 1
    modprobe nvpeer || return 1
    [ -r /sys/kernel/mm/memory_peers/nv_mem/version ] || return 1
    modprobe -r nvpeer
}
tb_case reinstall reinstall

stock_blocked() {
    local out rc=0
    out=$(modprobe -n -v nvidia_peermem 2>&1) || rc=$?
    echo "modprobe -n -v nvidia_peermem: $out (rc $rc)"
    echo "$out" | grep -q "install /bin/false" || { echo "install rule not applied"; return 1; }
    out=$(modprobe -n -v nv_peer_mem 2>&1)
    echo "$out" | grep -q "install /bin/false" || { echo "nv_peer_mem not blocked"; return 1; }
    modprobe --showconfig | grep -E "^softdep nvpeer pre: nvidia ib_core( |$)" || { echo "softdep missing"; modprobe --showconfig | grep nvpeer; return 1; }
}
tb_case stock-blocked stock_blocked

second_nv_mem_refused() {
    unload_all
    # classic_peer registers a client named nv_mem, as nvidia-peermem does.
    modprobe classic_peer || return 1
    [ -r /sys/kernel/mm/memory_peers/nv_mem/version ] || { echo "classic_peer did not register nv_mem"; return 1; }
    tb_kmsg "expect: nvpeer refuses a second nv_mem"
    if modprobe nvpeer 2>/tmp/nvpeer-modprobe.err; then
        echo "nvpeer loaded beside another nv_mem client"
        return 1
    fi
    cat /tmp/nvpeer-modprobe.err
    dmesg | tail -n 20 | grep "nvpeer: a peer-memory client named 'nv_mem' is already registered" ||
        { echo "no clear message in the kernel log"; dmesg | tail -n 5; return 1; }
    [ ! -e /sys/module/nvpeer ] || { echo "nvpeer half-loaded"; return 1; }
    # And the other way round: nvpeer first, the classic client is refused by the core.
    modprobe -r classic_peer || return 1
    modprobe nvpeer || return 1
    if modprobe classic_peer 2>/dev/null; then echo "classic_peer loaded beside nvpeer"; return 1; fi
    [ "$(ls /sys/kernel/mm/memory_peers)" = nv_mem ] || { ls /sys/kernel/mm/memory_peers; return 1; }
    modprobe -r nvpeer
}
tb_case second-nv_mem-refused second_nv_mem_refused

dkms_remove() {
    make "${MAKE_ARGS[@]}" dkms-uninstall || return 1
    "${DK[@]}" status -m nvpeer | grep -q . && { echo "dkms still lists nvpeer"; return 1; }
    [ ! -e "$SRCTREE/nvpeer-$VER" ] || { echo "source copy left"; return 1; }
    [ ! -e /run/modprobe.d/nvpeer.conf ] || { echo "modprobe.d file left"; return 1; }
    ! modinfo nvpeer >/dev/null 2>&1 || { echo "module still installed"; return 1; }
}
tb_case dkms-remove dkms_remove

unload_all

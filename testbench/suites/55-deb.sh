# The Debian packages as an admin installs them, on Debian's production kernel: `apt-get install` of
# nvpeer-dkms and nvpeer-tools (from `make deb`, testbench/lib/deb-build.sh) into a writable overlay
# of the read-only bench root, laid out like a node: OFED's peer_mem.h in /usr/src/ofa_kernel/default
# (the core emulator's header: the bench has no OFED), NVIDIA's real 550 source in
# /usr/src/nvidia-550.163.01 (Debian's nvidia-open-kernel-source, `tb nvidia-src`), the kernel's build
# tree at /lib/modules/$(uname -r)/build. The package's postinst runs DKMS, which compiles nvpeer
# in this guest through the preflight (no bench variables: the package carries no emulator file).
# Then `dkms status`, `modprobe nvidia-peermem`, `nvpeer doctor`, `apt-get remove` and `purge`; after
# the purge the overlay's upper layer, which holds every file the packages and their scripts wrote,
# must hold nothing but apt's and dpkg's own records.
# Run by hand: NVPEER_DEBS=$(testbench/lib/deb-build.sh) NVPEER_VM_KERNEL=stock testbench/vm run --suite 55-deb
# bench: kernel stock

KREL=$(uname -r)
O=/tmp/deb-node
R=$O/root
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
NV_SRC_VER=550.163.01

# in_node CMD...: CMD in the node's root (the overlay), with a clean environment.
in_node() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }

unload_all() { modprobe -r nvidia-peermem nvpeer classic_peer nv_peer_mem peer_mem_emu nvp2p_emu 2>/dev/null; return 0; }

# The upper layer's entries that are the node's own record of an install, not the package's files.
LEDGER='^(var/lib/dpkg|var/lib/apt|var/cache|var/log|etc/ld\.so\.cache$|lib/modules/[^/]*/modules\.|usr/lib/modules/[^/]*/modules\.)'
# upper_entries: every non-directory entry of the upper layer (whiteouts included) and every
# directory the packages created (one the lower root lacks), minus the ledger.
upper_entries() {
    (cd "$O/upper" && find . -mindepth 1 \( -not -type d -o -type d \) -printf '%P %y\n') | while read -r p t; do
        if [ "$t" = d ]; then [ -e "/$p" ] && continue; fi
        echo "$p"
    done | grep -Ev "$LEDGER" | sort
}

node_setup() {
    [ -n "$(ls /bench/debs/nvpeer-dkms_*.deb /bench/debs/nvpeer-tools_*.deb 2>/dev/null)" ] ||
        { echo "no .debs in /bench/debs: run with NVPEER_DEBS=\$(testbench/lib/deb-build.sh)"; return 1; }
    [ -f /stock/obj/.config ] || { echo "no stock build tree at /stock/obj (testbench/vm binds it)"; return 1; }
    [ -f /nvidia-src/nvidia/nv-p2p.h ] || { echo "no NVIDIA source at /nvidia-src (testbench/vm binds tb nvidia-src)"; return 1; }
    unload_all
    modprobe overlay || return 1
    mkdir -p "$O/upper" "$O/work" "$R" || return 1
    mount -t overlay overlay -o "lowerdir=/,upperdir=$O/upper,workdir=$O/work" "$R" || return 1
    mount -t proc proc "$R/proc" && mount -t sysfs sys "$R/sys" && mount --rbind /dev "$R/dev" || return 1
    mount -t tmpfs tmpfs "$R/tmp" && mount -t tmpfs tmpfs "$R/run" || return 1
    mount --bind /bench "$R/bench" || return 1
    # The running kernel's modules as the guest installed them, less the host-built nvpeer: only
    # the package's build may provide nvidia-peermem.
    mkdir -p "$R/lib/modules" && cp -a "/lib/modules/$KREL" "$R/lib/modules/" || return 1
    rm -f "$R/lib/modules/$KREL/extra/nvpeer.ko" "$R/lib/modules/$KREL/extra/nvidia-peermem.ko"
    ln -sfn /stock/obj "$R/lib/modules/$KREL/build"
    in_node depmod -a "$KREL" || return 1
    # OFED and NVIDIA where a node has them (no Module.symvers: this kernel has no MODVERSIONS).
    install -D -m 0644 /src/testbench/emu/include/rdma/peer_mem.h "$R/usr/src/ofa_kernel/default/include/rdma/peer_mem.h" &&
        mkdir -p "$R/usr/src/nvidia-$NV_SRC_VER" && cp -a /nvidia-src/nvidia "$R/usr/src/nvidia-$NV_SRC_VER/" || return 1
    mount -t debugfs debugfs "$R/sys/kernel/debug" 2>/dev/null
    upper_entries >"$O/before.txt"
    echo "node root at $R: $(wc -l <"$O/before.txt") entries of its own before the install"
}
# The cases after a failed setup or install have nothing to test: the suite ends there.
finish() { umount -R "$R" 2>/dev/null; unload_all; }
tb_case node-setup node_setup
[ -f "$O/before.txt" ] || { finish; return 0; }

apt_install() {
    cp /bench/debs/nvpeer-*.deb "$R/tmp/" || return 1
    local rc=0 tools
    tools=$(cd "$R/tmp" && echo nvpeer-tools_"$VER"_*.deb)
    in_node apt-get install -y /tmp/nvpeer-dkms_"$VER"_all.deb "/tmp/$tools" \
        >"$O/install.log" 2>&1 || rc=$?
    cat "$O/install.log"
    if [ $rc != 0 ]; then
        tail -n 40 "$R/var/lib/dkms/nvpeer/$VER/build/make.log" 2>/dev/null
        return 1
    fi
    grep -q "nvpeer preflight: ok" "$R/var/lib/dkms/nvpeer/$VER/build/make.log" "$R"/var/lib/dkms/nvpeer/"$VER"/*/*/log/make.log 2>/dev/null ||
        grep -q "nvpeer preflight: ok" "$O/install.log" || { echo "the PRE_BUILD preflight did not run"; return 1; }
    : >"$O/installed"
}
tb_case apt-install apt_install
[ -f "$O/installed" ] || { finish; return 0; }

dkms_status() {
    local out ko
    out=$(in_node dkms status -m nvpeer)
    echo "dkms status: $out"
    echo "$out" | grep -q "^nvpeer/$VER, $KREL, [^:]*: installed" || { echo "not installed for $KREL"; return 1; }
    ko=$(in_node modinfo -k "$KREL" -n nvidia-peermem) || return 1
    echo "modinfo -n nvidia-peermem: $ko"
    case $ko in "/lib/modules/$KREL/updates/dkms/nvidia-peermem.ko"*) ;; *) echo "not DKMS's file"; return 1 ;; esac
    [ "$(in_node modinfo -k "$KREL" -F description nvidia-peermem)" = "GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)" ] ||
        { echo "modinfo does not say nvpeer"; return 1; }
    # Built against the node's headers, never the emulators' (the package has none).
    [ ! -e "$R/usr/src/nvpeer-$VER/testbench" ] || { echo "the package ships testbench/"; return 1; }
    grep -h "nvpeer preflight: ok" "$R"/var/lib/dkms/nvpeer/"$VER"/*/*/log/make.log "$O/install.log" 2>/dev/null | head -n1
    grep -qh "NVIDIA /usr/src/nvidia-$NV_SRC_VER" "$R"/var/lib/dkms/nvpeer/"$VER"/*/*/log/make.log "$O/install.log" 2>/dev/null ||
        { echo "not built against /usr/src/nvidia-$NV_SRC_VER"; return 1; }
}
tb_case dkms-status dkms_status

modprobe_dropin() {
    in_node modprobe nvidia-peermem || { dmesg | tail -n 5; return 1; }
    [ "$(cat /sys/module/nvidia_peermem/version)" = "$VER" ] || { echo "/sys/module/nvidia_peermem/version is not $VER"; return 1; }
    for m in nvp2p_emu peer_mem_emu; do [ -e "/sys/module/$m" ] || { echo "$m not pulled in"; return 1; }; done
    echo "/sys/module/nvidia_peermem/version: $(cat /sys/module/nvidia_peermem/version)"
}
tb_case modprobe-nvidia-peermem modprobe_dropin

doctor() {
    local rc=0
    in_node /usr/bin/nvpeer doctor --json >"$O/doctor.json" 2>"$O/doctor.err" || rc=$?
    echo "nvpeer doctor: exit $rc"
    python3 -S - "$O/doctor.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = next(x for x in r["checks"] if x["id"] == "nvpeer.module")
d = c["data"]
print("nvpeer.module:", c["status"], d.get("module_name"), d.get("owner"), d.get("version"))
ok = c["status"] == "pass" and d.get("module_name") == "nvidia_peermem" and d.get("owner") == "nvpeer"
sys.exit(0 if ok else 1)
PY
}
tb_case nvpeer-doctor doctor

remove() {
    in_node modprobe -r nvidia-peermem || return 1
    in_node apt-get remove -y nvpeer-dkms nvpeer-tools >"$O/remove.log" 2>&1 || { cat "$O/remove.log"; return 1; }
    tail -n 5 "$O/remove.log"
    [ -z "$(in_node dkms status -m nvpeer)" ] || { echo "dkms still lists nvpeer"; return 1; }
    ! in_node modinfo -k "$KREL" -n nvidia-peermem 2>/dev/null || { echo "nvidia-peermem still resolvable"; return 1; }
    [ ! -e "$R/usr/bin/nvpeer" ] && [ ! -e "$R/usr/src/nvpeer-$VER" ] || { echo "package files left"; return 1; }
}
tb_case apt-remove remove

purge() {
    in_node apt-get purge -y nvpeer-dkms nvpeer-tools >"$O/purge.log" 2>&1 || { cat "$O/purge.log"; return 1; }
    in_node dpkg -l 'nvpeer-*' 2>/dev/null | grep -E '^[a-z][a-z] +nvpeer' && { echo "dpkg still knows them"; return 1; }
    upper_entries >"$O/after.txt"
    local left
    left=$(comm -13 "$O/before.txt" "$O/after.txt")
    [ -z "$left" ] || { echo "left behind after purge:"; echo "$left"; return 1; }
    echo "nothing left behind: $(wc -l <"$O/after.txt") entries before and after, outside apt's and dpkg's records"
}
tb_case apt-purge purge

# On a node without OFED the postinst's DKMS build stops in the preflight: apt fails, and its output
# ends with the preflight's one line naming the fix (dkms itself keeps it in make.log); a purge
# then leaves nothing behind either.
refused() {
    local rc=0 lines left
    mv "$R/usr/src/ofa_kernel" "$O/ofa_kernel.away" || return 1
    in_node apt-get install -y /tmp/nvpeer-dkms_"$VER"_all.deb >"$O/refused.log" 2>&1 || rc=$?
    mv "$O/ofa_kernel.away" "$R/usr/src/ofa_kernel" || return 1
    [ $rc != 0 ] || { echo "apt-get install succeeded without OFED"; return 1; }
    lines=$(grep '^nvpeer preflight: ' "$O/refused.log")
    echo "$lines"
    [ "$(echo "$lines" | wc -l)" = 1 ] && echo "$lines" | grep -q "no OFED peer-memory API.*OFED_DIR=" ||
        { echo "want one preflight line naming OFED_DIR in apt's output"; tail -n 15 "$O/refused.log"; return 1; }
    in_node apt-get purge -y nvpeer-dkms >"$O/purge2.log" 2>&1 || { cat "$O/purge2.log"; return 1; }
    upper_entries >"$O/after2.txt"
    left=$(comm -13 "$O/before.txt" "$O/after2.txt")
    [ -z "$left" ] || { echo "left behind after the failed install's purge:"; echo "$left"; return 1; }
}
tb_case apt-install-refused-without-ofed refused

finish

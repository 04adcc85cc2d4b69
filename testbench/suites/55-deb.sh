# The Debian packages as an admin installs them, on Debian's production kernel: `apt-get install` of
# nvpeer-dkms and nvpeer-tools (from `make deb`, testbench/lib/deb-build.sh) into a writable overlay
# of the read-only bench root, laid out like a node (testbench/suites/node-root.sh.inc): OFED's
# peer_mem.h in /usr/src/ofa_kernel/default (the core emulator's header: the bench has no OFED),
# NVIDIA's real 550 source in /usr/src/nvidia-550.163.01 (Debian's nvidia-open-kernel-source,
# `tb nvidia-src`), the kernel's build tree at /lib/modules/$(uname -r)/build. The package's
# postinst runs DKMS, which compiles nvpeer in this guest through the preflight (no bench
# variables: the package carries no emulator file). In make check the install runs natively in the
# toolchain root on the same layout (testbench/lib/deb-prebuild.sh: the compile took about 400 s
# under TCG) and this suite unpacks what it wrote; make check-full installs here.
# Then `dkms status`, `modprobe nvidia-peermem`, `nvpeer doctor`, `apt-get remove` and `purge`; after
# the purge the overlay's upper layer, which holds every file the packages and their scripts wrote,
# must hold nothing but apt's and dpkg's own records (and DKMS's signing key, the node's).
# Run by hand: NVPEER_DEBS=$(testbench/lib/deb-build.sh) NVPEER_VM_KERNEL=stock testbench/vm run --suite 55-deb
# bench: kernel stock
# bench: budget stock 200 200
# bench: budget-full stock 200 200

O=/tmp/deb-node
. /src/testbench/suites/node-root.sh.inc

deb_node_setup() {
    [ -n "$(ls /bench/debs/nvpeer-dkms_*.deb /bench/debs/nvpeer-tools_*.deb 2>/dev/null)" ] ||
        { echo "no .debs in /bench/debs: run with NVPEER_DEBS=\$(testbench/lib/deb-build.sh)"; return 1; }
    node_setup
}
tb_case node-setup deb_node_setup
[ -f "$O/before.txt" ] || { finish; return 0; }

apt_install() {
    cp /bench/debs/nvpeer-*.deb "$R/tmp/" || return 1
    if [ -f /bench/deb-prebuilt.tar ]; then
        # make check: the same apt-get install ran natively in the toolchain root on this node's
        # layout, for this kernel (testbench/lib/deb-prebuild.sh); what it wrote is unpacked here.
        echo "apt-get install ran in the toolchain root (deb-prebuild stage); unpacking what it wrote"
        tar -C "$R" -xpf /bench/deb-prebuilt.tar && in_node depmod -a "$KREL" || return 1
        grep -h "nvpeer preflight: ok" "$R"/var/lib/dkms/nvpeer/"$VER"/*/*/log/make.log || { echo "the PRE_BUILD preflight did not run"; return 1; }
        : >"$O/install.log"; : >"$O/installed"
        return 0
    fi
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

tb_case dkms-status node_dkms_installed

tb_case modprobe-nvidia-peermem node_modprobe_dropin

doctor() {
    local rc=0
    in_node /usr/bin/nvpeer doctor --json >"$O/doctor.json" 2>"$O/doctor.err" || rc=$?
    echo "nvpeer doctor: exit $rc"
    node_doctor_json "$O/doctor.json"
}
tb_case nvpeer-doctor doctor

remove() {
    in_node rmmod nvidia_peermem || return 1
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
    local left
    left=$(node_left after.txt)
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
    left=$(node_left after2.txt)
    [ -z "$left" ] || { echo "left behind after the failed install's purge:"; echo "$left"; return 1; }
}
# (make check: testbench/lib/deb-prebuild.sh makes the same refusal natively, its row
# deb-prebuild[stock]; 140 s under TCG here)
[ -f /bench/deb-prebuilt.tar ] || tb_case apt-install-refused-without-ofed refused

finish

# README.md's "Install on a GPU node", rehearsed as an admin runs it, on Debian's production kernel
# (no MODVERSIONS: the preflight generates the symbol entries): a writable overlay of the bench root
# laid out like a DOCA + NVIDIA node (testbench/suites/node-root.sh.inc, the layout 55-deb installs
# the packages into: the core emulator's peer_mem.h in /usr/src/ofa_kernel/default, Debian's NVIDIA
# 550.163.01 source in /usr/src/nvidia-550.163.01, the kernel's build tree), the repository as a
# checkout in the node (the files `make dkms-source` packs, in /tmp/nvpeer), then the README's
# commands, in order, each a case, with no bench variable (the real-node path: the PRE_BUILD
# preflight finds OFED and NVIDIA under /usr/src, DKMS compiles nvpeer in this guest):
#   make dkms-install; rmmod of nvidia_peermem and nv_peer_mem where loaded; modprobe nvidia-peermem;
#   nvpeer doctor
# then `make dkms-uninstall`, after which the overlay's upper layer holds nothing the install wrote
# and `dkms status` is empty. The one README line not rehearsed is `cargo install --locked --path
# userspace-tests/nvpeer`: the guest is offline (no crates.io) and a cargo build under TCG would
# take far longer than the suite; the bench's build of the same CLI ($NVPEER) stands in for it,
# copied to ~/.cargo/bin where cargo install puts it, and goes again with the uninstall.
# Then the failures a node can hit, each printing one line naming the fix: `make dkms-install`
# without /usr/src/ofa_kernel (the preflight's line naming OFED_DIR) and without NVIDIA's source
# (the line naming NVIDIA_SRC), each followed by `make dkms-uninstall` leaving nothing behind.
# Run by hand: NVPEER_VM_KERNEL=stock testbench/vm run --suite 56-rehearsal
# bench: kernel stock
# bench: budget-full stock 140 140

O=/tmp/rehearsal-node
. /src/testbench/suites/node-root.sh.inc

rehearsal_setup() {
    node_setup && node_checkout && : >"$O/setup-ok"
}
tb_case node-setup rehearsal_setup
[ -f "$O/setup-ok" ] || { finish; return 0; }

readme_dkms_install() {
    local ok
    node_dkms_install || return 1
    ok=$(node_preflight_ok)
    echo "$ok"
    # The real-node path: the preflight found OFED and NVIDIA where a node keeps them, on a kernel
    # without MODVERSIONS.
    echo "$ok" | grep -q "^nvpeer preflight: ok.*OFED /usr/src/ofa_kernel/default, NVIDIA /usr/src/nvidia-$NV_SRC_VER.*MODVERSIONS=n" ||
        { echo "the preflight did not take the node's OFED and NVIDIA (or saw MODVERSIONS): ${ok:-no ok line}"; return 1; }
    node_dkms_installed || return 1
    local f
    for f in /etc/modprobe.d/nvpeer.conf /etc/systemd/system/nvpeer.service /usr/share/dkms/modules_to_force_install/nvpeer; do
        [ -f "$R$f" ] || { echo "make dkms-install did not install $f"; return 1; }
    done
    : >"$O/installed"
}
tb_case make-dkms-install readme_dkms_install
[ -f "$O/installed" ] || { finish; return 0; }

# The README takes NVIDIA's copy out first. A node where Mellanox's nv_peer_mem was loaded (the
# bench's classic client under that name, inserted as a driver container would) has one to take
# out; nvidia_peermem is not loaded (the bench has no NVIDIA driver), which the README's loop skips.
readme_rmmod() {
    local ko=/lib/modules/$KREL/extra/nv_peer_mem.ko
    if [ -f "$R$ko" ]; then
        in_node modprobe nvp2p_emu && in_node modprobe peer_mem_emu && in_node insmod "$ko" || return 1
        echo "before: nv_peer_mem loaded"
    fi
    # shellcheck disable=SC2016
    in_node sh -c 'for m in nvidia_peermem nv_peer_mem; do [ ! -d /sys/module/$m ] || rmmod $m; done' \
        || { echo "the README's rmmod line failed"; return 1; }
    local m
    for m in nvidia_peermem nv_peer_mem; do [ ! -e "/sys/module/$m" ] || { echo "$m still loaded"; return 1; }; done
    echo "after: neither nvidia_peermem nor nv_peer_mem loaded"
}
tb_case rmmod-nvidia-copy readme_rmmod

# `modprobe nvidia-peermem` loads nvpeer's DKMS build and pulls the emulators in as dependencies:
# anything the previous step left loaded goes first (the bench's state, not a README step).
readme_modprobe() {
    rmmod peer_mem_emu nvp2p_emu 2>/dev/null
    local m
    for m in nvp2p_emu peer_mem_emu; do [ ! -e "/sys/module/$m" ] || { echo "$m loaded before modprobe"; return 1; }; done
    node_modprobe_dropin
}
tb_case modprobe-nvidia-peermem readme_modprobe

readme_doctor() {
    [ -x "${NVPEER:-}" ] || { echo "no nvpeer CLI in the guest (NVPEER unset: testbench/vm copies the bench's build)"; return 1; }
    # Where `cargo install` puts it; the README expects ~/.cargo/bin on PATH (rustup's profile).
    install -D -m 0755 "$NVPEER" "$R/root/.cargo/bin/nvpeer" || return 1
    local rc=0
    in_node sh -c 'PATH=$HOME/.cargo/bin:$PATH; nvpeer doctor' >"$O/doctor.txt" 2>&1 || rc=$?
    cat "$O/doctor.txt"
    echo "nvpeer doctor: exit $rc"
    # 0 ready, 1 not ready, 2 could not check (the bench has no GPU and no NIC); more is a crash.
    [ "$rc" -le 2 ] || { echo "nvpeer doctor exited $rc"; return 1; }
    grep -q "^nvpeer doctor (root " "$O/doctor.txt" && grep -q "^GPUDirect RDMA paths:" "$O/doctor.txt" ||
        { echo "not the doctor's report"; return 1; }
    # The same report as JSON: nvpeer is the nvidia_peermem the libraries see.
    in_node sh -c 'PATH=$HOME/.cargo/bin:$PATH; nvpeer doctor --json' >"$O/doctor.json" 2>"$O/doctor.err"
    node_doctor_json "$O/doctor.json"
}
tb_case nvpeer-doctor readme_doctor

readme_uninstall() {
    in_node rmmod nvidia_peermem || return 1
    in_checkout "make dkms-uninstall" >"$O/uninstall.log" 2>&1 || { cat "$O/uninstall.log"; return 1; }
    tail -n 5 "$O/uninstall.log"
    # The CLI's stand-in goes as `cargo uninstall nvpeer` would take it.
    rm -rf "$R/root/.cargo"
    node_gone uninstall
}
tb_case make-dkms-uninstall readme_uninstall

# refused NAME DIR WANT: `make dkms-install` on the node without DIR (under its root) fails, and
# its output carries exactly one preflight line, matching WANT; `make dkms-uninstall` afterwards
# leaves nothing behind.
refused() {
    local rc=0 lines bound=""
    # (NVIDIA's tree is bound read-only inside DIR, nv_src_bind: unbound for the move, bound
    # again after it; moving a directory with a mount inside copies it and fails on the mount)
    if mountpoint -q "$R$2/nvidia" 2>/dev/null; then umount "$R$2/nvidia" || return 1; bound=1; fi
    mv "$R$2" "$O/$1.away" || { [ -z "$bound" ] || nv_src_bind; return 1; }
    in_checkout "make dkms-install" >"$O/refused-$1.log" 2>&1 || rc=$?
    mv "$O/$1.away" "$R$2" || return 1
    [ -z "$bound" ] || nv_src_bind || return 1
    [ $rc != 0 ] || { echo "make dkms-install succeeded without $2"; return 1; }
    lines=$(grep '^nvpeer preflight: ' "$O/refused-$1.log")
    echo "$lines"
    [ -n "$lines" ] && [ "$(echo "$lines" | wc -l)" = 1 ] && echo "$lines" | grep -q "$3" ||
        { echo "want one preflight line matching '$3' in make's output"; tail -n 15 "$O/refused-$1.log"; return 1; }
    in_checkout "make dkms-uninstall" >"$O/uninstall-$1.log" 2>&1 || { cat "$O/uninstall-$1.log"; return 1; }
    node_gone "refused-$1"
}
tb_case dkms-install-refused-without-ofed refused ofed /usr/src/ofa_kernel "no OFED peer-memory API.*OFED_DIR="
tb_case dkms-install-refused-without-nvidia refused nvidia "/usr/src/nvidia-$NV_SRC_VER" "no NVIDIA driver source.*NVIDIA_SRC="

finish

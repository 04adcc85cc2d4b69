# README.md's "Install on a GPU node" on the node of 2026: Ubuntu 26.04 LTS with DOCA-OFED 3.x from
# Ubuntu's archive, as prebuilt modules that keep no Module.symvers, on the bench kernel with
# module signatures as Ubuntu's has them, booted with module.sig_enforce=1, standing in for Secure
# Boot. Symbol versions (MODVERSIONS with gendwarfksyms and extended modversions, as Ubuntu's) are
# in make check-full's variant of the bench kernel (testbench/kernel-modversions.config): there the
# preflight must read the CRCs from the installed exporters and the OFED upgrade case runs; on make
# check's kernel, which has none, the preflight must find the API's modules by their symbols and
# need no CRC (as on Debian's kernels).
# The node (testbench/suites/node-root.sh.inc, with this kernel's build tree): Ubuntu 26.04's
# os-release (DKMS and the doctor take Ubuntu's paths); the core emulator, which exports the
# peer-memory API (with the CRCs its build computed, where the kernel has MODVERSIONS), and the
# provider emulator installed where DOCA's and NVIDIA's DKMS packages put their modules
# (updates/dkms) under their own names; OFED's peer_mem.h in /usr/src/ofa_kernel/default and
# NVIDIA's real 550 source in /usr/src, neither with a Module.symvers; the MOK that
# `update-secureboot-policy --new-key` makes, enrolled (the kernel trusts its certificate:
# testbench/kernel.config). Then, with no bench variable:
#   make dkms-install (the preflight finds each API's installed module by the symbol, and reads
#   its CRCs there under MODVERSIONS; DKMS compiles nvpeer in this guest and signs it with the MOK);
#   modprobe nvidia-peermem (accepted: signature, and symbol versions where the kernel has them);
#   nvpeer doctor (Ubuntu named); make dkms-uninstall, leaving nothing behind.
# The failures such a node hits, each with the one line that names its fix:
#   - the module signed with a key the kernel does not trust (DKMS's own key on a node that never
#     enrolled it): `Key was rejected by service`; the doctor's fix names `mokutil --import` of
#     Ubuntu's MOK;
#   - the kernel's rustc missing: the preflight's line naming the package (make check-full; make
#     check's host tests prove that line on a synthetic node).
#   - an OFED upgrade that changed the CRC of ib_register_peer_memory_client under the installed
#     nvpeer (NVIDIA/gpu-operator#2868): "disagrees about version of symbol"; the doctor's fix
#     names the DKMS rebuild (a kernel with MODVERSIONS: make check-full);
# In make check the `make dkms-install` ran natively in the toolchain root against this kernel on
# the same layout (testbench/lib/node-prebuild.sh, the node-prebuild stage): its output arrives as
# /bench/node-prebuilt.tar and is unpacked into the node, and every later case runs on it here
# but the removal: the stage ran `dkms status` and `make dkms-uninstall` there too, after the
# install, and found nothing left behind (neither depends on the running kernel).
# Without that file (make check-full, this suite run by hand) the guest compiles nvpeer under TCG
# (635 s under the debug kernel on 2026-11-27).
# Run by hand: testbench/vm run --suite 57-rehearsal-ubuntu
# bench: kernel bench
# bench: budget - 250 250
# bench: budget-full - 900 900

O=/tmp/ubuntu-node
NODE_KBUILD=/kernel/obj
. /src/testbench/suites/node-root.sh.inc
UPD=/lib/modules/$KREL/updates/dkms
MOK=/var/lib/shim-signed/mok
HASH=$(sed -n 's/^CONFIG_MODULE_SIG_HASH="\(.*\)"/\1/p' "$NODE_KBUILD/.config")
# MODV: y where this kernel has symbol versions (make check-full's bench kernel), else n.
MODV=n
grep -q '^CONFIG_MODVERSIONS=y' "$NODE_KBUILD/.config" && MODV=y

ubuntu_setup() {
    [ "$(cat /sys/module/module/parameters/sig_enforce 2>/dev/null)" = Y ] ||
        { echo "this kernel does not enforce module signatures (module.sig_enforce=1: testbench/vm sets it for a kernel with a signing key)"; return 1; }
    if [ "$MODV" = y ]; then
        grep -q '^CONFIG_GENDWARFKSYMS=y' "$NODE_KBUILD/.config" ||
            { echo "$NODE_KBUILD/.config: MODVERSIONS without gendwarfksyms"; return 1; }
    elif [ "${NVPEER_DEPTH:-check}" = full ]; then
        # (make check-full proves the CRC cases: its bench kernel is the variant with them)
        echo "$NODE_KBUILD/.config: no MODVERSIONS, and make check-full boots the variant that has them (testbench/kernel-modversions.config)"
        return 1
    fi
    node_setup || return 1
    # Ubuntu 26.04 LTS.
    rm -f "$R/etc/os-release" && cat >"$R/etc/os-release" <<'OS' || return 1
PRETTY_NAME="Ubuntu 26.04 LTS"
NAME="Ubuntu"
VERSION_ID="26.04"
VERSION="26.04 LTS (Resolute Raccoon)"
VERSION_CODENAME=resolute
ID=ubuntu
ID_LIKE=debian
OS
    # DOCA-OFED's and NVIDIA's modules where their DKMS packages install them, under their own
    # names: only the exported symbols say which is which.
    mkdir -p "$R$UPD" && mv "$R/lib/modules/$KREL/extra/peer_mem_emu.ko" "$R/lib/modules/$KREL/extra/nvp2p_emu.ko" "$R$UPD/" &&
        in_node depmod -a "$KREL" || return 1
    # The enrolled MOK, where Ubuntu's DKMS signs with it.
    install -D -m 0600 /kernel/mok/mok.key "$R$MOK/MOK.priv" && install -m 0644 /kernel/mok/mok.der "$R$MOK/MOK.der" || return 1
    node_checkout || return 1
    upper_entries >"$O/before.txt" && : >"$O/setup-ok"
    # (which module exports which API is the preflight's finding: make-dkms-install checks its line)
    echo "node: $(. "$R/etc/os-release" && echo "$PRETTY_NAME"), kernel $KREL ($([ "$MODV" = y ] && echo "MODVERSIONS, gendwarfksyms" || echo "no MODVERSIONS"), module.sig_enforce=1);" \
        "the exporters in $UPD: $(cd "$R$UPD" && echo *.ko); no Module.symvers under /usr/src"
}
tb_case node-setup ubuntu_setup
[ -f "$O/setup-ok" ] || { finish; return 0; }

dkms_install() {
    local ok signer
    if [ -f /bench/node-prebuilt.tar ]; then
        # make check: the same command ran natively in the toolchain root against this kernel
        # (testbench/lib/node-prebuild.sh); what it wrote is unpacked into this node.
        echo "make dkms-install ran in the toolchain root (node-prebuild stage); unpacking what it wrote"
        tar -C "$R" -xpf /bench/node-prebuilt.tar && in_node depmod -a "$KREL" || return 1
    else
        node_dkms_install || return 1
    fi
    ok=$(node_preflight_ok)
    echo "$ok"
    if [ "$MODV" = y ]; then
        # The CRCs came from the modules that export each API, found by the symbol.
        echo "$ok" | grep -q "^nvpeer preflight: ok.*MODVERSIONS=y, OFED CRCs: $UPD/peer_mem_emu.ko, NVIDIA CRCs: $UPD/nvp2p_emu.ko" ||
            { echo "the preflight did not read the CRCs from the installed exporters: ${ok:-no ok line}"; return 1; }
    else
        # No CRC needed: the OFED API's module named by its symbol (nvpeer's depends=), found in
        # updates/dkms under the emulator's own name.
        echo "$ok" | grep -q "^nvpeer preflight: ok.*MODVERSIONS=n, OFED API from peer_mem_emu, no CRC needed, NVIDIA CRCs: none needed" ||
            { echo "the preflight did not name the installed exporter of the OFED API: ${ok:-no ok line}"; return 1; }
    fi
    if [ -f /bench/node-prebuilt.tar ]; then
        # (DKMS's status of this install: node-prebuild checked it where it ran, on these files,
        # with this node's dkms; under TCG and KASAN `dkms status` costs 70 s)
        echo "dkms status: checked by node-prebuild after the same install (installed for $KREL)"
        node_dkms_files || return 1
    else
        node_dkms_installed || return 1
    fi
    signer=$(in_node modinfo -k "$KREL" -F signer nvidia-peermem)
    echo "signer: ${signer:-none} ($(in_node modinfo -k "$KREL" -F sig_hashalgo nvidia-peermem))"
    [ "$signer" = "nvpeer bench MOK" ] || { echo "DKMS did not sign nvidia-peermem with the MOK in $MOK"; return 1; }
    : >"$O/installed"
}
tb_case make-dkms-install dkms_install
[ -f "$O/installed" ] || { finish; return 0; }

modprobe_enforced() {
    rmmod peer_mem_emu nvp2p_emu 2>/dev/null
    node_modprobe_dropin || return 1
    echo "loaded under module.sig_enforce=1; dependencies from $UPD: $(in_node modinfo -k "$KREL" -F depends nvidia-peermem)"
}
tb_case modprobe-nvidia-peermem modprobe_enforced

# doctor_json FILE: `nvpeer doctor --json` in the node (exit 0-2: it cannot check a GPU or NIC here).
doctor_json() {
    [ -x "${NVPEER:-}" ] || { echo "no nvpeer CLI in the guest (NVPEER unset: testbench/vm copies the bench's build)"; return 1; }
    install -D -m 0755 "$NVPEER" "$R/root/.cargo/bin/nvpeer" || return 1
    local rc=0
    in_node sh -c 'PATH=$HOME/.cargo/bin:$PATH; nvpeer doctor --json' >"$1" 2>"$1.err" || rc=$?
    [ "$rc" -le 2 ] || { echo "nvpeer doctor exited $rc"; cat "$1.err"; return 1; }
}
# check_field FILE ID FIELD: a field of one check of the doctor's JSON report.
check_field() {
    python3 -S -c 'import json,sys; r=json.load(open(sys.argv[1])); c=next(x for x in r["checks"] if x["id"]==sys.argv[2]); print(c.get(sys.argv[3]) or "")' "$@"
}

doctor() {
    doctor_json "$O/doctor.json" || return 1
    node_doctor_json "$O/doctor.json" || return 1
    in_node sh -c 'PATH=$HOME/.cargo/bin:$PATH; nvpeer doctor' >"$O/doctor.txt" 2>&1
    head -n 3 "$O/doctor.txt"
    grep -q "Ubuntu 26.04" "$O/doctor.txt" || { echo "the report does not name Ubuntu 26.04"; return 1; }
    local s
    s=$(check_field "$O/doctor.json" kernel.signing summary)
    echo "kernel.signing: $s"
    [ "$s" = "signing enforced and nvpeer loaded" ] || { echo "want: signing enforced and nvpeer loaded"; return 1; }
}
tb_case nvpeer-doctor doctor

# A node whose MOK was never enrolled: DKMS signed with a key of its own, which the kernel does not
# trust. DKMS's module with its signature taken off (what the build produced), signed here with
# such a key, in place of DKMS's copy.
# unsign IN OUT: IN without its appended signature (the module, the PKCS#7 blob, the 12-byte
# struct module_signature whose last 4 bytes are the blob's length, big-endian, and the marker).
unsign() {
    python3 -S - "$1" "$2" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
marker = b"~Module signature appended~\n"
if not d.endswith(marker):
    sys.exit("not a signed module: " + sys.argv[1])
sig_len, = struct.unpack(">I", d[-len(marker) - 4:-len(marker)])
open(sys.argv[2], "wb").write(d[:len(d) - len(marker) - 12 - sig_len])
PY
}
untrusted_key() {
    local ko rc=0
    [ ! -e /sys/module/nvidia_peermem ] || in_node rmmod nvidia_peermem || return 1
    ko=$(in_node modinfo -k "$KREL" -n nvidia-peermem) || return 1
    cp "$R$ko" "$O/signed.ko" || return 1
    untrusted_try "$ko" || rc=$?
    # DKMS's copy goes back whatever happened.
    cp "$O/signed.ko" "$R$ko" || return 1
    return $rc
}
# untrusted_try KO: KO re-signed by a key the kernel does not trust; modprobe refused because of
# that key; the doctor's fix names the MOK enrolment.
untrusted_try() {
    local ko=$1 out rc=0 fix mark
    openssl req -new -x509 -nodes -days 1 -subj "/CN=DKMS module signing key/" -newkey rsa:2048 \
        -keyout "$O/other.key" -outform DER -out "$O/other.der" 2>/dev/null || return 1
    unsign "$O/signed.ko" "$R$ko" || return 1
    [ -z "$(modinfo -F signer "$R$ko")" ] || { echo "the signature did not come off"; return 1; }
    /kernel/obj/scripts/sign-file "$HASH" "$O/other.key" "$O/other.der" "$R$ko" || return 1
    echo "signed by: $(modinfo -F signer "$R$ko")"
    mark="nvpeer-57: untrusted-key $$"
    echo "$mark" >/dev/kmsg
    out=$(in_node modprobe nvidia-peermem 2>&1) || rc=$?
    echo "modprobe nvidia-peermem: $out"
    [ $rc != 0 ] && echo "$out" | grep -q "Key was rejected by service" ||
        { echo "want modprobe refused with 'Key was rejected by service'"; return 1; }
    # The key was the cause (an unsigned module is refused with the same error, another line).
    dmesg | sed -n "/$mark/,\$p" | grep "Loading of module with unavailable key is rejected" ||
        { echo "no 'Loading of module with unavailable key is rejected' in the kernel log after the modprobe"; return 1; }
    doctor_json "$O/doctor-untrusted.json" || return 1
    echo "kernel.signing: $(check_field "$O/doctor-untrusted.json" kernel.signing summary)"
    fix=$(check_field "$O/doctor-untrusted.json" kernel.signing fix)
    echo "fix: $fix"
    echo "$fix" | grep -q "mokutil --import /var/lib/shim-signed/mok/MOK.der" ||
        { echo "the doctor's fix does not name Ubuntu's MOK enrolment"; return 1; }
}
tb_case untrusted-key-refused untrusted_key

# An OFED upgrade under an installed nvpeer (NVIDIA/gpu-operator#2868): the core's new build
# exports ib_register_peer_memory_client with another CRC. Stood for by the core emulator's own
# (unsigned) build with that one CRC changed, signed with the kernel's build key as a distribution
# signs its modules, in place of the installed one: the loader refuses nvpeer ("disagrees about
# version of symbol"); the doctor's kernel.log check names the fix (rebuild nvpeer: the preflight
# reads the new CRC). Then the original core goes back.
ofed_upgrade() {
    local ko=$R$UPD/peer_mem_emu.ko off crc out rc=0 fix
    modprobe -r nvidia_peermem peer_mem_emu nvp2p_emu 2>/dev/null
    cp "$ko" "$O/peer_mem_emu.signed" && cp /src/testbench/emu/peer_mem/peer_mem_emu.ko "$O/upgraded.ko" || return 1
    # The CRC is the 4 bytes under the symbol __crc_ib_register_peer_memory_client, in __kcrctab.
    off=$(python3 -S - "$O/upgraded.ko" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
    sys.exit(1)  # not a little-endian ELF64 object
shoff, = struct.unpack_from("<Q", d, 0x28); shentsz, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3a)
sh = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsz) for i in range(shnum)]
for s in sh:
    if s[1] != 2:  # SHT_SYMTAB
        continue
    strtab = sh[s[6]]
    for i in range(s[5] // 24):
        name, info, other, ndx, value, size = struct.unpack_from("<IBBHQQ", d, s[4] + i * 24)
        n = d[strtab[4] + name:d.index(b"\0", strtab[4] + name)]
        if n == b"__crc_ib_register_peer_memory_client":
            if ndx == 0 or ndx >= len(sh):
                sys.exit(1)  # absolute or undefined: not a __kcrctab label
            print(sh[ndx][4] + value)
            sys.exit(0)
sys.exit(1)
PY
) || { echo "no __crc_ib_register_peer_memory_client in the core emulator's build: built without MODVERSIONS?"; return 1; }
    crc=$(od -An -tx4 -j "$off" -N4 "$O/upgraded.ko" | tr -d ' ')
    printf '\xef\xbe\xad\xde' | dd of="$O/upgraded.ko" bs=1 seek="$off" conv=notrunc status=none || return 1
    echo "ib_register_peer_memory_client: CRC 0x$crc before the upgrade, 0x$(od -An -tx4 -j "$off" -N4 "$O/upgraded.ko" | tr -d ' ') after"
    /kernel/obj/scripts/sign-file "$HASH" /kernel/obj/certs/signing_key.pem /kernel/obj/certs/signing_key.x509 "$O/upgraded.ko" &&
        cp "$O/upgraded.ko" "$ko" && in_node depmod -a "$KREL" || return 1
    out=$(in_node modprobe nvidia-peermem 2>&1) || rc=$?
    echo "modprobe nvidia-peermem: ${out:-exit $rc}"
    [ $rc != 0 ] && [ ! -e /sys/module/nvidia_peermem ] || { echo "nvpeer loaded against the upgraded core"; rc=0; }
    dmesg | grep "nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client" | tail -n 1
    if doctor_json "$O/doctor-upgrade.json"; then
        echo "kernel.log: $(check_field "$O/doctor-upgrade.json" kernel.log summary)"
        fix=$(check_field "$O/doctor-upgrade.json" kernel.log fix)
        echo "fix: $fix"
    fi
    modprobe -r nvidia_peermem peer_mem_emu nvp2p_emu 2>/dev/null
    cp "$O/peer_mem_emu.signed" "$ko" && in_node depmod -a "$KREL" || return 1
    [ $rc != 0 ] || return 1
    dmesg | grep -q "nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client" ||
        { echo "no 'disagrees about version of symbol' line in the kernel log"; return 1; }
    echo "$fix" | grep -q "dkms" || { echo "the doctor's kernel.log fix does not name the DKMS rebuild"; return 1; }
}
# (a kernel with MODVERSIONS only, make check-full's: without symbol versions the loader checks
# no CRC, and the upgrade cannot be staged)
[ "$MODV" = n ] || tb_case crc-mismatch-after-ofed-upgrade ofed_upgrade

uninstall() {
    [ ! -e /sys/module/nvidia_peermem ] || in_node rmmod nvidia_peermem || return 1
    in_checkout "make dkms-uninstall" >"$O/uninstall.log" 2>&1 || { cat "$O/uninstall.log"; return 1; }
    tail -n 3 "$O/uninstall.log"
    rm -rf "$R/root/.cargo"
    node_gone uninstall
}
# (make check: node-prebuild ran this command natively after its install, on the same layout with
# the same dkms, and held the node to the same rule, testbench/lib/node-ledger.sh.inc: `dkms
# remove --all` and the files it takes away do not depend on the running kernel. make check-full
# runs it here, after the install DKMS compiled in this guest.)
[ -f /bench/node-prebuilt.tar ] || tb_case make-dkms-uninstall uninstall

# The kernel's rustc missing from the node (the kernel's Rust artifacts installed, the compiler
# not): the preflight's one line naming the package; nothing left behind.
rustc_missing() {
    local rc=0 lines b hidden=()
    # (bind mounts over the node's rustc binaries: gone for the build, nothing written to the node)
    for b in "$R"/usr/bin/rustc "$R"/usr/bin/rustc-[0-9]* "$R"/usr/lib/rust-*/bin/rustc; do
        [ -e "$b" ] && mount --bind /dev/null "$b" && hidden+=("$b")
    done
    in_checkout "make dkms-install" >"$O/refused-rustc.log" 2>&1 || rc=$?
    for b in "${hidden[@]}"; do umount "$b"; done
    [ $rc != 0 ] || { echo "make dkms-install succeeded without rustc"; return 1; }
    lines=$(grep '^nvpeer preflight: ' "$O/refused-rustc.log")
    echo "$lines"
    [ -n "$lines" ] && [ "$(echo "$lines" | wc -l)" = 1 ] && echo "$lines" | grep -q "no rustc .*install it (Debian/Ubuntu: rustc-" ||
        { echo "want one preflight line naming the rustc package"; tail -n 15 "$O/refused-rustc.log"; return 1; }
    in_checkout "make dkms-uninstall" >"$O/uninstall-rustc.log" 2>&1 || { cat "$O/uninstall-rustc.log"; return 1; }
    node_gone refused-rustc
}
# (make check-full only: DKMS's add and refused build under TCG take 140 s, and make check proves
# the same preflight line on its host tests, scripts/tests/preflight.sh)
[ "${NVPEER_DEPTH:-check}" != full ] || tb_case dkms-install-refused-without-rustc rustc_missing

finish

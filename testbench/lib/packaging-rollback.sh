#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs INSIDE the toolchain root (tb chroot: a private mount namespace, the repo at /src): the
# installs that fail halfway, rehearsed natively, each asserting that the node is as it was (issue
# 52). No kernel is built or booted; the modules are synthetic (an ELF object with a .modinfo, as
# scripts/tests/preflight.sh makes them), the failures come from shims first on PATH or from a
# fake kernel without its Rust artifacts.
#   1. packaging/gpu-operator/nvpeer-driver-container.sh `prepare` on a driver container's module
#      tree (tmpfs /lib/modules): depmod failing, the resolve check failing, the second of two
#      renames failing, and a reinstall over an earlier nvpeer with depmod failing: NVIDIA's files
#      back under their names, no *.nvidia, no nvpeer file, depmod's index files as they were;
#      and the successful install, which leaves none of its backups behind.
#   2. its `modprobe-hook` with an nvidia_peermem loaded (a /proc of files bound over /proc):
#      NVIDIA's own (no nvpeer_shim_* symbol of it in kallsyms) is a failure with one line;
#      nvpeer's is "nothing to do".
#   3. `make dkms-install` (tmpfs /var/lib/dkms, /lib/modules, /run): the PRE_BUILD preflight
#      stopping the build (a kernel with CONFIG_RUST but no Rust artifacts), a build that fails
#      otherwise (a dkms shim whose build fails), and a version DKMS has already: no override
#      entry, no DKMS tree entry, no /usr/src/nvpeer-*, no directory it created; the log named.
# make check runs it in its preflight-tests stage; by hand:
#   testbench/tb chroot bash /src/testbench/lib/packaging-rollback.sh
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
t=$(mktemp -d /tmp/nvpeer-rollback-test.XXXXXX)
trap 'rm -rf "$t"' EXIT
pass=0; failed=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1: $2"; }
VER=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$here/dkms.conf")
for d in /lib/modules /var/lib/dkms /run; do
    mkdir -p "$d" && mount -t tmpfs tmpfs "$d" || { echo "cannot mount a tmpfs on $d (run in tb chroot)" >&2; exit 1; }
done

# fake_ko OUT NAME VERSION DESCRIPTION VERMAGIC [EXTRA]: a synthetic module file with a .modinfo.
fake_ko() {
    {
        echo ".text"; echo ".globl ${2}_fn"; echo "${2}_fn: ret"
        echo ".section .modinfo,\"a\""
        echo ".asciz \"version=$3\""; echo ".asciz \"description=$4\""; echo ".asciz \"license=GPL\""
        echo ".asciz \"vermagic=$5 SMP mod_unload \""; echo ".asciz \"name=$2\""
        [ -z "${6:-}" ] || echo ".asciz \"$6\""
    } >"$t/ko.S"
    mkdir -p "$(dirname "$1")" && as "$t/ko.S" -o "$t/ko.o" && ld -r "$t/ko.o" -o "$1"
}
# snapshot DIR...: every path under DIR with its type, mode and content hash.
snapshot() {
    local d
    for d in "$@"; do
        [ -e "$d" ] || { echo "absent $d"; continue; }
        find "$d" -printf '%y %m %p\n' | sort
        find "$d" -type f -exec sha256sum {} + | sort -k2
    done
}
# same NAME BEFORE AFTER: the snapshots are equal.
same() {
    if [ "$2" = "$3" ]; then return 0; fi
    bad "$1" "the tree changed: $(diff <(echo "$2") <(echo "$3") | grep '^[<>]' | head -n 8 | tr '\n' ' ')"
    return 1
}

# ---- 1. the driver container's install --------------------------------------------------------
K=9.9.9-gpuop
M=/lib/modules/$K
DESC="GPUDirect RDMA peer-memory client for NVIDIA GPUs (nv_mem)"
tool=$here/packaging/gpu-operator/nvpeer-driver-container.sh
mkdir -p "$t/src" "$t/state" "$t/shim-depmod" "$t/shim-mv"
printf 'PACKAGE_VERSION="%s"\n' "$VER" >"$t/src/dkms.conf"
cp -a "$here/scripts" "$t/src/"
fake_ko "$M/kernel/drivers/video/nvidia-peermem.ko" nvidia_peermem 550.163.01 "NVIDIA GPUDirect RDMA peer memory" "$K"
fake_ko "$M/kernel/drivers/gpu/nvidia-peermem.ko" nvidia_peermem 550.163.01 "NVIDIA GPUDirect RDMA peer memory" "$K"
fake_ko "$M/kernel/drivers/video/nvidia.ko" nvidia 550.163.01 "NVIDIA driver" "$K"
touch "$M/modules.order" "$M/modules.builtin" "$M/modules.builtin.modinfo"
depmod -a "$K" || { echo "depmod of the fixture tree failed" >&2; exit 1; }
store() { # [DESCRIPTION] [EXTRA]: nvpeer's build as the state directory keeps it
    mkdir -p "$t/state/$K"
    fake_ko "$t/state/$K/nvidia-peermem.ko" nvidia_peermem "$VER" "${1:-$DESC}" "$K" "${2:-}"
}
printf '#!/bin/sh\necho "depmod: shim: failing" >&2\nexit 1\n' >"$t/shim-depmod/depmod"
# (mv fails for the set-aside of the second NVIDIA copy only)
printf '#!/bin/sh\nfor a; do case $a in */drivers/gpu/nvidia-peermem.ko.nvidia) echo "mv: shim: failing" >&2; exit 1 ;; esac; done\nexec /bin/mv "$@"\n' >"$t/shim-mv/mv"
chmod +x "$t/shim-depmod/depmod" "$t/shim-mv/mv"
# ctr [PATH-PREFIX] ARG...: the script as the driver container runs it.
ctr() {
    local pre=$1; shift
    env ${pre:+PATH="$pre:$PATH"} KERNEL_VERSION=$K NVPEER_STATE_DIR="$t/state" NVPEER_SRC="$t/src" \
        NVPEER_DOCA_ROOT="$t/doca" NVPEER_APT=0 bash "$tool" "$@" >"$t/ctr.out" 2>&1
}
# rollback_case NAME SHIM-DIR WANT-LINE [SET-ASIDE]: prepare fails with WANT-LINE, the tree as it
# was (no *.nvidia in it unless SET-ASIDE: NVIDIA's files were set aside before, by an install).
rollback_case() {
    local before after rc=0
    before=$(snapshot "$M")
    ctr "$2" prepare || rc=$?
    after=$(snapshot "$M")
    [ $rc = 1 ] || { bad "$1" "prepare exited $rc, want 1: $(tail -n 3 "$t/ctr.out")"; return; }
    grep -q "^nvpeer-driver-container: .*$3" "$t/ctr.out" || { bad "$1" "no line '$3': $(cat "$t/ctr.out")"; return; }
    same "$1" "$before" "$after" || return
    [ -n "${4:-}" ] || [ -z "$(find "$M" -name '*.nvidia')" ] || { bad "$1" "*.nvidia left"; return; }
    [ -z "$(find "$t/state/$K" -name 'install.*')" ] || { bad "$1" "a backup directory left in the state directory"; return; }
    ok "$1: $(grep '^nvpeer-driver-container: ' "$t/ctr.out" | grep -v 'set aside\|still fits' | head -n 1 | cut -c1-110)"
}
store
rollback_case "driver-container[depmod fails]" "$t/shim-depmod" "depmod -a $K failed"
store "not nvpeer"
rollback_case "driver-container[resolve check fails after depmod]" "" "resolves to"
store
rollback_case "driver-container[second rename fails]" "$t/shim-mv" "cannot rename $M/kernel/drivers/gpu/nvidia-peermem.ko"
# The install itself: nvpeer's file in place, NVIDIA's set aside, no backup left.
if ctr "" prepare && [ "$(modinfo -k "$K" -n nvidia-peermem)" = "$M/updates/nvpeer/nvidia-peermem.ko" ] &&
    [ -f "$M/kernel/drivers/video/nvidia-peermem.ko.nvidia" ] && [ -f "$M/kernel/drivers/gpu/nvidia-peermem.ko.nvidia" ] &&
    [ -z "$(find "$t/state/$K" -name 'install.*')" ]; then
    ok "driver-container[install]: $(grep -c 'set aside' "$t/ctr.out") of NVIDIA's files set aside, nvidia-peermem resolves to nvpeer's"
else
    bad "driver-container[install]" "$(cat "$t/ctr.out")"
fi
# A new build over that install, depmod failing: the earlier nvpeer file comes back.
store "" "srcversion=REBUILT"
rollback_case "driver-container[reinstall, depmod fails: the earlier build back]" "$t/shim-depmod" "depmod -a $K failed" set-aside

# ---- 2. the hook with an nvidia_peermem loaded ------------------------------------------------
# hook_case NAME KALLSYMS WANT-RC WANT-LINE: modprobe-hook with a /proc whose modules lists
# nvidia_peermem and whose kallsyms is KALLSYMS.
hook_case() {
    local rc=0
    mkdir -p "$t/proc"
    printf 'nvidia_peermem 16384 0 - Live 0x0000000000000000\nnvidia 16384 1 nvidia_peermem, Live 0x0000000000000000\n' >"$t/proc/modules"
    printf '%b' "$2" >"$t/proc/kallsyms"
    unshare --mount --propagation unchanged -- bash -c 'mount --bind "$1/proc" /proc && shift && exec "$@"' hook "$t" \
        env KERNEL_VERSION=$K NVPEER_STATE_DIR="$t/state" NVPEER_SRC="$t/src" NVPEER_APT=0 \
        bash "$tool" modprobe-hook >"$t/hook.out" 2>&1 || rc=$?
    [ "$rc" = "$3" ] || { bad "$1" "exit $rc, want $3: $(cat "$t/hook.out")"; return; }
    grep -q "^nvpeer-driver-container: .*$4" "$t/hook.out" || { bad "$1" "no line '$4': $(cat "$t/hook.out")"; return; }
    ok "$1: $(tail -n 1 "$t/hook.out" | cut -c1-120)"
}
hook_case "hook[NVIDIA's nvidia_peermem loaded]" \
    '0000000000000000 t nv_mem_get_pages\t[nvidia_peermem]\n0000000000000000 T nvidia_p2p_get_pages\t[nvidia]\n' \
    1 "nvidia_peermem is loaded but it is not nvpeer's"
hook_case "hook[nvpeer loaded as nvidia_peermem]" \
    '0000000000000000 t nvpeer_shim_param\t[nvidia_peermem]\n0000000000000000 T nvidia_p2p_get_pages\t[nvidia]\n' \
    0 "already loaded and it is nvpeer's"

# ---- 3. make dkms-install ---------------------------------------------------------------------
KD=9.9.9-norust
mkdir -p "/lib/modules/$KD/build/include/config" "$t/node/usr/src" "$t/node/usr/share" "$t/shim-dkms"
printf 'CONFIG_RUST=y\nCONFIG_INFINIBAND=y\n' >"/lib/modules/$KD/build/.config"
echo "$KD" >"/lib/modules/$KD/build/include/config/kernel.release"
# (dkms, except that its build fails as a compile error would, with a make.log)
cat >"$t/shim-dkms/dkms" <<EOF
#!/bin/sh
case \$1 in
build) mkdir -p /var/lib/dkms/nvpeer/$VER/build
    echo "error[E0514]: found crate \\\`core\\\` compiled by an incompatible version of rustc" >/var/lib/dkms/nvpeer/$VER/build/make.log
    echo "Error! Bad return status for module build on kernel: $KD (x86_64)"; exit 10 ;;
esac
exec dkms "\$@"
EOF
chmod +x "$t/shim-dkms/dkms"
# dkms_install DKMS [LOG]: make dkms-install for the fake kernel into the node's scratch paths.
dkms_install() {
    make -C "$here" DKMS="$1" DKMS_SOURCE_TREE="$t/node/usr/src" KDIR="/lib/modules/$KD/build" \
        MODPROBE_DIR=/run/modprobe.d SYSTEMD_DIR=/run/systemd/system DKMS_FORCE_DIR="$t/node/usr/share/dkms/force" \
        DKMS_BUILD_LOG="$t/logs/build.log" dkms-install >"$t/dkms.out" 2>&1
}
node_paths=("$t/node" /var/lib/dkms /run /lib/modules)
# dkms_case NAME DKMS WANT-LINE [WANT-IN-LOG]: dkms-install fails with its last line matching
# WANT-LINE; nothing left; the build log kept holds WANT-IN-LOG.
dkms_case() {
    local before after rc=0 last
    rm -rf "$t/logs"
    before=$(snapshot "${node_paths[@]}")
    dkms_install "$2" || rc=$?
    after=$(snapshot "${node_paths[@]}")
    [ $rc != 0 ] || { bad "$1" "make dkms-install succeeded"; return; }
    last=$(grep '^nvpeer: make dkms-install: ' "$t/dkms.out" | tail -n 1)
    echo "$last" | grep -q -- "$3" || { bad "$1" "last line '$last', want '$3': $(tail -n 8 "$t/dkms.out")"; return; }
    same "$1" "$before" "$after" || return
    [ -z "$(dkms --sourcetree "$t/node/usr/src" status)" ] || { bad "$1" "dkms status: $(dkms --sourcetree "$t/node/usr/src" status)"; return; }
    [ -z "$(ls -d "$t"/node/usr/src/nvpeer-* 2>/dev/null)" ] || { bad "$1" "a source tree left in $t/node/usr/src"; return; }
    if [ -n "${4:-}" ]; then
        echo "$last" | grep -qF "$t/logs/build.log" && grep -q -- "$4" "$t/logs/build.log" ||
            { bad "$1" "the log $t/logs/build.log is not named or lacks '$4'"; return; }
    fi
    ok "$1: ${last#nvpeer: make dkms-install: }"
}
dkms_case "dkms-install[preflight stops the build]" dkms "stopped by the preflight for $KD" "lacks the Rust artifacts"
grep -q "^nvpeer preflight: .*lacks the Rust artifacts" "$t/dkms.out" && ok "dkms-install[preflight stops the build]: its line repeated" ||
    bad "dkms-install[preflight stops the build]" "the preflight's line is not in make's output"
dkms_case "dkms-install[the build fails]" "$t/shim-dkms/dkms" "the DKMS build of nvpeer $VER for $KD failed" "E0514"
# The whole install with a build that succeeds (a dkms shim whose build and install do nothing:
# nvpeer's compile is the dkms-build stage's), then make dkms-uninstall: the node as before.
printf '#!/bin/sh\ncase $1 in build|install) echo "dkms $1: shim: ok"; exit 0 ;; esac\nexec dkms "$@"\n' >"$t/shim-dkms/dkms-ok"
chmod +x "$t/shim-dkms/dkms-ok"
before=$(snapshot "${node_paths[@]}")
rc=0; dkms_install "$t/shim-dkms/dkms-ok" || rc=$?
if [ $rc = 0 ] && [ -f "$t/node/usr/share/dkms/force/nvpeer" ] && [ -f /run/modprobe.d/nvpeer.conf ] &&
    [ -f /run/systemd/system/nvpeer.service ] && dkms --sourcetree "$t/node/usr/src" status | grep -q "nvpeer/$VER"; then
    make -s -C "$here" DKMS_SOURCE_TREE="$t/node/usr/src" KDIR="/lib/modules/$KD/build" MODPROBE_DIR=/run/modprobe.d \
        SYSTEMD_DIR=/run/systemd/system DKMS_FORCE_DIR="$t/node/usr/share/dkms/force" dkms-uninstall >"$t/uninstall.out" 2>&1
    after=$(snapshot "${node_paths[@]}")
    same "dkms-install[install, uninstall]" "$before" "$after" && ok "dkms-install[install, uninstall]: installed, then nothing left"
else
    bad "dkms-install[install, uninstall]" "exit $rc: $(tail -n 5 "$t/dkms.out")"
fi
# A version DKMS has already (added by hand here): refused before anything is written.
make -s -C "$here" DKMS_SOURCE_TREE="$t/node/usr/src" dkms-source && dkms --sourcetree "$t/node/usr/src" add -m nvpeer -v "$VER" >/dev/null ||
    { echo "cannot add nvpeer to DKMS for the refusal case" >&2; exit 1; }
before=$(snapshot "${node_paths[@]}")
rc=0; dkms_install dkms || rc=$?
after=$(snapshot "${node_paths[@]}")
if [ $rc != 0 ] && grep -q "DKMS has nvpeer $VER already" "$t/dkms.out" && same "dkms-install[already added]" "$before" "$after"; then
    ok "dkms-install[already added]: refused, nothing changed"
elif [ $rc = 0 ] || ! grep -q "DKMS has nvpeer $VER already" "$t/dkms.out"; then
    bad "dkms-install[already added]" "exit $rc: $(tail -n 3 "$t/dkms.out")"
fi
dkms --sourcetree "$t/node/usr/src" remove -m nvpeer -v "$VER" --all >/dev/null 2>&1

echo "packaging rollback tests: $pass passed, $failed failed"
[ $failed = 0 ]

#!/bin/bash
# Runs INSIDE the toolchain root (tb_chroot: a private mount namespace, the repo at /src, the bench
# kernel at /kernel, an output directory bound at /out): `make dkms-install` of nvpeer for a bench
# VM kernel, natively, exactly as 50-dkms runs it in the guest (same root, same kernel build tree,
# same make arguments and paths), into tmpfs copies of the directories it writes. The kernel: the
# bench kernel, or (DKMS_KREL, DKMS_KBUILD, DKMS_KMODULES: its release, build tree and module tree
# as this root sees them; DKMS_TOP: the checkout, default /src, whose emulators' Module.symvers
# stand in for OFED's) Debian's stock kernel, where make check runs 50-dkms. Packs the result as
# /out/dkms-prebuilt.tar for 50-dkms, which unpacks it in the booted guest and goes on from there
# (dkms status, modprobe, reinstall, removal). Under TCG the compile took 300-700 s of make check;
# here it takes seconds. Prints the lines 50-dkms would have asserted on; fails like the guest would.
set -euo pipefail
krel=${DKMS_KREL:-$(cat /kernel/release)}
kbuild=${DKMS_KBUILD:-/kernel/obj}
kmodules=${DKMS_KMODULES:-/kernel/modules/lib/modules/$krel}
# The directories dkms-install writes, as in the guest (tmpfs there: guest init and 50-dkms).
for d in /var/lib/dkms /lib/modules /run; do mkdir -p "$d" && mount -t tmpfs tmpfs "$d"; done
mkdir -p "/lib/modules/$krel"
cp -a "$kmodules/." "/lib/modules/$krel/"
[ -e "/lib/modules/$krel/build" ] || ln -sfn "$kbuild" "/lib/modules/$krel/build"
depmod -a "$krel"
srctree=/tmp/nvpeer-dkms-src
log=/tmp/dkms-install.log
rc=0
make -C "${DKMS_TOP:-/src}" DKMS_SOURCE_TREE=$srctree NVPEER_MAKE_ARGS=BENCH=1 KDIR="/lib/modules/$krel/build" \
    MODPROBE_DIR=/run/modprobe.d SYSTEMD_DIR=/run/systemd/system DKMS_FORCE_DIR=/run/dkms-force \
    dkms-install >"$log" 2>&1 || rc=$?
cat "$log"
logs=$(find /var/lib/dkms/nvpeer -name make.log 2>/dev/null || true)
if [ "$rc" != 0 ]; then
    # shellcheck disable=SC2086
    [ -z "$logs" ] || tail -n 40 $logs
    echo "dkms-build: make dkms-install failed for $krel" >&2
    exit 1
fi
# shellcheck disable=SC2086
grep -q "nvpeer preflight: ok" $logs "$log" || { echo "dkms-build: the PRE_BUILD preflight did not run" >&2; exit 1; }
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
dkms --sourcetree "$srctree" status -m nvpeer -v "$ver" -k "$krel" | grep -q installed \
    || { echo "dkms-build: dkms status is not 'installed'" >&2; exit 1; }
ko=$(modinfo -k "$krel" -n nvidia-peermem)
echo "dkms-build: modinfo -k $krel -n nvidia-peermem: $ko"
# Everything dkms-install wrote, with the paths it wrote them under (before the refusal checks,
# which leave a build log of their own behind).
tar -C / -cf /out/dkms-prebuilt.tar var/lib/dkms "${srctree#/}" run/modprobe.d run/systemd run/dkms-force \
    "$(realpath --relative-to=/ "$(dirname "$ko")")"
echo "dkms-build: packed $(tar -tf /out/dkms-prebuilt.tar | wc -l) entries for $krel"
# Outside the bench (no NVPEER_BENCH=1) kbuild refuses to fall back to the emulators' headers.
if out=$(make -C "/lib/modules/$krel/build" M="$srctree/nvpeer-$ver" modules 2>&1); then
    echo "dkms-build: a build without NVPEER_BENCH=1 or OFED_DIR succeeded" >&2; exit 1
fi
echo "$out" | grep -q "nvpeer: OFED_DIR is not set" || { echo "$out" | tail -n 5; echo "dkms-build: no refusal line" >&2; exit 1; }
echo "dkms-build: emulator fallback refused: $(echo "$out" | grep -o 'nvpeer: OFED_DIR is not set.*Stop' | sed 's/\.  Stop$//')"
# The build-time refusals (50-dkms runs them in the guest when it has no prebuilt tree).
. /src/testbench/lib/dkms-prebuild-refuses.sh
if out=$(dkms_prebuild_refuses "$ver" "$srctree" 2>&1); then
    echo "dkms-build: prebuild-refuses ok: $(echo "$out" | tail -n 1)"
else
    echo "$out"
    echo "dkms-build: prebuild-refuses FAILED" >&2
    exit 1
fi

#!/bin/bash
# `make deb` in the toolchain root with the packaging layer (testbench/lib/deb-root.sh), packaging
# the product nvpeer CLI the bench built on the host (userspace-tests, cargo build --release
# without the bench feature: tb_cargo_build_cli). Prints the
# directory holding nvpeer-dkms_<v>_all.deb and nvpeer-tools_<v>_<arch>.deb (suite 55-deb installs
# them: NVPEER_DEBS=<dir>).
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ -x "$NVPEER_PRODUCT_CLI" ] || tb_die "no product nvpeer CLI at $NVPEER_PRODUCT_CLI: build it first (tb_cargo_build_cli, testbench/lib/common.sh)"
out="$NVPEER_CACHE/debs-$(echo "$REPO_DIR" | sha256sum | cut -c1-12)"
rm -rf "$out"; mkdir -p "$out"
log=$(mktemp /tmp/nvpeer-deb.XXXXXX)
if ! TB_BINDS="$(dirname "$NVPEER_PRODUCT_CLI"):/cli $out:/out" "$TB_DIR/lib/deb-root.sh" --run \
        make -C /src deb NVPEER_CLI=/cli/nvpeer DEB_OUT=/out >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    tb_die "make deb failed"
fi
rm -f "$log"
ls "$out"/nvpeer-dkms_*_all.deb "$out"/nvpeer-tools_*.deb >/dev/null || tb_die "make deb left no packages in $out"
# What each package must hold (and the DKMS tree must not: the bench's emulator files).
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$REPO_DIR/dkms.conf")
dkms_files=$(dpkg-deb -c "$out/nvpeer-dkms_${ver}_all.deb" | awk '{ print $6 }')
for f in "./usr/src/nvpeer-$ver/dkms.conf" "./usr/src/nvpeer-$ver/packaging/dkms-preflight.sh" "./usr/src/nvpeer-$ver/scripts/preflight.sh" \
         ./usr/lib/modprobe.d/nvpeer.conf ./usr/lib/systemd/system/nvpeer.service \
         ./usr/share/dkms/modules_to_force_install/nvpeer; do
    echo "$dkms_files" | grep -qx "$f" || tb_die "nvpeer-dkms lacks $f"
done
! echo "$dkms_files" | grep -q "/testbench/" || tb_die "nvpeer-dkms ships testbench/ files"
dpkg-deb -I "$out/nvpeer-dkms_${ver}_all.deb" postinst | grep -q 'common.postinst' || tb_die "nvpeer-dkms's postinst does not run DKMS"
tools_files=$(dpkg-deb -c "$out"/nvpeer-tools_"$ver"_*.deb | awk '{ print $6 }')
for f in ./usr/bin/nvpeer ./usr/share/doc/nvpeer-tools/examples/nvpeer-alerts.yml \
         ./usr/share/doc/nvpeer-tools/examples/kubernetes/npd-nvpeer-gdr.json \
         ./usr/share/doc/nvpeer-tools/examples/kubernetes/nvpeer-node-health.yaml \
         ./usr/share/doc/nvpeer-tools/examples/kubernetes/nvpeer-fleet-job.yaml; do
    echo "$tools_files" | grep -qx "$f" || tb_die "nvpeer-tools lacks $f"
done
echo "$out"

#!/bin/bash
# Runs INSIDE the toolchain root, with the stock-kernel cache dir at /stock: fetches Debian's signed
# 7.2 kernel and its headers, regenerates the Rust artifacts Debian does not ship (modules_prepare
# from linux-source with Debian's .config and gcc-16), and leaves a module build tree in /stock/obj.
set -euo pipefail
flavour=${STOCK_FLAVOUR:-7.2.12+deb14-amd64}
cd /stock
if [ ! -f debs.ok ]; then
    apt-get -o Acquire::Check-Valid-Until=false update -qq
    rm -rf debs x; mkdir -p debs x
    (cd debs && apt-get download -qq "linux-binary-$flavour" "linux-headers-$flavour" \
        "linux-headers-${flavour%-amd64}-common") 2>&1 | grep -v "unsandboxed" || true
    for d in debs/*.deb; do dpkg-deb -x "$d" x; done
    touch debs.ok
fi
vmlinuz=$(ls x/boot/vmlinuz-"$flavour" x/usr/lib/modules/"$flavour"/vmlinuz 2>/dev/null | head -n1 || true)
hdr=x/usr/src/linux-headers-$flavour
mkdir -p obj
cp "$hdr/.config" obj/.config
make -C /kernel/src O=/stock/obj CC=x86_64-linux-gnu-gcc-16 KERNELRELEASE="$flavour" olddefconfig >/dev/null
make -C /kernel/src O=/stock/obj CC=x86_64-linux-gnu-gcc-16 KERNELRELEASE="$flavour" -j3 modules_prepare
cp "$hdr/Module.symvers" obj/Module.symvers
echo "$flavour" > release
cp "$vmlinuz" vmlinuz

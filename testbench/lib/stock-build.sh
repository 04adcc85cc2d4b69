#!/bin/bash
# Runs INSIDE a toolchain root, with the stock-kernel cache dir at /stock: fetches one of Debian's
# signed production kernels (testbench/stock-kernels.list: STOCK_FLAVOUR, STOCK_APT_SUITE,
# STOCK_SOURCE) and its headers, regenerates the Rust artifacts Debian does not ship
# (modules_prepare from the kernel's source with Debian's .config and the compiler named in it),
# and leaves a module build tree in /stock/obj (/stock/cc: that compiler).
#
# Debian's linux-headers packages carry no rust/ directory (no .rmeta of core, kernel, macros or
# ffi, no libmacros.so, no generated bindings): the artifacts are rebuilt here, and a Rust module
# then loads only if this root's rustc is the one that built the kernel (the crate hashes in the
# kernel's exported Rust symbol names depend on the compiler version). The build stops with one
# line saying which rustc and bindgen the kernel wants when this root has others.
# STOCK_SOURCE: "bench" (the bench kernel's tree at /kernel/src: same upstream version) or the name
# of a linux-source-X package of STOCK_APT_SUITE.
set -euo pipefail
flavour=${STOCK_FLAVOUR:-7.2.12+deb14-amd64}
apt_suite=${STOCK_APT_SUITE:-}
source=${STOCK_SOURCE:-bench}
cd /stock
# apt: the root's own lists, or (STOCK_APT_SUITE) a sources list, lists and cache of this dir's own.
apt=(-o Acquire::Check-Valid-Until=false)
if [ -n "$apt_suite" ]; then
    mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
    mkdir -p apt/lists/partial apt/cache/archives/partial apt/parts
    echo "deb ${mirror:-http://deb.debian.org/debian} $apt_suite main" >apt/sources.list
    apt+=(-o Dir::Etc::sourcelist=/stock/apt/sources.list -o Dir::Etc::sourceparts=/stock/apt/parts
          -o Dir::State::Lists=/stock/apt/lists -o Dir::Cache=/stock/apt/cache -o APT::Sandbox::User=root)
fi
printf '%q ' "${apt[@]}" >apt-args
if [ ! -f debs.ok ]; then
    apt-get "${apt[@]}" update -qq
    rm -rf debs x; mkdir -p debs x
    pkgs=("linux-binary-$flavour" "linux-headers-$flavour" "linux-headers-${flavour%-amd64}-common")
    [ "$source" = bench ] || pkgs+=("$source")
    (cd debs && apt-get "${apt[@]}" download -qq "${pkgs[@]}") 2>&1 | grep -v "unsandboxed" || true
    for d in debs/*.deb; do dpkg-deb -x "$d" x; done
    touch debs.ok
fi
vmlinuz=$(ls x/boot/vmlinuz-"$flavour" x/usr/lib/modules/"$flavour"/vmlinuz 2>/dev/null | head -n1 || true)
hdr=x/usr/src/linux-headers-$flavour
cfg() { sed -n "s/^$1=\"\\(.*\\)\"\$/\\1/p" "$hdr/.config"; }
# The toolchain that built the kernel, from its .config (not from its version number).
cc=$(cfg CONFIG_CC_VERSION_TEXT | cut -d' ' -f1)
want_rustc=$(cfg CONFIG_RUSTC_VERSION_TEXT)
want_bindgen=$(cfg CONFIG_BINDGEN_VERSION_TEXT)
have_rustc=$(rustc --version 2>/dev/null || echo "no rustc")
have_bindgen=$(bindgen --version 2>/dev/null || echo "no bindgen")
command -v "$cc" >/dev/null || { echo "stock-build: $flavour was built with $cc, which this root lacks" >&2; exit 1; }
if [ -n "$want_rustc" ] && [ "$want_rustc" != "$have_rustc" ]; then
    echo "stock-build: $flavour was built with $want_rustc; this root has $have_rustc (Debian's headers ship no rust/ artifacts: the kernel's own rustc must rebuild them)" >&2
    exit 1
fi
[ "$want_bindgen" = "$have_bindgen" ] || echo "stock-build: note: $flavour was built with $want_bindgen, this root has $have_bindgen (bindings are regenerated here)" >&2
if [ "$source" = bench ]; then
    ksrc=/kernel/src
else
    ksrc=/stock/src
    if [ ! -f src.ok ]; then
        rm -rf src; mkdir -p src
        tarball=$(ls x/usr/src/linux-source-*.tar.* | head -n1)
        tar xf "$tarball" -C src --strip-components=1
        touch src.ok
    fi
fi
mkdir -p obj
cp "$hdr/.config" obj/.config
make -C "$ksrc" O=/stock/obj CC="$cc" KERNELRELEASE="$flavour" olddefconfig >/dev/null
make -C "$ksrc" O=/stock/obj CC="$cc" KERNELRELEASE="$flavour" -j3 modules_prepare
cp "$hdr/Module.symvers" obj/Module.symvers
echo "$cc" >cc
echo "$flavour" > release
cp "$vmlinuz" vmlinuz

#!/bin/bash
# A real consumer for the bench: Debian trixie's UCX (libucx0, ucx-utils: 1.18.1, the last Debian
# UCX with the IB transport; forky's has none), fetched by package name with the toolchain root's
# apt pointed at trixie, and unpacked once under $NVPEER_CACHE/ucx-trixie/root (its usr/bin
# ucx_info, usr/lib/<triplet>/libuc*.so.0 and the ucx/ module directory). Prints that root.
# testbench/check passes it to testbench/vm (NVPEER_UCX), which binds it at /ucx in the guest;
# suite 27-ucx runs `ucx_info -d` from there with LD_LIBRARY_PATH (UCX loads its transport modules
# from the ucx/ directory beside the libucs.so it was loaded from). Only the two packages are
# unpacked: their other dependencies (libibverbs1, librdmacm1, libnuma1) are the root's, and the
# ROCm libraries libucx0 also depends on are left out (UCX skips a module whose libraries are
# missing: its rocm transports, which the bench has no use for). The version unpacked is in
# $NVPEER_CACHE/ucx-trixie/version; the cache is kept until removed (a trixie point release of UCX
# is not fetched again by itself).
set -euo pipefail
. "$(dirname "$0")/common.sh"
suite=${NVPEER_UCX_SUITE:-trixie}
root=$("$TB_DIR/tb" root)
base="$NVPEER_CACHE/ucx-$suite"
if [ -f "$base/.nvpeer-ucx-ok" ]; then echo "$base/root"; exit 0; fi
mkdir -p "$base"
exec 9>"$base.lock"
flock 9
if [ -f "$base/.nvpeer-ucx-ok" ]; then echo "$base/root"; exit 0; fi
rm -rf "$base.tmp"; mkdir -p "$base.tmp"
# apt with a sources list, lists and cache of this directory's own (the root's stay as they are).
TB_BINDS="$base.tmp:/ucx" tb_chroot "$root" bash -euc '
    suite=$1
    mirror=$(awk "\$1 == \"deb\" { print \$2; exit }" /etc/apt/sources.list 2>/dev/null || true)
    mkdir -p /ucx/apt/lists/partial /ucx/apt/cache/archives/partial /ucx/apt/parts /ucx/debs /ucx/root
    echo "deb ${mirror:-http://deb.debian.org/debian} $suite main" >/ucx/apt/sources.list
    apt=(-o Acquire::Check-Valid-Until=false -o Dir::Etc::sourcelist=/ucx/apt/sources.list
         -o Dir::Etc::sourceparts=/ucx/apt/parts -o Dir::State::Lists=/ucx/apt/lists
         -o Dir::Cache=/ucx/apt/cache -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" update -qq
    (cd /ucx/debs && apt-get "${apt[@]}" download -qq libucx0 ucx-utils 2>&1) | grep -v unsandboxed >&2 || true
    ls /ucx/debs/libucx0_*.deb /ucx/debs/ucx-utils_*.deb >/dev/null \
        || { echo "apt-get download libucx0 ucx-utils from $suite failed" >&2; exit 1; }
    for d in /ucx/debs/*.deb; do dpkg-deb -x "$d" /ucx/root; done
    dpkg-deb -f /ucx/debs/libucx0_*.deb Version >/ucx/version
    rm -rf /ucx/apt
' _ "$suite" >&2 || tb_die "could not fetch libucx0 and ucx-utils from Debian $suite"
[ -x "$base.tmp/root/usr/bin/ucx_info" ] || tb_die "ucx-utils from $suite has no usr/bin/ucx_info"
ls "$base.tmp"/root/usr/lib/*/ucx/libuct_ib.so.0 >/dev/null 2>&1 \
    || tb_die "libucx0 from $suite has no IB transport module (usr/lib/*/ucx/libuct_ib.so.0)"
rm -rf "$base"; mv "$base.tmp" "$base"
touch "$base/.nvpeer-ucx-ok"
tb_log "UCX $(cat "$base/version") from Debian $suite unpacked in $base/root"
echo "$base/root"

#!/bin/bash
# Debian packages the bench runs but does not install, fetched by package name with the toolchain
# root's apt pointed at SUITE (a sources list, lists and cache of their own: the root's stay as
# they are), unpacked once under $NVPEER_CACHE/NAME-SUITE/root with `dpkg-deb -x` (no maintainer
# script runs, no dependency is pulled in: the caller says which packages make up what it needs).
# Prints that root; the first package's version is in its ../version. The cache is kept until
# removed (a point release is not fetched again by itself).
#   deb-fetch.sh NAME SUITE PKG...
# Used by ucx-fetch.sh (trixie's UCX for 27-ucx) and testbench/check (trixie's promtool for
# 29-metrics).
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ $# -ge 3 ] || tb_die "usage: deb-fetch.sh NAME SUITE PKG..."
name=$1 suite=$2
shift 2
root=$("$TB_DIR/tb" root)
base="$NVPEER_CACHE/$name-$suite"
if [ -f "$base/.nvpeer-fetch-ok" ]; then echo "$base/root"; exit 0; fi
mkdir -p "$base"
exec 9>"$base.lock"
flock 9
if [ -f "$base/.nvpeer-fetch-ok" ]; then echo "$base/root"; exit 0; fi
rm -rf "$base.tmp"; mkdir -p "$base.tmp"
TB_BINDS="$base.tmp:/fetch" tb_chroot "$root" bash -euc '
    suite=$1; shift
    mirror=$(awk "\$1 == \"deb\" { print \$2; exit }" /etc/apt/sources.list 2>/dev/null || true)
    mkdir -p /fetch/apt/lists/partial /fetch/apt/cache/archives/partial /fetch/apt/parts /fetch/debs /fetch/root
    echo "deb ${mirror:-http://deb.debian.org/debian} $suite main" >/fetch/apt/sources.list
    apt=(-o Acquire::Check-Valid-Until=false -o Dir::Etc::sourcelist=/fetch/apt/sources.list
         -o Dir::Etc::sourceparts=/fetch/apt/parts -o Dir::State::Lists=/fetch/apt/lists
         -o Dir::Cache=/fetch/apt/cache -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" update -qq
    (cd /fetch/debs && apt-get "${apt[@]}" download -qq "$@" 2>&1) | grep -v unsandboxed >&2 || true
    for p in "$@"; do
        ls /fetch/debs/"${p}"_*.deb >/dev/null || { echo "apt-get download $p from $suite failed" >&2; exit 1; }
    done
    for d in /fetch/debs/*.deb; do dpkg-deb -x "$d" /fetch/root; done
    dpkg-deb -f /fetch/debs/"$1"_*.deb Version >/fetch/version
    rm -rf /fetch/apt /fetch/debs
' _ "$suite" "$@" >&2 || tb_die "could not fetch $* from Debian $suite"
rm -rf "$base"; mv "$base.tmp" "$base"
touch "$base/.nvpeer-fetch-ok"
tb_log "$* $(cat "$base/version") from Debian $suite unpacked in $base/root"
echo "$base/root"

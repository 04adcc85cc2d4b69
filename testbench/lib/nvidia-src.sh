#!/bin/bash
# NVIDIA's real open kernel module source, from Debian's nvidia-open-kernel-source (contrib), for
# building and ffi-checking nvpeer against the real nv-p2p.h and for building NVIDIA's own
# nvidia-peermem.c. Nothing of it enters the repository: it is fetched by package name.
#
#   testbench/lib/nvidia-src.sh            (host; `testbench/tb nvidia-src`) fetch and unpack once
#                                          into $NVPEER_CACHE/nvidia-src-<debian version>/ and print
#                                          that directory: it holds nvidia/nv-p2p.h (NVIDIA_SRC's
#                                          layout, as /usr/src/nvidia-<ver>/) and nvidia-peermem/
#   nvidia-src.sh --in-root                (inside the toolchain root, work dir at /nvsrc) the fetch
#
# The package is fetched with apt-get download inside the root, from a sources list of its own
# (the root's suite stays `main` only; apt's lists and cache for this fetch live in the work dir).
# Environment: NVPEER_NVIDIA_SRC_SUITE (default trixie: forky has no nvidia-open-kernel-source),
# NVPEER_NVIDIA_SRC_VERSION (a Debian version, e.g. 550.163.01-2: use/fetch exactly that one;
# default: the newest one cached for the suite, else what the suite has now).
set -euo pipefail
pkg=nvidia-open-kernel-source
suite=${NVPEER_NVIDIA_SRC_SUITE:-trixie}
want=${NVPEER_NVIDIA_SRC_VERSION:-}
marker=.nvpeer-nvidia-src-ok

if [ "${1:-}" = --in-root ]; then
    mirror=$2
    cd /nvsrc
    rm -rf lists cache parts debs x out
    mkdir -p lists/partial cache/archives/partial parts debs x out
    echo "deb $mirror $suite contrib" >sources.list
    apt=(-o Dir::Etc::sourcelist=/nvsrc/sources.list -o Dir::Etc::sourceparts=/nvsrc/parts
         -o Dir::State::Lists=/nvsrc/lists -o Dir::Cache=/nvsrc/cache
         -o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" update -qq
    (cd debs && apt-get "${apt[@]}" download -qq "$pkg${want:+=$want}")
    deb=$(ls debs/*.deb)
    dpkg-deb -f "$deb" Version >version
    dpkg-deb -x "$deb" x
    tarball=$(ls x/usr/src/*.tar.xz x/usr/src/*.tar.gz x/usr/src/*.tar.bz2 2>/dev/null | head -n1 || true)
    [ -n "$tarball" ] || { echo "nvidia-src: no source tarball in $deb (contents: $(cd x && find . -type f | head))" >&2; exit 1; }
    tar xf "$tarball" -C out
    p2p=$(find out -path '*/nvidia/nv-p2p.h' | head -n1)
    [ -n "$p2p" ] || { echo "nvidia-src: no nvidia/nv-p2p.h in $tarball" >&2; exit 1; }
    # The directory holding nvidia/ (the package's modules/nvidia-open-kernel/), relative to out/.
    top=${p2p%/nvidia/nv-p2p.h}
    echo "${top#out/}" >top
    exit 0
fi

. "$(dirname "$0")/common.sh"

# The cached tree for this suite (and version, when asked for); the newest one when several.
cached() {
    local d best=""
    for d in "$NVPEER_CACHE"/nvidia-src-*/; do
        d=${d%/}
        [ -f "$d/$marker" ] || continue
        read -r _ ver s <"$d/$marker"
        [ "$s" = "$suite" ] || continue
        [ -z "$want" ] || [ "$ver" = "$want" ] || continue
        best=$(printf '%s\n%s\n' "$best" "$d" | sed '/^$/d' | sort -V | tail -n1)
    done
    [ -n "$best" ] && echo "$best"
}

if dir=$(cached); then echo "$dir"; exit 0; fi
root=$(tb_root)
work="$NVPEER_CACHE/nvidia-src.work"
mkdir -p "$work"
exec 9>"$NVPEER_CACHE/nvidia-src.lock"
flock 9
if dir=$(cached); then echo "$dir"; exit 0; fi
# The root's own mirror (mkroot.sh's NVPEER_MIRROR), for this fetch's separate sources list.
mirror=$(awk '$1 == "deb" { print $2; exit }' "$root/etc/apt/sources.list" 2>/dev/null || true)
mirror=${mirror:-${NVPEER_MIRROR:-http://deb.debian.org/debian}}
TB_BINDS="$work:/nvsrc" tb_progress "NVIDIA open module source: $pkg${want:+ $want} from $suite contrib" \
    tb_chroot "$root" /usr/bin/env NVPEER_NVIDIA_SRC_SUITE="$suite" NVPEER_NVIDIA_SRC_VERSION="$want" \
    bash /src/testbench/lib/nvidia-src.sh --in-root "$mirror" >&2
ver=$(cat "$work/version")
dir="$NVPEER_CACHE/nvidia-src-$ver"
rm -rf "$dir"
mv "$work/out/$(cat "$work/top")" "$dir"
[ -f "$dir/nvidia/nv-p2p.h" ] || tb_die "$dir has no nvidia/nv-p2p.h"
echo "$pkg $ver $suite" >"$dir/$marker"
rm -rf "$work"
tb_log "NVIDIA open module source $ver at $dir"
echo "$dir"

#!/bin/bash
# Build (or reuse) the bench's toolchain root: a Debian forky tree made with mmdebstrap.
# Cached under $NVPEER_CACHE (default /var/cache/nvpeer-testbench), keyed by the suite and the
# package list (packages.txt; NVPEER_ROOT_PACKAGES names another, as for a second kernel's own
# toolchain: testbench/kernels/*.packages). Prints the root's path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${NVPEER_CACHE:-/var/cache/nvpeer-testbench}
mirror=${NVPEER_MIRROR:-http://deb.debian.org/debian}
suite=${NVPEER_SUITE:-forky}
pkgfile=${NVPEER_ROOT_PACKAGES:-$here/packages.txt}
key=$( (echo "$suite"; grep -v '^#' "$pkgfile") | sha256sum | cut -c1-16)
root="$cache/root-$key"
if [ -f "$root/.nvpeer-root-ok" ]; then echo "$root"; exit 0; fi
command -v mmdebstrap >/dev/null || { apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2; }
mkdir -p "$cache"
rm -rf "$root.tmp"
pkgs=$(grep -v '^#' "$pkgfile" | paste -sd, -)
echo "[mkroot] building toolchain root $root (debian $suite)" >&2
mmdebstrap --variant=minbase --aptopt='Acquire::Check-Valid-Until "false"' \
  --include="$pkgs" "$suite" "$root.tmp" "$mirror" >&2
mkdir -p "$root.tmp/src" "$root.tmp/results" "$root.tmp/work"
rm -rf "$root"; mv "$root.tmp" "$root"
touch "$root/.nvpeer-root-ok"
echo "$root"

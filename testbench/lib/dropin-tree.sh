#!/bin/bash
# dropin-tree.sh REPO [DIR MODULE]: prepares REPO/DIR (default build/nvidia-peermem), a build tree
# of nvpeer under the module name MODULE (default nvidia-peermem: its drop-in name,
# NVPEER_MODULE=nvidia-peermem, Kbuild), beside the plain nvpeer.ko the repository root builds.
# kbuild writes objects next to their sources and refuses MO= on a source tree that has built, so
# a second build needs its own copy of the sources: the tracked Kbuild, src/ and scripts/ (no build outputs),
# with testbench/ linked for the emulators' headers and symbols. Run before each build of it.
# Trees: build/nvidia-peermem (bench suites load nvidia-peermem.ko from it: 26-detection) and
# build/nvpeer-nvidia-src (make check builds nvpeer there against NVIDIA's real nv-p2p.h).
set -euo pipefail
repo=$(cd "$1" && pwd)
dst="$repo/${2:-build/nvidia-peermem}"
module=${3:-nvidia-peermem}
mkdir -p "$dst"
# Sources only; stale copies of deleted files go too (outputs stay: kbuild rebuilds what changed).
rm -rf "$dst/src.new"
mkdir -p "$dst/src.new"
(cd "$repo" && find src scripts -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' -o -name '*.sh' \) \
    -not -path 'src/logic/target/*' -not -name 'abi_facts.rs' | tar cf - -T -) | tar xf - -C "$dst/src.new"
for f in $(cd "$dst/src.new" && find . -type f); do
    cmp -s "$dst/src.new/$f" "$dst/$f" 2>/dev/null || install -D -m "$(stat -c %a "$dst/src.new/$f")" "$dst/src.new/$f" "$dst/$f"
done
rm -rf "$dst/src.new"
sed "s/^NVPEER_MODULE ?= nvpeer\$/NVPEER_MODULE ?= $module/" "$repo/Kbuild" >"$dst/Kbuild.new"
grep -q "^NVPEER_MODULE ?= $module\$" "$dst/Kbuild.new" || { echo "dropin-tree: Kbuild has no 'NVPEER_MODULE ?= nvpeer' line" >&2; exit 1; }
cmp -s "$dst/Kbuild.new" "$dst/Kbuild" && rm "$dst/Kbuild.new" || mv "$dst/Kbuild.new" "$dst/Kbuild"
ln -sfn ../../testbench "$dst/testbench"

#!/bin/bash
# dropin-tree.sh REPO: prepares REPO/build/nvidia-peermem, a build tree of nvpeer under its drop-in
# module name (NVPEER_MODULE=nvidia-peermem, Kbuild), beside the plain nvpeer.ko the repository root
# builds. kbuild writes objects next to their sources and refuses MO= on a source tree that has
# built, so the second name needs its own copy of the sources: the tracked Kbuild and src/ (no
# build outputs), with testbench/ linked for the emulators' headers and symbols. Run before each
# build of it; bench suites load nvidia-peermem.ko from it (26-detection).
set -euo pipefail
repo=$(cd "$1" && pwd)
dst="$repo/build/nvidia-peermem"
mkdir -p "$dst"
# Sources only; stale copies of deleted files go too (outputs stay: kbuild rebuilds what changed).
rm -rf "$dst/src.new"
mkdir -p "$dst/src.new"
(cd "$repo" && find src -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) -not -path 'src/logic/target/*' \
    | tar cf - -T -) | tar xf - -C "$dst/src.new"
for f in $(cd "$dst/src.new/src" && find . -type f); do
    cmp -s "$dst/src.new/src/$f" "$dst/src/$f" 2>/dev/null || install -D -m 0644 "$dst/src.new/src/$f" "$dst/src/$f"
done
rm -rf "$dst/src.new"
sed 's/^NVPEER_MODULE ?= nvpeer$/NVPEER_MODULE ?= nvidia-peermem/' "$repo/Kbuild" >"$dst/Kbuild.new"
grep -q '^NVPEER_MODULE ?= nvidia-peermem$' "$dst/Kbuild.new" || { echo "dropin-tree: Kbuild has no 'NVPEER_MODULE ?= nvpeer' line" >&2; exit 1; }
cmp -s "$dst/Kbuild.new" "$dst/Kbuild" && rm "$dst/Kbuild.new" || mv "$dst/Kbuild.new" "$dst/Kbuild"
ln -sfn ../../testbench "$dst/testbench"

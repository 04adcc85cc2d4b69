#!/bin/bash
# nvidia-peermem-tree.sh REPO [NVSRC]: prepares REPO/build/nvidia-peermem-real, a build tree of
# NVIDIA's own nvidia-peermem.c, unchanged, from Debian's nvidia-open-kernel-source (`testbench/tb
# nvidia-src`, or the unpacked tree NVSRC), for the bench: built against the emulators' symbols, it
# runs the scenario suites and the registration benchmark beside nvpeer and classic_peer.
#
# What is ours: the Kbuild and the conftest.h written here. NVIDIA's build generates conftest.h by
# compiling test programs against the kernel; the one test nvidia-peermem needs
# (ib_peer_memory_symbols) passes on a node with MLNX_OFED / DOCA-OFED, as it does against the core
# emulator, so conftest.h defines NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT and nothing else. The flags
# are those of NVIDIA's nvidia-peermem.Kbuild plus NV_VERSION_STRING (its top-level Kbuild's).
# NVIDIA's files (nvidia-peermem.c and the nv-p2p.h and peer_mem.h it includes from its own
# directory) are copied into build/, which git ignores: nothing of them enters the repository.
#
# The module is built as nvidia-peermem-real.ko (module name nvidia_peermem_real): a composite
# object over NVIDIA's nvidia-peermem.o, so that it neither shares a file name with nvpeer's
# drop-in build (build/nvidia-peermem/nvidia-peermem.ko) in the guest's module tree nor its module
# name, and both can be modprobed by name. It registers the same clients ("nv_mem", "nv_mem_nc").
set -euo pipefail
repo=$(cd "$1" && pwd)
nvsrc=${2:-$("$repo/testbench/tb" nvidia-src)}
src="$nvsrc/nvidia-peermem"
[ -f "$src/nvidia-peermem.c" ] || { echo "nvidia-peermem-tree: no nvidia-peermem/nvidia-peermem.c in $nvsrc" >&2; exit 1; }
# The driver version (Debian's version without its revision), from the marker `tb nvidia-src` wrote.
read -r _ debver _ <"$nvsrc/.nvpeer-nvidia-src-ok"
ver=${debver%-*}
dst="$repo/build/nvidia-peermem-real"
mkdir -p "$dst"
# install only what changed, so kbuild rebuilds only then.
put() { cmp -s "$1" "$dst/$2" 2>/dev/null || install -m 0644 "$1" "$dst/$2"; }
for f in nvidia-peermem.c nv-p2p.h peer_mem.h; do put "$src/$f" "$f"; done
tmp=$(mktemp)
cat >"$tmp" <<'EOF'
/* Written by nvpeer's bench (testbench/lib/nvidia-peermem-tree.sh), not NVIDIA's conftest output:
 * the result of the one conftest nvidia-peermem.c depends on, as on a node with the OFED core. */
#define NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT
EOF
put "$tmp" conftest.h
cat >"$tmp" <<EOF
# Written by testbench/lib/nvidia-peermem-tree.sh: NVIDIA's nvidia-peermem.c $ver as
# nvidia-peermem-real.ko, against the bench emulators' symbols.
obj-m := nvidia-peermem-real.o
nvidia-peermem-real-y := nvidia-peermem.o
ccflags-y := -I\$(src) -DNV_VERSION_STRING='"$ver"' -UDEBUG -U_DEBUG -DNDEBUG -DNV_BUILD_MODULE_INSTANCES=0
KBUILD_EXTRA_SYMBOLS += \$(abspath \$(KBUILD_EXTMOD)/../../testbench/emu/nvp2p/Module.symvers) \\
			\$(abspath \$(KBUILD_EXTMOD)/../../testbench/emu/peer_mem/Module.symvers)
EOF
put "$tmp" Kbuild
rm -f "$tmp"
echo "$ver" >"$dst/nvidia-version"

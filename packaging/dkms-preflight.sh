#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# DKMS PRE_BUILD hook of nvpeer: runs the module build preflight (scripts/preflight.sh, via
# `make preflight`) against the kernel DKMS is building for, so a kernel without CONFIG_RUST,
# without its Rust artifacts, with a different rustc, without OFED's peer-memory API or without
# the NVIDIA open modules fails here with one line naming the fix, not deep inside kbuild.
#
#   packaging/dkms-preflight.sh KDIR        (run by dkms from the package's build directory)
set -uo pipefail
kdir=${1:?usage: dkms-preflight.sh KERNEL_BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
# NVPEER_MAKE_ARGS carries OFED_DIR=/NVIDIA_SRC=/RUSTC=/BENCH=1 as for the build itself.
# shellcheck disable=SC2086
if ! out=$(make -s -C "$here" KDIR="$kdir" ${NVPEER_MAKE_ARGS:-} preflight 2>&1); then
    echo "$out" >&2
    echo "nvpeer: DKMS build for $kdir stopped by the preflight above (docs/install.md, 'Troubleshooting')." >&2
    exit 1
fi
echo "$out"

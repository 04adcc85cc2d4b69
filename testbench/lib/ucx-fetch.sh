#!/bin/bash
# A real consumer for the bench: Debian trixie's UCX (libucx0, ucx-utils: 1.18.1, the last Debian
# UCX with the IB transport; forky's has none), fetched by package name with the toolchain root's
# apt pointed at trixie (testbench/lib/deb-fetch.sh), and unpacked once under
# $NVPEER_CACHE/ucx-trixie/root (its usr/bin
# ucx_info, usr/lib/<triplet>/libuc*.so.0 and the ucx/ module directory). Prints that root.
# testbench/check passes it to testbench/vm (NVPEER_UCX), which binds it at /ucx in the guest;
# suite 27-ucx runs `ucx_info -d` from there with LD_LIBRARY_PATH (UCX loads its transport modules
# from the ucx/ directory beside the libucs.so it was loaded from). Only the two packages are
# unpacked: their other dependencies (libibverbs1, librdmacm1, libnuma1) are the root's, and the
# ROCm libraries libucx0 also depends on are left out (UCX skips a module whose libraries are
# missing: its rocm transports, which the bench has no use for). The version unpacked is in
# $NVPEER_CACHE/ucx-trixie/version.
set -euo pipefail
. "$(dirname "$0")/common.sh"
suite=${NVPEER_UCX_SUITE:-trixie}
dir=$("$TB_DIR/lib/deb-fetch.sh" ucx "$suite" libucx0 ucx-utils)
[ -x "$dir/usr/bin/ucx_info" ] || tb_die "ucx-utils from $suite has no usr/bin/ucx_info"
ls "$dir"/usr/lib/*/ucx/libuct_ib.so.0 >/dev/null 2>&1 \
    || tb_die "libucx0 from $suite has no IB transport module (usr/lib/*/ucx/libuct_ib.so.0)"
echo "$dir"

#!/bin/bash
# The packaging layer of the toolchain root: debhelper and dh-dkms, installed once into an overlay
# upper directory over the (shared, read-only by convention) toolchain root, so that adding them
# does not change testbench/packages.txt and with it the root's key, the bench kernel's key and
# every cached build. `make deb` runs in that overlay (testbench/lib/deb-build.sh).
#
#   deb-root.sh               (host) prepare once, print the layer's directory
#   deb-root.sh --run CMD...  (host) run CMD in the toolchain root with the layer on top (repo at
#                             /src, kernel at /kernel, TB_BINDS as for tb_chroot)
set -euo pipefail
. "$(dirname "$0")/common.sh"
pkgs="debhelper dh-dkms fakeroot"
root=$(tb_root)
key=$( (echo "$root"; echo "$pkgs"; cat "$TB_DIR/lib/deb-root.sh") | sha256sum | cut -c1-16)
layer="$NVPEER_CACHE/debroot-$key"

# in_layer CMD...: CMD in the toolchain root with the layer's upper directory over it.
in_layer() {
    unshare --mount --propagation private -- bash -euc '
        root=$1 layer=$2; shift 2
        mkdir -p "$layer/upper" "$layer/work" "$layer/merged"
        mount -t overlay overlay -o "lowerdir=$root,upperdir=$layer/upper,workdir=$layer/work" "$layer/merged"
        . "$TB_LIB/common.sh"
        tb_chroot "$layer/merged" "$@"
    ' deb-root "$root" "$layer" "$@"
}
export TB_LIB="$TB_DIR/lib"

if [ ! -f "$layer/.nvpeer-debroot-ok" ]; then
    exec 9>"$layer.lock"
    flock 9
    if [ ! -f "$layer/.nvpeer-debroot-ok" ]; then
        rm -rf "$layer"
        tb_progress "packaging layer: $pkgs" in_layer sh -c \
            "apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs" >&2
        touch "$layer/.nvpeer-debroot-ok"
    fi
    exec 9>&-
fi
if [ "${1:-}" = --run ]; then
    shift
    # One mount of the layer at a time (overlayfs refuses an upper directory in use).
    exec 9>"$layer.lock"
    flock 9
    in_layer "$@"
else
    echo "$layer"
fi

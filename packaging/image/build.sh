#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make image` (packaging/image.mk): the nvpeer tools image, an OCI image of the nvpeer CLI
# installed from the project's own nvpeer-tools .deb on a Debian root that mmdebstrap makes here
# from a Debian mirror, committed with buildah. Nothing is pulled from a container registry.
#
#   build.sh DEB ARCHIVE TAG
#
# DEB: nvpeer-tools_<version>_<arch>.deb (make deb); ARCHIVE: the OCI archive to write (load it
# with `podman load -i`, push it with `skopeo copy oci-archive:ARCHIVE docker://REGISTRY/...`);
# TAG: the image's name in the local containers-storage (buildah's and podman's), e.g.
# nvpeer-tools:0.1.0. Environment: IMAGE_SUITE (Debian suite, default trixie), IMAGE_MIRROR
# (default http://deb.debian.org/debian), SOURCE_DATE_EPOCH (the image's timestamps; default the
# .deb's own build time). On any failure nothing is left: no archive, no working container, no
# half-built root.
set -euo pipefail
[ $# = 3 ] || { echo "usage: $0 DEB ARCHIVE TAG" >&2; exit 2; }
deb=$1 archive=$2 tag=$3
suite=${IMAGE_SUITE:-trixie}
mirror=${IMAGE_MIRROR:-http://deb.debian.org/debian}
die() { echo "nvpeer image: $*" >&2; exit 1; }
for t in mmdebstrap buildah dpkg-deb; do
    command -v "$t" >/dev/null || die "$t not found: install mmdebstrap and buildah (apt install mmdebstrap buildah)"
done
[ -f "$deb" ] || die "$deb not found: build the packages first (make deb)"
[ "$(dpkg-deb -f "$deb" Package)" = nvpeer-tools ] || die "$deb is not an nvpeer-tools package"
version=$(dpkg-deb -f "$deb" Version)
arch=$(dpkg-deb -f "$deb" Architecture)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(stat -c %Y "$deb")}

work=$(mktemp -d "${TMPDIR:-/tmp}/nvpeer-image.XXXXXX")
ctr='' committed=''
cleanup() {
    local rc=$?
    [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$work"
    if [ "$rc" != 0 ]; then
        rm -f "$archive"
        [ -z "$committed" ] || buildah rmi "$tag" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# The root: Debian's minimal base, the verbs library with its providers (the CLI dlopens
# libibverbs.so.1; rxe, mlx5 and the other user-space drivers are ibverbs-providers'), and the
# .deb installed by apt in the root (its dependencies resolved from the same mirror). No
# documentation but the copyright files; the apt lists and the .deb itself not kept.
echo "nvpeer image: Debian $suite root with nvpeer-tools $version ($arch)" >&2
mmdebstrap --variant=minbase --architectures="$arch" --include=libibverbs1,ibverbs-providers \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-include=/usr/share/doc/nvpeer-tools/*' \
    --customize-hook="upload $deb /tmp/nvpeer-tools.deb" \
    --customize-hook='chroot "$1" apt-get install -y -qq --no-install-recommends /tmp/nvpeer-tools.deb' \
    --customize-hook='rm -f "$1/tmp/nvpeer-tools.deb"' \
    --customize-hook='chroot "$1" nvpeer --version' \
    "$suite" "$work/root.tar" "$mirror" >"$work/mmdebstrap.log" 2>&1 \
    || { tail -n 20 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed (its log's end above)"; }

ctr=$(buildah from scratch)
buildah add --quiet "$ctr" "$work/root.tar" / >/dev/null
buildah config \
    --entrypoint '["/usr/bin/nvpeer"]' --cmd doctor \
    --label org.opencontainers.image.title=nvpeer-tools \
    --label org.opencontainers.image.description="nvpeer's CLI: doctor, validate, bench, metrics, labels (GPUDirect RDMA)" \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.licenses=GPL-2.0-only \
    --label org.opencontainers.image.base.name="debian:$suite (mmdebstrap minbase)" \
    "$ctr"
buildah commit --quiet --format oci --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" "$tag" >/dev/null
ctr='' committed=1
mkdir -p "$(dirname "$archive")"
rm -f "$archive"
buildah push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
echo "nvpeer image: $tag ($(du -h "$archive" | cut -f1), $archive)" >&2

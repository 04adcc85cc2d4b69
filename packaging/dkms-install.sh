#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `make dkms-install` (packaging/install.mk runs this with its variables in the environment):
# the DKMS source tree in $DKMS_SOURCE_TREE/nvpeer-<version> (`make dkms-source`), DKMS's
# version-override entry, dkms add, build and install, the modprobe.d file and the systemd unit.
#
# All or nothing: when a step fails (the build the preflight stops, a dkms error, a file that
# cannot be written), everything this run wrote is undone before it exits 1: dkms remove of the
# version it added (so no AUTOINSTALL retries it on the next kernel), the override entry, the
# source tree, the modprobe.d file and the unit (a copy the node had before comes back), and the
# directories it created; the node is as it was. The failed build's log (dkms's make.log, which
# dkms remove deletes) is kept at $DKMS_BUILD_LOG and named in the last line.
# A version DKMS has already is refused before anything is written (`make dkms-uninstall` first).
set -uo pipefail

ME="nvpeer: make dkms-install"
die() { echo "$ME: $*" >&2; exit 1; }
for v in NVPEER_TOP NVPEER_VERSION KDIR DKMS DKMS_SOURCE_TREE DKMS_TREE DKMS_FORCE_DIR MODPROBE_DIR SYSTEMD_DIR DKMS_BUILD_LOG; do
    [ -n "${!v:-}" ] || die "$v is not set (packaging/install.mk sets it)"
done
DESTDIR=${DESTDIR:-}
VER=$NVPEER_VERSION
SRC=$DKMS_SOURCE_TREE/nvpeer-$VER
KREL=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null) ||
    die "cannot read $KDIR/include/config/kernel.release (KDIR: the kernel's build tree)"
[ -n "$KREL" ] || die "$KDIR/include/config/kernel.release is empty"
# (DKMS and DKMS_FLAGS are command words, as make passes them)
# shellcheck disable=SC2206
dkms=($DKMS)
# shellcheck disable=SC2206
flags=(--sourcetree "$DKMS_SOURCE_TREE" ${DKMS_FLAGS:-})
FORCE=$DESTDIR$DKMS_FORCE_DIR/nvpeer
CONF=$DESTDIR$MODPROBE_DIR/nvpeer.conf
UNIT=$DESTDIR$SYSTEMD_DIR/nvpeer.service

# What this run did, for undo: directories it created (children first), files it created,
# files it replaced (their earlier copies in $saved), whether it added the version to DKMS.
created_dirs=()
created_files=()
replaced=()
added=0
saved=""
done_ok=0
undone=0

# missing_dirs DIR...: DIR and its missing parents that do not exist yet, children first.
missing_dirs() {
    local d
    for d in "$@"; do
        while [ ! -d "$d" ]; do echo "$d"; d=$(dirname "$d"); done
    done | sort -ru
}

undo() {
    local i f
    [ "$done_ok" = 0 ] && [ "$undone" = 0 ] || return 0
    undone=1
    echo "$ME: undoing what this run wrote" >&2
    if [ "$added" = 1 ]; then
        "${dkms[@]}" remove "${flags[@]}" -m nvpeer -v "$VER" --all >/dev/null 2>&1 ||
            echo "$ME: dkms remove -m nvpeer -v $VER --all failed: remove it by hand" >&2
    fi
    for f in "${created_files[@]}"; do rm -f "$f"; done
    for f in "${replaced[@]}"; do
        cp -p "$saved/${f//\//%}" "$f" || echo "$ME: cannot restore $f (its earlier copy: $saved)" >&2
    done
    rm -rf "$SRC"
    for ((i = 0; i < ${#created_dirs[@]}; i++)); do rmdir "${created_dirs[i]}" 2>/dev/null; done
    [ -z "$saved" ] || rm -rf "$saved"
}

# put SRCFILE DST: install SRCFILE as DST (0644), a copy DST had before kept for undo.
put() {
    if [ -e "$2" ]; then
        [ -n "$saved" ] || saved=$(mktemp -d "${TMPDIR:-/tmp}/nvpeer-dkms-install.XXXXXX") || die "cannot create a directory under ${TMPDIR:-/tmp}"
        cp -p "$2" "$saved/${2//\//%}" || die "cannot keep a copy of $2"
        replaced+=("$2")
    else
        created_files+=("$2")
    fi
    install -D -m 0644 "$1" "$2" || die "cannot write $2"
}
run() { echo "$*"; "$@"; }

# ---- refused before anything is written -------------------------------------------------------
if [ -n "$("${dkms[@]}" status "${flags[@]}" -m nvpeer -v "$VER" 2>/dev/null)" ] || [ -e "$DKMS_TREE/nvpeer/$VER" ]; then
    die "DKMS has nvpeer $VER already ($("${dkms[@]}" status "${flags[@]}" -m nvpeer -v "$VER" 2>/dev/null | head -n 1)): run 'make dkms-uninstall' first (or 'make dkms-uninstall dkms-install')"
fi

# ---- the steps (undone on any failure from here on) ------------------------------------------
trap undo EXIT
trap 'exit 1' INT TERM HUP
mapfile -t created_dirs < <(missing_dirs "$SRC" "$(dirname "$FORCE")" "$(dirname "$CONF")" "$(dirname "$UNIT")")
"${MAKE:-make}" -s --no-print-directory -C "$NVPEER_TOP" dkms-source || die "cannot write the DKMS source tree $SRC"
# (read by make dkms-uninstall: the directories to remove again when empty, never one the node had)
missing_dirs "$(dirname "$FORCE")" "$(dirname "$CONF")" "$(dirname "$UNIT")" >"$SRC/.nvpeer-created-dirs" ||
    die "cannot write $SRC/.nvpeer-created-dirs"
printf 'nvpeer_version-override\n' >"$SRC/.nvpeer-override" && put "$SRC/.nvpeer-override" "$FORCE" && rm -f "$SRC/.nvpeer-override" ||
    die "cannot write DKMS's version-override entry $FORCE"
run "${dkms[@]}" add "${flags[@]}" -m nvpeer -v "$VER" || die "dkms add of nvpeer $VER failed (its output above)"
added=1
if ! run env NVPEER_MAKE_ARGS="${NVPEER_MAKE_ARGS:-}" "${dkms[@]}" build "${flags[@]}" -m nvpeer -v "$VER" -k "$KREL"; then
    mlog=$DKMS_TREE/nvpeer/$VER/build/make.log
    # dkms prints only "Consult .../make.log": the preflight's one line naming the fix, where the
    # admin looks (the .deb's postinst does the same for apt).
    line=$(grep -h '^nvpeer preflight: ' "$mlog" 2>/dev/null | grep -v ': ok (' | tail -n 1)
    [ -z "$line" ] || echo "$line" >&2
    if [ -f "$mlog" ] && mkdir -p "$(dirname "$DKMS_BUILD_LOG")" && cp "$mlog" "$DKMS_BUILD_LOG"; then
        where="the build log: $DKMS_BUILD_LOG"
    else
        where="dkms's output above"
    fi
    undo
    if [ -n "$line" ]; then
        die "stopped by the preflight for $KREL ($where): nothing of the install is left; fix the above, then run 'make dkms-install' again"
    fi
    die "the DKMS build of nvpeer $VER for $KREL failed ($where): nothing of the install is left"
fi
run env NVPEER_MAKE_ARGS="${NVPEER_MAKE_ARGS:-}" "${dkms[@]}" install "${flags[@]}" -m nvpeer -v "$VER" -k "$KREL" ||
    die "dkms install of nvpeer $VER for $KREL failed (its output above): nothing of the install is left"
put "$NVPEER_TOP/packaging/modprobe.d/nvpeer.conf" "$CONF"
put "$NVPEER_TOP/packaging/systemd/nvpeer.service" "$UNIT"
done_ok=1
[ -z "$saved" ] || rm -rf "$saved"
echo "nvpeer $VER installed through DKMS for $KREL: 'modprobe nvidia-peermem', then 'nvpeer doctor'"

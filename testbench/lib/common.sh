# Shared helpers for the bench's host-side scripts. Sourced, not run.
# shellcheck shell=bash
TB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$TB_DIR/.." && pwd)
NVPEER_CACHE=${NVPEER_CACHE:-/var/cache/nvpeer-testbench}
export NVPEER_CACHE
# Cargo builds (host unit tests, the guest's nvpeer CLI) keep their outputs in the cache too, so a
# fresh clone on a machine that already built once recompiles only what changed.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$NVPEER_CACHE/cargo-target}
# The bench's nvpeer CLI (cargo feature `bench`: `nvpeer emu`, the harness's `--mem emu`), which the
# guests run, and the product's (no bench feature: what the packages ship), kept beside it.
NVPEER_CLI="$CARGO_TARGET_DIR/release/nvpeer"
NVPEER_PRODUCT_CLI="$CARGO_TARGET_DIR/product/nvpeer"
# tb_cargo_build_cli: both, the product's first (copied aside), the bench's last (at NVPEER_CLI).
tb_cargo_build_cli() {
    (cd "$REPO_DIR/userspace-tests" && nice cargo build --release --quiet --bin nvpeer) || return 1
    mkdir -p "$(dirname "$NVPEER_PRODUCT_CLI")" && cp "$NVPEER_CLI" "$NVPEER_PRODUCT_CLI" || return 1
    (cd "$REPO_DIR/userspace-tests" && nice cargo build --release --quiet --features nvpeer/bench)
}

tb_log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
tb_die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
case ${NVPEER_BENCH_MODVERSIONS:-0} in
    0 | 1) ;;
    *) tb_die "NVPEER_BENCH_MODVERSIONS=$NVPEER_BENCH_MODVERSIONS: 0 (make check's bench kernel) or 1 (the variant with symbol versions), please" ;;
esac

# tb_vm_iommu: what NVPEER_VM_IOMMU (default, strict or pt; testbench/vm) adds to the guest kernel's
# command line; dies on any other value.
tb_vm_iommu() {
    case "${NVPEER_VM_IOMMU:-default}" in
        default) echo "" ;;
        strict) echo " iommu.strict=1" ;;
        pt) echo " iommu.passthrough=1" ;;
        *) tb_die "NVPEER_VM_IOMMU must be default, strict or pt" ;;
    esac
}

# Run a long command, printing a progress line every 30 s ("what, how long so far").
tb_progress() {
    local what=$1; shift
    local start=$SECONDS log
    log=$(mktemp /tmp/nvpeer-step.XXXXXX)
    tb_log "$what: started"
    "$@" >"$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 5
        if (( (SECONDS - start) % 30 < 5 )) && kill -0 "$pid" 2>/dev/null; then
            tb_log "$what: $((SECONDS - start)) s so far ($(tail -n1 "$log" | cut -c1-100))"
        fi
    done
    local rc=0; wait "$pid" || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n 60 "$log" >&2
        tb_log "$what: FAILED after $((SECONDS - start)) s (full log: $log)"
        return "$rc"
    fi
    tb_log "$what: done in $((SECONDS - start)) s"
    echo "$what $((SECONDS - start))" >>"${TB_TIMINGS:-/dev/null}"
    rm -f "$log"
}

tb_root() { "$TB_DIR/mkroot.sh"; }

# tb_kernel_fragments: the bench kernel's config fragments, relative to the repository, in the
# order kernel-build.sh merges them: testbench/kernel.config, and with NVPEER_BENCH_MODVERSIONS=1
# (make check-full) the variant with symbol versions over it.
tb_kernel_fragments() {
    echo testbench/kernel.config
    [ "${NVPEER_BENCH_MODVERSIONS:-0}" = 0 ] || echo testbench/kernel-modversions.config
}

# Key of the test kernel: source package version + config fragments + build script + toolchain
# root (each variant has a cache directory of its own).
tb_kernel_key() {
    local root=$1
    local srcver f
    srcver=$(chroot "$root" dpkg-query -W -f '${Version}' 'linux-source-*' 2>/dev/null | head -n1)
    (echo "$srcver"; echo "$root"
     for f in $(tb_kernel_fragments); do cat "$REPO_DIR/$f"; done
     cat "$TB_DIR/lib/kernel-build.sh") | sha256sum | cut -c1-16
}

# Run a command inside the toolchain root, in a private mount namespace, with the repo at /src
# and the kernel build at /kernel. Extra binds: TB_BINDS="host:guest ...".
tb_chroot() {
    local root=$1; shift
    local kdir=${TB_KERNEL_DIR:-}
    unshare --mount --propagation private -- bash -euc '
        root=$1; kdir=$2; repo=$3; shift 3
        mount -t proc proc "$root/proc"
        mount -t sysfs sys "$root/sys"
        mount --rbind /dev "$root/dev"
        mkdir -p "$root/src" "$root/kernel" "$root/tmp"
        mount --bind "$repo" "$root/src"
        [ -n "$kdir" ] && mount --bind "$kdir" "$root/kernel"
        mount -t tmpfs tmpfs "$root/tmp"
        for b in ${TB_BINDS:-}; do mkdir -p "$root/${b#*:}"; mount --bind "${b%%:*}" "$root/${b#*:}"; done
        exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb \
            LANG=C.UTF-8 "$@"
    ' tb "$root" "$kdir" "$REPO_DIR" "$@"
}

# tb_stock_entry [NAME]: reads NAME's line of testbench/stock-kernels.list (default: the first)
# into STOCK_NAME, STOCK_FLAVOUR, STOCK_APT, STOCK_ROOT and STOCK_SOURCE; dies on an unknown name.
tb_stock_entry() {
    local want=${1:-} name flavour apt root source
    while read -r name flavour apt root source; do
        case "$name" in ''|'#'*) continue ;; esac
        [ -z "$want" ] || [ "$want" = "$name" ] || continue
        # shellcheck disable=SC2034 # (the STOCK_* are read by the scripts that source this file)
        STOCK_NAME=$name STOCK_FLAVOUR=$flavour STOCK_APT=${apt#-} STOCK_ROOT=${root#-} STOCK_SOURCE=$source
        return 0
    done <"$TB_DIR/stock-kernels.list"
    tb_die "no kernel '$want' in testbench/stock-kernels.list"
}

# tb_stock_root: the toolchain root that builds for the kernel tb_stock_entry chose (its ROOT
# column: a suite and a package list, built by mkroot.sh like the bench's own); prints its path.
tb_stock_root() {
    if [ -z "$STOCK_ROOT" ]; then tb_root; return; fi
    NVPEER_SUITE=${STOCK_ROOT%%:*} NVPEER_ROOT_PACKAGES="$TB_DIR/${STOCK_ROOT#*:}" "$TB_DIR/mkroot.sh"
}

# tb_stock_cache ROOT: the cache directory of tb_stock_entry's kernel for ROOT (prepared when it
# holds .nvpeer-stock-ok).
tb_stock_cache() {
    echo "$NVPEER_CACHE/stock-$( (cat "$TB_DIR/lib/stock-build.sh"; echo "$1"; echo "$STOCK_FLAVOUR $STOCK_APT $STOCK_SOURCE") \
        | sha256sum | cut -c1-16)"
}

# tb_stock_dir ROOT KDIR: Debian's production kernel tb_stock_entry chose (testbench/lib/
# stock-build.sh: the signed image and a module build tree for it), fetched and prepared once per
# toolchain root; prints its cache directory. KDIR (the bench kernel's build) lends its source tree
# to modules_prepare where the entry's SOURCE is "bench".
tb_stock_dir() {
    local root=$1 kdir=$2 sdir
    sdir=$(tb_stock_cache "$root")
    mkdir -p "$sdir"
    (
        flock 8
        if [ ! -f "$sdir/.nvpeer-stock-ok" ]; then
            TB_KERNEL_DIR=$kdir TB_BINDS="$sdir:/stock" tb_progress "Debian kernel $STOCK_FLAVOUR: fetch + modules_prepare" \
                tb_chroot "$root" /usr/bin/env STOCK_FLAVOUR="$STOCK_FLAVOUR" STOCK_APT_SUITE="$STOCK_APT" \
                STOCK_SOURCE="$STOCK_SOURCE" bash /src/testbench/lib/stock-build.sh >&2
            touch "$sdir/.nvpeer-stock-ok"
        fi
    ) 8>"$sdir.build-lock"
    echo "$sdir"
}

# tb_stock_repo SDIR NAME: a copy of the repo's tracked and unignored files at SDIR/NAME (so the
# in-tree .ko files built for the bench kernel stay intact); prints its path. Kept between runs and
# updated in place: only files whose content changed are rewritten and files gone from the repo
# are removed (its list: .nvpeer-files), so kbuild rebuilds only what changed.
tb_stock_repo() {
    local dst="$1/$2" f
    mkdir -p "$dst"
    rm -rf "$dst.new"; mkdir -p "$dst.new"
    (cd "$REPO_DIR" && { git ls-files; git ls-files --others --exclude-standard; } | sort -u \
        | while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done >"$dst.new/.nvpeer-files"
        tar cf - -T "$dst.new/.nvpeer-files") | tar xf - -C "$dst.new"
    if [ -f "$dst/.nvpeer-files" ]; then
        comm -23 "$dst/.nvpeer-files" "$dst.new/.nvpeer-files" | while IFS= read -r f; do rm -f "$dst/$f"; done
    fi
    while IFS= read -r f; do
        cmp -s "$dst.new/$f" "$dst/$f" 2>/dev/null || { mkdir -p "$(dirname "$dst/$f")"; rm -f "$dst/$f"; cp "$dst.new/$f" "$dst/$f"; }
    done <"$dst.new/.nvpeer-files"
    mv "$dst.new/.nvpeer-files" "$dst/.nvpeer-files"
    rm -rf "$dst.new"
    echo "$dst"
}

# tb_stock_kbuild ROOT KDIR SDIR NAME DIR [SYMS]: builds the modules of DIR in the repo copy
# SDIR/NAME against the stock kernel, with the symbols of every emulator built before in the repo
# copy SDIR/SYMS (default NAME); NVPEER_COMPAT (scripts/compat-probe.sh) passes through; output on
# stdout/stderr, status of make.
tb_stock_kbuild() {
    local root=$1 kdir=$2 sdir=$3 name=$4 dir=$5 syms=${6:-$4} extra="" s
    for s in "$sdir/$syms"/testbench/emu/*/Module.symvers; do
        [ -f "$s" ] && extra+=" /stock/$syms/${s#"$sdir/$syms/"}"
    done
    TB_KERNEL_DIR=$kdir TB_BINDS="$sdir:/stock" tb_chroot "$root" make -C /stock/obj \
        CC="$(cat "$sdir/cc")" M="/stock/$name/$dir" NVPEER_BENCH=1 NVPEER_COMPAT="${NVPEER_COMPAT:-}" \
        KBUILD_EXTRA_SYMBOLS="$extra" modules
}

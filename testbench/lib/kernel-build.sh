#!/bin/bash
# Runs INSIDE the toolchain root: builds the bench kernel into /kernel (bind-mounted cache dir).
# /kernel/src: unpacked linux-source; /kernel/obj: build output; /kernel/modules: modules_install.
# Arguments: the config fragments merged over tinyconfig, in order (a later one's line for an
# option replaces an earlier one's): testbench/kernel.config, then a variant's
# (testbench/kernel-modversions.config), paths under /src.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: kernel-build.sh FRAGMENT..." >&2; exit 2; }
fragments=("$@")
cd /kernel
if [ ! -f src/Makefile ]; then
    rm -rf src; mkdir src
    tar xf /usr/src/linux-source-*.tar.xz -C src --strip-components=1
fi
mkdir -p obj
# The "MOK" (a machine owner key, as `update-secureboot-policy --new-key` makes on Ubuntu) that
# the kernel trusts besides its own build key: CONFIG_SYSTEM_TRUSTED_KEYS names its certificate
# (testbench/kernel.config). DKMS signs with it where a suite lays out a node that enrolled it.
if [ ! -s mok/mok.der ]; then
    rm -rf mok; mkdir mok
    openssl req -new -x509 -nodes -days 36500 -subj "/CN=nvpeer bench MOK/" -newkey rsa:2048 \
        -keyout mok/mok.key -addext "extendedKeyUsage=codeSigning" -out mok/mok.crt 2>/dev/null
    openssl x509 -in mok/mok.crt -outform DER -out mok/mok.der
fi
make -C src O=/kernel/obj LLVM=1 tinyconfig >/dev/null
src/scripts/kconfig/merge_config.sh -m -O /kernel/obj obj/.config "${fragments[@]}" >/dev/null
make -C src O=/kernel/obj LLVM=1 olddefconfig >/dev/null
# Every option of the fragments, as the last one that names it has it, must have survived: some
# drop out silently.
declare -A want=()
order=()
for f in "${fragments[@]}"; do
    while IFS= read -r line; do
        case "$line" in
            CONFIG_*=*) opt=${line%%=*} ;;
            "# CONFIG_"*" is not set") opt=${line#\# }; opt=${opt%% *} ;;
            *) continue ;;
        esac
        [ -n "${want[$opt]+set}" ] || order+=("$opt")
        want[$opt]=$line
    done <"$f"
done
missing=0
for opt in "${order[@]}"; do
    line=${want[$opt]}
    case "$line" in
        CONFIG_*) grep -qx "$line" obj/.config || { echo "kernel config: $line did not survive (got: $(grep "^$opt=" obj/.config || echo 'unset'))"; missing=1; } ;;
        *) grep -q "^$opt=" obj/.config && { echo "kernel config: $opt should be off"; missing=1; } ;;
    esac
done
[ "$missing" = 0 ] || exit 1
make -C src O=/kernel/obj LLVM=1 -j"$(( $(nproc) + 1 ))" bzImage modules
rm -rf modules
make -C src O=/kernel/obj LLVM=1 INSTALL_MOD_PATH=/kernel/modules modules_install >/dev/null
make -C src O=/kernel/obj LLVM=1 -s kernelrelease > /kernel/release

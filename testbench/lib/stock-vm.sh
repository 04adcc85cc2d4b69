#!/bin/bash
# Runs INSIDE the toolchain root, with the stock-kernel cache dir at /stock (after stock-build.sh):
# turns Debian's production kernel into a bench VM kernel, laid out like the bench kernel's build
# (/stock/vm/obj/arch/x86/boot/bzImage, release, modules/lib/modules/RELEASE), plus an initramfs
# that loads Debian's own 9p modules (Debian builds 9p as modules; the bench kernel has it built
# in), mounts the same read-only 9p root as the bench kernel's VM and hands over to /nvpeer-init.
# (The root is always cached loosely here: NVPEER_9P_CACHE applies to the bench kernel only.)
set -euo pipefail
flavour=$(cat /stock/release)
cd /stock
# The apt options stock-build.sh used (the kernel's own suite, where it is not the root's).
apt=()
eval "apt=($(cat /stock/apt-args 2>/dev/null))"
fetch() {
    (cd mdebs && apt-get "${apt[@]}" download -qq "linux-modules-$flavour" "linux-base-$flavour") 2>&1 \
        | grep -v "unsandboxed" || true
    [ -n "$(ls mdebs/linux-modules-*.deb 2>/dev/null)" ] && [ -n "$(ls mdebs/linux-base-*.deb 2>/dev/null)" ]
}
if [ ! -f modules-debs.ok ]; then
    rm -rf mdebs mx; mkdir -p mdebs mx
    # The package lists may be older than the root's last update: refresh them once if needed.
    fetch || { apt-get "${apt[@]}" update -qq && fetch; } \
        || { echo "stock-vm: cannot download linux-modules-$flavour and linux-base-$flavour" >&2; exit 1; }
    for d in mdebs/*.deb; do dpkg-deb -x "$d" mx; done
    touch modules-debs.ok
fi
m=mx/usr/lib/modules/$flavour
vm=/stock/vm
rm -rf "$vm/obj" "$vm/modules" "$vm/initrd" "$vm/initrd.gz"
mkdir -p "$vm/obj/arch/x86/boot" "$vm/modules/lib/modules/$flavour" "$vm/initrd/bin" "$vm/initrd/mods" \
    "$vm/initrd/proc" "$vm/initrd/sys" "$vm/initrd/dev" "$vm/initrd/newroot"
cp vmlinuz "$vm/obj/arch/x86/boot/bzImage"
echo "$flavour" >"$vm/release"
# The guest's depmod needs to know what is built in; Debian's other modules are not needed.
cp "$m/modules.builtin" "$m/modules.builtin.modinfo" "$m/modules.order" "$vm/modules/lib/modules/$flavour/"
# overlayfs: the package suite (55-deb) installs .debs into a writable overlay of the read-only root.
mkdir -p "$vm/modules/lib/modules/$flavour/kernel/fs/overlayfs"
xz -dc "$m/kernel/fs/overlayfs/overlay.ko.xz" >"$vm/modules/lib/modules/$flavour/kernel/fs/overlayfs/overlay.ko"
# The RDMA and network modules the suites load from Debian's own build (the bench kernel has them
# built in): rdma_rxe (soft-RoCE, for the harness and perftest suites), the verbs and RDMA-CM user
# interfaces (ib_uverbs, rdma_ucm: guest init loads them with rxe), veth (the namespace pairs of
# the harness), dummy (the doctor's rxe netdevs), and for 59-fleet's four nodes a bridge and the
# traffic control of its planted slow link (sch_prio, sch_tbf, cls_u32), with every module they
# depend on (modinfo's depends=, followed to the end).
add_mod() {
    local name=$1 f dst dep
    case " $added " in *" $name "*) return 0 ;; esac
    added+=" $name"
    grep -qE "/(${name}|${name//_/-})\.ko\$" "$m/modules.builtin" && return 0
    f=$(find "$m/kernel" \( -name "$name.ko.xz" -o -name "${name//_/-}.ko.xz" \) | head -n1)
    [ -n "$f" ] || { echo "stock-vm: module $name is not in linux-modules-$flavour" >&2; exit 1; }
    dst="$vm/modules/lib/modules/$flavour/${f#"$m/"}"
    dst=${dst%.xz}
    mkdir -p "$(dirname "$dst")"
    xz -dc "$f" >"$dst"
    for dep in $(modinfo -F depends "$dst" | tr ',' ' '); do add_mod "$dep"; done
}
added=""
for k in rdma_rxe ib_uverbs rdma_ucm veth dummy bridge sch_prio sch_tbf cls_u32; do add_mod "$k"; done
# The 9p client, in dependency order (depends=: netfs <- 9pnet <- 9pnet_virtio, 9p).
mods="fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p"
for k in $mods; do xz -dc "$m/kernel/$k.ko.xz" >"$vm/initrd/mods/${k##*/}.ko"; done
cp /bin/busybox "$vm/initrd/bin/busybox"
cat >"$vm/initrd/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
echo "nvpeer initramfs: loading 9p, mounting the root"
for k in $mods; do insmod /mods/\${k##*/}.ko || echo "nvpeer initramfs: insmod \${k##*/} failed"; done
if ! mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose /dev/root /newroot; then
    echo "nvpeer initramfs: cannot mount the 9p root"; poweroff -f
fi
umount /proc
exec switch_root /newroot /nvpeer-init
INIT
chmod +x "$vm/initrd/init"
(cd "$vm/initrd" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$vm/initrd.gz")

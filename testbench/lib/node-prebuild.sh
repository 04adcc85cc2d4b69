#!/bin/bash
# Runs INSIDE the toolchain root (tb chroot: the bench kernel at /kernel, the repo at /src, NVIDIA's
# source bound at /nvidia-src, an output directory at /out): README.md's `make dkms-install` on the
# Ubuntu 26.04 + DOCA-OFED node that 57-rehearsal-ubuntu lays out in its guest, natively, so that
# make check runs the rehearsal without compiling nvpeer under TCG (635 s in the debug guest on
# 2026-11-27; seconds here). The node is laid out as the suite lays it out (a writable overlay of
# the root; testbench/suites/node-root.sh.inc and the suite's ubuntu_setup): the bench kernel's
# modules with the core and provider emulators, signed with the kernel's build key, under
# updates/dkms; Ubuntu's os-release; the MOK in /var/lib/shim-signed/mok; OFED's peer_mem.h and
# NVIDIA's source under /usr/src with no Module.symvers; a checkout of what `make dkms-source` packs.
# The one difference from the admin's command: KDIR names the bench kernel (this root runs the
# host's kernel, which `uname -r` would name).
# Packs every file the install wrote (the overlay's upper layer, less what the layout put there)
# as /out/node-prebuilt.tar; the suite unpacks it into its node and goes on from there (the
# preflight's line, the signer, modprobe under enforcement, the failures). Then DKMS's status and
# `make dkms-uninstall` here, held to the suite's rule: nothing left behind.
set -euo pipefail
krel=$(cat /kernel/release)
hash=$(sed -n 's/^CONFIG_MODULE_SIG_HASH="\(.*\)"/\1/p' /kernel/obj/.config)
[ -n "$hash" ] || { echo "node-prebuild: the bench kernel has no module signing" >&2; exit 1; }
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
. /src/testbench/lib/native-node.sh.inc
# (the bench kernel's tree, which the guest sees as part of its root)
native_node_up /tmp/node /kernel
n=$N

# The layout (what 57-rehearsal-ubuntu's setup makes in the guest).
mkdir -p $R/lib/modules
cp -a "/kernel/modules/lib/modules/$krel" $R/lib/modules/
ln -sfn /kernel/obj "$R/lib/modules/$krel/build"
upd=$R/lib/modules/$krel/updates/dkms
mkdir -p "$upd"
for m in nvp2p peer_mem; do
    cp "/src/testbench/emu/$m/${m}_emu.ko" "$upd/"
    /kernel/obj/scripts/sign-file "$hash" /kernel/obj/certs/signing_key.pem /kernel/obj/certs/signing_key.x509 "$upd/${m}_emu.ko"
done
in_node depmod -a "$krel"
rm -f $R/etc/os-release
printf '%s\n' 'PRETTY_NAME="Ubuntu 26.04 LTS"' 'NAME="Ubuntu"' 'VERSION_ID="26.04"' \
    'VERSION="26.04 LTS (Resolute Raccoon)"' 'VERSION_CODENAME=resolute' 'ID=ubuntu' 'ID_LIKE=debian' >$R/etc/os-release
install -D -m 0600 /kernel/mok/mok.key $R/var/lib/shim-signed/mok/MOK.priv
install -m 0644 /kernel/mok/mok.der $R/var/lib/shim-signed/mok/MOK.der
install -D -m 0644 /src/testbench/emu/include/rdma/peer_mem.h $R/usr/src/ofa_kernel/default/include/rdma/peer_mem.h
mkdir -p $R/usr/src/nvidia-550.163.01
cp -a /nvidia-src/nvidia $R/usr/src/nvidia-550.163.01/
make -s -C /src dkms-source DKMS_SOURCE_TREE=$R/tmp
mv "$R/tmp/nvpeer-$ver" $R/tmp/nvpeer
(cd $n/upper && find . -mindepth 1 -not -type d -printf '%P\n' | sort) >$n/before.txt
. /src/testbench/lib/node-ledger.sh.inc
node_upper_entries $n/upper >$n/layout.txt

# README.md's command, in the checkout.
rc=0
in_node sh -c "cd /tmp/nvpeer && make dkms-install KDIR=/lib/modules/$krel/build" >$n/install.log 2>&1 || rc=$?
cat $n/install.log
if [ $rc != 0 ]; then
    tail -n 40 "$R/var/lib/dkms/nvpeer/$ver/build/make.log" 2>/dev/null || true
    echo "node-prebuild: make dkms-install failed" >&2
    exit 1
fi
grep -h "^nvpeer preflight: ok" "$R"/var/lib/dkms/nvpeer/"$ver"/*/*/log/make.log | head -n1
echo "node-prebuild: signer $(modinfo -F signer "$upd/nvidia-peermem.ko")"
# What the install wrote: the upper layer's new files and links (not depmod's indexes: the guest
# runs depmod; not whiteouts: the install deletes nothing of the layout).
(cd $n/upper && find . -mindepth 1 \( -type f -o -type l \) -printf '%P\n' | sort) >$n/after.txt
comm -13 $n/before.txt $n/after.txt | { grep -Ev "^(usr/)?lib/modules/[^/]*/modules\." || true; } >$n/wrote.txt
[ -s $n/wrote.txt ] || { echo "node-prebuild: make dkms-install wrote nothing" >&2; exit 1; }
tar -C $n/upper -cf /out/node-prebuilt.tar -T $n/wrote.txt
echo "node-prebuild: packed $(wc -l <$n/wrote.txt) files for $krel"

# DKMS's state of the install, and its removal (the suite's make-dkms-uninstall, which make check
# runs here only: neither `dkms status` nor `dkms remove --all` depends on the running kernel),
# held to the suite's rule: nothing left but the node's own ledger (node-ledger.sh.inc).
st=$(in_node dkms status -m nvpeer)
echo "$st" | grep -q "^nvpeer/$ver, $krel, [^:]*: installed" ||
    { echo "node-prebuild: dkms status after the install: ${st:-empty}, not installed for $krel" >&2; exit 1; }
echo "node-prebuild: dkms status: $st"
rc=0
in_node sh -c "cd /tmp/nvpeer && make dkms-uninstall" >$n/uninstall.log 2>&1 || rc=$?
[ $rc = 0 ] || { cat $n/uninstall.log; echo "node-prebuild: make dkms-uninstall failed" >&2; exit 1; }
st=$(in_node dkms status)
[ -z "$st" ] || { echo "node-prebuild: dkms status after make dkms-uninstall: $st" >&2; exit 1; }
! in_node modinfo -k "$krel" -n nvidia-peermem >/dev/null 2>&1 ||
    { echo "node-prebuild: nvidia-peermem still resolvable after make dkms-uninstall" >&2; exit 1; }
node_upper_entries $n/upper >$n/removed.txt
left=$(comm -13 $n/layout.txt $n/removed.txt)
[ -z "$left" ] || { echo "node-prebuild: left behind after make dkms-uninstall:" >&2; echo "$left" >&2; exit 1; }
echo "node-prebuild: make dkms-uninstall left nothing behind ($(wc -l <$n/layout.txt) entries before the install and after it); dkms status empty"
# (the node's mounts go with tb chroot's mount namespace)

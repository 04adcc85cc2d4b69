#!/bin/bash
# Runs INSIDE the toolchain root (tb chroot: the repo at /src, Debian's stock kernel's directory at
# /stock, NVIDIA's source at /nvidia-src, the .debs of `make deb` at /debs, an output directory at
# /out): 55-deb's `apt-get install` of nvpeer-dkms and nvpeer-tools, natively, on the node that
# 55-deb lays out in its guest (testbench/suites/node-root.sh.inc: a writable overlay of this same
# root, the stock kernel's modules less the host-built nvpeer, its build tree at
# /lib/modules/$krel/build, OFED's peer_mem.h and NVIDIA's source under /usr/src), so that make
# check runs 55-deb without compiling nvpeer under TCG (about 400 of the suite's 490 s on
# 2026-11-27; seconds here). make check-full installs in the guest.
# This root runs the host's kernel, not the guest's; the package's postinst (dh-dkms's
# common.postinst) builds for every kernel under /lib/modules that has a build tree all the same
# (Debian's dkms sets autoinstall_all_kernels in /etc/dkms/framework.conf.d), in the guest as here:
# the stock kernel alone, the one the guest runs.
# Packs every file the install wrote or changed (the overlay's upper layer, less what the layout
# put there and depmod's indexes) as /out/deb-prebuilt.tar; 55-deb unpacks it into its node and
# goes on from there (DKMS's state, modprobe, the doctor, apt-get remove and purge). The refusal
# without OFED (the postinst's one line) runs here too, after the packing, and in the guest in
# make check-full.
set -euo pipefail
krel=$(cat /stock/release)
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' /src/dkms.conf)
. /src/testbench/lib/native-node.sh.inc
# (the stock kernel's directory, which the guest binds at /stock, and its build tree's source at
# /kernel)
native_node_up /tmp/deb-node /stock /kernel
n=$N

# The layout (what node-root.sh.inc's node_setup makes in the guest).
mkdir -p $R/lib/modules
cp -a "/stock/vm/modules/lib/modules/$krel" $R/lib/modules/
rm -f "$R/lib/modules/$krel/extra/nvpeer.ko" "$R/lib/modules/$krel/extra/nvidia-peermem.ko"
ln -sfn /stock/obj "$R/lib/modules/$krel/build"
in_node depmod -a "$krel"
install -D -m 0644 /src/testbench/emu/include/rdma/peer_mem.h $R/usr/src/ofa_kernel/default/include/rdma/peer_mem.h
mkdir -p $R/usr/src/nvidia-550.163.01
cp -a /nvidia-src/nvidia $R/usr/src/nvidia-550.163.01/
# (the guest's own kernel is the only one with a build tree: nothing else may be built for)
others=$(cd $R/lib/modules && for k in *; do [ "$k" = "$krel" ] || [ ! -e "$k/build" ] || echo "$k"; done)
[ -z "$others" ] || { echo "deb-prebuild: other kernels with build trees in the node: $others" >&2; exit 1; }
(cd $n/upper && find . -mindepth 1 -not -type d -printf '%P\n' | sort) >$n/before.txt

# 55-deb's command.
cp /debs/nvpeer-dkms_"$ver"_all.deb /debs/nvpeer-tools_"$ver"_*.deb $R/tmp/
tools=$(cd $R/tmp && echo nvpeer-tools_"$ver"_*.deb)
rc=0
in_node apt-get install -y /tmp/nvpeer-dkms_"$ver"_all.deb "/tmp/$tools" >$n/install.log 2>&1 || rc=$?
cat $n/install.log
if [ $rc != 0 ]; then
    tail -n 40 "$R/var/lib/dkms/nvpeer/$ver/build/make.log" 2>/dev/null || true
    echo "deb-prebuild: apt-get install failed" >&2
    exit 1
fi
tr -d "\r" <$n/install.log | grep -qx "Building for $krel" || { echo "deb-prebuild: the postinst did not build for $krel alone" >&2; exit 1; }
grep -h "^nvpeer preflight: ok" "$R"/var/lib/dkms/nvpeer/"$ver"/*/*/log/make.log | head -n1
in_node dkms status -m nvpeer | grep -q "^nvpeer/$ver, $krel, [^:]*: installed" ||
    { echo "deb-prebuild: dkms status: $(in_node dkms status -m nvpeer)" >&2; exit 1; }
echo "deb-prebuild: dkms status: $(in_node dkms status -m nvpeer)"
# What the install wrote: the upper layer's files and links that are new or changed (dpkg's and
# apt's records included: the guest's remove and purge need them), less depmod's indexes (the
# guest runs depmod) and apt's package cache (50 MB that apt rebuilds).
(cd $n/upper && find . -mindepth 1 \( -type f -o -type l \) -printf '%P\n' | sort) >$n/after.txt
comm -13 $n/before.txt $n/after.txt | { grep -Ev "^((usr/)?lib/modules/[^/]*/modules\.|var/cache/apt/)" || true; } >$n/wrote.txt
grep -q "/updates/dkms/nvidia-peermem.ko" $n/wrote.txt || { echo "deb-prebuild: no nvidia-peermem.ko under updates/dkms" >&2; exit 1; }
tar -C $n/upper -cf /out/deb-prebuilt.tar -T $n/wrote.txt
echo "deb-prebuild: packed $(wc -l <$n/wrote.txt) files for $krel"

# 55-deb's last case, here in make check (in the guest it took 140 s under TCG): on a node without
# OFED the postinst's DKMS build stops in the preflight, apt fails, and its output ends with the
# preflight's one line naming the fix; a purge then leaves the node as it was.
in_node apt-get purge -y nvpeer-dkms nvpeer-tools >$n/purge.log 2>&1 || { cat $n/purge.log; echo "deb-prebuild: purge failed" >&2; exit 1; }
mv $R/usr/src/ofa_kernel $n/ofa_kernel.away
rc=0
in_node apt-get install -y /tmp/nvpeer-dkms_"$ver"_all.deb >$n/refused.log 2>&1 || rc=$?
mv $n/ofa_kernel.away $R/usr/src/ofa_kernel
[ $rc != 0 ] || { cat $n/refused.log; echo "deb-prebuild: apt-get install succeeded without OFED" >&2; exit 1; }
lines=$(grep '^nvpeer preflight: ' $n/refused.log || true)
[ "$(echo "$lines" | grep -c .)" = 1 ] && echo "$lines" | grep -q "no OFED peer-memory API.*OFED_DIR=" ||
    { tail -n 15 $n/refused.log; echo "deb-prebuild: want one preflight line naming OFED_DIR in apt's output" >&2; exit 1; }
in_node apt-get purge -y nvpeer-dkms >$n/purge2.log 2>&1 || { cat $n/purge2.log; echo "deb-prebuild: purge after the refusal failed" >&2; exit 1; }
[ -z "$(in_node dkms status -m nvpeer)" ] || { echo "deb-prebuild: dkms still lists nvpeer after the refusal's purge" >&2; exit 1; }
echo "deb-prebuild: refused without OFED: $lines"
# (the node's mounts go with tb chroot's mount namespace)

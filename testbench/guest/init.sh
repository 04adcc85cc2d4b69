#!/bin/bash
# Guest side of the bench VM: prepares the system, runs the suites listed in /bench/suites.txt,
# collects dmesg and kmemleak, powers off. Started by /nvpeer-init (written by testbench/vm).
set -u
# (the sign of life testbench/vm's start watchdog waits for)
echo "nvpeer-bench: guest init on $(uname -r)"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm 2>/dev/null
mount -t devpts devpts /dev/pts 2>/dev/null
# devtmpfs has no /dev/fd family; bash process substitution needs it.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for i in 0:stdin 1:stdout 2:stderr; do [ -e "/dev/${i#*:}" ] || ln -s "/proc/self/fd/${i%%:*}" "/dev/${i#*:}"; done
mount -t debugfs debugfs /sys/kernel/debug
for d in /tmp /run /var/tmp /var/lib/dkms /lib/modules /root /var/log /dev/shm; do mount -t tmpfs tmpfs "$d" 2>/dev/null; done
mkdir -p /run/netns
# The CLI runs hundreds of times: from tmpfs it starts in a fraction of the time it takes to page
# its 5 MB in over the uncached /bench share each time.
if [ -x /bench/bin/nvpeer ]; then
    mkdir -p /run/nvpeer-bin && cp /bench/bin/nvpeer /run/nvpeer-bin/
    export NVPEER=/run/nvpeer-bin/nvpeer PATH=/run/nvpeer-bin:$PATH
fi
ip link set lo up 2>/dev/null
hostname nvpeer-bench 2>/dev/null
export HOME=/root TERM=dumb LANG=C.UTF-8

krel=$(uname -r)
cp -a "/kernel/modules/lib/modules/$krel" /lib/modules/ 2>/dev/null
mkdir -p "/lib/modules/$krel/extra"
cp /bench/modules/*.ko "/lib/modules/$krel/extra/" 2>/dev/null
depmod -a
# Debian's kernel builds the RDMA stack as modules (the bench kernel has it built in). On a node,
# rdma-core's udev rules load the verbs and RDMA-CM user interfaces when a device appears; this
# guest has no udev, so modprobe loads them with rxe.
if [ -d "/lib/modules/$krel/kernel/drivers/infiniband" ]; then
    mkdir -p /run/modprobe.d
    echo "softdep rdma_rxe post: ib_uverbs rdma_ucm" >/run/modprobe.d/nvpeer-bench-rdma.conf
fi
mkdir -p /bench/results
echo "nvpeer-bench: guest ready, kernel $krel" >/dev/kmsg

# Mark everything the boot itself leaked as already seen: only our suites' leaks count.
echo clear > /sys/kernel/debug/kmemleak 2>/dev/null

# A guest of Debian's kernels boots with one vCPU online (testbench/vm: maxcpus=1); a suite that
# races threads on two CPUs says "# bench: cpus 2" and gets the others online while it runs. Two
# guests with two vCPUs each on the 2-core machine ran about 2.4x slower each than alone (likely a vCPU
# waiting on the other's IPI while the host runs the other guest): one vCPU each, they run as fast
# as alone. (A guest booted with every vCPU online, the debug kernel's, keeps them.)
# guest_cpus SUITE ("all": every CPU, for the shell).
guest_cpus() {
    local want=0 c
    grep -qw 'maxcpus=1' /proc/cmdline || return 0
    if [ "$1" = all ] || grep -q '^# bench: cpus 2$' "/src/testbench/suites/$1.sh"; then want=1; fi
    for c in /sys/devices/system/cpu/cpu[1-9]*/online; do
        [ -e "$c" ] || continue
        [ "$(cat "$c")" = "$want" ] || echo "$want" >"$c" ||
            echo "nvpeer-bench: cannot set ${c%/online} online=$want" >/dev/kmsg
    done
}

if [ "${NVPEER_MODE:-run}" = shell ]; then
    guest_cpus all
    echo "nvpeer bench shell: repo at /src, run dir at /bench, nvpeer CLI at $NVPEER (on PATH). 'poweroff -f' or Ctrl-a x to leave."
    setsid bash -c 'exec bash -i </dev/ttyS0 >/dev/ttyS0 2>&1'
else
    while read -r suite; do
        [ -n "$suite" ] || continue
        guest_cpus "$suite"
        echo "=== suite $suite: start $(date +%T), CPUs online $(cat /sys/devices/system/cpu/online)"
        echo "nvpeer-bench: suite $suite start" >/dev/kmsg
        start=$(date +%s)
        TB_SUITE=$suite timeout "${NVPEER_SUITE_TIMEOUT:-1500}" bash -c \
            'source /src/testbench/guest/lib.sh; cd /tmp; source "/src/testbench/suites/$TB_SUITE.sh"' \
            2>&1 | if [ "${NVPEER_SHOW:-0}" = 1 ]; then tee -a "/bench/results/$suite.log"; else cat >>"/bench/results/$suite.log"; fi
        rc=${PIPESTATUS[0]}
        if [ $rc = 124 ]; then
            TB_SUITE=$suite bash -c 'source /src/testbench/guest/lib.sh; tb_result suite-timeout fail "suite killed after ${NVPEER_SUITE_TIMEOUT:-1500} s"'
        elif [ $rc != 0 ]; then
            TB_SUITE=$suite bash -c "source /src/testbench/guest/lib.sh; tb_result suite-exit fail 'suite script exited with status $rc'"
        fi
        echo "nvpeer-bench: suite $suite end rc=$rc" >/dev/kmsg
        echo "=== suite $suite: end rc=$rc after $(( $(date +%s) - start )) s"
        echo "suite[$suite] $(( $(date +%s) - start ))" >>/bench/results/timings.txt
        [ "${NVPEER_SHOW:-0}" = 1 ] || tail -n 5 "/bench/results/$suite.log" | sed 's/^/    /'
    done < /bench/suites.txt
fi

# Leak scan after everything was unloaded by the suites (two scans: objects must age first).
if [ -w /sys/kernel/debug/kmemleak ]; then
    echo scan > /sys/kernel/debug/kmemleak; sleep 6
    echo scan > /sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak > /bench/results/kmemleak.txt
fi
dmesg > /bench/results/dmesg.txt
echo "nvpeer-bench: done" > /bench/results/done
sync
echo o > /proc/sysrq-trigger
sleep 10

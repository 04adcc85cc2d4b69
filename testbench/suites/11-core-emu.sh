# Peer-memory core emulator (peer_mem_emu.ko): load, exported API, registration validation
# (mandatory ops, name collision, extended-client detection, *inv handling), the
# /sys/kernel/mm/memory_peers layout, host-memory registrations through /dev/peer_mem_emu, fd
# teardown, the MR path per OFED model with a memory-claiming self-test client (register, trim,
# invalidate, dereg, sysfs counters), and the client-struct modification check. Clients come from
# testbench/emu/peer_mem/selftest (pme_selftest.ko, driven by module parameters).
# bench: check-kernel stock
# bench: budget stock 40 40
# bench: budget-full - 145 145

PMECTL="python3 -S /src/testbench/emu/peer_mem/selftest/pmectl.py"
MP=/sys/kernel/mm/memory_peers
ST_RESULT=/sys/module/pme_selftest/parameters/result

# PME_CL_* flags of peer_mem_emu_ioctl.h
CL_INV=1; CL_EX=2; CL_UNMAPS=4; CL_49_HOOKS=16; CL_SYSFS=32

# kv VAR OUT KEY: VAR = value of KEY in pmectl's KEY=VALUE output OUT (bash only: every fork
# costs a few hundred ms in the TCG+KASAN guest).
kv() {
    local -n _kv=$1
    local l
    _kv=""
    while IFS= read -r l; do
        [[ $l == "$3="* ]] && { _kv=${l#*=}; return 0; }
    done <<<"$2"
}
# jget KEY...: value of KEY (parts joined with '.') in pmectl's KEY=VALUE output on stdin
jget() { local IFS=. v; kv v "$(cat)" "$*"; printf '%s\n' "$v"; }
# stat NAME: a global counter from debugfs (no Python start-up: the TCG guest is slow)
dstat() {
    local n v
    while read -r n v; do [ "$n" = "$1" ] && { echo "$v"; return 0; }; done </sys/kernel/debug/peer_mem_emu/stats
}

# st_load CLIENT_SPEC...: load the selftest client with these specs, print its result line.
st_load() {
    local IFS=,
    rmmod pme_selftest 2>/dev/null   # left loaded by a failed case
    modprobe pme_selftest "clients=$*" || return 1
    cat "$ST_RESULT"
}
st_unload() { rmmod pme_selftest; }

expect_eq() { # NAME GOT WANT
    if [ "$2" != "$3" ]; then echo "$1: got '$2', want '$3'"; return 1; fi
    echo "$1 = $2"
}

# The default model: DOCA-OFED 3.x on this (7.x) kernel. Its peer_mem.c builds the sysfs code only
# where the kernel exports mm_kobj, which no kernel since 6.5 does: no memory_peers directory
# ever, and no name check (a second "nv_mem" is accepted; the first registered serves).
doca3_default() {
    modprobe peer_mem_emu || return 1
    dmesg | grep -q 'peer_mem_emu: loaded, model doca3' || { echo "default model is not doca3"; rmmod peer_mem_emu; return 1; }
    local r cl rc=0
    expect_eq model "$($PMECTL abi | jget model)" 5 || rc=1
    r=$(st_load nv_mem:inv:ex:ver=580.65.06 nv_mem:ver=0.1.0) || rc=1
    expect_eq "duplicate name accepted" "$r" "nv_mem=ok/inv-set;nv_mem=ok/inv-none;" || rc=1
    [ ! -e $MP ] || { echo "$MP exists in the doca3 model"; ls $MP; rc=1; }
    cl=$($PMECTL clients)
    expect_eq "client0 flags" "$(( $(echo "$cl" | jget 0 flags) & CL_SYSFS ))" 0 || rc=1
    st_unload || rc=1
    rmmod peer_mem_emu || rc=1
    return $rc
}
tb_case doca3-default doca3_default

# The cases below check the memory_peers layout, which cores before 24.04 create: model 5.5.
core_load() {
    modprobe peer_mem_emu model=5.5 || return 1
    [ -c /dev/peer_mem_emu ] || { echo "no /dev/peer_mem_emu"; return 1; }
    [ -r /sys/kernel/debug/peer_mem_emu/violations ] || { echo "no debugfs violations"; return 1; }
    dmesg | grep -q 'peer_mem_emu: loaded, model 5.5' || { echo "no load message"; return 1; }
    local s
    for s in ib_register_peer_memory_client ib_unregister_peer_memory_client; do
        # plain EXPORT_SYMBOL, as in MLNX_OFED
        grep -qE "\s__ksymtab_$s\s+\[peer_mem_emu\]" /proc/kallsyms ||
            grep -qE "\s$s\s+\[peer_mem_emu\]" /proc/kallsyms || { echo "missing $s"; return 1; }
    done
    local a; a=$($PMECTL abi) || return 1
    expect_eq abi "$(echo "$a" | jget abi)" 1 || return 1
    expect_eq model "$(echo "$a" | jget model)" 4 || return 1
    # No client yet: no memory_peers directory.
    [ ! -e $MP ] || { echo "$MP exists without clients"; return 1; }
}
tb_case load core_load

# Two clients as nvidia-peermem registers them with persistent_api_support=0.
sysfs_layout() {
    local r f
    r=$(st_load nv_mem:inv:ex:ver=580.65.06 nv_mem_nc:ver=580.65.06) || return 1
    expect_eq result "$r" "nv_mem=ok/inv-set;nv_mem_nc=ok/inv-none;" || return 1
    for c in nv_mem nv_mem_nc; do
        for f in version num_alloc_mrs num_dealloc_mrs num_reg_pages num_dereg_pages \
                 num_reg_bytes num_dereg_bytes num_free_callbacks; do
            [ -r $MP/$c/$f ] || { echo "missing $MP/$c/$f"; return 1; }
            [ "$(stat -c %a $MP/$c/$f)" = 444 ] || { echo "$MP/$c/$f not 0444"; return 1; }
        done
        expect_eq "$c/version" "$(cat $MP/$c/version)" 580.65.06 || return 1
        for f in num_alloc_mrs num_reg_bytes num_free_callbacks; do
            expect_eq "$c/$f" "$(cat $MP/$c/$f)" 0 || return 1
        done
    done
    expect_eq "dir count" "$(ls $MP | wc -l)" 2 || return 1
    # registration order and what the core detected
    local cl; cl=$($PMECTL clients)
    expect_eq "client0" "$(echo "$cl" | jget 0 name)" nv_mem || return 1
    expect_eq "client1" "$(echo "$cl" | jget 1 name)" nv_mem_nc || return 1
    # an ex struct read through the 4.9 layout has non-NULL private-data hooks (ex_size, flags)
    expect_eq "client0 flags" "$(echo "$cl" | jget 0 flags)" $((CL_INV | CL_EX | CL_UNMAPS | CL_49_HOOKS | CL_SYSFS)) || return 1
    expect_eq "client1 flags" "$(echo "$cl" | jget 1 flags)" $CL_SYSFS || return 1
    expect_eq live_clients "$(dstat live_clients)" 2 || return 1
    st_unload || return 1
    [ ! -e $MP ] || { echo "$MP still there after the last client left"; return 1; }
    expect_eq live_clients "$(dstat live_clients)" 0
}
tb_case sysfs-layout sysfs_layout

missing_ops() {
    local op r before after
    before=$(dstat rejected_clients)
    for op in acquire get_pages put_pages dma_map dma_unmap; do
        r=$(st_load "c_$op:inv:missing=$op") || return 1
        expect_eq "missing $op" "$r" "c_$op=null/inv-untouched;" || return 1
        dmesg | grep -q "Peer memory c_$op is missing mandatory function $op" ||
            { echo "no message for $op"; return 1; }
        [ ! -e $MP/c_$op ] || { echo "sysfs dir for rejected client"; return 1; }
        st_unload || return 1
    done
    after=$(dstat rejected_clients)
    expect_eq rejected "$((after - before))" 5 || return 1
    # optional in 5.x: release; get_page_size is not checked by 5.x cores
    r=$(st_load c_rel:inv:missing=release c_gps:missing=get_page_size) || return 1
    expect_eq "optional ops (5.5)" "$r" "c_rel=ok/inv-set;c_gps=ok/inv-none;" || return 1
    st_unload || return 1
    # the 4.9 core also demands get_page_size
    $PMECTL model 1 || return 1
    r=$(st_load c_gps49:missing=get_page_size); local rc=$?
    $PMECTL model 4 || return 1
    [ $rc = 0 ] || return 1
    expect_eq "get_page_size (4.9)" "$r" "c_gps49=null/inv-none;" || return 1
    st_unload
}
tb_case missing-ops missing_ops

name_collision() {
    local r
    r=$(st_load dup:inv dup:inv other) || return 1
    expect_eq collision "$r" "dup=ok/inv-set;dup=null/inv-untouched;other=ok/inv-none;" || return 1
    expect_eq "dir count" "$(ls $MP | wc -l)" 2 || return 1
    st_unload || return 1
    # With sysfs off (OFED >= 24.04 on a kernel without exported mm_kobj) names may repeat.
    $PMECTL cfgflag 2 0 || return 1     # PME_CFG_SYSFS off
    r=$(st_load dup:inv dup:inv); local rc=$?
    $PMECTL cfgflag 2 1 || return 1
    [ $rc = 0 ] || return 1
    expect_eq "no sysfs" "$r" "dup=ok/inv-set;dup=ok/inv-set;" || return 1
    [ ! -e $MP ] || { echo "$MP exists with sysfs off"; return 1; }
    st_unload
}
tb_case name-collision name_collision

ex_detection() {
    local r cl
    r=$(st_load e_unmaps:inv:ex e_flags0:inv:ex0 e_small:inv:exsmall e_nob15:inv:nobyte15) || return 1
    expect_eq result "$r" "e_unmaps=ok/inv-set;e_flags0=ok/inv-set;e_small=ok/inv-set;e_nob15=ok/inv-set;" || return 1
    cl=$($PMECTL clients)
    expect_eq "ex+UNMAPS" "$(echo "$cl" | jget 0 flags)" $((CL_INV | CL_EX | CL_UNMAPS | CL_49_HOOKS | CL_SYSFS)) || return 1
    expect_eq "ex, flags 0" "$(echo "$cl" | jget 1 flags)" $((CL_INV | CL_EX | CL_49_HOOKS | CL_SYSFS)) || return 1
    # ex_size 144 < offsetofend(flags) = 148, and byte 15 zero: plain clients
    expect_eq "ex_size 144" "$(( $(echo "$cl" | jget 2 flags) & (CL_EX | CL_UNMAPS) ))" 0 || return 1
    expect_eq "byte 15 zero" "$(( $(echo "$cl" | jget 3 flags) & (CL_EX | CL_UNMAPS | CL_49_HOOKS) ))" 0 || return 1
    st_unload
}
tb_case ex-detection ex_detection

# Host memory is pinned by GUP first and never offered to peer clients.
host_mr() {
    local r before
    st_load nv_mem:inv:ex nv_mem_nc >/dev/null || return 1
    before=$(dstat acquires)
    r=$($PMECTL reghost 200000 3) || { st_unload; return 1; }
    echo "$r"
    st_unload || return 1
    expect_eq state "$(echo "$r" | jget state)" 1 || return 1           # PME_ST_HOST
    expect_eq peer-flag "$(( $(echo "$r" | jget query flags) & 1 ))" 0 || return 1
    expect_eq live_during "$(echo "$r" | jget stats_live)" 1 || return 1
    expect_eq second_dereg "$(echo "$r" | jget second_dereg)" 2 || return 1   # ENOENT
    expect_eq acquires "$(dstat acquires)" "$before" || return 1
    expect_eq live_mrs "$(dstat live_mrs)" 0
}
tb_case host-mr-not-claimed host_mr

# GUP fails and no client claims the range: the GUP error comes back; without ALLOW too.
unclaimed() {
    st_load nv_mem:inv:ex >/dev/null || return 1
    local a; a=$($PMECTL regbad); st_unload || return 1
    expect_eq "ALLOW|INVAL_SUPP" "$(echo "$a" | jget allow errno)" 14 || return 1
    expect_eq "no ALLOW" "$(echo "$a" | jget noallow errno)" 14 || return 1
    expect_eq regs_failed_min "$(( $(dstat regs_failed) >= 2 ))" 1
}
tb_case unclaimed-range unclaimed

# Closing the fd (process exit) deregisters what it still owns.
fd_teardown() {
    local r; r=$($PMECTL exitleak) || return 1
    expect_eq live_during "$(echo "$r" | jget stats_live)" 1 || return 1
    expect_eq live_after_exit "$(dstat live_mrs)" 0
}
tb_case fd-teardown fd_teardown

bad_input() {
    python3 -S - <<'EOF'
import errno, os, struct, sys
sys.path.insert(0, "/src/testbench/emu/peer_mem/selftest")
import pmectl as p
fd = os.open(p.DEV, os.O_RDWR)
def expect(fn, want, what):
    try:
        fn()
    except OSError as e:
        if e.errno != want:
            sys.exit(f"{what}: errno {e.errno}, want {want}")
        print(f"{what}: errno {e.errno} ok"); return
    sys.exit(f"{what}: accepted")
expect(lambda: p.register(fd, 0x1000, 0, 3), errno.EINVAL, "zero length")
expect(lambda: p.register(fd, 2**64 - 4096, 8192, 3), errno.EINVAL, "wrapping range")
expect(lambda: p.register(fd, 0x1000, 4096, 3, access=2), errno.EOPNOTSUPP, "ON_DEMAND")
expect(lambda: p.register(fd, 0x1000, 4096, 0x80), errno.EINVAL, "unknown peer flag")
expect(lambda: p.register(fd, 0x1000, 4096, 3, device=9), errno.EINVAL, "unknown device")
expect(lambda: p._call(fd, p.IOC_DEREGISTER, p.F_OP, 12345, 0), errno.ENOENT, "dereg unknown")
expect(lambda: p._call(fd, p.IOC_QUERY, p.F_QUERY, 777, *([0] * 12)), errno.ENOENT, "query unknown")
expect(lambda: p._call(fd, p.IOC_ACTIVATE, p.F_OP, 0, 0), errno.ENOENT, "activate none held")
expect(lambda: p._call(fd, p.IOC_SET_CONFIG, p.F_CFG, 9, 0, 0, 0), errno.EINVAL, "bad model")
expect(lambda: p._call(fd, p.IOC_SET_FAULT, p.F_FAULT, 99, 0, 1, 1), errno.EINVAL, "bad fault point")
expect(lambda: p._call(fd, p.IOC_SET_DELAY, p.F_DELAY, 99, 1), errno.EINVAL, "bad delay point")
import fcntl
expect(lambda: fcntl.ioctl(fd, p._ioc(3, 0x7f, 8), bytearray(8)), errno.ENOTTY, "unknown ioctl")
EOF
}
tb_case bad-input bad_input

# ENOMEM at the registration allocation points of the core.
fault_points() {
    local r
    $PMECTL fault 3 1 1 >/dev/null || return 1      # PME_FP_CLIENT_ALLOC, next hit
    r=$(st_load f_alloc:inv) || return 1
    expect_eq client-alloc "$r" "f_alloc=null/inv-untouched;" || return 1
    st_unload || return 1
    $PMECTL fault 4 1 1 >/dev/null || return 1      # PME_FP_SYSFS
    r=$(st_load f_sysfs:inv) || return 1
    expect_eq sysfs "$r" "f_sysfs=null/inv-untouched;" || return 1
    st_unload || return 1
    [ ! -e $MP ] || { echo "$MP left behind"; return 1; }
    $PMECTL fault 0 1 1 >/dev/null || return 1      # PME_FP_UMEM_ALLOC on the next REGISTER
    r=$($PMECTL reghost 4096 3 2>&1) && { echo "register survived the fault: $r"; return 1; }
    echo "$r" | grep -q "Errno 12" || { echo "want ENOMEM: $r"; return 1; }
    expect_eq fired "$(dstat "fault_fired[0]")" 1 || return 1
    expect_eq live_mrs "$(dstat live_mrs)" 0
}
tb_case fault-points fault_points

# ---- the MR path, with pme_selftest's memory-claiming client (no NVIDIA emulator needed) ----
# 256 KiB of "device memory" (64 KiB aligned), MR at offset 0x11100, length 0x20000: three 64 KiB
# granules, trimmed to the 4 KiB aligned range by the 5.5+ core.
MR_ARGS="262144 0x11100 0x20000"
QF_PEER=1; QF_ACT=2; QF_REVOKED=4; QF_TRIMMED=16; QF_INV=64; QF_SG_EMPTY=128

# want OUT KEY VALUE: assert pmectl output line KEY=VALUE
want() { local v; kv v "$1" "$2"; expect_eq "$2" "$v" "$3"; }

set_model() { $PMECTL model "$1"; }

mr_unmaps() {
    st_load mem_c:inv:ex:mem >/dev/null || return 1
    local o; o=$($PMECTL mr $MR_ARGS 3 0 reset q sysfs:mem_c inv q sysfs:mem_c dereg sysfs:mem_c stats)
    st_unload || return 1
    echo "$o" | grep -q '^reg.handle=' || { echo "$o"; return 1; }
    want "$o" base_mod_64k 0 && want "$o" reg.state 2 && want "$o" reg.core_context 0 &&
    want "$o" q1.flags $((QF_PEER | QF_ACT | QF_TRIMMED | QF_INV)) &&
    want "$o" q1.nmap 3 && want "$o" q1.page_size 65536 && want "$o" q1.dma_stopped_ns 0 &&
    want "$o" s2.num_alloc_mrs 1 && want "$o" s2.num_reg_pages 3 &&
    want "$o" s2.num_reg_bytes 131072 && want "$o" s2.num_dealloc_mrs 0 &&
    # invalidate under INVALIDATE_UNMAPS: revoked, INVALIDATED, the core does not unmap, yet
    # restores the trim and zeroes the sg header (ib_unmap_peer_client to INVALIDATED)
    want "$o" q4.state 4 && want "$o" q4.invalidations 1 &&
    want "$o" q4.flags $((QF_PEER | QF_ACT | QF_REVOKED | QF_INV | QF_SG_EMPTY)) &&
    want "$o" s5.num_free_callbacks 1 && want "$o" s5.num_dealloc_mrs 1 &&
    want "$o" s5.num_dereg_bytes 0 &&
    # dereg of an INVALIDATED MR calls neither dma_unmap nor put_pages again
    want "$o" s7.num_dealloc_mrs 1 && want "$o" s7.num_dereg_pages 0 &&
    want "$o" t8.violations 0 && want "$o" t8.live_mrs 0 && want "$o" t8.releases 1 || return 1
    [ "$(echo "$o" | jget q4.dma_stopped_ns)" -gt 0 ] || { echo "no DMA-stopped time"; return 1; }
}
tb_case mr-5.5-unmaps mr_unmaps

mr_legacy() {
    st_load mem_l:inv:mem >/dev/null || return 1
    local o; o=$($PMECTL mr $MR_ARGS 3 0 reset inv q sysfs:mem_l dereg sysfs:mem_l stats)
    st_unload || return 1
    echo "$o" | grep -q '^reg.handle=' || { echo "$o"; return 1; }
    # legacy client: invalidate unmaps on the calling thread (restored table), UNMAPPED
    want "$o" q2.state 3 && want "$o" q2.flags $((QF_PEER | QF_ACT | QF_REVOKED | QF_INV | QF_SG_EMPTY)) &&
    want "$o" s3.num_dealloc_mrs 1 && want "$o" s3.num_dereg_bytes 131072 &&
    want "$o" s3.num_dereg_pages 0 && want "$o" s3.num_free_callbacks 1 &&
    want "$o" s5.num_dealloc_mrs 1 && want "$o" t6.violations 0 && want "$o" t6.live_mrs 0
}
tb_case mr-5.5-legacy mr_legacy

mr_persistent() {
    st_load mem_i:inv:ex:mem mem_p:mem >/dev/null || return 1
    local o; o=$($PMECTL mr $MR_ARGS 1 0 reset q dereg sysfs:mem_p stats)
    local nd; nd=$($PMECTL mr $MR_ARGS 1 1 q dereg)   # non-PCI dma_device (H6 option)
    st_unload || return 1
    echo "$o" | grep -q '^reg.handle=' || { echo "$o"; return 1; }
    # without INVAL_SUPP the invalidating client is skipped; the persistent one claims it
    want "$o" reg.client_index 1 && want "$o" reg.core_context 4294967295 &&
    want "$o" q1.flags $((QF_PEER | QF_TRIMMED)) &&
    want "$o" s3.num_alloc_mrs 1 && want "$o" s3.num_dealloc_mrs 1 &&
    want "$o" s3.num_dereg_bytes 131072 && want "$o" t4.violations 0 &&
    want "$nd" reg.state 2 && want "$nd" q0.nmap 3
}
tb_case mr-persistent mr_persistent

mr_model_49() {
    set_model 1 || return 1
    local o rc=0
    if st_load mem_49:inv:mem >/dev/null; then
        o=$($PMECTL mr $MR_ARGS 3 0 reset q inv q sysfs:mem_49 dereg stats) || rc=1
        st_unload || rc=1
    else
        rc=1
    fi
    set_model 4 || return 1
    [ $rc = 0 ] && echo "$o" | grep -q '^reg.handle=' || { echo "$o"; return 1; }
    # tickets from 1, page_shift before dma_map (no trimming), aligned byte counts
    want "$o" reg.core_context 1 && want "$o" q1.flags $((QF_PEER | QF_ACT | QF_INV)) &&
    want "$o" q1.page_size 65536 &&
    # invalidate deregisters the whole MR (dma_unmap, put_pages, release) on the caller
    want "$o" q3.state 5 && want "$o" s4.num_dealloc_mrs 1 &&
    want "$o" s4.num_reg_bytes 196608 && want "$o" s4.num_dereg_bytes 196608 &&
    want "$o" t6.releases 1 && want "$o" t6.violations 0 && want "$o" t6.live_mrs 0
}
tb_case mr-model-4.9 mr_model_49

mr_model_51() {
    set_model 2 || return 1
    local o rc=0
    if st_load mem_51:inv:ex:mem >/dev/null; then
        o=$($PMECTL mr $MR_ARGS 3 0 reset q inv q dereg stats) || rc=1
        st_unload || rc=1
    else
        rc=1
    fi
    set_model 4 || return 1
    [ $rc = 0 ] && echo "$o" | grep -q '^reg.handle=' || { echo "$o"; return 1; }
    # 5.1-5.4 ignore INVALIDATE_UNMAPS and do not trim
    want "$o" q1.flags $((QF_PEER | QF_ACT | QF_INV)) && want "$o" q3.state 3 &&
    want "$o" t5.violations 0 && want "$o" t5.live_mrs 0
}
tb_case mr-model-5.1 mr_model_51

# A client that changes its struct while registered is reported, by rule name.
tb_expect_begin 'peer_mem_emu: VIOLATION client-struct-modified'
modified() {
    local before; before=$(dstat violations)
    st_load m_client:inv:modify >/dev/null || return 1
    st_unload || return 1
    expect_eq violations "$(( $(dstat violations) - before ))" 1 || return 1
    dmesg | grep -q 'peer_mem_emu: VIOLATION client-struct-modified: client m_client' ||
        { echo "no violation line"; return 1; }
    grep -q 'client-struct-modified' /sys/kernel/debug/peer_mem_emu/violations ||
        { echo "not in debugfs"; return 1; }
    $PMECTL violations | grep -q 'm_client changed' || { echo "not in ioctl records"; return 1; }
    $PMECTL reset >/dev/null
}
tb_case client-modified modified
tb_expect_end

core_unload() {
    expect_eq violations "$(dstat violations)" 0 || return 1
    rmmod peer_mem_emu || return 1
    [ ! -e /dev/peer_mem_emu ] || { echo "device still present"; return 1; }
    dmesg | grep -q 'peer_mem_emu: unloaded, 0 violations' || { echo "no clean unload message"; return 1; }
}
tb_case unload core_unload

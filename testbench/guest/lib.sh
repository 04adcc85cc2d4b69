# Helpers for bench suites. Sourced by the guest init before each suite; runs inside the VM.
# shellcheck shell=bash
#
# A suite is testbench/suites/<name>.sh. It calls tb_case / tb_result; each call appends one JSON line
#   {"suite":..., "case":..., "status":"pass|fail|skip", "duration":seconds, "details":...}
# to $TB_RESULTS. Paths in the guest:
#   /src      the repository (read-only)          /bench     this run's writable directory
#   /kernel   the bench kernel's build tree       $NVPEER    the nvpeer CLI (host-built, release)
# Every .ko built in the repo is installed in /lib/modules/$(uname -r)/extra and depmod has run,
# so `modprobe nvp2p_emu` etc. work.
#
# In the TCG+KASAN+lockdep guest every fork+exec costs a few hundred ms, so these helpers use bash
# builtins only (no date, mktemp, tail, tr or command substitution) but for one cat per case.

TB_RESULTS=${TB_RESULTS:-/bench/results/results.jsonl}
NVPEER=${NVPEER:-/bench/bin/nvpeer}
TB_SUITE=${TB_SUITE:-unknown}
_TB_CASE_SEQ=0

# _tb_json_str VAR TEXT: VAR = TEXT as a JSON string (quotes included).
_tb_json_str() {
    local -n _out=$1
    local s=$2
    s=${s//\\/\\\\}; s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
    s=${s//[$'\001'-$'\010'$'\013'$'\014'$'\016'-$'\037']/}
    _out="\"$s\""
}

# _tb_now_ms VAR: VAR = wall clock in ms.
_tb_now_ms() {
    local -n _t=$1
    local r=${EPOCHREALTIME/[.,]/}
    _t=$(( 10#$r / 1000 ))
}

# tb_result CASE STATUS [DETAILS] [DURATION]
tb_result() {
    local case=$1 status=$2 details=${3:-} duration=${4:-0} js jc jd
    # On a kernel other than the bench kernel (NVPEER_VM_KERNEL=stock) the suite name says which.
    _tb_json_str js "$TB_SUITE${NVPEER_KERNEL_TAG:+@$NVPEER_KERNEL_TAG}"; _tb_json_str jc "$case"; _tb_json_str jd "$details"
    printf '{"suite":%s,"case":%s,"status":"%s","duration":%s,"details":%s}\n' \
        "$js" "$jc" "$status" "$duration" "$jd" >>"$TB_RESULTS"
    printf '[%s] %-4s %s %s\n' "$TB_SUITE" "$status" "$case" "${details:0:200}" >&2
}

# _tb_tail VAR N ARRAY: VAR = the last N elements of the array named ARRAY, one per line.
_tb_tail() {
    local -n _v=$1 _a=$3
    local n=$2
    local start=$(( ${#_a[@]} > n ? ${#_a[@]} - n : 0 ))
    local IFS=$'\n'
    _v="${_a[*]:start}"
}

# tb_case CASE CMD... : runs CMD; exit 0 = pass, 77 = skip, else fail. Details: last output lines.
tb_case() {
    local case=$1; shift
    # One output file per call (a case may itself run tb_case), emptied afterwards (rm would fork).
    local out=/tmp/tb-case.$BASHPID.$((++_TB_CASE_SEQ)) start end rc=0 dur details
    _tb_now_ms start
    "$@" >"$out" 2>&1 || rc=$?
    _tb_now_ms end
    dur=$((end - start))
    printf -v dur '%d.%03d' $((dur / 1000)) $((dur % 1000))
    # Mark the case in dmesg so kernel reports can be attributed to it.
    echo "nvpeer-bench: case $TB_SUITE/$case rc=$rc" >/dev/kmsg 2>/dev/null || true
    # (read once, with a builtin: `cat` to append it cost 0.7 s a case in the debug guest, where
    # the builtin costs 0.07 s, bench run of 2026-12-02)
    local lines=()
    mapfile -t lines <"$out"
    if [ "$rc" = 0 ]; then _tb_tail details 3 lines; tb_result "$case" pass "$details" "$dur"
    elif [ "$rc" = 77 ]; then _tb_tail details 3 lines; tb_result "$case" skip "$details" "$dur"
    else _tb_tail details 15 lines; tb_result "$case" fail "rc=$rc: $details" "$dur"; fi
    [ ${#lines[@]} = 0 ] || printf '%s\n' "${lines[@]}" >>"/bench/results/$TB_SUITE.log"
    : >"$out"
    return 0
}

# tb_edu_dev: the sysfs directory of the QEMU edu device (the bench's DMA peer), or nothing.
tb_edu_dev() {
    local dev
    dev=$(grep -l '^0x11e8$' /sys/bus/pci/devices/*/device 2>/dev/null | head -n1)
    [ -n "$dev" ] && dirname "$dev"
}

# tb_kmsg TEXT: write a line to the kernel log (for attributing reports).
tb_kmsg() { echo "nvpeer-bench: $*" >/dev/kmsg 2>/dev/null || true; }

# tb_log_mark / tb_log_since: a window on the kernel log. tb_log_since prints the lines written
# after the last tb_log_mark of this suite, and fails (saying so) when that mark is not in the log:
# a check for a line that must not appear then cannot pass on an empty window. Suites never clear
# the log (dmesg -C): the run's kernel-log verdict (testbench/lib/report.py) reads it whole, from
# the boot's first line.
_TB_LOG_MARK=
tb_log_mark() { _TB_LOG_MARK=${EPOCHREALTIME/[.,]/}; echo "nvpeer-bench: log-mark $_TB_LOG_MARK" >/dev/kmsg; }
tb_log_since() {
    [ -n "$_TB_LOG_MARK" ] || { echo "tb_log_since: no tb_log_mark before it" >&2; return 1; }
    dmesg | awk -v m="nvpeer-bench: log-mark $_TB_LOG_MARK" 'f { print } index($0, m) && substr($0, length($0) - length(m) + 1) == m { f = 1 }
        END { if (!f) { print "tb_log_since: mark " m " not in the kernel log" > "/dev/stderr"; exit 1 } }'
}

# tb_expect_begin REGEX / tb_expect_end: kernel log lines matching REGEX between the two calls are
# expected (e.g. an emulator VIOLATION line provoked on purpose) and do not fail the run.
# Other reports (KASAN, lockdep, ...) in between still do.
tb_expect_begin() { echo "nvpeer-bench: expect-begin $1" >/dev/kmsg; }
tb_expect_end() { echo "nvpeer-bench: expect-end" >/dev/kmsg; }

# tb_rdma_unload: takes out the RDMA modules a suite loaded with rxe, one module at a time, holders
# first. On Debian's kernel they are modules (the bench kernel has them built in: nothing to do),
# and a leftover one keeps ib_core in use, after which `modprobe -r` of a module that depends on
# ib_core (the core emulator, nvpeer under either name) fails on that dependency with kmod 34.
tb_rdma_unload() {
    local m
    for m in rdma_rxe rdma_ucm rdma_cm iw_cm ib_cm ib_uverbs; do
        [ ! -d "/sys/module/$m" ] || [ ! -e "/sys/module/$m/refcnt" ] || rmmod "$m" 2>/dev/null
    done
    return 0
}

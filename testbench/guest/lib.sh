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

TB_RESULTS=${TB_RESULTS:-/bench/results/results.jsonl}
NVPEER=${NVPEER:-/bench/bin/nvpeer}
TB_SUITE=${TB_SUITE:-unknown}

# JSON string of stdin, in pure bash (python3 costs seconds per start in the TCG+KASAN guest).
_tb_json_str() {
    local s
    s=$(cat; printf x); s=${s%x}
    s=${s//\\/\\\\}; s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
    s=$(printf %s "$s" | tr -d '\000-\010\013\014\016-\037')
    printf '"%s"\n' "$s"
}

# tb_result CASE STATUS [DETAILS] [DURATION]
tb_result() {
    local case=$1 status=$2 details=${3:-} duration=${4:-0}
    printf '{"suite":%s,"case":%s,"status":"%s","duration":%s,"details":%s}\n' \
        "$(printf %s "$TB_SUITE" | _tb_json_str)" "$(printf %s "$case" | _tb_json_str)" \
        "$status" "$duration" "$(printf %s "$details" | _tb_json_str)" >>"$TB_RESULTS"
    printf '[%s] %-4s %s %s\n' "$TB_SUITE" "$status" "$case" "${details:0:200}" >&2
}

# tb_case CASE CMD... : runs CMD; exit 0 = pass, 77 = skip, else fail. Details: last output lines.
tb_case() {
    local case=$1; shift
    local out start rc=0
    out=$(mktemp)
    start=$(date +%s%N)
    "$@" >"$out" 2>&1 || rc=$?
    local dur
    dur=$(( ($(date +%s%N) - start) / 1000000 ))
    dur=$(printf '%d.%03d' $((dur / 1000)) $((dur % 1000)))
    # Mark the case in dmesg so kernel reports can be attributed to it.
    echo "nvpeer-bench: case $TB_SUITE/$case rc=$rc" >/dev/kmsg 2>/dev/null || true
    if [ "$rc" = 0 ]; then tb_result "$case" pass "$(tail -n 3 "$out")" "$dur"
    elif [ "$rc" = 77 ]; then tb_result "$case" skip "$(tail -n 3 "$out")" "$dur"
    else tb_result "$case" fail "rc=$rc: $(tail -n 15 "$out")" "$dur"; fi
    cat "$out" >>"/bench/results/$TB_SUITE.log"
    rm -f "$out"
    return 0
}

# tb_kmsg TEXT: write a line to the kernel log (for attributing reports).
tb_kmsg() { echo "nvpeer-bench: $*" >/dev/kmsg 2>/dev/null || true; }

# tb_expect_begin REGEX / tb_expect_end: kernel log lines matching REGEX between the two calls are
# expected (e.g. an emulator VIOLATION line provoked on purpose) and do not fail the run.
# Other reports (KASAN, lockdep, ...) in between still do.
tb_expect_begin() { echo "nvpeer-bench: expect-begin $1" >/dev/kmsg; }
tb_expect_end() { echo "nvpeer-bench: expect-end" >/dev/kmsg; }

# `nvpeer metrics` and `nvpeer labels` on a live node: nvpeer over the emulators (core model 5.5,
# which keeps /sys/kernel/mm/memory_peers) with two registrations held in flight by
# `nvpeer emu core register --hold`; every nvpeer_* series equals debugfs stats (read before and
# after, unchanged), the core's counters equal memory_peers, `promtool check metrics` accepts the
# exposition (where the run has promtool: testbench/vm runs it on the host, on the files this suite
# writes to the run share, /bench/metrics, since an 86 MB Go binary took 35-45 s to start under
# TCG; else in the guest, /bench/bin/promtool, $PROMTOOL or on PATH; the case is skipped
# otherwise), --textfile and --nfd write their files and leave no temporary behind, the
# labels say what `nvpeer doctor --json` says, and a node without nvpeer still gets valid output
# (nvpeer_up 0, one gauge per doctor check).
# bench: check-kernel stock
# bench: budget stock 60 180
# bench: budget-full - 120 120
. /src/testbench/suites/nvpeer-lib.sh.inc

MX=/bench/metrics
mkdir -p "$MX"

# mx_promtool: the promtool binary, or nothing.
mx_promtool() {
    local p
    for p in "${PROMTOOL:-}" /bench/bin/promtool "$(command -v promtool 2>/dev/null)"; do
        [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return 0; }
    done
    return 1
}

# mx_compare PROM STATS: every line of debugfs stats has its series in PROM with the same value;
# the core's counters equal memory_peers; nv_mem is served by nvpeer. One Python start.
mx_compare() {
    python3 -S - "$1" "$2" "$NP_PEERS" <<'PY'
import os, re, sys
prom, stats, peers = sys.argv[1:4]
series = {}
for line in open(prom):
    if line.startswith("#") or not line.strip():
        continue
    m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)\n?', line)
    assert m, "not a sample line: %r" % line
    labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
    key = (m.group(1), labels)
    assert key not in series, "twice: %r" % (key,)
    series[key] = float(m.group(3))
def get(name, **labels):
    return series.get((name, tuple(sorted(labels.items()))))
assert get("nvpeer_up") == 1, "nvpeer_up %r" % get("nvpeer_up")
core_ops = {"acquire", "get_pages", "dma_map", "dma_unmap", "put_pages", "get_page_size", "release"}
n = 0
for line in open(stats):
    key, value = line.split()
    if key in ("live_mrs", "pinned_bytes"):
        name, labels = "nvpeer_" + key, {}
    elif key == "pinned_bytes_total":
        name, labels = "nvpeer_pinned_bytes_total", {}
    elif key.endswith("_calls") and key[:-6] in core_ops:
        name, labels = "nvpeer_core_calls_total", {"op": key[:-6]}
    elif key.startswith("provider_"):
        name, labels = "nvpeer_provider_calls_total", {"function": key[9:]}
    elif key.startswith("err_"):
        name, labels = "nvpeer_errors_total", {"cause": key[4:]}
    else:
        name, labels = "nvpeer_%s_total" % key, {}
    got = get(name, **labels)
    assert got == int(value), "%s %s: exposition %s%r = %r" % (key, value, name, labels, got)
    n += 1
assert n == 44, "%d stats keys" % n
live = get("nvpeer_live_mrs")
assert live == 2, "live_mrs %r" % live
m = 0
if os.path.isdir(peers):
    for client in sorted(os.listdir(peers)):
        for f in sorted(os.listdir(os.path.join(peers, client))):
            if not f.startswith("num_"):
                continue
            v = int(open(os.path.join(peers, client, f)).read())
            got = get("nvpeer_memory_peers_%s_total" % f[4:], client=client)
            assert got == v, "memory_peers/%s/%s %d: exposition %r" % (client, f, v, got)
            m += 1
prov = [k for k in series if k[0] == "nvpeer_nv_mem_provider_info"]
assert get("nvpeer_nv_mem_providers") == 1 and len(prov) == 1, prov
assert dict(prov[0][1]).get("owner") == "nvpeer", prov
checks = [k for k in series if k[0] == "nvpeer_doctor_check_passed"]
assert len(checks) >= 29, "%d doctor checks" % len(checks)
print("%d stats series equal debugfs, %d memory_peers counters equal sysfs, %d doctor checks, nv_mem served by %s" % (n, m, len(checks), dict(prov[0][1])))
PY
}

# Two registrations held while the metrics are read: nothing moves, so debugfs read before and
# after must be equal, and equal the exposition.
metrics_live() {
    np_up 5.5 2 || return 1
    local p1 p2 rc=0
    $NVPEER emu core register --size 256K --hold 20 >"$MX/hold1.log" 2>&1 & p1=$!
    $NVPEER emu core register --size 1M --offset 65536 --hold 20 >"$MX/hold2.log" 2>&1 & p2=$!
    for _ in $(seq 300); do [ "$(grep -c 'state=mapped' "$NP_DBG"/mrs)" = 2 ] && break; sleep 0.1; done
    [ "$(grep -c 'state=mapped' "$NP_DBG"/mrs)" = 2 ] || { cat "$NP_DBG"/mrs "$MX"/hold*.log; wait; return 1; }
    cat "$NP_DBG"/stats >"$MX/stats.before"
    "$NVPEER" metrics >"$MX/live.prom" 2>"$MX/live.err" || rc=$?
    cat "$NP_DBG"/stats >"$MX/stats.after"
    [ "$(grep -c 'state=mapped' "$NP_DBG"/mrs)" = 2 ] || { echo "a registration ended during the read (--hold too short)"; rc=1; }
    cmp -s "$MX/stats.before" "$MX/stats.after" || { diff "$MX/stats.before" "$MX/stats.after"; rc=1; }
    [ "$rc" = 0 ] && { mx_compare "$MX/live.prom" "$MX/stats.before" || rc=1; }
    [ "$rc" = 0 ] || cat "$MX/live.err"
    wait "$p1" || { cat "$MX/hold1.log"; rc=1; }
    wait "$p2" || { cat "$MX/hold2.log"; rc=1; }
    np_clean || rc=1
    return "$rc"
}
tb_case metrics-equal-debugfs metrics_live

# promtool_case CASE FILE: the case, here or (/bench/promtool-on-host) by testbench/vm on the host
# after the boot, which records it under this suite: the guest only names the case and its file.
promtool_case() {
    if [ -e /bench/promtool-on-host ]; then
        echo "$1 ${2#/bench/}" >>"$MX/promtool-cases"
    else
        tb_case "$1" promtool_check "$2"
    fi
}
promtool_check() { # FILE
    local pt out
    pt=$(mx_promtool) || { echo "no promtool in the guest (/bench/bin/promtool, \$PROMTOOL or PATH): not checked"; return 77; }
    [ -s "$1" ] || { echo "$1 missing (an earlier case failed)"; return 1; }
    out=$("$pt" check metrics <"$1" 2>&1) || { echo "$out"; return 1; }
    [ -z "$out" ] || { echo "promtool: $out"; return 1; }
    echo "promtool check metrics: $1 clean ($("$pt" --version 2>&1 | head -n1))"
}
promtool_case promtool-check-metrics-live "$MX/live.prom"

# --textfile and --nfd from one run; the labels say what the doctor says.
files_and_labels() {
    local tf=$MX/textfile nfd=$MX/features.d
    mkdir -p "$tf" "$nfd" || return 1
    "$NVPEER" metrics --textfile "$tf" --nfd "$nfd" --nfd-expiry 120 >"$MX/files.out" 2>&1 || { cat "$MX/files.out"; return 1; }
    [ -s "$tf/nvpeer.prom" ] && [ -s "$nfd/nvpeer" ] || { ls -la "$tf" "$nfd"; return 1; }
    local left
    left=$(find "$tf" "$nfd" -name '.*' -type f)
    [ -z "$left" ] || { echo "temporary file left: $left"; return 1; }
    [ "$(stat -c %a "$tf/nvpeer.prom")" = 644 ] || { stat "$tf/nvpeer.prom"; return 1; }
    "$NVPEER" doctor --json >"$MX/doctor.json" 2>/dev/null
    python3 -S - "$nfd/nvpeer" "$MX/doctor.json" <<'PY' || return 1
import json, re, sys
labels, directives = {}, []
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# +"):
        directives.append(line)
    elif line and not line.startswith("#"):
        k, v = line.split("=", 1)
        assert k.startswith("feature.node.kubernetes.io/nvpeer-"), k
        labels[k.split("/", 1)[1]] = v
r = json.load(open(sys.argv[2]))
assert len(directives) == 1 and re.fullmatch(r"# \+expiry-time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", directives[0]), directives
assert labels["nvpeer-gpudirect-rdma.ready"] == ("true" if r["verdict"] == "ready" else "false"), labels
for p in r["paths"]:
    assert labels["nvpeer-path." + p["path"]] == p["state"], (p, labels)
assert labels["nvpeer-nv_mem.owner"] == "nvpeer", labels
# While no path is ready, the root cause's fault code (docs/operations.md); none while one is.
codes = {c["id"]: c.get("code") for c in r["checks"]}
if r["verdict"] == "ready":
    assert "nvpeer-gpudirect-rdma.fault" not in labels, labels
else:
    assert re.fullmatch(r"NVP-D\d{3}", labels["nvpeer-gpudirect-rdma.fault"]), labels
    assert labels["nvpeer-gpudirect-rdma.fault"] in codes.values(), labels
assert all(re.fullmatch(r"NVP-D\d{3}", c or "") for c in codes.values()), codes
assert labels["nvpeer-version"] == open("/sys/module/nvpeer/version").read().strip(), labels
print("labels:", " ".join("%s=%s" % kv for kv in sorted(labels.items())))
PY
    # A missing directory: exit 2 and a line naming it; skipped with --skip-missing-dirs.
    local rc=0
    "$NVPEER" metrics --textfile "$MX/gone" >/dev/null 2>"$MX/gone.err" || rc=$?
    [ "$rc" = 2 ] && grep -q "gone: no such directory" "$MX/gone.err" || { echo "rc=$rc"; cat "$MX/gone.err"; return 1; }
    "$NVPEER" metrics --textfile "$MX/gone" --skip-missing-dirs >/dev/null || return 1
    echo "--textfile and --nfd written (0644, no temporary left); missing directory: exit 2, skipped with --skip-missing-dirs"
}
tb_case textfile-nfd-and-labels files_and_labels

# Without nvpeer (and without debugfs): valid output all the same.
without_nvpeer() {
    np_down
    "$NVPEER" metrics >"$MX/none.prom" 2>"$MX/none.err" || { cat "$MX/none.err"; return 1; }
    grep -qx 'nvpeer_up 0' "$MX/none.prom" || { head -n 20 "$MX/none.prom"; return 1; }
    grep -qx 'nvpeer_nv_mem_providers 0' "$MX/none.prom" || return 1
    ! grep -q '^nvpeer_live_mrs' "$MX/none.prom" || { echo "counters without nvpeer"; return 1; }
    local n
    n=$(grep -c '^nvpeer_doctor_check_passed{' "$MX/none.prom")
    [ "$n" -ge 29 ] || { echo "$n doctor checks"; return 1; }
    grep -q '^nvpeer_doctor_check_passed{check="nvpeer.module",status="fail"} 0$' "$MX/none.prom" || return 1
    # The failing check's fault series: 1, with its code.
    grep -q '^nvpeer_doctor_fault{check="nvpeer.module",code="NVP-D016"} 1$' "$MX/none.prom" || return 1
    echo "no nvpeer: nvpeer_up 0, $n doctor checks"
}
tb_case metrics-without-nvpeer without_nvpeer
promtool_case promtool-check-metrics-without-nvpeer "$MX/none.prom"

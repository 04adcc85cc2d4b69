# perftest-interop: nvpeer bench paired with Debian's perftest in both roles (a test).
# bw-vs-perftest, a benchmark, not a timed test: host-memory RDMA WRITE bandwidth of `nvpeer bench` vs `ib_write_bw`
# over rxe in this VM, alternating rounds of 200 writes each (5 in make check-full, 3 in make check; one in make check's sampled
# debug-kernel run, NVPEER_SLICE set: the figures are printed, not compared), medians compared (testbench/bench/bw-vs-perftest.sh). The
# case passes when both tools produced a figure; the figures and their ratio are in the details
# and in /bench/harness/bw-vs-perftest.txt.
# bench: check-kernel stock
# bench: budget stock 90 90
# bench: budget-full - 210 210

hbw_run() {
    # Five rounds in make check-full, three in make check (the stock kernel), one in a sampled
    # debug-kernel run (NVPEER_SLICE set).
    local rounds=5
    [ "${NVPEER_DEPTH:-check}" = full ] || rounds=3
    [ -z "${NVPEER_SLICE:-}" ] || rounds=1
    bash /src/testbench/bench/bw-vs-perftest.sh 65536 200 /bench/harness "$rounds" | tee /bench/harness/bw-vs-perftest.txt
    [ "${PIPESTATUS[0]}" = 0 ] && grep -q '^ratio' /bench/harness/bw-vs-perftest.txt
}
# Pairing with perftest (seconds): nvpeer's client against ib_write_bw / ib_read_bw servers and
# their clients against nvpeer's server (testbench/bench/perftest-interop.sh).
hbw_interop() {
    bash /src/testbench/bench/perftest-interop.sh 65536 100 /bench/harness
}
mkdir -p /bench/harness
tb_case perftest-interop hbw_interop
tb_case bw-vs-perftest hbw_run
tb_rdma_unload
true

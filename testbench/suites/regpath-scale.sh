# Registration cost at scale alone (issue 38, items 2 and 3): the 64 KiB cell with L other MRs
# live, and one free of an allocation carrying N MRs (and K at once), for the floor, NVIDIA's
# nvidia-peermem and nvpeer in both modes, with the cost model on. The same series as `make
# bench`'s (testbench/suites/regpath-full.sh) without its size x threads cells, memory pass and
# 100k scale test: minutes instead of an hour, for a look between full runs. Not part of `make
# check` (no NN- prefix); by hand, on Debian's production kernel:
#   NVPEER_VM_KERNEL=stock testbench/vm run --suite regpath-scale
# RP_LIVE (default 0,1000,10000) and RP_INVAL (default 1,10,100,1000) set the series; with
# bench-results/host-calibration.json present (testbench/bench/run writes it) the cost model is
# dilated by the guest's slowdown as in `make bench`. Writes /bench/bench-results/scale/regpath.json
# and prints its tables; asserts only that the numbers are there and each path's callbacks per
# free are what its API says (regpath check).
# bench: kernel stock
# bench: cpus 2
# shellcheck disable=SC2034 # (the RP_* settings are read by testbench/bench/regpath-lib.sh)
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results/scale
RP_PATHS="floor nvidia-peermem nvpeer-inval nvpeer-persistent"
RP_ARGS="--sizes 64K --threads 1 --ops 200 --min-ops 60 --cell-budget-s 30 --inval-iters 1"
RP_ARGS+=" --live-mrs ${RP_LIVE:-0,1000,10000}"
RP_ARGS+=" --inval-mrs ${RP_INVAL:-1,10,100,1000} --inval-concurrent 4 --inval-concurrent-mrs 100"
RP_ARGS+=" --cost-model ${RP_COST_MODEL:-pinmaplat-v100}"
[ -f /src/bench-results/host-calibration.json ] && RP_HOST_CALIBRATION=/src/bench-results/host-calibration.json

if rp_run_all "$RP_OUT/regpath.json" "scale series"; then
    tb_case numbers-and-callbacks $NVPEER emu regpath check "$RP_OUT/regpath.json" \
        --pins nvpeer-inval=1 --pins nvpeer-persistent=1 --pins floor=1 --pins nvidia-peermem=2
fi

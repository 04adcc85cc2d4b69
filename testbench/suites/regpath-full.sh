# Registration-path benchmark, full run (`make bench` -> testbench/bench/run). Not part of
# `make check` (no NN- prefix). Writes /bench/bench-results/regpath.json and prints the tables.
# bench: own-boot
# Two CPUs online while it runs (its thread-count columns):
# bench: cpus 2
# shellcheck disable=SC2034 # (the RP_* settings are read by testbench/bench/regpath-lib.sh)
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results
RP_ARGS="--sizes 64K,256K,1M,4M,16M,64M,256M,1G --threads 1,2,4,8"
RP_ARGS+=" --max-mapped 8G --inval-iters 3 --mem-mrs $(rp_mem_mrs) --scale-budget-s 1800 --settle-s 300"
# Invalidation at scale (issue 38): one free of an allocation carrying 1 to 10k MRs, and 4 frees at
# once of 100 MRs each. Registration cost against live MRs (issue 38): the 64 KiB cell with 0, 1k,
# 10k and 100k others live. The KASAN kernel registers and deregisters a 64 KiB MR in 18-37 ms
# (bench-20261129-0943's medians, floor to classic client; about 15 ms of it the dilated cost
# model's), so 100k live would take every path 30-60 minutes and the 10k-MR free 3-6: there both
# series stop at 1k MRs; the production kernel's runs (make bench-stock, make bench-stock-pt)
# carry them whole.
RP_ARGS+=" --inval-concurrent 4 --inval-concurrent-mrs 100"
if rp_kasan; then
    RP_ARGS+=" --inval-mrs 1,10,100,1000 --live-mrs 0,1000"
else
    RP_ARGS+=" --inval-mrs 1,10,100,1000,10000 --live-mrs 0,1000,10000,100000"
fi
# Cycles per cell (at 64 KiB; fewer at larger sizes, down to the minimum) and the time a cell may
# take: on the KASAN kernel a run of these takes 50 minutes; a production kernel (make
# bench-stock) is about ten times faster, so it gets ten times the cycles at 64 KiB and at least
# 60 per cell: with 20-25, single cells from 4 MiB up moved by up to 0.18 between runs
# (docs/performance.md). Its cells then took 7.4 of the run's 12.6 minutes.
if rp_kasan; then
    RP_ARGS+=" --ops 40 --min-ops 6 --cell-budget-s 10"
else
    RP_ARGS+=" --ops 400 --min-ops 60 --cell-budget-s 30"
fi
# The live-MR scale test holds 100k 64 KiB MRs at once, then frees them (the TCG guest registers
# a few hundred MRs per second: about 5 minutes for the floor, 15 for nvpeer); 30 minutes of
# registering per path is only a guard. Cells of up to 8 GiB DMA-mapped at once (1 GiB x 8 threads
# on one shared allocation): the edu peer has the 64-bit DMA mask an HCA driver sets. Those cells
# leave the kernel draining its IOVA cache for a minute or more: the memory and scale phases wait
# for it to settle (up to 300 s); the memory figures are taken first anyway (RP_MEMORY_FIRST).
RP_SCALE_PATHS="floor nvpeer-inval"
RP_SCALE=100000
# The cost model: gdrcopy's measured V100 pin/unpin costs, dilated by this guest's software
# slowdown against the host (testbench/bench/run times the calibration workload on the host before
# the boot; rp_dilation times it here). docs/performance.md says why and what it assumes.
RP_ARGS+=" --cost-model ${RP_COST_MODEL:-pinmaplat-v100}"
RP_HOST_CALIBRATION=/src/bench-results/host-calibration.json
# Every path's slab memory per live MR first, before any large cell or scale test disturbs the
# kernel's caches; then the cells, invalidation and scale test of every path.
RP_MEMORY_FIRST=1

rp_run_all "$RP_OUT/regpath.json" ""

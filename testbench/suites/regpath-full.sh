# Registration-path benchmark, full run (`make bench` -> testbench/bench/run). Not part of
# `make check` (no NN- prefix). Writes /bench/bench-results/regpath.json and prints the tables.
# bench: own-boot
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results
RP_ARGS="--sizes 64K,256K,1M,4M,16M,64M,256M,1G --threads 1,2,4,8 --ops 40 --min-ops 6"
RP_ARGS+=" --cell-budget-s 10 --max-mapped 2G --inval-iters 3 --mem-mrs 1000 --scale-budget-s 60"
# The live-MR scale test (target 100k MRs) is time-bounded: registering stops after 60 s per path
# (the TCG guest registers a few hundred MRs per second; the whole run must fit in one VM slot).
RP_SCALE_PATHS="floor nvpeer-inval"
RP_SCALE=100000

rp_run_all "$RP_OUT/regpath.json" ""

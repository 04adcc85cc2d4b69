# Registration-path benchmark, memory pass only (`make bench-memory` -> testbench/bench/run
# memory). Not part of `make check` (no NN- prefix). In a fresh boot, before anything else runs,
# holds 1000 live 64 KiB MRs per path (10,000 on a production kernel) and reads the slab counters; writes
# /bench/bench-results/regpath-memory.json and prints the tables. `make bench` measures the same
# figures first too; this is the short way to get them alone (a few minutes).
# bench: own-boot
# Two CPUs online while it runs (as regpath-full):
# bench: cpus 2
# shellcheck disable=SC2034 # (the RP_* settings are read by testbench/bench/regpath-lib.sh)
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results
RP_ARGS="--sizes 64K --threads 1 --mem-mrs $(rp_mem_mrs) --settle-s 60 --cost-model ${RP_COST_MODEL:-pinmaplat-v100}"

RP_MEMORY_ONLY=1
rp_run_all "$RP_OUT/regpath-memory.json" "memory pass alone"

# Registration-path benchmark, short smoke version (the full run is `make bench`,
# testbench/suites/regpath-full.sh): every path with few sizes, threads and iterations. Asserts
# only that numbers were produced, that nvpeer pins once per registration while the classic
# C client and NVIDIA's own nvidia-peermem (built from Debian's source) pin twice, and that a free
# under N MRs runs N callbacks for the invalidating API and none for the persistent one; the
# figures themselves are printed, never compared with targets.
# bench: check-kernel stock
# Two CPUs online while it runs (its 2-thread cells):
# bench: cpus 2
# bench: budget stock 25 25
# bench: budget stock-7.3 25 25
# bench: budget-full stock 25 25
# bench: budget-full - 60 60
# bench: budget-full stock-7.3 25 25
# shellcheck disable=SC2034 # (the RP_* settings are read by testbench/bench/regpath-lib.sh)
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results/smoke
RP_ARGS="--sizes 64K,1M --threads 1,2 --ops 12 --min-ops 3 --cell-budget-s 10 --inval-iters 2 --mem-mrs 100"
# Invalidation at scale, small: frees under 1, 10 and 100 MRs and 2 at once of 8 each (the check
# holds each path to one callback per MR for the invalidating API, none for the persistent one).
RP_ARGS+=" --inval-mrs 1,10,100 --inval-concurrent 2 --inval-concurrent-mrs 8"
# and the 64 KiB cell with 0 and 200 other MRs live.
RP_ARGS+=" --live-mrs 0,200"
RP_SCALE_PATHS="floor nvpeer-inval"
RP_SCALE=300
# As `make bench`: every path's slab memory first, then the rest.
RP_MEMORY_FIRST=1

if rp_run_all "$RP_OUT/regpath.json" "smoke run"; then
    # One check (each nvpeer start costs seconds in the guest): numbers present for every path,
    # one provider pin per registration for nvpeer and the floor, two for the classic client and
    # for NVIDIA's module (its acquire probes with get_pages + put_pages: nvidia-peermem.c:209-215).
    tb_case numbers-and-pins-per-registration $NVPEER emu regpath check "$RP_OUT/regpath.json" \
        --pins nvpeer-inval=1 --pins nvpeer-persistent=1 --pins floor=1 --pins floor-persistent=1 \
        --pins classic=2 --pins classic-persistent=2 --pins nvidia-peermem=2
fi

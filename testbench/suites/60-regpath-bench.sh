# Registration-path benchmark, short smoke version (the full run is `make bench`,
# testbench/suites/regpath-full.sh): every path with few sizes, threads and iterations. Asserts
# only that numbers were produced and that nvpeer pins once per registration while the classic
# C client pins twice; the figures themselves are printed, never compared with targets.
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results/smoke
RP_ARGS="--sizes 64K,1M --threads 1,2 --ops 12 --min-ops 3 --cell-budget-s 10 --inval-iters 2 --mem-mrs 100"
RP_SCALE_PATHS="floor nvpeer-inval"
RP_SCALE=300

pins_per_reg() { # PATH EXPECTED: provider pins per registration, in every cell
    local got
    got=$(rp_get_pages_per_reg "$RP_OUT/regpath.json" "$1") || return 1
    echo "$1: provider pins per registration (min max over cells): $got (expected $2)"
    [ "$got" = "$2.0 $2.0" ]
}

if rp_run_all "$RP_OUT/regpath.json" "smoke run"; then
    tb_case numbers-present rp_numbers_present "$RP_OUT/regpath.json"
    tb_case nvpeer-inval-one-pin-per-registration pins_per_reg nvpeer-inval 1
    tb_case nvpeer-persistent-one-pin-per-registration pins_per_reg nvpeer-persistent 1
    tb_case classic-two-pins-per-registration pins_per_reg classic 2
    tb_case classic-persistent-two-pins-per-registration pins_per_reg classic-persistent 2
    tb_case floor-one-pin-per-registration pins_per_reg floor 1
fi

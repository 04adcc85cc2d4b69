# nvpeer under fault injection at every provider call (nvp2p_emu) and every core allocation/HW
# fault point (peer_mem_emu), in both client modes: registrations fail cleanly and nothing leaks
# (no provider pin, no mapping, nvpeer's books balanced); then a register/free/deregister race
# stress: NP_STRESS_ITER per thread x 4 threads. 25000 (100k iterations) by default; 2500 (10k)
# when the run is sampled (NVPEER_SLICE set: make check on the debug kernel, where the 100k run
# took 500-830 s; make check runs the 100k on Debian's production kernel, make check-full on both).
. /src/testbench/suites/nvpeer-lib.sh.inc
if [ -n "${NVPEER_SLICE:-}" ]; then NP_STRESS_ITER=${NP_STRESS_ITER:-2500}; else NP_STRESS_ITER=${NP_STRESS_ITER:-25000}; fi

faults() { # params...
    np_up 5.5 2 "$@" || return 1
    np_scenario fault-provider || return 1
    np_scenario fault-core || return 1
    $NVPEER emu gpu check-leaks || return 1
    echo "err_pin $(np_stat err_pin) err_dma_map $(np_stat err_dma_map) err_put $(np_stat err_put) err_unmap $(np_stat err_unmap)"
}
tb_case fault-injection-no-leaks-persistent faults
tb_case fault-injection-no-leaks-invalidating faults persistent_api_support=0

stress() {
    np_up 5.5 2 persistent_api_support=0 || return 1
    $NVPEER emu scenario race-stress --module nvpeer --iterations "$NP_STRESS_ITER" --threads 4 || return 1
    np_clean || return 1
    echo "registrations $(np_stat registrations) callbacks $(np_stat callbacks) invalidations $(np_stat invalidations) stale $(np_stat callbacks_stale) revoked $(np_stat err_revoked)"
}
tb_case race-stress stress

np_down

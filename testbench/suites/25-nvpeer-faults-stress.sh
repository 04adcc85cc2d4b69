# nvpeer under fault injection at every provider call (nvp2p_emu) and every core allocation/HW
# fault point (peer_mem_emu), in both client modes: registrations fail cleanly and nothing leaks
# (no provider pin, no mapping, nvpeer's books balanced); then a register/free/deregister race
# stress per client mode, NP_STRESS_ITER per thread x 4 threads:
#   persistent (default client): 100k on Debian's production kernel (make check, make check-full),
#     10k on the debug kernel;
#   invalidating: on the debug kernel only (see below), 10k in make check (NVPEER_SLICE set), 100k
#     in make check-full and when the suite runs by hand (500-830 s there).
. /src/testbench/suites/nvpeer-lib.sh.inc
if [ -n "${NVPEER_KERNEL_TAG:-}" ]; then NP_ITER_PERSISTENT=25000; else NP_ITER_PERSISTENT=2500; fi
if [ -n "${NVPEER_SLICE:-}" ]; then NP_ITER_INVALIDATING=2500; else NP_ITER_INVALIDATING=25000; fi

faults() { # params...
    np_up 5.5 2 "$@" || return 1
    np_scenario fault-provider || return 1
    np_scenario fault-core || return 1
    $NVPEER emu gpu check-leaks || return 1
    echo "err_pin $(np_stat err_pin) err_dma_map $(np_stat err_dma_map) err_put $(np_stat err_put) err_unmap $(np_stat err_unmap)"
}
tb_case fault-injection-no-leaks-persistent faults
tb_case fault-injection-no-leaks-invalidating faults persistent_api_support=0

# stress CLIENT ITERATIONS [nvpeer params...]: the race stress against one nv_mem client
# (NP_STRESS_ITER, when given, sets the iterations per thread of both).
stress() {
    local label=$1 iter=${NP_STRESS_ITER:-$2}; shift 2
    np_up 5.5 2 "$@" || return 1
    echo "client: $label, $iter x 4 threads"
    $NVPEER emu scenario race-stress --module nvpeer --iterations "$iter" --threads 4 || return 1
    np_clean || return 1
    echo "registrations $(np_stat registrations) callbacks $(np_stat callbacks) invalidations $(np_stat invalidations) stale $(np_stat callbacks_stale) revoked $(np_stat err_revoked)"
}
# The default persistent client: no free callback, so no NVIDIA API window to race.
tb_case race-stress stress persistent "$NP_ITER_PERSISTENT"
# The invalidating client (persistent_api_support=0). On the debug kernel only, in make check and
# make check-full alike: on a production kernel, where freed page tables are reused at once (no
# KASAN quarantine), a release's put_pages that waits for the RM lock while the free callback tears
# its table down reaches a new pin at the same address (docs/design.md, "The put window").
# NP_STRESS_INVALIDATING=1 runs it anywhere: the reproducer.
if [ -z "${NVPEER_KERNEL_TAG:-}" ] || [ "${NP_STRESS_INVALIDATING:-0}" = 1 ]; then
    tb_case race-stress-invalidating stress invalidating "$NP_ITER_INVALIDATING" persistent_api_support=0
fi

np_down

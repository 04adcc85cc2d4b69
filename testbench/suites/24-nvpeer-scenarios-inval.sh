# The emulator scenario suite against nvpeer with persistent_api_support=0: invalidating nv_mem
# (extended client, PEER_MEM_INVALIDATE_UNMAPS; in the 4.9 model the MLNX_OFED 4.x layout,
# peerdirect_support=1) + persistent nv_mem_nc, in every OFED core model and both page-table ABIs:
# the free-callback and invalidation paths (H1-H5) under every race the scenario driver scripts.
# Same pass rule as 21-nvpeer-scenarios.
# bench: budget stock 85 85
# bench: budget stock+oldest 65 65
# bench: budget - 165 165
# bench: budget-full stock 120 120
# bench: budget-full - 450 450
# bench: budget-full stock+oldest 120 120
. /src/testbench/suites/nvpeer-lib.sh.inc

# (no process substitution: the guest has no /dev/fd)
read -ra NP_ALL <<<"$(np_all_scenarios | tr '\n' ' ')"
np_models invalidating "${NP_ALL[@]}"
np_down

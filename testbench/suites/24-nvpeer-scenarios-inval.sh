# The emulator scenario suite against nvpeer with persistent_api_support=0: invalidating nv_mem
# (extended client, PEER_MEM_INVALIDATE_UNMAPS; in the 4.9 model the MLNX_OFED 4.x layout,
# peerdirect_support=1) + persistent nv_mem_nc, in every OFED core model and both page-table ABIs:
# the free-callback and invalidation paths (H1-H5) under every race the scenario driver scripts.
# Same pass rule as 21-nvpeer-scenarios.
. /src/testbench/suites/nvpeer-lib.sh.inc

# (no process substitution: the guest has no /dev/fd)
read -ra NP_ALL <<<"$(np_all_scenarios | tr '\n' ' ')"
np_models invalidating "${NP_ALL[@]}"
np_down

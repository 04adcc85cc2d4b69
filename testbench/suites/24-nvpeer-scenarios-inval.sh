# The emulator scenario suite against nvpeer with persistent_api_support=0: invalidating nv_mem
# (extended client, PEER_MEM_INVALIDATE_UNMAPS) + persistent nv_mem_nc, OFED 5.5+ core model,
# page-table ABI v2: the free-callback and invalidation paths (H1-H5) under every race the
# scenario driver scripts. Same pass rule as 21-nvpeer-scenarios.
. /src/testbench/suites/nvpeer-lib.sh.inc

# (no process substitution: the guest has no /dev/fd)
NP_ALL=($($NVPEER emu scenario --list | awk '{ print $1 }'))
np_matrix "invalidating" 5.5 2 "persistent_api_support=0" "${NP_ALL[@]}"
np_down

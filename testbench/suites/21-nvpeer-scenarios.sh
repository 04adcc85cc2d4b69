# The emulator scenario suite (`nvpeer emu scenario`, testbench/emu) against nvpeer, OFED 5.5+
# core model, page-table ABI v2, in both client configurations: the default persistent nv_mem and
# invalidating nv_mem + nv_mem_nc (persistent_api_support=0). Every scenario must pass with no
# violation recorded by either emulator, nothing leaked, and nvpeer's own counters balanced.
# bench: own-boot
. /src/testbench/suites/nvpeer-lib.sh.inc

mapfile -t NP_ALL < <($NVPEER emu scenario --list | awk '{ print $1 }')
np_matrix "persistent" 5.5 2 "" "${NP_ALL[@]}"
np_matrix "invalidating" 5.5 2 "persistent_api_support=0" "${NP_ALL[@]}"
np_down

# The emulator scenario suite (`nvpeer emu scenario`, testbench/emu) against nvpeer with the default
# persistent nv_mem client, OFED 5.5+ core model, page-table ABI v2. Every scenario must pass with
# no violation recorded by either emulator, nothing leaked, and nvpeer's own counters balanced.
# The invalidating configuration runs in 24-nvpeer-scenarios-inval.
. /src/testbench/suites/nvpeer-lib.sh.inc

# (no process substitution: the guest has no /dev/fd)
NP_ALL=($($NVPEER emu scenario --list | awk '{ print $1 }'))
np_matrix "persistent" 5.5 2 "" "${NP_ALL[@]}"
np_down

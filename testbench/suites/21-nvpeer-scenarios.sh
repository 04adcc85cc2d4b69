# The emulator scenario suite (`nvpeer emu scenario`, testbench/emu) against nvpeer's default
# persistent nv_mem client, in every OFED core model (4.9, 5.1, 5.4hf, doca3) and both NVIDIA
# page-table ABIs. Every scenario must pass with no violation recorded by either emulator, nothing
# leaked, and nvpeer's own counters balanced. The invalidating client: 24-nvpeer-scenarios-inval.
# bench: budget stock 65 65
# bench: budget stock+oldest 55 55
# bench: budget - 160 160
# bench: budget-full stock 100 100
# bench: budget-full - 395 395
# bench: budget-full stock+oldest 100 100
. /src/testbench/suites/nvpeer-lib.sh.inc

# (no process substitution: the guest has no /dev/fd)
read -ra NP_ALL <<<"$(np_all_scenarios | tr '\n' ' ')"
tb_case compat-flavour np_compat
np_models persistent "${NP_ALL[@]}"
np_down

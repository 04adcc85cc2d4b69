# nvpeer against every OFED core model of peer_mem_emu (4.9, 5.1, 5.4hf, 5.5) and both NVIDIA
# page-table ABIs (pt_abi=1: 0x00010002, pt_abi=2: 0x00020000), with the invalidating client
# (4.9: legacy layout, peerdirect_support=1) and the default persistent client. A subset of the
# scenarios per combination (the page-table ABI only matters for pinning, so pt_abi=1 runs the
# pin/map/free basics); the full list runs in 21/24-nvpeer-scenarios for 5.5.
. /src/testbench/suites/nvpeer-lib.sh.inc

# make check (NVPEER_DEPTH=check) runs the scenarios whose outcome differs per model; make
# check-full the wider subset.
if [ "${NVPEER_DEPTH:-check}" = full ]; then
    NP_SUBSET=(basic unaligned free-then-dereg free-after-get-pages free-before-activate
               dereg-vs-free-in-stop free-vs-dereg-invalidating hw-fail dereg-other-pid process-exit)
    NP_PT1=(basic unaligned free-then-dereg)
    NP_PERSIST=(basic free-then-dereg dereg-other-pid)
else
    NP_SUBSET=(free-then-dereg dereg-vs-free-in-stop free-vs-dereg-invalidating hw-fail)
    NP_PT1=(unaligned)
    NP_PERSIST=(free-then-dereg)
fi
for model in 4.9 5.1 5.4hf 5.5; do
    inval="persistent_api_support=0"
    [ "$model" = 4.9 ] && inval="persistent_api_support=0 peerdirect_support=1"
    np_matrix "$model/pt1/invalidating" "$model" 1 "$inval" "${NP_PT1[@]}"
    np_matrix "$model/pt2/invalidating" "$model" 2 "$inval" "${NP_SUBSET[@]}"
    np_matrix "$model/pt2/persistent" "$model" 2 "" "${NP_PERSIST[@]}"
done
np_down

# The fuzzer beside the fixed scenarios (`nvpeer emu scenario fuzz`,
# userspace-tests/emu-ctl/src/scenario/fuzz.rs): seeded random registration sequences (allocate,
# register any sub-range with random access and peer flags and now and then a non-PCI device,
# deregister from this process, a child or a kworker, free under live MRs, bursts of threads
# racing a free, children that exit without cleaning up, rmmod under live MRs, the emulators'
# fault injection at a random provider call or core fault point) against nvpeer in both client
# modes, on the debug kernel (KASAN, lockdep, kmemleak: the boot's kernel-log verdict covers every
# sequence), with both emulators' invariants and nvpeer's books checked after each sequence.
#   Time per client mode: 30 s in make check, 300 s in make check-full (NP_FUZZ_SECONDS sets it).
#   Seed: NP_FUZZ_SEED, else from /dev/urandom; printed in each case's result either way. Replay a
#   run: NP_FUZZ_SEED=<seed> testbench/vm run --suite 28-nvpeer-fuzz; a failing sequence alone:
#   the failure names its own seed (`--seed <sequence seed> --iterations 1 --seconds 0`).
# A failure found here becomes a fixed scenario (userspace-tests/emu-ctl/src/scenario/) once it is
# understood.
# bench: kernel bench
# Two CPUs online while it runs (its thread bursts race a free on two CPUs):
# bench: cpus 2
# bench: budget - 100 100
# bench: budget-full - 700 700
. /src/testbench/suites/nvpeer-lib.sh.inc

seed=${NP_FUZZ_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
if [ -n "${NP_FUZZ_SECONDS:-}" ]; then secs=$NP_FUZZ_SECONDS
elif [ "${NVPEER_DEPTH:-check}" = full ]; then secs=300
else secs=30; fi

# fuzz [nvpeer params...]: the fuzzer for $secs s against nvpeer loaded with the params, then
# nvpeer's books, no pin left and a clean unload.
fuzz() {
    np_up 5.5 2 "$@" || return 1
    local out rc=0
    out=$($NVPEER emu scenario fuzz --module nvpeer --seed "$seed" --seconds "$secs" --delay-ms 0) || rc=$?
    echo "$out" | tail -n 40
    [ "$rc" = 0 ] || { echo "fuzz seed $seed: failed (replay: NP_FUZZ_SEED=$seed)"; return 1; }
    np_unload_clean || return 1
    echo "fuzz seed $seed: $(echo "$out" | grep -oE '[0-9]+ sequences, [0-9]+ operations' | tail -n 1) in $secs s"
}

tb_case fuzz-persistent fuzz
# The invalidating client meets the NVIDIA API's own window in bursts (a free callback between
# get_pages and dma_map; docs/design.md): the provider emulator logs each as a dma-map-uaf
# violation, which the fuzzer counts (as race-stress does) and this boot's log verdict expects;
# any other violation fails.
tb_expect_begin 'nvp2p_emu: VIOLATION dma-map-uaf:'
tb_case fuzz-invalidating fuzz persistent_api_support=0
tb_expect_end

np_down

# Registration-path benchmark, memory pass only (`make bench-memory` -> testbench/bench/run
# memory). Not part of `make check` (no NN- prefix). In a fresh boot, before anything else runs,
# holds 1000 live 64 KiB MRs per path and reads the slab counters; writes
# /bench/bench-results/regpath-memory.json and prints the tables. `make bench` measures the same
# figures first too; this is the short way to get them alone (a few minutes).
# bench: own-boot
. /src/testbench/bench/regpath-lib.sh

RP_OUT=/bench/bench-results
RP_ARGS="--sizes 64K --threads 1 --mem-mrs 1000 --settle-s 60 --cost-model ${RP_COST_MODEL:-pinmaplat-v100}"

rp_memory_only() {
    local p
    mkdir -p "$RP_OUT"
    if ! rp_up; then
        tb_result load fail "could not load nvp2p_emu, peer_mem_emu and rawfloor"
        rp_down
        return 1
    fi
    for p in $RP_PATHS; do
        tb_case "memory/$p" rp_path "$p" memory
        [ -f "$RP_OUT/$p.memory.json" ] && cp "$RP_OUT/$p.memory.json" "$RP_OUT/$p.json"
    done
    rp_down
    tb_case report rp_report "$RP_OUT/regpath-memory.json" "$(rp_machine) (memory pass alone)"
}
rp_memory_only

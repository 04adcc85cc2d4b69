# Proves the detector is live: a planted use-after-free must produce a KASAN report, and the runner
# must see it. The case passes when the report appears (checked by the host from dmesg).
# bench: expect-dmesg BUG: KASAN: slab-use-after-free in .*\[nvpeer_uaf\]
# bench: budget - 10 10
# bench: budget-full - 5 5

canary() {
    modprobe nvpeer_uaf
    dmesg | grep -q 'BUG: KASAN: slab-use-after-free' || { echo "KASAN did not report the planted use-after-free"; return 1; }
    echo "KASAN reported the planted use-after-free"
}
tb_case planted-use-after-free-is-reported canary

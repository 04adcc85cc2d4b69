# Bench smoke suite: the bench itself works (Rust module, vIOMMU, DMA peer, rxe + perftest).
# bench: check-kernel stock
# bench: budget stock 10 10
# bench: budget-full - 65 65

smoke_rust_module() {
    modprobe nvpeer_hello || return 1
    dmesg | grep -q 'nvpeer_hello: loaded' || { echo "no load message"; return 1; }
    rmmod nvpeer_hello || return 1
    dmesg | grep -q 'nvpeer_hello: unloaded' || { echo "no unload message"; return 1; }
}
tb_case rust-module-load-unload smoke_rust_module

smoke_iommu() {
    compgen -G "/sys/class/iommu/dmar*" >/dev/null || { echo "no dmar in /sys/class/iommu"; return 1; }
    local dev
    dev=$(tb_edu_dev) || { echo "no edu PCI device"; return 1; }
    [ -e "$dev/iommu_group" ] || { echo "edu device has no IOMMU group"; return 1; }
    echo "edu at $(basename "$dev"), IOMMU group $(basename "$(readlink "$dev/iommu_group")")"
}
tb_case viommu-and-dma-peer smoke_iommu

smoke_rxe() {
    modprobe rdma_rxe || return 1
    ip netns add a && ip netns add b || return 1
    ip link add va type veth peer name vb || return 1
    ip link set va netns a && ip link set vb netns b
    ip -n a addr add 10.99.0.1/24 dev va && ip -n b addr add 10.99.0.2/24 dev vb
    ip -n a link set va up && ip -n b link set vb up
    ip -n a link set lo up && ip -n b link set lo up
    ip netns exec a rdma link add rxea type rxe netdev va || return 1
    ip netns exec b rdma link add rxeb type rxe netdev vb || return 1
    ibv_devinfo -d rxea | grep -q PORT_ACTIVE || { ibv_devinfo; return 1; }
    ibv_devinfo -d rxeb | grep -q PORT_ACTIVE || return 1
    echo "rxea and rxeb are PORT_ACTIVE"
}
tb_case rxe-veth-namespaces smoke_rxe

smoke_write_bw() {
    ip netns exec a timeout 300 ib_write_bw -d rxea -s 65536 -n 100 -F >/tmp/bw-server.log 2>&1 &
    local srv=$!
    # The guest is slow: wait until the server listens instead of guessing a delay.
    for _ in $(seq 1 120); do
        ip netns exec a ss -ltn 2>/dev/null | grep -q ':18515 ' && break
        kill -0 $srv 2>/dev/null || { echo "ib_write_bw server exited:"; cat /tmp/bw-server.log; return 1; }
        sleep 1
    done
    timeout 300 ip netns exec b ib_write_bw -d rxeb -s 65536 -n 100 -F 10.99.0.1 >/tmp/bw-client.log 2>&1
    local rc=$?
    wait $srv
    cat /tmp/bw-client.log
    [ $rc = 0 ] && grep -qE '^ *65536 +100 ' /tmp/bw-client.log
}
tb_case ib-write-bw-over-rxe smoke_write_bw

# Leave nothing behind for later suites in the same boot.
ip netns exec a rdma link delete rxea 2>/dev/null
ip netns exec b rdma link delete rxeb 2>/dev/null
ip netns del a 2>/dev/null; ip netns del b 2>/dev/null
tb_rdma_unload
true

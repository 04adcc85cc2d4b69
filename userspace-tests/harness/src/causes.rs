//! Probable causes of failures, derived from the errno and the node's facts. perftest prints
//! "Couldn't allocate MR" with errno 14 and leaves the user guessing; this maps the same signal
//! to the usual reasons (docs/validation.md, "Probable causes").

use crate::cli::MemKind;
use crate::reg::RegPath;
use crate::sysfs::NodeFacts;

const ENOTSUPP: i32 = 524; // kernel-internal "operation not supported", leaks from nvidia_p2p_*

fn gpu(kind: MemKind) -> bool {
    matches!(kind, MemKind::Cuda | MemKind::CudaDmabuf) || kind.is_emu()
}

fn peer_module_loaded(f: &NodeFacts) -> bool {
    f.modules
        .iter()
        .any(|m| m == "nvpeer" || m == "nvidia_peermem" || m == "nv_peer_mem")
}

/// Probable cause of a failed registration.
pub fn registration(
    kind: MemKind,
    path: RegPath,
    errno: Option<i32>,
    size: u64,
    f: &NodeFacts,
) -> String {
    let e = errno.unwrap_or(0);
    match (path, e) {
        (RegPath::DmaBuf, libc::EOPNOTSUPP | libc::EPROTONOSUPPORT) => {
            "dma-buf unsupported: the kernel RDMA stack or the NIC provider cannot import dma-bufs \
             (needs kernel >= 5.12 with ib_umem_dmabuf_get, rdma-core >= 34, a provider that implements it)"
                .into()
        }
        (RegPath::DmaBuf, libc::ENOSYS) => "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core too old)".into(),
        (RegPath::DmaBuf, libc::EBADF) => "the dma-buf fd is not valid (export failed or was closed)".into(),
        #[cfg(feature = "bench")]
        (RegPath::EmuCore, libc::ENODEV) => {
            "the core emulator has no PCI DMA device (QEMU edu device missing from the VM)".into()
        }
        #[cfg(feature = "bench")]
        (RegPath::EmuCore, libc::EFAULT) if !peer_module_loaded(f) && f.peer_clients.is_empty() => {
            "no peer-memory client is registered with the core emulator: load nvpeer (or classic_peer)".into()
        }
        (path, libc::EFAULT) if (path == RegPath::VaMr || path.is_emu_core()) && gpu(kind) => {
            if path == RegPath::VaMr && !f.peer_api {
                "no peer-memory API: this kernel's ib_core is the inbox one (no ib_register_peer_memory_client); \
                 GPU memory can only be registered through MLNX_OFED/DOCA-OFED or through dma-buf (--mem cuda-dmabuf)"
                    .into()
            } else if !peer_module_loaded(f) {
                "peer-memory module not loaded: modprobe nvidia-peermem (nvpeer as DKMS installs it; nothing claimed the GPU range)".into()
            } else if f.peer_sysfs && f.peer_clients.is_empty() {
                "a peer-memory module is loaded but no client is registered under /sys/kernel/mm/memory_peers \
                 (see dmesg for its init message)"
                    .into()
            } else {
                "the peer client did not claim the range: GPU without GPUDirect RDMA (GeForce), memory not from \
                 cuMemAlloc (managed/VMM without gpuDirectRDMACapable), or a stale pointer"
                    .into()
            }
        }
        (_, libc::ENOMEM) if gpu(kind) => format!(
            "out of BAR1 space or RLIMIT_MEMLOCK too low for {size} bytes: check `nvidia-smi -q -d memory` \
             (BAR1 free) and `ulimit -l`; many small or leaked pins fragment BAR1"
        ),
        (_, libc::ENOMEM) => "RLIMIT_MEMLOCK too low (ulimit -l) or the device's MR table is full".into(),
        (_, libc::EPERM) => "not allowed to pin memory: RLIMIT_MEMLOCK is 0 and no CAP_IPC_LOCK".into(),
        (_, ENOTSUPP) | (RegPath::VaMr, libc::EOPNOTSUPP) if gpu(kind) => {
            "topology: the GPU refused to map its pages for this NIC (nvidia_p2p_dma_map_pages -ENOTSUPP): \
             GPU and NIC under different root complexes, ACS redirecting peer traffic, or IOMMU in translated mode; \
             run `nvpeer doctor`"
                .into()
        }
        (_, libc::EINVAL) if gpu(kind) => {
            "rejected as invalid: range not inside one GPU allocation, persistent pinning on MIG/vGPU, \
             or an access flag the NIC lacks"
                .into()
        }
        (_, libc::EINVAL) => "rejected as invalid: zero length, access flags, or size above max_mr_size".into(),
        (_, libc::EFAULT) => "bad address: the range is not mapped in this process".into(),
        (_, libc::EIO) => "the NIC failed to create the memory key (firmware/driver error; see dmesg)".into(),
        (_, 0) => "no errno reported".into(),
        (_, n) => format!("errno {n} ({})", std::io::Error::from_raw_os_error(n)),
    }
}

/// Probable cause of a failed work completion.
pub fn completion(status: u32, freed: bool) -> String {
    match status {
        10 if freed => "the target MR was invalidated (GPU memory freed): expected after invalidation".into(),
        10 => "remote access error: wrong rkey/range, missing remote access flag, or the MR was revoked".into(),
        4 if freed => "the local MR was invalidated (GPU memory freed)".into(),
        4 => "local protection error: lkey invalid or the MR was revoked".into(),
        8 => "local access error: the NIC could not DMA local memory (IOMMU fault, ACS, revoked MR)".into(),
        12 => "transport retry exceeded: no path to the peer (GID/route/MTU), link down, or peer QP gone".into(),
        13 => "receiver not ready: the peer posted no receive buffer".into(),
        5 => "flushed because an earlier request on the QP failed".into(),
        1 => "length error: receive buffer smaller than the message".into(),
        _ => "see the status name; check dmesg on both nodes".into(),
    }
}

/// Probable cause when the RDMA device cannot be used at all.
pub fn device(err: &crate::verbs::VerbsError) -> String {
    use crate::verbs::VerbsError as V;
    use nvpeer_doctor::probes::DeviceListFailure as F;
    match err {
        V::NoList(F::NoLibrary) => {
            "libibverbs is not installed (Debian/Ubuntu: libibverbs1 and ibverbs-providers; DOCA-OFED \
             ships its own)"
                .into()
        }
        V::NoList(F::NoKernelSupport) => {
            "libibverbs is installed, the kernel's verbs interface is not: load the NIC's RDMA driver \
             and ib_uverbs (`modprobe mlx5_ib ib_uverbs`; /sys/class/infiniband_verbs must exist)"
                .into()
        }
        V::NoList(F::Other(_)) => {
            "libibverbs could not list the RDMA devices: see `ibv_devices` and dmesg".into()
        }
        V::NoDevice => {
            "no RDMA device: load the NIC's RDMA driver (mlx5_ib, ...) or, for tests, rdma_rxe \
                        (`rdma link add rxe0 type rxe netdev eth0`)"
                .into()
        }
        V::NotFound(..) => "no device of that name: see `ibv_devices`".into(),
        V::PortDown { .. } => "port not ACTIVE: link down, cable, or no subnet manager (IB)".into(),
        _ => "see the message".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(modules: &[&str], peer_api: bool, clients: &[&str]) -> NodeFacts {
        NodeFacts {
            modules: modules.iter().map(|s| s.to_string()).collect(),
            peer_api,
            peer_clients: clients.iter().map(|s| s.to_string()).collect(),
            peer_sysfs: true,
            ..Default::default()
        }
    }

    #[test]
    fn efault_on_gpu_memory_explains_itself() {
        let inbox = facts(&["ib_core"], false, &[]);
        assert!(
            registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 1, &inbox)
                .contains("no peer-memory API")
        );
        let no_mod = facts(&["ib_core"], true, &[]);
        assert!(
            registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 1, &no_mod)
                .contains("module not loaded")
        );
        let no_client = facts(&["nvpeer"], true, &[]);
        assert!(registration(
            MemKind::Cuda,
            RegPath::VaMr,
            Some(libc::EFAULT),
            1,
            &no_client
        )
        .contains("no client"));
        let all = facts(&["nvpeer"], true, &["nv_mem"]);
        assert!(
            registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 1, &all)
                .contains("GeForce")
        );
        // A DOCA-OFED core on a kernel without the mm_kobj export lists no clients at all.
        let doca = NodeFacts {
            peer_sysfs: false,
            ..facts(&["nvidia_peermem"], true, &[])
        };
        assert!(
            registration(MemKind::Cuda, RegPath::VaMr, Some(libc::EFAULT), 1, &doca)
                .contains("GeForce")
        );
        // Host memory EFAULT is just a bad address.
        assert!(
            registration(MemKind::Host, RegPath::VaMr, Some(libc::EFAULT), 1, &all)
                .contains("bad address")
        );
    }

    #[test]
    fn other_errnos() {
        let f = facts(&["nvpeer"], true, &["nv_mem"]);
        assert!(registration(
            MemKind::CudaDmabuf,
            RegPath::DmaBuf,
            Some(libc::EOPNOTSUPP),
            1,
            &f
        )
        .contains("dma-buf unsupported"));
        assert!(registration(
            MemKind::CudaDmabuf,
            RegPath::DmaBuf,
            Some(libc::EPROTONOSUPPORT),
            1,
            &f
        )
        .contains("dma-buf"));
        assert!(registration(
            MemKind::Cuda,
            RegPath::VaMr,
            Some(libc::ENOMEM),
            1 << 30,
            &f
        )
        .contains("BAR1"));
        assert!(registration(MemKind::Cuda, RegPath::VaMr, Some(524), 1, &f).contains("topology"));
        assert!(
            registration(MemKind::Host, RegPath::VaMr, Some(libc::EPERM), 1, &f)
                .contains("MEMLOCK")
        );
        #[cfg(feature = "bench")]
        {
            assert!(
                registration(MemKind::Emu, RegPath::EmuCore, Some(libc::ENODEV), 1, &f)
                    .contains("edu")
            );
            let none = facts(&[], false, &[]);
            assert!(
                registration(MemKind::Emu, RegPath::EmuCore, Some(libc::EFAULT), 1, &none)
                    .contains("classic_peer")
            );
        }
        assert!(
            registration(MemKind::Host, RegPath::VaMr, Some(libc::E2BIG), 1, &f)
                .starts_with("errno 7")
        );
    }

    #[test]
    fn completions() {
        assert!(completion(10, true).contains("invalidated"));
        assert!(completion(10, false).contains("rkey"));
        assert!(completion(12, false).contains("retry"));
        assert!(completion(5, false).contains("flushed"));
    }
}

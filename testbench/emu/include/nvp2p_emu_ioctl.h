/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * nvp2p_emu_ioctl.h -- userspace ABI of /dev/nvp2p_emu, the control device of
 * the nvpeer NVIDIA P2P provider emulator (testbench/emu/nvp2p).
 *
 * Every structure has fixed-size members only (__u64/__u32/__s32), no
 * implicit padding, and the same layout on every 64-bit and 32-bit ABI.
 * Pointers to user buffers travel as __u64. Unknown flag bits, nonzero
 * reserved members and out-of-range values are rejected with -EINVAL.
 *
 * The device is the "GPU driver" of a process: memory allocated through a
 * file descriptor belongs to the process that issued ALLOC (its tgid) and is
 * freed, with free callbacks, when that descriptor is released (= process
 * exit / nvidia fd close), unless freed before.
 *
 * Documentation: docs/emulators.md, section "NVIDIA P2P provider emulator".
 */
#ifndef _UAPI_NVP2P_EMU_IOCTL_H
#define _UAPI_NVP2P_EMU_IOCTL_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define NVP2P_EMU_DEVICE        "/dev/nvp2p_emu"
#define NVP2P_EMU_IOC_MAGIC     0xE7
#define NVP2P_EMU_GPU_PAGE_SIZE 0x10000ULL      /* 64 KiB */

/* ---- ALLOC: "cudaMalloc" ------------------------------------------------ */

/* Allocation flags (nvp2p_emu_alloc.flags). */
#define NVP2P_EMU_ALLOC_COHERENT  (1u << 0) /* Grace/C2C-like: v2 tables get CPU_CACHEABLE, FORCE_BAR1 allowed */
#define NVP2P_EMU_ALLOC_MIG       (1u << 1) /* MIG instance: FORCE_BAR1 persistent pins -> -ENOTSUPP */
#define NVP2P_EMU_ALLOC_VGPU      (1u << 2) /* vGPU: persistent pins -> -ENOTSUPP */
/*
 * A range the CUDA driver never registered with RM's third-party P2P object
 * (memory that is not GPUDirect RDMA capable: a default pool, VMM memory
 * without gpuDirectRDMACapable, managed, pinned host): RM finds no registered
 * video memory at the address and every get_pages flavour fails with -EINVAL.
 */
#define NVP2P_EMU_ALLOC_NO_P2P    (1u << 3)
#define NVP2P_EMU_ALLOC_FLAGS_ALL (NVP2P_EMU_ALLOC_COHERENT | NVP2P_EMU_ALLOC_MIG | \
				   NVP2P_EMU_ALLOC_VGPU | NVP2P_EMU_ALLOC_NO_P2P)

struct nvp2p_emu_alloc {
	__u64 size;      /* in: bytes, > 0, rounded up to 64 KiB */
	__u32 flags;     /* in: NVP2P_EMU_ALLOC_* */
	__u32 reserved;  /* in: 0 */
	__u64 va;        /* out: 64 KiB aligned user VA in the caller (VM_IO|VM_PFNMAP: GUP fails) */
	__u64 handle;    /* out: allocation id (nonzero) */
	__u64 p2p_token; /* out: legacy token for get_pages(token, va_space, ...) */
	__u32 va_space;  /* out: legacy va_space for the same */
	__u32 pad;       /* out: 0 */
};

/* ---- FREE: "cudaFree" --------------------------------------------------- */
/*
 * Frees the caller's allocation that starts at va (or, if va == 0, the one
 * with this handle). On the calling thread, with the RM lock held: every
 * live non-persistent pin of the allocation gets its free callback, then its
 * page table and DMA mappings are unmapped, poisoned and quarantined, BAR1 is
 * released. Persistent pins stay valid until put_pages_persistent. The user
 * mapping is removed when the caller is the owning process.
 */
struct nvp2p_emu_free {
	__u64 va;        /* in */
	__u64 handle;    /* in: used when va == 0 */
	__u32 callbacks; /* out: free callbacks run */
	__u32 pad;       /* in: 0 */
};

/* ---- DESTROY_CONTEXT / SIMULATE_PROCESS_EXIT / GPU_TEARDOWN -------------- */
/*
 * Free every allocation of process tgid (0 = the caller), with callbacks on
 * the calling thread. SIMULATE_PROCESS_EXIT also runs automatically when the
 * allocating descriptor is released. GPU_TEARDOWN frees every allocation of
 * every process (tgid ignored).
 */
struct nvp2p_emu_pid_op {
	__s32 tgid;      /* in */
	__u32 callbacks; /* out: free callbacks run */
	__u32 allocs;    /* out: allocations freed */
	__u32 pad;       /* in: 0 */
};

/* ---- LIST --------------------------------------------------------------- */

#define NVP2P_EMU_LIST_ALLOCS 0
#define NVP2P_EMU_LIST_PINS   1

/* Allocation states. */
#define NVP2P_EMU_ALLOC_LIVE  0
#define NVP2P_EMU_ALLOC_FREED 1 /* freed, still backing persistent pins */

struct nvp2p_emu_alloc_info {
	__u64 handle;
	__u64 va;
	__u64 size;
	__s32 tgid;
	__u32 flags;     /* NVP2P_EMU_ALLOC_* */
	__u32 state;     /* NVP2P_EMU_ALLOC_LIVE / _FREED */
	__u32 pins;      /* pins (any kind) holding it */
	__u64 first_phys; /* physical address of the first 64 KiB page */
};

/* Pin states. */
#define NVP2P_EMU_PIN_PINNING   0 /* inside get_pages, callback not yet registered */
#define NVP2P_EMU_PIN_LIVE      1
#define NVP2P_EMU_PIN_CALLBACK  2 /* free callback running */

struct nvp2p_emu_pin_info {
	__u64 id;
	__u64 alloc_handle;
	__u64 va;
	__u64 len;
	__s32 tgid;      /* pinning process */
	__u32 persistent;
	__u32 state;     /* NVP2P_EMU_PIN_* */
	__u32 mappings;  /* live DMA mappings */
};

struct nvp2p_emu_list {
	__u32 kind;      /* in: NVP2P_EMU_LIST_* */
	__u32 cap;       /* in: capacity of buf, in records */
	__u64 buf;       /* in: user pointer to records (may be 0 when cap == 0) */
	__u32 count;     /* out: records that exist (copied: min(count, cap)) */
	__u32 pad;       /* in: 0 */
};

/* ---- fault injection ---------------------------------------------------- */

/* Provider entry points (also the index of the per-call counters). */
#define NVP2P_EMU_OP_GET_PAGES             0
#define NVP2P_EMU_OP_GET_PAGES_PERSISTENT  1
#define NVP2P_EMU_OP_PUT_PAGES             2
#define NVP2P_EMU_OP_PUT_PAGES_PERSISTENT  3
#define NVP2P_EMU_OP_DMA_MAP               4
#define NVP2P_EMU_OP_DMA_UNMAP             5
#define NVP2P_EMU_OP_FREE_PAGE_TABLE       6
#define NVP2P_EMU_OP_FREE_DMA_MAPPING      7
#define NVP2P_EMU_OP_INIT_MAPPING          8
#define NVP2P_EMU_OP_DESTROY_MAPPING       9
#define NVP2P_EMU_OP_REGISTER_RSYNC        10
#define NVP2P_EMU_OP_UNREGISTER_RSYNC      11
#define NVP2P_EMU_OP_GET_RSYNC_REGS        12
#define NVP2P_EMU_OP_PUT_RSYNC_REGS        13
#define NVP2P_EMU_OP_COUNT                 14
#define NVP2P_EMU_OP_SLOTS                 16 /* array size in the ABI */
#define NVP2P_EMU_FAULT_OPS                6  /* ops 0..5 accept faults */

#define NVP2P_EMU_FAULT_OFF     0 /* clear the fault of this op */
#define NVP2P_EMU_FAULT_ONCE    1 /* let `skip` calls pass, fail the next one, then off */
#define NVP2P_EMU_FAULT_EVERY_N 2 /* after `skip` calls, fail every n-th call */

struct nvp2p_emu_fault {
	__u32 op;        /* in: NVP2P_EMU_OP_* < NVP2P_EMU_FAULT_OPS */
	__u32 mode;      /* in: NVP2P_EMU_FAULT_* */
	__s32 err;       /* in: negative errno to return, -4095..-1 (e.g. -524 = -ENOTSUPP) */
	__u32 n;         /* in: EVERY_N period, >= 1 */
	__u32 skip;      /* in: calls to let pass first */
	__u32 pad;       /* in: 0 */
	__u64 injected;  /* out: failures injected so far for this op */
};

/* ---- configuration (GET returns the current one; SET replaces it) ------- */

struct nvp2p_emu_config {
	__u32 pt_abi;               /* 1: tables report 0x00010002, no flags; 2: 0x00020000 */
	__u32 reserved0;            /* 0 */
	__u64 bar1_budget;          /* bytes of BAR1 pins may use (0 = unlimited) */
	__u64 cb_delay_ns;          /* sleep after taking the RM lock, before calling a free callback */
	__u64 cb_after_delay_ns;    /* sleep after the callback returned, before teardown */
	__u64 reg_window_delay_ns;  /* get_pages: sleep between pinning and callback registration (RM lock dropped) */
	/*
	 * The RM cost model: time spent with the RM lock held, per call and per
	 * 64 KiB page of the call (dma_unmap_pages takes no RM lock: no cost).
	 */
	__u64 get_cost_ns;          /* get_pages, get_pages_persistent: per call */
	__u64 get_page_cost_ns;     /*   plus per page pinned */
	__u64 unmap_delay_ns;       /* dma_unmap_pages: sleep after reading the table (widens H2) */
	__u64 map_cost_ns;          /* dma_map_pages: per call */
	__u64 map_page_cost_ns;     /*   plus per page mapped */
	__u64 put_cost_ns;          /* put_pages, put_pages_persistent: per call */
	__u64 put_page_cost_ns;     /*   plus per page released */
};

/* ---- statistics and violations ------------------------------------------ */

/* Contract violations (index into nvp2p_emu_stats.violations). */
#define NVP2P_EMU_V_CALL_IN_CALLBACK     0  /* get/put/map (RM-lock call) from inside a free callback */
#define NVP2P_EMU_V_UNMAP_IN_CALLBACK    1  /* retired: dma_unmap_pages in a free callback is legal */
#define NVP2P_EMU_V_FREED_TABLE          2  /* call with a page table that was torn down (poisoned) */
#define NVP2P_EMU_V_UNKNOWN_TABLE        3  /* call with a pointer that never was a page table of ours */
#define NVP2P_EMU_V_WRONG_PEER           4  /* dma_unmap peer != mapping's pci_dev */
#define NVP2P_EMU_V_WRONG_PROCESS_PUT    5  /* put_pages from a tgid other than the pinning one */
#define NVP2P_EMU_V_DOUBLE_PUT           6  /* second put of the same pin */
#define NVP2P_EMU_V_LEAKED_PIN           7  /* pin alive at unload / reset-check */
#define NVP2P_EMU_V_STALE_MAPPING        8  /* dma_unmap of a mapping already unmapped/torn down */
#define NVP2P_EMU_V_RESERVED9           9  /* unused (reads/writes of freed tables: KASAN) */
#define NVP2P_EMU_V_UNMAP_RACES_TEARDOWN 10 /* dma_unmap still running when teardown freed the table */
#define NVP2P_EMU_V_DMA_NOT_STOPPED      11 /* callback returned, the core says DMA still live */
#define NVP2P_EMU_V_TABLE_MODIFIED       12 /* client changed a field of a live table */
#define NVP2P_EMU_V_PUT_VA_MISMATCH      13 /* put with a va different from the pinned one */
/*
 * dma_map_pages on a table a free callback on another thread freed before or while it ran (real
 * driver: use-after-free read of the table, then a write into its freed container in
 * nv_p2p_insert_dma_mapping)
 */
#define NVP2P_EMU_V_DMA_MAP_UAF          14
/* put_pages_persistent on a table of get_pages (real driver: NULL dereference) */
#define NVP2P_EMU_V_PUT_PERSISTENT_ON_NONPERSISTENT 15
/*
 * the *page_table a failed get_pages(_persistent) left behind passed back to the API (real
 * driver: a pointer to the freed table)
 */
#define NVP2P_EMU_V_DANGLING_OUT_PARAM   16
#define NVP2P_EMU_V_COUNT                17
#define NVP2P_EMU_V_SLOTS                32 /* array size in the ABI */

struct nvp2p_emu_stats {
	__u64 calls[NVP2P_EMU_OP_SLOTS];
	__u64 failures[NVP2P_EMU_OP_SLOTS];       /* calls that returned nonzero (incl. injected) */
	__u64 violations[NVP2P_EMU_V_SLOTS];
	__u64 violations_total;
	__u64 live_allocs;
	__u64 live_pins;                          /* pins not yet put/torn down */
	__u64 live_persistent_pins;
	__u64 pinned_pages;                       /* 64 KiB pages held by live pins */
	__u64 live_mappings;
	__u64 callbacks;                          /* free callbacks run */
	__u64 put_after_teardown;                 /* put_pages that found the pin torn down (legal) */
	__u64 bar1_used;
	__u64 quarantined;                        /* torn-down tables+mappings kept poisoned */
	__u64 free_calls_in_callback;             /* free_page_table/free_dma_mapping inside a callback */
	__u64 api_window_hits;                    /* dma_map_pages whose table a free callback run by
						   * another task tore down (before the call or while it
						   * waited for the RM lock): the window of the NVIDIA
						   * API that no client of the non-persistent API can
						   * close. Always equal to
						   * violations[NVP2P_EMU_V_DMA_MAP_UAF] (each hit is
						   * recorded as that violation); the call fails with
						   * -EINVAL
						   */
	__u64 api_ns;                             /* wall time inside get/put/map/unmap entry
						   * points, all tasks summed (modelled RM
						   * cost and waits for the RM lock included)
						   */
	__u64 model_ns;                           /* modelled RM time asked for (cost model) */
	__u64 delay_ns;                           /* time the model's waits took: model_ns
						   * plus their overshoot
						   */
	__u64 reserved[1];
};

/* ---- in-kernel test client (drives the kernel API from userspace) ------- */
/*
 * A minimal peer-memory client living in the emulator, so a suite can pin,
 * map, unmap and put without another module. Records belong to the fd.
 */
#define NVP2P_EMU_CLIENT_PIN    0 /* get_pages(_persistent) in the caller's context; out: handle */
#define NVP2P_EMU_CLIENT_MAP    1 /* dma_map_pages for the peer (default: QEMU edu 1234:11e8) */
#define NVP2P_EMU_CLIENT_UNMAP  2 /* dma_unmap_pages */
#define NVP2P_EMU_CLIENT_UNPIN  3 /* put_pages(_persistent) */
#define NVP2P_EMU_CLIENT_STATUS 4 /* refresh the out fields; ret: what the last NVIDIA call made
				   * by the record's free callback returned (0 if none)
				   */
#define NVP2P_EMU_CLIENT_CLOSE  5 /* drop the record (unmaps/puts what is still held) */

#define NVP2P_EMU_CLIENT_F_PERSISTENT     (1u << 0) /* PIN: use the persistent API */
#define NVP2P_EMU_CLIENT_F_PUT_IN_CB      (1u << 1) /* PIN: callback calls put_pages (bad client) */
#define NVP2P_EMU_CLIENT_F_UNMAP_IN_CB    (1u << 2) /* PIN: callback calls dma_unmap_pages (bad client) */
#define NVP2P_EMU_CLIENT_F_NULL_CB        (1u << 3) /* PIN: pass a NULL callback */
#define NVP2P_EMU_CLIENT_F_NULL_DATA      (1u << 4) /* PIN: pass NULL data */
#define NVP2P_EMU_CLIENT_F_FORCE_BAR1     (1u << 5) /* PIN persistent: NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING */
#define NVP2P_EMU_CLIENT_F_TOKEN          (1u << 6) /* PIN: use the allocation's p2p_token/va_space */
#define NVP2P_EMU_CLIENT_F_WRONG_PEER     (1u << 7) /* UNMAP: pass a different pci_dev than mapped */
#define NVP2P_EMU_CLIENT_F_FREE_IN_CB     (1u << 8) /* PIN: callback calls free_dma_mapping/free_page_table */
#define NVP2P_EMU_CLIENT_F_KEEP_FAILED_PT (1u << 9) /* PIN: keep what a failed get_pages left in
						     * *page_table; MAP/UNPIN pass it back (bad client)
						     */
#define NVP2P_EMU_CLIENT_F_PUT_PERSISTENT (1u << 10) /* UNPIN: put_pages_persistent whatever
						      * the pin's kind (bad client)
						      */
#define NVP2P_EMU_CLIENT_F_PUT_NONPERSISTENT (1u << 11) /* UNPIN: put_pages whatever the
							 * pin's kind (bad client)
							 */
#define NVP2P_EMU_CLIENT_F_PUT_WRONG_VA   (1u << 12) /* UNPIN: put_pages with the pinned va
						      * plus 64 KiB (bad client)
						      */
#define NVP2P_EMU_CLIENT_F_ODD_FLAGS     (1u << 13) /* PIN persistent: add flag bits no
						     * driver defines (0x1fe)
						     */
#define NVP2P_EMU_CLIENT_F_ALL            0x3fffu

struct nvp2p_emu_client {
	__u32 op;        /* in: NVP2P_EMU_CLIENT_* */
	__u32 flags;     /* in: NVP2P_EMU_CLIENT_F_* */
	__u64 handle;    /* in (all but PIN) / out (PIN) */
	__u64 va;        /* in: PIN */
	__u64 len;       /* in: PIN */
	__u32 peer_bdf;  /* in: MAP: (bus << 8) | devfn; 0xffffffff = first QEMU edu device */
	__u32 peer_domain; /* in: MAP */
	__s32 ret;       /* out: return value of the NVIDIA call (the ioctl itself returns 0 when the op ran) */
	__u32 callbacks; /* out: free callbacks received for this record */
	__u32 pt_version;   /* out: page_table->version */
	__u32 pt_entries;   /* out: page_table->entries */
	__u32 pt_page_size; /* out: page_table->page_size */
	__u32 pt_flags;     /* out: page_table->flags (v2 only, else 0) */
	__u64 phys0;        /* out: pages[0]->physical_address */
	__u64 phys1;        /* out: pages[1]->physical_address (0 if one page) */
	__u32 map_version;  /* out: dma_mapping->version */
	__u32 map_entries;  /* out: dma_mapping->entries */
	__u64 dma0;         /* out: dma_addresses[0] */
	__u64 dma1;         /* out: dma_addresses[1] */
	__u32 state;        /* out: bit0 pinned, bit1 mapped, bit2 revoked by callback,
			     * bit3 the failed PIN left *page_table non-NULL (dangling)
			     */
	__u32 pad;          /* in: 0 */
};

#define NVP2P_EMU_CLIENT_S_PINNED  (1u << 0)
#define NVP2P_EMU_CLIENT_S_MAPPED  (1u << 1)
#define NVP2P_EMU_CLIENT_S_REVOKED (1u << 2)
#define NVP2P_EMU_CLIENT_S_PT_DANGLING (1u << 3)

/* ---- ioctl numbers ------------------------------------------------------ */

#define NVP2P_EMU_IOC_ALLOC           _IOWR(NVP2P_EMU_IOC_MAGIC, 0x00, struct nvp2p_emu_alloc)
#define NVP2P_EMU_IOC_FREE            _IOWR(NVP2P_EMU_IOC_MAGIC, 0x01, struct nvp2p_emu_free)
#define NVP2P_EMU_IOC_LIST            _IOWR(NVP2P_EMU_IOC_MAGIC, 0x02, struct nvp2p_emu_list)
#define NVP2P_EMU_IOC_DESTROY_CONTEXT _IOWR(NVP2P_EMU_IOC_MAGIC, 0x03, struct nvp2p_emu_pid_op)
#define NVP2P_EMU_IOC_PROCESS_EXIT    _IOWR(NVP2P_EMU_IOC_MAGIC, 0x04, struct nvp2p_emu_pid_op)
#define NVP2P_EMU_IOC_GPU_TEARDOWN    _IOWR(NVP2P_EMU_IOC_MAGIC, 0x05, struct nvp2p_emu_pid_op)
#define NVP2P_EMU_IOC_SET_FAULT       _IOWR(NVP2P_EMU_IOC_MAGIC, 0x06, struct nvp2p_emu_fault)
#define NVP2P_EMU_IOC_GET_CONFIG      _IOWR(NVP2P_EMU_IOC_MAGIC, 0x07, struct nvp2p_emu_config)
#define NVP2P_EMU_IOC_SET_CONFIG      _IOWR(NVP2P_EMU_IOC_MAGIC, 0x08, struct nvp2p_emu_config)
#define NVP2P_EMU_IOC_STATS           _IOWR(NVP2P_EMU_IOC_MAGIC, 0x09, struct nvp2p_emu_stats)
/*
 * RESET: clears faults, counters, violations and the quarantine (checking the
 * poison first); restores the default config. Live allocations and pins are
 * kept.
 */
#define NVP2P_EMU_IOC_RESET           _IO(NVP2P_EMU_IOC_MAGIC, 0x0a)
#define NVP2P_EMU_IOC_CLIENT          _IOWR(NVP2P_EMU_IOC_MAGIC, 0x0b, struct nvp2p_emu_client)
/*
 * CHECK_LEAKS: records a LEAKED_PIN violation for every live pin; returns
 * the number of live pins (>= 0).
 */
#define NVP2P_EMU_IOC_CHECK_LEAKS     _IO(NVP2P_EMU_IOC_MAGIC, 0x0c)

#endif /* _UAPI_NVP2P_EMU_IOCTL_H */

/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * nvpeer test bench: userspace ABI of peer_mem_emu.ko, the emulated OFED
 * peer-memory core, driven through /dev/peer_mem_emu.
 *
 * Every structure is fixed-size, made of __u64/__u32 (and __u8 arrays), with
 * explicit padding, so its layout is the same for every compiler and for the
 * Rust bindings.  All "out" fields are written by the kernel; "in" fields are
 * read.  Reserved fields must be zero on input (else -EINVAL).
 *
 * Registrations (emulated MRs) belong to the open file they were created on:
 * closing the last reference of that file deregisters all of them, like
 * uverbs teardown.  A file passed to or inherited by another process can be
 * used from there (dereg from another pid).
 */
#ifndef PEER_MEM_EMU_IOCTL_H
#define PEER_MEM_EMU_IOCTL_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define PME_DEVICE_PATH		"/dev/peer_mem_emu"
#define PME_ABI_VERSION		1
#define PME_IOC_MAGIC		0xE8	/* 0xE7 is nvp2p_emu */

#define PME_NAME_MAX		64	/* = IB_PEER_MEMORY_NAME_MAX */
#define PME_VERSION_MAX		16	/* = IB_PEER_MEMORY_VER_MAX */
#define PME_TEXT_MAX		192	/* violation message, NUL-terminated */

/* ---- OFED core models (pme_config.model) ---- */
enum pme_model {
	/*
	 * MLNX_OFED 4.0-4.9 LTS: u64 tickets, get_pages gets a non-NULL sg_head,
	 * page_shift before dma_map, the HCA's invalidation deregisters the
	 * whole MR inside invalidate (dma_unmap + put_pages + release), an
	 * invalidation before activation fails the activation, 6 mandatory ops,
	 * clients with get_context_private_data set are skipped.
	 */
	PME_MODEL_4_9 = 1,
	/*
	 * OFED 5.1-5.4: xarray ids, mapping_lock, "mapped" bool, no
	 * INVALIDATE_UNMAPS: invalidate and dereg call dma_unmap/put_pages
	 * under mapping_lock (lock inversion #2696789 with NVIDIA). page_shift
	 * before dma_map.
	 */
	PME_MODEL_5_1 = 2,
	/*
	 * OFED 5.1-2.5.8 hotfix / 5.4-3: 3-state machine + INVALIDATE_UNMAPS,
	 * still page_shift before dma_map (no SGL trimming).
	 */
	PME_MODEL_5_4HF = 3,
	/*
	 * OFED 5.5 to 23.10: INVALIDATE_UNMAPS, get_page_size after dma_map
	 * with SGL trimming/restoration, on a kernel that still exports mm_kobj
	 * (the memory_peers directory exists).  The pre-25.04 stop-notifier
	 * lock bug is PME_CFG_STOP_NOTIFIER_BUG.
	 */
	PME_MODEL_5_5 = 4,
	/*
	 * DOCA-OFED 3.x (OFED 24.04 and later) on a kernel that does not export
	 * mm_kobj (every kernel that runs Rust modules; default): the 5.5
	 * callbacks, but peer_mem.c compiles its sysfs code only under
	 * HAVE_MM_KOBJ_EXPORTED, so there is no memory_peers directory and
	 * ib_register_peer_memory_client compares no names: a second client of
	 * an existing name is accepted, and registrations go to the client
	 * registered first (the core asks the clients in list order).
	 */
	PME_MODEL_DOCA3 = 5,
};
/* What each model does its own way: struct pme_model_traits (peer_mem/pme.h). */

/* pme_config.flags */
#define PME_CFG_STOP_NOTIFIER_BUG (1u << 0) /* pre-25.04 inverted lock condition */
#define PME_CFG_SYSFS		  (1u << 1) /* /sys/kernel/mm/memory_peers (default on) */
#define PME_CFG_DEREG_PAGES_QUIRK (1u << 2) /* num_dereg_pages reads the zeroed table (default on) */
#define PME_CFG_STRICT_SG	  (1u << 3) /* header rule: put_pages frees the sg_table (H9 flagged) */
#define PME_CFG_LOCKDEP_INVAL	  (1u << 4) /* tell lockdep that invalidate takes mapping_lock
					     * (reports the inherent H4 / #2696789 cycle with
					     * the provider's lock; default off)
					     */
#define PME_CFG_ACQUIRE_IN_INVAL  (1u << 5) /* planted lock inversion: invalidate asks the
					     * client's acquire for the same range, with the
					     * provider's lock held (lockdep must report it;
					     * default off)
					     */
#define PME_CFG_ALL_FLAGS	  0x3fu

struct pme_config {
	__u32 model;		/* enum pme_model */
	__u32 flags;		/* PME_CFG_* */
	__u32 hang_timeout_ms;	/* lock waits longer than this are recorded as a
				 * deadlock and abandoned; 0 = wait forever
				 */
	__u32 hold_timeout_ms;	/* PME_REG_HOLD: give up waiting for ACTIVATE
				 * after this long (then activates); 0 = 30000
				 */
};

/* ---- registration (emulated ibv_reg_mr / ib_umem_get_peer) ---- */

/* pme_reg.access */
#define PME_ACCESS_LOCAL_WRITE	(1u << 0) /* writable: get_pages force = 0 */
#define PME_ACCESS_ON_DEMAND	(1u << 1) /* rejected with -EOPNOTSUPP */

/* pme_reg.peer_flags (= enum ib_peer_mem_flags) */
#define PME_PEER_ALLOW		(1u << 0)
#define PME_PEER_INVAL_SUPP	(1u << 1)

/* pme_reg.device: the dma_device handed to dma_map */
enum pme_dev {
	PME_DEV_PCI = 0,	/* QEMU edu PCI device 1234:11e8 (-ENODEV if absent) */
	PME_DEV_NONPCI = 1,	/* a faux (non-PCI) device: hazard H6 */
};

/* pme_reg.flags */
#define PME_REG_HOLD		(1u << 0) /* block after dma_map, holding mapping_lock,
					   * until ACTIVATE(handle or 0) from another thread
					   */
#define PME_REG_FAIL_HW		(1u << 1) /* emulate mkey creation failure after dma_map:
					   * stop_invalidation_notifier + release, -EIO
					   */
#define PME_REG_NO_GUP		(1u << 2) /* skip pin_user_pages_fast (go straight to peers) */

/* pme_query.state / pme_reg.state */
enum pme_state {
	PME_ST_HOST = 1,	/* host memory: pinned by GUP, no peer client */
	PME_ST_MAPPED = 2,
	PME_ST_UNMAPPED = 3,
	PME_ST_INVALIDATED = 4,	/* invalidated under INVALIDATE_UNMAPS */
	PME_ST_TORN_DOWN = 5,	/* 4.9: deregistered inside invalidate */
};

struct pme_reg {
	__u64 addr;		/* in: user VA, any alignment */
	__u64 length;		/* in */
	__u32 access;		/* in: PME_ACCESS_* */
	__u32 peer_flags;	/* in: PME_PEER_* */
	__u32 device;		/* in: enum pme_dev */
	__u32 flags;		/* in: PME_REG_* */
	__u32 handle;		/* out: >0, unique per open file */
	__u32 state;		/* out: enum pme_state */
	__u64 core_context;	/* out: id given to get_pages */
	__u32 client_index;	/* out: registration index of the client (peer MRs) */
	__u32 reserved;
};

/* pme_handle_op.flags for ACTIVATE */
#define PME_ACT_FAIL		(1u << 0) /* the held registration fails instead */
/* pme_handle_op.flags for DEREGISTER */
#define PME_DEREG_KWORKER	(1u << 0) /* tear down in a kworker (uverbs disassociate) */

struct pme_handle_op {
	__u32 handle;		/* in: ACTIVATE: 0 = every held registration of this file */
	__u32 flags;		/* in */
};

/* pme_query.flags */
#define PME_QF_PEER		(1u << 0)
#define PME_QF_ACTIVATED	(1u << 1)
#define PME_QF_REVOKED		(1u << 2) /* fake HW revoke happened */
#define PME_QF_INVAL_BEFORE_ACT	(1u << 3)
#define PME_QF_TRIMMED		(1u << 4)
#define PME_QF_HELD		(1u << 5) /* waiting in PME_REG_HOLD */
#define PME_QF_INVALIDATING	(1u << 6) /* client has an invalidate callback */
#define PME_QF_SG_EMPTY		(1u << 7) /* peer MR whose umem sg_table header is zeroed
					   * (after every unmap, and an UNMAPS invalidation)
					   */

struct pme_query {
	__u32 handle;		/* in */
	__u32 state;		/* out: enum pme_state */
	__u32 flags;		/* out: PME_QF_* */
	__u32 nmap;		/* out: entries dma_map reported */
	__u64 core_context;	/* out */
	__u64 page_size;	/* out: get_page_size() */
	__u64 dma_stopped_ns;	/* out: ktime_get_ns() of the fake HW revoke, 0 = not yet */
	__u64 addr;		/* out */
	__u64 length;		/* out */
	__u32 invalidations;	/* out: invalidate calls that found this MR */
	__u32 owner_pid;	/* out: tgid that registered it */
	__u32 client_index;	/* out */
	__u32 reserved;
};

/* ---- fault injection and delays ---- */
enum pme_fault_point {
	PME_FP_UMEM_ALLOC = 0,	/* umem + GUP page array */
	PME_FP_PEER_UMEM_ALLOC,	/* ib_umem_peer allocation after acquire */
	PME_FP_XA_ALLOC,	/* core_context id allocation */
	PME_FP_CLIENT_ALLOC,	/* core object in ib_register_peer_memory_client */
	PME_FP_SYSFS,		/* sysfs kobject of a client */
	PME_FP_HANDLE_ALLOC,	/* handle in the file's table */
	PME_FP_MKEY,		/* fake HW object creation (-EIO by default path) */
	PME_FP_COUNT
};

struct pme_fault {
	__u32 point;		/* in: enum pme_fault_point */
	__u32 error;		/* in: positive errno to inject (0 = ENOMEM); 0 with
				 * times == 0 and nth == 0 disarms
				 */
	__u32 nth;		/* in: fire on the nth hit from now (1 = next hit) */
	__u32 times;		/* in: fire this many consecutive hits (0 = forever) */
};

enum pme_delay_point {
	PME_DP_AFTER_ACQUIRE = 0,	/* global mutex dropped, before mapping_lock */
	PME_DP_AFTER_GET_PAGES,		/* between get_pages and dma_map (mapping_lock held) */
	PME_DP_AFTER_DMA_MAP,		/* after dma_map/page size, before HW object */
	PME_DP_BEFORE_ACTIVATE,		/* HW object created, activation pending */
	PME_DP_DEREG_BEFORE_STOP,	/* dereg: after HW revoke, before stop-notifier */
	PME_DP_IN_STOP,			/* inside stop-notifier, before dma_unmap */
	PME_DP_STOP_TO_RELEASE,		/* between stop-notifier and release() */
	PME_DP_INVALIDATE_LOCKED,	/* invalidate: mapping_lock taken, before revoke */
	PME_DP_COUNT
};

struct pme_delay {
	__u32 point;		/* in: enum pme_delay_point */
	__u32 delay_ms;		/* in: 0 disarms */
};

/* ---- counters and violations ---- */
#define PME_MAX_POINTS 16

struct pme_stats {
	__u64 violations;	/* total recorded violations */
	__u64 deadlocks;	/* lock waits abandoned by the hang detector */
	__u64 core_bug_hits;	/* emulated core defects reached (e.g. stop-notifier bug) */
	__u64 rejected_clients;	/* ib_register_peer_memory_client returned NULL */
	__u64 live_clients;
	__u64 live_mrs;		/* registrations that still exist (all files) */
	__u64 regs_ok;
	__u64 regs_failed;
	__u64 deregs;
	__u64 invalidate_calls;
	__u64 invalidate_unknown; /* unknown core_context */
	__u64 hw_revokes;
	__u64 acquires;		/* successful acquire() */
	__u64 releases;		/* release() calls (or NULL release reached) */
	__u64 delay_hits[PME_MAX_POINTS];  /* times each delay point was reached */
	__u64 fault_fired[PME_MAX_POINTS]; /* times each fault fired */
	__u64 client_calls;	/* calls into client callbacks (acquire ... release) */
	__u64 client_ns;	/* wall time spent inside them, all tasks summed (provider
				 * calls the client makes included)
				 */
};

/* Violation rules (pme_violation.rule); the log line names them as text. */
enum pme_rule {
	PME_R_CLIENT_MODIFIED = 1,	/* client struct changed while registered */
	PME_R_UNREGISTER_IN_CALLBACK,
	PME_R_REGISTER_IN_CALLBACK,
	PME_R_INVALIDATE_IN_CALLBACK,	/* would self-deadlock on mapping_lock */
	PME_R_INVALIDATE_BAD_HANDLE,	/* unknown or unregistered reg_handle */
	PME_R_INVALIDATE_NONINV,	/* handle of a client registered without inv */
	PME_R_INVALIDATE_ATOMIC,	/* invalidate from atomic context */
	PME_R_SG_ENTRY,			/* entry not PAGE_SIZE aligned / multiple */
	PME_R_SG_NMAP,			/* nmap 0 or > allocated entries */
	PME_R_SG_MODIFIED,		/* sg_table changed while mapped */
	PME_R_SG_NOT_FREED,		/* STRICT_SG: put_pages did not free it */
	PME_R_PAGE_SIZE,		/* get_page_size not a power of 2 >= PAGE_SIZE */
	PME_R_DEADLOCK,			/* hang detector fired */
	PME_R_CORE_RELOCK,		/* pre-25.04 stop-notifier self-deadlock */
	PME_R_UNREGISTER_BAD_HANDLE,
	PME_R_CORE_INTERNAL,		/* the emulator broke its own invariant */
	PME_R_LIVE_AT_UNLOAD,		/* clients still registered at rmmod */
	PME_R_SG_DMA,			/* entry not the provider's DMA mapping of the range */
	PME_R_COUNT
};

struct pme_violation {
	__u32 index;		/* in: 0 = oldest kept record */
	__u32 rule;		/* out: enum pme_rule */
	__u32 pid;		/* out */
	__u32 total;		/* out: records kept (at most 64) */
	__u64 ts_ns;		/* out: ktime_get_ns() */
	__u8 text[PME_TEXT_MAX];	/* out */
};

/* pme_client_info.flags */
#define PME_CL_INVALIDATING	(1u << 0) /* registered with a non-NULL inv pointer */
#define PME_CL_EX		(1u << 1) /* detected as peer_memory_client_ex */
#define PME_CL_UNMAPS		(1u << 2) /* ex + PEER_MEM_INVALIDATE_UNMAPS */
#define PME_CL_ZOMBIE		(1u << 3) /* unregister refused (called from a callback) */
#define PME_CL_49_HOOKS		(1u << 4) /* 4.9 view: private-data hooks non-NULL */
#define PME_CL_SYSFS		(1u << 5) /* has a sysfs directory */

struct pme_client_info {
	__u32 index;		/* in: position in registration order (0 = first) */
	__u32 flags;		/* out: PME_CL_* */
	__u64 usecnt;		/* out: acquired, unreleased contexts */
	__u64 reg_id;		/* out: registration sequence number (unique) */
	__u8 name[PME_NAME_MAX];	/* out */
	__u8 version[PME_VERSION_MAX];	/* out (raw 16 bytes) */
};

#define PME_IOC_ABI_VERSION	_IOR(PME_IOC_MAGIC, 0x00, __u32)
#define PME_IOC_REGISTER	_IOWR(PME_IOC_MAGIC, 0x01, struct pme_reg)
#define PME_IOC_ACTIVATE	_IOW(PME_IOC_MAGIC, 0x02, struct pme_handle_op)
#define PME_IOC_DEREGISTER	_IOW(PME_IOC_MAGIC, 0x03, struct pme_handle_op)
#define PME_IOC_QUERY		_IOWR(PME_IOC_MAGIC, 0x04, struct pme_query)
#define PME_IOC_SET_CONFIG	_IOW(PME_IOC_MAGIC, 0x05, struct pme_config)	/* -EBUSY with live MRs if model changes */
#define PME_IOC_GET_CONFIG	_IOR(PME_IOC_MAGIC, 0x06, struct pme_config)
#define PME_IOC_SET_FAULT	_IOW(PME_IOC_MAGIC, 0x07, struct pme_fault)
#define PME_IOC_SET_DELAY	_IOW(PME_IOC_MAGIC, 0x08, struct pme_delay)
#define PME_IOC_GET_STATS	_IOR(PME_IOC_MAGIC, 0x09, struct pme_stats)
#define PME_IOC_GET_VIOLATION	_IOWR(PME_IOC_MAGIC, 0x0a, struct pme_violation)
#define PME_IOC_GET_CLIENT	_IOWR(PME_IOC_MAGIC, 0x0b, struct pme_client_info) /* -ENOENT past the end */
#define PME_IOC_RESET		_IO(PME_IOC_MAGIC, 0x0c) /* counters, violations, faults, delays */

#endif /* PEER_MEM_EMU_IOCTL_H */

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peer_mem_emu: internal declarations shared by the files of the emulated
 * OFED peer-memory core.  See docs/emulators.md, "Peer-memory core emulator".
 */
#ifndef PME_H
#define PME_H

#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/completion.h>
#include <linux/xarray.h>
#include <linux/scatterlist.h>
#include <linux/kobject.h>
#include <rdma/peer_mem.h>
#include "../include/peer_mem_emu_ioctl.h"

#define PME_NO_INVALIDATION_ID U32_MAX

/* enum ib_peer_mem_flags of the HCA-side API */
#define PME_IB_PEER_MEM_ALLOW     (1u << 0)
#define PME_IB_PEER_MEM_INVAL_SUPP (1u << 1)

/*
 * The core's object for one registered client (the opaque reg_handle).
 *
 * Never freed before module unload: unregistered clients stay on the
 * "every handle" list marked dead, so that a stale reg_handle handed to
 * invalidate or unregister is recognised instead of dereferenced.
 */
struct pme_client {
	struct list_head node;		/* pme_clients, registration order */
	struct list_head all_node;	/* pme_all_handles */
	u64 reg_id;
	const struct peer_memory_client *ops;
	/* byte copy of *ops at registration: the client must not change it */
	u8 snapshot[sizeof(struct peer_memory_client_ex)];
	size_t snap_len;
	char name[IB_PEER_MEMORY_NAME_MAX + 1];
	char version[IB_PEER_MEMORY_VER_MAX + 1];
	bool invalidating;		/* registered with a non-NULL inv pointer */
	bool ex;			/* detected as peer_memory_client_ex */
	bool unmaps;			/* ex && PEER_MEM_INVALIDATE_UNMAPS */
	bool hooks49;			/* 4.9 view: private-data hooks non-NULL */
	bool in_list;			/* on pme_clients */
	bool unregistering;
	bool dead;			/* unregister returned */
	bool zombie;			/* unregister abandoned (called from a callback) */
	atomic_t usecnt;		/* 1 + acquired contexts */
	struct completion unreg_done;
	struct kobject *sysfs;		/* memory_peers/<name>, or NULL */
	/* sysfs counters (docs/emulators.md) */
	atomic64_t num_alloc_mrs, num_dealloc_mrs, num_reg_pages, num_dereg_pages;
	atomic64_t num_reg_bytes, num_dereg_bytes;
	u64 num_free_callbacks;		/* under umem_xa's lock, like the real core */
	/* OFED >= 5.1: core_context ids */
	struct xarray umem_xa;
	u32 xa_next;
	/* OFED 4.9: tickets */
	struct mutex lock49;
	struct list_head tickets49;
	u64 next_ticket49;
};

struct pme_file;

struct pme_probe_rec;

/* One emulated MR (ib_umem / ib_umem_peer + the fake HCA object). */
struct pme_mr {
	struct kref ref;
	u32 handle;
	struct pme_file *file;
	pid_t owner_tgid;
	u64 addr, len;
	u32 access, peer_flags, reg_flags;
	bool writable;
	u32 model;			/* enum pme_model at registration */
	u32 cfg_flags;			/* PME_CFG_* at registration */
	struct device *dma_dev;
	struct mm_struct *mm;		/* mmgrab()ed, pinned_vm accounting */
	unsigned long npages;		/* host pages accounted in pinned_vm */
	bool committed;			/* registration finished (visible to DEREGISTER) */
	/* host memory */
	struct page **pages;
	unsigned long npinned;
	/* peer memory */
	bool is_peer;
	struct pme_client *client;
	void *ctx;
	bool unmaps;			/* INVALIDATE_UNMAPS honoured for this MR */
	bool invalidating;		/* has a core_context id */
	struct mutex mapping_lock;
	struct task_struct *lock_owner;	/* who holds mapping_lock, for messages */
	const char *lock_step;
	u32 state;			/* enum pme_state */
	bool activated;			/* invalidation_func set */
	bool stopped;
	u32 xa_id;
	u64 ticket49;
	struct list_head ticket_node;	/* client->tickets49 */
	bool on_ticket_list;
	bool inval_before_act;		/* 4.9 "peer_invalidated" */
	bool inflight49;
	struct completion inval49_done;
	bool torn_down;			/* 4.9: whole MR deregistered */
	struct sg_table sgt;		/* the table handed to the client */
	u32 nmap;
	unsigned long page_size;
	unsigned int page_shift;
	/* SGL trimming (5.5+) and restoration */
	bool trimmed;
	struct scatterlist *trim_first, *trim_last;
	dma_addr_t orig_first_addr;
	unsigned int orig_first_dlen, orig_first_len, orig_last_dlen, orig_last_len;
	/* fingerprint of the mapped table, to catch client changes */
	struct sg_table sgt_seen;
	u64 sg_hash;
	u64 p2p_gen;			/* nvp2p_emu_pin_generation() before dma_map */
	bool p2p_gen_valid;
	bool revoked;
	u64 dma_stopped_ns;
	u32 invalidations;
	bool released;
	/* PME_REG_HOLD */
	bool held;
	bool hold_fail;
	struct completion hold_done;
	/* bookkeeping for the core's own invariants */
	int n_dma_map_ok, n_dma_unmap, n_put_pages, n_release;
	u32 client_index;
	struct pme_probe_rec *probe;	/* DMA ranges, indexed for the probe */
};

struct pme_file {
	struct xarray mrs;		/* handle -> struct pme_mr */
	u32 next_handle;
};

/* configuration (main.c) */
struct pme_cfg {
	u32 model;
	u32 flags;
	u32 hang_timeout_ms;
	u32 hold_timeout_ms;
};
extern struct pme_cfg pme_cfg;
extern struct mutex pme_cfg_lock;

/*
 * What each OFED core model (enum pme_model) does its own way, one row per model (main.c): the
 * emulator's paths ask these, never the model's number.
 */
struct pme_model_traits {
	const char *name;		/* the model= parameter's value */
	/*
	 * 4.x: u64 tickets on a list, and the HCA's invalidation deregisters the whole MR (else
	 * xarray ids, 5.x and later)
	 */
	bool tickets;
	bool page_size_mandatory;	/* get_page_size refused when missing, at registration */
	bool page_size_after_map;	/* get_page_size after dma_map, the SGL trimmed (5.5+) */
	bool invalidate_unmaps;		/* the 3-state machine honours INVALIDATE_UNMAPS */
	bool memory_peers;		/* /sys/kernel/mm/memory_peers exists (mm_kobj exported) */
	bool stop_notifier_bug;		/* PME_CFG_STOP_NOTIFIER_BUG can apply (not 5.1's path) */
};

/* The row of a valid model (pme_model_valid). */
const struct pme_model_traits *pme_model(u32 model);
bool pme_model_valid(u32 model);

/* global core state (client.c) */
extern struct mutex pme_peer_memory_mutex;	/* the core's global mutex */
extern struct list_head pme_clients;
struct pme_client *pme_client_get_checked(void *reg_handle, bool *dead);
void pme_client_put_use(struct pme_client *c);
void pme_clients_cleanup(void);
bool pme_client_verify(struct pme_client *c);

/* sysfs (sysfs.c) */
int pme_sysfs_init(void);
void pme_sysfs_exit(void);
bool pme_sysfs_available(void);
int pme_sysfs_add_client(struct pme_client *c);	/* under pme_peer_memory_mutex */
void pme_sysfs_del_client(struct pme_client *c);	/* under pme_peer_memory_mutex */

/* checks, violations, faults, delays, debugfs (check.c) */
struct pme_call {
	struct list_head node;
	struct task_struct *task;
	const char *op;
	struct pme_client *client;
	struct pme_mr *mr;
	u64 t0;			/* ktime_get_ns() on entry: client time accounting */
};
void pme_call_enter(struct pme_call *call, struct pme_client *c,
		    struct pme_mr *mr, const char *op);
void pme_call_exit(struct pme_call *call);
struct pme_call *pme_current_call(void);

__printf(2, 3) void pme_violation(u32 rule, const char *fmt, ...);
__printf(1, 2) void pme_core_bug(const char *fmt, ...);
int pme_fault(u32 point);
void pme_delay(u32 point);
int pme_set_fault(const struct pme_fault *f);
int pme_set_delay(const struct pme_delay *d);
void pme_get_stats(struct pme_stats *s);
int pme_get_violation(struct pme_violation *v);
void pme_reset(void);
int pme_debugfs_init(void);
void pme_debugfs_exit(void);

/* global counters (check.c) */
struct pme_counters {
	atomic64_t violations, deadlocks, core_bug_hits, rejected_clients;
	atomic64_t live_clients, live_mrs, regs_ok, regs_failed, deregs;
	atomic64_t invalidate_calls, invalidate_unknown, hw_revokes;
	atomic64_t acquires, releases;
	atomic64_t client_calls, client_ns;
};
extern struct pme_counters pme_cnt;

/* registration (umem.c) */
int pme_mr_register(struct pme_file *f, struct pme_reg *r);
int pme_mr_activate(struct pme_file *f, const struct pme_handle_op *op);
void pme_mr_query(struct pme_mr *mr, struct pme_query *q);
void pme_mr_put(struct pme_mr *mr);
struct device *pme_dma_device(u32 which);
int pme_devices_init(void);
void pme_devices_exit(void);

/* teardown and invalidation (teardown.c) */
void pme_mr_destroy(struct pme_mr *mr);
void pme_mr_fail_after_map(struct pme_mr *mr);
int pme_invalidate_peer_memory(void *reg_handle, u64 core_context);
bool pme_lock_mapping(struct pme_mr *mr, const char *step, bool detect);
void pme_unlock_mapping(struct pme_mr *mr);
void pme_unmap_peer(struct pme_mr *mr, u32 to_state);
void pme_peer_release(struct pme_mr *mr);
void pme_hw_revoke(struct pme_mr *mr);
void pme_release_ctx(struct pme_mr *mr);
u64 pme_sg_hash(struct sg_table *sgt, u32 n);

/* nvp2p_emu DMA-stopped probe (probe.c) */
void pme_probe_track(struct pme_mr *mr);
void pme_probe_untrack(struct pme_mr *mr);

/* char device (chardev.c) */
int pme_chardev_init(void);
void pme_chardev_exit(void);

#endif /* PME_H */

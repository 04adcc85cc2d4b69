/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal state of the NVIDIA P2P provider emulator, shared by its files:
 *   main.c    module init/exit, parameters, statistics, violations, debugfs
 *   mem.c     "GPU memory": allocations, the user mapping, freeing (callbacks)
 *   api.c     the exported nvidia_p2p_* functions
 *   dev.c     /dev/nvp2p_emu and its ioctls
 *   client.c  the in-kernel test client driven by NVP2P_EMU_IOC_CLIENT
 *
 * Locks, in the only order they nest:
 *   emu.rm_lock   the modelled "RM API lock": held across get/put/map calls
 *                 and across every free callback and teardown (like the real
 *                 driver). Client code runs under it (the free callback).
 *   emu.tbl_lock  emulator bookkeeping (lists, hashes, BAR1, tombstones);
 *                 never held while calling client code or sleeping long.
 *   emu.stat_lock counters and the violation ring (spinlock).
 * mmap_lock may be held when tbl_lock is taken (allocation setup), never the
 * other way round.
 */
#ifndef NVP2P_EMU_INTERNAL_H
#define NVP2P_EMU_INTERNAL_H

#include <linux/hashtable.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>

#include "nv-p2p.h"
#include "nvp2p_emu.h"
#include "nvp2p_emu_ioctl.h"

#define EMU_GPU_PAGE_SHIFT 16
#define EMU_GPU_PAGE_SIZE  (1ULL << EMU_GPU_PAGE_SHIFT)
#define EMU_GPU_PAGE_MASK  (EMU_GPU_PAGE_SIZE - 1)
#define EMU_CHUNK_ORDER    (EMU_GPU_PAGE_SHIFT - PAGE_SHIFT)
#define EMU_POISON_BYTE    0x6b

struct emu_file;

/*
 * One "cudaMalloc" allocation.
 *
 * Invariants: `chunks[i]` is an order-EMU_CHUNK_ORDER page block backing
 * bytes [i*64K, (i+1)*64K) of the allocation; the blocks stay allocated until
 * the last reference is dropped. References: the allocation record itself
 * (until freed), each VMA mapping it, each pin (until put or torn down).
 * `freed` and `node` are protected by emu.tbl_lock; `va` is set once by the
 * mmap handler before the allocation is published.
 */
struct emu_alloc {
	struct kref ref;
	struct list_head node;          /* emu.allocs while !freed */
	u64 handle;
	u64 token;
	u32 va_space;
	u32 flags;                      /* NVP2P_EMU_ALLOC_* */
	pid_t tgid;
	struct emu_file *owner;         /* fd it was allocated through */
	u64 va;
	u64 size;
	u32 nr_chunks;
	bool freed;
	u32 pins;                       /* pins referencing it (tbl_lock) */
	struct page **chunks;
};

enum emu_pin_state {
	EMU_PIN_PINNING = NVP2P_EMU_PIN_PINNING,
	EMU_PIN_LIVE = NVP2P_EMU_PIN_LIVE,
	EMU_PIN_CALLBACK = NVP2P_EMU_PIN_CALLBACK,
};

/* How a page table ended (kept in its tombstone). */
enum emu_end {
	EMU_END_PUT = 1,        /* put_pages / put_pages_persistent */
	EMU_END_CALLBACK,       /* free callback + teardown */
	EMU_END_FORCED,         /* torn down at unload without callback */
};

/*
 * One DMA mapping of a pin for one peer.
 * Invariants: while linked in pin->maps, `m` is the client-visible mapping,
 * each `m->dma_addresses[i]` is a live dma_map_page() of the pin's i-th page
 * on `peer`, and a pci_dev reference on `peer` is held.
 */
struct emu_map {
	struct hlist_node hnode;        /* emu.map_hash, key = m */
	struct list_head node;          /* pin->maps */
	struct emu_pin *pin;
	struct nvidia_p2p_dma_mapping *m;
	struct pci_dev *peer;
	u32 nr;
};

/*
 * One successful (or in-progress) get_pages / get_pages_persistent.
 * Invariants: `pt` and the arrays it points to are owned by the emulator and
 * valid while the pin is in emu.pt_hash; `snap` holds the values handed out
 * (a live table whose fields differ was modified by the client); holds one
 * reference on `alloc` and `len` bytes of BAR1.
 */
struct emu_pin {
	struct hlist_node hnode;        /* emu.pt_hash, key = pt */
	struct list_head node;          /* emu.pins */
	struct list_head work;          /* free path's private list */
	u64 id;
	struct emu_alloc *alloc;
	pid_t tgid;
	u64 va;
	u64 len;
	u32 nr;
	bool persistent;
	bool force_bar1;
	bool by_token;
	enum emu_pin_state state;
	void (*cb)(void *data);
	void *data;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_page *pages;
	struct nvidia_p2p_page **ptrs;
	u8 *uuid;
	struct nvidia_p2p_page_table snap;
	struct list_head maps;          /* struct emu_map, tbl_lock */
	unsigned int unmap_inflight;    /* tbl_lock */
};

/*
 * What is left of a freed page table or DMA mapping: its address (never
 * dereferenced again) and how it ended, so that a later call with the stale
 * pointer is recognised as use-after-free by the emulator.
 */
enum emu_tomb_kind { EMU_TOMB_PT, EMU_TOMB_MAP };

struct emu_tomb {
	struct hlist_node hnode;        /* emu.tomb_hash, key = address */
	struct list_head node;          /* emu.tombs, oldest first */
	unsigned long key;
	enum emu_tomb_kind kind;
	enum emu_end how;
	bool put_seen;
	pid_t tgid;
	pid_t ender;                    /* task that tore it down (put, free, exit) */
	u64 id;
	void *held;                     /* the freed object's memory, kept (emu_tomb_hold) */
};

/*
 * A dma_map_pages between its read of the table and its RM lock: how its pin
 * ended if a put or a free callback tore it down meanwhile. Kept by pin, not
 * by table address, so that a table address a newer pin took over in the
 * meantime does not hide how the call's own pin ended.
 * Invariants: linked in emu.map_waits (tbl_lock) while the call waits; `pin`
 * is compared, never dereferenced, once `ended` is set.
 */
struct emu_map_wait {
	struct list_head node;          /* emu.map_waits */
	const struct emu_pin *pin;
	u64 id;
	bool ended;
	enum emu_end how;
	pid_t ender;
};

struct emu_fault {
	u32 mode, n, skip;
	s32 err;
	u64 count;
	u64 injected;
};

struct emu_state {
	struct mutex rm_lock;
	struct task_struct *cb_task;    /* running a free callback (rm_lock) */
	struct mutex tbl_lock;
	spinlock_t stat_lock;

	/* tbl_lock */
	struct list_head allocs;
	struct list_head pins;
	struct list_head tombs;
	u64 nr_tombs;
	struct list_head map_waits;     /* struct emu_map_wait */
	DECLARE_HASHTABLE(pt_hash, 10);
	DECLARE_HASHTABLE(map_hash, 10);
	DECLARE_HASHTABLE(tomb_hash, 10);
	u64 next_handle;
	u64 next_pin_id;
	u64 bar1_used;
	u64 mem_used;
	u64 live_pins, live_persistent, pinned_pages, live_maps, live_allocs;

	/* stat_lock */
	struct nvp2p_emu_config cfg;
	struct emu_fault faults[NVP2P_EMU_FAULT_OPS];
	u64 calls[NVP2P_EMU_OP_SLOTS];
	u64 failures[NVP2P_EMU_OP_SLOTS];
	u64 violations[NVP2P_EMU_V_SLOTS];
	u64 violations_total;
	u64 callbacks;
	u64 put_after_teardown;
	u64 free_calls_in_cb;
	u64 api_window_hits;
	u64 api_ns;
	u64 op_ns[NVP2P_EMU_OP_SLOTS];	/* api_ns by op (debugfs only) */
	u64 model_ns;			/* modelled RM time asked for */
	u64 delay_ns;			/* time its waits took */

	/* rm_lock */
	nvidia_p2p_rsync_driver_t *rsync;

	u8 gpu_uuid[NVIDIA_P2P_GPU_UUID_LEN];
};

extern struct emu_state emu;

/* main.c */
void emu_violation(unsigned int rule, const char *fmt, ...) __printf(2, 3);
void emu_count_call(unsigned int op);
void emu_account_api_ns(unsigned int op, u64 t0);
int emu_fail(unsigned int op, int ret);
int emu_fault_check(unsigned int op);
/* Longest delay a single knob may ask for, and longest modelled RM call: 60 s. */
#define EMU_MAX_DELAY_NS (60ULL * NSEC_PER_SEC)
void emu_delay_ns(u64 ns);
void emu_model_cost(u64 ns);
void emu_get_config(struct nvp2p_emu_config *cfg);
int emu_set_config(const struct nvp2p_emu_config *cfg);
int emu_set_fault(struct nvp2p_emu_fault *f);
void emu_fill_stats(struct nvp2p_emu_stats *st);
void emu_reset(void);
extern unsigned long emu_quarantine_max;
extern unsigned long emu_max_mem_mb;

/* mem.c */
struct emu_alloc *emu_alloc_create(u64 size, u32 flags);
void emu_alloc_put(struct emu_alloc *a);
void emu_alloc_publish(struct emu_alloc *a);
struct emu_alloc *emu_alloc_find_owned(pid_t tgid, u64 va, u64 handle);
int emu_free_alloc(struct emu_alloc *a, unsigned int *callbacks);
int emu_free_matching(pid_t tgid, struct emu_file *owner, bool all,
		      unsigned int *allocs, unsigned int *callbacks);
void emu_unmap_user(struct emu_alloc *a);
int emu_alloc_token(pid_t tgid, u64 va, u64 *token, u32 *va_space);
int emu_mmap_alloc(struct emu_alloc *a, struct vm_area_struct *vma);
void emu_teardown_pin(struct emu_pin *p, enum emu_end how);
/* Pins that left EMU_PIN_LIVE: a free callback began, or a teardown (nvp2p_emu.h). */
extern atomic64_t emu_pin_gen;
struct emu_pin *emu_pin_lookup(const struct nvidia_p2p_page_table *pt);
struct emu_tomb *emu_tomb_lookup(unsigned long key, enum emu_tomb_kind kind);
void emu_tomb_add(unsigned long key, enum emu_tomb_kind kind, enum emu_end how,
		  pid_t tgid, u64 id);
void emu_tomb_forget(unsigned long key, enum emu_tomb_kind kind);
void emu_tomb_hold(unsigned long key, enum emu_tomb_kind kind, void *mem);
void emu_tombs_clear(void);
bool emu_pin_table_modified(const struct emu_pin *p);
void emu_map_release(struct emu_map *mp);
void emu_teardown_all(void);
int emu_list(u32 kind, void *buf, u32 cap, u32 *count);
int emu_check_leaks(void);

/* api.c */
bool emu_in_callback(void);

/* dev.c */
int emu_dev_init(void);
void emu_dev_exit(void);

/* client.c */
struct emu_client;
struct emu_client *emu_client_create(void);
void emu_client_destroy(struct emu_client *c);
int emu_client_ioctl(struct emu_client *c, struct nvp2p_emu_client *req);

#endif

// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P provider emulator: the exported nvidia_p2p_* API.
 *
 * Behaviour follows docs/emulators.md ("API semantics", "Violations"), and the real
 * driver's kernel-open/nvidia/nv-p2p.c where it fails (docs/emulators.md names
 * the function each behaviour follows). Where the real driver would touch
 * freed memory or crash because of what the client did, the emulator records
 * a violation saying so and fails the call cleanly instead:
 *   - a get/put/map call from inside a free callback fails with -EIO, as the
 *     real one does (the RM API lock is already held by this thread);
 *   - a call with a page table or mapping that was freed is recognised by
 *     its tombstone and reported (the real driver would use freed memory);
 *   - a dma_map_pages whose table another thread's free callback freed
 *     (dma-map-uaf), put_pages_persistent on a non-persistent table (a NULL
 *     dereference in the real driver), and the dangling *page_table a failed
 *     get_pages leaves (see emu_dangling_pt) passed back to the API.
 */
#define pr_fmt(fmt) "nvp2p_emu: " fmt

#include <linux/ktime.h>
#include <linux/dma-mapping.h>
#include <linux/export.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#include "emu.h"

static_assert(sizeof(struct nvidia_p2p_page) == 32);
static_assert(offsetof(struct nvidia_p2p_page_table, pages) == 8);
static_assert(offsetof(struct nvidia_p2p_page_table, entries) == 16);
static_assert(offsetof(struct nvidia_p2p_page_table, gpu_uuid) == 24);
static_assert(offsetof(struct nvidia_p2p_page_table, flags) == 32);
static_assert(sizeof(struct nvidia_p2p_page_table) == 40);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, dma_addresses) == 16);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, pci_dev) == 32);
static_assert(sizeof(struct nvidia_p2p_dma_mapping) == 40);
static_assert(sizeof(struct nvidia_p2p_params) == 104);

/*
 * Where the real nv_p2p_get_pages fails after it has stored its new table in
 * *page_table and freed that table on its error path, the caller is left with
 * a pointer to freed memory. The emulator leaves the address of this object
 * instead: never a table of ours, recognised when it comes back to the API,
 * and filled with the poison byte, so a client that reads through it sees
 * what it would read in a freed table.
 */
static u8 emu_dangling_pt[64] __aligned(64) = {
	[0 ... 63] = EMU_POISON_BYTE,
};
static_assert(sizeof(emu_dangling_pt) >= sizeof(struct nvidia_p2p_page_table));

/* A failed get_pages after the real driver's table was stored and freed. */
static void leave_dangling(struct nvidia_p2p_page_table **page_table)
{
	*page_table = (struct nvidia_p2p_page_table *)emu_dangling_pt;
}

/* A failed get_pages where the real driver stored NULL (nothing allocated, or put back). */
static void leave_null(struct nvidia_p2p_page_table **page_table)
{
	*page_table = NULL;
}

/* Is pt the dangling pointer of a failed get_pages? Records the violation if so. */
static bool dangling_arg(const char *what, const void *pt)
{
	if (pt != (const void *)emu_dangling_pt)
		return false;
	emu_violation(NVP2P_EMU_V_DANGLING_OUT_PARAM,
		      "%s on %px: the *page_table a failed get_pages left behind (real driver: a pointer to the table it freed on its error path)",
		      what, pt);
	return true;
}

bool emu_in_callback(void)
{
	return READ_ONCE(emu.cb_task) == current;
}

bool nvp2p_emu_in_free_callback(void)
{
	return emu_in_callback();
}
EXPORT_SYMBOL_GPL(nvp2p_emu_in_free_callback);

/* Which call's costs of the RM cost model (nvp2p_emu_config) to spend. */
enum rm_call { RM_GET, RM_MAP, RM_PUT };

/*
 * The modelled RM time of a call of `kind`: its per-call cost if `call`, plus
 * its per-page cost times `pages`.
 */
static u64 rm_cost_ns(enum rm_call kind, bool call, u64 pages)
{
	struct nvp2p_emu_config cfg;
	u64 per_call, per_page;

	emu_get_config(&cfg);
	switch (kind) {
	case RM_GET:
		per_call = cfg.get_cost_ns;
		per_page = cfg.get_page_cost_ns;
		break;
	case RM_MAP:
		per_call = cfg.map_cost_ns;
		per_page = cfg.map_page_cost_ns;
		break;
	default:
		per_call = cfg.put_cost_ns;
		per_page = cfg.put_page_cost_ns;
		break;
	}
	/*
	 * Each knob is at most 60 s (emu_set_config), so none of this overflows; a call's
	 * modelled time is capped at 60 s all the same.
	 */
	return min_t(u64, (call ? per_call : 0) + per_page * pages, EMU_MAX_DELAY_NS);
}

/* Take the RM lock and spend the modelled RM time of a call covering `pages` GPU pages. */
static void rm_lock_cost(enum rm_call kind, u64 pages)
{
	mutex_lock(&emu.rm_lock);
	emu_model_cost(rm_cost_ns(kind, true, pages));
}

/*
 * A call that takes the RM lock, made from inside a free callback. The real
 * driver runs the callback with the RM API lock held by this thread; its
 * rmapiLockAcquire() refuses to take it again (NV_ERR_INVALID_LOCK_STATE,
 * which nvidia_p2p_map_status() turns into -EIO), so the call fails with -EIO
 * without doing anything. The caller returns -EIO.
 */
static bool reentered(unsigned int op, const char *what)
{
	if (!emu_in_callback())
		return false;
	emu_violation(NVP2P_EMU_V_CALL_IN_CALLBACK,
		      "%s called from inside a free callback (real driver: the RM lock is already held, the call fails with -EIO)",
		      what);
	emu_fail(op, -EIO);
	return true;
}

/* The live allocation of the caller (or with token/va_space) holding the range. */
static struct emu_alloc *find_range(u64 token, u32 va_space, u64 va, u64 len)
{
	struct emu_alloc *a;

	lockdep_assert_held(&emu.tbl_lock);
	list_for_each_entry(a, &emu.allocs, node) {
		if (token) {
			if (a->token != token || a->va_space != va_space)
				continue;
		} else if (a->tgid != current->tgid) {
			continue;
		}
		if (va >= a->va && va - a->va < a->size && len <= a->size - (va - a->va))
			return a;
	}
	return NULL;
}

static void unbuild_table(struct emu_pin *p)
{
	kfree(p->pt);
	kvfree(p->pages);
	kvfree(p->ptrs);
	kfree(p->uuid);
	p->pt = NULL;
	p->pages = NULL;
	p->ptrs = NULL;
	p->uuid = NULL;
}

/*
 * Allocate the rest of the client-visible table for p and fill it (no locks
 * needed); p->pt itself was allocated with p, before the RM lock.
 */
static int build_table(struct emu_pin *p, u32 abi)
{
	struct emu_alloc *a = p->alloc;
	u32 first = (p->va - a->va) >> EMU_GPU_PAGE_SHIFT;
	u32 i;

	p->pages = kvcalloc(p->nr, sizeof(*p->pages), GFP_KERNEL);
	p->ptrs = kvcalloc(p->nr, sizeof(*p->ptrs), GFP_KERNEL);
	p->uuid = kmemdup(emu.gpu_uuid, NVIDIA_P2P_GPU_UUID_LEN, GFP_KERNEL);
	if (!p->pages || !p->ptrs || !p->uuid) {
		unbuild_table(p);
		return -ENOMEM;
	}
	for (i = 0; i < p->nr; i++) {
		p->pages[i].physical_address = page_to_phys(a->chunks[first + i]);
		p->ptrs[i] = &p->pages[i];
	}
	p->pt->version = abi == 1 ? 0x00010002 : 0x00020000;
	p->pt->page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	p->pt->pages = p->ptrs;
	p->pt->entries = p->nr;
	p->pt->gpu_uuid = p->uuid;
	if (abi == 2 && (a->flags & NVP2P_EMU_ALLOC_COHERENT))
		p->pt->flags = NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE;
	p->snap = *p->pt;
	return 0;
}


/* Undo a pin that never became visible (BAR1, counters, allocation ref). */
static void abandon_pin(struct emu_pin *p)
{
	mutex_lock(&emu.tbl_lock);
	list_del(&p->node);
	emu.bar1_used -= p->len;
	p->alloc->pins--;
	mutex_unlock(&emu.tbl_lock);
	unbuild_table(p);
	emu_alloc_put(p->alloc);
	kfree(p);
}

/*
 * Common part of get_pages and get_pages_persistent, after argument checks
 * (va and len 64 KiB aligned). Runs under the RM lock, except for the modelled
 * window between pinning and callback registration. On failure it leaves
 * *page_table as the real nv_p2p_get_pages does at the matching point: NULL,
 * or a dangling pointer (emu_dangling_pt).
 */
static int pin_range(unsigned int op, u64 token, u32 va_space, u64 va, u64 len,
		     struct nvidia_p2p_page_table **page_table,
		     void (*cb)(void *), void *data, u32 flags)
{
	bool persistent = op == NVP2P_EMU_OP_GET_PAGES_PERSISTENT;
	struct nvp2p_emu_config cfg;
	struct emu_alloc *a;
	struct emu_pin *p;
	int ret;

	/* RM refuses these, after the table was stored and before it is freed. */
	if (!len || va + len < va || (len >> EMU_GPU_PAGE_SHIFT) > U32_MAX) {
		leave_dangling(page_table);
		return emu_fail(op, -EINVAL);
	}

	/*
	 * The page table first, before the RM lock, as nv_p2p_get_pages
	 * allocates the container that holds it (nv_p2p_mem_info_t) before
	 * rm_p2p_get_pages takes the lock: a call that waits for the lock
	 * already owns its table's address.
	 */
	p = kzalloc_obj(*p);
	if (p)
		p->pt = kzalloc_obj(*p->pt);
	if (!p || !p->pt) {
		/* The container's own allocation: *page_table stays NULL. */
		kfree(p);
		leave_null(page_table);
		return emu_fail(op, -ENOMEM);
	}
	INIT_LIST_HEAD(&p->maps);
	INIT_LIST_HEAD(&p->work);
	p->va = va;
	p->len = len;
	p->nr = len >> EMU_GPU_PAGE_SHIFT;
	p->persistent = persistent;
	p->force_bar1 = flags & NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING;
	p->by_token = token != 0;
	p->cb = cb;
	p->data = data;
	p->tgid = current->tgid;
	p->state = EMU_PIN_PINNING;

	rm_lock_cost(RM_GET, p->nr);
	emu_get_config(&cfg);

	mutex_lock(&emu.tbl_lock);
	a = find_range(token, va_space, va, len);
	if (!a) {
		ret = -EINVAL;          /* not GPU memory of this process */
	} else if (a->flags & NVP2P_EMU_ALLOC_NO_P2P) {
		ret = -EINVAL;          /* no P2P registration of the range: not found */
	} else if (persistent && (a->flags & NVP2P_EMU_ALLOC_VGPU)) {
		ret = -ENOTSUPP;
	} else if (p->force_bar1 && (!(a->flags & NVP2P_EMU_ALLOC_COHERENT) ||
				     (a->flags & NVP2P_EMU_ALLOC_MIG))) {
		/*
		 * RmP2PGetPagesPersistent: FORCE_BAR1 only on a coherent
		 * platform and never with MIG on. A persistent pin on a MIG
		 * instance is otherwise supported (580 and later: the
		 * instance's internal third-party object; until 2026-12-02
		 * the emulator refused every one, as older drivers did).
		 */
		ret = -ENOTSUPP;
	} else if (cfg.bar1_budget && emu.bar1_used + len > cfg.bar1_budget) {
		ret = -ENOMEM;          /* BAR1 exhausted */
	} else {
		ret = 0;
		emu.bar1_used += len;
		kref_get(&a->ref);
		a->pins++;
		p->alloc = a;
		p->id = ++emu.next_pin_id;
		list_add_tail(&p->node, &emu.pins);
	}
	mutex_unlock(&emu.tbl_lock);
	if (ret) {
		/* RM's get-pages call failed: the real table is freed, the pointer kept. */
		mutex_unlock(&emu.rm_lock);
		kfree(p->pt);
		kfree(p);
		leave_dangling(page_table);
		return emu_fail(op, ret);
	}

	ret = build_table(p, cfg.pt_abi);
	if (ret) {
		/* After the pin: the real error path puts the pages back and stores NULL. */
		mutex_unlock(&emu.rm_lock);
		abandon_pin(p);
		leave_null(page_table);
		return emu_fail(op, ret);
	}

	if (!persistent && cfg.reg_window_delay_ns) {
		/* Pinned, callback not registered yet: let a free slip in. */
		mutex_unlock(&emu.rm_lock);
		emu_delay_ns(cfg.reg_window_delay_ns);
		mutex_lock(&emu.rm_lock);
	}

	mutex_lock(&emu.tbl_lock);
	if (p->alloc->freed && !persistent) {
		/* Freed between pinning and registration: the call fails. */
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		pr_info("get_pages: allocation freed before callback registration\n");
		abandon_pin(p);
		/* The real put finds the pin gone (not found) and stores NULL. */
		leave_null(page_table);
		return emu_fail(op, -EINVAL);
	}
	emu_tomb_forget((unsigned long)p->pt, EMU_TOMB_PT);
	hash_add(emu.pt_hash, &p->hnode, (unsigned long)p->pt);
	p->state = EMU_PIN_LIVE;
	emu.live_pins++;
	if (persistent)
		emu.live_persistent++;
	emu.pinned_pages += p->nr;
	*page_table = p->pt;
	mutex_unlock(&emu.tbl_lock);
	mutex_unlock(&emu.rm_lock);
	return 0;
}

static int api_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	const unsigned int op = NVP2P_EMU_OP_GET_PAGES;
	int ret;

	emu_count_call(op);
	/*
	 * nv_p2p_get_pages refuses a NULL callback only: RM is handed the
	 * provider's own container as its data, so a NULL `data` (which
	 * nv-p2p.h asks callers not to pass) is accepted and given back to
	 * the callback as it came.
	 */
	if (!page_table || !free_callback)
		return emu_fail(op, -EINVAL);
	if ((virtual_address | length) & EMU_GPU_PAGE_MASK)
		return emu_fail(op, -EINVAL);
	/* Both fail in the RM call, after the table was stored: dangling. */
	if (reentered(op, "nvidia_p2p_get_pages")) {
		leave_dangling(page_table);
		return -EIO;
	}
	ret = emu_fault_check(op);
	if (ret) {
		leave_dangling(page_table);
		return emu_fail(op, ret);
	}
	return pin_range(op, p2p_token, va_space, virtual_address, length,
			 page_table, free_callback, data, 0);
}

static int api_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags)
{
	const unsigned int op = NVP2P_EMU_OP_GET_PAGES_PERSISTENT;
	int ret;

	emu_count_call(op);
	if (!page_table)
		return emu_fail(op, -EINVAL);
	/*
	 * nv_p2p_get_pages takes the flags as a u8 and tests bit 0
	 * (FORCE_BAR1_MAPPING) only: every other bit is ignored, not refused.
	 */
	flags &= NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING;
	if ((virtual_address | length) & EMU_GPU_PAGE_MASK)
		return emu_fail(op, -EINVAL);
	/* Both fail in the RM calls, after the table was stored: dangling. */
	if (reentered(op, "nvidia_p2p_get_pages_persistent")) {
		leave_dangling(page_table);
		return -EIO;
	}
	ret = emu_fault_check(op);
	if (ret) {
		leave_dangling(page_table);
		return emu_fail(op, ret);
	}
	return pin_range(op, 0, 0, virtual_address, length, page_table,
			 NULL, NULL, flags);
}

static const char *end_name(enum emu_end how)
{
	switch (how) {
	case EMU_END_CALLBACK:
		return "by the free callback teardown";
	case EMU_END_FORCED:
		return "at unload";
	default:
		return "by put";
	}
}

/* Report a call with a table that is not live; returns true if it was ours once. */
static bool report_dead_table(const char *what, const void *pt)
{
	struct emu_tomb *t = emu_tomb_lookup((unsigned long)pt, EMU_TOMB_PT);

	if (t) {
		emu_violation(NVP2P_EMU_V_FREED_TABLE,
			      "%s on page table %px of pin %llu, already freed (%s)",
			      what, pt, t->id,
			      end_name(t->how));
		return true;
	}
	emu_violation(NVP2P_EMU_V_UNKNOWN_TABLE,
		      "%s on %px, which was never a page table of this provider", what, pt);
	return false;
}

static int api_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	const unsigned int op = NVP2P_EMU_OP_PUT_PAGES;
	struct emu_pin *p;
	struct emu_tomb *t;
	int ret;

	emu_count_call(op);
	if (!page_table)
		return 0;
	/* Real driver: RM finds no pin for that pointer and returns 0. */
	if (dangling_arg("put_pages", page_table))
		return 0;
	if (reentered(op, "nvidia_p2p_put_pages"))
		return -EIO;
	ret = emu_fault_check(op);
	if (ret)
		return emu_fail(op, ret);

	/* Blocks here while any free callback runs. */
	/* The per-call cost now; the per-page cost once the pin is known. */
	rm_lock_cost(RM_PUT, 0);
	mutex_lock(&emu.tbl_lock);
	p = emu_pin_lookup(page_table);
	if (!p) {
		t = emu_tomb_lookup((unsigned long)page_table, EMU_TOMB_PT);
		if (t && t->how == EMU_END_CALLBACK && !t->put_seen) {
			/* Legal: the callback already tore it down; nothing touched. */
			t->put_seen = true;
			spin_lock(&emu.stat_lock);
			emu.put_after_teardown++;
			spin_unlock(&emu.stat_lock);
		} else if (t) {
			emu_violation(NVP2P_EMU_V_DOUBLE_PUT,
				      "put_pages on page table %px of pin %llu, already released",
				      page_table, t->id);
		} else {
			emu_violation(NVP2P_EMU_V_UNKNOWN_TABLE,
				      "put_pages on %px, which was never a page table of this provider",
				      page_table);
		}
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		return 0;
	}
	if (p->persistent) {
		/*
		 * RmP2PPutPages looks the table up among the calling process's
		 * third-party objects; a persistent pin lives in the driver's
		 * internal one, so RM finds nothing and nv_p2p_put_pages turns
		 * "not found" into 0: the pin stays, a leak the pin's owner
		 * only sees at unload (leaked-pin).
		 */
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		pr_warn("put_pages on persistent table %px of pin %llu: 0 returned, pin kept (the real driver finds no such pin)\n",
			page_table, p->id);
		return 0;
	}
	if (!p->by_token && p->tgid != current->tgid) {
		/* The real driver finds nothing for this pid and returns 0. */
		emu_violation(NVP2P_EMU_V_WRONG_PROCESS_PUT,
			      "put_pages on table %px pinned by tgid %d from tgid %d: ignored, pin and callback stay registered",
			      page_table, p->tgid, current->tgid);
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		return 0;
	}
	/*
	 * The real put ignores the address (and va_space): with token 0 RM
	 * finds and deletes the pin by its table pointer. So the pin goes, as
	 * there; the mismatch is still recorded, since a client whose va
	 * differs is putting a table that may not be its own.
	 */
	if (virtual_address != p->va)
		emu_violation(NVP2P_EMU_V_PUT_VA_MISMATCH,
			      "put_pages on table %px with va 0x%llx, pinned at 0x%llx: released anyway (the real put ignores the va)",
			      page_table, virtual_address, p->va);
	mutex_unlock(&emu.tbl_lock);
	/* The pin cannot go away: teardown needs the RM lock, which we hold. */
	emu_model_cost(rm_cost_ns(RM_PUT, false, p->nr));
	emu_teardown_pin(p, EMU_END_PUT);
	mutex_unlock(&emu.rm_lock);
	return 0;
}

static int api_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags)
{
	const unsigned int op = NVP2P_EMU_OP_PUT_PAGES_PERSISTENT;
	struct emu_pin *p;
	int ret;

	emu_count_call(op);
	if (flags)
		return emu_fail(op, -EINVAL);
	if (!page_table)
		return 0;
	/* Real driver: reads the freed table and its container's RM object. */
	if (dangling_arg("put_pages_persistent", page_table))
		return emu_fail(op, -EINVAL);
	if (reentered(op, "nvidia_p2p_put_pages_persistent"))
		return -EIO;
	ret = emu_fault_check(op);
	if (ret)
		return emu_fail(op, ret);

	/* The per-call cost now; the per-page cost once the pin is known. */
	rm_lock_cost(RM_PUT, 0);
	mutex_lock(&emu.tbl_lock);
	p = emu_pin_lookup(page_table);
	if (!p || !p->persistent) {
		if (!p) {
			struct emu_tomb *t = emu_tomb_lookup((unsigned long)page_table,
							     EMU_TOMB_PT);
			if (t && t->how == EMU_END_PUT)
				emu_violation(NVP2P_EMU_V_DOUBLE_PUT,
					      "put_pages_persistent on page table %px of pin %llu, already released",
					      page_table, t->id);
			else
				report_dead_table("put_pages_persistent", page_table);
		} else {
			/*
			 * nvidia_p2p_put_pages_persistent hands the container's
			 * persistent RM object to RM without a check; a table of
			 * get_pages has none (NULL), and RmP2PPutPagesPersistent
			 * dereferences it.
			 */
			emu_violation(NVP2P_EMU_V_PUT_PERSISTENT_ON_NONPERSISTENT,
				      "put_pages_persistent on table %px of pin %llu from get_pages: NULL dereference in the real driver (RmP2PPutPagesPersistent); pin left as it was",
				      page_table, p->id);
		}
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		return emu_fail(op, -EINVAL);
	}
	if (virtual_address != p->va)
		emu_violation(NVP2P_EMU_V_PUT_VA_MISMATCH,
			      "put_pages_persistent on table %px with va 0x%llx, pinned at 0x%llx",
			      page_table, virtual_address, p->va);
	mutex_unlock(&emu.tbl_lock);
	/* The pin cannot go away: teardown needs the RM lock, which we hold. */
	emu_model_cost(rm_cost_ns(RM_PUT, false, p->nr));
	emu_teardown_pin(p, EMU_END_PUT);
	mutex_unlock(&emu.rm_lock);
	return 0;
}

/*
 * dma_map_pages on a table that a free callback run by another thread tore
 * down, between the client's last look at its own state and the provider
 * reading the table, or while the call waited for the RM lock. The real
 * nvidia_p2p_dma_map_pages reads the table (uuid, page addresses, the
 * container's flags) before it takes the RM lock, passes the table's uuid
 * pointer to RM, and once RM has mapped the pages links the new mapping into
 * the table's container (nv_p2p_insert_dma_mapping: a semaphore and a list in
 * memory the free has released). So each such call is a use-after-free read
 * and, whenever RM still accepts the stale uuid, a use-after-free write, plus a
 * mapping nobody will ever unmap. No client of the non-persistent API can close
 * the window (its callback runs under the RM lock: it cannot hold a lock of its
 * own across this call, nor make the callback wait), so the race stress
 * measures it (docs/design.md). Recorded as dma-map-uaf (and counted in
 * api_window_hits); the call fails with -EINVAL, nothing is touched. Returns
 * false when the table was not torn down by a callback, or when this very task
 * ran that teardown (a free, then a map, one after the other: no race): then
 * it is a freed-table error of the client. Called with tbl_lock held.
 */
/* A map met the API's window: its pin's free callback ran on another thread. */
static void window_hit(const void *pt, u64 id, const char *when)
{
	spin_lock(&emu.stat_lock);
	emu.api_window_hits++;
	spin_unlock(&emu.stat_lock);
	emu_violation(NVP2P_EMU_V_DMA_MAP_UAF,
		      "dma_map_pages on table %px of pin %llu, freed by another thread's free callback %s: real driver reads it, then writes into it (nv_p2p_insert_dma_mapping); -EINVAL here",
		      pt, id, when);
}

static bool map_window_uaf(const void *pt, const char *when)
{
	struct emu_tomb *t = emu_tomb_lookup((unsigned long)pt, EMU_TOMB_PT);

	if (!t || t->how != EMU_END_CALLBACK || t->ender == current->pid)
		return false;
	window_hit(pt, t->id, when);
	return true;
}

/* The map's own pin ended while the call waited for the RM lock. */
static void map_wait_ended(const struct emu_map_wait *w, const void *pt)
{
	if (w->how == EMU_END_CALLBACK && w->ender != current->pid) {
		window_hit(pt, w->id, "while the call waited for the RM lock");
		return;
	}
	emu_violation(NVP2P_EMU_V_FREED_TABLE,
		      "dma_map_pages (released while it waited for the RM lock) on page table %px of pin %llu, already freed (%s)",
		      pt, w->id, end_name(w->how));
}

/* A map that gives up before its RM lock stops waiting. */
static void map_wait_drop(struct emu_map_wait *w)
{
	mutex_lock(&emu.tbl_lock);
	list_del(&w->node);
	mutex_unlock(&emu.tbl_lock);
}

/*
 * A failed dma_map_pages: the real nvidia_p2p_dma_map_pages stores NULL in
 * *dma_mapping on every failure after its argument and force-PCIe checks.
 */
static int map_fail(struct nvidia_p2p_dma_mapping **dma_mapping, int ret)
{
	*dma_mapping = NULL;
	return emu_fail(NVP2P_EMU_OP_DMA_MAP, ret);
}

static int api_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	const unsigned int op = NVP2P_EMU_OP_DMA_MAP;
	struct emu_map_wait wait = {};
	struct emu_map *mp;
	struct emu_pin *p;
	u32 i, first, entries;
	int ret;

	emu_count_call(op);
	if (!peer || !page_table || !dma_mapping)
		return emu_fail(op, -EINVAL);
	if (dangling_arg("dma_map_pages", page_table))
		return map_fail(dma_mapping, -EINVAL);

	/* Like the real driver, read the table before taking the RM lock. */
	mutex_lock(&emu.tbl_lock);
	p = emu_pin_lookup(page_table);
	if (!p) {
		if (!map_window_uaf(page_table, "before the call"))
			report_dead_table("dma_map_pages", page_table);
		mutex_unlock(&emu.tbl_lock);
		return map_fail(dma_mapping, -EINVAL);
	}
	if (!page_table->gpu_uuid) {
		mutex_unlock(&emu.tbl_lock);
		return emu_fail(op, -EINVAL);
	}
	ret = p->force_bar1 ? -ENOTSUPP : 0;
	if (ret) {
		mutex_unlock(&emu.tbl_lock);
		return emu_fail(op, ret);
	}
	if (page_table->page_size != NVIDIA_P2P_PAGE_SIZE_64KB ||
	    emu_pin_table_modified(p)) {
		/* The real driver BUG()s on anything but 64 KiB pages. */
		emu_violation(NVP2P_EMU_V_TABLE_MODIFIED,
			      "dma_map_pages on table %px whose fields were changed by the client",
			      page_table);
		mutex_unlock(&emu.tbl_lock);
		return map_fail(dma_mapping, -EINVAL);
	}
	entries = page_table->entries;
	wait.pin = p;
	wait.id = p->id;
	list_add_tail(&wait.node, &emu.map_waits);
	mutex_unlock(&emu.tbl_lock);
	/* RM's map call: refused from inside a callback, or an injected failure. */
	if (reentered(op, "nvidia_p2p_dma_map_pages")) {
		map_wait_drop(&wait);
		*dma_mapping = NULL;
		return -EIO;
	}
	ret = emu_fault_check(op);
	if (ret) {
		map_wait_drop(&wait);
		return map_fail(dma_mapping, ret);
	}

	rm_lock_cost(RM_MAP, entries);
	mutex_lock(&emu.tbl_lock);
	list_del(&wait.node);
	if (wait.ended) {
		/* Torn down while we waited for the lock. */
		map_wait_ended(&wait, page_table);
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		return map_fail(dma_mapping, -EINVAL);
	}
	mutex_unlock(&emu.tbl_lock);

	/* The pin cannot be torn down while we hold the RM lock. */
	ret = -ENOMEM;
	mp = kzalloc_obj(*mp);
	if (!mp)
		goto out_unlock;
	mp->m = kzalloc_obj(*mp->m);
	if (!mp->m)
		goto out_free;
	mp->m->dma_addresses = kcalloc(p->nr, sizeof(u64), GFP_KERNEL);
	if (!mp->m->dma_addresses)
		goto out_free;
	first = (p->va - p->alloc->va) >> EMU_GPU_PAGE_SHIFT;
	for (i = 0; i < p->nr; i++) {
		struct page *pg = p->alloc->chunks[first + i];
		dma_addr_t d;

		d = dma_map_page_attrs(&peer->dev, pg, 0, EMU_GPU_PAGE_SIZE,
				       DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
		if (dma_mapping_error(&peer->dev, d)) {
			/*
			 * RM's dma_map_resource failing is
			 * NV_ERR_OPERATING_SYSTEM, which nvidia_p2p_map_status
			 * turns into -EIO (only allocations give -ENOMEM).
			 */
			ret = -EIO;
			mp->nr = i;
			mp->peer = pci_dev_get(peer);
			emu_map_release(mp);
			mp = NULL;
			goto out_unlock;
		}
		mp->m->dma_addresses[i] = d;
	}
	mp->nr = p->nr;
	mp->pin = p;
	mp->peer = pci_dev_get(peer);
	mp->m->version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	mp->m->page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	mp->m->entries = p->nr;
	mp->m->private = mp;
	mp->m->pci_dev = peer;

	mutex_lock(&emu.tbl_lock);
	emu_tomb_forget((unsigned long)mp->m, EMU_TOMB_MAP);
	hash_add(emu.map_hash, &mp->hnode, (unsigned long)mp->m);
	list_add_tail(&mp->node, &p->maps);
	emu.live_maps++;
	mutex_unlock(&emu.tbl_lock);
	*dma_mapping = mp->m;
	mutex_unlock(&emu.rm_lock);
	return 0;

out_free:
	if (mp->m)
		kfree(mp->m->dma_addresses);
	kfree(mp->m);
	kfree(mp);
out_unlock:
	mutex_unlock(&emu.rm_lock);
	return map_fail(dma_mapping, ret);
}

static struct emu_map *map_lookup(const struct nvidia_p2p_dma_mapping *m)
{
	struct emu_map *mp;

	hash_for_each_possible(emu.map_hash, mp, hnode, (unsigned long)m)
		if (mp->m == m)
			return mp;
	return NULL;
}

static int api_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	const unsigned int op = NVP2P_EMU_OP_DMA_UNMAP;
	struct nvp2p_emu_config cfg;
	struct emu_map *mp;
	struct emu_pin *p;
	int ret;

	emu_count_call(op);
	if (!peer || !page_table || !dma_mapping)
		return emu_fail(op, -EINVAL);
	/* Real driver: takes the freed container's semaphore and walks its list. */
	if (dangling_arg("dma_unmap_pages", page_table))
		return 0;
	/*
	 * Legal inside a free callback: nv_p2p_remove_dma_mapping takes only
	 * the table's own semaphore, and nv_p2p_mem_info_free_callback frees
	 * the container after the client's callback returns (rule 1,
	 * unmap-in-callback, is retired: nothing raises it).
	 */
	ret = emu_fault_check(op);
	if (ret)
		return emu_fail(op, ret);

	/* No RM lock here, as in the real driver. */
	mutex_lock(&emu.tbl_lock);
	p = emu_pin_lookup(page_table);
	if (!p) {
		bool ours = report_dead_table("dma_unmap_pages", page_table);

		mutex_unlock(&emu.tbl_lock);
		return ours ? 0 : emu_fail(op, -EINVAL);
	}
	mp = map_lookup(dma_mapping);
	if (!mp || mp->pin != p) {
		struct emu_tomb *t = emu_tomb_lookup((unsigned long)dma_mapping,
						     EMU_TOMB_MAP);

		emu_violation(NVP2P_EMU_V_STALE_MAPPING,
			      "dma_unmap_pages on mapping %px: %s", dma_mapping,
			      t ? "already unmapped/freed" :
			      mp ? "belongs to another page table" :
			      "never a mapping of this provider");
		mutex_unlock(&emu.tbl_lock);
		return 0;
	}
	if (mp->peer != peer)
		emu_violation(NVP2P_EMU_V_WRONG_PEER,
			      "dma_unmap_pages with peer %s, mapping %px was made for %s",
			      pci_name(peer), dma_mapping, pci_name(mp->peer));
	hash_del(&mp->hnode);
	list_del(&mp->node);
	emu.live_maps--;
	p->unmap_inflight++;
	mutex_unlock(&emu.tbl_lock);

	emu_get_config(&cfg);
	emu_delay_ns(cfg.unmap_delay_ns);
	emu_map_release(mp);

	mutex_lock(&emu.tbl_lock);
	emu_tomb_add((unsigned long)dma_mapping, EMU_TOMB_MAP, EMU_END_PUT,
		     p->tgid, p->id);
	p->unmap_inflight--;
	wake_up_var(&p->unmap_inflight);
	mutex_unlock(&emu.tbl_lock);
	return 0;
}

/* The DMA addresses of a live mapping, for the core emulator (nvp2p_emu.h). */
int nvp2p_emu_mapped_pages(pid_t tgid, u64 va, const struct device *dev,
			   u64 first_dma, u64 *out, u32 npages, u64 since)
{
	u64 span = (u64)npages << EMU_GPU_PAGE_SHIFT, idx;
	struct emu_map *mp;
	struct emu_pin *p;
	bool covered = false;
	u32 i;

	va = ALIGN_DOWN(va, EMU_GPU_PAGE_SIZE);
	mutex_lock(&emu.tbl_lock);
	list_for_each_entry(p, &emu.pins, node) {
		if (p->tgid != tgid || p->state != EMU_PIN_LIVE || va < p->va ||
		    va + span > p->va + p->len)
			continue;
		covered = true;
		idx = (va - p->va) >> EMU_GPU_PAGE_SHIFT;
		list_for_each_entry(mp, &p->maps, node) {
			if (&mp->peer->dev != dev || idx + npages > mp->nr ||
			    mp->m->dma_addresses[idx] != first_dma)
				continue;
			for (i = 0; i < npages; i++)
				out[i] = mp->m->dma_addresses[idx + i];
			mutex_unlock(&emu.tbl_lock);
			return 0;
		}
	}
	mutex_unlock(&emu.tbl_lock);
	if (!covered)
		return -ENOENT;
	return atomic64_read(&emu_pin_gen) != since ? -EAGAIN : -ENXIO;
}
EXPORT_SYMBOL_GPL(nvp2p_emu_mapped_pages);

u64 nvp2p_emu_pin_generation(void)
{
	return atomic64_read(&emu_pin_gen);
}
EXPORT_SYMBOL_GPL(nvp2p_emu_pin_generation);

/* The two documented no-ops; count whether they came from a callback. */
static int free_noop(unsigned int op)
{
	emu_count_call(op);
	if (emu_in_callback()) {
		spin_lock(&emu.stat_lock);
		emu.free_calls_in_cb++;
		spin_unlock(&emu.stat_lock);
	}
	return 0;
}

/*
 * The exported entry points: each runs its call above and adds the time it took
 * to the provider's API time (nvp2p_emu_stats.api_ns), so that a benchmark can
 * split a registration's time between the provider and its callers.
 */

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	u64 t0 = ktime_get_ns();
	int ret = api_get_pages(p2p_token, va_space, virtual_address, length, page_table,
				free_callback, data);

	emu_account_api_ns(NVP2P_EMU_OP_GET_PAGES, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags)
{
	u64 t0 = ktime_get_ns();
	int ret = api_get_pages_persistent(virtual_address, length, page_table, flags);

	emu_account_api_ns(NVP2P_EMU_OP_GET_PAGES_PERSISTENT, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	u64 t0 = ktime_get_ns();
	int ret = api_put_pages(p2p_token, va_space, virtual_address, page_table);

	emu_account_api_ns(NVP2P_EMU_OP_PUT_PAGES, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags)
{
	u64 t0 = ktime_get_ns();
	int ret = api_put_pages_persistent(virtual_address, page_table, flags);

	emu_account_api_ns(NVP2P_EMU_OP_PUT_PAGES_PERSISTENT, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	u64 t0 = ktime_get_ns();
	int ret = api_dma_map_pages(peer, page_table, dma_mapping);

	emu_account_api_ns(NVP2P_EMU_OP_DMA_MAP, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	u64 t0 = ktime_get_ns();
	int ret = api_dma_unmap_pages(peer, page_table, dma_mapping);

	emu_account_api_ns(NVP2P_EMU_OP_DMA_UNMAP, t0);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_unmap_pages);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	/* A no-op in the real driver too, but the pointer is the client's error. */
	dangling_arg("free_page_table", page_table);
	return free_noop(NVP2P_EMU_OP_FREE_PAGE_TABLE);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return free_noop(NVP2P_EMU_OP_FREE_DMA_MAPPING);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_dma_mapping);

int nvidia_p2p_init_mapping(uint64_t p2p_token, struct nvidia_p2p_params *params,
			    void (*destroy_callback)(void *data), void *data)
{
	emu_count_call(NVP2P_EMU_OP_INIT_MAPPING);
	return emu_fail(NVP2P_EMU_OP_INIT_MAPPING, -ENOTSUPP);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_init_mapping);

int nvidia_p2p_destroy_mapping(uint64_t p2p_token)
{
	emu_count_call(NVP2P_EMU_OP_DESTROY_MAPPING);
	return emu_fail(NVP2P_EMU_OP_DESTROY_MAPPING, -ENOTSUPP);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_destroy_mapping);

int nvidia_p2p_register_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	const unsigned int op = NVP2P_EMU_OP_REGISTER_RSYNC;
	int ret = 0;

	emu_count_call(op);
	if (!driver || !NVIDIA_P2P_RSYNC_DRIVER_VERSION_COMPATIBLE(driver) ||
	    !driver->get_relaxed_ordering_mode || !driver->put_relaxed_ordering_mode ||
	    !driver->wait_for_rsync)
		return emu_fail(op, -EINVAL);
	mutex_lock(&emu.rm_lock);
	if (emu.rsync)
		ret = -EBUSY;
	else
		emu.rsync = driver;
	mutex_unlock(&emu.rm_lock);
	return emu_fail(op, ret);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_register_rsync_driver);

void nvidia_p2p_unregister_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	emu_count_call(NVP2P_EMU_OP_UNREGISTER_RSYNC);
	mutex_lock(&emu.rm_lock);
	if (emu.rsync == driver)
		emu.rsync = NULL;
	mutex_unlock(&emu.rm_lock);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_unregister_rsync_driver);

int nvidia_p2p_get_rsync_registers(nvidia_p2p_rsync_reg_info_t **reg_info)
{
	emu_count_call(NVP2P_EMU_OP_GET_RSYNC_REGS);
	return emu_fail(NVP2P_EMU_OP_GET_RSYNC_REGS, -ENODEV);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_rsync_registers);

void nvidia_p2p_put_rsync_registers(nvidia_p2p_rsync_reg_info_t *reg_info)
{
	emu_count_call(NVP2P_EMU_OP_PUT_RSYNC_REGS);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_rsync_registers);

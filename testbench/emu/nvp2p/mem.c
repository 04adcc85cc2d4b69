// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P provider emulator: the emulated GPU memory.
 *
 * An allocation is backed by order-4 page blocks (one per 64 KiB GPU page),
 * arranged so that consecutive GPU pages are not physically adjacent. It is
 * mapped into the allocating process with remap_pfn_range() on a
 * VM_IO | VM_PFNMAP VMA, so the range is a real user VA that the CPU can
 * touch while get_user_pages()/pin_user_pages() on it fail with -EFAULT, like
 * on a real cudaMalloc() range.
 *
 * Freeing (cudaFree, context destroy, process exit, GPU teardown) runs every
 * live non-persistent pin's free callback on the freeing thread with the RM
 * lock held, then tears the pin down: DMA mappings unmapped, page table
 * poisoned and freed, BAR1 returned. A tombstone remembers each freed table
 * and mapping address so that later calls with stale pointers are reported;
 * accesses by the client itself to freed memory are left to KASAN.
 */
#define pr_fmt(fmt) "nvp2p_emu: " fmt

#include <linux/dma-mapping.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#include "emu.h"

static void emu_alloc_release(struct kref *ref)
{
	struct emu_alloc *a = container_of(ref, struct emu_alloc, ref);
	u32 i;

	for (i = 0; i < a->nr_chunks; i++)
		if (a->chunks[i])
			__free_pages(a->chunks[i], EMU_CHUNK_ORDER);
	mutex_lock(&emu.tbl_lock);
	emu.mem_used -= a->size;
	mutex_unlock(&emu.tbl_lock);
	kvfree(a->chunks);
	kfree(a);
}

void emu_alloc_put(struct emu_alloc *a)
{
	kref_put(&a->ref, emu_alloc_release);
}

static bool chunks_adjacent(struct page *lo, struct page *hi)
{
	return page_to_phys(lo) + EMU_GPU_PAGE_SIZE == page_to_phys(hi);
}

/*
 * Reorder the blocks so that no GPU page is physically followed by the next
 * one (the buddy allocator tends to hand out neighbours). Best effort: with
 * two blocks that happen to be adjacent both ways round cannot occur, so a
 * swap always fixes a pair.
 */
static void emu_scatter_chunks(struct page **c, u32 n)
{
	u32 i, j, pass;

	for (i = 0; i < n / 2; i++)
		swap(c[i], c[n - 1 - i]);
	for (pass = 0; pass < 4; pass++) {
		bool clean = true;

		for (i = 1; i < n; i++) {
			if (!chunks_adjacent(c[i - 1], c[i]))
				continue;
			clean = false;
			j = (i + 1 < n) ? i + 1 : 0;
			if (j == i - 1)
				swap(c[i - 1], c[i]);
			else
				swap(c[i], c[j]);
		}
		if (clean)
			break;
	}
}

struct emu_alloc *emu_alloc_create(u64 size, u32 flags)
{
	struct emu_alloc *a;
	u64 limit = (u64)emu_max_mem_mb << 20;
	u32 i, n;

	if (!size || size > limit || (flags & ~NVP2P_EMU_ALLOC_FLAGS_ALL))
		return ERR_PTR(!size || (flags & ~NVP2P_EMU_ALLOC_FLAGS_ALL) ?
			       -EINVAL : -ENOMEM);
	size = ALIGN(size, EMU_GPU_PAGE_SIZE);
	n = size >> EMU_GPU_PAGE_SHIFT;

	mutex_lock(&emu.tbl_lock);
	if (emu.mem_used + size > limit) {
		mutex_unlock(&emu.tbl_lock);
		return ERR_PTR(-ENOMEM);
	}
	emu.mem_used += size;
	mutex_unlock(&emu.tbl_lock);

	a = kzalloc_obj(*a);
	if (!a)
		goto undo_acct;
	kref_init(&a->ref);
	INIT_LIST_HEAD(&a->node);
	a->size = size;
	a->flags = flags;
	a->tgid = current->tgid;
	a->chunks = kvcalloc(n, sizeof(*a->chunks), GFP_KERNEL);
	if (!a->chunks) {
		kfree(a);
		goto undo_acct;
	}
	a->nr_chunks = n;
	for (i = 0; i < n; i++) {
		a->chunks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN,
					   EMU_CHUNK_ORDER);
		if (!a->chunks[i]) {
			emu_alloc_put(a);   /* frees what was allocated, unaccounts */
			return ERR_PTR(-ENOMEM);
		}
	}
	emu_scatter_chunks(a->chunks, n);
	return a;

undo_acct:
	mutex_lock(&emu.tbl_lock);
	emu.mem_used -= size;
	mutex_unlock(&emu.tbl_lock);
	return ERR_PTR(-ENOMEM);
}

/* Make a mapped allocation visible to get_pages and the free paths. */
void emu_alloc_publish(struct emu_alloc *a)
{
	mutex_lock(&emu.tbl_lock);
	a->handle = ++emu.next_handle;
	a->va_space = (u32)a->handle;
	a->token = (get_random_u64() << 1) | 1;
	list_add_tail(&a->node, &emu.allocs);
	emu.live_allocs++;
	mutex_unlock(&emu.tbl_lock);
}

/* The caller's allocation at va (or with handle if va == 0), with a reference. */
struct emu_alloc *emu_alloc_find_owned(pid_t tgid, u64 va, u64 handle)
{
	struct emu_alloc *a, *found = NULL;

	mutex_lock(&emu.tbl_lock);
	list_for_each_entry(a, &emu.allocs, node) {
		if (a->tgid != tgid)
			continue;
		if (va ? a->va == va : a->handle == handle) {
			kref_get(&a->ref);
			found = a;
			break;
		}
	}
	mutex_unlock(&emu.tbl_lock);
	return found;
}

/* Legacy token/va_space of the caller's live allocation holding va. */
int emu_alloc_token(pid_t tgid, u64 va, u64 *token, u32 *va_space)
{
	struct emu_alloc *a;
	int ret = -EINVAL;

	mutex_lock(&emu.tbl_lock);
	list_for_each_entry(a, &emu.allocs, node) {
		if (a->tgid == tgid && va >= a->va && va - a->va < a->size) {
			*token = a->token;
			*va_space = a->va_space;
			ret = 0;
			break;
		}
	}
	mutex_unlock(&emu.tbl_lock);
	return ret;
}

/* ---- the user mapping ---- */

static void emu_vma_open(struct vm_area_struct *vma)
{
	struct emu_alloc *a = vma->vm_private_data;

	kref_get(&a->ref);
}

static void emu_vma_close(struct vm_area_struct *vma)
{
	emu_alloc_put(vma->vm_private_data);
}

/* Device memory cannot be moved to another address. */
static int emu_vma_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct emu_vm_ops = {
	.open = emu_vma_open,
	.close = emu_vma_close,
	.mremap = emu_vma_mremap,
};

int emu_mmap_alloc(struct emu_alloc *a, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	u32 i;
	int ret;

	if (len != a->size || (vma->vm_start & EMU_GPU_PAGE_MASK))
		return -EINVAL;
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP |
			  VM_DONTCOPY);
	for (i = 0; i < a->nr_chunks; i++) {
		ret = remap_pfn_range(vma, vma->vm_start + (u64)i * EMU_GPU_PAGE_SIZE,
				      page_to_pfn(a->chunks[i]), EMU_GPU_PAGE_SIZE,
				      vma->vm_page_prot);
		if (ret)
			return ret;
	}
	a->va = vma->vm_start;
	vma->vm_private_data = a;
	vma->vm_ops = &emu_vm_ops;
	kref_get(&a->ref);
	return 0;
}

/* Remove the owner's mapping of a freed allocation (only from the owner). */
void emu_unmap_user(struct emu_alloc *a)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	bool ours;

	if (!mm || current->tgid != a->tgid || !a->va)
		return;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, a->va);
	ours = vma && vma->vm_ops == &emu_vm_ops && vma->vm_private_data == a;
	mmap_read_unlock(mm);
	if (ours)
		vm_munmap(a->va, a->size);
}

/* ---- tombstones ---- */

struct emu_tomb *emu_tomb_lookup(unsigned long key, enum emu_tomb_kind kind)
{
	struct emu_tomb *t;

	lockdep_assert_held(&emu.tbl_lock);
	hash_for_each_possible(emu.tomb_hash, t, hnode, key)
		if (t->key == key && t->kind == kind)
			return t;
	return NULL;
}

static void emu_tomb_free(struct emu_tomb *t)
{
	hash_del(&t->hnode);
	list_del(&t->node);
	emu.nr_tombs--;
	kfree(t->held);
	kfree(t);
}

/* A new object at this address: forget what used to live there. */
void emu_tomb_forget(unsigned long key, enum emu_tomb_kind kind)
{
	struct emu_tomb *t = emu_tomb_lookup(key, kind);

	if (t)
		emu_tomb_free(t);
}

void emu_tomb_add(unsigned long key, enum emu_tomb_kind kind, enum emu_end how,
		  pid_t tgid, u64 id)
{
	struct emu_tomb *t;

	lockdep_assert_held(&emu.tbl_lock);
	emu_tomb_forget(key, kind);
	while (emu.nr_tombs && emu.nr_tombs >= READ_ONCE(emu_quarantine_max))
		emu_tomb_free(list_first_entry(&emu.tombs, struct emu_tomb, node));
	if (!READ_ONCE(emu_quarantine_max))
		return;
	t = kzalloc_obj(*t);
	if (!t)
		return;     /* only lessens later diagnostics */
	t->key = key;
	t->kind = kind;
	t->how = how;
	t->ender = current->pid;
	t->tgid = tgid;
	t->id = id;
	hash_add(emu.tomb_hash, &t->hnode, key);
	list_add_tail(&t->node, &emu.tombs);
	emu.nr_tombs++;
}

/*
 * Free @mem, the poisoned memory of the object the tombstone of @key remembers,
 * or keep it until that tombstone goes. Kept, the address names one object for
 * as long as the emulator judges pointers by it: on a kernel whose allocator
 * reuses a freed address at once (no KASAN), a late call with the stale pointer
 * of a table a callback freed would otherwise meet the tombstone of a later
 * table at the same address, one that was put, and be judged by that table's
 * end. Under KASAN the memory is freed at once: KASAN's own quarantine delays
 * the reuse, and it reports a client's reads of the freed table only while the
 * memory really is free. Called with tbl_lock held.
 */
void emu_tomb_hold(unsigned long key, enum emu_tomb_kind kind, void *mem)
{
	struct emu_tomb *t;

	lockdep_assert_held(&emu.tbl_lock);
	t = IS_ENABLED(CONFIG_KASAN) ? NULL : emu_tomb_lookup(key, kind);
	if (t && !t->held)
		t->held = mem;
	else
		kfree(mem);
}

void emu_tombs_clear(void)
{
	mutex_lock(&emu.tbl_lock);
	while (!list_empty(&emu.tombs))
		emu_tomb_free(list_first_entry(&emu.tombs, struct emu_tomb, node));
	mutex_unlock(&emu.tbl_lock);
}

/* ---- pins ---- */

struct emu_pin *emu_pin_lookup(const struct nvidia_p2p_page_table *pt)
{
	struct emu_pin *p;

	lockdep_assert_held(&emu.tbl_lock);
	hash_for_each_possible(emu.pt_hash, p, hnode, (unsigned long)pt)
		if (p->pt == pt)
			return p;
	return NULL;
}

bool emu_pin_table_modified(const struct emu_pin *p)
{
	const struct nvidia_p2p_page_table *pt = p->pt, *s = &p->snap;

	return pt->version != s->version || pt->page_size != s->page_size ||
	       pt->pages != s->pages || pt->entries != s->entries ||
	       pt->gpu_uuid != s->gpu_uuid || pt->flags != s->flags;
}

/* Unmap and free one DMA mapping that is no longer linked anywhere. */
void emu_map_release(struct emu_map *mp)
{
	u32 i;

	for (i = 0; i < mp->nr; i++)
		dma_unmap_page_attrs(&mp->peer->dev, mp->m->dma_addresses[i],
				     EMU_GPU_PAGE_SIZE, DMA_BIDIRECTIONAL,
				     DMA_ATTR_SKIP_CPU_SYNC);
	memset(mp->m->dma_addresses, EMU_POISON_BYTE, mp->nr * sizeof(u64));
	kfree(mp->m->dma_addresses);
	memset(mp->m, EMU_POISON_BYTE, sizeof(*mp->m));
	kfree(mp->m);
	pci_dev_put(mp->peer);
	kfree(mp);
}

static void emu_pin_free_table(struct emu_pin *p)
{
	memset(p->pages, EMU_POISON_BYTE, p->nr * sizeof(*p->pages));
	memset(p->ptrs, EMU_POISON_BYTE, p->nr * sizeof(*p->ptrs));
	memset(p->uuid, EMU_POISON_BYTE, NVIDIA_P2P_GPU_UUID_LEN);
	memset(p->pt, EMU_POISON_BYTE, sizeof(*p->pt));
	kvfree(p->pages);
	kvfree(p->ptrs);
	kfree(p->uuid);
	mutex_lock(&emu.tbl_lock);
	emu_tomb_hold((unsigned long)p->pt, EMU_TOMB_PT, p->pt);
	mutex_unlock(&emu.tbl_lock);
}

/*
 * End a live pin: unlink it, unmap and free its DMA mappings and its page
 * table, return BAR1, drop the allocation. Called with rm_lock held (put or
 * free path) or at unload.
 */
atomic64_t emu_pin_gen = ATOMIC64_INIT(0);

void emu_teardown_pin(struct emu_pin *p, enum emu_end how)
{
	struct emu_map *mp, *tmp;
	struct emu_map_wait *w;
	LIST_HEAD(maps);
	unsigned long key = (unsigned long)p->pt;

	atomic64_inc(&emu_pin_gen);
	mutex_lock(&emu.tbl_lock);
	if (emu_pin_table_modified(p))
		emu_violation(NVP2P_EMU_V_TABLE_MODIFIED,
			      "page table %px (pin %llu) fields were changed by the client",
			      p->pt, p->id);
	if (p->unmap_inflight)
		emu_violation(NVP2P_EMU_V_UNMAP_RACES_TEARDOWN,
			      "dma_unmap_pages still running on table %px when it was freed (real driver: use-after-free)",
			      p->pt);
	mutex_unlock(&emu.tbl_lock);
	/* Do not free the table under an unmapper; it needs no RM lock. */
	wait_var_event(&p->unmap_inflight, READ_ONCE(p->unmap_inflight) == 0);

	mutex_lock(&emu.tbl_lock);
	hash_del(&p->hnode);
	list_del(&p->node);
	list_for_each_entry_safe(mp, tmp, &p->maps, node) {
		hash_del(&mp->hnode);
		list_move_tail(&mp->node, &maps);
		emu_tomb_add((unsigned long)mp->m, EMU_TOMB_MAP, how, p->tgid, p->id);
		emu.live_maps--;
	}
	emu_tomb_add(key, EMU_TOMB_PT, how, p->tgid, p->id);
	list_for_each_entry(w, &emu.map_waits, node) {
		if (w->pin == p && !w->ended) {
			w->ended = true;
			w->how = how;
			w->ender = current->pid;
		}
	}
	emu.bar1_used -= p->len;
	emu.live_pins--;
	if (p->persistent)
		emu.live_persistent--;
	emu.pinned_pages -= p->nr;
	p->alloc->pins--;
	mutex_unlock(&emu.tbl_lock);

	list_for_each_entry_safe(mp, tmp, &maps, node) {
		list_del(&mp->node);
		emu_map_release(mp);
	}
	emu_pin_free_table(p);
	emu_alloc_put(p->alloc);
	kfree(p);
}

/*
 * Ask the core emulator, if it is loaded, whether the client stopped DMA
 * (nvp2p_emu.h); rm_lock held.
 */
static void emu_probe_dma_stopped(struct emu_pin *p)
{
	const struct nvidia_p2p_dma_mapping **arr = NULL;
	struct nvp2p_emu_revoke_info info = {};
	struct emu_map *mp;
	unsigned int n = 0;
	typeof(&peer_mem_emu_dma_stopped) probe;

	probe = symbol_get(peer_mem_emu_dma_stopped);
	if (!probe)
		return;
	mutex_lock(&emu.tbl_lock);
	list_for_each_entry(mp, &p->maps, node)
		n++;
	if (n) {
		arr = kcalloc(n, sizeof(*arr), GFP_KERNEL);
		if (arr) {
			n = 0;
			list_for_each_entry(mp, &p->maps, node)
				arr[n++] = mp->m;
		} else {
			n = 0;
		}
	}
	mutex_unlock(&emu.tbl_lock);
	info.va = p->va;
	info.len = p->len;
	info.tgid = p->tgid;
	info.cb_data = p->data;
	info.page_table = p->pt;
	info.nr_mappings = n;
	info.mappings = arr;
	if (!probe(&info))
		emu_violation(NVP2P_EMU_V_DMA_NOT_STOPPED,
			      "free callback %ps(%px) returned but device DMA to table %px is still live",
			      p->cb, p->data, p->pt);
	kfree(arr);
	symbol_put(peer_mem_emu_dma_stopped);
}

/*
 * cudaFree: mark the allocation freed, then for each of its live callback
 * pins run the callback on this thread under the RM lock and tear it down.
 * Drops the allocation record's own reference. Caller holds a reference.
 */
int emu_free_alloc(struct emu_alloc *a, unsigned int *callbacks)
{
	struct emu_pin *p, *tmp;
	struct nvp2p_emu_config cfg;
	LIST_HEAD(work);
	unsigned int n = 0;

	mutex_lock(&emu.rm_lock);
	mutex_lock(&emu.tbl_lock);
	if (a->freed) {
		mutex_unlock(&emu.tbl_lock);
		mutex_unlock(&emu.rm_lock);
		return -EINVAL;
	}
	a->freed = true;
	list_del_init(&a->node);
	emu.live_allocs--;
	list_for_each_entry(p, &emu.pins, node) {
		if (p->alloc != a || p->persistent || p->state != EMU_PIN_LIVE)
			continue;
		p->state = EMU_PIN_CALLBACK;
		atomic64_inc(&emu_pin_gen);
		list_add_tail(&p->work, &work);
	}
	mutex_unlock(&emu.tbl_lock);

	emu_get_config(&cfg);
	list_for_each_entry_safe(p, tmp, &work, work) {
		list_del(&p->work);
		WRITE_ONCE(emu.cb_task, current);
		emu_delay_ns(cfg.cb_delay_ns);
		p->cb(p->data);
		emu_delay_ns(cfg.cb_after_delay_ns);
		emu_probe_dma_stopped(p);
		WRITE_ONCE(emu.cb_task, NULL);
		spin_lock(&emu.stat_lock);
		emu.callbacks++;
		spin_unlock(&emu.stat_lock);
		emu_teardown_pin(p, EMU_END_CALLBACK);
		n++;
	}
	mutex_unlock(&emu.rm_lock);
	emu_alloc_put(a);   /* the allocation record's reference */
	if (callbacks)
		*callbacks += n;
	return 0;
}

/*
 * Free, one by one, every live allocation of tgid (or of owner, or all).
 * Returns 0; counts in *allocs and *callbacks.
 */
int emu_free_matching(pid_t tgid, struct emu_file *owner, bool all,
		      unsigned int *allocs, unsigned int *callbacks)
{
	struct emu_alloc *a;

	for (;;) {
		struct emu_alloc *found = NULL;

		mutex_lock(&emu.tbl_lock);
		list_for_each_entry(a, &emu.allocs, node) {
			if (all || (owner ? a->owner == owner : a->tgid == tgid)) {
				kref_get(&a->ref);
				found = a;
				break;
			}
		}
		mutex_unlock(&emu.tbl_lock);
		if (!found)
			return 0;
		if (!emu_free_alloc(found, callbacks) && allocs)
			(*allocs)++;
		emu_alloc_put(found);
	}
}

/* Unload: every pin still alive is a leak; free it without calling anyone. */
void emu_teardown_all(void)
{
	struct emu_pin *p;

	emu_check_leaks();
	for (;;) {
		mutex_lock(&emu.rm_lock);
		mutex_lock(&emu.tbl_lock);
		p = list_first_entry_or_null(&emu.pins, struct emu_pin, node);
		mutex_unlock(&emu.tbl_lock);
		if (p)
			emu_teardown_pin(p, EMU_END_FORCED);
		mutex_unlock(&emu.rm_lock);
		if (!p)
			break;
	}
	emu_free_matching(0, NULL, true, NULL, NULL);
}

int emu_check_leaks(void)
{
	struct emu_pin *p;
	int n = 0;

	mutex_lock(&emu.tbl_lock);
	list_for_each_entry(p, &emu.pins, node) {
		n++;
		emu_violation(NVP2P_EMU_V_LEAKED_PIN,
			      "pin %llu (%s, va 0x%llx len 0x%llx, tgid %d, table %px) was never put nor revoked",
			      p->id, p->persistent ? "persistent" : "callback",
			      p->va, p->len, p->tgid, p->pt);
	}
	mutex_unlock(&emu.tbl_lock);
	return n;
}

int emu_list(u32 kind, void *buf, u32 cap, u32 *count)
{
	u32 n = 0;

	mutex_lock(&emu.tbl_lock);
	if (kind == NVP2P_EMU_LIST_ALLOCS) {
		struct nvp2p_emu_alloc_info *out = buf;
		struct emu_alloc *a;

		list_for_each_entry(a, &emu.allocs, node) {
			if (n < cap) {
				out[n] = (struct nvp2p_emu_alloc_info){
					.handle = a->handle, .va = a->va,
					.size = a->size, .tgid = a->tgid,
					.flags = a->flags,
					.state = NVP2P_EMU_ALLOC_LIVE,
					.pins = a->pins,
					.first_phys = page_to_phys(a->chunks[0]),
				};
			}
			n++;
		}
	} else {
		struct nvp2p_emu_pin_info *out = buf;
		struct emu_pin *p;
		struct emu_map *mp;

		list_for_each_entry(p, &emu.pins, node) {
			if (n < cap) {
				u32 maps = 0;

				list_for_each_entry(mp, &p->maps, node)
					maps++;
				out[n] = (struct nvp2p_emu_pin_info){
					.id = p->id, .alloc_handle = p->alloc->handle,
					.va = p->va, .len = p->len, .tgid = p->tgid,
					.persistent = p->persistent,
					.state = p->state, .mappings = maps,
				};
			}
			n++;
		}
	}
	mutex_unlock(&emu.tbl_lock);
	*count = n;
	return 0;
}

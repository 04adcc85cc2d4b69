// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: MR registration as ib_umem_get_peer() does it
 * (docs/emulators.md, "Registration rules"), for every emulated OFED model, plus the fake
 * HCA's object creation and activation step.
 */
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/pci.h>
#include <linux/device/faux.h>
#include <linux/dma-mapping.h>
#include <linux/log2.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include "nvp2p_emu.h"
#include "pme.h"

#define PME_EDU_VENDOR 0x1234
#define PME_EDU_DEVICE 0x11e8

static struct pci_dev *pme_edu;
static struct faux_device *pme_faux;
static struct lock_class_key pme_mapping_lock_key;

int pme_devices_init(void)
{
	pme_edu = pci_get_device(PME_EDU_VENDOR, PME_EDU_DEVICE, NULL);
	if (!pme_edu)
		pr_warn("peer_mem_emu: no QEMU edu PCI device (1234:11e8); PCI dma_device unavailable\n");
	/*
	 * No driver binds edu, so it keeps the PCI default 32-bit mask; an HCA driver sets 64 bits
	 * (mlx5 does). With 32 bits the vIOMMU runs out of IOVA after about 2 GiB mapped at once.
	 * The DMA layer still hands out addresses below 4 GiB first.
	 */
	if (pme_edu && dma_set_mask_and_coherent(&pme_edu->dev, DMA_BIT_MASK(64)))
		pr_warn("peer_mem_emu: edu keeps its 32-bit DMA mask\n");
	pme_faux = faux_device_create("peer_mem_emu_nonpci", NULL, NULL);
	if (!pme_faux)
		return -ENOMEM;
	/* a usable, non-PCI DMA device (no IOMMU): hazard H6 */
	dma_coerce_mask_and_coherent(&pme_faux->dev, DMA_BIT_MASK(64));
	return 0;
}

void pme_devices_exit(void)
{
	faux_device_destroy(pme_faux);
	pci_dev_put(pme_edu);
}

struct device *pme_dma_device(u32 which)
{
	if (which == PME_DEV_PCI)
		return pme_edu ? &pme_edu->dev : NULL;
	if (which == PME_DEV_NONPCI)
		return &pme_faux->dev;
	return NULL;
}

static void pme_mr_free(struct kref *ref)
{
	struct pme_mr *mr = container_of(ref, struct pme_mr, ref);

	if (mr->mm)
		mmdrop(mr->mm);
	kvfree(mr->pages);
	kfree(mr);
}

void pme_mr_put(struct pme_mr *mr)
{
	kref_put(&mr->ref, pme_mr_free);
}

/* ---- host memory (the GUP path that runs before any peer client) ---- */

static long pme_pin_host(struct pme_mr *mr)
{
	unsigned long start = ALIGN_DOWN(mr->addr, PAGE_SIZE);
	unsigned int gup_flags = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	struct page **chunk;
	long ret;

	/*
	 * Like ib_umem_get: the first pin goes through one page of page pointers,
	 * so a range GUP refuses at once (GPU memory, which then goes to the peer
	 * clients) costs one page, not an array sized for the whole range.
	 */
	chunk = (struct page **)__get_free_page(GFP_KERNEL);
	if (!chunk)
		return -ENOMEM;
	ret = pin_user_pages_fast(start, min_t(unsigned long, mr->npages,
					       PAGE_SIZE / sizeof(*chunk)),
				  gup_flags, chunk);
	if (ret <= 0) {
		free_page((unsigned long)chunk);
		return ret ? ret : -EFAULT;
	}
	mr->pages = kvcalloc(mr->npages, sizeof(*mr->pages), GFP_KERNEL);
	if (!mr->pages) {
		unpin_user_pages(chunk, ret);
		free_page((unsigned long)chunk);
		return -ENOMEM;
	}
	memcpy(mr->pages, chunk, ret * sizeof(*chunk));
	free_page((unsigned long)chunk);
	mr->npinned = ret;
	while (mr->npinned < mr->npages) {
		unsigned long left = mr->npages - mr->npinned;

		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto fail;
		}
		ret = pin_user_pages_fast(start + mr->npinned * PAGE_SIZE,
					  min_t(unsigned long, left, 512), gup_flags,
					  mr->pages + mr->npinned);
		if (ret <= 0) {
			ret = ret ? ret : -EFAULT;
			goto fail;
		}
		mr->npinned += ret;
	}
	return 0;
fail:
	unpin_user_pages(mr->pages, mr->npinned);
	mr->npinned = 0;
	kvfree(mr->pages);
	mr->pages = NULL;
	return ret;
}

/* ---- helpers around client calls ---- */

static int pme_call_get_pages(struct pme_mr *mr, struct sg_table *sg_head,
			      u64 core_context)
{
	struct pme_call call;
	int ret;

	pme_call_enter(&call, mr->client, mr, "get_pages");
	ret = mr->client->ops->get_pages(mr->addr, mr->len, 1, !mr->writable,
					 sg_head, mr->ctx, core_context);
	pme_call_exit(&call);
	return ret;
}

static unsigned long pme_call_page_size(struct pme_mr *mr)
{
	struct pme_call call;
	unsigned long ps;

	if (!mr->client->ops->get_page_size) {
		pme_violation(PME_R_PAGE_SIZE,
			      "client %s has no get_page_size; every OFED core calls it",
			      mr->client->name);
		return PAGE_SIZE;
	}
	pme_call_enter(&call, mr->client, mr, "get_page_size");
	ps = mr->client->ops->get_page_size(mr->ctx);
	pme_call_exit(&call);
	if (!ps || !is_power_of_2(ps) || ps < PAGE_SIZE) {
		pme_violation(PME_R_PAGE_SIZE,
			      "client %s get_page_size returned %lu (want a power of 2 >= %lu)",
			      mr->client->name, ps, PAGE_SIZE);
	}
	return ps;
}

static void pme_call_put_pages(struct pme_mr *mr)
{
	struct pme_call call;

	pme_call_enter(&call, mr->client, mr, "put_pages");
	mr->client->ops->put_pages(&mr->sgt, mr->ctx);
	pme_call_exit(&call);
	mr->n_put_pages++;
}

/*
 * Fingerprint of the sg entries the core hands back to the client later. A
 * client may report more mapped entries than its table has (recorded as an
 * sg-nmap violation): only the entries that exist are read.
 */
u64 pme_sg_hash(struct sg_table *sgt, u32 n)
{
	struct scatterlist *sg;
	u64 h = 1469598103934665603ULL;
	u32 i;

	if (!sgt->sgl)
		return h;
	for_each_sg(sgt->sgl, sg, min(n, sgt->orig_nents), i) {
		h = (h ^ sg_dma_address(sg)) * 1099511628211ULL;
		h = (h ^ sg_dma_len(sg)) * 1099511628211ULL;
		h = (h ^ sg->length) * 1099511628211ULL;
	}
	return h;
}

#define PME_GPU_PAGE_SHIFT 16
#define PME_GPU_PAGE (1ul << PME_GPU_PAGE_SHIFT)

/*
 * The fake HCA reads the client's SGL as an HCA would DMA through it: every
 * byte the entries name, in order, must be the provider's DMA mapping of the
 * registered range for this device, from the first byte of its first GPU
 * page to the last of its last (nothing off by a page, nothing the provider
 * never mapped or mapped for another device, nothing trimmed before the core
 * trims). Judged where the range is pinned by the provider emulator
 * (nvp2p_emu_mapped_pages(), looked up by symbol_get(): neither module needs
 * the other); other memory (pme_selftest's) is not. Before trimming.
 */
static bool pme_check_sgl_dma(struct pme_mr *mr)
{
	u64 base = ALIGN_DOWN(mr->addr, PME_GPU_PAGE);
	u64 end = ALIGN(mr->addr + mr->len, PME_GPU_PAGE);
	u32 npages = (end - base) >> PME_GPU_PAGE_SHIFT;
	typeof(&nvp2p_emu_mapped_pages) lookup;
	struct scatterlist *sg;
	u64 *pages, pos = 0;
	bool ok = true;
	int ret;
	u32 i;

	if (!mr->dma_dev || !npages)
		return true;
	lookup = symbol_get(nvp2p_emu_mapped_pages);
	if (!lookup)
		return true;
	pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		goto out_put;	/* not judged, as a probe that cannot allocate */
	/* (without the generation from before dma_map nothing can tell a race: not judged) */
	if (!mr->p2p_gen_valid)
		goto out;
	ret = lookup(mr->owner_tgid, base, mr->dma_dev, sg_dma_address(mr->sgt.sgl),
		     pages, npages, mr->p2p_gen);
	if (ret == -ENOENT || ret == -EAGAIN)
		goto out;
	if (ret) {
		pme_violation(PME_R_SG_DMA,
			      "client %s: first sg entry of MR %u at %pad is not where a live mapping of the provider for %s starts the range's first GPU page",
			      mr->client->name, mr->handle, &sg_dma_address(mr->sgt.sgl),
			      dev_name(mr->dma_dev));
		ok = false;
		goto out;
	}
	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i) {
		u64 a = sg_dma_address(sg), left = sg_dma_len(sg);

		while (left) {
			u64 k = pos >> PME_GPU_PAGE_SHIFT, off = pos & (PME_GPU_PAGE - 1);
			u64 chunk = min(left, PME_GPU_PAGE - off);

			if (k >= npages || a != pages[k] + off) {
				pme_violation(PME_R_SG_DMA,
					      "client %s: sg entry %u of MR %u names %#llx, where the provider mapped %s",
					      mr->client->name, i, mr->handle, a,
					      k >= npages ? "nothing (past the range's last GPU page)" :
					      "another address for that byte of the range");
				ok = false;
				goto out;
			}
			a += chunk;
			left -= chunk;
			pos += chunk;
		}
	}
	if (pos != (u64)npages << PME_GPU_PAGE_SHIFT) {
		pme_violation(PME_R_SG_DMA,
			      "client %s: the sg entries of MR %u cover %llu bytes of the %u GPU pages (%llu bytes) the range spans",
			      mr->client->name, mr->handle, pos, npages,
			      (u64)npages << PME_GPU_PAGE_SHIFT);
		ok = false;
	}
out:
	kvfree(pages);
out_put:
	symbol_put(nvp2p_emu_mapped_pages);
	return ok;
}

/* Section 1.6 step 8 checks: nmap range, entry alignment, the provider's mapping. */
static bool pme_check_sgl(struct pme_mr *mr)
{
	struct scatterlist *sg;
	u32 i;

	if (!mr->sgt.sgl || mr->nmap == 0 || mr->nmap > mr->sgt.orig_nents) {
		pme_violation(PME_R_SG_NMAP,
			      "client %s dma_map: nmap=%u, sg_table has %u entries (sgl %s)",
			      mr->client->name, mr->nmap, mr->sgt.orig_nents,
			      mr->sgt.sgl ? "set" : "NULL");
		return false;
	}
	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i) {
		if (!IS_ALIGNED(sg_dma_address(sg), PAGE_SIZE) ||
		    !sg_dma_len(sg) || !IS_ALIGNED(sg_dma_len(sg), PAGE_SIZE)) {
			pme_violation(PME_R_SG_ENTRY,
				      "client %s sg entry %u: dma address %pad length %u not PAGE_SIZE aligned/multiple",
				      mr->client->name, i, &sg_dma_address(sg),
				      sg_dma_len(sg));
			return false;
		}
	}
	return pme_check_sgl_dma(mr);
}

/*
 * OFED 5.5+: when the peer page size differs from PAGE_SIZE, narrow the
 * first and last entries to the PAGE_SIZE-aligned user range, remembering the
 * original values (restored in pme_unmap_peer()).
 */
static void pme_trim_sgl(struct pme_mr *mr, unsigned long pps)
{
	struct scatterlist *first = mr->sgt.sgl, *last = NULL, *sg;
	u64 end = mr->addr + mr->len;
	unsigned long head, tail;
	u32 i;

	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i)
		last = sg;
	head = ALIGN_DOWN(mr->addr, PAGE_SIZE) - ALIGN_DOWN(mr->addr, pps);
	tail = ALIGN(end, pps) - ALIGN(end, PAGE_SIZE);
	if ((first == last && sg_dma_len(first) <= head + tail) ||
	    sg_dma_len(first) <= head || sg_dma_len(last) <= tail) {
		pme_violation(PME_R_SG_ENTRY,
			      "client %s: mapped entries (first %u, last %u bytes) do not cover the %lu-byte granules of the range",
			      mr->client->name, sg_dma_len(first), sg_dma_len(last), pps);
		return;
	}
	mr->trim_first = first;
	mr->trim_last = last;
	mr->orig_first_addr = sg_dma_address(first);
	mr->orig_first_dlen = sg_dma_len(first);
	mr->orig_first_len = first->length;
	mr->orig_last_dlen = sg_dma_len(last);
	mr->orig_last_len = last->length;
	sg_dma_address(first) += head;
	sg_dma_len(first) -= head;
	first->length = first->length > head ? first->length - head : 0;
	sg_dma_len(last) -= tail;
	last->length = last->length > tail ? last->length - tail : 0;
	mr->trimmed = true;
}

/*
 * The provider emulator's pin generation before the client's dma_map, so that
 * pme_check_sgl_dma() can tell a client's wrong SGL from one whose pin a free
 * callback on another thread took meanwhile.
 */
static void pme_note_p2p_gen(struct pme_mr *mr)
{
	typeof(&nvp2p_emu_pin_generation) gen = symbol_get(nvp2p_emu_pin_generation);

	mr->p2p_gen_valid = gen;
	if (gen) {
		mr->p2p_gen = gen();
		symbol_put(nvp2p_emu_pin_generation);
	}
}

static int pme_call_dma_map(struct pme_mr *mr)
{
	struct pme_call call;
	int ret;

	memset(&mr->sgt, 0, sizeof(mr->sgt));
	pme_note_p2p_gen(mr);
	pme_call_enter(&call, mr->client, mr, "dma_map");
	/* like OFED: nmap points at the table's own nents */
	ret = mr->client->ops->dma_map(&mr->sgt, mr->ctx, mr->dma_dev, 0,
				       (int *)&mr->sgt.nents);
	pme_call_exit(&call);
	mr->nmap = mr->sgt.nents;
	return ret;
}

/* ---- the client walk (ib_get_peer_client) ---- */

static struct pme_client *pme_get_peer_client(struct pme_mr *mr)
{
	struct pme_client *c, *found = NULL;
	struct pme_call call;
	u32 index = 0;
	/*
	 * ib_peer_umem_get hands every client's acquire the address of one
	 * uninitialised local, never reset between clients: poisoned here (a
	 * non-canonical address, so a client that returns > 0 without storing
	 * its context faults on first use), and what a declining client
	 * stored is what the next one sees.
	 */
	void *ctx = (void *)0x6b6b6b6b6b6b6b6bul;
	int ret;

	mutex_lock(&pme_peer_memory_mutex);
	list_for_each_entry(c, &pme_clients, node) {
		/* Position in registration order, reported to the test (not a real core's). */
		u32 pos = index++;

		if (c->zombie)
			continue;
		if (c->invalidating && !(mr->peer_flags & PME_IB_PEER_MEM_INVAL_SUPP))
			continue;
		if (pme_model(mr->model)->tickets && c->hooks49)
			continue;
		pme_call_enter(&call, c, NULL, "acquire");
		ret = c->ops->acquire(mr->addr, mr->len, NULL, NULL, &ctx);
		pme_call_exit(&call);
		if (ret > 0) {
			atomic_inc(&c->usecnt);
			atomic64_inc(&pme_cnt.acquires);
			mr->ctx = ctx;
			mr->client_index = pos;
			found = c;
			break;
		}
	}
	mutex_unlock(&pme_peer_memory_mutex);
	return found;
}

/* ---- the fake HCA: mkey creation and notifier activation ---- */

/* Wait for PME_REG_HOLD's ACTIVATE. Returns true if the HW object fails. */
static bool pme_hold(struct pme_mr *mr)
{
	u32 ms = READ_ONCE(pme_cfg.hold_timeout_ms) ?: 30000;

	if (!(mr->reg_flags & PME_REG_HOLD))
		return false;
	WRITE_ONCE(mr->held, true);
	if (!wait_for_completion_timeout(&mr->hold_done, msecs_to_jiffies(ms)))
		pr_warn("peer_mem_emu: MR %u held %u ms without ACTIVATE; activating\n",
			mr->handle, ms);
	WRITE_ONCE(mr->held, false);
	return READ_ONCE(mr->hold_fail);
}

static bool pme_hw_create_fails(struct pme_mr *mr)
{
	if (mr->reg_flags & PME_REG_FAIL_HW)
		return true;
	return pme_fault(PME_FP_MKEY) != 0;
}

int pme_mr_activate(struct pme_file *f, const struct pme_handle_op *op)
{
	struct pme_mr *mr;
	unsigned long idx;
	int found = 0;

	if (op->flags & ~PME_ACT_FAIL)
		return -EINVAL;
	xa_lock(&f->mrs);
	xa_for_each(&f->mrs, idx, mr) {
		if (op->handle && mr->handle != op->handle)
			continue;
		if (!READ_ONCE(mr->held) || completion_done(&mr->hold_done))
			continue;
		WRITE_ONCE(mr->hold_fail, !!(op->flags & PME_ACT_FAIL));
		complete(&mr->hold_done);
		found++;
	}
	xa_unlock(&f->mrs);
	return found ? 0 : -ENOENT;
}

/* ---- OFED 4.9 registration ---- */

static int pme_register_peer_49(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;
	unsigned long ps;
	int ret;

	mr->xa_id = PME_NO_INVALIDATION_ID;
	if (mr->invalidating) {
		mutex_lock(&c->lock49);
		mr->ticket49 = c->next_ticket49++;
		list_add_tail(&mr->ticket_node, &c->tickets49);
		mr->on_ticket_list = true;
		mutex_unlock(&c->lock49);
	}
	memset(&mr->sgt, 0, sizeof(mr->sgt));
	ret = pme_call_get_pages(mr, &mr->sgt, mr->ticket49);
	if (ret)
		goto out_ticket;
	pme_delay(PME_DP_AFTER_GET_PAGES);
	ps = pme_call_page_size(mr);
	if ((long)ps <= 0) {
		ret = -EINVAL;
		goto out_put;
	}
	mr->page_size = ps;
	mr->page_shift = ilog2(ps);
	ret = pme_call_dma_map(mr);
	if (ret)
		goto out_put;
	mr->n_dma_map_ok++;
	if (pme_check_sgl(mr))
		pme_probe_track(mr);
	mr->sgt_seen = mr->sgt;
	mr->sg_hash = pme_sg_hash(&mr->sgt, mr->nmap);
	mr->state = PME_ST_MAPPED;
	atomic64_inc(&c->num_alloc_mrs);
	atomic64_add(mr->nmap, &c->num_reg_pages);
	atomic64_add((u64)mr->nmap << mr->page_shift, &c->num_reg_bytes);
	pme_delay(PME_DP_AFTER_DMA_MAP);

	if (pme_hw_create_fails(mr) || pme_hold(mr)) {
		pme_mr_fail_after_map(mr);
		return -EIO;
	}
	pme_delay(PME_DP_BEFORE_ACTIVATE);
	/* activation fails if an invalidation came first */
	mutex_lock(&c->lock49);
	if (mr->inval_before_act) {
		mutex_unlock(&c->lock49);
		pme_mr_fail_after_map(mr);
		return -EINVAL;
	}
	mr->activated = mr->invalidating;
	mutex_unlock(&c->lock49);
	return 0;

out_put:
	pme_call_put_pages(mr);
out_ticket:
	if (mr->on_ticket_list) {
		mutex_lock(&c->lock49);
		list_del(&mr->ticket_node);
		mr->on_ticket_list = false;
		mutex_unlock(&c->lock49);
	}
	pme_release_ctx(mr);
	return ret;
}

/* ---- OFED 5.1+ registration (ib_peer_umem_get) ---- */

static int pme_register_peer_5x(struct pme_mr *mr)
{
	struct pme_client *c = mr->client;
	unsigned long ps;
	bool sg_ok;
	int ret;

	mr->xa_id = PME_NO_INVALIDATION_ID;
	pme_lock_mapping(mr, "registration", false);
	if (mr->invalidating) {
		ret = pme_fault(PME_FP_XA_ALLOC);
		if (!ret)
			ret = xa_alloc_cyclic(&c->umem_xa, &mr->xa_id, mr,
					      XA_LIMIT(0, PME_NO_INVALIDATION_ID - 1),
					      &c->xa_next, GFP_KERNEL);
		if (ret < 0) {
			mr->xa_id = PME_NO_INVALIDATION_ID;
			goto out_unlock;
		}
	}
	ret = pme_call_get_pages(mr, NULL, mr->xa_id);
	if (ret)
		goto out_xa;
	pme_delay(PME_DP_AFTER_GET_PAGES);
	if (!pme_model(mr->model)->page_size_after_map) {
		/* 5.1-5.4: page_shift from get_page_size before dma_map */
		ps = pme_call_page_size(mr);
		mr->page_size = ps;
		mr->page_shift = is_power_of_2(ps) ? ilog2(ps) : PAGE_SHIFT;
	}
	ret = pme_call_dma_map(mr);
	if (ret)
		goto out_put;
	mr->n_dma_map_ok++;
	sg_ok = pme_check_sgl(mr);
	if (sg_ok)
		pme_probe_track(mr);
	if (sg_ok && pme_model(mr->model)->page_size_after_map) {
		ps = pme_call_page_size(mr);
		mr->page_size = ps;
		mr->page_shift = PAGE_SHIFT;
		if (ps != PAGE_SIZE && is_power_of_2(ps) && ps > PAGE_SIZE)
			pme_trim_sgl(mr, ps);
	} else if (pme_model(mr->model)->page_size_after_map) {
		mr->page_size = pme_call_page_size(mr);
		mr->page_shift = PAGE_SHIFT;
	}
	mr->sgt_seen = mr->sgt;
	mr->sg_hash = pme_sg_hash(&mr->sgt, mr->nmap);
	mr->state = PME_ST_MAPPED;
	atomic64_inc(&c->num_alloc_mrs);
	atomic64_add(mr->nmap, &c->num_reg_pages);
	atomic64_add(mr->len, &c->num_reg_bytes);
	if (!mr->invalidating)
		pme_unlock_mapping(mr);
	pme_delay(PME_DP_AFTER_DMA_MAP);

	/* the HCA driver creates its object; mapping_lock still held */
	if (pme_hw_create_fails(mr) || pme_hold(mr)) {
		pme_mr_fail_after_map(mr);
		return -EIO;
	}
	pme_delay(PME_DP_BEFORE_ACTIVATE);
	if (mr->invalidating) {
		/* ib_umem_activate_invalidation_notifier */
		mr->activated = true;
		pme_unlock_mapping(mr);
	}
	return 0;

out_put:
	/* the table is as dma_map left it: untouched or valid */
	pme_call_put_pages(mr);
out_xa:
	if (mr->xa_id != PME_NO_INVALIDATION_ID)
		xa_erase(&c->umem_xa, mr->xa_id);
out_unlock:
	pme_unlock_mapping(mr);
	pme_release_ctx(mr);
	return ret;
}

/* Account npages in the owner's pinned_vm like ib_umem_get does. */
static int pme_account_memlock(struct pme_mr *mr)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	s64 pinned;

	if (!can_do_mlock())
		return -EPERM;
	mr->mm = current->mm;
	if (!mr->mm)
		return -EFAULT;
	mmgrab(mr->mm);
	pinned = atomic64_add_return(mr->npages, &mr->mm->pinned_vm);
	if (pinned > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(mr->npages, &mr->mm->pinned_vm);
		mr->npages = 0;
		return -ENOMEM;
	}
	return 0;
}

static void pme_unaccount_memlock(struct pme_mr *mr)
{
	if (mr->mm && mr->npages)
		atomic64_sub(mr->npages, &mr->mm->pinned_vm);
	mr->npages = 0;
}

static struct pme_mr *pme_mr_alloc(struct pme_reg *r)
{
	struct pme_mr *mr;

	if (pme_fault(PME_FP_UMEM_ALLOC))
		return NULL;
	mr = kzalloc_obj(*mr);
	if (!mr)
		return NULL;
	kref_init(&mr->ref);
	__mutex_init(&mr->mapping_lock, "peer_mem_emu.mapping_lock",
		     &pme_mapping_lock_key);
	init_completion(&mr->hold_done);
	init_completion(&mr->inval49_done);
	INIT_LIST_HEAD(&mr->ticket_node);
	mr->owner_tgid = task_tgid_nr(current);
	mr->addr = r->addr;
	mr->len = r->length;
	mr->access = r->access;
	mr->peer_flags = r->peer_flags;
	mr->reg_flags = r->flags;
	mr->writable = r->access & PME_ACCESS_LOCAL_WRITE;
	mr->xa_id = PME_NO_INVALIDATION_ID;
	mutex_lock(&pme_cfg_lock);
	mr->model = pme_cfg.model;
	mr->cfg_flags = pme_cfg.flags;
	mutex_unlock(&pme_cfg_lock);
	return mr;
}

/* Undo a failed registration's bookkeeping (before it is committed). */
static void pme_mr_abort(struct pme_file *f, struct pme_mr *mr)
{
	if (mr->handle)
		xa_erase(&f->mrs, mr->handle);
	pme_unaccount_memlock(mr);
	atomic64_dec(&pme_cnt.live_mrs);
	atomic64_inc(&pme_cnt.regs_failed);
	pme_mr_put(mr);
}

int pme_mr_register(struct pme_file *f, struct pme_reg *r)
{
	struct pme_mr *mr;
	long gup_err;
	int ret;

	if (r->access & ~(PME_ACCESS_LOCAL_WRITE | PME_ACCESS_ON_DEMAND) ||
	    r->peer_flags & ~(PME_PEER_ALLOW | PME_PEER_INVAL_SUPP) ||
	    r->flags & ~(PME_REG_HOLD | PME_REG_FAIL_HW | PME_REG_NO_GUP) ||
	    r->device > PME_DEV_NONPCI || r->reserved)
		return -EINVAL;
	if (!r->length || r->addr + r->length < r->addr ||
	    ALIGN(r->addr + r->length, PAGE_SIZE) < r->addr + r->length)
		return -EINVAL;
	if (r->access & PME_ACCESS_ON_DEMAND)
		return -EOPNOTSUPP;
	if (!pme_dma_device(r->device))
		return -ENODEV;

	mr = pme_mr_alloc(r);
	if (!mr)
		return -ENOMEM;
	atomic64_inc(&pme_cnt.live_mrs);
	mr->dma_dev = pme_dma_device(r->device);
	mr->file = f;
	mr->npages = (ALIGN(mr->addr + mr->len, PAGE_SIZE) -
		      ALIGN_DOWN(mr->addr, PAGE_SIZE)) >> PAGE_SHIFT;

	ret = pme_fault(PME_FP_HANDLE_ALLOC);
	if (!ret)
		ret = xa_alloc_cyclic(&f->mrs, &mr->handle, mr, XA_LIMIT(1, INT_MAX),
				      &f->next_handle, GFP_KERNEL);
	if (ret < 0) {
		mr->handle = 0;
		goto fail;
	}
	ret = pme_account_memlock(mr);
	if (ret)
		goto fail;

	gup_err = -EFAULT;
	if (!(r->flags & PME_REG_NO_GUP)) {
		gup_err = pme_pin_host(mr);
		if (!gup_err) {
			mr->state = PME_ST_HOST;
			goto done;
		}
	}
	if (!(mr->peer_flags & PME_IB_PEER_MEM_ALLOW)) {
		ret = gup_err;
		goto fail;
	}
	mr->client = pme_get_peer_client(mr);
	if (!mr->client) {
		ret = gup_err;
		goto fail;
	}
	pme_delay(PME_DP_AFTER_ACQUIRE);
	mr->is_peer = true;
	mr->invalidating = mr->client->invalidating;
	mr->unmaps = mr->client->unmaps &&
		     pme_model(mr->model)->invalidate_unmaps;
	if (pme_fault(PME_FP_PEER_UMEM_ALLOC)) {
		/* the ib_umem_peer allocation failed after acquire */
		pme_release_ctx(mr);
		ret = -ENOMEM;
		goto fail;
	}
	if (pme_model(mr->model)->tickets)
		ret = pme_register_peer_49(mr);
	else
		ret = pme_register_peer_5x(mr);
	if (ret)
		goto fail;
done:
	WRITE_ONCE(mr->committed, true);
	atomic64_inc(&pme_cnt.regs_ok);
	r->handle = mr->handle;
	r->state = mr->state;
	r->core_context = pme_model(mr->model)->tickets ? mr->ticket49 : mr->xa_id;
	/*
	 * Set by the client walk (0 for a host MR, which never walks): taking the global mutex
	 * again here would make every registration wait for the next one's acquire (a cost no real
	 * core has).
	 */
	r->client_index = mr->client_index;
	return 0;
fail:
	pme_mr_abort(f, mr);
	return ret;
}

void pme_mr_query(struct pme_mr *mr, struct pme_query *q)
{
	q->state = READ_ONCE(mr->state);
	q->flags = (mr->is_peer ? PME_QF_PEER : 0) |
		   (READ_ONCE(mr->activated) ? PME_QF_ACTIVATED : 0) |
		   (READ_ONCE(mr->revoked) ? PME_QF_REVOKED : 0) |
		   (READ_ONCE(mr->inval_before_act) ? PME_QF_INVAL_BEFORE_ACT : 0) |
		   (READ_ONCE(mr->trimmed) ? PME_QF_TRIMMED : 0) |
		   (READ_ONCE(mr->held) ? PME_QF_HELD : 0) |
		   (mr->invalidating ? PME_QF_INVALIDATING : 0) |
		   (mr->is_peer && !READ_ONCE(mr->sgt.sgl) ? PME_QF_SG_EMPTY : 0);
	q->nmap = mr->nmap;
	q->core_context = pme_model(mr->model)->tickets ? mr->ticket49 : mr->xa_id;
	q->page_size = mr->page_size;
	q->dma_stopped_ns = READ_ONCE(mr->dma_stopped_ns);
	q->addr = mr->addr;
	q->length = mr->len;
	q->invalidations = READ_ONCE(mr->invalidations);
	q->owner_pid = mr->owner_tgid;
	q->client_index = mr->client_index;
}

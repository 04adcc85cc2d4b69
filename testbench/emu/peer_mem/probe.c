// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_emu: answers nvp2p_emu's "DMA stopped?" probe.  After a client's
 * free callback returns, the provider emulator asks whether any device can
 * still DMA to the DMA mappings it is about to free.  The fake HCA can, if an
 * MR that mapped those DMA addresses is still MAPPED and was not revoked
 * (the client did not invalidate it, or the invalidation was abandoned).
 *
 * No link-time dependency either way: the provider looks this function up
 * with symbol_get() when it needs it (after a free callback), so each module
 * loads and unloads on its own and a registration costs no symbol lookup.
 */
#include <linux/interval_tree_generic.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include "pme.h"
#include "../include/nvp2p_emu.h"

/*
 * One DMA range a live MR mapped, as a node of an interval tree keyed by DMA
 * address: a probe looks up the freed mappings' addresses in O(log n) instead
 * of walking every live MR, so a free of an allocation carrying N MRs costs
 * the probe O(N log n), not O(N * n) (issue 38's invalidation series).
 */
struct pme_range {
	struct rb_node rb;
	u64 start, last;	/* inclusive */
	u64 subtree_last;
	struct pme_mr *mr;
};

#define PME_RANGE_START(r) ((r)->start)
#define PME_RANGE_LAST(r) ((r)->last)
INTERVAL_TREE_DEFINE(struct pme_range, rb, u64, subtree_last, PME_RANGE_START,
		     PME_RANGE_LAST, static, pme_range_tree)

static DEFINE_SPINLOCK(pme_live_lock);
static struct rb_root_cached pme_live_ranges = RB_ROOT_CACHED;

/* Record the DMA ranges the client mapped (untrimmed). */
void pme_probe_track(struct pme_mr *mr)
{
	struct scatterlist *sg;
	u32 i, n = 0;

	mr->ranges = kmalloc_array(mr->nmap, sizeof(*mr->ranges), GFP_KERNEL);
	if (!mr->ranges)
		return;	/* this MR is then not judged by the probe */
	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i) {
		if (!sg_dma_len(sg))
			continue;	/* maps nothing */
		mr->ranges[n].start = sg_dma_address(sg);
		mr->ranges[n].last = sg_dma_address(sg) + sg_dma_len(sg) - 1;
		mr->ranges[n].mr = mr;
		n++;
	}
	mr->nranges = n;
	spin_lock(&pme_live_lock);
	for (i = 0; i < n; i++)
		pme_range_tree_insert(&mr->ranges[i], &pme_live_ranges);
	spin_unlock(&pme_live_lock);
}

void pme_probe_untrack(struct pme_mr *mr)
{
	u32 i;

	if (!mr->ranges)
		return;
	spin_lock(&pme_live_lock);
	for (i = 0; i < mr->nranges; i++)
		pme_range_tree_remove(&mr->ranges[i], &pme_live_ranges);
	spin_unlock(&pme_live_lock);
	kfree(mr->ranges);
	mr->ranges = NULL;
	mr->nranges = 0;
}

static u64 pme_nv_page_size(u32 type)
{
	switch (type) {
	case NVIDIA_P2P_PAGE_SIZE_4KB:
		return 4096;
	case NVIDIA_P2P_PAGE_SIZE_128KB:
		return 128 * 1024;
	default:
		return 64 * 1024;
	}
}

/*
 * Whether the fake HCA can still DMA through @mr: it is MAPPED and was not
 * revoked. OFED 4.x: an invalidation before activation only marks the umem;
 * activation then fails and the core tears the MR down. Its key never
 * reaches a user, so no work request can make the device DMA through it: the
 * core's window, not the client's.
 */
static bool pme_mr_can_dma(const struct pme_mr *mr)
{
	return READ_ONCE(mr->state) == PME_ST_MAPPED && !READ_ONCE(mr->revoked) &&
	       !READ_ONCE(mr->inval_before_act);
}

/* A live MR that can DMA into one of @m's pages, or NULL; pme_live_lock held. */
static const struct pme_mr *pme_live_hit(const struct nvidia_p2p_dma_mapping *m)
{
	u64 ps = pme_nv_page_size(m->page_size_type);
	struct pme_range *r;
	u32 e;

	for (e = 0; e < m->entries; e++) {
		u64 a = m->dma_addresses[e];

		for (r = pme_range_tree_iter_first(&pme_live_ranges, a, a + ps - 1); r;
		     r = pme_range_tree_iter_next(r, a, a + ps - 1)) {
			if (pme_mr_can_dma(r->mr))
				return r->mr;
		}
	}
	return NULL;
}

/* The provider calls this after each free callback (nvp2p_emu.h). */
bool peer_mem_emu_dma_stopped(const struct nvp2p_emu_revoke_info *info)
{
	const struct pme_mr *mr = NULL;
	unsigned int i;

	spin_lock(&pme_live_lock);
	for (i = 0; i < info->nr_mappings && !mr; i++) {
		if (info->mappings[i])
			mr = pme_live_hit(info->mappings[i]);
	}
	if (mr)
		pr_err("peer_mem_emu: MR %u of client %s still maps GPU range 0x%llx+0x%llx freed by pid %d: the fake HCA was not revoked\n",
		       mr->handle, mr->client->name, info->va, info->len, info->tgid);
	spin_unlock(&pme_live_lock);
	return !mr;
}
EXPORT_SYMBOL_GPL(peer_mem_emu_dma_stopped);

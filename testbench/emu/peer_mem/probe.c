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
#include <linux/minmax.h>
#include <linux/module.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include "pme.h"
#include "../include/nvp2p_emu.h"

/*
 * The live MRs indexed by the span of their DMA ranges (lowest to highest
 * address), one node per MR: a probe finds the MRs whose span covers a freed
 * page in O(log n) and checks only those MRs' ranges, so a free of an
 * allocation carrying N MRs costs the probe O(N log n), not O(N * n) (issue
 * 38's invalidation series), and a registration one insertion, not one per
 * SG entry (16384 for 1 GiB of 64 KiB pages). The node lives in the ranges'
 * allocation, not in struct pme_mr, whose size class every core-path
 * registration pays (issue 38's memory figures).
 */
struct pme_probe_rec {
	struct rb_node rb;
	u64 start, last, subtree_last;	/* the span of @ranges, inclusive */
	struct pme_mr *mr;
	u32 n;
	struct { u64 start, last; } ranges[];	/* inclusive */
};

#define PME_SPAN_START(rec) ((rec)->start)
#define PME_SPAN_LAST(rec) ((rec)->last)
INTERVAL_TREE_DEFINE(struct pme_probe_rec, rb, u64, subtree_last, PME_SPAN_START,
		     PME_SPAN_LAST, static, pme_span_tree)

static DEFINE_SPINLOCK(pme_live_lock);
static struct rb_root_cached pme_live_spans = RB_ROOT_CACHED;

/* Record the DMA ranges the client mapped (untrimmed). */
void pme_probe_track(struct pme_mr *mr)
{
	struct pme_probe_rec *rec;
	struct scatterlist *sg;
	u32 i, n = 0;

	rec = kmalloc(struct_size(rec, ranges, mr->nmap), GFP_KERNEL);
	if (!rec)
		return;	/* this MR is then not judged by the probe */
	rec->mr = mr;
	rec->start = U64_MAX;
	rec->last = 0;
	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i) {
		if (!sg_dma_len(sg))
			continue;	/* maps nothing */
		rec->ranges[n].start = sg_dma_address(sg);
		rec->ranges[n].last = sg_dma_address(sg) + sg_dma_len(sg) - 1;
		rec->start = min(rec->start, rec->ranges[n].start);
		rec->last = max(rec->last, rec->ranges[n].last);
		n++;
	}
	rec->n = n;
	if (!n) {
		/* Nothing mapped: nothing for the probe to find. */
		kfree(rec);
		return;
	}
	mr->probe = rec;
	spin_lock(&pme_live_lock);
	pme_span_tree_insert(rec, &pme_live_spans);
	spin_unlock(&pme_live_lock);
}

void pme_probe_untrack(struct pme_mr *mr)
{
	struct pme_probe_rec *rec = mr->probe;

	if (!rec)
		return;
	spin_lock(&pme_live_lock);
	pme_span_tree_remove(rec, &pme_live_spans);
	spin_unlock(&pme_live_lock);
	mr->probe = NULL;
	kfree(rec);
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

/* Whether one of @rec's DMA ranges overlaps [@first, @last]. */
static bool pme_rec_maps(const struct pme_probe_rec *rec, u64 first, u64 last)
{
	u32 r;

	for (r = 0; r < rec->n; r++) {
		if (rec->ranges[r].start <= last && first <= rec->ranges[r].last)
			return true;
	}
	return false;
}

/* A live MR that can DMA into one of @m's pages, or NULL; pme_live_lock held. */
static const struct pme_mr *pme_live_hit(const struct nvidia_p2p_dma_mapping *m)
{
	u64 ps = pme_nv_page_size(m->page_size_type);
	struct pme_probe_rec *rec;
	u32 e;

	for (e = 0; e < m->entries; e++) {
		u64 a = m->dma_addresses[e];

		for (rec = pme_span_tree_iter_first(&pme_live_spans, a, a + ps - 1); rec;
		     rec = pme_span_tree_iter_next(rec, a, a + ps - 1)) {
			if (pme_mr_can_dma(rec->mr) && pme_rec_maps(rec, a, a + ps - 1))
				return rec->mr;
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

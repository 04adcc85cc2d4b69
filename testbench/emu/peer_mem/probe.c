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
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include "pme.h"
#include "../include/nvp2p_emu.h"

static DEFINE_SPINLOCK(pme_live_lock);
static LIST_HEAD(pme_live_mrs);		/* peer MRs with recorded DMA ranges */

/* Record the DMA ranges the client mapped (untrimmed). */
void pme_probe_track(struct pme_mr *mr)
{
	struct scatterlist *sg;
	u32 i;

	mr->ranges = kmalloc_array(mr->nmap, sizeof(*mr->ranges), GFP_KERNEL);
	if (!mr->ranges)
		return;	/* this MR is then not judged by the probe */
	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i) {
		mr->ranges[i].addr = sg_dma_address(sg);
		mr->ranges[i].len = sg_dma_len(sg);
	}
	mr->nranges = mr->nmap;
	spin_lock(&pme_live_lock);
	list_add_tail(&mr->live_node, &pme_live_mrs);
	spin_unlock(&pme_live_lock);
}

void pme_probe_untrack(struct pme_mr *mr)
{
	if (!mr->ranges)
		return;
	spin_lock(&pme_live_lock);
	list_del(&mr->live_node);
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

static bool pme_mr_hits(const struct pme_mr *mr, const struct nvidia_p2p_dma_mapping *m)
{
	u64 ps = pme_nv_page_size(m->page_size_type);
	u32 e, r;

	for (e = 0; e < m->entries; e++) {
		u64 a = m->dma_addresses[e];

		for (r = 0; r < mr->nranges; r++) {
			if (a < mr->ranges[r].addr + mr->ranges[r].len &&
			    mr->ranges[r].addr < a + ps)
				return true;
		}
	}
	return false;
}

/* The provider calls this after each free callback (nvp2p_emu.h). */
bool peer_mem_emu_dma_stopped(const struct nvp2p_emu_revoke_info *info)
{
	const struct pme_mr *mr;
	bool stopped = true;
	unsigned int i;

	spin_lock(&pme_live_lock);
	list_for_each_entry(mr, &pme_live_mrs, live_node) {
		if (READ_ONCE(mr->state) != PME_ST_MAPPED || READ_ONCE(mr->revoked))
			continue;
		/*
		 * OFED 4.x: an invalidation before activation only marks the umem; activation then
		 * fails and the core tears the MR down. Its key never reaches a user, so no work
		 * request can make the device DMA through it: the core's window, not the client's.
		 */
		if (READ_ONCE(mr->inval_before_act))
			continue;
		for (i = 0; i < info->nr_mappings && stopped; i++) {
			if (info->mappings[i] && pme_mr_hits(mr, info->mappings[i])) {
				pr_err("peer_mem_emu: MR %u of client %s still maps GPU range 0x%llx+0x%llx freed by pid %d: the fake HCA was not revoked\n",
				       mr->handle, mr->client->name, info->va, info->len,
				       info->tgid);
				stopped = false;
			}
		}
		if (!stopped)
			break;
	}
	spin_unlock(&pme_live_lock);
	return stopped;
}
EXPORT_SYMBOL_GPL(peer_mem_emu_dma_stopped);

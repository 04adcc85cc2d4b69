// SPDX-License-Identifier: GPL-2.0
/*
 * pme_selftest: a minimal, correct memory-claiming peer client, so that the
 * core emulator's MR path can be tested without the NVIDIA emulator.
 *
 * /dev/pme_selftest_mem: mmap() of a multiple of 64 KiB (at most 4 MiB)
 * gives the caller "device memory": 64 KiB blocks of real pages mapped
 * VM_IO | VM_PFNMAP, so pin_user_pages fails on them and the core offers the
 * range to peer clients.  The client (token "mem") claims ranges inside such
 * mappings of the calling process, emits 64 KiB granules (get_page_size =
 * 64 KiB) mapped with dma_map_page for the core's dma_device, frees the
 * sg_table in put_pages (header rule) or in release (after an invalidation
 * under INVALIDATE_UNMAPS, when the core never calls put_pages).
 *
 * Writing anything to /sys/module/pme_selftest/parameters/invalidate_all
 * plays the provider's "memory freed" event: every live context of an
 * invalidating client is invalidated through the core (then, for an
 * INVALIDATE_UNMAPS client, unmapped by the client itself).
 */
#include <linux/module.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/slab.h>
#include <linux/kref.h>
#include <linux/dma-mapping.h>
#include <linux/sched.h>
#include "st.h"

#define ST_GRAN (64 * 1024)
#define ST_ORDER get_order(ST_GRAN)
#define ST_MAX_MAP (4u << 20)

struct st_region {
	struct kref ref;
	struct list_head node;
	pid_t tgid;
	unsigned long start, len;
	unsigned int nblocks;
	struct page **blocks;
};

struct st_ctx {
	struct kref ref;
	struct list_head node;
	struct st_region *region;
	unsigned long start, end;	/* 64 KiB aligned */
	u64 core_context;
	struct device *dev;
	struct mutex lock;		/* mapped, sg: never held across core calls */
	struct sg_table sg;		/* copy of the table given to the core */
	/*
	 * The DMA addresses as mapped: the core trims the first and last sg
	 * entries to the registered range (and restores them only before its
	 * own dma_unmap call), so unmapping from the sg table after an
	 * invalidate would unmap other ranges than were mapped.
	 */
	dma_addr_t *dma;
	unsigned int ndma;
	bool sg_allocated, mapped, pinned;
};

struct st_client *st_mem_client;
static DEFINE_MUTEX(st_lock);	/* regions and ctxs lists; never held across core calls */
static LIST_HEAD(st_regions);
static LIST_HEAD(st_ctxs);

static void st_region_free(struct kref *ref)
{
	struct st_region *r = container_of(ref, struct st_region, ref);
	unsigned int i;

	for (i = 0; i < r->nblocks; i++)
		if (r->blocks[i])
			__free_pages(r->blocks[i], ST_ORDER);
	kfree(r->blocks);
	kfree(r);
}

static void st_ctx_free(struct kref *ref)
{
	struct st_ctx *ctx = container_of(ref, struct st_ctx, ref);

	kfree(ctx->dma);	/* NULL unless the core never unmapped */
	kfree(ctx);
}

/* ---- the device memory ---- */

static void st_vma_close(struct vm_area_struct *vma)
{
	struct st_region *r = vma->vm_private_data;

	mutex_lock(&st_lock);
	list_del(&r->node);
	mutex_unlock(&st_lock);
	kref_put(&r->ref, st_region_free);
}

static const struct vm_operations_struct st_vm_ops = {
	.close = st_vma_close,
};

static int st_mmap(struct file *filp, struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	struct st_region *r;
	unsigned int i;
	int ret;

	if (!len || len > ST_MAX_MAP || len % ST_GRAN || vma->vm_pgoff)
		return -EINVAL;
	r = kzalloc_obj(*r);
	if (!r)
		return -ENOMEM;
	kref_init(&r->ref);
	r->tgid = task_tgid_nr(current);
	r->start = vma->vm_start;
	r->len = len;
	r->nblocks = len / ST_GRAN;
	r->blocks = kcalloc(r->nblocks, sizeof(*r->blocks), GFP_KERNEL);
	ret = -ENOMEM;
	if (!r->blocks)
		goto err;
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	for (i = 0; i < r->nblocks; i++) {
		r->blocks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO, ST_ORDER);
		if (!r->blocks[i])
			goto err;
		ret = remap_pfn_range(vma, vma->vm_start + i * ST_GRAN,
				      page_to_pfn(r->blocks[i]), ST_GRAN,
				      vma->vm_page_prot);
		if (ret)
			goto err;
	}
	vma->vm_private_data = r;
	vma->vm_ops = &st_vm_ops;
	mutex_lock(&st_lock);
	list_add(&r->node, &st_regions);
	mutex_unlock(&st_lock);
	return 0;
err:
	kref_put(&r->ref, st_region_free);
	return ret;
}

/* Device memory is 64 KiB aligned in the VA space, like cudaMalloc's. */
static unsigned long st_get_area(struct file *filp, unsigned long addr,
				 unsigned long len, unsigned long pgoff,
				 unsigned long flags)
{
	unsigned long base;

	if (flags & MAP_FIXED)
		return IS_ALIGNED(addr, ST_GRAN) ? addr : -EINVAL;
	if (len > ST_MAX_MAP)
		return -ENOMEM;
	base = mm_get_unmapped_area(NULL, 0, len + ST_GRAN, 0, flags);
	if (IS_ERR_VALUE(base))
		return base;
	return ALIGN(base, ST_GRAN);
}

static const struct file_operations st_mem_fops = {
	.owner = THIS_MODULE,
	.mmap = st_mmap,
	.get_unmapped_area = st_get_area,
};

static struct miscdevice st_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "pme_selftest_mem",
	.fops = &st_mem_fops,
	.mode = 0666,
};

/* ---- the client ---- */

static int st_m_acquire(unsigned long addr, size_t size, void *priv, char *name,
			void **client_context)
{
	pid_t tgid = task_tgid_nr(current);
	struct st_region *r, *found = NULL;
	struct st_ctx *ctx;

	mutex_lock(&st_lock);
	list_for_each_entry(r, &st_regions, node) {
		if (r->tgid == tgid && addr >= r->start && size <= r->len &&
		    addr - r->start <= r->len - size) {
			found = r;
			kref_get(&r->ref);
			break;
		}
	}
	mutex_unlock(&st_lock);
	if (!found)
		return 0;
	ctx = kzalloc_obj(*ctx);
	if (!ctx) {
		kref_put(&found->ref, st_region_free);
		return 0;
	}
	kref_init(&ctx->ref);
	mutex_init(&ctx->lock);
	ctx->region = found;
	ctx->start = ALIGN_DOWN(addr, ST_GRAN);
	ctx->end = ALIGN(addr + size, ST_GRAN);
	mutex_lock(&st_lock);
	list_add(&ctx->node, &st_ctxs);
	mutex_unlock(&st_lock);
	*client_context = ctx;
	return 1;
}

static int st_m_get_pages(unsigned long addr, size_t size, int write, int force,
			  struct sg_table *sg, void *client_context, u64 core_context)
{
	struct st_ctx *ctx = client_context;

	ctx->core_context = core_context;
	ctx->pinned = true;
	return 0;
}

static void st_unmap_pages(struct st_ctx *ctx)
{
	unsigned int i;

	mutex_lock(&ctx->lock);
	if (ctx->mapped) {
		for (i = 0; i < ctx->ndma; i++)
			dma_unmap_page(ctx->dev, ctx->dma[i], ST_GRAN,
				       DMA_BIDIRECTIONAL);
		kfree(ctx->dma);
		ctx->dma = NULL;
		ctx->ndma = 0;
		ctx->mapped = false;
	}
	mutex_unlock(&ctx->lock);
}

static int st_m_dma_map(struct sg_table *sg_head, void *client_context,
			struct device *dev, int dmasync, int *nmap)
{
	struct st_ctx *ctx = client_context;
	unsigned int n = (ctx->end - ctx->start) / ST_GRAN, first, i;
	struct scatterlist *sg;
	dma_addr_t *dma;
	int ret;

	dma = kcalloc(n, sizeof(*dma), GFP_KERNEL);
	if (!dma)
		return -ENOMEM;
	ret = sg_alloc_table(sg_head, n, GFP_KERNEL);
	if (ret) {
		kfree(dma);
		return ret;
	}
	first = (ctx->start - ctx->region->start) / ST_GRAN;
	for_each_sg(sg_head->sgl, sg, n, i) {
		struct page *page = ctx->region->blocks[first + i];
		dma_addr_t a = dma_map_page(dev, page, 0, ST_GRAN, DMA_BIDIRECTIONAL);

		if (dma_mapping_error(dev, a)) {
			struct scatterlist *u;
			unsigned int j;

			for_each_sg(sg_head->sgl, u, i, j)
				dma_unmap_page(dev, sg_dma_address(u), ST_GRAN,
					       DMA_BIDIRECTIONAL);
			sg_free_table(sg_head);
			kfree(dma);
			return -ENOMEM;
		}
		sg_set_page(sg, page, ST_GRAN, 0);
		sg_dma_address(sg) = a;
		sg_dma_len(sg) = ST_GRAN;
		dma[i] = a;
	}
	mutex_lock(&ctx->lock);
	ctx->dma = dma;
	ctx->ndma = n;
	ctx->dev = dev;
	ctx->sg = *sg_head;
	ctx->sg_allocated = true;
	ctx->mapped = true;
	mutex_unlock(&ctx->lock);
	*nmap = n;
	return 0;
}

static int st_m_dma_unmap(struct sg_table *sg_head, void *client_context,
			  struct device *dev)
{
	st_unmap_pages(client_context);
	return 0;
}

static void st_m_put_pages(struct sg_table *sg_head, void *client_context)
{
	struct st_ctx *ctx = client_context;

	mutex_lock(&ctx->lock);
	if (ctx->sg_allocated && sg_head && sg_head->sgl == ctx->sg.sgl) {
		sg_free_table(sg_head);
		ctx->sg_allocated = false;
	}
	ctx->pinned = false;
	mutex_unlock(&ctx->lock);
}

static unsigned long st_m_page_size(void *client_context)
{
	return ST_GRAN;
}

static void st_m_release(void *client_context)
{
	struct st_ctx *ctx = client_context;

	st_unmap_pages(ctx);
	mutex_lock(&ctx->lock);
	if (ctx->sg_allocated) {
		sg_free_table(&ctx->sg);
		ctx->sg_allocated = false;
	}
	mutex_unlock(&ctx->lock);
	mutex_lock(&st_lock);
	list_del_init(&ctx->node);
	mutex_unlock(&st_lock);
	kref_put(&ctx->region->ref, st_region_free);
	kref_put(&ctx->ref, st_ctx_free);
}

void st_mem_ops(struct peer_memory_client *p)
{
	p->acquire = st_m_acquire;
	p->get_pages = st_m_get_pages;
	p->dma_map = st_m_dma_map;
	p->dma_unmap = st_m_dma_unmap;
	p->put_pages = st_m_put_pages;
	p->get_page_size = st_m_page_size;
	p->release = st_m_release;
}

/* "The memory was freed": invalidate every live context. */
static int st_invalidate_all(const char *val, const struct kernel_param *kp)
{
	struct st_client *c = st_mem_client;
	struct st_ctx *ctx, **list;
	unsigned int n = 0, i;

	if (!c || !c->invalidating)
		return -ENODEV;
	mutex_lock(&st_lock);
	list_for_each_entry(ctx, &st_ctxs, node)
		n++;
	list = kcalloc(n ?: 1, sizeof(*list), GFP_KERNEL);
	if (!list) {
		mutex_unlock(&st_lock);
		return -ENOMEM;
	}
	n = 0;
	list_for_each_entry(ctx, &st_ctxs, node) {
		if (!ctx->pinned)
			continue;
		kref_get(&ctx->ref);
		list[n++] = ctx;
	}
	mutex_unlock(&st_lock);
	for (i = 0; i < n; i++) {
		c->inv(c->handle, list[i]->core_context);
		/*
		 * INVALIDATE_UNMAPS: the core will not unmap; do it now.  (A
		 * legacy core already called dma_unmap; a 4.9 core even
		 * released the context, which our reference keeps alive.)
		 */
		st_unmap_pages(list[i]);
		kref_put(&list[i]->ref, st_ctx_free);
	}
	kfree(list);
	return 0;
}

static const struct kernel_param_ops st_inv_ops = {
	.set = st_invalidate_all,
	.get = NULL,
};
module_param_cb(invalidate_all, &st_inv_ops, NULL, 0200);
MODULE_PARM_DESC(invalidate_all, "write: invalidate every live context of the mem client");

int st_mem_init(void)
{
	return misc_register(&st_misc);
}

void st_mem_exit(void)
{
	misc_deregister(&st_misc);
}
